"""ResizeNearestNeighbor where TensorFlow's index rule is affine: an integer upscale
(UpSampling2D's default, a detector's FPN) or a downscale by a constant step, so the copy is
an affine loop nest the polyhedral pass schedules with its neighbours."""
from __future__ import annotations

import numpy as np

from ..frontend.graph import Graph, Node
from .base import ArrayParam, OpFunction, Unsupported, op_handler, render
from .shape import DataMover, const_ints


def nearest_rows(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """The input row TensorFlow's CPU kernel reads for each output row
    (resize_nearest_neighbor_op.cc), computed in float32 as it does."""
    f32 = np.float32
    if align_corners and out_size > 1:
        scale = f32(in_size - 1) / f32(out_size - 1)
    else:
        scale = f32(in_size) / f32(out_size)
    o = np.arange(out_size, dtype=f32)
    pos = (o + f32(0.5)) * scale if half_pixel else o * scale
    # roundf rounds halves away from zero; every position here is >= 0.
    pos = np.floor(pos + f32(0.5)) if align_corners else np.floor(pos)
    rows = np.minimum(pos.astype(np.int64), in_size - 1)
    return np.maximum(rows, 0) if half_pixel else rows


def affine_rows(rows: np.ndarray, in_size: int):
    """('repeat', s) where row o reads o // s, ('step', m, b) where it reads m * o + b, or
    None."""
    out = len(rows)
    o = np.arange(out)
    if out % in_size == 0 and np.array_equal(rows, o // (out // in_size)):
        return ("repeat", out // in_size)
    m = int(rows[1] - rows[0]) if out > 1 else 1
    if m >= 0 and np.array_equal(rows, m * o + int(rows[0])):
        return ("step", m, int(rows[0]))
    return None


@op_handler("ResizeNearestNeighbor")
class ResizeNearestNeighbor(DataMover):
    """y[n][oh][ow][c] = x[n][row(oh)][col(ow)][c] with TensorFlow's rule for row() and
    col() (align_corners, half_pixel_centers), generated where both are affine (an integer
    upscale: the output rows q*s .. q*s + s-1 read row q; or a constant step); any other
    ratio stays in TensorFlow."""

    ignored_inputs = (1,)
    const_inputs = (1,)
    keeps_samples_apart = True

    def _maps(self, node: Node, graph: Graph) -> list:
        shape = graph.tensor_shape(node.inputs[0])
        size = const_ints(graph, node.inputs[1], "size")
        if len(shape) != 4 or len(size) != 2 or min(size) < 1:
            raise Unsupported(f"size {size} for an input of shape {list(shape)}")
        flags = [bool(node.attr[a].b) if a in node.attr else False
                 for a in ("align_corners", "half_pixel_centers")]
        maps = []
        for d in (0, 1):
            rows = nearest_rows(shape[1 + d], size[d], *flags)
            m = affine_rows(rows, shape[1 + d])
            if m is None:
                raise Unsupported(f"resize {shape[1 + d]} -> {size[d]}: rows read are not "
                                  "affine in the output's")
            maps.append(m)
        return maps

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        self._maps(node, graph)

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        out_shape = tuple(node.out_shapes[0])
        loops, extents, out_sub, in_sub = ["n"], [shape[0]], ["n"], ["n"]
        for d, m in enumerate(self._maps(node, graph)):
            o = f"o{d}"
            if m[0] == "repeat":
                loops += [f"q{d}", f"r{d}"]
                extents += [shape[1 + d], m[1]]
                out_sub.append(f"q{d} * {m[1]} + r{d}")
                in_sub.append(f"q{d}")
            else:
                loops.append(o)
                extents.append(out_shape[1 + d])
                out_sub.append(o)
                in_sub.append(f"{o} * {m[1]} + {m[2]}" if m[1] != 1 else
                              (f"{o} + {m[2]}" if m[2] else o))
        loops.append("c")
        extents.append(shape[3])
        out_sub.append("c")
        in_sub.append("c")
        body = render("ops/remap.c.j2", idx=loops, shape=extents, out="y", inp="x",
                      out_sub=out_sub, in_sub=in_sub)
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", shape, ct)], [ArrayParam("y", out_shape, ct)],
                          summary=f"ResizeNearestNeighbor {list(shape)} -> {list(out_shape)}")
