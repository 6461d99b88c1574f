"""Row-block bands (rstf/poly/rowblock.py): attention's scores, softmax and context run
block by block of query rows in one function."""
import dataclasses
import math
import re

import numpy as np
import pytest

from poly_cases import NATIVE, rng, tuned, _subgraph, _run_both, _w
from rstf.frontend.tfutil import tf


def _attention(heads, tokens, depth, across_rows=False):
    """BERT's attention on a fed Q|V and K^T: the scaled scores with the key mask in the
    kernels' registers, the softmax and its mask, then the probabilities x values."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (1, heads, tokens, 2 * depth), name="x")
        kt = tf.compat.v1.placeholder(tf.float32, (1, heads, depth, tokens), name="kt")
        q, v = x[..., :depth], x[..., depth:]
        mask = tf.constant(rng.random_sample(tokens) > 0.2)
        s = tf.where(mask, tf.matmul(q * 0.125, kt), -1e9)
        p = tf.where(mask, tf.nn.softmax(s), 0.0)
        if across_rows:
            p = p - tf.reduce_mean(p, axis=-2, keepdims=True)
        tf.identity(tf.matmul(p, v), name="out")

    g, sg = _subgraph(build)
    feeds = {"x:0": rng.random_sample((1, heads, tokens, 2 * depth)).astype(np.float32),
             "kt:0": rng.random_sample((1, heads, depth, tokens)).astype(np.float32)}
    return g, sg, feeds


@pytest.mark.parametrize("threads,team", [(2, False), (3, False), (3, True)])
def test_attention_runs_block_by_block(threads, team):
    """Three heads of 100 tokens: the blocks are a multiple of both kernels' row tiles and
    of at least `Tuning.block_rows` rows (the last one shorter), the three groups one
    function whose outer loops are the heads and blocks, bit-identical to the textbook C
    on 2 and 3 threads (an odd split of the blocks), with libgomp's and rstf's team."""
    g, sg, feeds = _attention(3, 100, 16)
    ref, got, info, new = _run_both(g, sg, feeds, threads=threads, team=team)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    bands = [b for b in info["bands"] if "block_rows" in b]
    assert len(bands) == 1, info["bands"]
    band = bands[0]
    nodes = band["nodes"]
    assert nodes[0] == "MatMul" and nodes[-1] == "MatMul_1" and "Softmax" in nodes, band
    rbs = [t["tile"][0] for t in info["tiled"]]
    step = math.lcm(*rbs)
    block = band["block_rows"]
    assert block == 100 or (block % step == 0 and block >= NATIVE.tuning.block_rows), (block, rbs)
    # the scores, their exponentials and the probabilities kept for one block, on the
    # stack of the iteration (so of the thread), off the workspace
    kept = band["contracted_to_block"]
    assert len(kept) >= 3, band
    assert all(f"{y}_blk[" in new and f"{y}[restrict" not in new for y in kept)
    assert info["workspace_bytes"] < sg.workspace_bytes
    fn = re.search(r"static void (sched_\d+)\([^)]*\)\n\{\n(.*?)\n\}\n", new[new.index(
        "block by block"):], re.S)
    body = fn.group(2)
    # both contractions' kernels and the softmax's exp inside the one band function
    assert len(set(re.findall(r"rstf_mk\w+\(", body))) == 2 and "rstf_expf" in body
    assert body.lstrip().startswith("#pragma omp parallel for"), body[:200]


def test_whole_heads_when_the_blocks_would_be_the_sequence():
    """A `block_rows` past the tokens: one block a head, the heads the band's loop."""
    g, sg, feeds = _attention(4, 48, 16)
    target = tuned(block_rows=64)
    ref, got, info, new = _run_both(g, sg, feeds, target=target)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert [b["block_rows"] for b in info["bands"] if "block_rows" in b] == [48]


def test_probabilities_across_rows_are_not_blocked():
    """Probabilities less their mean over the query rows: a block of rows cannot finish
    before every block has its probabilities, and the dependence check says so (the
    groups stay apart, and still match)."""
    g, sg, feeds = _attention(2, 96, 16, across_rows=True)
    ref, got, info, new = _run_both(g, sg, feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6)
    assert not [b for b in info["bands"] if "block_rows" in b], info["bands"]


def test_dense_layers_around_a_row_wise_group_are_not_blocked():
    """Two dense layers with a softmax between them are row-wise too, but every block of
    rows would read their whole weights again: no band for a weight."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (1, 96, 64), name="x")
        h = tf.nn.softmax(tf.matmul(x, _w(64, 128)))
        tf.identity(tf.matmul(h, _w(128, 64)), name="out")

    g, sg = _subgraph(build)
    x = rng.random_sample((1, 96, 64)).astype(np.float32)
    ref, got, info, new = _run_both(g, sg, {"x:0": x})
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)
    assert not [b for b in info["bands"] if "block_rows" in b], info["bands"]


def test_keys_and_values_past_half_the_l2_are_not_blocked():
    """Every block reads its head's keys and values again (2 x 100 x 16 floats a head,
    12.8 KB): with a 16 KB L2 they would not stay there, so no band."""
    g, sg, feeds = _attention(3, 100, 16)
    ref, got, info, new = _run_both(g, sg, feeds, target=dataclasses.replace(NATIVE, l2=16 << 10))
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert not [b for b in info["bands"] if "block_rows" in b], info["bands"]
