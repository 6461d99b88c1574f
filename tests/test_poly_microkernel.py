"""The register-blocked microkernels (rstf/poly/microkernel.py): their rounding, the tile
choice against the target's registers, and the tile order that balances the threads."""
import dataclasses
import platform
import re

import numpy as np
import pytest

from poly_cases import rng, V, _w, _bitwise_case, _subgraph, _run_both
from rstf.poly.tilemodel import choose_tile, fits_registers
from rstf.poly.target import AVX2, AVX512
from rstf.frontend.tfutil import tf


def test_kernels_round_like_the_statement_they_replace():
    """The templates' `y = fmaf(a, b, y)` runs in kernels of vector FMA; a `y += a * b`
    (two roundings a step) in kernels that multiply then add. Each is bit-identical to its
    textbook C, and the two differ from each other."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [24, 96], name="x")
        tf.identity(tf.matmul(x, _w(96, 64)), name="out")

    g, sg = _subgraph(build)
    step = "c[i][j] = fmaf(a[i][k], b[k][j], c[i][j]);"
    assert step in sg.source
    x = rng.randn(24, 96).astype(np.float32)
    results = {}
    for fused in (True, False):
        if not fused:
            sg.source = sg.source.replace(step, "c[i][j] += a[i][k] * b[k][j];")
        ref, got, info, new = _run_both(g, sg, {"x:0": x})
        (out,) = got
        np.testing.assert_array_equal(got[out], ref[out])
        assert info["kernel_calls"] > 0, info
        kernels = new[new.index(" void rstf_mk"):]
        # a contraction's kernels are out of line (microkernel._linkage), not inlined
        # into the tile loop beside other code that would take their registers
        # (named rstf_mk[u][k<steps>]_: u unfused, k8 eight steps a trip on 16 registers)
        assert re.search(r"^__attribute__\(\(noinline\)\) static void rstf_mku?(k8)?_", new,
                         re.M)
        assert not re.search(r"^static inline void rstf_mku?(k8)?_", new, re.M)
        assert (V("rstf_fma") + "(" in kernels) == fused
        assert bool(re.search(r"rstf_mku(k8)?_", new)) != fused
        results[fused] = got[out]
    assert not np.array_equal(results[True], results[False])


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_tile_choice_fits_registers(target):
    """The tiles fit the target's registers (AVX2: 16 of 8 floats, so 6x16 at most two
    vectors wide, the classic AVX2 GEMM tile) and its vectors."""
    for rows, cols in [(35, 64), (17, 192), (8, 448), (1, 1000), (149, 32)]:
        rb, nv, _ = choose_tile(rows, cols, target)
        assert rb * nv + nv + 1 <= target.registers
        assert fits_registers(rb, nv, target) and rb <= rows and target.vlen * nv <= cols
    assert choose_tile(10, target.vlen - 1, target) is None
    if target is AVX2:
        assert choose_tile(36, 64, target)[:2] == (6, 2)


def test_single_vector_tile_only_for_short_reductions_of_enough_rows():
    """`single_vector_tile`: RB x 16 tiles (one vector, RB up to 14) for a reduction of
    at most `Tuning.single_max_depth` steps over at least `single_min_rows` rows; None otherwise (a
    GEMV's one row would run one accumulator chain; a long reduction's rows leave L1)."""
    from rstf.poly.tilemodel import single_vector_tile

    assert single_vector_tile(112, 96, 16, AVX512)[:2] == (14, 1)
    assert single_vector_tile(7, 960, 32, AVX512)[:2] == (7, 1)
    assert single_vector_tile(112, 96, AVX512.tuning.single_max_depth + 1, AVX512) is None
    assert single_vector_tile(1, 1000, 16, AVX512) is None
    assert single_vector_tile(56, 8, 16, AVX512) is None  # narrower than a vector


def test_column_tile_order_balances_the_threads():
    """MobileNet v2's block_16_project (7x7 rows, 960 -> 320): its 1.2 MB weight streams
    best one panel at a time (column tiles outermost), and then the tiles alone are the
    parallel iterations. 5 tiles of 64 keep 2 threads 5/6 busy (7 of 48, 7/8); the order
    model picks a tile that divides among them, and keeps the tile that computes best
    (`choose_tile`'s, 7x48) for one thread."""
    from rstf.poly.tilemodel import thread_balance, choose_order

    assert thread_balance(5, 2) == pytest.approx(5 / 6) and thread_balance(10, 2) == 1.0
    args = dict(rb=4, nv=4, rows=7, cols=320, outer=7, depth_total=960,
                a_bytes=4 * 7 * 7 * 960, t=AVX512, cache=1 << 20)
    one, two = choose_order(**args, n_threads=1), choose_order(**args, n_threads=2)
    assert one.tile_outer and two.tile_outer
    assert (one.rb, one.nv) == choose_tile(7, 320, AVX512)[:2] == (7, 3)
    tiles = -(-320 // (16 * two.nv))
    assert tiles % 2 == 0, two


def test_row_order_balances_the_threads_when_a_partial_tile_breaks_the_collapse():
    """MobileNet v2's 7-row projections to 160 channels: 3 tiles of 48 and one of 16 leave
    the 7 rows alone parallel (the partial tile's call follows the tile loop, so rows x
    tiles do not collapse): 2 threads 7/8 busy. 5 tiles of 32 collapse with the rows into
    35 iterations, which wins on 2 threads; on 1 the better-computing 48 stays, and so it
    does when 48 divides the columns."""
    from rstf.poly.tilemodel import choose_order

    args = dict(rb=7, nv=3, rows=7, outer=7, depth_total=960, a_bytes=4 * 7 * 7 * 960,
                t=AVX512, cache=1 << 20)
    two = choose_order(**args, cols=160, n_threads=2)
    assert (two.rb, two.nv, two.tile_outer) == (7, 2, False)
    assert choose_order(**args, cols=160, n_threads=1).nv == 3
    assert choose_order(**args, cols=96, n_threads=2).nv == 3


def test_each_thread_streaming_a_large_weight_counts_in_the_order():
    """ResNet-50's 1x1 convs on its 6x6 map at 96x96 (1024 -> 256, a 1 MB weight): rows
    outermost, each of 2 threads streams the whole weight for its own rows, so the column
    tiles go outermost (each thread its own panels); on 1 thread, or with a weight under
    `Tuning.thread_copy_min_bytes`, the two orders cost the same and rows stay outermost."""
    from rstf.poly.tilemodel import choose_order

    args = dict(rb=6, nv=4, rows=6, cols=256, outer=6, depth_total=1024,
                a_bytes=4 * 6 * 6 * 1024, t=AVX512, cache=2 << 20)
    assert choose_order(**args, n_threads=2).tile_outer
    assert not choose_order(**args, n_threads=1).tile_outer
    big = dataclasses.replace(AVX512, tuning=dataclasses.replace(
        AVX512.tuning, thread_copy_min_bytes=2 << 20))
    assert not choose_order(**{**args, "t": big}, n_threads=2).tile_outer


def test_a_strided_convs_order_counts_the_input_it_reads_not_the_whole_input():
    """A stride-2 1x1 conv (28x28x512 to 14x14x1024, a 2 MB weight) reads 0.4 of its 1.6 MB
    input: counted as what it reads, A fits L2 beside a panel, and the column tiles run
    outermost (the weight read once instead of once per output row); counted as the whole
    input it would not. Bit-identical to the textbook C."""
    from poly_cases import NATIVE

    t = dataclasses.replace(NATIVE, l2=2 << 20, cores=2)
    info, _, new = _bitwise_case("conv1x1_stride2_tiles_outer", target=t)
    (tiled,) = info["tiled"]
    assert tiled["order"] == "column tiles outermost", tiled
    from rstf.poly.tilemodel import choose_order
    args = dict(rb=tiled["tile"][0], nv=tiled["tile"][1] // t.vlen, rows=14, cols=1024,
                outer=14, depth_total=512, t=t, n_threads=2)
    assert not choose_order(**args, a_bytes=4 * 28 * 28 * 512).tile_outer


def test_a_batched_matmuls_order_counts_each_sequences_rows_beside_a_panel():
    """bert_base at batch 8: a [8, 128, depth] activation by a shared weight. With rows
    outermost each column tile reads the sequence's rows again, and where they do not fit
    L2 beside a tile's panel (the feed-forward down projection: 1.5 MB of rows, 3072 deep,
    beside a 0.6 MB panel) they come from beyond it once per tile, as the 9.4 MB weight
    does once per sequence: the column tiles go outermost (each panel read once, kept in L2
    beside the 8-row chunk a call reads). The up projection (0.4 MB of rows a sequence,
    768 deep) and the 768 x 768 projections keep rows outermost. A 1x1 conv's rows of a
    point are a few KB either way: its orders do not move."""
    from rstf.poly.tilemodel import choose_order

    def order(rows, cols, outer, depth):
        return choose_order(rb=8, nv=3, rows=rows, cols=cols, outer=outer, depth_total=depth,
                            a_bytes=4 * outer * rows * depth, t=AVX512, cache=2 << 20,
                            n_threads=2)

    assert order(128, 768, 8, 3072).tile_outer
    assert not order(128, 3072, 8, 768).tile_outer
    assert not order(128, 768, 8, 768).tile_outer
    # and the order's code: bit-identical to the textbook C
    from poly_cases import NATIVE
    t = dataclasses.replace(NATIVE, l2=1 << 20, cores=2)
    info, _, new = _bitwise_case("batched_dense_rows_beyond_l2_tiles_outer", target=t)
    (tiled,) = info["tiled"]
    assert tiled["order"] == "column tiles outermost", tiled


def test_a_3x3_conv_over_few_channels_runs_its_whole_reduction_in_one_call():
    """kh, kw and ic in one kernel call (K3 around K2 around k): at the padding borders
    the chunks run fewer taps of both, no row buffer carries partial sums between calls,
    and the bias and ReLU run on the accumulators. Bit-identical to the textbook C."""
    info, _, new = _bitwise_case("conv3x3_few_channels_whole_reduction")
    (tiled,) = info["tiled"]
    assert tiled["reduction"] == ["kh", "kw", "ic"] and tiled["border_chunks"], tiled
    assert info["fused"][0]["epilogue_in_registers"], info["fused"]
    assert "_row[" not in new and "int K3, long sak3, long sbk3" in new
    assert "for (int k3 = 0; k3 < K3; ++k3)" in new


def test_a_trip_of_k_steps_stays_clear_of_the_next_rows_reads():
    """`kloop.trip_steps`: AVX2's 8 steps a trip, fewer (even) where a tile's rows would
    read the same floats of `a` within one trip, 1 where even 2 would."""
    from rstf.poly.kloop import trip_steps

    assert trip_steps(8, 64, 1) == 8  # a 1x1 conv over 64 channels: rows 64 apart
    assert trip_steps(8, 6, 1) == 6  # the first conv: stride 2 over 3 channels
    assert trip_steps(8, -7, 1) == 6 and trip_steps(8, 3, 1) == 2
    assert trip_steps(8, 1, 1) == 1 and trip_steps(8, 16, 4) == 4
    assert trip_steps(8, 0, 1) == 8  # one row
    assert trip_steps(1, 6, 1) == 1  # AVX-512: one step a trip anyway


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="reads x86 assembly (the 16-register AVX2 target)")
def test_the_first_convs_kernel_keeps_its_accumulators_in_registers():
    """ResNet's first conv (7x7 stride 2 over 3 channels) on AVX2: its rows start 6 floats
    apart in `a` and read 21 each. In trips of 8 steps, or with gcc's predictive commoning
    carrying shared values across trips, the kernel spilled accumulators every step (about
    one stack access an FMA, 2.3x slower). Its kernel now runs 6 steps a trip, without
    predictive commoning, and its loops touch the stack less than once a step (12 FMAs)."""
    from benchmarks.kernel_spills import source_loops, spilling

    info, sg, new = _bitwise_case("conv_rgb_7x7_stride2", run=False, target=AVX2)
    assert re.search(r"void rstf_mk2k6_6x16\(", new), new
    assert re.search(r'optimize\("no-predictive-commoning"\)\)\)\n__attribute__\(\(noinline'
                     r'\)\) static void rstf_mk2k6_6x16\(', new)
    loops = {fn: ls for fn, ls in source_loops(new, "haswell").items()
             if fn.startswith("rstf_mk2k6_6x16")}
    assert sum(len(ls) for ls in loops.values()) >= 2, loops  # the trips and the rest of K
    assert not spilling(loops), loops
