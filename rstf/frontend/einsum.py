"""Einsums by a constant weight lowered to a batched matmul between two Reshapes.

Keras' `EinsumDense` (attention's query, key, value and output projections) freezes to a
BatchMatMulV2 when every shape is known, but to an `Einsum` op when one is not: a BERT
exported for requests of any length ([?, ?] ids) has sixteen of them, `abc,cde->abde` and
`abcd,cde->abe`. Pinned to one length they have static shapes again, but rstf has no code
generator for Einsum, so they stayed in TensorFlow and cut the encoder into pieces.

Lowered, x [P..., C...] by W [C..., F...] into [P..., F...] is
Reshape(BatchMatMulV2(Reshape(x, [P..., prod C]), W as [prod C, prod F]), [P..., F...]):
the contraction rstf tiles, with the Reshapes free (views of a buffer) in its code. The
same products are summed; rstf's kernel chooses their order either way. Later passes see
what a fixed-length export gives: the bias add after the output Reshape moves ahead of it
(rstf.frontend.reshapes) into the contraction's epilogue.

Pattern: a float32 Einsum of two operands, the second a Const; no ellipsis and no letter
twice in one operand; the contracted letters (in both operands, not in the output) are the
trailing letters of the first operand and the leading letters of the second, in the same
order; the output is the first operand's other letters then the second's. The first
operand's shape is known, or all but a dynamic batch (dimension 0; the Reshapes then say
-1 for it).

Contract: `lower_einsums(graph_def, keep, shapes)` returns (a new GraphDef, names of the
Einsums lowered). The lowered product keeps the Einsum's name, so its readers and the
model's signature are unchanged. The input GraphDef is not changed.
"""
from __future__ import annotations

import math

import numpy as np

from .names import fresh_name, input_node, rebuilt, split_tensor, static_shape, working_copy
from .tfutil import tf

DT_FLOAT = 1


def lower_einsums(graph_def, keep, shapes: dict) -> tuple[object, list[str]]:
    """`shapes`: `graph.infer_shapes(graph_def)`."""
    gd, keep, nodes = working_copy(graph_def, keep)
    lowered = []
    order = []
    for e in list(gd.node):
        plan = _plan(e, nodes, shapes)
        if plan is None:
            order.append(e)
            continue
        x, lead, contract_size, w2d, free = plan
        new = []

        def node(op: str, base: str, inputs: list[str]):
            n = tf.compat.v1.NodeDef(name=fresh_name(nodes, base), op=op)
            n.input.extend(inputs)
            n.device = e.device
            nodes[n.name] = n
            new.append(n)
            return n

        def const(base: str, value: np.ndarray):
            c = node("Const", base, [])
            c.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
            c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            return c.name

        def reshape(n, tensor: str, dims: list, shape_base: str) -> None:
            n.op = "Reshape"
            n.input.extend([tensor, const(shape_base, np.asarray(dims, np.int32))])
            n.attr["T"].type = DT_FLOAT
            n.attr["Tshape"].type = tf.int32.as_datatype_enum

        lead_dims = [-1 if d is None else d for d in lead]
        if len(x[1]) != 1:  # the contracted axes made one
            flat = node("Reshape", f"{e.name}/flat_input", [])
            reshape(flat, x[0], lead_dims + [contract_size], f"{e.name}/flat_input/shape")
            x_in = flat.name
        else:
            x_in = x[0]
        w_in = const(f"{e.name}/weight_2d", w2d)
        e.ClearField("input")
        e.ClearField("attr")
        if len(free) == 1:  # the product is the Einsum's result
            _batch_matmul(e, x_in, w_in)
        else:
            mm = node("BatchMatMulV2", f"{e.name}/matmul", [])
            _batch_matmul(mm, x_in, w_in)
            reshape(e, mm.name, lead_dims + list(free), f"{e.name}/shape")
        order += new + [e]
        lowered.append(e.name)
    if not lowered:
        return graph_def, []
    return rebuilt(gd, order, keep), lowered


def _batch_matmul(n, x: str, w: str) -> None:
    """`n` (in place) the float32 BatchMatMulV2 x @ w."""
    n.op = "BatchMatMulV2"
    n.input.extend([x, w])
    n.attr["T"].type = DT_FLOAT
    n.attr["adj_x"].b = False
    n.attr["adj_y"].b = False


def _plan(e, nodes: dict, shapes: dict):
    """((x tensor, its contracted letters), x's other dims, prod of the contracted dims, the
    weight as a 2-D array, the weight's free dims), or None where the pattern fails."""
    if e.op != "Einsum" or e.attr["T"].type != DT_FLOAT or e.attr["N"].i != 2:
        return None
    data = list(e.input)
    eq = e.attr["equation"].s.decode("ascii", "replace").replace(" ", "")
    if len(data) != 2 or any(t.startswith("^") for t in data) or "." in eq or "->" not in eq:
        return None
    ins, out = eq.split("->")
    ops = ins.split(",")
    if len(ops) != 2 or not all(s.isalpha() for s in ops + [out]):
        return None
    xl, wl = ops
    if len(set(xl)) != len(xl) or len(set(wl)) != len(wl) or len(set(out)) != len(out):
        return None
    contract = [c for c in xl if c in wl and c not in out]
    k = len(contract)
    if (not k or xl[len(xl) - k:] != "".join(contract) or wl[:k] != "".join(contract)
            or out != xl[:len(xl) - k] + wl[k:] or not xl[:len(xl) - k]):
        return None
    w = nodes.get(input_node(data[1]))
    if w is None or w.op != "Const" or split_tensor(data[1])[1]:
        return None
    xs = static_shape(shapes, data[0], batch=True)
    value = tf.make_ndarray(w.attr["value"].tensor)
    if xs is None or len(xs) != len(xl) or value.ndim != len(wl) or value.dtype != np.float32:
        return None
    if tuple(xs[len(xl) - k:]) != value.shape[:k]:
        return None
    size = math.prod(value.shape[:k])
    free = list(value.shape[k:])
    w2d = np.ascontiguousarray(value.reshape(size, math.prod(free)))
    return (data[0], contract), list(xs[:len(xl) - k]), size, w2d, free
