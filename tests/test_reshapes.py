"""Pointwise ops with a constant operand moved ahead of a Reshape that splits the last axis
(rstf.frontend.reshapes): Keras' EinsumDense bias add and the query's scale."""
import numpy as np
import pytest
from harness import run_tf

from rstf.evaluation.fuzzcase import Options, check_kernels
from rstf.frontend.graph import infer_shapes, load_model
from rstf.frontend.modelpath import model_path
from rstf.frontend.reshapes import hoist_pointwise
from rstf.frontend.tfutil import tf

rng = np.random.RandomState(0)


def _projection(bias_shape=(4, 8), scale=True, extra_reader=False, x_shape=(1, 6, 16)):
    """x [b, s, 16] -> BatchMatMulV2 by W [16, 32] -> Reshape [b, s, 4, 8] -> + bias ->
    (* 0.35), as EinsumDense 'abc,cde->abde' and the query's scale freeze."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, x_shape, name="x")
        w = tf.constant(rng.standard_normal((16, 32)).astype(np.float32))
        m = tf.raw_ops.BatchMatMulV2(x=x, y=w, name="mm")
        r = tf.reshape(m, list(x_shape[:-1]) + [4, 8], name="split")
        y = tf.add(r, rng.standard_normal(bias_shape).astype(np.float32), name="bias")
        if scale:
            y = tf.multiply(y, np.float32(0.35), name="scale")
        tf.transpose(y, [0, 2, 1, 3], name="out")
        if extra_reader:
            tf.identity(tf.reduce_sum(r), name="out2")
    return g.as_graph_def()


def _ops(gd) -> dict:
    return {n.name: n for n in gd.node}


@pytest.mark.parametrize("bias_shape", [(4, 8), (8,), (1, 1, 4, 8), ()])
def test_bias_and_scale_move_ahead_of_the_split(bias_shape):
    gd = _projection(bias_shape=bias_shape)
    out, moved = hoist_pointwise(gd, ["out"], infer_shapes(gd))
    nodes = _ops(out)
    assert len(moved) == 2 and "split" not in nodes
    # The last op's name, which its reader uses, now names the Reshape of the moved ops'
    # result; the bias add's, read by the scale alone, went with the second step.
    assert nodes["scale"].op == "Reshape" and "bias" not in nodes
    add, mul = (nodes[n] for n in moved)
    assert add.op == "AddV2" and add.input[0] == "mm" and mul.op == "Mul"
    assert mul.input[0] == add.name and nodes["scale"].input[0] == mul.name
    # The new ops come right after the matmul in the GraphDef's order.
    order = [n.name for n in out.node]
    assert order.index("mm") < order.index(add.name) < order.index(mul.name) < order.index(
        "scale")
    x = rng.standard_normal((1, 6, 16)).astype(np.float32)
    np.testing.assert_array_equal(run_tf(out, {"x": x}, ["out:0"])[0],
                                  run_tf(gd, {"x": x}, ["out:0"])[0])


def test_the_moved_ops_run_in_the_contractions_epilogue():
    gd = _projection()
    with model_path(gd, "proj") as path:
        graph = load_model(path, outputs=["out"], fold=True)
    assert len(graph.pointwise_hoisted) == 2
    for config in ("poly", "none"):
        v = check_kernels(gd, {"x": rng.standard_normal((1, 6, 16)).astype(np.float32)},
                          Options.of(config, 400))
        assert v.passed, v.why


def test_left_alone_when_the_reshape_has_another_reader():
    gd = _projection(extra_reader=True)
    out, moved = hoist_pointwise(gd, ["out", "out2"], infer_shapes(gd))
    assert moved == [] and out is gd


def test_left_alone_when_the_constant_varies_along_a_leading_axis():
    gd = _projection(bias_shape=(6, 4, 8), scale=False)
    out, moved = hoist_pointwise(gd, ["out"], infer_shapes(gd))
    assert moved == [] and out is gd


def test_left_alone_when_the_reshape_is_a_model_output():
    gd = _projection()
    _, moved = hoist_pointwise(gd, ["out", "split"], infer_shapes(gd))
    assert moved == []


def test_the_input_graph_def_is_not_changed():
    gd = _projection()
    before = gd.SerializeToString()
    hoist_pointwise(gd, ["out"], infer_shapes(gd))
    assert gd.SerializeToString() == before
