"""Ops that only move data: Reshape and friends (flat copies), ConcatV2, Pack, and affine
gathers (Transpose, Slice, StridedSlice, ReverseV2) read through per-dimension subscripts."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..frontend.graph import Graph, Node
from .base import (ALL_DTYPES, ArrayParam, OpFunction, OpHandler, Unsupported, index_names,
                   numel, op_handler, render)


class DataMover(OpHandler):
    """An op that only moves values: any element type, no arithmetic (flops 0)."""

    dtypes = ALL_DTYPES

    def flops(self, node: Node, graph: Graph) -> int:
        return 0


@op_handler("Reshape", "Squeeze", "ExpandDims", "Identity", "Snapshot", "StopGradient")
class Copy(DataMover):
    """A row-major regrouping: the output is the input's buffer copied flat.

    The shape/axis input of Reshape and ExpandDims is not needed: the output shape is static.
    """

    ignored_inputs = (1,)
    # A flat copy: per sample whenever input and output both lead with the batch dimension
    # and hold the same number of elements per sample, which the caller's shape rules check.
    keeps_samples_apart = True

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        size = numel(node.out_shapes[0])
        body = render("ops/copy.c.j2", size=size, out="y", inp="x")
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", (size,), ct)], [ArrayParam("y", (size,), ct)],
                          summary=f"{node.op} {size} elements")


@op_handler("IdentityN")
class IdentityN(DataMover):
    """Output i is input i (tf.custom_gradient wraps activations such as swish in it)."""

    keeps_samples_apart = True

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        sizes = [numel(s) for s in node.out_shapes]
        ct = self.ctype(node)
        body = "\n".join(render("ops/copy.c.j2", size=n, out=f"y{k}", inp=f"x{k}")
                          for k, n in enumerate(sizes))
        return OpFunction(body, [ArrayParam(f"x{k}", (n,), ct) for k, n in enumerate(sizes)],
                          [ArrayParam(f"y{k}", (n,), ct) for k, n in enumerate(sizes)],
                          summary=f"IdentityN of {len(sizes)} tensors")


@op_handler("ConcatV2")
class ConcatV2(DataMover):
    """Concatenation along a constant axis (the last input), each input into its slice."""

    def data_inputs(self, node: Node) -> list[str]:
        return node.inputs[:-1]

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if not graph.is_const(node.inputs[-1]):
            raise Unsupported("the concat axis must be a constant")

    def check_batch(self, node: Node, graph: Graph) -> None:
        if int(graph.const_value(node.inputs[-1])) % len(node.out_shapes[0]) == 0:
            raise Unsupported("ConcatV2 along the dynamic batch dimension")

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


# ----------------------------------------------------------------- affine gathers
#
# Transpose, Slice, StridedSlice and ReverseV2 read each output element from one input
# element. Per input dimension d the read is `start + stride * o_k` for the output index o_k
# that dimension maps to, or the constant `start` when the dimension is sliced away (a
# StridedSlice shrink axis) or kept with extent 1. Everything is computed at generation time
# from the constant operands, following TensorFlow's own validation (strided_slice_op.cc);
# what TensorFlow would reject at run time is refused, never given a meaning.


@dataclasses.dataclass
class _Read:
    """How the input's dimension is read: `start + stride * i<out_dim>`."""

    start: int
    stride: int = 1
    out_dim: int | None = None  # None: a single index, `start`


def affine_index(var: str, start: int, stride: int) -> str:
    """'i1', 3, -2 -> '3 - i1 * 2'; 'i0', 1, 1 -> 'i0 + 1'."""
    if stride < 0:
        return f"{start} - {var}" + (f" * {-stride}" if stride != -1 else "")
    text = var if stride == 1 else f"{var} * {stride}"
    return f"{text} + {start}" if start else text


def const_ints(graph: Graph, tensor: str, what: str) -> list[int]:
    value = np.asarray(graph.const_value(tensor))
    if value.ndim != 1 or value.dtype.kind not in "iu":
        raise Unsupported(f"{what} must be a 1-D integer constant, got {value.dtype} "
                          f"{list(value.shape)}")
    return [int(v) for v in value]


def checked_axis(a: int, rank: int, what: str) -> int:
    if not -rank <= a < rank:
        raise Unsupported(f"{what} {a} out of range for rank {rank}")
    return a % rank


def const_axis(graph: Graph, tensor: str, rank: int, what: str) -> int:
    """The axis a scalar constant input names, in [0, rank)."""
    return checked_axis(int(np.asarray(graph.const_value(tensor)).reshape(())), rank, what)


