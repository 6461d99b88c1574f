"""Transposed convolutions (`Conv2DBackpropInput`, Keras' `Conv2DTranspose`) lowered to one
Conv2D and a depth-to-space shuffle.

rstf has no code generator for Conv2DBackpropInput, and U-Nets, autoencoders and GAN
generators freeze to it. Along one spatial axis (stride s, kernel k, top padding p), input
row i and tap t write output row a = i*s + t - p. Split the output rows by phase: with
a + p = s*q + r (0 <= r < s), the taps that reach row a are t = r + s*u, reading input row
q - u. So phase r is an ordinary correlation over the input with the taps r, r + s, ...
in reverse order, and every phase has the same number of taps T = ceil(k / s) once the
taps past k are given zero weights. All s*s phases of a 2-D transposed convolution are
then one stride-1 Conv2D with T x T taps and s*s times the output channels (the
"sub-pixel convolution"):

    y = Slice(Reshape(Transpose(Reshape(Conv2D(x, G, EXPLICIT pads), [n, Qh, Qw, sh, sw, co]),
                                [0, 1, 3, 2, 4, 5]), [n, Qh*sh, Qw*sw, co]), crop)

with G[u][v][c][(rh, rw, o)] = filter[rh + sh*(T_h-1-u)][rw + sw*(T_w-1-v)][o][c] (zero past
the kernel), Q0 = p // s the first phase row, Q the phase rows that cover the output, the
Conv2D padded by T-1-Q0 above (and what it needs below), and the crop starting at p % s.
It does k*k multiply-adds an input pixel and output channel, as the transposed convolution
does, when s divides k (a 2x2 stride-2 decoder becomes a 1x1 convolution); otherwise
(ceil(k/s)*s)^2 of them, the zero taps included (3x3 stride 2: 16 for 9).

Each output is the same sum of products as TensorFlow's; their order is the Conv2D's. A
zero tap adds 0 * x, so an infinite or NaN input spreads to the outputs next to it too.

Pattern: a float32 Conv2DBackpropInput in NHWC without control inputs; dilations 1; a
constant filter; the input's and output's shapes known, or all but a dynamic batch (whose
`input_sizes`, computed from the input's Shape, then goes with the node if nothing else
reads it);
the paddings (SAME, VALID or EXPLICIT) such that the Conv2D's are not negative (TF's
own shape rules checked, otherwise the node is left for TensorFlow to report).

Contract: `lower_transposed_convs(graph_def, keep, shapes)` returns (a new GraphDef, names
of the nodes lowered); the last node of each lowering keeps the original's name. The input
GraphDef is not changed.
"""
from __future__ import annotations

import math

import numpy as np

from .lowering import DT_FLOAT, Lowering
from .names import (input_node, rebuilt, split_tensor, static_shape, unread_nodes,
                    working_copy)
from .tfutil import tf


def lower_transposed_convs(graph_def, keep, shapes: dict) -> tuple[object, list[str]]:
    """`shapes`: `graph.infer_shapes(graph_def)`."""
    gd, keep, nodes = working_copy(graph_def, keep)
    lowered, order, sizes = [], [], []
    for n in list(gd.node):
        plan = _plan(n, nodes, shapes)
        if plan is None:
            order.append(n)
            continue
        sizes.append(input_node(n.input[0]))
        order += _emit(Lowering(n, nodes), *plan)
        lowered.append(n.name)
    if not lowered:
        return graph_def, []
    gone = unread_nodes(order, sizes, keep)
    return rebuilt(gd, [n for n in order if n.name not in gone], keep), lowered


