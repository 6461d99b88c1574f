"""Two-operand Einsums lowered to a batched matmul between Transposes and Reshapes.

rstf has no code generator for `Einsum`, and Keras freezes to it in two common places:
- `EinsumDense` (attention's query, key, value and output projections) when a shape is
  unknown: a BERT exported for requests of any length ([?, ?] ids) has sixteen,
  `abc,cde->abde` and `abcd,cde->abe`, by constant weights. With every shape known it
  freezes to a BatchMatMulV2 instead.
- attention written as einsums of two activations, ALBERT's `BTNH,BSNH->BNTS` (scores)
  and `BNTS,BSNH->BTNH` (the weighted values).
Left in TensorFlow they cut an encoder into pieces. TensorFlow's own Einsum kernel computes
them as one batched matmul; this pass writes that out in the graph, where rstf generates
every piece.

The letters are sorted into batch letters B (in both operands and the output), the first
operand's free letters X (in it and the output), the contracted letters C (in both
operands, not in the output) and the second operand's free letters W. Then

    out = Transpose(Reshape(BatchMatMulV2(x as [B..., prod X, prod C],
                                          w as [B..., prod C, prod W]), [B..., X..., W...]))

where "as" is a Transpose into that letter order (left out where it is the identity) and a
Reshape (left out where it changes nothing). A constant second operand with no batch
letters becomes one 2-D Const. Later passes then see what a fixed-length export gives:
Transposes around a batched matmul fold into its adjoint flags (rstf.frontend.transposes),
a bias add after the output Reshape moves ahead of it (rstf.frontend.reshapes), and the
Reshapes are free in rstf's code (views of a buffer). The same products are summed; rstf's
kernel chooses their order either way.

Pattern: a float32 Einsum of two operands without control inputs; no ellipsis, no letter
twice in one operand or in the output, none in one operand alone (a sum over it), every
output letter in an operand. Shapes known, or all but a dynamic batch: the first operand's
dimension 0 (the Reshapes then say -1 for it).

Contract: `lower_einsums(graph_def, keep, shapes)` returns (a new GraphDef, names of the
Einsums lowered). The last node of each lowering keeps the Einsum's name, so its readers
and the model's signature are unchanged. The input GraphDef is not changed.
"""
from __future__ import annotations

import math

import numpy as np

from .lowering import DT_FLOAT, Lowering
from .names import input_node, rebuilt, split_tensor, static_shape, working_copy
from .tfutil import tf


def lower_einsums(graph_def, keep, shapes: dict) -> tuple[object, list[str]]:
    """`shapes`: `graph.infer_shapes(graph_def)`."""
    gd, keep, nodes = working_copy(graph_def, keep)
    lowered, order = [], []
    for e in list(gd.node):
        plan = _plan(e, nodes, shapes)
        if plan is None:
            order.append(e)
            continue
        new = _Lowering(e, nodes).emit(*plan)
        order += new
        lowered.append(e.name)
    if not lowered:
        return graph_def, []
    return rebuilt(gd, order, keep), lowered


class _Lowering(Lowering):
    """The nodes of one Einsum's lowering, the last under the Einsum's name."""

    def emit(self, x: str, xl: str, w, wl: str, out: str, size: dict, letters) -> list:
        """x, w: the operands (w a tensor name, or the Const's array); xl, wl, out: the
        equation's letters; size: letter -> dimension (None: the dynamic batch)."""
        b, xf, c, wf = letters
        dims = lambda ls: [size[k] for k in ls]  # noqa: E731
        prod = lambda ls: None if None in dims(ls) else math.prod(dims(ls))  # noqa: E731
        weight = isinstance(w, np.ndarray)  # a Const, and no batch letters
        # By a weight, x's free axes stay axes (BatchMatMulV2 broadcasts a 2-D operand over
        # them): the output then still leads with them, as the bias add after it expects.
        rows = dims(xf) if weight else [prod(xf)]
        x_in = self.transpose(x, [xl.index(k) for k in b + xf + c], "x_transposed")
        if dims(b) + rows + [prod(c)] != dims(b + xf + c):
            x_in = self.reshape(x_in, dims(b) + rows + [prod(c)], "x_as_matrix")
        if weight:
            value = w.transpose([wl.index(k) for k in c + wf]).reshape(prod(c), prod(wf))
            w_in = self.const("weight_2d", np.ascontiguousarray(value))
        else:
            w_in = self.transpose(w, [wl.index(k) for k in b + c + wf], "w_transposed")
            if len(c) != 1 or len(wf) != 1:
                w_in = self.reshape(w_in, dims(b) + [prod(c), prod(wf)], "w_as_matrix")
        mm = self.node("BatchMatMulV2", "matmul", [x_in, w_in])
        mm.attr["adj_x"].b = False
        mm.attr["adj_y"].b = False
        y = mm.name
        if dims(b) + rows + [prod(wf)] != dims(b + xf + wf):
            y = self.reshape(y, dims(b + xf + wf), "unflattened")
        self.transpose(y, [(b + xf + wf).index(k) for k in out], "transposed")
        return self.finish()  # the last node made takes the Einsum's place and name


def _plan(e, nodes: dict, shapes: dict):
    """`_Lowering.emit`'s arguments, or None where the pattern fails."""
    if e.op != "Einsum" or e.attr["T"].type != DT_FLOAT or e.attr["N"].i != 2:
        return None
    data = list(e.input)
    eq = e.attr["equation"].s.decode("ascii", "replace").replace(" ", "")
    if len(data) != 2 or any(t.startswith("^") for t in data) or "->" not in eq:
        return None
    ins, out = eq.split("->")
    ops = ins.split(",")
    if len(ops) != 2 or not all(s.isalpha() and s.isascii() for s in ops + [out]):
        return None
    xl, wl = ops
    if any(len(set(s)) != len(s) for s in (xl, wl, out)):
        return None
    if any(k not in out and k not in (wl if k in xl else xl) for k in xl + wl) or \
            any(k not in xl + wl for k in out):
        return None  # a letter summed within one operand, or an output letter from nowhere
    b = "".join(k for k in out if k in xl and k in wl)
    xf = "".join(k for k in out if k in xl and k not in wl)
    wf = "".join(k for k in out if k in wl and k not in xl)
    c = "".join(k for k in xl if k in wl and k not in out)
    xs = static_shape(shapes, data[0], batch=True)
    w = nodes.get(input_node(data[1]))
    if w is not None and w.op == "Const" and not split_tensor(data[1])[1] and not b:
        w_arg = tf.make_ndarray(w.attr["value"].tensor)
        if w_arg.dtype != np.float32:
            return None
        ws = w_arg.shape
    else:
        w_arg, ws = data[1], static_shape(shapes, data[1], batch=True)
    if xs is None or ws is None or len(xs) != len(xl) or len(ws) != len(wl):
        return None
    size = dict(zip(xl, xs))
    for k, d in zip(wl, ws):
        if size.setdefault(k, d) != d:
            return None
    if list(size.values()).count(None) > (0 if xs[0] is not None else 1) or \
            (xs[0] is None and size[xl[0]] is not None):
        return None  # an unknown other than the first operand's dynamic batch
    if not xf or not wf:
        return None  # a matrix-vector product or an elementwise one: not handled
    return data[0], xl, w_arg, wl, out, size, (b, xf, c, wf)
