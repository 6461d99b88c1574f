"""Generators added for model coverage: more elementwise ops, reductions, data movement."""
import numpy as np
import pytest

from harness import (assert_tf_bits, check_against_tf, generated_and_tf, load_graph_def,
                     make_graph_def, run_generated, run_tf, tf)
from rstf.opgen import check_node, get_handler

rng = np.random.RandomState(99)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x", dtype=tf.float32):
    return tf.compat.v1.placeholder(dtype, shape, name=name)


# ------------------------------------------------------------------ elementwise
UNARY = {
    "Sigmoid": (tf.sigmoid, 8.0), "Tanh": (tf.tanh, 3.0), "Exp": (tf.exp, 3.0),
    "Square": (tf.square, 1.0), "Neg": (tf.negative, 1.0), "Abs": (tf.abs, 1.0),
    "Sqrt": (lambda v: tf.sqrt(tf.abs(v)), 1.0),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), ()])
def test_unary(op, shape):
    fn, scale = UNARY[op]
    x = randn(*shape) * scale

    def build():
        tf.identity(fn(ph(shape)), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Exp", "Erf"])
def test_transcendental_elementwise_bit_identical_to_tensorflow(op):
    """Float Sigmoid, Tanh, Exp and Erf give TensorFlow's own bits (rstf/cgen/tfmath.py),
    sigmoid(-20) ~ 2e-9 included. 4000 elements: TensorFlow's last (size mod 8) take its
    scalar path, which for exp and sigmoid differs from its vector path."""
    x = np.linspace(-20, 20, 4000, dtype=np.float32)
    fn = {"Sigmoid": tf.sigmoid, "Tanh": tf.tanh, "Exp": tf.exp, "Erf": tf.math.erf}[op]

    def build():
        tf.identity(fn(ph(x.shape)), name="out")

    assert_tf_bits(build, {"x": x})


def _tf_vector_path(fn, x):
    """fn's TensorFlow bits for each of x on Eigen's vector path (a multiple of 8 elements)."""
    pad = np.concatenate([x, np.ones(-x.size % 8, np.float32)])
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        return sess.run(fn(tf.constant(pad)))[:x.size]


@pytest.mark.parametrize("op", ["Sigmoid", "Exp", "Reciprocal"])
@pytest.mark.parametrize("shape", [(4007,), (1, 1, 1, 6), (1, 3, 3, 22), (3, 5)])
def test_the_last_elements_take_tensorflows_scalar_path(op, shape):
    """A tensor's last (size mod 8) elements go through Eigen's scalar functions (Sigmoid and
    Exp: the C library's expf; Reciprocal: a division). Those elements are inputs where the
    scalar path's bits differ from the vector path's, so only the scalar path passes."""
    import ctypes

    expf = ctypes.CDLL("libm.so.6").expf
    expf.restype, expf.argtypes = ctypes.c_float, [ctypes.c_float]
    fn = {"Sigmoid": tf.sigmoid, "Exp": tf.exp, "Reciprocal": tf.math.reciprocal}[op]

    def scalar(v):
        if op == "Exp":
            return np.float32(expf(v))
        if op == "Reciprocal":
            return np.float32(1) / v
        e = np.float32(expf(min(v, np.float32(16.6355324))))
        return e / (np.float32(1) + e)
    lo, hi = {"Sigmoid": (-20, 20), "Exp": (-20, 20), "Reciprocal": (0.5, 2)}[op]
    cands = np.random.RandomState(7).uniform(lo, hi, 4000).astype(np.float32)
    vec = _tf_vector_path(fn, cands)
    differ = [v for v, w in zip(cands, vec) if scalar(v).view(np.uint32) != w.view(np.uint32)]
    size = int(np.prod(shape))
    n = size % 8
    assert len(differ) >= n
    x = np.concatenate([np.random.RandomState(8).uniform(lo, hi, size - n).astype(np.float32),
                        np.array(differ[:n], np.float32)]).reshape(shape)

    def build():
        tf.identity(fn(ph(shape)), name="out")
    assert_tf_bits(build, {"x": x})


def test_rsqrt_bit_identical_to_tensorflow():
    """Float Rsqrt is the processor's estimate refined as TensorFlow refines it
    (rstf/cgen/tfmath.py): the same bits on the same machine, where 1 / sqrtf differs."""
    x = np.linspace(1e-3, 50, 4000, dtype=np.float32)

    def build():
        tf.identity(tf.math.rsqrt(ph(x.shape)), name="out")

    assert_tf_bits(build, {"x": x})


@pytest.mark.parametrize("fn", [tf.math.reciprocal, lambda v: tf.pow(v, -1.0)],
                         ids=["Reciprocal", "Pow-1"])
def test_reciprocal_bit_identical_to_tensorflow(fn):
    """Float Reciprocal (and x^-1, which Grappler rewrites to it) is the processor's estimate
    refined as TensorFlow refines it (rstf/cgen/tfmath.py), where 1 / x differs from
    TensorFlow's on a third of the inputs; zeros and infinities give TensorFlow's too.
    4000 elements: TensorFlow's last (size mod 8) take its exact division."""
    rng = np.random.RandomState(4)
    mags = 10.0 ** rng.uniform(-30, 30, 3994)
    x = np.concatenate([mags * rng.choice([-1, 1], mags.size),
                        [0.0, -0.0, np.inf, -np.inf, 1.0, 3.0]]).astype(np.float32)

    def build():
        tf.identity(fn(ph(x.shape)), name="out")

    assert_tf_bits(build, {"x": x})


@pytest.mark.parametrize("op", ["Maximum", "Minimum", "SquaredDifference"])
@pytest.mark.parametrize("sa,sb", [((2, 3, 4), ()), ((2, 3, 4), (4,)), ((4, 1), (1, 5)),
                                   ((1, 3, 1, 2), (1, 3, 5, 2)), ((), ())])
def test_binary_more(op, sa, sb):
    fn = {"Maximum": tf.maximum, "Minimum": tf.minimum,
          "SquaredDifference": tf.math.squared_difference}[op]
    a, b = randn(*sa), randn(*sb)

    def build():
        tf.identity(fn(ph(sa, "a"), ph(sb, "b")), name="out")

    check_against_tf(build, {"a": a, "b": b})


def test_nan_propagates_like_tensorflow():
    x = np.array([np.nan, -1.0, 0.5, 7.0, np.inf, -np.inf], np.float32)
    fns = (tf.nn.relu, lambda v: tf.maximum(v, 0.0), lambda v: tf.minimum(0.0, v),
           lambda v: tf.maximum(0.0, v), lambda v: tf.minimum(v, 0.0), tf.sigmoid, tf.tanh,
           tf.abs, lambda v: tf.reduce_max(tf.reshape(v, [2, 3]), 1),
           lambda v: tf.reduce_min(tf.reshape(v, [2, 3]), 1))
    for fn in fns:
        def build(fn=fn):
            tf.identity(fn(ph(x.shape)), name="out")

        got, ref = generated_and_tf(build, {"x": x})[:2]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-6)


