"""K blocks: a contraction's reduction cut into blocks of whole calls, so that the rows of
A that every column tile reads again stay in L2 beside the weight panel.

With rows outermost (`tilemodel.choose_order`'s default), each outer point o runs every
column tile u, and each tile's calls read all the rows of A that o has (`rows x K`), so
those rows are reused from cache by every tile, while the tile's panel of B (`K x VB`)
streams in, and the next tile's panel is prefetched behind it (`prefetch.py`). When the
rows, a panel and the next panel together are more than a core's L2, the panels push the
rows out and every tile reads A again from L3: a BERT-base feed-forward down projection
(128 rows x 3072 -> 768) holds 1.5 MB of A beside two 590 KB panels in a 2 MB L2.

Blocked, each tile runs its reduction in blocks of `kb` steps, every row chunk through one
block before the next (the block loop between the column tile and the chunks, as one more
outer reduction: `schedule._tiling`), and each call prefetches its share of the *next
block* (of this panel, or the next panel's first) instead of the next whole panel: what L2
holds beside A is two blocks, not two panels. A call then continues the output's running
sum (`microkernel._sliced_loop`: in TensorFlow's k slices, a block is whole slices, so the
sums are added in the same order), and the fused chain runs once the last block is done,
from the row buffer (`regepi` refuses a blocked kernel).

The block is the longest multiple of the slice (or of a cache line's floats) with which
A's rows and two blocks of panel fit in L2, and no block when all of it fits whole, when
A's rows alone leave no room, when they are less than a panel (a GEMV's row: reading it
again costs less than the panel's own stream), or when the block would be shorter than
`Tuning.k_block_min` steps (each call loads and stores its tile). What it gains is small
once a kernel's k loop runs several steps a trip (`Target.k_steps`), which took most of
the same loop overhead: docs/benchmarks/2026-12-05-k-steps-k-blocks.md.
"""
from __future__ import annotations

from .groups import Kernel
from .target import Target

LINE_FLOATS = 16  # a block of A's row starts on a cache line where the row does


def choose_k_block(kern: Kernel, rows: int, outer_reductions: int, t: Target) -> int:
    """The K block of `kern` (`Kernel.kb`, see the module docstring), `rows` rows of A per
    outer point, or 0 (each call runs the whole reduction). `outer_reductions`: the
    statement's reduction points outside k (a KxK conv's taps); only a kernel whose k is
    the whole reduction is blocked."""
    if (outer_reductions > 1 or kern.tile_outer or kern.chunk_outer or kern.vec_a
            or kern.slide or kern.k2 or kern.kin or kern.ranged or kern.kc_tail):
        return 0
    depth = kern.k_hi - kern.k_lo + 1
    l2 = t.l2_bytes
    a_rows = 4 * rows * depth
    per_step = 2 * 4 * kern.vb  # two blocks of panel, a step of each
    if a_rows + per_step * depth <= l2 or a_rows >= l2 or 2 * a_rows < per_step * depth:
        return 0
    unit = kern.kc or LINE_FLOATS
    kb = (l2 - a_rows) // per_step // unit * unit
    if kb < t.tuning.k_block_min or kb >= depth:
        return 0
    return kb
