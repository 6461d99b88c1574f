"""Software prefetch of large frozen weights, planned over the scheduled groups, and its C.

A batch-1 matrix-vector product over a large frozen weight has that weight prefetched by
the kernel calls of the compute-bound group before it (`plan_prefetch`, the C helpers in
`PREFETCH_C`); a contraction whose column tiles run outermost prefetches each next tile's
weight panel during the tile's calls (`plan_panel_prefetch`, `PANEL_PREFETCH_C`). The
plans are marks that `plan.make_plan` puts on new `groups.Kernel`s, which
`emit.CallLowering` prints. (The C
comments still say `lower.plan_prefetch`: the generated C is kept byte-identical.)
"""
from __future__ import annotations

import math

from .groups import Group, Kernel, extents
from .scop import Scop
from .tuning import Tuning


PREFETCH_C = """\
/* Prefetching a weight another group reads next (lower.plan_prefetch): each thread takes
   the lines of its own share of the weight, in order, `bytes` a kernel call, at most its
   first `cap` bytes; the count bumped before each run of the computing group restarts
   them. Past them, a thread is given its first lines again, which its cache already
   holds. (Atomic: the batch loop's threads may each run the group at once; a prefetch
   never faults, so a stale count costs nothing but useless prefetches.) */
#include <omp.h>
static _Atomic unsigned rstf_pf_epoch;
static const char *rstf_pf_take(const char *base, long total, long cap, long bytes)
{
    static _Thread_local unsigned epoch;
    static _Thread_local const char *cur, *end, *start;
    if (epoch != rstf_pf_epoch) {
        const long t = omp_get_thread_num(), n = omp_get_num_threads();
        epoch = rstf_pf_epoch;
        start = cur = base + total * t / n / 64 * 64;
        end = base + total * (t + 1) / n;
        if (end - cur > cap)
            end = cur + cap;
    }
    if (end - cur < bytes)
        return start;
    const char *p = cur;
    cur += bytes;
    return p;
}
"""


