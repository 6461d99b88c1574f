"""Shape arithmetic over a dynamic batch, made constant.

A Keras model traced with an unknown batch computes some shapes at run time. `Dense` over
[?, S, K] (a transformer's feed-forward layers) freezes to `Tensordot`: a Reshape of x to
Pack(Prod(GatherV2(Shape(x), [0, 1])), K), a MatMul, and a Reshape back to
ConcatV2(GatherV2(Shape(x), [0, 1]), [N]). A position embedding broadcasts to
Pack(StridedSlice(Shape(ids))[0], S, H). TensorFlow's shape inference loses the batch axis
through that arithmetic ([?, ?, N]), so no later pass can see that the result still leads
with the batch: the dense layers could not be merged into contractions, nor run per sample
(rstf/cgen/batch.py), and were left to TensorFlow.

This pass finds the integer tensors computed from Consts and from tensors' shapes alone
(Shape, Size, Rank: the "shape arithmetic"), and evaluates the ones that something else reads
with every dynamic-batch input pinned to each of `SIZES` in turn (TensorFlow's shape
inference gives the shapes, a Session the arithmetic, so the values are TF's own). Then:

- a value that is the same at every size becomes a Const under its own name;
- a Reshape's shape that is the same at every size except one entry, which is k times the
  batch, is read from a new Const with -1 at that entry. TensorFlow resolves -1 from the
  element count, so the result is the same wherever the computed shape was valid;
- BroadcastTo(c, s) whose every reader is a broadcasting binary op (AddV2, Mul, ...) whose
  other operand has shape s at every size is bypassed: the op broadcasts c to the same
  result itself;
- the shape arithmetic and the BroadcastTos that nothing reads any more are removed.

Several sizes, not one, are what show that an entry is proportional to the batch and that
the others do not depend on it. A value that cannot be evaluated (a shape TF does not know
at a pinned size, an error) is left as it was: the graph stays correct, only less is
optimized.

Contract: `constant_batch_shapes(graph_def, keep)` returns (a new GraphDef, names of the nodes
rewritten). A graph without a dynamic-batch input (a Placeholder whose dimension 0 alone is
unknown) is returned as it is. The input GraphDef is not changed.
"""
from __future__ import annotations

import numpy as np

from .fold import is_stateful, topo_order
from .names import fresh_name, input_node, split_tensor, unread_nodes, working_copy
from .shapes import infer_shapes
from .tfutil import tf

SIZES = (2, 3, 5)
SHAPE_OPS = {"Shape", "Size", "Rank"}
BROADCASTING = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum",
                "SquaredDifference"}
_INT = (np.dtype(np.int32), np.dtype(np.int64))
_FLOAT_ENUMS = {tf.float16.as_datatype_enum, tf.bfloat16.as_datatype_enum,
                tf.float32.as_datatype_enum, tf.float64.as_datatype_enum}


def dynamic_batch_inputs(graph_def) -> dict[str, list]:
    """{Placeholder name: its dims} for each Placeholder whose dimension 0 alone is unknown."""
    out = {}
    for n in graph_def.node:
        if n.op != "Placeholder":
            continue
        s = tf.TensorShape(n.attr["shape"].shape)
        dims = s.as_list() if s.rank else None
        if dims and dims[0] is None and None not in dims[1:]:
            out[n.name] = dims
    return out


def constant_batch_shapes(graph_def, keep) -> tuple[object, list[str]]:
    dynamic = dynamic_batch_inputs(graph_def)
    if not dynamic:
        return graph_def, []
    info = infer_shapes(_shapes_only(graph_def))
    pure = _shape_arithmetic(graph_def, info)
    readers = _readers(graph_def)
    frontier = [n.name for n in graph_def.node if n.name in pure and n.op != "Const"
                and (n.name in keep or any(r not in pure for r, _ in readers[n.name]))]
    if not frontier:
        return graph_def, []
    at = [_evaluate(graph_def, dynamic, b, pure, frontier) for b in SIZES]
    if any(a is None for a in at):
        return graph_def, []
    frontier = [f for f in frontier if all(f in a[0] for a in at)]
    values = {f: [a[0][f] for a in at] for f in frontier}
    shapes = [a[1] for a in at]

    gd, keep, nodes = working_copy(graph_def, keep)
    changed, bypassed = [], set()
    for f in frontier:
        vs = values[f]
        if all(np.array_equal(v, vs[0]) for v in vs):
            _make_const(nodes[f], vs[0])
            changed.append(f)
            continue
        for name, k in readers[f]:
            r = nodes.get(name)
            if r is None:
                continue
            if r.op == "Reshape" and k == 1:
                flat = _batch_free_shape(vs)
                if flat is not None:
                    c = gd.node.add()
                    c.name = fresh_name(nodes, f"{r.name}/shape_any_batch")
                    nodes[c.name] = c
                    _make_const(c, flat)
                    r.input[1] = c.name
                    changed.append(r.name)
            elif (r.op == "BroadcastTo" and k == 1 and r.name not in keep
                  and _broadcast_implied(r, vs, shapes, readers, nodes)):
                for q, j in readers[r.name]:
                    nodes[q].input[j] = r.input[0]
                bypassed.add(r.name)
                changed.append(r.name)
    if not changed:
        return graph_def, []
    dead = pure | bypassed
    gone = unread_nodes(gd, dead, keep, within=dead)
    out = type(gd)()
    out.versions.CopyFrom(gd.versions)
    out.library.CopyFrom(gd.library)
    out.node.extend(n for n in gd.node if n.name not in gone)
    return out, changed


