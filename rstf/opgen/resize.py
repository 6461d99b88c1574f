"""Image resizes where TensorFlow's index rule is affine, so that the op is affine loop nests
the polyhedral pass schedules with its neighbours:

- ResizeNearestNeighbor: an integer upscale (UpSampling2D's default, a detector's FPN) or a
  downscale by a constant step, one copy;
- ResizeBilinear: rows (and columns) that fall into a few runs in which the two input rows
  read are affine in the output row and the interpolation weight is one constant (a
  power-of-two upscale with half-pixel centres, UpSampling2D(interpolation="bilinear") and
  a U-Net's or DeepLab's upsampling), one loop nest per pair of a row run and a column run.

Both compute TensorFlow's rows in float32 as its CPU kernels do, and check the rule on
every output row before taking the node; any other ratio stays in TensorFlow."""
from __future__ import annotations

import numpy as np

from ..frontend.graph import Graph, Node
from .base import ArrayParam, OpFunction, OpHandler, Unsupported, numel, op_handler, render
from .shape import DataMover, const_ints


def resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """Input rows per output row as TensorFlow's resizes compute it (CalculateResizeScale),
    in float32."""
    f32 = np.float32
    if align_corners and out_size > 1:
        return f32(in_size - 1) / f32(out_size - 1)
    return f32(in_size) / f32(out_size)


