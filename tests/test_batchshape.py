"""Shape arithmetic over a dynamic batch made constant (rstf/frontend/batchshape.py): what it
rewrites, what it leaves, and that the rewritten graph computes what the original did at
every batch; then a dense layer over [?, S, K] optimized end to end under a dynamic batch."""
import numpy as np
import pytest

from rstf.frontend.batchshape import _batch_free_shape, constant_batch_shapes
from rstf.frontend.tfutil import tf

from harness import make_graph_def, run_tf, save_graph_def

RNG = np.random.RandomState(0)
W = RNG.randn(16, 12).astype(np.float32)
POS = RNG.randn(8, 16).astype(np.float32)


def dense_3d():
    """Keras' Dense over [?, 8, 16]: tf.tensordot with an unknown batch computes both of its
    Reshapes' shapes from Shape(x); a position embedding broadcast to Shape(x)[0]."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
    pos = tf.broadcast_to(tf.constant(POS), tf.stack([tf.shape(x)[0], 8, 16]))
    y = tf.tensordot(x + pos, tf.constant(W), [[2], [0]])
    tf.nn.relu(tf.nn.bias_add(y, tf.constant(RNG.randn(12).astype(np.float32))), name="out")


def batch_valued():
    """A value that depends on the batch and is no Reshape's shape: Fill's dims."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    ones = tf.fill(tf.stack([tf.shape(x)[0], 3]), 2.0)
    tf.identity(x * ones, name="out")


def _ops(gd) -> list[str]:
    return [n.op for n in gd.node]


def _same_results(before, after, feeds_for, fetch="out:0"):
    for n in (1, 2, 3, 7):
        feeds = feeds_for(n)
        want = run_tf(before, feeds, [fetch])[0]
        got = run_tf(after, feeds, [fetch])[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_tensordot_and_broadcast_lose_their_shape_arithmetic():
    gd = make_graph_def(dense_3d)
    assert {"Shape", "Prod", "GatherV2", "BroadcastTo"} <= set(_ops(gd))
    out, changed = constant_batch_shapes(gd, ["out"])
    ops = _ops(out)
    assert not {"Shape", "Prod", "GatherV2", "Pack", "BroadcastTo"} & set(ops), ops
    nodes = {n.name: n for n in out.node}
    shapes = sorted(tf.make_ndarray(nodes[n.input[1]].attr["value"].tensor).tolist()
                    for n in out.node if n.op == "Reshape")
    assert shapes == [[-1, 8, 12], [-1, 16]]
    assert any(nodes.get(c) is None for c in changed)  # the BroadcastTo, bypassed
    _same_results(gd, out, lambda n: {"x": RNG.randn(n, 8, 16).astype(np.float32)})


def test_a_batch_dependent_value_that_no_reshape_reads_stays():
    gd = make_graph_def(batch_valued)
    out, changed = constant_batch_shapes(gd, ["out"])
    assert changed == [] and out is gd
    assert "Shape" in _ops(out) and "Fill" in _ops(out)


def test_a_graph_without_a_dynamic_batch_is_returned_as_it_is():
    def static():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 16], name="x")
        tf.identity(tf.tensordot(x, tf.constant(W), [[2], [0]]), name="out")

    gd = make_graph_def(static)
    assert constant_batch_shapes(gd, ["out"]) == (gd, [])


@pytest.mark.parametrize("values,want", [
    ([[4, 16], [6, 16], [10, 16]], [-1, 16]),          # 2 * batch
    ([[2, 8, 12], [3, 8, 12], [5, 8, 12]], [-1, 8, 12]),
    ([[4, 16], [6, 16], [11, 16]], None),               # not proportional to the batch
    ([[2, 2], [3, 3], [5, 5]], None),                   # two entries vary
    ([[2, -1], [3, -1], [5, -1]], None),                # a -1 already
    ([[3, 16], [4, 16], [6, 16]], None),                # batch + 1
])
def test_batch_free_shape(values, want):
    got = _batch_free_shape([np.asarray(v, np.int32) for v in values])
    assert (got is None and want is None) or got.tolist() == want


@pytest.mark.tfbuild
def test_dense_layer_over_a_dynamic_batch_is_optimized_whole(tmp_path):
    """Before the pass its Reshapes read [?, ?, 12] and the layer stayed in TensorFlow."""
    from rstf.pipeline import optimize
    import rstf

    gd = make_graph_def(dense_3d)
    path = save_graph_def(gd, str(tmp_path))
    report = optimize(path, str(tmp_path / "o"), log=lambda m: None)
    assert report["dynamic_batch"] == ["x"]
    assert report["tensordots_merged"]
    assert report["flops_covered"] == report["flops_total"] > 0
    assert report["unsupported"] == {}
    model = rstf.load(str(tmp_path / "o"))
    for n in (1, 2, 3, 5):
        x = RNG.rand(n, 8, 16).astype(np.float32)
        want = run_tf(gd, {"x": x}, ["out:0"])[0]
        got = model(x=x)
        got = np.asarray(got["out"] if isinstance(got, dict) else got[0])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
