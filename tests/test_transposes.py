"""Transposes around batched matmuls folded into their adjoint flags
(rstf.frontend.transposes), and Reshapes as views of their input's buffer
(rstf.cgen.codegen.view_aliases)."""
import numpy as np
import pytest
from harness import run_tf

from rstf.cgen.codegen import generate_subgraph
from rstf.evaluation.fuzzcase import Options, check_kernels
from rstf.frontend.graph import load_model
from rstf.frontend.modelpath import model_path
from rstf.frontend.transposes import fold_transposes
from rstf.frontend.tfutil import tf

rng = np.random.RandomState(0)


def _attention_graph(b=1, s=12, h=2, d=8, extra_reader=False):
    """Keras' MultiHeadAttention core as its frozen graph has it (Keras lowers the einsum
    'aecd,abcd->acbe' of key and query to Transposes of both operands, a BatchMatMulV2 and
    a Transpose of the product), then the mask, softmax, the mask again, and the einsum
    'acbe,aecd->abcd' of the probabilities and value (a Transpose of value, a matmul, a
    Transpose of the product)."""
    g = tf.Graph()
    with g.as_default():
        q = tf.compat.v1.placeholder(tf.float32, [b, s, h, d], name="q")
        k = tf.compat.v1.placeholder(tf.float32, [b, s, h, d], name="k")
        v = tf.compat.v1.placeholder(tf.float32, [b, s, h, d], name="v")
        mask = tf.constant(rng.random_sample((1, 1, 1, s)) > 0.2)
        kt = tf.transpose(k, [0, 2, 1, 3], name="transpose")
        qt = tf.transpose(q * 0.35, [0, 2, 3, 1], name="transpose_1")
        prod = tf.raw_ops.BatchMatMulV2(x=kt, y=qt, name="MatMul")
        scores = tf.transpose(prod, [0, 1, 3, 2], name="transpose_2")
        probs = tf.where(mask, tf.nn.softmax(tf.where(mask, scores, -1e9)), 0.0)
        vt = tf.transpose(v, [0, 2, 1, 3], name="transpose_3")
        ctx = tf.raw_ops.BatchMatMulV2(x=probs, y=vt, name="MatMul_1")
        tf.identity(tf.transpose(ctx, [0, 2, 1, 3], name="transpose_4"), name="out")
        if extra_reader:
            tf.identity(tf.reduce_sum(prod), name="out2")
    return g.as_graph_def()


def _feeds(b=1, s=12, h=2, d=8):
    return {n: rng.standard_normal((b, s, h, d)).astype(np.float32) for n in "qkv"}


def _ops(gd) -> dict:
    return {n.name: n for n in gd.node}


def _perm(gd, transpose) -> list:
    const = _ops(gd)[transpose.input[1]]
    return tf.make_ndarray(const.attr["value"].tensor).tolist()


def test_attention_scores_lose_the_transpose_of_their_product():
    gd = _attention_graph()
    assert sum(n.op == "Transpose" for n in gd.node) >= 3
    with model_path(gd, "attn") as path:
        graph = load_model(path, outputs=["out"], fold=True)
    folded = graph.graph_def
    nodes = _ops(folded)
    assert graph.transposes_folded
    # The scores are one matmul under the old Transpose's name, of query as [b, h, q, d]
    # by key as [b, h, d, k]; no matmul takes an adjoint.
    assert "MatMul" not in nodes and nodes["transpose_2"].op == "BatchMatMulV2"
    x, y = (nodes[t] for t in nodes["transpose_2"].input)
    assert x.name == "transpose_1" and y.name == "transpose"
    assert [_perm(folded, x), _perm(folded, y)] == [[0, 2, 1, 3], [0, 2, 3, 1]]
    for n in folded.node:
        if n.op.startswith("BatchMatMul"):
            assert not n.attr["adj_x"].b and not n.attr["adj_y"].b
    assert (sum(n.op == "Transpose" for n in folded.node)
            == sum(n.op == "Transpose" for n in gd.node) - 1)
    feeds = _feeds()
    np.testing.assert_allclose(run_tf(folded, feeds, ["out:0"])[0], run_tf(gd, feeds, ["out:0"])[0],
                               rtol=1e-5, atol=1e-6)


def test_the_folded_attention_compiles_and_matches_tensorflow():
    """rstf's C for the folded graph (the mask now in the scores' epilogue), poly and
    textbook, against TF on the original graph."""
    gd = _attention_graph(s=32, h=2, d=16)
    for config in ("poly", "none"):
        v = check_kernels(gd, _feeds(s=32, h=2, d=16), Options.of(config, 400))
        assert v.passed, v.why