def test_swish_and_hard_swish_compositions():
    x = randn(1, 4, 4, 8) * 4

    def swish():
        v = ph(x.shape)
        tf.identity(v * tf.sigmoid(v), name="out")

    def hard_swish():  # x * relu6(x + 3) / 6, without depending on the Relu6 generator
        v = ph(x.shape)
        tf.identity(tf.minimum(tf.maximum(v + 3.0, 0.0), 6.0) * v / 6.0, name="out")

    _, sg = check_against_tf(swish, {"x": x})
    assert "rstf_logisticf(" in sg.source
    check_against_tf(hard_swish, {"x": x})


def _node_of(build, op):
    g = load_graph_def(make_graph_def(build), outputs=["out"])
    return next(n for n in g.nodes.values() if n.op == op), g


@pytest.mark.parametrize("op,fn", [
    ("Sigmoid", tf.sigmoid), ("Maximum", lambda v: tf.maximum(v, v * 2.0)),
    ("Sum", lambda v: tf.reduce_sum(v, [0])), ("Transpose", lambda v: tf.transpose(v)),
    ("StridedSlice", lambda v: v[::-1]), ("Pack", lambda v: tf.stack([v, v])),
])
def test_float64_is_refused_cleanly(op, fn):
    def build():
        tf.identity(fn(ph([3, 2], dtype=tf.float64)), name="out")

    node, g = _node_of(build, op)
    reason = check_node(node, g)
    assert reason and "float64" in reason


