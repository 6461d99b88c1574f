"""Elementwise ops with numpy broadcasting: one statement over the output's index space."""
from __future__ import annotations

import numpy as np

from ..frontend.graph import Graph, Node
from .base import (ALL_DTYPES, C_TYPES, FLOAT, INTEGER, ArrayParam, OpFunction, OpHandler,
                   Unsupported, broadcast_indices, index_names, numel, op_handler, render,
                   subscript)

NUMBERS = FLOAT | INTEGER
BOOL = frozenset({np.dtype(np.bool_)})


# TensorFlow's float kernels evaluate Eigen's packets of 8 and then, one at a time, the
# last (size mod 8) elements of the tensor, through Eigen's scalar functions.
TF_PACKET = 8


class _Elementwise(OpHandler):
    """Shared emission: `expr` is a format string over the operand reads {0}, {1}, ...;
    `float_expr`, where set, replaces it for float32 (TensorFlow's own float functions), and
    `float_tail_expr`, where set, for the tensor's last (size mod 8) elements, where
    TensorFlow's scalar path computes another function (Sigmoid's and Exp's expf)."""

    expr = "{0}"
    float_expr = None
    float_tail_expr = None
    keeps_samples_apart = True  # broadcasting aside, point n of the output reads point n

    def expression(self, node: Node, operands: list[str], graph: Graph,
                   tail: bool = False) -> str:
        """The C expression; `tail`: the one of TF's scalar path (where `tail_start` has
        said there is one)."""
        m = self.math_suffix(node)
        expr = self.float_expr if m == "f" and self.float_expr else self.expr
        return (self.float_tail_expr if tail else expr).format(
            *operands, f=self.literal_suffix(node), m=m)

    def tail_start(self, node: Node) -> int | None:
        """The flat index from which TensorFlow's scalar path computes this op's output,
        where it computes another function there; else None."""
        size = numel(node.out_shapes[0])
        if self.math_suffix(node) != "f" or not self.float_tail_expr or not size % TF_PACKET:
            return None
        return size - size % TF_PACKET

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        idx = index_names("i", len(out_shape))
        ins, reads = [], []
        for k, t in enumerate(self.data_inputs(node)):
            shape = graph.tensor_shape(t)
            ins.append(ArrayParam(f"x{k}", shape, self.input_ctype(graph, t)))
            reads.append(subscript(f"x{k}", broadcast_indices(shape, out_shape, idx)))
        tail = self.tail_start(node)
        flat = " + ".join(f"{v} * {numel(out_shape[d + 1:])}"
                          for d, v in enumerate(idx)) or "0"
        body = render("ops/elementwise.c.j2", idx=idx, shape=out_shape, out="y",
                      expr=self.expression(node, reads, graph), tail=tail, flat=flat,
                      tail_expr=None if tail is None else
                      self.expression(node, reads, graph, tail=True))
        shapes = " , ".join(str(list(p.shape)) for p in ins)
        return OpFunction(body, ins, [ArrayParam("y", out_shape, self.ctype(node))],
                          summary=f"{node.op} {shapes} -> {list(out_shape)}")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        out = node.out_shapes[0]
        for t in self.data_inputs(node):
            try:
                broadcast_indices(graph.tensor_shape(t), out, index_names("i", len(out)))
            except ValueError as e:
                raise Unsupported(str(e)) from None


# Comparisons are written so a NaN operand propagates, as TensorFlow's kernels do:
# Relu(NaN) is NaN, not 0, and Maximum/Minimum return NaN when either operand is NaN.
@op_handler("Relu")
class Relu(_Elementwise):
    expr = "{0} < 0.0{f} ? 0.0{f} : {0}"


@op_handler("Relu6")
class Relu6(_Elementwise):
    expr = "{0} < 0.0{f} ? 0.0{f} : ({0} > 6.0{f} ? 6.0{f} : {0})"