def test_an_adjoint_of_a_transpose_that_swaps_the_last_axes_is_its_input():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [3, 4, 5], name="x")
        y = tf.constant(rng.standard_normal((3, 5, 6)).astype(np.float32))
        t = tf.transpose(x, [0, 2, 1], name="t")
        tf.identity(tf.raw_ops.BatchMatMulV2(x=t, y=y, adj_x=True), name="out")
    gd = g.as_graph_def()
    out, names = fold_transposes(gd, ["out"])
    nodes = _ops(out)
    assert names and "t" not in nodes
    mm = next(n for n in out.node if n.op == "BatchMatMulV2")
    assert mm.input[0] == "x" and not mm.attr["adj_x"].b
    feeds = {"x": rng.standard_normal((3, 4, 5)).astype(np.float32)}
    np.testing.assert_allclose(run_tf(out, feeds, ["out:0"])[0], run_tf(gd, feeds, ["out:0"])[0],
                               rtol=1e-5, atol=1e-6)


def test_left_alone_when_the_product_has_another_reader():
    gd = _attention_graph(extra_reader=True)
    before = gd.SerializeToString()
    out, names = fold_transposes(gd, ["out", "out2"])
    # The scores' product is read by its Transpose and by the sum: rule 1 does not apply,
    # and no other Transpose is read as an adjoint.
    assert names == [] and out is gd and gd.SerializeToString() == before


def test_left_alone_when_the_product_is_a_model_output():
    out, names = fold_transposes(_attention_graph(), ["out", "MatMul"])
    nodes = _ops(out)
    assert "transpose_2" not in names and nodes["transpose_2"].op == "Transpose"
    assert nodes["MatMul"].op == "BatchMatMulV2"


# ------------------------------------------------------------------ Reshape views


def _reshape_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 3, 3, 8], name="x")
        y = tf.nn.relu(x, name="relu")
        r = tf.reshape(y, [1, 72], name="flat")
        tf.matmul(r, rng.standard_normal((72, 5)).astype(np.float32), name="out")
    return g.as_graph_def()


def _code(gd, outputs):
    with model_path(gd, "reshape") as path:
        graph = load_model(path, outputs=outputs, fold=True)
    nodes = [n for n in graph.topo_order() if graph.nodes[n].op not in ("Const", "Placeholder")]
    return generate_subgraph(graph, nodes, 0)


def test_a_reshape_inside_a_subgraph_is_a_view_of_its_input():
    code = _code(_reshape_graph(), ["out"])
    entry = code.source[code.source.index(f"void {code.entry}"):]
    assert "/* flat (Reshape): a view of t0, no copy */" in entry
    # The matmul reads the relu's buffer through its own [1][72] shape; no copy is called.
    assert "(const float (*)[72])t0" in entry and entry.count("op_") == 2
    assert [t.tensor for t in code.temps] == ["relu:0"]


def test_a_reshape_the_subgraph_returns_keeps_its_own_buffer():
    code = _code(_reshape_graph(), ["out", "flat"])
    entry = code.source[code.source.index(f"void {code.entry}"):]
    assert "no copy" not in entry and entry.count("op_") == 3
    assert {s.tensor for s in code.outputs} == {"out:0", "flat:0"}


@pytest.mark.parametrize("config", ["poly", "none"])
def test_reshape_views_compile_and_match_tensorflow(config):
    gd = _reshape_graph()
    v = check_kernels(gd, {"x": rng.standard_normal((1, 3, 3, 8)).astype(np.float32)},
                      Options.of(config, 400))
    assert v.passed, v.why


def _adjoint_graph(y_kind: str):
    """x [1, 2, 6, 8] by y read as an adjoint: `activation` (a placeholder), `const3`
    (a per-head constant [1, 2, 5, 8]) or `const2` (a 2-D weight [5, 8])."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 2, 6, 8], name="x")
        if y_kind == "activation":
            y = tf.compat.v1.placeholder(tf.float32, [1, 2, 5, 8], name="y")
        else:
            shape = (1, 2, 5, 8) if y_kind == "const3" else (5, 8)
            y = tf.constant(rng.standard_normal(shape).astype(np.float32))
        tf.identity(tf.linalg.matmul(x, y, adjoint_b=True), name="out")
    return g.as_graph_def()


@pytest.mark.parametrize("y_kind,rewritten", [("activation", True), ("const3", True),
                                              ("const2", False)])
def test_an_adjoint_right_operand_is_read_by_rows(y_kind, rewritten):
    """Rule 3: the kernels read the right operand by rows. A computed one gets a Transpose,
    a per-head constant is transposed now, a 2-D weight is left to the kernel's layout."""
    gd = _adjoint_graph(y_kind)
    out, changed = fold_transposes(gd, ["out"])
    mm = next(n for n in out.node if n.op == "BatchMatMulV2")
    assert bool(changed) is rewritten and mm.attr["adj_y"].b is not rewritten
    assert ("Transpose" in {n.op for n in out.node}) is (y_kind == "activation")
    feeds = {"x": rng.random_sample((1, 2, 6, 8)).astype(np.float32)}
    if y_kind == "activation":
        feeds["y"] = rng.random_sample((1, 2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(run_tf(out, feeds, ["out:0"])[0],
                               run_tf(gd, feeds, ["out:0"])[0], rtol=1e-6, atol=1e-6)