class _AffineGather(DataMover):
    """Shared check and emission; subclasses say how each input dimension is read."""

    template = "ops/slice.c.j2"

    def reads(self, node: Node, graph: Graph, in_shape) -> tuple[list[_Read], list[int]]:
        """One _Read per input dimension, and the output shape they imply."""
        raise NotImplementedError

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        in_shape = graph.tensor_shape(node.inputs[0])
        _, out_shape = self.reads(node, graph, in_shape)
        if tuple(out_shape) != tuple(node.out_shapes[0]):
            raise Unsupported(f"computed output shape {list(out_shape)} differs from "
                              f"TensorFlow's {list(node.out_shapes[0])}")
        if numel(out_shape) == 0:
            raise Unsupported(f"empty result {list(out_shape)}")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        in_shape = graph.tensor_shape(node.inputs[0])
        reads, out_shape = self.reads(node, graph, in_shape)
        body, how = self.loops(node, reads, out_shape)
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", tuple(in_shape), ct)],
                          [ArrayParam("y", tuple(out_shape), ct)],
                          summary=f"{node.op} {list(in_shape)} -> {list(out_shape)}: {how}")

    def loops(self, node: Node, reads: list[_Read], out_shape) -> tuple[str, str]:
        """(the C of the copy, how it reads for the summary): the output written in order."""
        idx = index_names("i", len(out_shape))
        in_sub = []
        for r in reads:
            if r.out_dim is None or out_shape[r.out_dim] == 1:
                in_sub.append(str(r.start))
            else:
                in_sub.append(affine_index(idx[r.out_dim], r.start, r.stride))
        body = render(self.template, idx=idx, shape=out_shape, out="y", inp="x", in_sub=in_sub)
        return body, f"x[{', '.join(in_sub)}]"


