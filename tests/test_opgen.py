"""Every op generator against TensorFlow, on several shapes each (C run through ctypes)."""
import numpy as np
import pytest

from harness import check_against_tf, tf

rng = np.random.RandomState(1234)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x"):
    return tf.compat.v1.placeholder(tf.float32, shape, name=name)


# ------------------------------------------------------------------ Conv2D
CONV_CASES = [
    # input, filter, strides, padding, dilations
    ((1, 9, 9, 3), (3, 3, 3, 4), 1, "SAME", 1),
    ((1, 9, 9, 3), (3, 3, 3, 4), 2, "SAME", 1),  # SAME with stride 2
    ((1, 10, 10, 3), (3, 3, 3, 4), 2, "SAME", 1),  # even size: asymmetric SAME padding
    ((1, 9, 9, 3), (3, 3, 3, 5), 2, "VALID", 1),
    ((2, 7, 5, 2), (5, 3, 2, 3), (2, 1), "SAME", 1),  # batch 2, non-square everything
    ((1, 8, 8, 4), (1, 1, 4, 6), 1, "VALID", 1),  # pointwise
    ((1, 11, 11, 2), (2, 2, 2, 3), 3, "SAME", 1),  # stride larger than the kernel
    ((1, 11, 11, 2), (3, 3, 2, 3), 1, "SAME", 2),  # dilation
    ((1, 12, 12, 2), (3, 3, 2, 2), 1, "VALID", (2, 3)),
    ((1, 5, 5, 1), (7, 7, 1, 2), 1, "SAME", 1),  # kernel larger than the input
]


@pytest.mark.parametrize("xs,ws,stride,padding,dil", CONV_CASES)
def test_conv2d(xs, ws, stride, padding, dil):
    w = randn(*ws)
    x = randn(*xs)

    def build():
        tf.identity(tf.nn.conv2d(ph(xs), w, strides=stride, padding=padding, dilations=dil),
                    name="out")

    check_against_tf(build, {"x": x})


def test_conv2d_explicit_padding():
    w, x = randn(3, 3, 2, 4), randn(1, 8, 8, 2)

    def build():
        tf.identity(tf.nn.conv2d(ph(x.shape), w, strides=2,
                                 padding=[[0, 0], [2, 1], [0, 3], [0, 0]]), name="out")

    check_against_tf(build, {"x": x})


def test_conv2d_valid_has_no_guards():
    """VALID windows never leave the input, so the C has no padding test at all."""
    w, x = randn(3, 3, 3, 4), randn(1, 9, 9, 3)

    def build():
        tf.identity(tf.nn.conv2d(ph(x.shape), w, strides=1, padding="VALID"), name="out")

    _, sg = check_against_tf(build, {"x": x})
    assert " if (" not in sg.source


# ------------------------------------------------------------------ MatMul
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(ta, tb):
    a = randn(*((5, 3) if ta else (3, 5)))
    b = randn(*((7, 5) if tb else (5, 7)))

    def build():
        tf.identity(tf.matmul(ph(a.shape), b, transpose_a=ta, transpose_b=tb), name="out")

    check_against_tf(build, {"x": a})


def test_matmul_two_runtime_operands():
    a, b = randn(4, 6), randn(6, 1)

    def build():
        tf.identity(tf.matmul(ph(a.shape, "a"), ph(b.shape, "b")), name="out")

    check_against_tf(build, {"a": a, "b": b})