# ------------------------------------------------------------------ reductions
REDUCERS = {"Sum": tf.reduce_sum, "Max": tf.reduce_max, "Min": tf.reduce_min,
            "Prod": tf.reduce_prod, "Mean": tf.reduce_mean}
REDUCE_CASES = [
    ((2, 3, 4), [-1], False),  # negative axis
    ((2, 3, 4), [2, 0], True),  # unsorted axes, keep_dims
    ((2, 3, 4), [-1, 0], False),  # unsorted and negative
    ((2, 3, 4), [0, 1, 2], False),  # rank-0 result
    ((2, 3, 4), None, True),  # every axis, keep_dims: [1, 1, 1]
    ((3, 1, 4), [1], True),  # reducing a size-1 dimension
    ((3, 1, 4), [1], False),
    ((1, 5, 5, 8), [1, 2], False),  # global pooling
    ((4,), [], False),  # no axis: the identity
    ((), [], False),  # a scalar
]


@pytest.mark.parametrize("shape,axes,keep", REDUCE_CASES)
def test_reductions(shape, axes, keep):
    """All five reducers on one case, stacked into one output (one compiler call). Prod
    reads its own operand, close to 1, so its result stays in the others' range."""
    x = randn(*shape)
    p = np.exp(0.2 * randn(*shape)).astype(np.float32)

    def build():
        v, w = ph(shape, "x"), ph(shape, "p")
        ys = [REDUCERS[op](w if op == "Prod" else v, axes, keepdims=keep)
              for op in sorted(REDUCERS)]
        tf.identity(tf.stack(ys), name="out")

    _, sg = check_against_tf(build, {"x": x, "p": p})
    if axes == []:  # a plain copy: no accumulation statement
        assert "INFINITY" not in sg.source and "y[i0] = x[i0];" in sg.source


def test_reduction_all_negative_max_and_signed_zero_sum():
    """-INFINITY, not 0, starts a max; an empty axis list keeps -0.0 (0.0 + -0.0 would not)."""
    x = -np.abs(randn(3, 4)) - 1.0

    def build():
        tf.identity(tf.reduce_max(ph(x.shape), [1]), name="out")

    check_against_tf(build, {"x": x})
    z = np.array([-0.0, 1.0], np.float32)

    def build_sum():
        tf.identity(tf.reduce_sum(ph(z.shape), []), name="out")

    got, ref = generated_and_tf(build_sum, {"x": z})[:2]
    assert np.signbit(got[0]) and np.signbit(ref[0])


@pytest.mark.parametrize("axes", [[1, 1], [1, -2]])
def test_duplicate_reduction_axes_are_refused(axes):
    """TensorFlow's kernel rejects an axis named twice at run time; so does the generator."""
    def build():
        tf.identity(tf.raw_ops.Sum(input=ph([2, 3, 4]), axis=tf.constant(axes)), name="out")

    node, g = _node_of(build, "Sum")
    assert "twice" in check_node(node, g)


def test_reduction_flops_count_input_elements():
    def build():
        tf.identity(tf.reduce_max(ph([2, 3, 4]), [1]), name="out")

    node, g = _node_of(build, "Max")
    assert get_handler("Max").flops(node, g) == 24


