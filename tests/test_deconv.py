"""Transposed convolutions lowered to a Conv2D and a depth-to-space (rstf.frontend.deconv):
the same numbers as TensorFlow's Conv2DBackpropInput for every stride, kernel and padding
form Keras' Conv2DTranspose makes, a dynamic batch, what is left alone, and a decoder
generated end to end by the polyhedral pass."""
import json

import numpy as np
import pytest

from rstf.frontend.deconv import lower_transposed_convs
from rstf.frontend.graph import infer_shapes
from rstf.frontend.tfutil import tf

from harness import make_graph_def, run_tf

rng = np.random.RandomState(7)


def _deconv_graph(x_shape, k, co, strides, padding, out_hw):
    kh, kw = k
    f = rng.standard_normal((kh, kw, co, x_shape[3])).astype(np.float32)
    n = x_shape[0]

    def build():
        x = tf.compat.v1.placeholder(tf.float32, x_shape, name="x")
        if isinstance(padding, list):
            y = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=[n, *out_hw, co], filter=f, out_backprop=x,
                strides=[1, *strides, 1], padding="EXPLICIT",
                explicit_paddings=[0, 0, *padding[0], *padding[1], 0, 0])
        else:
            y = tf.nn.conv2d_transpose(x, f, [n, *out_hw, co], [1, *strides, 1], padding)
        tf.identity(y, name="out")
    return make_graph_def(build)


CASES = [
    # x shape, kernel, out channels, strides, padding, output size
    ((1, 4, 4, 8), (2, 2), 5, (2, 2), "SAME", (8, 8)),  # U-Net's 2x2 stride-2 up-convolution
    ((1, 4, 5, 3), (3, 3), 4, (2, 2), "SAME", (8, 10)),  # 3x3 stride 2: zero taps
    ((1, 4, 5, 3), (3, 3), 4, (2, 2), "SAME", (7, 9)),  # an odd output (Keras output_padding)
    ((2, 4, 4, 3), (4, 4), 6, (2, 2), "SAME", (8, 8)),  # DCGAN's 4x4 stride 2, batch 2
    ((1, 3, 4, 2), (3, 3), 3, (2, 2), "VALID", (7, 9)),
    ((1, 5, 5, 4), (3, 3), 4, (1, 1), "SAME", (5, 5)),  # stride 1: a flipped correlation
    ((1, 3, 3, 2), (5, 3), 3, (3, 2), "VALID", (11, 7)),  # unequal strides and kernel sides
    ((1, 4, 4, 3), (3, 3), 2, (2, 2), [(1, 0), (0, 1)], (8, 8)),  # EXPLICIT
    ((1, 4, 4, 3), (1, 1), 2, (2, 2), "VALID", (7, 7)),  # a kernel smaller than the stride
]


@pytest.mark.parametrize("x_shape,k,co,strides,padding,out_hw", CASES)
def test_lowered_equals_tensorflow(x_shape, k, co, strides, padding, out_hw):
    gd = _deconv_graph(x_shape, k, co, strides, padding, out_hw)
    low, names = lower_transposed_convs(gd, ["out"], infer_shapes(gd))
    assert len(names) == 1
    ops = [n.op for n in low.node]
    assert "Conv2DBackpropInput" not in ops and ops.count("Conv2D") == 1
    assert next(n for n in low.node if n.name == names[0]).op in ("Slice", "Reshape")
    x = rng.uniform(0, 1, x_shape).astype(np.float32)
    (want,) = run_tf(gd, {"x": x}, ["out:0"])
    (got,) = run_tf(low, {"x": x}, ["out:0"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_dynamic_batch():
    f = rng.standard_normal((3, 3, 4, 2)).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 4, 2], name="x")
        n = tf.shape(x)[0]
        tf.identity(tf.nn.conv2d_transpose(x, f, tf.stack([n, 8, 8, 4]), 2, "SAME"),
                    name="out")

    gd = make_graph_def(build)
    from rstf.frontend.fold import fold_constants  # the output size is computed from Shape
    from rstf.frontend.batchshape import constant_batch_shapes

    gd, _ = constant_batch_shapes(gd, ["out"])
    gd, _ = fold_constants(gd, ["out"])
    low, names = lower_transposed_convs(gd, ["out"], infer_shapes(gd))
    assert len(names) == 1
    assert "Shape" in [n.op for n in gd.node]
    assert not {"Shape", "Pack"} & {n.op for n in low.node}  # the sizes went with the node
    for b in (1, 3):
        x = rng.uniform(0, 1, (b, 4, 4, 2)).astype(np.float32)
        (want,) = run_tf(gd, {"x": x}, ["out:0"])
        (got,) = run_tf(low, {"x": x}, ["out:0"])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_left_alone():
    """A computed filter, and a dilated one (TF's CPU kernel refuses it anyway), stay."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 2], name="x")
        f = tf.compat.v1.placeholder(tf.float32, [2, 2, 3, 2], name="f")
        tf.identity(tf.nn.conv2d_transpose(x, f, [1, 8, 8, 3], 2, "SAME"), name="out")

    gd = make_graph_def(build)
    assert lower_transposed_convs(gd, ["out"], infer_shapes(gd)) == (gd, [])


def test_a_decoder_end_to_end(tmp_path):
    """rstf optimize generates a U-Net decoder step whole (Conv2DTranspose + BiasAdd + ReLU,
    then a concatenated skip and a 3x3 conv), and its output matches TensorFlow's."""
    from rstf import api
    from rstf.evaluation.compare import compare

    f = (rng.standard_normal((2, 2, 8, 16)) * 0.3).astype(np.float32)
    w = (rng.standard_normal((3, 3, 16, 8)) * 0.2).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 16], name="x")
        skip = tf.compat.v1.placeholder(tf.float32, [1, 12, 12, 8], name="skip")
        up = tf.nn.relu(tf.nn.bias_add(
            tf.nn.conv2d_transpose(x, f, [1, 12, 12, 8], 2, "SAME"), np.full(8, 0.1, np.float32)))
        y = tf.nn.conv2d(tf.concat([up, skip], -1), w, 1, "SAME")
        tf.identity(y, name="out")

    pb = tmp_path / "decoder.pb"
    pb.write_bytes(make_graph_def(build).SerializeToString())
    out = tmp_path / "decoder.rstf"
    api.optimize(str(pb), str(out))
    report = json.loads((out / "report.json").read_text())
    assert report["transposed_convs_lowered"] == 1
    assert report["nodes_covered"] == report["nodes_total"], report["unsupported"]
    result = compare(str(pb), str(out), latency=False)
    assert result["passed"], result
