"""GatherV2: rows of a table picked by run-time indices (an embedding lookup)."""
from __future__ import annotations

import numpy as np

from ..frontend.graph import Graph, Node
from .base import (ALL_DTYPES, INTEGER, ArrayParam, OpFunction, OpHandler, Unsupported,
                   index_names, op_handler, render)


@op_handler("GatherV2")
class GatherV2(OpHandler):
    """y = gather(params, indices, axis) with a constant axis and batch_dims 0: output shape
    params[:axis] + indices + params[axis+1:]. Indices int32 or int64, params any dtype.

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
        rank = len(graph.tensor_shape(node.inputs[0]))
        axis = int(np.asarray(graph.const_value(node.inputs[2])).reshape(()))
        if not -rank <= axis < rank:
            raise Unsupported(f"axis {axis} out of range for params of rank {rank}")
        return axis % rank

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if graph.tensor_dtype(node.inputs[1]) not in INTEGER:
            raise Unsupported(f"indices of dtype {graph.tensor_dtype(node.inputs[1])}")
        if node.attr["batch_dims"].i if "batch_dims" in node.attr else 0:
            raise Unsupported("GatherV2 with batch_dims")
        params = graph.tensor_shape(node.inputs[0])
        axis = self._axis(node, graph)
        want = (*params[:axis], *graph.tensor_shape(node.inputs[1]), *params[axis + 1:])
        if tuple(node.out_shapes[0]) != want:
            raise Unsupported(f"output {list(node.out_shapes[0])} is not {list(want)}")
        if params[axis] == 0:
            raise Unsupported("an empty table: every index is out of range")

    def check_batch(self, node: Node, graph: Graph) -> None:
        # Sample n of the output is the rows that sample n's ids pick, from a constant table.
        if self._axis(node, graph) != 0 or not graph.is_const(node.inputs[0]):
            raise Unsupported("GatherV2 other than rows of a constant table, under a "
                              "dynamic batch")

    # flops: the default, one per output element (a bounds check per read), not 0: a
    # subgraph of data movers alone stays in TensorFlow (pipeline.select), and a lookup
    # beside no other op would then never be generated.

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        params = tuple(graph.tensor_shape(node.inputs[0]))
        ids = tuple(graph.tensor_shape(node.inputs[1]))
        axis = self._axis(node, graph)
        oshape, jshape = list(params[:axis]), list(params[axis + 1:])
        body = render("ops/gather.c.j2", oidx=index_names("o", axis), oshape=oshape,
                      iidx=index_names("i", len(ids)), ishape=list(ids),
                      jidx=index_names("j", len(jshape)), jshape=jshape, rows=params[axis],
                      ids="ids", table="x", out="y")
        ct = self.ctype(node)
        return OpFunction(
            body, [ArrayParam("x", params, ct),
                   ArrayParam("ids", ids, self.input_ctype(graph, node.inputs[1]))],
            [ArrayParam("y", tuple(node.out_shapes[0]), ct)],
            summary=f"GatherV2 {list(params)} axis {axis} by {list(ids)}")
