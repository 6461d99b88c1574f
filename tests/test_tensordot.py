"""Dense layers over 3-D inputs (Reshape, MatMul, Reshape) merged into one BatchMatMulV2
(rstf.frontend.tensordot)."""
import numpy as np
import pytest

from rstf.evaluation.fuzzcase import Options, check_kernels
from rstf.frontend.graph import infer_shapes, load_model
from rstf.frontend.modelpath import model_path
from rstf.frontend.tensordot import merge_tensordots
from rstf.frontend.tfutil import tf

rng = np.random.RandomState(0)


def _dense_graph(x_shape=(2, 5, 8), n=6, transpose_b=False, extra_reader=False):
    """x -> tf.tensordot(x, W) -> BiasAdd -> Relu, as Keras' Dense on a 3-D input builds it
    (`transpose_b`: the weight stored [N, K] and read through MatMul's transpose_b)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, x_shape, name="x")
        k = x_shape[-1]
        flat = tf.reshape(x, [-1, k], name="flat")
        w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
        m = tf.matmul(flat, w, transpose_b=transpose_b, name="mm")
        y = tf.reshape(m, [-1 if d is None else d for d in x_shape[:-1]] + [n], name="back")
        y = tf.nn.relu(tf.nn.bias_add(y, rng.standard_normal(n).astype(np.float32)), name="out")
        if extra_reader:
            tf.identity(tf.reduce_sum(flat, name="also"), name="out2")
    return g.as_graph_def()


def _feeds(shape=(2, 5, 8)):
    return {"x": rng.random_sample(shape).astype(np.float32)}


def _run(gd, feeds, fetch):
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(fetch, {k + ":0": v for k, v in feeds.items()})


def _loaded(gd, outputs):
    with model_path(gd, "dense") as path:
        return load_model(path, outputs=outputs, fold=True)


@pytest.mark.parametrize("transpose_b", [False, True])
def test_dense_over_3d_input_becomes_one_batch_matmul(transpose_b):
    gd = _dense_graph(transpose_b=transpose_b)
    graph = _loaded(gd, ["out"])
    assert graph.tensordots_merged == ["mm"]
    ops = {n.name: n.op for n in graph.graph_def.node}
    assert ops["back"] == "BatchMatMulV2" and "mm" not in ops and "flat" not in ops
    back = next(n for n in graph.graph_def.node if n.name == "back")
    assert back.attr["adj_y"].b is transpose_b and not back.attr["adj_x"].b
    feeds = _feeds()
    want = _run(gd, feeds, "out:0")
    got = _run(graph.graph_def, feeds, "out:0")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_merged_graph_compiles_and_matches_tensorflow():
    """rstf's C for the merged graph (BiasAdd and Relu now after the contraction itself),
    poly and textbook, against TF on the original graph."""
    gd = _dense_graph(x_shape=(1, 16, 32), n=48)
    for config in ("poly", "none"):
        v = check_kernels(gd, _feeds((1, 16, 32)), Options.of(config, 400))
        assert v.passed, v.why


def test_left_alone_when_an_intermediate_has_another_reader():
    gd = _dense_graph(extra_reader=True)
    merged, names = merge_tensordots(gd, ["out", "out2"], infer_shapes(gd))
    assert names == [] and merged is gd


def test_left_alone_when_the_reshape_is_a_model_output():
    gd = _dense_graph()
    _, names = merge_tensordots(gd, ["out", "mm"], infer_shapes(gd))
    assert names == []


def test_left_alone_for_a_2d_input():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        m = tf.matmul(tf.reshape(x, [4, 8]), rng.standard_normal((8, 3)).astype(np.float32))
        tf.reshape(m, [2, 2, 3], name="out")
    gd = g.as_graph_def()
    _, names = merge_tensordots(gd, ["out"], infer_shapes(gd))
    assert names == []


def test_merged_under_a_dynamic_batch():
    """x [?, 5, 8]: [?, 8] holds x's elements in order whatever the batch, and [?, 5, 6]
    has the batch back (the element count fixes the unknown)."""
    gd = _dense_graph(x_shape=(None, 5, 8))
    graph = _loaded(gd, ["out"])
    assert graph.tensordots_merged == ["mm"]
    for b in (1, 3):
        feeds = _feeds((b, 5, 8))
        np.testing.assert_allclose(_run(graph.graph_def, feeds, "out:0"),
                                   _run(gd, feeds, "out:0"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x_shape", [(2, None, 8), (None, None, 8)])
def test_left_alone_when_the_shapes_are_not_known(x_shape):
    gd = _dense_graph(x_shape=x_shape)
    graph = _loaded(gd, ["out"])
    assert graph.tensordots_merged == []


def test_the_input_graph_def_is_not_changed():
    gd = _dense_graph()
    before = gd.SerializeToString()
    merge_tensordots(gd, ["out"], infer_shapes(gd))
    assert gd.SerializeToString() == before
