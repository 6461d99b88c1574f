"""K blocks (rstf/poly/kblocks.py): a contraction's reduction in blocks of whole calls, the
block loop between the column tile and the row chunks, each call continuing the output's
running sum, bit-identical to the textbook C."""
import dataclasses
import re

from poly_cases import NATIVE, _bitwise_case, tuned

from rstf.poly.kblocks import choose_k_block
from rstf.poly.groups import Kernel


def _kernel(rows_vb=48, k=3072, kc=312, **fields) -> Kernel:
    return Kernel("KS1", "S1", "i", "k", "j", 8, rows_vb // 16, 16, 0, k - 1, None, None,
                  None, kc=kc, **fields)


def test_the_block_keeps_a_rows_and_two_blocks_of_panel_in_l2():
    """BERT-base's feed-forward down projection (128 rows x 3072 -> 768, k in slices of
    312): 1.5 MB of A beside two 590 KB panels overflow a 2 MB L2, and the longest whole
    slices that fit beside A are 4 (1248 steps). 384 rows: A alone is more than L2; 64
    rows: everything fits; a GEMV's row: less than a panel. Each no block."""
    t = dataclasses.replace(NATIVE, l2=2 << 20)
    assert choose_k_block(_kernel(), 128, 1, t) == 1248
    assert choose_k_block(_kernel(), 384, 1, t) == 0
    assert choose_k_block(_kernel(), 64, 1, t) == 0
    assert choose_k_block(_kernel(), 1, 1, t) == 0
    # a KxK conv's taps outside k, column tiles outermost: no block
    assert choose_k_block(_kernel(), 128, 9, t) == 0
    assert choose_k_block(_kernel(tile_outer=True), 128, 1, t) == 0
    # not in slices: a multiple of a cache line's floats
    assert choose_k_block(_kernel(kc=0), 128, 1, t) % 16 == 0


def test_a_dense_layer_in_k_blocks_is_bit_identical():
    """The rows of A and two panels overflow L2 (dense_k_blocks): the kernels run the
    reduction in blocks of whole k slices, one call a block, each block's calls after
    the last block's, and the bias and ReLU once the last block is done (no register
    epilogue). Bit-identical to the textbook C, on libgomp and on rstf's team."""
    for team in (False, True):
        info, _, new = _bitwise_case("dense_k_blocks", team=team)
    blocked = [t for t in info["tiled"] if t.get("k_block")]
    assert blocked, info["tiled"]
    kb = blocked[0]["k_block"]
    assert 256 <= kb < 2048, kb
    assert f"per block of {kb} steps" in new
    # each call's prefetch is the next block (of this panel, or the next panel's first)
    assert re.search(r"rstf_pp_at\(\(c\d+ < \d+ \? ", new), new


def test_a_reduction_in_k_blocks_ends_in_a_shorter_block():
    """Blocks that do not divide k: the last call runs the rest (rstf_min), bit-identical.
    A smaller L2 and a lower floor make the case's blocks 2048 / n-ish."""
    t = tuned(dataclasses.replace(NATIVE, l2=768 << 10), k_block_min=64)
    info, _, new = _bitwise_case("dense_k_blocks", target=t)
    kb = next(t["k_block"] for t in info["tiled"] if t.get("k_block"))
    assert 2048 % kb, kb
    assert re.search(rf"rstf_min\({kb}, 2048 - {kb} \* c\d+\)", new), new


def test_rows_of_a_beyond_l2_keep_the_whole_reduction_in_each_call():
    info, _, new = _bitwise_case("dense_rows_beyond_l2_whole_k", run=False)
    assert info["tiled"] and not any(t.get("k_block") for t in info["tiled"]), info["tiled"]
    assert "per block of" not in new