@op_handler("Transpose")
class Transpose(_AffineGather):
    """y[i0]..[in] = x[...] with input dimension perm[k] read by output index k. Negative
    entries of perm count from the end, as TensorFlow's kernel accepts them."""

    ignored_inputs = (1,)
    const_inputs = (1,)
    template = "ops/transpose.c.j2"

    def check_batch(self, node: Node, graph: Graph) -> None:
        perm = const_ints(graph, node.inputs[1], "perm")
        if perm and perm[0] % len(perm) != 0:
            raise Unsupported("Transpose that moves the dynamic batch dimension")

    def reads(self, node, graph, in_shape):
        rank = len(in_shape)
        perm = [checked_axis(p, rank, "perm entry")
                for p in const_ints(graph, node.inputs[1], "perm")]
        if sorted(perm) != list(range(rank)):
            raise Unsupported(f"perm {perm} is not a permutation of {rank} dimensions")
        reads = [_Read(0, 1, perm.index(d)) for d in range(rank)]
        return reads, [in_shape[d] for d in perm]

    def loops(self, node: Node, reads: list[_Read], out_shape) -> tuple[str, str]:
        """Where the input's innermost dimension moves (a true transpose of the two innermost
        axes, such as attention's key to [heads, depth, tokens]), the output's innermost
        loop is split into cache-line tiles and the input's innermost dimension runs between
        the tile and the lanes (`transpose_tiles`): a row of the output is written a cache line
        at a time while the lines it reads are used again by the next input column, instead
        of one line read per element at a stride that, at a power of two, keeps evicting
        itself from the same cache sets. A copy, so the order changes no value."""
        tiles = transpose_tiles(reads, out_shape, node.out_dtypes[0].itemsize)
        if tiles is None:
            return super().loops(node, reads, out_shape)
        q, lanes = tiles
        rank = len(out_shape)
        idx = index_names("i", rank)
        last = f"{lanes} * t + l"
        out_sub = idx[:-1] + [last]
        in_sub = ["0" if out_shape[r.out_dim] == 1 else
                  (last if r.out_dim == rank - 1 else idx[r.out_dim]) for r in reads]
        loops = idx[:q] + ["t"] + idx[q:-1] + ["l"]
        extents = list(out_shape[:q]) + [out_shape[-1] // lanes] + list(out_shape[q:-1]) + [lanes]
        body = render("ops/transpose_tiled.c.j2", loops=loops, extents=extents, out="y",
                      inp="x", out_sub=out_sub, in_sub=in_sub)
        return body, f"x[{', '.join(in_sub)}] in {lanes}-element tiles of the last axis"

# A cache line: what one tile of a tiled transpose writes (and reads, a column at a time).
CACHE_LINE_BYTES = 64


def transpose_tiles(reads, out_shape, itemsize: int) -> tuple[int, int] | None:
    """(q, lanes) for a tiled transpose: the output dimension q that reads the input's
    innermost dimension, and the tile of the output's innermost dimension (one cache line
    of elements); None where the input's innermost dimension stays innermost, where either
    dimension is too short for tiles to matter, or where the tile does not divide the
    output's innermost extent."""
    lanes = CACHE_LINE_BYTES // itemsize
    q = reads[-1].out_dim
    rank = len(out_shape)
    if rank < 2 or q is None or q == rank - 1 or out_shape[q] < 2:
        return None
    if out_shape[-1] <= lanes or out_shape[-1] % lanes:
        return None
    return q, lanes


@op_handler("Slice")
class Slice(_AffineGather):
    """A box at constant `begin` of constant `size` (-1: to the end of the dimension)."""

    ignored_inputs = (1, 2)
    const_inputs = (1, 2)

    def reads(self, node, graph, in_shape):
        begin = const_ints(graph, node.inputs[1], "begin")
        size = const_ints(graph, node.inputs[2], "size")
        if len(begin) != len(in_shape) or len(size) != len(in_shape):
            raise Unsupported(f"begin {begin} / size {size} do not match rank {len(in_shape)}")
        reads, out_shape = [], []
        for d, (b, n, dim) in enumerate(zip(begin, size, in_shape)):
            n = dim - b if n == -1 else n
            if not (0 <= b <= dim and 0 <= n <= dim - b):
                raise Unsupported(f"slice begin {b} size {size[d]} out of bounds for "
                                  f"dimension {d} of extent {dim}")
            reads.append(_Read(b, 1, d))
            out_shape.append(n)
        return reads, out_shape


@op_handler("ReverseV2")
class ReverseV2(_AffineGather):
    """Reverse along constant axes: a reversed dimension reads `extent - 1 - i`."""

    ignored_inputs = (1,)
    const_inputs = (1,)

    def reads(self, node, graph, in_shape):
        rank = len(in_shape)
        axes = [checked_axis(a, rank, "axis") for a in const_ints(graph, node.inputs[1], "axis")]
        if len(set(axes)) != len(axes):
            raise Unsupported(f"an axis is reversed twice in {axes}")
        reads = [_Read(dim - 1, -1, d) if d in axes else _Read(0, 1, d)
                 for d, dim in enumerate(in_shape)]
        return reads, list(in_shape)


@op_handler("StridedSlice")
class StridedSlice(_AffineGather):
    """Python's x[b:e:s, ..., tf.newaxis, k]: constant begin/end/strides and the five masks.

    The sparse spec (one entry per slice item) is expanded to one entry per input dimension
    exactly as TensorFlow's ValidateStridedSliceOp does, then each dimension's first index,
    stride and count are computed with TensorFlow's clamping rules.
    """

    ignored_inputs = (1, 2, 3)
    const_inputs = (1, 2, 3)

    def check_batch(self, node: Node, graph: Graph) -> None:
        # At batch 1, x[0:1] and x[:] read alike; only the slice spec tells them apart.
        dense, layout = self._dense(node, graph, len(graph.tensor_shape(node.inputs[0])))
        b, _, s, b_masked, e_masked, shrink = dense[0] if dense else (0, 0, 0, 0, 0, 1)
        if not (layout and layout[0] == 0 and s == 1 and not shrink and e_masked
                and (b_masked or b == 0)):
            raise Unsupported("StridedSlice that does not take the whole dynamic batch "
                              "dimension")

    def _dense(self, node, graph, rank) -> tuple[list, list]:
        """(per input dimension: (begin, end, stride, begin masked, end masked, shrink); per
        output dimension: an input dimension, or None for a new axis)."""
        begin, end, strides = (const_ints(graph, node.inputs[k], w)
                               for k, w in ((1, "begin"), (2, "end"), (3, "strides")))
        n = len(begin)
        if len(end) != n or len(strides) != n:
            raise Unsupported(f"begin {begin}, end {end}, strides {strides} differ in length")
        mask = {m: node.attr[m].i if m in node.attr else 0 for m in
                ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                 "shrink_axis_mask")}
        for m, v in mask.items():
            if v < 0 or v >> n:
                raise Unsupported(f"{m} {v} has bits beyond the {n} slice entries")
        ellipsis = mask["ellipsis_mask"]
        if ellipsis & (ellipsis - 1):
            raise Unsupported("more than one ellipsis")
        bit = lambda m, i: bool(mask[m] >> i & 1)  # noqa: E731

        # Sparse -> dense: an ellipsis (implicitly one after the last entry) stands for as
        # many full dimensions as the entries after it, new axes aside, leave unnamed.
        entries = n if ellipsis else n + 1
        ell = ellipsis.bit_length() - 1 if ellipsis else n
        new_after = sum(bit("new_axis_mask", i) for i in range(ell + 1, n))
        dense = []  # per input dimension: (begin, end, stride, begin masked, end masked, shrink)
        layout = []  # per output dimension: an input dimension, or None for a new axis
        for i in range(entries):
            if i == ell:
                stop = min(rank - (entries - i) + 1 + new_after, rank)
                while len(dense) < stop:
                    layout.append(len(dense))
                    dense.append((0, 0, 1, True, True, False))
            elif bit("new_axis_mask", i):
                layout.append(None)
            else:
                if len(dense) == rank:
                    raise Unsupported(f"slice entry {i} indexes beyond rank {rank}")
                shrink = bit("shrink_axis_mask", i)
                if not shrink:
                    layout.append(len(dense))
                dense.append((begin[i], end[i], strides[i], bit("begin_mask", i),
                              bit("end_mask", i), shrink))
        if len(dense) != rank:
            raise Unsupported(f"the slice names {len(dense)} of {rank} dimensions")
        return dense, layout

    def reads(self, node, graph, in_shape):
        dense, layout = self._dense(node, graph, len(in_shape))
        reads, sizes = [], []
        for d, ((b, e, s, b_masked, e_masked, shrink), dim) in enumerate(zip(dense, in_shape)):
            if s == 0:
                raise Unsupported(f"stride 0 in dimension {d}")
            if shrink:
                if s < 0:
                    raise Unsupported(f"negative stride on the indexed dimension {d}")
                b = b + dim if b < 0 else b
                if not 0 <= b < dim:
                    raise Unsupported(f"index {b} out of bounds for dimension {d} ({dim})")
                reads.append(_Read(b))
                sizes.append(1)
                continue
            lo, hi = (0, dim) if s > 0 else (-1, dim - 1)  # valid range of begin/end

            def canonical(x, masked, which):
                if masked:  # the start of the direction of travel, or one past its end
                    return (lo, hi)[which] if s > 0 else (hi, lo)[which]
                x = x + dim if x < 0 else x
                return min(max(x, lo), hi)

            b, e = canonical(b, b_masked, 0), canonical(e, e_masked, 1)
            length = e - b
            size = 0 if length == 0 or (length < 0) != (s < 0) else -(-abs(length) // abs(s))
            if size and not (0 <= b < dim and 0 <= b + s * (size - 1) < dim):
                raise Unsupported(f"dimension {d} would be read out of bounds")
            reads.append(_Read(b, s))
            sizes.append(size)
        out_shape = []
        for k, d in enumerate(layout):
            if d is None:
                out_shape.append(1)
            else:
                reads[d].out_dim = k
                out_shape.append(sizes[d])
        return reads, out_shape


@op_handler("Pack")
class Pack(DataMover):
    """Stack N same-shaped tensors along a new axis: input k fills index k of that axis."""

    @staticmethod
    def _axis(node: Node) -> int:
        rank = len(node.out_shapes[0])
        return checked_axis(node.attr["axis"].i if "axis" in node.attr else 0, rank, "axis")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        self._axis(node)
        shapes = {tuple(graph.tensor_shape(t)) for t in node.inputs}
        if len(shapes) != 1:
            raise Unsupported(f"inputs of different shapes {sorted(shapes)}")
        if numel(node.out_shapes[0]) == 0:
            raise Unsupported(f"empty result {list(node.out_shapes[0])}")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        axis = self._axis(node)
        ct = self.ctype(node)
        parts, ins = [], []
        for k, t in enumerate(node.inputs):
            shape = graph.tensor_shape(t)
            idx = index_names("i", len(shape))
            out_sub = idx[:axis] + [str(k)] + idx[axis:]
            parts.append({"name": f"x{k}", "idx": idx, "shape": shape, "out_sub": out_sub})
            ins.append(ArrayParam(f"x{k}", shape, ct))
        body = render("ops/pack.c.j2", parts=parts, out="y")
        return OpFunction(body, ins, [ArrayParam("y", out_shape, ct)],
                          summary=f"Pack axis {axis} of {len(ins)} -> {list(out_shape)}")