def nearest_rows(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """The input row TensorFlow's CPU kernel reads for each output row
    (resize_nearest_neighbor_op.cc), computed in float32 as it does."""
    f32 = np.float32
    scale = resize_scale(in_size, out_size, align_corners)
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


class _Resize:
    """What both resizes share: a 4-D input, a constant size (not an input of the C), and
    TensorFlow's rule decided per dimension (`rule`, which raises Unsupported where it is
    not affine). Mixed in before the handler's base class."""

    ignored_inputs = (1,)
    const_inputs = (1,)
    keeps_samples_apart = True

    def rule(self, n_in: int, n_out: int, align_corners: bool, half_pixel: bool):
        raise NotImplementedError

    def rules(self, node: Node, graph: Graph) -> list:
        """[rows' rule, columns' rule]."""
        shape = graph.tensor_shape(node.inputs[0])
        size = const_ints(graph, node.inputs[1], "size")
        if len(shape) != 4 or len(size) != 2 or min(size) < 1:
            raise Unsupported(f"size {size} for an input of shape {list(shape)}")
        flags = [bool(node.attr[a].b) if a in node.attr else False
                 for a in ("align_corners", "half_pixel_centers")]
        return [self.rule(shape[1 + d], size[d], *flags) for d in (0, 1)]

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        self.rules(node, graph)


@op_handler("ResizeNearestNeighbor")
class ResizeNearestNeighbor(_Resize, DataMover):
    """y[n][oh][ow][c] = x[n][row(oh)][col(ow)][c] with TensorFlow's rule for row() and
    col() (align_corners, half_pixel_centers), generated where both are affine (an integer
    upscale: the output rows q*s .. q*s + s-1 read row q; or a constant step); any other
    ratio stays in TensorFlow."""

    def rule(self, n_in: int, n_out: int, align_corners: bool, half_pixel: bool):
        m = affine_rows(nearest_rows(n_in, n_out, align_corners, half_pixel), n_in)
        if m is None:
            raise Unsupported(f"resize {n_in} -> {n_out}: rows read are not affine in the "
                              "output's")
        return m

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        out_shape = tuple(node.out_shapes[0])
        loops, extents, out_sub, in_sub = ["n"], [shape[0]], ["n"], ["n"]
        for d, m in enumerate(self.rules(node, graph)):
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


# The most runs a dimension's rows may fall into (`bilinear_runs`): a power-of-two upscale
# has four (each phase's interior, and the two clamped borders); a ratio whose weights
# differ row by row has one a row and stays in TensorFlow.
MAX_RUNS = 8


def bilinear_rows(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """(lower, upper, lerp) for each output row, as TensorFlow's CPU kernel computes them
    (resize_bilinear_op.cc, compute_interpolation_weights), in float32: the two input rows
    read and the weight of the upper one."""
    f32 = np.float32
    scale = resize_scale(in_size, out_size, align_corners)
    o = np.arange(out_size, dtype=f32)
    pos = (o + f32(0.5)) * scale - f32(0.5) if half_pixel else o * scale
    low = np.floor(pos)
    lower = np.maximum(low.astype(np.int64), 0)
    upper = np.minimum(np.ceil(pos).astype(np.int64), in_size - 1)
    return lower, upper, (pos - low).astype(f32)


def bilinear_runs(lower, upper, lerp, step: int):
    """The output rows as runs (first, count, step, lower0, dlower, upper0, dupper, lerp):
    rows first + step * t, t < count, read input rows lower0 + dlower * t and upper0 +
    dupper * t with weight lerp; each phase (the rows equal to p mod step) is cut where its
    rule changes. None when that takes more than MAX_RUNS runs."""
    runs = []
    for p in range(min(step, len(lower))):
        idx = np.arange(p, len(lower), step)

        def run_end(t0: int) -> tuple[int, int, int]:
            """(end, dlower, dupper) of the longest run from t0 (its slopes: t0's step)."""
            i0, dl, du = idx[t0], 0, 0
            if t0 + 1 < len(idx):
                dl = int(lower[idx[t0 + 1]] - lower[i0])
                du = int(upper[idx[t0 + 1]] - upper[i0])
            t1 = t0 + 1
            while (t1 < len(idx) and lerp[idx[t1]] == lerp[i0]
                   and lower[idx[t1]] == lower[i0] + dl * (t1 - t0)
                   and upper[idx[t1]] == upper[i0] + du * (t1 - t0)):
                t1 += 1
            return t1, dl, du

        t0 = 0
        while t0 < len(idx):
            t1, dl, du = run_end(t0)
            # A clamped border row whose slopes only its neighbour matches: alone, so that
            # the interior's run starts at that neighbour.
            if t1 == t0 + 2 and run_end(t0 + 1)[0] > t1:
                t1, dl, du = t0 + 1, 0, 0
            i0 = idx[t0]
            runs.append((int(i0), t1 - t0, step, int(lower[i0]), dl, int(upper[i0]), du,
                         np.float32(lerp[i0])))
            if len(runs) > MAX_RUNS:
                return None
            t0 = t1
    return runs


def _affine(v: str, a: int, d: int) -> str:
    """a + d * v as C."""
    terms = [v if d == 1 else f"{d} * {v}" if d else "", str(a) if a else ""]
    return " + ".join(t for t in terms if t) or "0"


def _float(w: np.float32) -> str:
    """A C float literal of exactly w (9 significant digits round-trip a float32)."""
    text = f"{float(w):.9g}"
    return text + ("f" if any(ch in text for ch in ".e") else ".0f")


def _lerp(a: str, b: str, w: str) -> str:
    """TensorFlow's one-dimensional step, a + (b - a) * w: a product, then a sum."""
    return f"({a} + ({b} - {a}) * {w})"


@op_handler("ResizeBilinear")
class ResizeBilinear(_Resize, OpHandler):
    """y[n][oh][ow][c] by TensorFlow's bilinear rule (compute_lerp: along the columns on
    the lower and the upper input row, then along the rows, each step a product then a
    sum), for resizes whose rows and columns each fall into at most MAX_RUNS affine runs of
    one weight (`bilinear_runs`); every other ratio stays in TensorFlow. Float32 only."""

    def rule(self, n_in: int, n_out: int, align_corners: bool, half_pixel: bool):
        step = n_out // n_in if n_out % n_in == 0 else 1
        runs = bilinear_runs(*bilinear_rows(n_in, n_out, align_corners, half_pixel), step)
        if runs is None:
            raise Unsupported(f"resize {n_in} -> {n_out}: the rows read are not affine in "
                              f"the output's in {MAX_RUNS} runs or fewer")
        return runs

    def flops(self, node: Node, graph: Graph) -> int:
        return 9 * numel(node.out_shapes[0])  # three steps: a difference, a product, a sum

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = tuple(graph.tensor_shape(node.inputs[0]))
        out_shape = tuple(node.out_shapes[0])
        rows, cols = self.rules(node, graph)
        nests = []
        for h0, nh, sh, lh, dlh, uh, duh, wh in rows:
            for w0, nw, sw, lw, dlw, uw, duw, ww in cols:
                x = [[f"x[n][{_affine('i', a, d)}][{_affine('j', b, e)}][c]"
                      for b, e in ((lw, dlw), (uw, duw))] for a, d in ((lh, dlh), (uh, duh))]
                top, bottom = (_lerp(*x[k], _float(ww)) for k in (0, 1))
                nests.append({"extents": [shape[0], nh, nw, shape[3]],
                              "out": f"y[n][{_affine('i', h0, sh)}][{_affine('j', w0, sw)}][c]",
                              "value": _lerp(top, bottom, _float(wh)),
                              "rows": f"rows {h0} + {sh}i (i < {nh}), columns {w0} + {sw}j "
                                      f"(j < {nw})"})
        body = render("ops/resize_bilinear.c.j2", nests=nests)
        return OpFunction(body, [ArrayParam("x", shape, "float")],
                          [ArrayParam("y", out_shape, "float")],
                          summary=f"ResizeBilinear {list(shape)} -> {list(out_shape)}")
