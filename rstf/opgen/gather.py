"""GatherV2: rows of a table picked by run-time indices (an embedding lookup)."""
from __future__ import annotations

from ..frontend.graph import Graph, Node
from .base import (ALL_DTYPES, INTEGER, ArrayParam, OpFunction, OpHandler, Unsupported,
                   index_names, op_handler, render)
from .shape import const_axis


@op_handler("GatherV2")
class GatherV2(OpHandler):
    """y = gather(params, indices, axis, batch_dims=b) with a constant axis: output shape
    params[:axis] + indices[b:] + params[axis+1:]. The first b axes are shared: output
    element [o..][i..][j..] reads params[o..][ids[o[:b]..][i..]][j..] (b = 0 is the plain
    lookup; DeBERTa's relative-position scores take b = axis = 3, numpy's
    take_along_axis). Indices int32 or int64, params any dtype.

    An index outside [0, params.shape[axis]) fails the op with InvalidArgument, as
    TensorFlow's CPU kernel does, through the generated C's error channel
    (chelpers.INDEX_ERROR); the C never reads outside the table.

    The row subscript is data, so the C is outside the raisable subset: `isolated` gives the
    node a custom op of its own, rather than leaving a whole subgraph to the textbook C.
    """

    ignored_inputs = (2,)
    const_inputs = (2,)
    dtypes = ALL_DTYPES
    isolated = True

    def _axis(self, node: Node, graph: Graph) -> int:
        return const_axis(graph, node.inputs[2], len(graph.tensor_shape(node.inputs[0])),
                          "axis of params")

    def _batch_dims(self, node: Node, graph: Graph) -> int:
        # TF counts a negative batch_dims from the end of the indices' shape.
        b = node.attr["batch_dims"].i if "batch_dims" in node.attr else 0
        rank = len(graph.tensor_shape(node.inputs[1]))
        return b + rank if b < 0 else b

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if graph.tensor_dtype(node.inputs[1]) not in INTEGER:
            raise Unsupported(f"indices of dtype {graph.tensor_dtype(node.inputs[1])}")
        params = graph.tensor_shape(node.inputs[0])
        ids = graph.tensor_shape(node.inputs[1])
        axis, b = self._axis(node, graph), self._batch_dims(node, graph)
        if not 0 <= b <= min(axis, len(ids)) or tuple(params[:b]) != tuple(ids[:b]):
            raise Unsupported(f"batch_dims {b} with params {list(params)}, axis {axis} and "
                              f"indices {list(ids)}")
        want = (*params[:axis], *ids[b:], *params[axis + 1:])
        if tuple(node.out_shapes[0]) != want:
            raise Unsupported(f"output {list(node.out_shapes[0])} is not {list(want)}")
        if params[axis] == 0:
            raise Unsupported("an empty table: every index is out of range")

    def check_batch(self, node: Node, graph: Graph) -> None:
        # Sample n of the output is the rows that sample n's ids pick, from a constant table,
        # or (batch_dims >= 1) from sample n of the params.
        if self._batch_dims(node, graph) >= 1:
            return
        if self._axis(node, graph) != 0 or not graph.is_const(node.inputs[0]):
            raise Unsupported("GatherV2 other than rows of a constant table or with "
                              "batch_dims, under a dynamic batch")

    # flops: the default, one per output element (a bounds check per read), not 0: a
    # subgraph of data movers alone stays in TensorFlow (pipeline.select), and a lookup
    # beside no other op would then never be generated.

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        params = tuple(graph.tensor_shape(node.inputs[0]))
        ids = tuple(graph.tensor_shape(node.inputs[1]))
        axis, b = self._axis(node, graph), self._batch_dims(node, graph)
        oshape, jshape = list(params[:axis]), list(params[axis + 1:])
        oidx = index_names("o", axis)
        body = render("ops/gather.c.j2", oidx=oidx, oshape=oshape, shared=oidx[:b],
                      iidx=index_names("i", len(ids) - b), ishape=list(ids[b:]),
                      jidx=index_names("j", len(jshape)), jshape=jshape, rows=params[axis],
                      ids="ids", table="x", out="y")
        ct = self.ctype(node)
        return OpFunction(
            body, [ArrayParam("x", params, ct),
                   ArrayParam("ids", ids, self.input_ctype(graph, node.inputs[1]))],
            [ArrayParam("y", tuple(node.out_shapes[0]), ct)],
            summary=f"GatherV2 {list(params)} axis {axis} by {list(ids)}"
                    + (f" batch_dims {b}" if b else ""))
