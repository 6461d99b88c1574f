"""Generators added for model coverage: more elementwise ops, reductions, data movement."""
import numpy as np
import pytest

from harness import check_against_tf, tf
from rstf.opgen import check_node
from harness import load_graph_def, make_graph_def

rng = np.random.RandomState(99)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x"):
    return tf.compat.v1.placeholder(tf.float32, shape, name=name)


UNARY = {
    "Relu6": (tf.nn.relu6, 8.0), "Sigmoid": (tf.sigmoid, 8.0), "Tanh": (tf.tanh, 3.0),
    "Exp": (tf.exp, 3.0), "Square": (tf.square, 1.0), "Neg": (tf.negative, 1.0),
    "Abs": (tf.abs, 1.0), "Sqrt": (lambda v: tf.sqrt(tf.abs(v)), 1.0),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), ()])
def test_unary(op, shape):
    fn, scale = UNARY[op]
    x = randn(*shape) * scale

    def build():
        tf.identity(fn(ph(shape)), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("op", ["Maximum", "Minimum", "SquaredDifference"])
@pytest.mark.parametrize("sa,sb", [((2, 3, 4), ()), ((2, 3, 4), (4,)), ((4, 1), (1, 5)),
                                   ((1, 3, 1, 2), (1, 3, 5, 2))])
def test_binary_more(op, sa, sb):
    fn = {"Maximum": tf.maximum, "Minimum": tf.minimum,
          "SquaredDifference": tf.math.squared_difference}[op]
    a, b = randn(*sa), randn(*sb)

    def build():
        tf.identity(fn(ph(sa, "a"), ph(sb, "b")), name="out")

    check_against_tf(build, {"a": a, "b": b})


def test_nan_propagates_like_tensorflow():
    x = np.array([np.nan, -1.0, 0.5, 7.0, np.inf, -np.inf], np.float32)
    for fn in (tf.nn.relu, tf.nn.relu6, lambda v: tf.maximum(v, 0.0)):
        def build(fn=fn):
            tf.identity(fn(ph(x.shape)), name="out")

        gd = make_graph_def(build)
        from harness import run_generated, run_tf

        g = load_graph_def(gd, outputs=["out"])
        nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
        got = run_generated(g, nodes, {"x": x})[0]["out:0"]
        ref = run_tf(gd, {"x": x}, ["out:0"])[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])


def test_swish_and_hard_swish_compositions():
    x = randn(1, 4, 4, 8) * 4

    def swish():
        v = ph(x.shape)
        tf.identity(v * tf.sigmoid(v), name="out")

    def hard_swish():
        v = ph(x.shape)
        tf.identity(v * tf.nn.relu6(v + 3.0) / 6.0, name="out")

    check_against_tf(swish, {"x": x})
    check_against_tf(hard_swish, {"x": x})


def test_float64_is_refused_cleanly():
    def build():
        tf.identity(tf.nn.relu6(tf.compat.v1.placeholder(tf.float64, [3], name="x")), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    relu6 = next(n for n in g.nodes.values() if n.op == "Relu6")
    reason = check_node(relu6, g)
    assert reason and "float64" in reason


REDUCERS = {"Sum": tf.reduce_sum, "Max": tf.reduce_max, "Min": tf.reduce_min,
            "Prod": tf.reduce_prod, "Mean": tf.reduce_mean}


@pytest.mark.parametrize("op", sorted(REDUCERS))
@pytest.mark.parametrize("shape,axes,keep", [
    ((2, 3, 4), [-1], False), ((2, 3, 4), [2, 0], True), ((2, 3, 4), [0, 1, 2], False),
    ((3, 1, 4), [1], True), ((1, 5, 5, 8), [1, 2], False), ((4,), [], False),
])
def test_reductions(op, shape, axes, keep):
    x = randn(*shape) * (0.7 if op == "Prod" else 1.0)

    def build():
        tf.identity(REDUCERS[op](ph(shape), axes, keepdims=keep), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), [2, 0, 1]), ((1, 5, 5, 3), [0, 3, 1, 2]),
                                        ((4, 1), [1, 0]), ((2, 3), [0, 1])])
def test_transpose(shape, perm):
    x = randn(*shape)

    def build():
        tf.identity(tf.transpose(ph(shape), perm), name="out")

    check_against_tf(build, {"x": x})


SLICES = [
    lambda v: v[::-1],
    lambda v: v[..., 1:3],
    lambda v: v[:, tf.newaxis, 2],
    lambda v: v[1],
    lambda v: v[-2:, ::2, 1:-1:2],
    lambda v: v[:, 3:0:-2],
    lambda v: v[tf.newaxis, ..., -1],
]


@pytest.mark.parametrize("k", range(len(SLICES)))
def test_strided_slice(k):
    x = randn(3, 5, 4)

    def build():
        tf.identity(SLICES[k](ph(x.shape)), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("begin,size", [([0, 1, 0], [-1, 2, 4]), ([1, 0, 2], [2, 5, 1]),
                                        ([0, 0, 0], [3, 5, 4])])
def test_slice(begin, size):
    x = randn(3, 5, 4)

    def build():
        tf.identity(tf.slice(ph(x.shape), begin, size), name="out")

    check_against_tf(build, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_pack(axis):
    a, b, c = randn(2, 3), randn(2, 3), randn(2, 3)

    def build():
        tf.identity(tf.stack([ph(a.shape, "a"), ph(b.shape, "b"), ph(c.shape, "c")], axis),
                    name="out")

    check_against_tf(build, {"a": a, "b": b, "c": c})


def test_reverse():
    x = randn(2, 3, 4)

    def build():
        tf.identity(tf.reverse(ph(x.shape), [1, -1]), name="out")

    check_against_tf(build, {"x": x})


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
