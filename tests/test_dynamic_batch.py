"""Dynamic batch (rstf/cgen/batch.py): an unknown dimension 0 stays unknown end to end, and the
generated code picks its version (batch loop parallel or not) from N and the thread count."""
import numpy as np
import pytest

from rstf.cgen.batch import dynamic_inputs, separable_nodes
from rstf.pipeline import optimize, supported_nodes
from rstf.frontend.tfutil import tf

from harness import load_graph_def, make_graph_def, run_tf, save_graph_def

BATCHES = [1, 2, 3, 7, 8, 16, 33]


def dynamic_cnn():
    rng = np.random.RandomState(0)
    x = tf.compat.v1.placeholder(tf.float32, [None, 9, 9, 3], name="x")
    w = tf.constant(rng.randn(3, 3, 3, 8).astype(np.float32))
    y = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
    y = tf.nn.relu(tf.nn.bias_add(y, tf.constant(rng.randn(8).astype(np.float32))))
    # A diamond: split small (max_ops), a subgraph reads two batched tensors.
    y = y + tf.nn.conv2d(x, tf.constant(rng.randn(1, 1, 3, 8).astype(np.float32)),
                         [1, 1, 1, 1], "SAME")
    y = tf.nn.max_pool2d(y, 2, 2, "VALID")
    y = tf.reduce_mean(y, axis=[1, 2])
    y = tf.matmul(y, tf.constant(rng.randn(8, 5).astype(np.float32)))
    y = tf.nn.softmax(y)
    # Mixes samples: stays in TensorFlow under a dynamic batch.
    tf.identity(y - tf.reduce_mean(y, axis=0), name="out")


@pytest.fixture(scope="module")
def dyn_model(tmp_path_factory):
    return save_graph_def(make_graph_def(dynamic_cnn), str(tmp_path_factory.mktemp("dyn")))


def test_separable_rule(dyn_model):
    gd = make_graph_def(dynamic_cnn)
    dyn = load_graph_def(gd)
    assert dynamic_inputs(dyn) == {"x": (1, 9, 9, 3)}
    from rstf.frontend.graph import load_model
    one = load_model(dyn_model, {"x": (1, 9, 9, 3)}, fold=True)
    supported, _ = supported_nodes(one)
    ok, reasons = separable_nodes(dyn, one, supported)
    ops = {one.nodes[n].op for n in ok}
    assert {"Conv2D", "BiasAdd", "Relu", "MaxPool", "Mean", "MatMul", "Softmax"} <= ops
    mixers = [n for n, r in reasons.items() if "batch" in r]
    assert any(one.nodes[n].op == "Mean" for n in mixers)  # the mean over axis 0


def test_strided_slice_separable_only_when_it_takes_the_whole_batch(tmp_path):
    """At batch 1, x[:1] and x[:] read alike; the rule reads the slice spec."""
    def sliced():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 6], name="x")
        tf.identity(x[:, 0, :] * 2.0, name="first_token")
        tf.identity(x[:5, 1] * 2.0, name="head")
        tf.identity(x[1:, 1] * 2.0, name="tail")
        tf.identity(x[..., 2] * 2.0, name="ellipsis")

    from rstf.frontend.graph import load_model
    gd = make_graph_def(sliced)
    path = save_graph_def(gd, str(tmp_path))
    outs = ["first_token", "head", "tail", "ellipsis"]
    dyn = load_graph_def(gd, outs)
    one = load_model(path, outputs=outs, fold=True, batch_pins={"x": (1, 4, 6)})
    supported, _ = supported_nodes(one)
    ok, reasons = separable_nodes(dyn, one, supported)
    slices = {n for n in one.nodes if one.nodes[n].op == "StridedSlice"}
    assert slices & ok == {"strided_slice", "strided_slice_3"}  # x[:, 0, :], x[..., 2]
    assert "whole dynamic batch" in reasons["strided_slice_1"]  # x[:5, 1]
    assert "strided_slice_2" not in ok  # x[1:, 1]: empty at batch 1


@pytest.mark.tfbuild
@pytest.mark.parametrize("optimizer,max_ops", [("poly", 400), ("none", 400), ("poly", 3)])
def test_dynamic_batch_matches_tf(dyn_model, tmp_path, optimizer, max_ops):
    out = str(tmp_path / "o")
    report = optimize(dyn_model, out, log=lambda m: None, optimizer=optimizer,
                      max_ops=max_ops)
    assert report["dynamic_batch"] == ["x"]
    assert report["input_shapes"]["x"] == [None, 9, 9, 3]
    sgs = report["subgraphs"]
    assert sgs and all(s["versions"] == 2 for s in sgs)
    if max_ops < 400:
        assert len(sgs) >= 3
    ctx = [c["context"] for c in sgs[0]["version_contexts"]]
    assert ctx == [["N >= P"], ["P >= N + 1"]]
    src = open(f"{out}/{sgs[0]['source']}").read()
    assert "long N, long P" in src and "#pragma omp parallel for num_threads(P)" in src
    assert "const long rounds = N - N % P;" in src  # the last N % P samples: all threads
    import rstf
    model = rstf.load(out)
    gd = make_graph_def(dynamic_cnn)
    rng = np.random.RandomState(1)
    for n in BATCHES:
        x = rng.randn(n, 9, 9, 3).astype(np.float32)
        want = run_tf(gd, {"x": x}, ["out:0"])[0]
        got = model(x=x)
        got = got["out"] if isinstance(got, dict) else got
        got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
        assert got.shape == want.shape == (n, 5)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.tfbuild
