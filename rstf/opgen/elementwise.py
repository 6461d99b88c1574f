"""Elementwise ops with numpy broadcasting: one statement over the output's index space."""
from __future__ import annotations

from ..graph import Graph, Node
from .base import (ArrayParam, OpFunction, OpHandler, Unsupported, broadcast_indices,
                   index_names, op_handler, render, subscript)


class _Elementwise(OpHandler):
    """Shared emission: `expr` is a format string over the operand reads {0}, {1}, ..."""

    expr = "{0}"
    keeps_samples_apart = True  # broadcasting aside, point n of the output reads point n

    def expression(self, node: Node, operands: list[str]) -> str:
        m = self.math_suffix(node)
        # float: rstf's own exp (rstf/chelpers.py, within 1.001 ulp), which an omp simd loop
        # (a conv's epilogue, too) vectorises; libm's expf is a scalar call an element.
        return self.expr.format(*operands, f=self.literal_suffix(node), m=m,
                                exp="rstf_expf" if m == "f" else f"exp{m}")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        idx = index_names("i", len(out_shape))
        ins, reads = [], []
        for k, t in enumerate(self.data_inputs(node)):
            shape = graph.tensor_shape(t)
            ins.append(ArrayParam(f"x{k}", shape, self.ctype(node)))
            reads.append(subscript(f"x{k}", broadcast_indices(shape, out_shape, idx)))
        body = render("ops/elementwise.c.j2", idx=idx, shape=out_shape, out="y",
                      expr=self.expression(node, reads))
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
    expr = "{0} < {1} || {1} != {1} ? {1} : {0}"


@op_handler("Minimum")
class Minimum(_Elementwise):
    expr = "{1} < {0} || {1} != {1} ? {1} : {0}"


@op_handler("Sigmoid")
class Sigmoid(_Elementwise):
    expr = "1.0{f} / (1.0{f} + {exp}(-{0}))"


@op_handler("Tanh")
class Tanh(_Elementwise):
    expr = "tanh{m}({0})"


@op_handler("Exp")
class Exp(_Elementwise):
    expr = "{exp}({0})"


@op_handler("Sqrt")
class Sqrt(_Elementwise):
    expr = "sqrt{m}({0})"


@op_handler("Square")
class Square(_Elementwise):
    expr = "{0} * {0}"


@op_handler("SquaredDifference")
class SquaredDifference(_Elementwise):
    expr = "({0} - {1}) * ({0} - {1})"


@op_handler("Neg")
class Neg(_Elementwise):
    expr = "-{0}"


@op_handler("Abs")
class Abs(_Elementwise):
    expr = "fabs{m}({0})"


@op_handler("Rsqrt")
class Rsqrt(_Elementwise):
    expr = "1.0{f} / sqrt{m}({0})"


@op_handler("Add", "AddV2")
class Add(_Elementwise):
    expr = "{0} + {1}"


@op_handler("Sub")
class Sub(_Elementwise):
    expr = "{0} - {1}"


@op_handler("Mul")
class Mul(_Elementwise):
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
