"""Constant folding: evaluate, at optimize time, every node whose inputs are all constants.

Grappler does the same inside TensorFlow at run time; doing it here keeps such nodes (a
batch norm's `rsqrt(variance + eps) * gamma`, a Reshape of a weight, the Identity reading a
frozen variable) out of the generated code, so custom ops compute only what depends on the
model's inputs. Folding is done by TensorFlow itself (one Session run for all of them), so
the folded values are exactly what TF would compute.

Contract: `fold_constants(graph_def, keep, max_bytes, budget_bytes)` returns (new GraphDef,
names of folded nodes). A folded node keeps its name and becomes a Const; nodes that only fed
folded nodes are dropped; nodes named in `keep` (the model's outputs) and Placeholders are
never removed. Stateful ops and multi-output nodes are left alone.

Sizes are decided before anything runs, from TensorFlow's static shape inference (which
evaluates constant shape inputs such as Fill's dims): a few hundred bytes of GraphDef can
describe a terabyte-sized constant, and computing first would let such a graph exhaust the
machine's memory. So a node folds only if its output shape is fully defined, its dtype is
numeric, its value is at most `max_bytes`, and its inputs are Consts or folded nodes; any
other node stays a computation, and so do the nodes computed from it. Every value the
Session run produces, frontier or intermediate, is therefore bounded, and so is the total:
in topological order each folded node charges its bytes to `budget_bytes`, as does the first
folded reader of a Const whose value is larger than its serialized form (a splat such as
`float_val: 1` over a large shape, which TF materializes when it runs); nodes that no
longer fit stay computations. The default budget is `FOLD_BUDGET_BYTES` plus the serialized
bytes of the graph's own Consts, so a frozen model whose weights pass through Identity
still folds.

An error TensorFlow raises while importing the graph or computing the folded values becomes a
one-line `RstfError` naming the node.
"""
from __future__ import annotations

import re

from ..errors import RstfError
from .names import input_node
from .tfutil import tf

MAX_FOLDED_BYTES = 64 << 20  # a folded value larger than this stays a computation
FOLD_BUDGET_BYTES = 1 << 30  # all folded values together, beyond the graph's own Consts
_NEVER_FOLD = {"Placeholder", "PlaceholderWithDefault", "NoOp", "Const"}


def is_stateful(op_type: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def _static_bytes(t) -> int | None:
    """Bytes of tensor `t`'s value from its static shape and dtype; None if the shape is not
    fully defined or the dtype has no fixed element size (string, variant, resource)."""
    dt = t.dtype
    if dt == tf.string or not dt.is_numpy_compatible or not dt.size:
        return None
    dims = t.shape.as_list() if t.shape.rank is not None else None
    if dims is None or any(d is None for d in dims):
        return None
    size = dt.size
    for d in dims:
        size *= int(d)  # Python ints: dims near 2**31 overflow a fixed-width product
    return size


def _const_costs(graph_def, g) -> tuple[dict[str, int], int]:
    """({Const name: bytes its value takes beyond its serialized form}, serialized bytes of
    all Consts). The extra bytes are what TF allocates when it materializes the Const."""
    costs, stored = {}, 0
    for n in graph_def.node:
        if n.op != "Const":
            continue
        serialized = n.attr["value"].tensor.ByteSize()
        stored += serialized
        outputs = g.get_operation_by_name(n.name).outputs
        value = _static_bytes(outputs[0]) if len(outputs) == 1 else None
        costs[n.name] = max(0, (value or 0) - serialized)
    return costs, stored


def fold_constants(graph_def, keep: list[str], max_bytes: int = MAX_FOLDED_BYTES,
                   budget_bytes: int | None = None):
    """(new GraphDef, folded node names); see the module docstring. `budget_bytes` None:
    FOLD_BUDGET_BYTES plus the serialized bytes of the graph's Consts."""
    nodes = {n.name: n for n in graph_def.node}
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception as e:  # ValueError / InvalidArgumentError / NotFoundError for unknown ops
        raise RstfError(f"constant folding: TensorFlow cannot import the graph "
                        f"({_tf_message(e)})") from None

    const_cost, stored = _const_costs(graph_def, g)
    budget = FOLD_BUDGET_BYTES + stored if budget_bytes is None else budget_bytes
    # A Const whose materializing adds more than `max_bytes` is like a node over the limit.
    const = {name for name, cost in const_cost.items() if cost <= max_bytes}
    foldable: set[str] = set()
    charged: set[str] = set()  # Consts whose materialized bytes are already charged
    spent = 0
    order = topo_order(graph_def)
    for name in order:
        n = nodes[name]
        if n.op in _NEVER_FOLD or is_stateful(n.op):
            continue
        outputs = g.get_operation_by_name(name).outputs
        if len(outputs) != 1:
            continue
        srcs = {input_node(t) for t in n.input}  # data and control inputs
        if not srcs or not all(s in const or s in foldable for s in srcs):
            continue
        size = _static_bytes(outputs[0])
        if size is None or size > max_bytes:
            continue
        new_consts = {s for s in srcs if s in const and s not in charged}
        cost = size + sum(const_cost[s] for s in new_consts)
        if spent + cost > budget:
            continue
        spent += cost
        charged |= new_consts
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
        values = dict(zip(frontier, _run(g, frontier)))

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


def _run(g, names: list[str]) -> list:
    """The values of single-output nodes `names` of `g`, in one Session run; an error TF
    raises there becomes a one-line RstfError naming the failing node."""
    try:
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run([g.get_tensor_by_name(f"{n}:0") for n in names])
    except tf.errors.OpError as e:
        op = e.op
        where = f"node {op.name!r} ({op.type})" if op is not None else "TensorFlow"
        raise RstfError(f"constant folding: {where}: {_tf_message(e)}") from None


_NODE_TAG = re.compile(r"\s*\[\[\{\{node [^}]*\}\}\]\]")
_FRAME_LINES = ("Graph execution error", "Detected at node", "File ", "Node: ")


def _tf_message(e: BaseException) -> str:
    """The first line of what TF says went wrong, without the header, the Python stack of
    where the node was defined and the `[[{{node ...}}]]` tag that session errors add."""
    text = str(getattr(e, "message", None) or e).split("Original stack trace")[0]
    for line in text.splitlines():
        line = _NODE_TAG.sub("", line).strip()
        if line and not line.startswith(_FRAME_LINES):
            return line[:300]
    return type(e).__name__


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


def topo_order(graph_def) -> list[str]:
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