def _shape_arithmetic(graph_def, info) -> set[str]:
    """Nodes whose value follows from Consts and tensors' shapes alone: Consts, Shape / Size /
    Rank, and stateless single-output integer ops over such nodes, none with control edges."""
    nodes = {n.name: n for n in graph_def.node}
    pure: set[str] = set()
    for name in topo_order(graph_def):
        n = nodes[name]
        if any(t.startswith("^") for t in n.input):
            continue
        outs, dtypes = info.get(name, ([], []))
        if len(outs) != 1:
            continue
        if n.op == "Const":
            pure.add(name)
        elif n.op in SHAPE_OPS:
            if dtypes[0] in _INT:
                pure.add(name)
        elif (n.input and dtypes[0] in _INT and n.op != "Placeholder"
              and not is_stateful(n.op)
              and all(input_node(t) in pure and split_tensor(t)[1] == 0 for t in n.input)):
            pure.add(name)
    return pure


def _readers(graph_def) -> dict[str, list[tuple[str, int]]]:
    """{node: [(reader, input index)] for each data input that reads its output 0}; a node
    read through another output or a control edge gets a None reader, which no rewrite
    matches."""
    out: dict[str, list] = {n.name: [] for n in graph_def.node}
    for n in graph_def.node:
        for k, t in enumerate(n.input):
            src = input_node(t)
            if src not in out:
                continue
            plain = not t.startswith("^") and split_tensor(t)[1] == 0
            out[src].append((n.name, k) if plain else (None, k))
    return out


def _evaluate(graph_def, dynamic: dict, b: int, pure: set, frontier: list):
    """({frontier node: value}, inferred shapes) with every dynamic-batch input's dimension
    0 pinned to b. A frontier node that reads the shape of a tensor whose shape is not
    fully known at b has no value; None where TensorFlow fails."""
    pinned = _shapes_only(graph_def)
    for n in pinned.node:
        if n.name in dynamic:
            n.attr["shape"].shape.CopyFrom(tf.TensorShape([b] + dynamic[n.name][1:]).as_proto())
    try:
        shapes = infer_shapes(pinned)
    except Exception:  # an RstfError: a batch this graph cannot take
        return None
    small = tf.compat.v1.GraphDef()
    unknown: set[str] = set()  # pure nodes that read a shape not known at b
    nodes = {n.name: n for n in graph_def.node}
    for name in topo_order(graph_def):
        n = nodes[name]
        if name not in pure:
            continue
        if any(input_node(t) in unknown for t in n.input):
            unknown.add(n.name)
            continue
        if n.op in SHAPE_OPS:
            s = shapes.get(input_node(n.input[0]), ([], []))[0]
            k = split_tensor(n.input[0])[1]
            s = s[k] if k < len(s) else None
            if s is None or None in s:
                unknown.add(n.name)
                continue
            value = {"Shape": s, "Size": int(np.prod(s)), "Rank": len(s)}[n.op]
            c = small.node.add()
            c.name = n.name
            _make_const(c, np.asarray(value, dtype=shapes[n.name][1][0]))
        else:
            small.node.add().CopyFrom(n)
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(small, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            known = [f for f in frontier if f not in unknown]
            got = sess.run([g.get_tensor_by_name(f"{f}:0") for f in known])
    except Exception:  # tf.errors.OpError, ValueError: this size is not one the graph takes
        return None
    return dict(zip(known, got)), shapes


def _shapes_only(graph_def):
    """A copy of `graph_def` whose large float Consts (weights) are Placeholders of their
    shape: TensorFlow's shape inference gives every tensor the same shape (a float value is
    never read as a shape), and importing it does not copy the weights."""
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        t = n.attr["value"].tensor if n.op == "Const" else None
        dims = [d.size for d in t.tensor_shape.dim] if t is not None else []
        if t is not None and t.dtype in _FLOAT_ENUMS and int(np.prod(dims)) > 64:
            p = out.node.add()
            p.name, p.op, p.device = n.name, "Placeholder", n.device
            p.attr["dtype"].type = t.dtype
            p.attr["shape"].shape.CopyFrom(t.tensor_shape)
        else:
            out.node.add().CopyFrom(n)
    return out


def _batch_free_shape(vs: list) -> np.ndarray | None:
    """A Reshape shape for any batch: vs (its value at each of SIZES) with the one entry that
    is k * batch replaced by -1; None unless exactly that entry varies, as k * batch."""
    if any(v.ndim != 1 or v.shape != vs[0].shape for v in vs) or (vs[0] < 0).any():
        return None
    varies = [i for i in range(vs[0].size) if any(v[i] != vs[0][i] for v in vs)]
    if len(varies) != 1:
        return None
    i = varies[0]
    k, rem = divmod(int(vs[0][i]), SIZES[0])
    if rem or k < 1 or any(int(v[i]) != k * b for v, b in zip(vs, SIZES)):
        return None
    out = vs[0].copy()
    out[i] = -1
    return out


def _broadcast_implied(r, vs: list, shapes: list, readers: dict, nodes: dict) -> bool:
    """Every reader of BroadcastTo `r` broadcasts it against an operand of the target shape
    at every size, so reading r's input instead gives the same result."""
    if not readers[r.name] or any(q is None for q, _ in readers[r.name]):
        return False
    for q, j in readers[r.name]:
        op = nodes[q]
        if op.op not in BROADCASTING or len(op.input) != 2 or j not in (0, 1):
            return False
        other = op.input[1 - j]
        for v, s in zip(vs, shapes):
            outs = s.get(input_node(other), ([], []))[0]
            k = split_tensor(other)[1]
            if k >= len(outs) or outs[k] is None or tuple(outs[k]) != tuple(v.tolist()):
                return False
    return True


def _make_const(node, value: np.ndarray) -> None:
    """`node` (in place) a Const holding `value`, keeping its name and device."""
    name, device = node.name, node.device
    node.Clear()
    node.name, node.device, node.op = name, device, "Const"
    node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
