"""Generators for depthwise and grouped convolution, Relu6, padding and inference batch norm."""
import numpy as np
import pytest

from harness import assert_tf_bits, check_against_tf, load_graph_def, make_graph_def, tf
from rstf.cgen.codegen import generate_subgraph
from rstf.opgen import check_node, get_handler
from rstf.opgen.nn import c_float_literal

rng = np.random.RandomState(2024)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x", dtype=tf.float32):
    return tf.compat.v1.placeholder(dtype, shape, name=name)


def only(graph, op):
    (node,) = [n for n in graph.nodes.values() if n.op == op]
    return node


def op_function(source: str, op: str) -> str:
    """The text of the generated op function whose comment names `op`."""
    start = source.index(f"/* {op} ")
    return source[start:source.index("\n}\n", start)]


# --------------------------------------------------------------------------- depthwise

DEPTHWISE = [
    # input, (KH, KW, multiplier), (SH, SW), padding, dilation
    ((1, 9, 9, 3), (3, 3, 1), (1, 1), "SAME", 1),
    ((1, 9, 9, 3), (3, 3, 2), (2, 2), "SAME", 1),  # depth multiplier 2, stride 2
    ((2, 8, 6, 2), (3, 5, 1), (1, 1), "VALID", 1),  # batch 2, non-square kernel and input
    ((1, 10, 10, 4), (2, 2, 1), (3, 3), "SAME", 1),  # stride larger than the kernel
    ((1, 10, 7, 2), (1, 1, 2), (3, 2), "VALID", 1),  # non-square stride > 1x1 kernel
    ((1, 11, 11, 2), (3, 3, 2), (1, 1), "SAME", 2),  # dilation
    ((1, 4, 4, 1), (5, 5, 1), (1, 1), "SAME", 1),  # kernel larger than the input
    ((2, 2, 3, 2), (5, 4, 2), (1, 1), "SAME", 1),  # kernel larger than a non-square input
    ((1, 1, 1, 3), (1, 1, 2), (1, 1), "VALID", 1),  # size-1 everything
    ((2, 6, 5, 3), (3, 2, 2), (1, 2), [1, 2, 3, 0], 1),  # EXPLICIT (top, bottom, left, right)
]


@pytest.mark.parametrize("xs,k,s,padding,d", DEPTHWISE)
def test_depthwise(xs, k, s, padding, d):
    kh, kw, m = k
    w = randn(kh, kw, xs[3], m)
    x = randn(*xs)
    explicit = [] if isinstance(padding, str) else [0, 0, *padding, 0, 0]

    def build(strides=s):
        # The raw op: tf.nn.depthwise_conv2d rewrites dilation into SpaceToBatchND.
        y = tf.raw_ops.DepthwiseConv2dNative(
            input=ph(xs), filter=w, strides=[1, *strides, 1], dilations=[1, d, d, 1],
            padding="EXPLICIT" if explicit else padding, explicit_paddings=explicit)
        return tf.identity(y, name="out" if strides == s else "full")

    # TensorFlow's Eigen kernel (this TensorFlow without oneDNN: CPUs without AVX-512)
    # refuses unequal row and column strides and dilation; the reference is then an
    # equivalent graph it runs.
    def stride_one_then_slice():
        # VALID or EXPLICIT pads do not depend on the stride: the strided output is the
        # stride-1 output at every (sh, sw)-th pixel.
        tf.identity(build((1, 1))[:, ::s[0], ::s[1], :], name="out")

    def dilated_by_space_to_batch():
        tf.identity(tf.nn.depthwise_conv2d(ph(xs), w, [1, 1, 1, 1], padding,
                                           dilations=[d, d]), name="out")

    if d > 1:
        assert s == (1, 1) and not explicit
        check_against_tf(build, {"x": x}, reference=dilated_by_space_to_batch)
    elif s[0] != s[1]:
        assert padding != "SAME"
        check_against_tf(build, {"x": x}, reference=stride_one_then_slice)
    else:
        # Where TensorFlow runs the op itself, its bits: each tap's product rounded, then
        # added, taps in (kh, kw) order from zero.
        assert_tf_bits(build, {"x": x})


