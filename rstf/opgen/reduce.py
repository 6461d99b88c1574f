"""Reductions over constant axes (Mean, Sum, Prod, Max, Min) and Softmax."""
from __future__ import annotations

import math

from ..frontend.graph import Graph, Node
from .base import (EIGEN_FLOAT_PACKET, MAX_ELEMENTS, ArrayParam, OpFunction, OpHandler,
                   Unsupported, eigen_vector_prefix, index_names, numel, op_handler, render,
                   subscript)


def reduction_axes(graph: Graph, node: Node, rank: int) -> list[int]:
    """The constant `reduction_indices` input, normalised: sorted and non-negative.

    Negative and unsorted axes are accepted as TensorFlow accepts them; an axis named twice
    (also as `1` and `-2` of a rank-3 input) is refused, since TensorFlow's kernel fails
    on it at run time ("Axes contains duplicate dimension").
    """
    raw = graph.const_value(node.inputs[1]).reshape(-1).tolist()
    axes = set()
    for a in raw:
        a = int(a)
        if not -rank <= a < rank:
            raise Unsupported(f"axis {a} out of range for rank {rank}")
        if a % rank in axes:
            raise Unsupported(f"axis {a % rank} is reduced twice in {raw}")
        axes.add(a % rank)
    return sorted(axes)


# Lane partials of a row reduction (`_loops.j2`'s lane_reduce): 16 is a whole number of
# float vectors on every x86 vector width (4, 8, 16 lanes), so the partials are whole
# vectors wherever the code runs; rows shorter than two of them keep one chain.
LANES = 16


def row_lanes(columns: int) -> int:
    """The lane count of a reduction along rows of `columns` elements, or 0 for one chain.
    A row longer than MAX_ELEMENTS (never in a supported graph) keeps the one chain: its
    `int` loop runs to the row's length, which the compilers' index-range check sees
    (build.INDEX_RANGE_ERRORS), where the lanes' shorter bounds would hide an index past
    2^31."""
    return LANES if 2 * LANES <= columns <= MAX_ELEMENTS else 0


# TensorFlow's reduction kernels take Eigen's vectorised order only for the outputs whose
# packet (EIGEN_FLOAT_PACKET) lies within one row of the kept innermost axis.

# The scratch a row takes for its partial sums in Eigen's order: four packets.
EIGEN_ROW_PARTIALS = 4 * EIGEN_FLOAT_PACKET
# Eigen's InnerMostDimReducer sums a row of more than this many floats as two halves (a
# tree); up to it, in the one order of `_loops.j2`'s eigen_row_sum.
EIGEN_LEAF_FLOATS = 8 * 1024


def _merged_runs(in_shape, axes) -> list[tuple[int, bool]]:
    """The shape as TensorFlow's ReductionHelper sees it: axes of extent 1 dropped, and
    neighbours that are both reduced or both kept merged. Each run is (extent, reduced)."""
    runs: list[list] = []
    for d, n in enumerate(in_shape):
        if n == 1:
            continue
        if runs and runs[-1][1] == (d in axes):
            runs[-1][0] *= n
        else:
            runs.append([n, d in axes])
    return [(n, r) for n, r in runs]


def eigen_outer_reduction(in_shape, axes) -> tuple[int, int, int] | None:
    """(P, R, C) when TensorFlow reduces `axes` of `in_shape` as Eigen's reduction of the
    middle axis of [P, R, C] that keeps the innermost axis, in the order of its vectorised
    path (InnerMostDimPreserver: four partial sums, row j into partial j mod 4): a global
    average pool's [N, H, W, C] over H and W is [N, H W, C] (_merged_runs). None for another
    shape, for C not a whole number of packets, and for R < 16 (Eigen sums those rows in
    turn)."""
    runs = _merged_runs(in_shape, axes)
    kinds = [r for _, r in runs]
    if kinds == [True, False]:
        (R, _), (C, _) = runs
        P = 1
    elif kinds == [False, True, False]:
        (P, _), (R, _), (C, _) = runs
    else:
        return None
    return (P, R, C) if C % EIGEN_FLOAT_PACKET == 0 and R >= 16 else None


def eigen_inner_reduction(in_shape, axes) -> tuple[int, int] | None:
    """(R, C) when TensorFlow reduces `axes` of `in_shape` as Eigen's reduction of each row
    of [R, C] (a layer norm's moments; R = 1 when every axis of extent > 1 is reduced, which
    Eigen's full reducer sums on one thread at these sizes), in the order of its
    InnerMostDimReducer (`_loops.j2`'s eigen_row_sum). None for another shape and for
    C > EIGEN_LEAF_FLOATS."""
    runs = _merged_runs(in_shape, axes)
    kinds = [r for _, r in runs]
    if kinds == [True]:
        (R, C) = (1, runs[0][0])
    elif kinds == [False, True]:
        (R, _), (C, _) = runs
    else:
        return None
    return (R, C) if C <= EIGEN_LEAF_FLOATS else None


