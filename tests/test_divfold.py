"""Divisions by a constant as TensorFlow's Grappler runs them, multiplies by the constant's
reciprocal (rstf/frontend/divfold.py): TF's bits, where the division itself is not."""
import numpy as np
import pytest

from harness import assert_tf_bits, generated_and_tf, make_graph_def, tf
from rstf.frontend.divfold import reciprocal_divisions

rng = np.random.RandomState(5)


@pytest.mark.parametrize("divisor", [np.float32(6), np.linspace(1, 3, 40, dtype=np.float32)],
                         ids=["scalar", "vector"])
def test_division_by_a_constant_gives_tensorflows_bits(divisor):
    """A hard sigmoid's `relu6(x + 3) / 6` (a Keras MobileNetV3's), and a division by a
    vector of 40, whose reciprocal TF folds on its vector path for the first 32."""
    x = rng.uniform(-10, 10, (64, 40)).astype(np.float32)

    def build():
        p = tf.compat.v1.placeholder(tf.float32, x.shape, name="x")
        tf.identity(tf.nn.relu6(p + 3.0) / divisor, name="out")
    assert_tf_bits(build, {"x": x}, fold=True)
    got, ref, _ = generated_and_tf(build, {"x": x})  # the division as written
    assert (got.view(np.uint32) != ref.view(np.uint32)).any()


def test_only_float_divisions_by_a_const_are_rewritten():
    def build():
        a = tf.compat.v1.placeholder(tf.float32, [4], name="a")
        b = tf.compat.v1.placeholder(tf.float32, [4], name="b")
        i = tf.compat.v1.placeholder(tf.int32, [4], name="i")
        tf.identity(a / b, name="by_a_tensor")
        tf.identity(tf.math.floordiv(i, 3), name="integer")
        tf.identity(tf.math.divide(a, tf.constant(2.0)), name="out")
    gd = make_graph_def(build)
    out, done = reciprocal_divisions(gd)
    assert len(done) == 1 and gd is not out
    n = {x.name: x for x in out.node}[done[0]]
    assert n.op == "Mul" and n.name == done[0]
    c = {x.name: x for x in out.node}[n.input[1]]
    assert tf.make_ndarray(c.attr["value"].tensor) == np.float32(0.5)
    assert sum(x.op in ("Div", "RealDiv") for x in gd.node) == 2  # the input is not changed
