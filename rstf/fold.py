"""Constant folding: evaluate, at optimize time, every node whose inputs are all constants.

Grappler does the same inside TensorFlow at run time; doing it here keeps such nodes (a
batch norm's `rsqrt(variance + eps) * gamma`, a Reshape of a weight, the Identity reading a
frozen variable) out of the generated code, so custom ops compute only what depends on the
model's inputs. Folding is done by TensorFlow itself (one Session run for all of them), so
the folded values are exactly what TF would compute.

Contract: `fold_constants(graph_def, keep)` returns (new GraphDef, names of folded nodes).
A folded node keeps its name and becomes a Const; nodes that only fed folded nodes are
dropped; nodes named in `keep` (the model's outputs) and Placeholders are never removed.
Stateful ops, multi-output nodes and results over `max_bytes` are left alone.
"""
from __future__ import annotations

from .graph import input_node
from .tfutil import tf

MAX_FOLDED_BYTES = 64 << 20  # a folded value larger than this stays a computation
_NEVER_FOLD = {"Placeholder", "PlaceholderWithDefault", "NoOp", "Const"}


def _is_stateful(op_type: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def fold_constants(graph_def, keep: list[str], max_bytes: int = MAX_FOLDED_BYTES):
    nodes = {n.name: n for n in graph_def.node}
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")

    # Foldable: every input (data and control) is a Const or foldable, the op is pure.
    const = {n.name for n in graph_def.node if n.op == "Const"}
    foldable: set[str] = set()
    order = _topo(graph_def)
    for name in order:
        n = nodes[name]
        if n.op in _NEVER_FOLD or _is_stateful(n.op):
            continue
        if len(g.get_operation_by_name(name).outputs) != 1:
            continue
        srcs = [input_node(t) for t in n.input]
        if srcs and all(s in const or s in foldable for s in srcs):
            foldable.add(name)
    if not foldable:
        return graph_def, []

    consumers: dict[str, set[str]] = {name: set() for name in nodes}
    for n in graph_def.node:
        for t in n.input:
            consumers[input_node(t)].add(n.name)
    # Only values read by something that stays (or returned) need computing.
    frontier = [name for name in order if name in foldable
                and (name in keep or any(c not in foldable for c in consumers[name]))]
    values = {}
    if frontier:
        with tf.compat.v1.Session(graph=g) as sess:
            fetched = sess.run([g.get_tensor_by_name(f"{n}:0") for n in frontier])
        values = {n: v for n, v in zip(frontier, fetched) if v.nbytes <= max_bytes}

    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    live = _live_nodes(graph_def, set(values), keep, consumers)
    for n in graph_def.node:
        if n.name not in live:
            continue
        if n.name in values:
            c = out.node.add()
            c.name = n.name
            c.op = "Const"
            c.device = n.device
            val = values[n.name]
            c.attr["dtype"].type = tf.as_dtype(val.dtype).as_datatype_enum
            c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(val))
        else:
            out.node.add().CopyFrom(n)
    folded = sorted(values)
    return out, folded


def _live_nodes(graph_def, now_const: set[str], keep, consumers) -> set[str]:
    """Nodes still needed once `now_const` nodes no longer read their inputs.

    A node is dropped only if it is not kept, not a Placeholder, and every consumer it had is
    itself dropped or became a constant (a constant no longer reads anything).
    """
    nodes = {n.name: n for n in graph_def.node}
    needed = set(keep) | {n.name for n in graph_def.node if n.op.startswith("Placeholder")}
    # Walk backwards from every node that is not dead: a reverse reachability from roots.
    roots = [n for n in nodes if n in needed or not consumers[n]]
    live, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        if name in now_const:
            continue  # its inputs are no longer read
        for t in nodes[name].input:
            stack.append(input_node(t))
    return live


def _topo(graph_def) -> list[str]:
    indeg, users = {}, {}
    for n in graph_def.node:
        indeg.setdefault(n.name, 0)
        users.setdefault(n.name, [])
    for n in graph_def.node:
        for t in n.input:
            src = input_node(t)
            indeg[n.name] += 1
            users[src].append(n.name)
    ready = [n.name for n in graph_def.node if indeg[n.name] == 0]
    order = []
    while ready:
        name = ready.pop()
        order.append(name)
        for u in users[name]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    return order