@op_handler("Maximum")
class Maximum(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{0} < {1} || {1} != {1} ? {1} : {0}"


@op_handler("Minimum")
class Minimum(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{1} < {0} || {1} != {1} ? {1} : {0}"


# Float Sigmoid, Tanh, Exp, Erf, Rsqrt and Reciprocal are TensorFlow's own functions
# (rstf/cgen/tfmath.py): the same bits as its kernels, in loops gcc vectorises (a conv's fused
# epilogue too). Double keeps libm, as TensorFlow's double kernels are not matched bit for bit.
@op_handler("Sigmoid")
class Sigmoid(_Elementwise):
    expr = "1.0{f} / (1.0{f} + exp{m}(-{0}))"
    float_expr = "rstf_logisticf({0})"
    float_tail_expr = "rstf_logistic_tailf({0})"


@op_handler("Tanh")
class Tanh(_Elementwise):
    expr = "tanh{m}({0})"
    float_expr = "rstf_tanhf({0})"


@op_handler("Exp")
class Exp(_Elementwise):
    expr = "exp{m}({0})"
    float_expr = "rstf_expf({0})"
    float_tail_expr = "expf({0})"


@op_handler("Sqrt")
class Sqrt(_Elementwise):
    expr = "sqrt{m}({0})"


@op_handler("Square")
class Square(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{0} * {0}"


@op_handler("SquaredDifference")
class SquaredDifference(_Elementwise):
    expr = "({0} - {1}) * ({0} - {1})"


@op_handler("Neg")
class Neg(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "-{0}"


@op_handler("Abs")
class Abs(_Elementwise):
    expr = "fabs{m}({0})"


@op_handler("Rsqrt")
class Rsqrt(_Elementwise):
    expr = "1.0{f} / sqrt{m}({0})"
    float_expr = "rstf_rsqrtf({0})"  # TensorFlow's own (rstf/cgen/tfmath.py)


@op_handler("Reciprocal", "Inv")
class Reciprocal(_Elementwise):
    expr = "1.0{f} / {0}"
    float_expr = "rstf_recipf({0})"  # TensorFlow's own (rstf/cgen/tfmath.py)
    float_tail_expr = "1.0f / {0}"


@op_handler("Add", "AddV2")
class Add(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{0} + {1}"


@op_handler("Sub")
class Sub(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{0} - {1}"


@op_handler("Mul")
class Mul(_Elementwise):
    dtypes = NUMBERS  # int32/int64 too: index and mask arithmetic
    expr = "{0} * {1}"


@op_handler("RealDiv")
class RealDiv(_Elementwise):
    expr = "{0} / {1}"


@op_handler("BiasAdd")
class BiasAdd(_Elementwise):
    """value + bias along the channel (last) axis; NCHW stays with TensorFlow."""

    expr = "{0} + {1}"

    def check(self, node: Node, graph: Graph) -> None:
        fmt = self.attr_str(node, "data_format", "NHWC")
        if fmt not in ("NHWC", ""):
            raise Unsupported(f"BiasAdd data_format {fmt}")
        super().check(node, graph)


# Integer arithmetic above follows C: TensorFlow's int32 kernels wrap around on overflow,
# where signed overflow in C is undefined; the index and mask paths they serve (position
# ids, mask offsets) stay far from 2^31.


@op_handler("Erf")
class Erf(_Elementwise):
    expr = "erf{m}({0})"
    float_expr = "rstf_erff({0})"  # TensorFlow's own (rstf/cgen/tfmath.py)


@op_handler("Erfc")
class Erfc(_Elementwise):
    """glibc's erfcf: its libmvec vector versions where gcc and glibc have them (within 2
    ulp, rstf/cgen/chelpers.py), else one scalar call an element (within 3.1 ulp)."""

    expr = "erfc{m}({0})"


class _Compare(_Elementwise):
    """A comparison of two numbers into a bool (0 or 1); a NaN operand compares false except
    under NotEqual, as in C and in TensorFlow's kernels."""

    dtypes = NUMBERS | BOOL
    keeps_samples_apart = True

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if node.out_dtypes[0] not in BOOL:
            raise Unsupported(f"{node.op} producing {node.out_dtypes[0]}")


@op_handler("Less")
class Less(_Compare):
    expr = "{0} < {1}"


@op_handler("LessEqual")
class LessEqual(_Compare):
    expr = "{0} <= {1}"


@op_handler("Greater")
class Greater(_Compare):
    expr = "{0} > {1}"


@op_handler("GreaterEqual")
class GreaterEqual(_Compare):
    expr = "{0} >= {1}"


@op_handler("Equal")
class Equal(_Compare):
    expr = "{0} == {1}"


@op_handler("NotEqual")
class NotEqual(_Compare):
    expr = "{0} != {1}"


class _Logical(_Elementwise):
    dtypes = BOOL  # 0 or 1 in, 0 or 1 out: C's && || ! give exactly that


@op_handler("LogicalAnd")
class LogicalAnd(_Logical):
    expr = "{0} && {1}"


@op_handler("LogicalOr")
class LogicalOr(_Logical):
    expr = "{0} || {1}"


@op_handler("LogicalNot")
class LogicalNot(_Logical):
    expr = "!{0}"


@op_handler("SelectV2")
class SelectV2(_Elementwise):
    """cond ? t : e with all three broadcast to the output (numpy rules, as SelectV2; the
    older Select's row-vector condition stays in TensorFlow)."""

    dtypes = ALL_DTYPES

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if graph.tensor_dtype(node.inputs[0]) not in BOOL:
            raise Unsupported("SelectV2 whose condition is not bool")

    def expression(self, node: Node, operands: list[str], graph: Graph) -> str:
        if self.ctype(node) == "float":  # a vectorisable select (rstf/cgen/chelpers.py)
            return f"rstf_selectf({operands[0]}, {operands[1]}, {operands[2]})"
        return f"{operands[0]} ? {operands[1]} : {operands[2]}"


@op_handler("Cast")
class Cast(_Elementwise):
    """Conversions between float32, int32, int64 and bool with C's rules, which are
    TensorFlow's (static_cast): float to int truncates toward zero, int to float rounds to
    nearest, anything to bool is `!= 0`. A float outside the integer's range (or NaN) has
    no defined result in either."""

    dtypes = ALL_DTYPES

    def expression(self, node: Node, operands: list[str], graph: Graph) -> str:
        if node.out_dtypes[0] in BOOL:
            return f"{operands[0]} != 0"
        return f"({C_TYPES[node.out_dtypes[0]][0]}){operands[0]}"


@op_handler("Pow")
class Pow(_Elementwise):
    """x^y in float. A constant scalar exponent is computed as TensorFlow's graph runs it:
    Grappler's arithmetic optimizer (ConvertPow) rewrites x^2 as Square, x^3 as x * x * x,
    x^1 as Identity, x^0.5 as Sqrt (so -0 gives -0 and -inf NaN, not pow's +0 and +inf),
    x^0 as ones, x^-0.5 as Rsqrt and x^-1 as Reciprocal, and these are those; any other
    exponent, constant or not, is powf."""

    SPECIAL = {2.0: "{0} * {0}", 3.0: "{0} * {0} * {0}", 1.0: "{0}", 0.0: "1.0{f}",
               0.5: "sqrt{m}({0})", -0.5: "1.0{f} / sqrt{m}({0})", -1.0: "1.0{f} / {0}"}
    # Float Rsqrt and Reciprocal as TensorFlow's own (rstf/cgen/tfmath.py).
    FLOAT_SPECIAL = {**SPECIAL, -0.5: "rstf_rsqrtf({0})", -1.0: "rstf_recipf({0})"}

    def _exponent(self, node: Node, graph: Graph) -> float | None:
        t = node.inputs[1]
        if graph.is_const(t) and np.asarray(graph.const_value(t)).size == 1:
            return float(np.asarray(graph.const_value(t)).reshape(()))
        return None

    def expression(self, node: Node, operands: list[str], graph: Graph) -> str:
        special = self.FLOAT_SPECIAL if self.math_suffix(node) == "f" else self.SPECIAL
        fmt = special.get(self._exponent(node, graph), "pow{m}({0}, {1})")
        return fmt.format(*operands, f=self.literal_suffix(node), m=self.math_suffix(node))