class _Reduce(OpHandler):
    """Reduction over constant axes: init, update over the input's index space, and for Mean
    a final division by the number of reduced elements (as Eigen's MeanReducer divides).

    `init` and `update` are format strings: `{acc}` the output element being accumulated,
    `{x}` the input element, `{f}` the float-literal suffix. An empty axis list is the
    identity and becomes a plain copy (so `-0.0` stays `-0.0`, as in TensorFlow).
    """

    ignored_inputs = (1,)
    const_inputs = (1,)
    init = "0.0{f}"
    update = "{acc} + {x}"
    mean = False
    eigen_order = False  # a float sum: Eigen's order where it is known (eigen_*_reduction)

    def check_batch(self, node: Node, graph: Graph) -> None:
        if 0 in reduction_axes(graph, node, len(graph.tensor_shape(node.inputs[0]))):
            raise Unsupported(f"{node.op} over the dynamic batch dimension")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        in_shape = graph.tensor_shape(node.inputs[0])
        reduction_axes(graph, node, len(in_shape))
        if numel(in_shape) == 0:
            raise Unsupported(f"reduction of an empty tensor {list(in_shape)}")

    def flops(self, node: Node, graph: Graph) -> int:
        return numel(graph.tensor_shape(node.inputs[0]))

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        in_shape = graph.tensor_shape(node.inputs[0])
        rank = len(in_shape)
        axes = reduction_axes(graph, node, rank)
        keep = self.attr_bool(node, "keep_dims")
        in_idx = index_names("i", rank)
        # The output subscripts of an input point: reduced axes map to 0 (keep_dims) or vanish.
        red_sub = [("0" if keep else None) if d in axes else in_idx[d] for d in range(rank)]
        red_sub = [s for s in red_sub if s is not None]
        out_shape = node.out_shapes[0]
        out_idx = index_names("o", len(out_shape))
        ct = self.ctype(node)
        fs = self.literal_suffix(node)
        count = math.prod(in_shape[d] for d in axes)
        divisor = f"({ct}){count}" if self.mean and axes else None
        rows = math.prod(in_shape[:rank - len(axes)])
        lanes = row_lanes(count)
        eigen = self.eigen_order and ct == "float"
        inner = eigen_inner_reduction(in_shape, axes) if eigen else None
        if inner:
            R, C = inner
            body = render("ops/reduce_rows_eigen.c.j2", out="y", inp="x", acc="p", R=R, C=C,
                          divisor=divisor, block=row_block(R, C))
            return OpFunction(body, [ArrayParam("x", (R, C), ct)], [ArrayParam("y", (R,), ct)],
                              scratch=[ArrayParam("p", (R, EIGEN_ROW_PARTIALS), ct)],
                              summary=f"{node.op} {list(in_shape)} axes {axes} keep_dims={keep}"
                                      f" in Eigen's order")
        if axes == list(range(rank - len(axes), rank)) and lanes:
            # The innermost axes reduced (a layer norm's moments): rows of `count` elements,
            # reduced through lane partials.
            body = render("ops/reduce_rows.c.j2", out="y", inp="x", acc="p", R=rows, C=count,
                          lanes=lanes, init=self.init.format(f=fs),
                          block=row_block(rows, count, node.out_dtypes[0].itemsize),
                          upd=lambda a, x: self.update.format(acc=a, x=x), divisor=divisor)
            return OpFunction(body, [ArrayParam("x", (rows, count), ct)],
                              [ArrayParam("y", (rows,), ct)],
                              scratch=[ArrayParam("p", (rows, lanes), ct)],
                              summary=f"{node.op} {list(in_shape)} axes {axes} keep_dims={keep}")
        outer = eigen_outer_reduction(in_shape, axes) if eigen else None
        if outer:
            P, R, C = outer
            body = render("ops/reduce_outer.c.j2", out="y", inp="x", acc="p", P=P, R=R, C=C,
                          init=self.init.format(f=fs),
                          upd=lambda a, x: self.update.format(acc=a, x=x), divisor=divisor)
            return OpFunction(body, [ArrayParam("x", (P, R, C), ct)],
                              [ArrayParam("y", (P, C), ct)],
                              scratch=[ArrayParam("p", (4, P, C), ct)],
                              summary=f"{node.op} {list(in_shape)} axes {axes} keep_dims={keep}"
                                      f" in Eigen's order")
        acc, x = subscript("y", red_sub), subscript("x", in_idx)
        body = render("ops/reduce.c.j2", out="y", inp="x", out_idx=out_idx, out_shape=out_shape,
                      in_idx=in_idx, in_shape=in_shape, red_sub=red_sub, copy=not axes,
                      init=self.init.format(f=fs), update=self.update.format(acc=acc, x=x),
                      divisor=divisor)
        return OpFunction(body, [ArrayParam("x", in_shape, ct)], [ArrayParam("y", out_shape, ct)],
                          summary=f"{node.op} {list(in_shape)} axes {axes} keep_dims={keep}")