def plan_prefetch(scop: Scop, schedules: list[Group], skip: set[int],
                  constants: frozenset[str], tuning: Tuning, threads: int,
                  l2_bytes: int) -> tuple[dict[int, str], dict[str, tuple[int, str, int]]]:
    """Batch-1 matrix-vector products (kernels of one row) over a frozen weight of at least
    `tuning.prefetch_min_bytes` read that weight from L3 or DRAM on every call: MobileNet v2's
    classifier, 5 MB, took 42-57 us of the kernels' 2.9 ms on a quiet host and up to 130
    under load. The group just before it (with
    only kernel-free groups between, such as the Mean) is compute-bound, so its kernel calls
    prefetch the weight while they run: two lines a reduction step, spread over its calls,
    each thread its share (`PREFETCH_C`); the lines then sit in L2 or, evicted, in L3 when
    the product reads them. Each thread prefetches at most the first `l2_bytes` of its
    share: lines past its L2 evict the ones before them, and the prefetches of a weight
    many times the caches (VGG16's 75 MB classifier at 96x96) saturate the memory system
    under the computing group's own reads (docs/tuning-constants.md, weight prefetch).
    Returns ({computing group's
    call: the weight array}, {computing kernel: (its `prefetch` lines a call, its
    `prefetch_of` weight, its `prefetch_cap` bytes a thread)}). `skip`: calls lowered
    otherwise (Winograd); `threads`, `l2_bytes`: the target's."""
    plans, marks = {}, {}
    for i, g in enumerate(schedules):
        if g.call in skip or g.is_band or not g.kernels:
            continue
        if not all(k.rb == 1 and k.b.array in constants for k in g.kernels):
            continue
        w = g.kernels[0].b.array
        shape = scop.buffers[w].shape
        if not all(isinstance(x, int) for x in shape):
            continue
        total = math.prod(shape) * 4
        if total < tuning.prefetch_min_bytes:
            continue
        # The computing group: the nearest one before with kernels, none but kernel-free
        # groups between.
        q = next((q for q in reversed(schedules[:i]) if q.kernels or q.call in skip
                  or q.is_band), None)
        if q is None or q.call in skip or q.is_band:
            continue
        p, = q.parts
        k = p.kernels[0]
        if (k.rb == 1 or k.vec_a or k.slide or k.cols or k.depth < tuning.prefetch_min_depth
                or k.ranged or k.name not in p.ast_time):
            continue
        calls = p.ast_time[k.name].domain().count_val().to_python()
        if not calls:
            continue
        wanted = min(total, l2_bytes * threads)  # bytes, all threads together
        marks[k.name] = (min(-(-wanted // (64 * calls)), 2 * k.depth), w, l2_bytes)
        plans[p.call] = w
    return plans, marks


PANEL_PREFETCH_C = """\
/* The share of the next column tile's weight panel that a kernel call prefetches
   (lower.plan_panel_prefetch): of the panel's `bytes`, the lines of rows [g0, g1) of the
   `n` output rows that the tile computes. */
static inline const char *rstf_pp_at(const float *panel, long bytes, long g0, long n)
{
    return (const char *)panel + bytes * g0 / n / 64 * 64;
}
static inline int rstf_pp_lines(long bytes, long g0, long g1, long n)
{
    return (int)((bytes * g1 / n - bytes * g0 / n / 64 * 64 + 63) / 64);
}
"""


def plan_panel_prefetch(scop: Scop, schedules: list[Group], panels: dict, skip: set[int],
                        tuning: Tuning, l2_bytes: int) -> set[str]:
    """Column-tile-outermost contractions (`choose_order`: the weight is too big for L2, so
    each tile's panel is reused by every row while the rows stream) read each panel from
    L3 or DRAM on its first row: ResNet-50's and Inception v3's weights (about 100 MB) never
    stay in the 32 MB L3 between calls. So each call prefetches its rows' share of the next
    tile's panel, spread over its reduction steps (`Shape.pp`), so that the next panel
    is in cache when its calls start (docs/tuning-constants.md, panel prefetch).
    The same holds wherever the column tile is the calls' outermost loop (`tile_first`):
    a small map's merged rows (Xception's 728-channel 1x1 convs on 6x6 at 96x96, 2.1 MB
    of weights each, four 9-row calls a panel).
    Not for a matrix-vector product's one-row kernels (a batch-1 classifier): each panel is
    read by one call, so the next one would be prefetched a whole panel (megabytes) ahead,
    beyond L2, doubling the reads in flight: Xception's 8 MB classifier ran 0.144-0.155 ms
    without, 0.172-0.178 with (`group_profile.py`); `plan_prefetch` covers those.
    That includes weights well under L2's size (`Tuning.prefetch_min_bytes`): a model's
    weights together cycle through L2 at each inference, so a layer's 0.75 MB weight comes
    from L3 as surely as a 10 MB one (RegNetX032's 6x6 1x1 convs 18% faster so).
    For kernels over a frozen weight in panel layout (`prepack`) of at least
    `tuning.prefetch_min_bytes`, whole tiles (the last, partial one has no next panel), no
    K2 level (its k restarts) and at least `prefetch_min_depth` steps. A call inside an outer
    reduction loop (a 3x3 conv's taps) takes its share of the tile's calls too.
    Rows outermost over several outer points (a batch of sequences through a dense layer)
    qualify as well when the whole weight is larger than `l2_bytes`: each outer point then
    runs every column tile in turn and reads each panel again from L3, as a batch-1 call
    does once (`tile_first`). Returns the kernels whose `panel_prefetch` to set. `skip`:
    calls lowered otherwise (Winograd)."""
    out = set()
    for cs in schedules:
        if cs.call in skip:
            continue
        for k in cs.kernels:
            pn = panels.get(k.b.array)
            if pn is None:
                continue
            weight = 4 * pn.rows * pn.cols  # bytes
            if (not tile_first(scop, k, weight > l2_bytes) or k.cols or k.vec_a or k.slide
                    or k.kin or not k.r or k.rb == 1 or k.ranged
                    or k.depth < tuning.prefetch_min_depth or pn.cols <= pn.vb
                    or weight < tuning.prefetch_min_bytes):
                continue
            out.add(k.name)
    return out


def tile_first(scop: Scop, k: Kernel, streamed: bool = False) -> bool:
    """Whether the kernel's column tile is its calls' outermost loop: column tiles outermost
    (`Kernel.tile_outer`), or rows outermost where no outer loop has more than one point (a
    1x1 conv over a small map with its rows merged: the tiles of a 6x6 map's 36 pixels, each
    panel read by four 9-row calls in a row), or, `streamed` (the weight does not stay in
    L2), below outer loops of several points, each of which runs the column tiles in turn.
    Each thread then runs one panel's calls after another, and prefetching the next panel
    during them is its next read."""
    if k.tile_outer or streamed:
        return True
    s = scop.statement(k.statement)
    box = dict(zip(s.iterators, extents(s)))
    return all(box[c][0] == box[c][1] for c in k.dims[:k.dims.index("u")])
