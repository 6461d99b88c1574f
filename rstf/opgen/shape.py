"""Ops that only move data: Reshape and friends (flat copies) and ConcatV2."""
from __future__ import annotations

from ..graph import Graph, Node
from .base import (ArrayParam, OpFunction, OpHandler, Unsupported, index_names, numel,
                   op_handler, render)


@op_handler("Reshape", "Squeeze", "ExpandDims", "Identity", "Snapshot", "StopGradient")
class Copy(OpHandler):
    """A row-major regrouping: the output is the input's buffer copied flat.

    The shape/axis input of Reshape and ExpandDims is not needed: the output shape is static.
    """

    ignored_inputs = (1,)

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        size = numel(node.out_shapes[0])
        body = render("ops/copy.c.j2", size=size, out="y", inp="x")
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", (size,), ct)], [ArrayParam("y", (size,), ct)],
                          summary=f"{node.op} {size} elements")


@op_handler("ConcatV2")
class ConcatV2(OpHandler):
    """Concatenation along a constant axis (the last input), each input into its slice."""

    def _axis_input(self, node: Node) -> int:
        return len(node.inputs) - 1

    def data_inputs(self, node: Node) -> list[str]:
        return node.inputs[:-1]

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if not graph.is_const(node.inputs[-1]):
            raise Unsupported("the concat axis must be a constant")

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        rank = len(out_shape)
        axis = int(graph.const_value(node.inputs[-1]))
        axis = axis + rank if axis < 0 else axis
        idx = index_names("i", rank)
        ct = self.ctype(node)
        parts, ins, offset = [], [], 0
        for k, t in enumerate(self.data_inputs(node)):
            shape = graph.tensor_shape(t)
            out_sub = list(idx)
            out_sub[axis] = f"{idx[axis]} + {offset}" if offset else idx[axis]
            parts.append({"name": f"x{k}", "idx": idx, "shape": shape, "out_sub": out_sub})
            ins.append(ArrayParam(f"x{k}", shape, ct))
            offset += shape[axis]
        body = render("ops/concat.c.j2", parts=parts, out="y")
        return OpFunction(body, ins, [ArrayParam("y", out_shape, ct)],
                          summary=f"ConcatV2 axis {axis} of {len(ins)} -> {list(out_shape)}")