def axis_plan(size_in: int, size_out: int, k: int, s: int, pad: tuple | None):
    """Along one axis: (Q phase rows, the Conv2D's pad before, pad after, crop start) of
    the lowering, or None. `pad`: EXPLICIT's (before, after), None for SAME, () for
    VALID."""
    if pad is None:  # SAME: the forward convolution's padding, TF's GetWindowedOutputSize
        if size_in != -(-size_out // s):
            return None
        before = max((size_in - 1) * s + k - size_out, 0) // 2
    else:
        before, after = pad if pad else (0, 0)
        if size_in != (size_out + before + after - k) // s + 1:
            return None
    taps = -(-k // s)
    q0 = before // s
    rows = -(-(before + size_out) // s) - q0
    top = taps - 1 - q0
    bottom = rows + taps - 1 - size_in - top
    if top < 0 or bottom < 0:
        return None
    return rows, top, bottom, before - s * q0


def phase_filter(f: np.ndarray, sh: int, sw: int) -> np.ndarray:
    """The Conv2D's filter [T_h, T_w, ci, sh*sw*co] from the transposed convolution's
    [kh, kw, co, ci] (module docstring)."""
    kh, kw, co, ci = f.shape
    th, tw = -(-kh // sh), -(-kw // sw)
    g = np.zeros((th, tw, ci, sh, sw, co), f.dtype)
    for u in range(th):
        for v in range(tw):
            for rh in range(sh):
                for rw in range(sw):
                    a, b = rh + sh * (th - 1 - u), rw + sw * (tw - 1 - v)
                    if a < kh and b < kw:
                        g[u, v, :, rh, rw, :] = f[a, b].T
    return g.reshape(th, tw, ci, sh * sw * co)


def _emit(low: Lowering, x: str, f: np.ndarray, n, out_hw, strides, ph, pw) -> list:
    (sh, sw), (oh, ow) = strides, out_hw
    (qh, top, bottom, crop_h), (qw, left, right, crop_w) = ph, pw
    co = f.shape[2]
    conv = low.node("Conv2D", "phases", [x, low.const("phase_filter", phase_filter(f, sh, sw))])
    conv.attr["strides"].list.i.extend([1, 1, 1, 1])
    conv.attr["padding"].s = b"EXPLICIT"
    conv.attr["explicit_paddings"].list.i.extend([0, 0, top, bottom, left, right, 0, 0])
    conv.attr["data_format"].s = b"NHWC"
    conv.attr["dilations"].list.i.extend([1, 1, 1, 1])
    y = low.reshape(conv.name, [n, qh, qw, sh, sw, co], "phases_apart")
    y = low.transpose(y, [0, 1, 3, 2, 4, 5], "interleaved")
    y = low.reshape(y, [n, qh * sh, qw * sw, co], "upsampled")
    if (crop_h, crop_w, qh * sh, qw * sw) != (0, 0, oh, ow):
        s = low.node("Slice", "cropped", [y, low.const("crop_begin", np.asarray(
            [0, crop_h, crop_w, 0], np.int32)), low.const("crop_size", np.asarray(
                [-1, oh, ow, co], np.int32))])
        s.attr["Index"].type = tf.int32.as_datatype_enum
    return low.finish()


def _plan(n, nodes: dict, shapes: dict):
    """`_emit`'s arguments after the Lowering, or None where the pattern fails."""
    if n.op != "Conv2DBackpropInput" or n.attr["T"].type != DT_FLOAT:
        return None
    data = list(n.input)
    if len(data) != 3 or any(t.startswith("^") for t in data):
        return None
    if n.attr["data_format"].s not in (b"", b"NHWC"):
        return None
    if any(d != 1 for d in n.attr["dilations"].list.i):
        return None
    strides = list(n.attr["strides"].list.i)
    if len(strides) != 4 or strides[0] != 1 or strides[3] != 1 or min(strides) < 1:
        return None
    c = nodes.get(input_node(data[1]))
    if c is None or c.op != "Const" or split_tensor(data[1])[1]:
        return None
    f = tf.make_ndarray(c.attr["value"].tensor)
    xs = static_shape(shapes, data[2], batch=True)
    sizes = static_shape(shapes, n.name + ":0", batch=True)
    if f.dtype != np.float32 or f.ndim != 4 or xs is None or sizes is None or \
            len(xs) != 4 or len(sizes) != 4 or xs[3] != f.shape[3] or sizes[3] != f.shape[2] \
            or sizes[0] != xs[0] or math.prod(f.shape) == 0:
        return None
    padding = n.attr["padding"].s
    if padding == b"EXPLICIT":
        e = list(n.attr["explicit_paddings"].list.i)
        if len(e) != 8 or any(e[k] for k in (0, 1, 6, 7)):
            return None
        pads = [(e[2], e[3]), (e[4], e[5])]
    elif padding in (b"SAME", b"VALID"):
        pads = [None if padding == b"SAME" else ()] * 2
    else:
        return None
    plans = [axis_plan(int(xs[1 + d]), int(sizes[1 + d]), int(f.shape[d]), strides[1 + d],
                       pads[d]) for d in (0, 1)]
    if None in plans:
        return None
    return (data[2], f, xs[0], (int(sizes[1]), int(sizes[2])), (strides[1], strides[2]),
            *plans)
