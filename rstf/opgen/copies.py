"""Split, SplitV, Unpack, Tile and Roll: copies whose every read is an affine subscript of
the output's loop indices (a Roll in one piece per wrapped range), so the polyhedral pass
schedules them with their neighbours."""
from __future__ import annotations

import itertools

import numpy as np

from ..frontend.graph import Graph, Node
from .base import ArrayParam, OpFunction, Unsupported, index_names, numel, op_handler, render
from .shape import DataMover, affine_index, checked_axis, const_axis, const_ints


class _Split(DataMover):
    """Consecutive slices along a constant axis: output k is the input's indices
    [offset_k, offset_k + n_k) along it, n_k the extent of output k (TensorFlow's shape
    inference gives them; `check` verifies they tile the axis)."""

    value_input = 0
    axis_input = 0

    def _axis(self, node: Node, graph: Graph) -> int:
        rank = len(graph.tensor_shape(node.inputs[self.value_input]))
        return const_axis(graph, node.inputs[self.axis_input], rank, "split axis")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        shape = list(graph.tensor_shape(node.inputs[self.value_input]))
        axis = self._axis(node, graph)
        others = shape[:axis] + shape[axis + 1:]
        if any(list(s[:axis]) + list(s[axis + 1:]) != others for s in node.out_shapes) \
                or sum(s[axis] for s in node.out_shapes) != shape[axis]:
            raise Unsupported(f"outputs {[list(s) for s in node.out_shapes]} do not split "
                              f"{shape} along axis {axis}")
        if any(numel(s) == 0 for s in node.out_shapes):
            raise Unsupported("an empty output")

    def check_batch(self, node: Node, graph: Graph) -> None:
        if self._axis(node, graph) == 0:
            raise Unsupported(f"{node.op} along the dynamic batch dimension")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        in_shape = tuple(graph.tensor_shape(node.inputs[self.value_input]))
        axis = self._axis(node, graph)
        ct = self.ctype(node)
        idx = index_names("i", len(in_shape))
        bodies, outs, offset = [], [], 0
        for k, shape in enumerate(node.out_shapes):
            in_sub = list(idx)
            in_sub[axis] = affine_index(idx[axis], offset, 1)
            bodies.append(render("ops/slice.c.j2", idx=idx, shape=list(shape), out=f"y{k}",
                                 inp="x", in_sub=in_sub))
            outs.append(ArrayParam(f"y{k}", tuple(shape), ct))
            offset += shape[axis]
        return OpFunction("\n".join(bodies), [ArrayParam("x", in_shape, ct)], outs,
                          summary=f"{node.op} {list(in_shape)} axis {axis} into "
                                  f"{[s[axis] for s in node.out_shapes]}")


@op_handler("Split")
class Split(_Split):
    """Split(split_dim, value): equal parts; the axis is input 0."""

    ignored_inputs = (0,)
    const_inputs = (0,)
    value_input, axis_input = 1, 0


@op_handler("SplitV")
class SplitV(_Split):
    """SplitV(value, size_splits, split_dim): parts of the given sizes (one may be -1)."""

    ignored_inputs = (1, 2)
    const_inputs = (1, 2)
    value_input, axis_input = 0, 2


@op_handler("Tile")
class Tile(DataMover):
    """The input repeated multiples[d] times along each dimension d: dimension d of the
    output is walked as (copy t, index i) with output subscript t * n + i, all affine, and
    reads input index i, so the output is written in order."""

    ignored_inputs = (1,)
    const_inputs = (1,)

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        shape = graph.tensor_shape(node.inputs[0])
        reps = const_ints(graph, node.inputs[1], "multiples")
        if len(reps) != len(shape) or any(m < 0 for m in reps):
            raise Unsupported(f"multiples {reps} for an input of rank {len(shape)}")
        if [n * m for n, m in zip(shape, reps)] != list(node.out_shapes[0]):
            raise Unsupported(f"output {list(node.out_shapes[0])} is not {list(shape)} "
                              f"tiled {reps} times")
        if numel(node.out_shapes[0]) == 0:
            raise Unsupported(f"empty result {list(node.out_shapes[0])}")

    def check_batch(self, node: Node, graph: Graph) -> None:
        if const_ints(graph, node.inputs[1], "multiples")[:1] != [1]:
            raise Unsupported("Tile that repeats along the dynamic batch dimension")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        reps = const_ints(graph, node.inputs[1], "multiples")
        loops, extents, out_sub, in_sub = [], [], [], []
        for d, (n, m) in enumerate(zip(shape, reps)):
            i = f"i{d}"
            if m > 1:
                loops.append(f"t{d}")
                extents.append(m)
                out_sub.append(f"t{d} * {n} + {i}")
            else:
                out_sub.append(i)
            loops.append(i)
            extents.append(n)
            in_sub.append(i)
        body = render("ops/remap.c.j2", idx=loops, shape=extents, out="y", inp="x",
                      out_sub=out_sub, in_sub=in_sub)
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", shape, ct)],
                          [ArrayParam("y", tuple(node.out_shapes[0]), ct)],
                          summary=f"Tile {list(shape)} by {reps}")