def test_versions_picked_at_threshold(dyn_model, tmp_path):
    """With occupancy 2 on P threads, N = 2P - 1 runs the sequential-batch version and
    N = 2P the distributed one; both give TF's numbers (checked above), and the C says so."""
    out = str(tmp_path / "o2")
    report = optimize(dyn_model, out, log=lambda m: None, occupancy=2, threads=2)
    ctx = [c["context"] for c in report["subgraphs"][0]["version_contexts"]]
    assert ctx == [["N >= 2 * P"], ["2 * P >= N + 1"]]
    g = tf.Graph()
    tf.load_op_library(f"{out}/{report['library']}")
    with g.as_default():
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(open(f"{out}/optimized.pb", "rb").read())
        tf.graph_util.import_graph_def(gd, name="")
    ref = make_graph_def(dynamic_cnn)
    with tf.compat.v1.Session(graph=g) as s:
        for n in (3, 4, 5):
            x = np.random.RandomState(n).randn(n, 9, 9, 3).astype(np.float32)
            got = s.run("out:0", {"x:0": x})
            np.testing.assert_allclose(got, run_tf(ref, {"x": x}, ["out:0"])[0], rtol=1e-5,
                                       atol=1e-6)


def test_bad_occupancy(dyn_model, tmp_path):
    from rstf.errors import RstfError
    with pytest.raises(RstfError, match="occupancy"):
        optimize(dyn_model, str(tmp_path / "x"), log=lambda m: None, occupancy=0)


@pytest.mark.tfbuild
def test_rewrites_made_at_batch_one_do_not_break_a_dynamic_batch(tmp_path):
    """A BERT encoder with an unknown batch: the loader's rewrites (dense layers merged into
    BatchMatMulV2s, the projections' bias adds moved ahead of their Reshapes) are made in the
    dynamic-batch graph as at batch 1, once its shape arithmetic is constant
    (rstf/frontend/batchshape.py). Before, they were made at batch 1 only and the
    optimization failed with a KeyError; then the dense layers stayed in TensorFlow. Now the
    whole encoder runs per sample, and matches TensorFlow at every batch."""
    pytest.importorskip("keras_hub")
    from test_models_bert import TINY, _feeds, build_bert_graph_def  # (puts models/ in reach)

    gd = build_bert_graph_def("tiny", seq_len=8, batch=None, config=TINY)
    path = save_graph_def(gd, str(tmp_path))
    report = optimize(path, str(tmp_path / "o"), log=lambda m: None)
    assert sorted(report["dynamic_batch"]) == ["padding_mask", "segment_ids", "token_ids"]
    assert report["subgraphs"] and report["tensordots_merged"]
    assert report["unsupported"] == {}
    assert report["flops_covered"] == report["flops_total"] > 0
    import rstf
    model = rstf.load(str(tmp_path / "o"))
    for n in (2, 3):
        feeds = _feeds(n, 8, TINY["vocabulary_size"], seed=n)
        want = run_tf(gd, feeds, ["sequence_output:0"])[0]
        got = model(**{k.split(":")[0]: v for k, v in feeds.items()})
        got = got["sequence_output"] if isinstance(got, dict) else got[0]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


@pytest.mark.tfbuild
def test_bert_exported_for_any_length_runs_at_a_pinned_length_and_any_batch(tmp_path):
    """keras-hub's BERT traced with [?, ?] ids freezes its projections to Einsum ops
    (rstf/frontend/einsum.py lowers them). Pinned to [?, 8] (`--input-shape NAME:?,8`),
    the whole encoder is generated, keeps its dynamic batch and matches TensorFlow."""
    pytest.importorskip("keras_hub")
    from test_models_bert import TINY, _feeds, build_bert_graph_def

    gd = build_bert_graph_def("tiny", seq_len=None, batch=None, config=TINY)
    assert any(n.op == "Einsum" for n in gd.node)
    path = save_graph_def(gd, str(tmp_path))
    pins = {n: (None, 8) for n in ("token_ids", "segment_ids", "padding_mask")}
    report = optimize(path, str(tmp_path / "o"), input_shapes=pins, log=lambda m: None)
    assert report["einsums_lowered"] > 0
    assert report["unsupported"] == {}
    assert report["flops_covered"] == report["flops_total"] > 0
    import rstf
    model = rstf.load(str(tmp_path / "o"))
    for n in (2, 3):  # (_feeds pads the second sequence)
        feeds = _feeds(n, 8, TINY["vocabulary_size"], seed=n)
        want = run_tf(gd, feeds, ["sequence_output:0"])[0]
        got = model(**{k.split(":")[0]: v for k, v in feeds.items()})
        got = got["sequence_output"] if isinstance(got, dict) else got[0]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
