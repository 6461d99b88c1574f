"""Tests for models/bert.py (models/build.py bert_small / bert_base): the graph contract,
determinism, non-degenerate weights and the CLI, on a tiny encoder built by the same code
path (2 layers, hidden 64), so the file runs in seconds."""
import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

tf = pytest.importorskip("tensorflow")
pytest.importorskip("keras_hub")
from models.bert import BERT_INPUTS, BERT_OUTPUTS, build_bert_graph_def  # noqa: E402

TINY = dict(vocabulary_size=97, num_layers=2, num_heads=2, hidden_dim=64,
            intermediate_dim=128, max_sequence_length=32)
SEQ = 12


@pytest.fixture(scope="module")
def tiny():
    return build_bert_graph_def("tiny", seq_len=SEQ, batch=2, config=TINY)


def _session(graph_def):
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    return g, tf.compat.v1.Session(graph=g)


def _feeds(batch, seq, vocab, seed=0):
    rng = np.random.RandomState(seed)
    mask = np.ones((batch, seq), np.int32)
    mask[1, seq - 3:] = 0  # the second sequence ends in padding
    return {"token_ids:0": rng.randint(0, vocab, (batch, seq)).astype(np.int32),
            "segment_ids:0": (np.arange(seq) >= seq // 2).astype(np.int32)[None].repeat(batch, 0),
            "padding_mask:0": mask}


def test_contract(tiny):
    ops = {n.name: n for n in tiny.node}
    for name in BERT_INPUTS:
        assert ops[name].op == "Placeholder" and ops[name].attr["dtype"].type == tf.int32
    assert not any(n.op in ("VarHandleOp", "ReadVariableOp", "StatefulPartitionedCall")
                   for n in tiny.node)
    consumed = {i.lstrip("^").split(":")[0] for n in tiny.node for i in n.input}
    assert {n.name for n in tiny.node} - consumed == set(BERT_OUTPUTS)
    g, sess = _session(tiny)
    with sess:
        seq, pooled = sess.run([f"{n}:0" for n in BERT_OUTPUTS], _feeds(2, SEQ, 97))
    assert seq.shape == (2, SEQ, 64) and pooled.shape == (2, 64)
    assert np.all(np.isfinite(seq)) and np.all(np.isfinite(pooled))


def test_deterministic_and_seeded(tiny):
    again = build_bert_graph_def("tiny", seq_len=SEQ, batch=2, config=TINY)
    assert again.SerializeToString(deterministic=True) == tiny.SerializeToString(
        deterministic=True)
    other = build_bert_graph_def("tiny", seq_len=SEQ, batch=2, seed=1, config=TINY)
    assert other.SerializeToString(deterministic=True) != tiny.SerializeToString(
        deterministic=True)


def test_layer_norms_o1_and_pooler_not_saturated(tiny):
    """Every layer norm's output (the last node of each *layer_norm* scope) has std about 1,
    and the pooled tanh output is neither saturated nor negligible."""
    g, sess = _session(tiny)
    last = {}
    for op in g.get_operations():
        parts = op.name.split("/")
        for k, part in enumerate(parts):
            if "layer_norm" in part:
                last["/".join(parts[:k + 1])] = op.outputs[0]
    assert len(last) == 1 + 2 * TINY["num_layers"], sorted(last)
    with sess:
        values = sess.run(list(last.values()) + ["pooled_output:0"], _feeds(2, SEQ, 97))
    stds = [float(v.std()) for v in values[:-1]]
    assert all(0.7 < s < 1.4 for s in stds), stds
    pooled = values[-1]
    assert 0.05 < pooled.std() < 0.8 and float(np.mean(np.abs(pooled) > 0.99)) < 0.01


def test_dynamic_batch_and_bad_seq_len():
    gd = build_bert_graph_def("tiny", seq_len=5, batch=None, config=TINY)
    ph = next(n for n in gd.node if n.name == "token_ids")
    assert [d.size for d in ph.attr["shape"].shape.dim] == [-1, 5]
    with pytest.raises(ValueError, match="outside"):
        build_bert_graph_def("tiny", seq_len=33, config=TINY)


def test_attention_runs_block_by_block_and_matches(tmp_path):
    """`rstf optimize` of the tiny encoder at 48 tokens and a fixed batch: each layer's
    scores, softmax and context are one row-block band (rstf/poly/rowblock.py; a block
    is a head's 48 rows, fewer than two of `Tuning.block_rows`' blocks), and the encoder
    matches TensorFlow."""
    from harness import run_tf, save_graph_def
    from rstf.pipeline import optimize
    import rstf

    seq, config = 48, dict(TINY, max_sequence_length=64)
    gd = build_bert_graph_def("tiny", seq_len=seq, batch=2, config=config)
    report = optimize(save_graph_def(gd, str(tmp_path)), str(tmp_path / "o"),
                      log=lambda m: None, tuning="off")
    bands = [b for sg in report["subgraphs"] for b in sg.get("poly", {}).get("bands", ())
             if "block_rows" in b]
    assert len(bands) == TINY["num_layers"], bands
    assert all(b["block_rows"] == seq and b["contracted_to_block"] for b in bands), bands
    model = rstf.load(str(tmp_path / "o"))
    feeds = _feeds(2, seq, TINY["vocabulary_size"], seed=3)
    want = run_tf(gd, feeds, ["sequence_output:0"])[0]
    got = model(**{k.split(":")[0]: v for k, v in feeds.items()})
    got = got["sequence_output"] if isinstance(got, dict) else got[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
