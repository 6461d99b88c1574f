"""Frozen weights in the microkernels' panel layout (rstf/poly/prepack.py): the layout
itself, and the whole path (optimize -> splice with packed Consts -> TF -> compare)."""
import numpy as np
import pytest

from harness import make_graph_def, save_graph_def, tf
from rstf.evaluation.compare import compare, compare_per_subgraph
from rstf.pipeline import optimize
from rstf.poly.prepack import pack_panels

rng = np.random.RandomState(11)


def test_pack_panels_layout():
    """Tile t of a rows x cols matrix at offset t * rows * vb, its rows w_t apart; the
    last tile narrower. Shape and dtype are kept; leading dimensions are rows."""
    m = np.arange(3 * 10, dtype=np.float32).reshape(3, 10)
    got = pack_panels(m, 4)
    assert got.shape == m.shape and got.dtype == m.dtype
    want = np.concatenate([m[:, 0:4].ravel(), m[:, 4:8].ravel(), m[:, 8:10].ravel()])
    np.testing.assert_array_equal(got.ravel(), want)
    w = rng.standard_normal((3, 3, 5, 40)).astype(np.float32)
    got = pack_panels(w, 16).ravel()
    rows = w.reshape(45, 40)
    np.testing.assert_array_equal(got[:45 * 16], rows[:, :16].ravel())
    np.testing.assert_array_equal(got[2 * 45 * 16:], rows[:, 32:].ravel())  # 8 wide
    np.testing.assert_array_equal(pack_panels(w, 40), w)  # one panel: unchanged


W_A = rng.standard_normal((1, 1, 32, 72)).astype(np.float32)
W_B = rng.standard_normal((3, 3, 72, 64)).astype(np.float32) * 0.1
W_C = rng.standard_normal((64, 40)).astype(np.float32)
B_A = rng.standard_normal((32, 32)).astype(np.float32)


def _model():
    x = tf.compat.v1.placeholder(tf.float32, [1, 9, 9, 32], name="input")
    y = tf.nn.relu(tf.nn.conv2d(x, tf.constant(W_A, name="w_a"), 1, "SAME"))
    y = tf.nn.conv2d(y, tf.constant(W_B, name="w_b"), 1, "VALID")
    w_c = tf.constant(W_C, name="w_c")
    tf.nn.softmax(tf.matmul(tf.reduce_mean(y, [1, 2]), w_c), name="probs")
    # w_c is also read by a node TF keeps (Cumsum has no generator; its axis depends on
    # the input, so it is not folded), and the bias by a pointwise op of the subgraph.
    axis = tf.cast(tf.reduce_sum(x) * 0, tf.int32)
    tf.raw_ops.Cumsum(x=w_c, axis=axis, name="w_c_sums")
    b = tf.constant(B_A, name="b_a")
    r = tf.reshape(x, [81, 32])
    tf.identity(tf.matmul(r, b) + tf.reduce_sum(r[:32] * b), name="xb")


@pytest.mark.tfbuild
def test_prepacked_weights_end_to_end(tmp_path):
    model = save_graph_def(make_graph_def(_model), str(tmp_path))
    out = str(tmp_path / "out")
    report = optimize(model, out, outputs=["probs", "w_c_sums", "xb"], log=lambda m: None)
    poly = [sg["poly"] for sg in report["subgraphs"]]
    packed = {sg["inputs"][int(c[2:])].split(":")[0] for sg in report["subgraphs"]
              for c in sg["poly"]["prepacked"]}
    # b_a is also added as a vector by the subgraph: it keeps its layout.
    assert packed == {"w_a", "w_b", "w_c"}, poly
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(f"{out}/optimized.pb", "rb").read())
    nodes = {n.name: n for n in gd.node}
    # The packed weights are the ops' attributes, in panel layout (a Const input each
    # before): one attribute per weight input, no Const left feeding an op.
    ops = [n for n in gd.node if n.name.startswith("rstf/")]
    shapes = [tuple(d.size for d in n.attr[a].tensor.tensor_shape.dim)
              for n in ops for a in n.attr if a.startswith("w")]
    assert len(shapes) >= 4  # w_a, w_b, w_c packed; b_a as it is
    assert not any(nodes[i.lstrip("^").split(":")[0]].op == "Const"
                   for n in ops for i in n.input)
    # The weights only the ops read are gone (not stored twice), b_a too, which the op
    # reads as it is; w_c, read by the Cumsum TF runs, stays as it was.
    assert "w_a" not in nodes and "w_b" not in nodes and "b_a" not in nodes
    assert nodes["w_c"].op == "Const" and nodes["w_c_sums"].input[0] == "w_c"
    # Nor does any constant a covered node took as an argument (Mean's axes, Reshape's
    # shape, the slice bounds): their values are in the C. Nothing is left unread.
    read = {i.lstrip("^").split(":")[0] for n in gd.node for i in n.input}
    assert [n for n in nodes if n not in read and n not in ("probs", "w_c_sums", "xb")] == []
    result = compare(model, out, reps=1)
    assert result["passed"], result
    assert compare_per_subgraph(model, out)["passed"]
