"""rstf.evaluation.exact: a frozen graph widened to float64, run by TensorFlow
(rstf.evaluation.compare.run_exact), as the exact reference of `rstf compare` and
`rstf bench`."""
import numpy as np
import pytest
from tensorflow.core.framework import types_pb2

from harness import load_graph_def, make_graph_def, run_tf, tf
from rstf.evaluation import compare as compare_mod
from rstf.evaluation import exact as exact_mod

RNG = np.random.RandomState(3)
W = RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
M = RNG.standard_normal((8, 5)).astype(np.float32)


def conv_model():
    """A conv, an IdentityN (a type-list attribute, as Keras' swish wrapper has), a mean and
    a matmul: float32 throughout."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 4], name="x")
        y = tf.nn.conv2d(x, W, 1, "SAME")
        y, _ = tf.identity_n([tf.nn.relu(y), y])
        tf.identity(tf.matmul(tf.reduce_mean(y, [1, 2]), M) * 0.1, name="out")
    return build


def _reference(x64: np.ndarray) -> np.ndarray:
    """The model in numpy float64."""
    xp = np.pad(x64, ((0, 0), (1, 1), (1, 1), (0, 0)))
    y = np.zeros((1, 6, 6, 8))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nhwc,co->nhwo", xp[:, i:i + 6, j:j + 6], W[i, j].astype(np.float64))
    # The graph holds 0.1 as a float32 constant: its exact value is float32(0.1).
    return np.maximum(y, 0).mean((1, 2)) @ M.astype(np.float64) * float(np.float32(0.1))


def test_widen_turns_every_float_into_double():
    gd = make_graph_def(conv_model())
    wide = exact_mod.widen_graph_def(gd)
    assert gd.node[0].attr["dtype"].type == types_pb2.DT_FLOAT  # the input is left alone
    for node in wide.node:
        for attr in node.attr.values():
            assert attr.type != types_pb2.DT_FLOAT, node.name
            assert types_pb2.DT_FLOAT not in attr.list.type, node.name
            assert attr.tensor.dtype != types_pb2.DT_FLOAT, node.name
    (idn,) = [n for n in wide.node if n.op == "IdentityN"]
    assert list(idn.attr["T"].list.type) == [types_pb2.DT_DOUBLE] * 2
    weights = [tf.make_ndarray(n.attr["value"].tensor) for n in wide.node
               if n.op == "Const" and n.attr["value"].tensor.dtype == types_pb2.DT_DOUBLE]
    assert any(w.shape == W.shape and np.array_equal(w, W) for w in weights)  # exact values

    x = np.random.RandomState(0).uniform(0, 1, (1, 6, 6, 4)).astype(np.float32)
    feeds = exact_mod.widen_feeds({"x:0": x, "n:0": np.arange(3)})
    assert feeds["x:0"].dtype == np.float64 and np.array_equal(feeds["x:0"], x)
    assert feeds["n:0"].dtype == np.arange(3).dtype  # integers are not touched
    (got,) = run_tf(wide, {"x:0": feeds["x:0"]}, ["out:0"])
    (f32,) = run_tf(gd, {"x:0": x}, ["out:0"])
    ref = _reference(x.astype(np.float64))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert compare_mod.worst_rel_err([ref], [f32]) > 0  # float32 rounds; float64 is exact here
    assert compare_mod.worst_rel_err([ref], [got]) < 1e-12


def test_run_exact_and_ratio(tmp_path):
    gd = make_graph_def(conv_model())
    graph = load_graph_def(gd)
    x = np.random.RandomState(1).uniform(0, 1, (1, 6, 6, 4)).astype(np.float32)
    outs, why = compare_mod.run_exact(graph, {"x:0": x}, ["out:0"], str(tmp_path))
    assert why is None
    np.testing.assert_allclose(outs[0], _reference(x.astype(np.float64)), rtol=1e-12,
                               atol=1e-14)
    assert compare_mod.exact_ratio(2e-6, [1e-6, 4e-6]) == pytest.approx(0.5)  # TF's worse one
    assert compare_mod.exact_ratio(2e-6, [None, 1e-6]) == pytest.approx(2.0)
    assert compare_mod.exact_ratio(2e-6, [None]) is None
    assert compare_mod.exact_ratio(None, [1e-6]) is None
    assert compare_mod.exact_ratio(1e-6, [0.0]) is None


def test_a_graph_without_float64_kernels_is_reported(tmp_path):
    """FusedBatchNormV3 has no float64 kernel: the reference is unavailable, with TF's
    reason, and nothing raises."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 2], name="x")
        c = tf.constant(np.ones(2, np.float32))
        y, *_ = tf.compat.v1.nn.fused_batch_norm(x, c, c, c, c, is_training=False)
        tf.identity(y, name="out")

    graph = load_graph_def(make_graph_def(build))
    x = np.zeros((1, 4, 4, 2), np.float32)
    outs, why = compare_mod.run_exact(graph, {"x:0": x}, ["out:0"], str(tmp_path))
    assert outs is None and "float64" in why and "FusedBatchNorm" in why


def test_a_resize_is_widened_after_it(tmp_path):
    """ResizeBilinear gives float32 for a float64 input (it has no output type): the widened
    graph casts what it gives its readers, so a U-Net's reference runs."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 3, 3, 2], name="x")
        up = tf.compat.v1.image.resize_bilinear(x * 3.0, [6, 6], half_pixel_centers=True)
        tf.identity(tf.nn.conv2d(up, W[:, :, :2, :], 1, "SAME"), name="out")

    gd = make_graph_def(build)
    graph = load_graph_def(gd)
    x = np.random.RandomState(2).uniform(0, 1, (1, 3, 3, 2)).astype(np.float32)
    outs, why = compare_mod.run_exact(graph, {"x:0": x}, ["out:0"], str(tmp_path))
    assert why is None and outs[0].dtype == np.float64
    (f32,) = run_tf(gd, {"x:0": x}, ["out:0"])
    assert compare_mod.worst_rel_err([outs[0]], [f32]) < 1e-5


def test_complex64_is_widened_too(tmp_path):
    """FNet's mixing (Complex, FFT2D, Real) runs in complex128 in the reference."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 8], name="x")
        c = tf.complex(x, tf.zeros_like(x))
        tf.identity(tf.math.real(tf.signal.fft2d(c)) * 0.5, name="out")

    gd = make_graph_def(build)
    x = np.random.RandomState(4).uniform(0, 1, (1, 4, 8)).astype(np.float32)
    outs, why = compare_mod.run_exact(load_graph_def(gd), {"x:0": x}, ["out:0"], str(tmp_path))
    assert why is None and outs[0].dtype == np.float64
    want = np.real(np.fft.fft2(x.astype(np.float64))) * 0.5
    np.testing.assert_allclose(outs[0], want, rtol=1e-12, atol=1e-12)


def test_a_float64_graph_over_protobufs_limit_is_reported(tmp_path, monkeypatch):
    """Widened, a 1.4 GB model (ConvNeXtXLarge) is over protobuf's 2 GiB: the reference is
    unavailable with that reason, not a parse error of the file written."""
    from rstf.frontend import graph as graph_mod

    graph = load_graph_def(make_graph_def(conv_model()))
    x = np.zeros((1, 6, 6, 4), np.float32)
    monkeypatch.setattr(graph_mod, "PROTOBUF_LIMIT", 64)
    outs, why = compare_mod.run_exact(graph, {"x:0": x}, ["out:0"], str(tmp_path))
    assert outs is None and "over protobuf's 2 GiB limit" in why
    assert not (tmp_path / "exact.pb").exists()