# ------------------------------------------------------------------ pooling
POOL_CASES = [
    ((1, 9, 9, 3), 3, 2, "SAME"),
    ((1, 10, 10, 3), 3, 2, "SAME"),
    ((1, 9, 9, 3), 3, 2, "VALID"),
    ((2, 8, 6, 2), (2, 3), (2, 1), "SAME"),
    ((1, 7, 7, 2), 1, 2, "SAME"),
    ((1, 8, 8, 2), 2, 3, "SAME"),  # stride larger than the window
    ((1, 5, 5, 4), 3, 1, "SAME"),  # inception's 3x3/1 SAME average pool
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("xs,k,s,padding", POOL_CASES)
def test_pool(kind, xs, k, s, padding):
    x = randn(*xs)
    fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d

    def build():
        tf.identity(fn(ph(xs), k, s, padding), name="out")

    check_against_tf(build, {"x": x})


def test_maxpool_all_negative_padding_is_ignored():
    """Padded positions must not contribute 0 to a max over negative values."""
    x = -np.abs(randn(1, 6, 6, 2)) - 1.0

    def build():
        tf.identity(tf.nn.max_pool2d(ph(x.shape), 3, 2, "SAME"), name="out")

    check_against_tf(build, {"x": x})


# ------------------------------------------------------------------ elementwise
BINARY = {"Add": tf.add, "AddV2": tf.raw_ops.AddV2, "Sub": tf.subtract, "Mul": tf.multiply,
          "RealDiv": tf.math.truediv}
BROADCASTS = [
    ((2, 3, 4, 5), ()),  # scalar
    ((2, 3, 4, 5), (5,)),  # per channel
    ((2, 3, 4, 5), (2, 3, 4, 5)),  # full
    ((4, 1), (1, 5)),  # both sides broadcast
    ((3, 1, 5), (4, 1)),  # different ranks
    ((), (3, 2)),
]


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary(op, sa, sb):
    a, b = randn(*sa), randn(*sb)
    if op == "RealDiv":
        b = np.sign(b) * (np.abs(b) + 0.5)
    fn = BINARY[op]

    def build():
        if fn is tf.raw_ops.AddV2:
            y = fn(x=ph(sa, "a"), y=ph(sb, "b"))
        else:
            y = fn(ph(sa, "a"), ph(sb, "b"))
        tf.identity(y, name="out")

    check_against_tf(build, {"a": a, "b": b})


def test_add_specialisations_differ():
    """Fig. 3 of the paper: scalar, per-channel and full Add are three different functions."""
    x = randn(1, 4, 4, 3)
    sources = []
    for other in (randn(), randn(3), randn(1, 4, 4, 3)):
        def build(other=other):
            tf.identity(tf.add(ph(x.shape), other), name="out")

        sources.append(check_against_tf(build, {"x": x})[1].source)
    bodies = [s[s.index("static void"):s.index("void rstf_sg_0")] for s in sources]
    assert "x1[0]" in bodies[0] and "x1[i3]" in bodies[1] and "x1[i0][i1][i2][i3]" in bodies[2]


@pytest.mark.parametrize("shape", [(2, 7), (2, 3, 4), (1, 1, 1, 5)])
def test_relu_rsqrt_biasadd(shape):
    x = randn(*shape)
    bias = randn(shape[-1])

    def build():
        v = ph(shape)
        tf.identity(tf.nn.relu(tf.nn.bias_add(v, bias)), name="out")

    check_against_tf(build, {"x": x})

    def build_rsqrt():
        tf.identity(tf.math.rsqrt(ph(shape)), name="out")

    check_against_tf(build_rsqrt, {"x": np.abs(x) + 0.1})


# ------------------------------------------------------------------ reductions, softmax
@pytest.mark.parametrize("shape,axes,keep", [
    ((1, 5, 5, 8), [1, 2], False),
    ((1, 5, 5, 8), [1, 2], True),
    ((2, 3, 4), [-1], False),
    ((2, 3, 4), [2, 0], True),  # unsorted axes
    ((2, 3, 4), [0, 1, 2], False),
    ((3, 1, 4), [1], False),  # size-1 dimension
])
def test_mean(shape, axes, keep):
    x = randn(*shape)

    def build():
        tf.identity(tf.reduce_mean(ph(shape), axes, keepdims=keep), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("shape", [(2, 7), (1, 1000), (2, 3, 4), (5,)])
def test_softmax(shape):
    x = randn(*shape) * 5

    def build():
        tf.identity(tf.nn.softmax(ph(shape)), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("shape", [(1, 12, 128, 128), (128, 512), (60, 40), (40, 100),
                                   (1000, 10), (12, 64)])
def test_float_softmax_is_bit_identical_to_tensorflow(shape):
    """A float Softmax takes TensorFlow's steps: its exp, the row sum in Eigen's order, the
    processor's reciprocal estimate refined as Eigen refines it for whole packets of 8 rows,
    an exact division for the rest (60 = 7 packets + 4 rows), and the product. Sizes a
    multiple of 8: TensorFlow's exp of the last (size mod 8) elements is the C library's."""
    rng = np.random.RandomState(8)
    x = (rng.uniform(-3, 5, shape) * rng.uniform(0.1, 10, shape[:-1] + (1,))).astype(np.float32)

    def build():
        tf.identity(tf.nn.softmax(ph(shape)), name="out")

    assert_bits_of_tensorflow(build, {"x": x}, summary="Softmax")


# ------------------------------------------------------------------ data movement
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_concat(axis):
    a, b, c = randn(1, 3, 4, 2), randn(1, 3, 4, 2), randn(1, 3, 4, 2)

    def build():
        tf.identity(tf.concat([ph(a.shape, "a"), ph(b.shape, "b"), ph(c.shape, "c")], axis),
                    name="out")

    check_against_tf(build, {"a": a, "b": b, "c": c})


def test_concat_uneven_parts():
    a, b = randn(1, 2, 2, 3), randn(1, 2, 2, 5)

    def build():
        tf.identity(tf.concat([ph(a.shape, "a"), ph(b.shape, "b")], 3), name="out")

    check_against_tf(build, {"a": a, "b": b})


def test_reshape_squeeze_expand_identity():
    x = randn(1, 1, 6, 4)

    def build():
        y = tf.reshape(ph(x.shape) * 2.0, [4, 6])
        y = tf.squeeze(tf.reshape(y, [1, 24, 1]), [0, 2])
        y = tf.expand_dims(y, 0)
        tf.identity(tf.identity(y) + 1.0, name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("op", ["Mean", "Sum"])
@pytest.mark.parametrize("shape,axes", [((1, 112, 112, 32), [1, 2]), ((2, 7, 7, 64), [1, 2]),
                                        ((3, 18, 16), [1]), ((40, 24), [0]),
                                        ((1, 5, 1, 5, 8), [1, 3])])
def test_outer_float_reductions_are_bit_identical_to_tensorflow(op, shape, axes):
    """A float Sum or Mean that keeps the innermost axis (a squeeze-and-excite or global
    average pool's Mean) adds in Eigen's order, so its bits are TensorFlow's."""
    x = (np.random.RandomState(5).uniform(0, 1, shape) * 7).astype(np.float32)
    fn = {"Mean": tf.reduce_mean, "Sum": tf.reduce_sum}[op]

    def build():
        tf.identity(fn(ph(shape), axes, keepdims=True), name="out")

    assert_bits_of_tensorflow(build, {"x": x})


def assert_bits_of_tensorflow(build, feeds, summary="Eigen's order"):
    """The generated C of `build`'s graph gives TF's exact bits, and its source says
    `summary`: the path that should."""
    from harness import assert_tf_bits

    assert summary in assert_tf_bits(build, feeds).source


@pytest.mark.parametrize("op", ["Mean", "Sum"])
@pytest.mark.parametrize("shape,axes", [((1, 128, 512), [2]), ((1, 128, 768), [-1]),
                                        ((7, 33), [1]), ((5, 8), [1]), ((3, 7), [1]),
                                        ((40, 100), [1]), ((2, 10, 300), [1, 2]),
                                        ((1, 8192), [1]), ((4, 1, 4095, 1), [2]),
                                        ((2, 3, 5), [0, 1, 2])])
def test_inner_float_reductions_are_bit_identical_to_tensorflow(op, shape, axes):
    """A float Sum or Mean of the innermost axes (a layer norm's moments: rows of 512 or
    768) adds in Eigen's order (four packets, then the leftover packets, the packet's lanes,
    the columns past the last packet), so its bits are TensorFlow's."""
    # Rows of different scales, with the signs mixed, so that the order shows in the bits.
    rng = np.random.RandomState(6)
    x = (rng.uniform(-3, 5, shape) * rng.uniform(0.1, 10, shape[:-1] + (1,))).astype(np.float32)
    fn = {"Mean": tf.reduce_mean, "Sum": tf.reduce_sum}[op]

    def build():
        tf.identity(fn(ph(shape), axes, keepdims=True), name="out")

    assert_bits_of_tensorflow(build, {"x": x})
