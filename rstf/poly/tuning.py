"""The polyhedral pass's tuning constants, in one value.

Every threshold and cost-model weight the stages read is a field of `Tuning`, and a
`target.Target` carries one (`Target.tuning`): the pass reads them from the target it is
given, never from module globals, so a caller (a test, or a tuned per-machine profile) can
change one for one run by passing another target. The defaults are the values chosen by
the measurements quoted beside each field (the hosts they were measured on are named
there: they are starting points, not truths about every machine).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    # ---- tiles (microkernel.py)
    # The cost of streaming the column operand: a kernel call reads its B panel (K x VB)
    # once for RB rows, 64/RB bytes per FMA, mostly from L2 (a layer's whole weight cycles
    # through it per output row), so fewer rows a call cost more than their loads alone
    # say. Measured on Zen 4 (`ab_kernels.py`, B/A of the model's kernels, each order):
    # with 0.3, 14-row 1x1 convs take 7x48 tiles instead of 5x64 (5+5+4 rows, 12.8-16
    # B/FMA against 9.1) and 7-row ones 7x48 or 7x32 instead of 4x64: MobileNet v2 0.989
    # and 1/1.010, 0.993 and 1/1.012 (300 pairs); ResNet-50 0.981 and 1/1.017, Inception
    # v3 0.999 and 1/1.003 (100 pairs). Its 14-row convs alone ran 4.3-4.5% faster
    # (`group_profile.py`).
    b_stream: float = 0.3
    # Single-vector tiles (`Target.single_vector_tiles`). MobileNet v2's block 1 expansion
    # (K=16, 112 rows) as a band's only part, one thread, Zen 4: 9x48 (the model's) 0.406
    # ms, 8x48 0.381, 7x48 0.382, 7x32 0.397, 4x48 0.461, 14x16 0.352, 16x16 0.358, 28x16
    # 0.574. Whole-reduction 1x1 convs in RB x 16 tiles, rows outermost, 2 threads
    # (`group_profile.py`, per group, against the model's tiles): K <= 32 (MobileNet v2's
    # expansions of blocks 1-6) 7-10% faster; K = 64..192 1-8% faster (MobileNet v2's later
    # expansions, Inception v3's 1x1s at 73x73 and 35x35), but 1-7% slower where the
    # epilogue adds a residual (ResNet-50's 1x1s to 256 and 512 channels:
    # `schedule._residual_after` keeps those); K >= 256 3-15% slower (the rows of A no
    # longer stay in L1 beside the weight panel).
    single_max_depth: int = 192
    single_min_rows: int = 7  # fewer accumulators do not hide the FMA latency (a GEMV's row)

    # The weight size from which the tile-order model (`microkernel.choose_order`) counts
    # each thread's own pass over an operand: rows outermost, every thread streams the
    # whole weight, which then comes from L3 or DRAM once per thread. ResNet-50 at 96x96
    # (2 threads, Intel Xeon with AVX-512, `group_profile.py`): its 6x6 1x1 convs (1 MB
    # weights) took column tiles outermost, the kernels 8.37 -> 7.81 ms. MobileNet v2's
    # 7x7 projections to 160 channels (0.4-0.6 MB), which stay in L3, ran 5-10% slower so.
    thread_copy_min_bytes: int = 1 << 20

    # ---- contractions (contraction.py)
    merge_gain: float = 0.99  # merged rows must cut choose_tile's cost per output by 1%
    dw_max_rb: int = 8  # rows of a depthwise kernel's tile (one vector wide)
    dw_row_max: int = 16  # the widest output row a sliding-row depthwise call covers
    kin_depth: int = 64  # reduction steps up to which a kernel call runs kh too
    # Longer ones, up to kin_depth_long steps (a 3x3 conv's kw x ic), run that loop inside
    # too when a call of the kernel's own depth is short, at most short_call steps: each
    # call loads and stores its accumulators, which costs a 32-step call (ic = 32) a quarter
    # of its time or so. Or when no padding border cuts the loop (a VALID conv): a cut
    # splits each row into border chunks with fewer taps, and their one-row kernels, loads
    # rather than FMAs, cost more than the accumulators save (measured on Inception v3: its
    # 147x147x32 3x3 convs 10-20% faster with kw inside, its 35x35 SAME ones with 48 to 96
    # channels 10-15% slower).
    kin_depth_long: int = 300
    short_call: int = 32

    # ---- fusion (fuse.py, band.py)
    row_bytes: int = 256 * 1024  # largest contracted row (a stack buffer per iteration)
    # The fewest rows a row band runs: with fewer, the groups' own finer parallel loops
    # balance better. 14 (MobileNet v2's 14x14 depthwise + projection pairs fused too)
    # measured 1.004x on its kernels (Zen 4).
    min_band_rows: int = 16
    # A halo band's tensor below this stays in a core's L2 (1-2 MB on current x86 cores).
    halo_min_bytes: int = 2 << 20
    max_stride: int = 4  # the largest band stride a halo window is looked for at

    # ---- parallel loops (emit.py, cprint.py)
    min_work: int = 16384  # statement instances under a loop before a parallel region pays
    min_parallel_rows: int = 16  # outer rows enough to share among threads without collapse
    # Statement instances in one chunk of a parallel loop (a few microseconds of kernel
    # time), and at least min_chunks chunks in the loop where it has that many iterations
    # (4 a thread on 2). A thread takes its next chunk with a compare-and-swap, and one
    # whose share is done steals the back half of another's (rstf/runtime/rstf_team.c): the
    # chunks must be small enough for the threads to even out, and large enough that a
    # stolen chunk, whose input the other core made and whose output the other core reads
    # next, is rare. Measured on MobileNet v2 (Zen 4, 2 threads, `ab_kernels.py`, B/A
    # against 65536 instances in at least 16 chunks): 262144 in 8, 0.992 and 1/1.010 (400
    # pairs, quiet host), 0.972 and 1/1.020 (262144 in 4, loaded host); 131072 in 8 and
    # 524288 in 8 about 0.4% slower than 262144, 1M in 4 5%, 1M in 2 (a static loop) 6%;
    # Inception v3 and ResNet-50 0.998-1.002. Its 14x14 depthwise convs gain most: block
    # 12's, called 50 times in a row, took 13.3 us a call in 21 chunks (the old sizes), 10.5
    # in 4, 11.0 in 14 (whole rows), 12.6-19.5 in 28.
    chunk_work: int = 262144
    min_chunks: int = 8
    # A carried halo window's buffer: its window slides down it for as many band rows as
    # fit in window_buffer_bytes (at most window_slides), so its shared rows move once in
    # that many.
    window_buffer_bytes: int = 320 * 1024
    window_slides: int = 8

    # ---- prefetch (prefetch.py)
    # A weight from this size is prefetched ahead of its reads. The floor is not "fits in
    # L2": a model's weights together are many times a core's L2, so every layer's weight
    # comes from L3 or DRAM at each inference, however small it is alone. RegNetX032 at
    # 96x96 (2 threads, Intel Xeon with AVX-512): its 29 6x6 1x1 convs over 0.75 MB weights
    # ran 1.88 -> 1.54 ms with the floor lowered from 1 MB (`group_profile.py`). Below it a
    # panel is a few lines a call, not worth the prefetch's instructions.
    prefetch_min_bytes: int = 1 << 16
    prefetch_min_depth: int = 64  # reduction steps of the computing kernel's call

    # ---- Winograd (winograd.py)
    winograd_min_pixels: int = 196  # outputs per image below which Winograd does not pay
    # V up to this size is transformed whole first (probe: 56x56x64 1.71x that way against
    # 1.52x row by row; 147x147x32 0.85x against 1.37-1.50x).
    winograd_whole_v_bytes: int = 4 << 20
    # The cost model of `winograd.choose`, in tile rows of one register tile's contraction:
    # a register tile of r tiles costs r + winograd_tile_overhead (its U loads and
    # broadcasts, the accumulators' zeroing and stores, the output transform), and streaming
    # U from memory once costs winograd_u_tiles per element of the transformed tile (U's 4
    # bytes per multiply-add of a tile at about 200 GFLOP/s against about 20 GB/s from
    # DRAM, 2 cores).
    winograd_tile_overhead: int = 2
    winograd_u_tiles: int = 20
