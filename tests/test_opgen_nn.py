"""Generators for depthwise and grouped convolution, padding and inference batch norm."""
import numpy as np
import pytest

from harness import check_against_tf, load_graph_def, make_graph_def, tf
from rstf.opgen import check_node

rng = np.random.RandomState(2024)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x", dtype=tf.float32):
    return tf.compat.v1.placeholder(dtype, shape, name=name)


DEPTHWISE = [
    # input, (KH, KW, multiplier), strides, padding, dilations
    ((1, 9, 9, 3), (3, 3, 1), 1, "SAME", 1),
    ((1, 9, 9, 3), (3, 3, 2), 2, "SAME", 1),  # depth multiplier 2, stride 2
    ((2, 8, 6, 2), (3, 5, 1), 1, "VALID", 1),
    ((1, 10, 10, 4), (2, 2, 1), 3, "SAME", 1),  # stride larger than the kernel
    ((1, 11, 11, 2), (3, 3, 2), 1, "SAME", 2),  # dilation
    ((1, 4, 4, 1), (5, 5, 1), 1, "SAME", 1),  # kernel larger than the input
    ((1, 1, 1, 3), (1, 1, 2), 1, "VALID", 1),  # size-1 everything
]


@pytest.mark.parametrize("xs,k,s,padding,d", DEPTHWISE)
def test_depthwise(xs, k, s, padding, d):
    kh, kw, m = k
    w = randn(kh, kw, xs[3], m)
    x = randn(*xs)

    def build():
        # The raw op: tf.nn.depthwise_conv2d rewrites dilation into SpaceToBatchND.
        y = tf.raw_ops.DepthwiseConv2dNative(input=ph(xs), filter=w, strides=[1, s, s, 1],
                                             padding=padding, dilations=[1, d, d, 1])
        tf.identity(y, name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("xs,ws,s,padding", [
    ((1, 7, 7, 4), (3, 3, 2, 6), 1, "SAME"),  # 2 groups
    ((1, 8, 8, 6), (3, 3, 2, 3), 2, "VALID"),  # 3 groups, 1 output channel each
    ((2, 5, 5, 4), (1, 1, 1, 8), 1, "SAME"),  # 4 groups, pointwise
])
def test_grouped_conv(xs, ws, s, padding):
    """TF's CPU kernel may not run grouped convolutions; the reference is then numpy."""
    from harness import run_generated

    w, x = randn(*ws), randn(*xs)

    def build():
        tf.identity(tf.nn.conv2d(ph(xs), w, strides=s, padding=padding), name="out")

    gd = make_graph_def(build)
    g = load_graph_def(gd, outputs=["out"])
    conv = next(n for n in g.nodes.values() if n.op == "Conv2D")
    assert check_node(conv, g) is None
    got = run_generated(g, ["Conv2D", "out"], {"x": x})[0]["out:0"]
    groups = xs[3] // ws[2]
    ocg = ws[3] // groups
    parts = []
    for gi in range(groups):  # grouped conv = independent convolutions, concatenated
        xg = x[..., gi * ws[2]:(gi + 1) * ws[2]]
        wg = w[..., gi * ocg:(gi + 1) * ocg]
        parts.append(tf.nn.conv2d(xg, wg, strides=s, padding=padding).numpy())
    ref = np.concatenate(parts, axis=-1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,pads,value", [
    ((1, 5, 5, 3), [[0, 0], [1, 1], [2, 2], [0, 0]], None),
    ((1, 2, 2, 1), [[0, 0], [3, 4], [5, 0], [0, 0]], None),  # padding larger than the input
    ((2, 3), [[1, 0], [0, 2]], -1.5),
    ((4,), [[2, 3]], None),
    ((1, 3, 3, 2), [[0, 0], [0, 0], [0, 0], [0, 0]], 7.0),
])
def test_pad(shape, pads, value):
    x = randn(*shape)

    def build():
        v = ph(shape)
        y = tf.pad(v, pads) if value is None else tf.pad(v, pads, constant_values=value)
        tf.identity(y, name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("version", ["V1", "V3"])
@pytest.mark.parametrize("shape", [(1, 4, 4, 3), (2, 3, 5, 1), (1, 1, 1, 8)])
def test_fused_batch_norm(version, shape):
    c = shape[-1]
    x = randn(*shape)
    scale, offset, mean = randn(c), randn(c), randn(c)
    var = np.abs(randn(c)) + 0.1

    def build():
        op = tf.raw_ops.FusedBatchNorm if version == "V1" else tf.raw_ops.FusedBatchNormV3
        y = op(x=ph(shape), scale=scale, offset=offset, mean=mean, variance=var,
               epsilon=1e-3, is_training=False)[0]
        tf.identity(y, name="out")

    check_against_tf(build, {"x": x})


def test_float64_and_training_batch_norm_are_refused():
    def build():
        tf.identity(tf.pad(ph([2, 2], dtype=tf.float64), [[1, 1], [0, 0]]), name="out")
        c = np.ones(3, np.float32)
        tf.raw_ops.FusedBatchNormV3(x=ph([1, 2, 2, 3], "y"), scale=c, offset=c, mean=c,
                                    variance=c, is_training=True, name="bn")

    g = load_graph_def(make_graph_def(build), outputs=["out", "bn"])
    pad = next(n for n in g.nodes.values() if n.op == "Pad")
    assert "float64" in check_node(pad, g)
    assert "training" in check_node(g.nodes["bn"], g)