@op_handler("Unpack")
class Unpack(DataMover):
    """tf.unstack: output k is the input at index k of `axis`, that axis removed."""

    def _axis(self, node: Node, graph: Graph) -> int:
        rank = len(graph.tensor_shape(node.inputs[0]))
        return checked_axis(node.attr["axis"].i if "axis" in node.attr else 0, rank, "axis")

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        shape = list(graph.tensor_shape(node.inputs[0]))
        axis = self._axis(node, graph)
        rest = shape[:axis] + shape[axis + 1:]
        if len(node.out_shapes) != shape[axis] or \
                any(list(s) != rest for s in node.out_shapes):
            raise Unsupported(f"outputs {[list(s) for s in node.out_shapes]} do not unstack "
                              f"{shape} along axis {axis}")
        if numel(rest) == 0:
            raise Unsupported("empty outputs")

    def check_batch(self, node: Node, graph: Graph) -> None:
        if self._axis(node, graph) == 0:
            raise Unsupported("Unpack along the dynamic batch dimension")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        axis = self._axis(node, graph)
        rest = list(shape[:axis] + shape[axis + 1:])
        idx = index_names("i", len(rest))
        ct = self.ctype(node)
        bodies = [render("ops/slice.c.j2", idx=idx, shape=rest, out=f"y{k}", inp="x",
                         in_sub=idx[:axis] + [str(k)] + idx[axis:])
                  for k in range(shape[axis])]
        return OpFunction("\n".join(bodies), [ArrayParam("x", shape, ct)],
                          [ArrayParam(f"y{k}", tuple(rest), ct) for k in range(shape[axis])],
                          summary=f"Unpack {list(shape)} along axis {axis}")


@op_handler("Roll")
class Roll(DataMover):
    """A cyclic shift by constant amounts along constant axes (Swin's shifted windows):
    y[j] = x[(j - s) mod n] per rolled axis, written as one copy per combination of each
    axis's two ranges, j < s (reads j - s + n) and j >= s (reads j - s), all affine."""

    ignored_inputs = (1, 2)
    const_inputs = (1, 2)

    def _shifts(self, node: Node, graph: Graph) -> dict[int, int]:
        """{axis: shift in [1, n)}: TF adds up shifts along the same axis."""
        shape = graph.tensor_shape(node.inputs[0])
        shift = np.asarray(graph.const_value(node.inputs[1])).reshape(-1)
        axes = np.asarray(graph.const_value(node.inputs[2])).reshape(-1)
        if shift.size != axes.size or shift.dtype.kind not in "iu" or axes.dtype.kind not in "iu":
            raise Unsupported(f"shift {shift.tolist()} and axis {axes.tolist()}")
        out: dict[int, int] = {}
        for s, a in zip(shift.tolist(), axes.tolist()):
            a = checked_axis(int(a), len(shape), "axis")
            out[a] = out.get(a, 0) + int(s)
        return {a: s % shape[a] for a, s in out.items() if shape[a] and s % shape[a]}

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if numel(graph.tensor_shape(node.inputs[0])) == 0:
            raise Unsupported("an empty tensor")
        self._shifts(node, graph)

    def check_batch(self, node: Node, graph: Graph) -> None:
        if 0 in self._shifts(node, graph):
            raise Unsupported("Roll along the dynamic batch dimension")

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        shifts = self._shifts(node, graph)
        idx = index_names("i", len(shape))
        bodies = []
        # Per rolled axis: (loop extent, output subscript, input subscript) of each range.
        ranges = []
        for d, n in enumerate(shape):
            s = shifts.get(d)
            if s is None:
                ranges.append([(n, idx[d], idx[d])])
            else:
                ranges.append([(s, idx[d], affine_index(idx[d], n - s, 1)),
                               (n - s, affine_index(idx[d], s, 1), idx[d])])
        for combo in itertools.product(*ranges):
            bodies.append(render("ops/remap.c.j2", idx=idx, shape=[r[0] for r in combo],
                                 out="y", inp="x", out_sub=[r[1] for r in combo],
                                 in_sub=[r[2] for r in combo]))
        ct = self.ctype(node)
        return OpFunction("\n".join(bodies), [ArrayParam("x", shape, ct)],
                          [ArrayParam("y", shape, ct)],
                          summary=f"Roll {list(shape)} by {shifts}")