@pytest.mark.parametrize("xs,k,s,padding,guards", [
    ((1, 8, 8, 2), (3, 3), 1, "VALID", []),
    ((1, 8, 8, 2), (1, 1), 1, "SAME", []),  # no padding at all
    ((1, 8, 8, 2), (3, 3), 1, "SAME",
     ["oh + kh - 1 >= 0", "oh + kh - 1 < 8", "ow + kw - 1 >= 0", "ow + kw - 1 < 8"]),
    # Even input, stride 2: SAME pads 0 before and 1 after, so only the upper bound can fail.
    ((1, 8, 8, 2), (3, 3), 2, "SAME", ["oh * 2 + kh < 8", "ow * 2 + kw < 8"]),
])
def test_depthwise_guards_only_where_needed(xs, k, s, padding, guards):
    def build():
        y = tf.raw_ops.DepthwiseConv2dNative(input=ph(xs), filter=randn(*k, xs[3], 1),
                                             strides=[1, s, s, 1], padding=padding)
        tf.identity(y, name="out")

    _, sg = check_against_tf(build, {"x": randn(*xs)})
    fn = op_function(sg.source, "DepthwiseConv2dNative")
    if guards:
        assert f"if ({' && '.join(guards)})" in fn
    else:
        assert "if (" not in fn
    # Multiplier 1: the output channel is just c. The product rounded, then added, as in
    # TensorFlow's kernel (no fused multiply-add).
    assert "y[n][oh][ow][c] += x[n][" in fn and "fmaf" not in fn


# --------------------------------------------------------------------------- grouped conv

GROUPED = [
    # input, filter HWIO (I = in-channels per group), strides, padding, dilation
    ((1, 7, 7, 4), (3, 3, 2, 6), 1, "SAME", 1),  # 2 groups
    ((1, 8, 8, 6), (3, 3, 2, 3), 2, "VALID", 1),  # 3 groups, 1 output channel each
    ((2, 5, 5, 4), (1, 1, 1, 8), 1, "SAME", 1),  # 4 groups, pointwise, batch 2
    ((1, 3, 2, 4), (5, 5, 2, 4), 1, "SAME", 1),  # kernel larger than a non-square input
    ((1, 10, 7, 6), (2, 2, 3, 4), 3, "SAME", 1),  # stride larger than the kernel
    ((1, 9, 9, 4), (3, 3, 2, 2), 1, "SAME", 2),  # dilation
    ((2, 6, 5, 4), (3, 3, 1, 4), 1, [[0, 0], [2, 1], [0, 3], [0, 0]], 1),  # G = C, EXPLICIT
]


@pytest.mark.parametrize("xs,ws,s,padding,d", GROUPED)
def test_grouped_conv(xs, ws, s, padding, d):
    # TensorFlow's CPU kernel runs grouped Conv2D in graph mode (checked with TF 2.21), so
    # it is the reference; the numpy split below double-checks the grouping itself.
    w, x = randn(*ws), randn(*xs)

    def build():
        y = tf.nn.conv2d(ph(xs), w, strides=s, padding=padding, dilations=d)
        tf.identity(y, name="out")

    _, sg = check_against_tf(build, {"x": x})
    groups, ocg = xs[3] // ws[2], ws[3] // (xs[3] // ws[2])
    fn = op_function(sg.source, "Conv2D")
    assert f"groups {groups}" in fn and f"[g * {ocg} + oc] = fmaf(" in fn
    parts = [tf.nn.conv2d(x[..., g * ws[2]:(g + 1) * ws[2]], w[..., g * ocg:(g + 1) * ocg],
                          strides=s, padding=padding, dilations=d).numpy()
             for g in range(groups)]
    whole = tf.nn.conv2d(x, w, strides=s, padding=padding, dilations=d).numpy()
    np.testing.assert_allclose(whole, np.concatenate(parts, -1), rtol=1e-5, atol=1e-5)


