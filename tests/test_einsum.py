"""Einsums by a constant weight lowered to Reshape, BatchMatMulV2, Reshape
(rstf.frontend.einsum): the forms Keras' EinsumDense freezes to when a shape is unknown,
what is left alone, and the same numbers as TensorFlow's Einsum."""
import numpy as np
import pytest

from rstf.frontend.einsum import lower_einsums
from rstf.frontend.graph import infer_shapes
from rstf.frontend.tfutil import tf

from harness import make_graph_def, run_tf

rng = np.random.RandomState(0)


def _einsum_graph(eq: str, x_shape, w_shape, const_w: bool = True):
    def build():
        x = tf.compat.v1.placeholder(tf.float32, x_shape, name="x")
        if const_w:
            w = tf.constant(rng.randn(*w_shape).astype(np.float32))
        else:
            w = tf.compat.v1.placeholder(tf.float32, w_shape, name="w")
        tf.identity(tf.einsum(eq, x, w), name="out")
    return make_graph_def(build)


def _ops(gd) -> dict:
    return {n.name: n.op for n in gd.node}


# `last`: the op that keeps the Einsum's name (a Reshape where W has two free axes or more)
@pytest.mark.parametrize("eq,x_shape,w_shape,feed_shape,last", [
    ("abc,cde->abde", (1, 6, 8), (8, 2, 4), (1, 6, 8), "Reshape"),  # query/key/value
    ("abcd,cde->abe", (1, 6, 2, 4), (2, 4, 8), (1, 6, 2, 4), "BatchMatMulV2"),  # output
    ("abc,cd->abd", (2, 6, 8), (8, 5), (2, 6, 8), "BatchMatMulV2"),  # a plain dense layer
    ("abc,cde->abde", (None, 6, 8), (8, 2, 4), (3, 6, 8), "Reshape"),  # a dynamic batch
    ("abcd,cde->abe", (None, 6, 2, 4), (2, 4, 8), (1, 6, 2, 4), "BatchMatMulV2"),
])
def test_lowered_to_a_batched_matmul(eq, x_shape, w_shape, feed_shape, last):
    gd = _einsum_graph(eq, x_shape, w_shape)
    einsum = next(n.name for n in gd.node if n.op == "Einsum")
    out, lowered = lower_einsums(gd, ["out"], infer_shapes(gd))
    assert lowered == [einsum]
    ops = _ops(out)
    assert "Einsum" not in ops.values() and "BatchMatMulV2" in ops.values()
    assert ops[einsum] == last
    x = rng.rand(*feed_shape).astype(np.float32)
    want = run_tf(gd, {"x": x}, ["out:0"])[0]
    got = run_tf(out, {"x": x}, ["out:0"])[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("eq,x_shape,w_shape,const_w", [
    ("abc,cde->abde", (1, 6, 8), (8, 2, 4), False),   # the weight is not a constant
    ("acb,cd->abd", (1, 8, 6), (8, 5), True),          # contracted axis not x's last
    ("abc,cd->adb", (1, 6, 8), (8, 5), True),          # output in another order
    ("abc,dc->abd", (1, 6, 8), (5, 8), True),          # contracted axis not w's first
    ("...c,cd->...d", (1, 6, 8), (8, 5), True),        # an ellipsis
    ("abc,cde->abde", (1, None, 8), (8, 2, 4), True),  # an unknown length
])
def test_left_alone(eq, x_shape, w_shape, const_w):
    gd = _einsum_graph(eq, x_shape, w_shape, const_w)
    out, lowered = lower_einsums(gd, ["out"], infer_shapes(gd))
    assert lowered == [] and out is gd


def test_the_input_graph_def_is_not_changed():
    gd = _einsum_graph("abc,cde->abde", (1, 6, 8), (8, 2, 4))
    before = gd.SerializeToString()
    lower_einsums(gd, ["out"], infer_shapes(gd))
    assert gd.SerializeToString() == before