# ------------------------------------------------------------------ transpose
@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 4), [2, 0, 1]), ((2, 3, 4), [1, 2, 0]), ((2, 3, 4), None),  # None: reversed
    ((1, 5, 5, 3), [0, 3, 1, 2]), ((4, 1), [1, 0]), ((2, 3), [0, 1]),
    ((2, 3, 4), [-1, 0, 1]),  # negative entries count from the end, as TF's kernel does
])
def test_transpose(shape, perm):
    x = randn(*shape)

    def build():
        tf.identity(tf.transpose(ph(shape), perm), name="out")

    _, sg = check_against_tf(build, {"x": x})
    if perm == [2, 0, 1]:
        assert "y[i0][i1][i2] = x[i1][i2][i0];" in sg.source


@pytest.mark.parametrize("shape,perm,dtype,tiled", [
    ((48, 40), [1, 0], np.float32, "y[i0][16 * t + l] = x[16 * t + l][i0];"),
    ((1, 64, 3, 20), [0, 2, 3, 1], np.float32,  # attention's key: [b, h, d, s]
     "y[i0][i1][i2][16 * t + l] = x[0][16 * t + l][i1][i2];"),
    ((32, 5, 7), [2, 1, 0], np.int32, "y[i0][i1][16 * t + l] = x[16 * t + l][i1][i0];"),
    ((128, 3), [1, 0], np.bool_, "y[i0][64 * t + l] = x[64 * t + l][i0];"),  # 1-byte lanes
    ((40, 24), [1, 0], np.float32, None),  # 40 is not whole tiles: the plain loops
    ((16, 24), [1, 0], np.float32, None),  # one tile: nothing to gain
    ((4, 32, 48), [1, 0, 2], np.float32, None),  # the innermost axis stays innermost
])
def test_transpose_in_cache_line_tiles(shape, perm, dtype, tiled):
    """A transpose that moves the input's innermost axis writes the output's last axis a
    cache line at a time (Transpose.emit); the values are TensorFlow's, exactly."""
    x = (rng.random_sample(shape) > 0.5 if dtype == np.bool_
         else (rng.standard_normal(shape) * 100).astype(dtype))

    def build():
        tf.identity(tf.transpose(ph(shape, dtype=tf.as_dtype(dtype)), perm), name="out")

    got, want = generated_and_tf(build, {"x": x})[:2]
    np.testing.assert_array_equal(got, want)
    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    if tiled:
        assert tiled in sg.source
    else:
        assert " t < " not in sg.source


def test_transpose_refuses_a_non_permutation():
    def build():
        tf.identity(tf.raw_ops.Transpose(x=ph([2, 3]), perm=tf.constant([0, 0])), name="out")

    node, g = _node_of(build, "Transpose")
    assert check_node(node, g)


# ------------------------------------------------------------------ strided slice
SLICES = {
    "reverse": (lambda v: v[::-1], "x[2 - i0][i1][i2]"),
    "ellipsis": (lambda v: v[..., 1:3], "x[i0][i1][i2 + 1]"),
    "newaxis_index": (lambda v: v[:, tf.newaxis, 2], "x[i0][2][i2]"),
    "index": (lambda v: v[1], "x[1][i0][i1]"),
    "mixed": (lambda v: v[-2:, ::2, 1:-1:2], "x[i0 + 1][i1 * 2][1]"),
    "negative_stride": (lambda v: v[:, 3:0:-2], "x[i0][3 - i1 * 2][i2]"),
    "newaxis_ellipsis": (lambda v: v[tf.newaxis, ..., -1], "x[i1][i2][3]"),
    "scalar": (lambda v: v[1, -1, 2], "y[0] = x[1][4][2];"),
    "clamped": (lambda v: v[-10:10, 4:100, ::-3], "x[i0][4][3 - i2 * 3]"),
    "all_reversed": (lambda v: v[::-1, ::-2, ::-1], "x[2 - i0][4 - i1 * 2][3 - i2]"),
    "ellipsis_middle": (lambda v: v[1:, ..., tf.newaxis, :2], "x[i0 + 1][i1][i3]"),
    "whole": (lambda v: v[...], "x[i0][i1][i2]"),
}