@op_handler("Mean")
class Mean(_Reduce):
    mean = True
    eigen_order = True


@op_handler("Sum")
class Sum(_Reduce):
    eigen_order = True


@op_handler("Prod")
class Prod(_Reduce):
    init = "1.0{f}"
    update = "{acc} * {x}"


# A NaN element makes the result NaN, as TensorFlow's reduce_max/reduce_min do: once the
# accumulator is NaN both comparisons are false and it stays NaN.
@op_handler("Max")
class Max(_Reduce):
    init = "-INFINITY"
    update = "{acc} < {x} || {x} != {x} ? {x} : {acc}"


@op_handler("Min")
class Min(_Reduce):
    init = "INFINITY"
    update = "{x} < {acc} || {x} != {x} ? {x} : {acc}"


# A row-wise op's rows (a softmax, a row Sum or Mean: a layer norm's moments) run in
# blocks whose every step ends before the next block starts (_loops.j2's row_blocks): one
# parallel loop over the blocks where each step was its own parallel region, or a serial
# loop (the lanes' combining), and a block's rows stay in L1 between the steps. A block is
# at most ROW_BLOCK_BYTES of its input, below every x86 core's 32-48 KB L1d with room for
# what the steps write beside it, and whole packets of 8 rows (a float softmax's
# reciprocal takes rows 8 at a time, as TensorFlow's vector path does).
ROW_BLOCK_BYTES = 16 << 10
ROW_BLOCK_ROWS = (32, 16, 8)


def row_block(R: int, C: int, itemsize: int = 4) -> int:
    """Rows a block of a row-wise op over [R][C] (0: no blocks): the most of ROW_BLOCK_ROWS
    that divides R, leaves at least two blocks and keeps a block within ROW_BLOCK_BYTES."""
    return next((b for b in ROW_BLOCK_ROWS
                 if R % b == 0 and R >= 2 * b and b * C * itemsize <= ROW_BLOCK_BYTES), 0)


@op_handler("Softmax")
class Softmax(OpHandler):
    """Softmax over the last axis; the operand is viewed as [rows][classes]."""

    def flops(self, node: Node, graph: Graph) -> int:
        return 5 * numel(node.out_shapes[0])

    def check_batch(self, node: Node, graph: Graph) -> None:
        if len(node.out_shapes[0]) < 2:  # rank 1: the classes axis *is* the batch
            raise Unsupported("Softmax over the dynamic batch dimension")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if len(node.out_shapes[0]) < 1:
            raise Unsupported("softmax of a scalar")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = node.out_shapes[0]
        C = shape[-1]
        R = numel(shape[:-1])
        ct = self.ctype(node)
        ms = self.math_suffix(node)
        # float: TensorFlow's own exp and reciprocal (rstf/cgen/tfmath.py), and its row sum's
        # order; the exp loop vectorises.
        flt = ms == "f"
        exp_fn = "rstf_expf" if flt else f"exp{ms}"
        eigen = flt and C <= EIGEN_LEAF_FLOATS
        # TensorFlow's float reciprocal of the row sums takes its vector path for whole
        # packets of rows and divides the rest; a double one divides.
        recip_rows = eigen_vector_prefix(R) if flt else 0
        lanes = row_lanes(C)
        body = render("ops/softmax.c.j2", R=R, C=C, inp="x", out="y", m="m", s="s", mp="mp",
                      sp="sp", lanes=lanes, eigen=eigen, fs=self.literal_suffix(node),
                      block=row_block(R, C) if recip_rows == R else 0,
                      exp_fn=exp_fn, recip_fn="rstf_recipf", recip_rows=recip_rows,
                      vmax=lambda a, x: f"{x} > {a} ? {x} : {a}",
                      vsum=lambda a, x: f"{a} + {x}")
        scratch = [ArrayParam("m", (R,), ct), ArrayParam("s", (R,), ct)]
        if lanes:
            scratch.append(ArrayParam("mp", (R, lanes), ct))
        if eigen or lanes:
            scratch.append(ArrayParam("sp", (R, EIGEN_ROW_PARTIALS if eigen else lanes), ct))
        return OpFunction(body, [ArrayParam("x", (R, C), ct)], [ArrayParam("y", (R, C), ct)],
                          scratch=scratch, summary=f"Softmax {list(shape)} over the last axis")
