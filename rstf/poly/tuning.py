"""The polyhedral pass's tuning constants, in one value.

Every threshold and cost-model weight the stages read is a field of `Tuning`, and a
`target.Target` carries one (`Target.tuning`): the pass reads them from the target it is
given, never from module globals, so a caller (a test, or a tuned per-machine profile) can
change one for one run by passing another target. The defaults are starting points
measured on a few hosts, not truths about every machine: docs/tuning-constants.md keeps
the measurements behind each, and `rstf tune` measures the tiles they lead to on the
machine that serves (`tiles.py`).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    # ---- tiles (microkernel.py)
    # The cost of streaming the column operand: a kernel call reads its B panel (K x VB)
    # once for RB rows, 64/RB bytes per FMA, mostly from L2 (a layer's whole weight cycles
    # through it per output row), so fewer rows a call cost more than their loads alone
    # say.
    b_stream: float = 0.3
    # Single-vector tiles (`Target.single_vector_tiles`) pay for a whole-reduction 1x1 conv
    # whose reduction is short, so that the rows of A stay in L1 beside the weight panel,
    # and whose rows give enough accumulators to hide the FMA latency (a GEMV's row does
    # not).
    single_max_depth: int = 192
    single_min_rows: int = 7

    # The weight size from which the tile-order model (`tilemodel.choose_order`) counts
    # each thread's own pass over an operand: rows outermost, every thread streams the
    # whole weight, which then comes from L3 or DRAM once per thread.
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
    # rather than FMAs, cost more than the accumulators save.
    kin_depth_long: int = 300
    short_call: int = 32
    # Where kin runs inside and one outer reduction is left (kh), run that inside too
    # (`Kernel.kin3`): one call per output's whole reduction, its epilogue in registers.
    kin3: bool = True
    # The shortest K block (`kblocks.choose_k_block`): each call loads and stores its tile's
    # accumulators, a few percent of a 256-step call.
    k_block_min: int = 256

    # ---- fusion (fuse.py, band.py)
    row_bytes: int = 256 * 1024  # largest contracted row (a stack buffer per iteration)
    # A row-buffer epilogue runs after each kernel call, on that call's rows, when a
    # column tile's whole row of outputs is more than this (fuse._per_chunk): half the
    # smallest x86 L1d (32 KB), the rest being the kernels' operands. A shorter row is
    # still in L1 when the chain reads it, and its one loop keeps the row and column
    # tile loops collapsible (EfficientNet's 96x96 maps, per chunk: 2% slower).
    chunk_epilogue_bytes: int = 16 * 1024
    # The fewest rows a row band runs: with fewer, the groups' own finer parallel loops
    # balance better.
    min_band_rows: int = 16
    # A halo band's tensor below this stays in a core's L2 (1-2 MB on current x86 cores).
    halo_min_bytes: int = 2 << 20
    max_stride: int = 4  # the largest band stride a halo window is looked for at
    # The fewest query rows a row-block band (rowblock.py) runs attention's three groups
    # on: each block reads the head's whole key and value panels again (2 x keys x depth
    # floats, from L2), which a block of this many rows amortises over as many kernel
    # rows; fewer rows keep the block's scores and probabilities in less of L2.
    block_rows: int = 32

    # ---- parallel loops (emit.py, cprint.py)
    min_work: int = 16384  # statement instances under a loop before a parallel region pays
    min_parallel_rows: int = 16  # outer rows enough to share among threads without collapse
    # Statement instances in one chunk of a parallel loop (a few microseconds of kernel
    # time), and at least min_chunks chunks in the loop where it has that many iterations
    # (4 a thread on 2). A thread takes its next chunk with a compare-and-swap, and one
    # whose share is done steals the back half of another's (rstf/runtime/rstf_team.c): the
    # chunks must be small enough for the threads to even out, and large enough that a
    # stolen chunk, whose input the other core made and whose output the other core reads
    # next, is rare.
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
    # comes from L3 or DRAM at each inference, however small it is alone. Below it a panel
    # is a few lines a call, not worth the prefetch's instructions.
    prefetch_min_bytes: int = 1 << 16
    prefetch_min_depth: int = 64  # reduction steps of the computing kernel's call

    # ---- Winograd (winograd.py)
    winograd_min_pixels: int = 196  # outputs per image below which Winograd does not pay
    # V up to this size is transformed whole first, larger ones row by row.
    winograd_whole_v_bytes: int = 4 << 20
    # The cost model of `winograd.choose`, in tile rows of one register tile's contraction:
    # a register tile of r tiles costs r + winograd_tile_overhead (its U loads and
    # broadcasts, the accumulators' zeroing and stores, the output transform), and streaming
    # U from memory once costs winograd_u_tiles per element of the transformed tile (U's 4
    # bytes per multiply-add of a tile at about 200 GFLOP/s against about 20 GB/s from
    # DRAM, 2 cores).
    winograd_tile_overhead: int = 2
    winograd_u_tiles: int = 20