@pytest.mark.parametrize("name", sorted(SLICES))
def test_strided_slice(name):
    fn, expected = SLICES[name]
    x = randn(3, 5, 4)

    def build():
        tf.identity(fn(ph(x.shape)), name="out")

    _, sg = check_against_tf(build, {"x": x})
    assert expected in sg.source


def _gather_map(reads, out_shape, in_shape):
    """The flat input index each output element reads, from the generator's _Read list."""
    grids = np.indices(out_shape, dtype=np.int64)
    coords = [np.full(out_shape, r.start, np.int64) if r.out_dim is None
              else r.start + r.stride * grids[r.out_dim] for r in reads]
    for c, n in zip(coords, in_shape):
        assert ((c >= 0) & (c < n)).all(), "read out of bounds"
    return np.ravel_multi_index(coords, in_shape) if in_shape else np.zeros(out_shape, int)


def test_strided_slice_random_specs_match_tensorflow():
    """Hundreds of raw StridedSlice specs on several shapes (random masks, negative and
    out-of-range indices, negative strides). Where TensorFlow fails the generator refuses;
    otherwise it computes TensorFlow's shape and, for a non-empty result, reads exactly the
    elements TensorFlow reads. No C is compiled: the generator's per-dimension reads are
    evaluated in numpy, and TensorFlow (eager, on a tensor of flat indices) says which
    element each output came from. The nodes are built on an input of unknown rank, so
    TensorFlow's graph-time shape inference rejects none of them."""
    from rstf.opgen.base import Unsupported

    r = np.random.RandomState(7)
    shapes = [(4, 5, 6), (3, 1, 5, 2), (7,), ()]
    flats = {s: tf.constant(np.arange(np.prod(s), dtype=np.int32).reshape(s)) for s in shapes}
    specs = []
    g = tf.Graph()
    with g.as_default():
        x = ph(None)
        for k in range(250):
            n = r.randint(1, 6)
            spec = dict(begin=r.randint(-8, 9, n), end=r.randint(-8, 9, n),
                        strides=r.choice([-3, -2, -1, 1, 1, 2, 3], n))
            masks = [int(r.randint(0, 2 ** n)) & int(r.randint(0, 2 ** n)) for _ in range(5)]
            if r.rand() < 0.7:  # at most one ellipsis, usually
                masks[2] = masks[2] & -masks[2]
            spec.update(zip(("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                             "shrink_axis_mask"), masks))
            specs.append((tf.raw_ops.StridedSlice(input=x, name=f"s{k}", **spec).op.name, spec))
    graph = load_graph_def(g.as_graph_def(), outputs=[name for name, _ in specs])
    h = get_handler("StridedSlice")
    counts = {"compared": 0, "empty": 0, "refused": 0}
    for name, spec in specs:
        for shape in shapes:
            try:
                ref = tf.raw_ops.StridedSlice(input=flats[shape], **spec).numpy()
            except tf.errors.InvalidArgumentError:
                ref = None
            try:
                reads, out_shape = h.reads(graph.nodes[name], graph, shape)
            except Unsupported:
                assert ref is None, f"{shape} {spec}: refused, TF computes {ref.shape}"
                counts["refused"] += 1
                continue
            assert ref is not None, f"{shape} {spec}: TF fails but the generator accepts"
            assert tuple(out_shape) == ref.shape, (shape, spec)
            if ref.size == 0:
                counts["empty"] += 1
                continue
            np.testing.assert_array_equal(_gather_map(reads, out_shape, shape), ref,
                                          err_msg=f"{shape} {spec}")
            counts["compared"] += 1
    assert min(counts.values()) >= 100, counts


def test_strided_slice_refuses_tf_errors():
    """What TensorFlow rejects at run time is refused, not given a meaning."""
    cases = [
        dict(begin=[5], end=[6], strides=[1], shrink_axis_mask=1),  # index out of bounds
        dict(begin=[1], end=[2], strides=[-1], shrink_axis_mask=1),  # index, negative stride
        dict(begin=[0], end=[2], strides=[0]),
        dict(begin=[0, 0], end=[1, 1], strides=[1, 1], ellipsis_mask=3),  # two ellipses
    ]
    for kw in cases:
        def build(kw=kw):
            tf.identity(tf.raw_ops.StridedSlice(input=ph([4, 3]), **kw), name="out")

        try:
            node, g = _node_of(build, "StridedSlice")
        except (ValueError, tf.errors.InvalidArgumentError):
            continue  # TF's shape inference already rejects it
        assert check_node(node, g), kw


# ------------------------------------------------------------------ slice, reverse, pack
@pytest.mark.parametrize("shape,begin,size", [
    ((3, 5, 4), [0, 1, 0], [-1, 2, 4]), ((3, 5, 4), [1, 0, 2], [2, 5, 1]),
    ((3, 5, 4), [0, 0, 0], [3, 5, 4]), ((3, 5, 4), [2, 4, 3], [-1, -1, -1]),
    ((6,), [2], [-1]), ((2, 1), [1, 0], [1, 1]),
])
def test_slice(shape, begin, size):
    x = randn(*shape)

    def build():
        tf.identity(tf.slice(ph(x.shape), begin, size), name="out")

    check_against_tf(build, {"x": x})


def test_slice_out_of_bounds_is_refused():
    def build():
        tf.identity(tf.raw_ops.Slice(input=ph([3, 4]), begin=tf.constant([2, 0]),
                                     size=tf.constant([2, -1])), name="out")

    try:
        node, g = _node_of(build, "Slice")
    except (ValueError, tf.errors.InvalidArgumentError):
        return  # rejected by TF's shape inference
    assert "out of bounds" in check_node(node, g)


@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((2, 3), 1), ((2, 3), -1), ((2, 3), -3),
                                        ((), 0), ((4,), -1)])
def test_pack(shape, axis):
    a, b, c = randn(*shape), randn(*shape), randn(*shape)

    def build():
        tf.identity(tf.stack([ph(shape, "a"), ph(shape, "b"), ph(shape, "c")], axis),
                    name="out")

    check_against_tf(build, {"a": a, "b": b, "c": c})


def test_pack_single_input():
    x = randn(2, 3)

    def build():
        tf.identity(tf.stack([ph(x.shape)], axis=-1), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("shape,axes", [((2, 3, 4), [1, -1]), ((5,), [0]), ((2, 1, 3), [1]),
                                        ((2, 3), [])])
def test_reverse(shape, axes):
    x = randn(*shape)

    def build():
        tf.identity(tf.reverse(ph(x.shape), axes), name="out")

    check_against_tf(build, {"x": x})


def test_data_movement_has_no_flops():
    def build():
        v = ph([3, 4])
        tf.identity(tf.transpose(v) + tf.transpose(v[::-1]), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    for n in g.nodes.values():
        if n.op in ("Transpose", "StridedSlice"):
            assert get_handler(n.op).flops(n, g) == 0


def test_identity_n_from_custom_gradient():
    """keras' swish in EfficientNet is wrapped in tf.custom_gradient, which emits IdentityN."""
    x = randn(1, 4, 4, 3)

    @tf.custom_gradient
    def swish(v):
        return v * tf.sigmoid(v), lambda dy: dy

    def build():
        tf.identity(swish(ph(x.shape)) + 1.0, name="out")

    _, sg = check_against_tf(build, {"x": x})
    assert "IdentityN" in sg.source