def test_flops():
    def build():
        y = tf.raw_ops.DepthwiseConv2dNative(input=ph([1, 8, 8, 3]), filter=randn(3, 5, 3, 2),
                                             strides=[1, 1, 1, 1], padding="SAME")
        y = tf.nn.conv2d(y, randn(3, 3, 2, 6), strides=1, padding="VALID")  # 3 groups
        tf.identity(y, name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    dw, conv = only(g, "DepthwiseConv2dNative"), only(g, "Conv2D")
    assert check_node(conv, g) is None
    assert get_handler(dw.op).flops(dw, g) == 2 * (8 * 8 * 6) * 3 * 5
    assert get_handler(conv.op).flops(conv, g) == 2 * (6 * 6 * 6) * 3 * 3 * 2


# --------------------------------------------------------------------------- Relu6

@pytest.mark.parametrize("shape", [(7,), (2, 3, 1, 5)])
def test_relu6(shape):
    x = randn(*shape) * 8.0
    x.reshape(-1)[:5] = [-1e3, 0.0, 6.0, 6.5, -0.0][:x.size]

    def build():
        tf.identity(tf.nn.relu6(ph(shape)), name="out")

    err, _ = check_against_tf(build, {"x": x})
    assert err == 0.0


# --------------------------------------------------------------------------- Pad

@pytest.mark.parametrize("shape,pads,value", [
    ((1, 5, 5, 3), [[0, 0], [1, 1], [2, 2], [0, 0]], None),
    ((1, 2, 2, 1), [[0, 0], [3, 4], [5, 0], [0, 0]], None),  # padding larger than the input
    ((2, 3), [[1, 0], [0, 2]], -1.5),
    ((4,), [[2, 3]], None),
    ((1, 3, 3, 2), [[0, 0], [0, 0], [0, 0], [0, 0]], 7.0),  # no padding at all
    ((1, 1, 2, 1, 1), [[1, 2], [0, 0], [6, 7], [0, 1], [3, 0]], 0.1),  # rank 5, size-1 dims
    ((3, 1, 2), [[9, 9], [9, 9], [9, 9]], 1e-30),  # padding far larger than every dimension
])
def test_pad(shape, pads, value):
    x = randn(*shape)

    def build():
        v = ph(shape)
        y = tf.pad(v, pads) if value is None else tf.pad(v, pads, constant_values=value)
        tf.identity(y, name="out")

    err, _ = check_against_tf(build, {"x": x})
    assert err == 0.0  # a copy: bitwise, pad value included


def test_float_literals_are_exact_and_readable():
    assert c_float_literal(-1.5) == "-1.5f"
    assert c_float_literal(6.0) == "6.0f"
    assert c_float_literal(0.1) == "0.1f"
    assert c_float_literal(np.float32(1e-3)) == "0.001f"
    assert c_float_literal(float("-inf")) == "-INFINITY" and c_float_literal(np.nan) == "NAN"
    for v in rng.standard_normal(200).astype(np.float32) * 10.0 ** rng.randint(-40, 38, 200):
        text = c_float_literal(v).removesuffix("f")
        assert np.float32(float.fromhex(text) if "0x" in text else text) == np.float32(v)


def test_pad_refusals():
    def build():
        x = ph([2, 2])
        tf.identity(tf.pad(x, [[1, 1], [0, 0]], constant_values=ph([], "v")), name="a")
        tf.identity(tf.pad(x, ph([2, 2], "p", tf.int32)), name="b")

    g = load_graph_def(make_graph_def(build), outputs=["a", "b"])
    assert "constant" in check_node(only(g, "PadV2"), g)
    assert check_node(only(g, "Pad"), g) is not None  # its output shape is not even known


# --------------------------------------------------------------------------- batch norm

def _bn_params(c):
    return randn(c), randn(c), randn(c), np.abs(randn(c)) + 0.1


@pytest.mark.parametrize("version", ["V1", "V3"])
@pytest.mark.parametrize("shape", [(1, 4, 4, 3), (2, 3, 5, 1), (1, 1, 1, 8)])
def test_fused_batch_norm(version, shape):
    x = randn(*shape)
    scale, offset, mean, var = _bn_params(shape[-1])

    def build():
        op = tf.raw_ops.FusedBatchNorm if version == "V1" else tf.raw_ops.FusedBatchNormV3
        y = op(x=ph(shape), scale=scale, offset=offset, mean=mean, variance=var,
               epsilon=1e-3, is_training=False)[0]
        tf.identity(y, name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("channels", [3, 16, 19])
def test_fused_batch_norm_gives_tensorflows_bits(channels):
    """In a graph TensorFlow computes x * a + (offset - mean * a) (Grappler's rewrite; its
    kernel alone, (x - mean) * a + offset, would be ~5e-5 off here, x far from 0 but close to
    the mean), with a = rsqrt(variance + epsilon) * scale, the rsqrt on its vector path (the
    processor's estimate refined) for whole packets of 8 channels and 1 / sqrt for the rest:
    the same bits."""
    from harness import assert_tf_bits

    shape = (2, 4, 4, channels)
    x = 1000.0 + randn(*shape)
    scale, offset, _, var = _bn_params(channels)
    scale, mean = scale * 50.0, 1000.0 + randn(channels) * 0.01

    def build():
        y = tf.compat.v1.nn.fused_batch_norm(ph(shape), scale, offset, mean, var,
                                             epsilon=1e-3, is_training=False)[0]
        tf.identity(y, name="out")

    assert_tf_bits(build, {"x": x.astype(np.float32)})


# Channels in whole 16s: on AVX2 TensorFlow sums the columns past the last 16 in another
# order (docs/limitations.md).
@pytest.mark.parametrize("k,channels,relu", [(1, 32, True), (3, 16, False)])
def test_batch_norm_after_a_conv_gives_tensorflows_bits(k, channels, relu):
    """After a Conv2D it alone reads, Grappler's remapper fuses the batch norm into the
    conv's output kernel, which computes (x - mean) * a + offset (x * a + b would be off
    in about a fifth of the outputs): the same bits. A conv with a second reader keeps
    the batch norm apart, as x * a + b."""
    from rstf.opgen.nn import fused_into_conv

    shape = (1, 6, 6, channels)
    w = (randn(k, k, 8, channels) / np.sqrt(8 * k * k)).astype(np.float32)
    scale, offset, mean, var = _bn_params(channels)

    def build(second_reader):
        def graph():
            c = tf.nn.conv2d(ph((1, 6, 6, 8)), w, 1, "SAME", name="conv")
            y = tf.compat.v1.nn.fused_batch_norm(c, scale, offset, mean, var, epsilon=1e-3,
                                                 is_training=False, name="bn")[0]
            y = tf.nn.relu(y) if relu else y
            # (a Maximum: Grappler would reorder an Add tree over y's own x * a + b)
            tf.identity(tf.maximum(y, c) if second_reader else y, name="out")
        return graph

    x = {"x": np.random.RandomState(3).random_sample((1, 6, 6, 8)).astype(np.float32)}
    for second in (False, True):
        g = load_graph_def(make_graph_def(build(second)), outputs=["out"])
        assert fused_into_conv(g.nodes["bn"], g) is not second
        assert_tf_bits(build(second), x)


def test_fused_batch_norm_ndhwc():
    shape = (1, 2, 3, 4, 5)
    x = randn(*shape)
    scale, offset, mean, var = _bn_params(5)

    def build():
        y = tf.raw_ops.FusedBatchNormV3(x=ph(shape), scale=scale, offset=offset, mean=mean,
                                        variance=var, is_training=False,
                                        data_format="NDHWC")[0]
        tf.identity(y, name="out")

    check_against_tf(build, {"x": x})


def test_batch_norm_refusals():
    c = np.ones(3, np.float32)

    def build():
        kw = dict(scale=c, offset=c, mean=c, variance=c)
        tf.raw_ops.FusedBatchNormV3(x=ph([1, 2, 2, 3], "a"), is_training=True, name="train",
                                    **kw)
        tf.raw_ops.FusedBatchNormV3(x=ph([1, 3, 2, 2], "b"), is_training=False,
                                    data_format="NCHW", name="nchw", **kw)
        bn = tf.raw_ops.FusedBatchNorm(x=ph([1, 2, 2, 3], "c"), is_training=False, name="more",
                                       **kw)
        tf.identity(bn[1], name="mean_out")
        tf.identity(bn[0], name="y_out")

    g = load_graph_def(make_graph_def(build), outputs=["train", "nchw", "mean_out", "y_out"])
    assert "training" in check_node(g.nodes["train"], g)
    assert "NCHW" in check_node(g.nodes["nchw"], g)
    assert "output 1" in check_node(g.nodes["more"], g)


# --------------------------------------------------------------------------- dtypes, subset

def test_float64_and_training_batch_norm_are_refused():
    def build():
        tf.identity(tf.pad(ph([2, 2], dtype=tf.float64), [[1, 1], [0, 0]]), name="out")
        tf.identity(tf.nn.relu6(ph([3], "r", tf.float64)), name="out2")
        c = np.ones(3, np.float32)
        tf.raw_ops.FusedBatchNormV3(x=ph([1, 2, 2, 3], "y"), scale=c, offset=c, mean=c,
                                    variance=c, is_training=True, name="bn")

    g = load_graph_def(make_graph_def(build), outputs=["out", "out2", "bn"])
    assert "float64" in check_node(only(g, "Pad"), g)
    assert "float64" in check_node(only(g, "Relu6"), g)
    assert "training" in check_node(g.nodes["bn"], g)


def test_generated_c_raises_into_the_polyhedral_model():
    from rstf.poly import raise_subgraph

    def build():
        y = tf.nn.conv2d(ph([2, 7, 6, 4]), randn(3, 3, 2, 6), 1, "SAME")  # 2 groups
        y = tf.raw_ops.DepthwiseConv2dNative(input=y, filter=randn(3, 3, 6, 2),
                                             strides=[1, 2, 2, 1], padding="SAME")
        y = tf.pad(tf.nn.relu6(y), [[0, 0], [1, 2], [3, 0], [0, 0]], constant_values=-1.5)
        c = np.abs(randn(12)) + 0.5
        y = tf.raw_ops.FusedBatchNormV3(x=y, scale=c, offset=c, mean=c, variance=c,
                                        is_training=False)[0]
        tf.identity(y, name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    sg = generate_subgraph(g, nodes, 0)
    scop = raise_subgraph(sg.source, sg.entry)
    per_op = {}
    for s in scop.statements:
        per_op.setdefault(s.op, []).append(s)
    assert {k: len(v) for k, v in per_op.items()} == {
        "Conv2D": 2, "DepthwiseConv2dNative": 2, "Relu6": 1, "PadV2": 2,
        "FusedBatchNormV3": 4, "Identity": 1}  # a: 8 channels by TF's estimate, 4 divided; b; y
    # The pad's interior copy writes exactly the input's extent at its offsets.
    assert per_op["PadV2"][1].domain.count_val().to_python() == 2 * 4 * 3 * 12


# --------------------------------------------------------------------------- pad absorption

@pytest.mark.parametrize("op,pads,padding,stride", [
    ("dw", [[0, 0], [0, 1], [0, 1], [0, 0]], "VALID", 2),  # Keras' ZeroPadding2D, stride 2
    ("dw", [[0, 0], [1, 2], [3, 0], [0, 0]], [1, 0, 0, 2], 1),  # adds to EXPLICIT padding
    ("conv", [[0, 0], [3, 3], [3, 3], [0, 0]], "VALID", 2),  # ResNet's first layer
])
def test_zero_pad_is_absorbed_by_its_convolutions(op, pads, padding, stride):
    x = randn(1, 9, 8, 3)
    w = randn(3, 3, 3, 1) if op == "dw" else randn(3, 3, 3, 4)
    explicit = [] if isinstance(padding, str) else [0, 0, *padding, 0, 0]

    def build():
        p = tf.pad(tf.nn.relu(ph(x.shape)), pads)
        kw = dict(strides=[1, stride, stride, 1], padding="EXPLICIT" if explicit else padding,
                  explicit_paddings=explicit)
        if op == "dw":
            y = tf.raw_ops.DepthwiseConv2dNative(input=p, filter=w, **kw)
        else:
            y = tf.raw_ops.Conv2D(input=p, filter=w, **kw)
        tf.identity(y, name="out")

    err, sg = check_against_tf(build, {"x": x})
    assert err <= 1e-6
    assert "(Pad)" not in sg.source and "Pad" in " ".join(sg.nodes)  # covered, not copied
    assert not any("Pad" in t.tensor for t in sg.temps)


def test_pad_with_another_reader_is_kept():
    x = randn(1, 6, 6, 2)
    w = randn(3, 3, 2, 1)

    def build():
        p = tf.pad(ph(x.shape), [[0, 0], [1, 1], [1, 1], [0, 0]])
        y = tf.raw_ops.DepthwiseConv2dNative(input=p, filter=w, strides=[1, 1, 1, 1],
                                             padding="VALID")
        tf.identity(y + tf.reduce_sum(p), name="out")

    _, sg = check_against_tf(build, {"x": x})
    assert "(Pad)" in sg.source
