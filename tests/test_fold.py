"""Constant folding: constant-only subexpressions become Consts, evaluated by TF itself."""
import numpy as np

from harness import make_graph_def, run_tf, save_graph_def, tf
from rstf.fold import fold_constants
from rstf.graph import load_model


def bn_like():
    x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 3], name="x")
    var = tf.identity(tf.constant([1.0, 2.0, 4.0]), name="var_read")
    gamma = tf.constant([0.5, 1.5, 2.0])
    scale = tf.math.rsqrt(var + 1e-3) * gamma
    scale = tf.reshape(scale, [1, 1, 1, 3], name="scale")
    y = x * scale + tf.constant(0.25)
    tf.identity(y, name="out")
    tf.identity(tf.constant(3.0) * 2.0, name="const_out")  # a constant model output


def test_fold_bn_chain(tmp_path):
    gd = make_graph_def(bn_like)
    folded_gd, folded = fold_constants(gd, keep=["out", "const_out"])
    ops = {n.name: n.op for n in folded_gd.node}
    assert ops["scale"] == "Const" and "var_read" not in ops and "Rsqrt" not in ops.values()
    assert ops["const_out"] == "Const"
    assert "scale" in folded
    x = np.random.RandomState(0).standard_normal((1, 4, 4, 3)).astype(np.float32)
    ref = run_tf(gd, {"x": x}, ["out:0", "const_out:0"])
    got = run_tf(folded_gd, {"x": x}, ["out:0", "const_out:0"])
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(r, g)  # TF computed the folded values: bit-exact


def test_load_model_fold(tmp_path):
    path = save_graph_def(make_graph_def(bn_like), str(tmp_path))
    g = load_model(path, outputs=["out"], fold=True)
    assert {n.op for n in g.nodes.values()} == {"Placeholder", "Const", "Mul", "AddV2",
                                                  "Identity"}
    assert g.nodes["out"].out_shapes == [(1, 4, 4, 3)]


def test_nothing_to_fold():
    def build():
        tf.nn.relu(tf.compat.v1.placeholder(tf.float32, [2], name="x"), name="y")

    gd = make_graph_def(build)
    same, folded = fold_constants(gd, keep=["y"])
    assert folded == [] and same is gd
