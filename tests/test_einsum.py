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


# `last`: the op that keeps the Einsum's name
@pytest.mark.parametrize("eq,x_shape,w_shape,feed_shape,last", [
    ("abc,cde->abde", (1, 6, 8), (8, 2, 4), (1, 6, 8), "Reshape"),  # query/key/value
    ("abcd,cde->abe", (1, 6, 2, 4), (2, 4, 8), (1, 6, 2, 4), "BatchMatMulV2"),  # output
    ("abc,cd->abd", (2, 6, 8), (8, 5), (2, 6, 8), "BatchMatMulV2"),  # a plain dense layer
    ("abc,cde->abde", (None, 6, 8), (8, 2, 4), (3, 6, 8), "Reshape"),  # a dynamic batch
    ("abcd,cde->abe", (None, 6, 2, 4), (2, 4, 8), (1, 6, 2, 4), "BatchMatMulV2"),
    ("acb,cd->abd", (1, 8, 6), (8, 5), (1, 8, 6), "BatchMatMulV2"),  # x transposed first
    ("abc,cd->adb", (1, 6, 8), (8, 5), (1, 6, 8), "Transpose"),  # the output transposed
    ("abc,dc->abd", (1, 6, 8), (5, 8), (1, 6, 8), "BatchMatMulV2"),  # the weight's [N, K]
])
def test_lowered_by_a_constant_weight(eq, x_shape, w_shape, feed_shape, last):
    gd = _einsum_graph(eq, x_shape, w_shape)
    _check_lowered(gd, {"x": rng.rand(*feed_shape).astype(np.float32)}, last)


# ALBERT's attention: scores and weighted values, two activations.
@pytest.mark.parametrize("eq,x_shape,w_shape,feeds,last", [
    ("BTNH,BSNH->BNTS", (2, 6, 3, 4), (2, 5, 3, 4), ((2, 6, 3, 4), (2, 5, 3, 4)),
     "BatchMatMulV2"),
    ("BNTS,BSNH->BTNH", (2, 3, 6, 5), (2, 5, 3, 4), ((2, 3, 6, 5), (2, 5, 3, 4)),
     "Transpose"),
    ("BTNH,BSNH->BNTS", (None, 6, 3, 4), (None, 5, 3, 4), ((3, 6, 3, 4), (3, 5, 3, 4)),
     "BatchMatMulV2"),
    ("bij,bjk->bik", (2, 6, 8), (2, 8, 5), ((2, 6, 8), (2, 8, 5)), "BatchMatMulV2"),
    ("bhij,bhjkl->bhikl", (2, 3, 6, 8), (2, 3, 8, 2, 2), ((2, 3, 6, 8), (2, 3, 8, 2, 2)),
     "Reshape"),
])
def test_lowered_between_two_activations(eq, x_shape, w_shape, feeds, last):
    gd = _einsum_graph(eq, x_shape, w_shape, const_w=False)
    _check_lowered(gd, {"x": rng.rand(*feeds[0]).astype(np.float32),
                        "w": rng.rand(*feeds[1]).astype(np.float32)}, last)


def _check_lowered(gd, feeds, last):
    einsum = next(n.name for n in gd.node if n.op == "Einsum")
    out, lowered = lower_einsums(gd, ["out"], infer_shapes(gd))
    assert lowered == [einsum]
    ops = _ops(out)
    assert "Einsum" not in ops.values() and "BatchMatMulV2" in ops.values()
    assert ops[einsum] == last
    want = run_tf(gd, feeds, ["out:0"])[0]
    got = run_tf(out, feeds, ["out:0"])[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("eq,x_shape,w_shape,const_w", [
    ("...c,cd->...d", (1, 6, 8), (8, 5), True),        # an ellipsis
    ("abc,cde->abde", (1, None, 8), (8, 2, 4), True),  # an unknown length
    ("abc,cd->ad", (1, 6, 8), (8, 5), True),           # b summed within x
    ("abc,c->ab", (1, 6, 8), (8,), True),              # a matrix-vector product
    ("bij,bjk->bik", (2, 6, 8), (None, 8, 5), False),  # an unknown in the second operand
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


@pytest.mark.tfbuild
def test_albert_attention_einsums_are_generated(tmp_path):
    """keras-hub's ALBERT writes its attention as einsums of two activations; lowered, the
    whole encoder is generated and matches TensorFlow."""
    pytest.importorskip("keras_hub")
    import keras
    import keras_hub
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    import rstf
    from harness import save_graph_def
    from rstf.pipeline import optimize

    keras.backend.clear_session()
    model = keras_hub.models.AlbertBackbone(
        vocabulary_size=100, num_layers=1, num_heads=2, num_groups=1,
        num_inner_repetitions=1, embedding_dim=16, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=16)
    wrng = np.random.RandomState(1)
    for w in model.weights:
        w.assign((0.2 * wrng.standard_normal(tuple(w.shape))).astype(w.dtype))
    names = ["token_ids", "segment_ids", "padding_mask"]

    @tf.function(autograph=False)
    def infer(token_ids, segment_ids, padding_mask):
        out = model({"token_ids": token_ids, "segment_ids": segment_ids,
                     "padding_mask": padding_mask}, training=False)
        return tf.identity(out["sequence_output"], name="sequence_output")

    specs = [tf.TensorSpec([2, 8], tf.int32, name=n) for n in names]
    gd = convert_variables_to_constants_v2(
        infer.get_concrete_function(*specs)).graph.as_graph_def()
    assert sum(n.op == "Einsum" for n in gd.node) == 2
    path = save_graph_def(gd, str(tmp_path))
    report = optimize(path, str(tmp_path / "o"), outputs=["sequence_output"],
                      log=lambda m: None)
    assert report["einsums_lowered"] == 2 and report["unsupported"] == {}
    feeds = {"token_ids": wrng.randint(0, 100, (2, 8)).astype(np.int32),
             "segment_ids": np.zeros((2, 8), np.int32),
             "padding_mask": np.ones((2, 8), np.int32)}
    want = run_tf(gd, feeds, ["sequence_output:0"])[0]
    got = rstf.load(str(tmp_path / "o"))(**feeds)
    got = np.asarray(got["sequence_output"] if isinstance(got, dict) else got[0])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
