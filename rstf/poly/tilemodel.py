"""The analytic model of register tiles and loop orders for the contraction microkernels
(`microkernel`): which RB x NV tile a contraction's kernel takes (`choose_tile`,
`single_vector_tile`), what it is estimated to cost (`tile_cost`), and which loop runs
outermost around it (`choose_order`).

Its constants are the target's (`Target`, `Tuning`): the FMA chains that hide the latency,
a load's cost against an FMA's, the column operand's streaming cost, the L2 it plans for.
`rstf tune` measures the model's choice against the next candidates the same model ranks
(`tiles.candidates`) and keeps what a measurement finds faster in a per-machine profile;
where there is none, these choices stand.
"""
from __future__ import annotations

import dataclasses

from .target import Target


def fits_registers(rb: int, nv: int, t: Target) -> bool:
    """RB x NV accumulators + NV loaded b vectors + one broadcast fit in the registers."""
    return rb * nv + nv + 1 <= t.max_registers


def _efficiency(rb: int, nv: int, t: Target) -> float:
    """Rough fraction of the FMA peak a kernel of rb x nv accumulators reaches: RB*NV FMAs
    a step for RB + NV loads (each costing the target's `load_cost` of an FMA), enough
    independent accumulators (`fma_chains`) to hide the FMA latency on two pipes, and the
    column operand streamed once per RB rows (`Tuning.b_stream`)."""
    acc = rb * nv
    return (min(1.0, acc / t.fma_chains) * acc / (acc + (rb + nv) * t.load_cost)
            / (1 + t.tuning.b_stream / rb))


MAX_RB = 14  # the most rows of a tile the model considers


def tile_cost(rb: int, nv: int, rows: int, cols: int, t: Target) -> float:
    """The model's estimated cost per output of `rows` x `cols` outputs in RB x NV tiles.

    A row of the tiling is cut into chunks of RB rows and one shorter remainder chunk (run
    by the RB = remainder kernel), each at its `_efficiency`; the columns are covered by
    floor(cols/VB) tiles of VB = VLEN*NV, then by one narrower tile (a multiple of a half
    vector); the columns past a multiple of half a vector are charged as the residual
    textbook loops they ran in when the model's tiles were chosen (a contraction's now run
    in that tile, its last vector masked: `Shape.pad`; a depthwise kernel's still do)."""
    vb = t.vlen * nv
    covered = cols // vb * vb / cols
    full, rem = divmod(rows, rb)
    per_row = (full * rb / _efficiency(rb, nv, t)
               + (rem / _efficiency(rem, nv, t) if rem else 0.0)) / rows
    # Columns past the last whole tile: a narrower kernel for a multiple of half a vector
    # of them (charged 1.5x: fewer FMAs per loaded a), the textbook loops (about 4x
    # slower) for the rest (see the docstring).
    left = cols - cols // vb * vb
    half = t.half
    rem_k = left // half * half / cols
    return covered * per_row + rem_k * per_row * 1.5 + (1 - covered - rem_k) * 4.0


def choose_tile(rows: int, cols: int, t: Target, nvs=(4, 3, 2, 1),
                max_rb: int = MAX_RB) -> tuple[int, int, float] | None:
    """(RB, NV, estimated cost per output) for a contraction over `rows` x `cols` outputs,
    or None when no kernel tile fits (cols < VLEN): the tile of least `tile_cost`. RB is
    at most `max_rb`."""
    best = None
    for nv in nvs:
        if cols < t.vlen * nv:
            continue
        for rb in range(1, min(rows, max_rb) + 1):
            if not fits_registers(rb, nv, t):
                continue
            cost = tile_cost(rb, nv, rows, cols, t)
            if best is None or cost < best[2] - 1e-9:
                best = (rb, nv, cost)
    return best


def single_vector_tile(rows: int, cols: int, depth: int,
                       t: Target) -> tuple[int, int, float] | None:
    """(RB, 1, cost) for a contraction over rows x cols outputs whose kernel call runs
    `depth` reduction steps, where single-vector tiles pay (at most `Tuning.single_max_depth`
    steps, at least `single_min_rows` rows), else None."""
    if rows < t.tuning.single_min_rows or cols < t.vlen or depth > t.tuning.single_max_depth:
        return None
    return choose_tile(rows, cols, t, (1,))


@dataclasses.dataclass(frozen=True)
class Order:
    """Which loop of a tiled contraction runs outermost, and the traffic that predicts."""
    rb: int
    nv: int
    tile_outer: bool  # column tiles outside the outer output loops (rows of a conv)
    traffic: float  # bytes estimated to come from beyond L2


def thread_balance(units: int, n_threads: int) -> float:
    """The fraction of the threads' time spent working when `units` equal parallel
    iterations are dealt out statically: 5 column tiles on 2 threads keep them 5/6 busy."""
    return units / (n_threads * -(-units // n_threads))


def column_balance(cols: int, vb: int, n_threads: int) -> float:
    """`thread_balance` of `cols` columns dealt out as tiles of `vb` columns, counting a
    partial last tile as the smaller share it is: 160 columns in tiles of 48 keep 2 threads
    160/192 busy (48 + 48 against 48 + 16)."""
    tiles = -(-cols // vb)
    return cols / (n_threads * min(cols, vb * -(-tiles // n_threads)))


def choose_order(rb: int, nv: int, rows: int, cols: int, outer: int, depth_total: int,
                 a_bytes: int, t: Target, cache: int | None = None,
                 n_threads: int | None = None) -> Order:
    """The loop order of a tiled contraction `Y[outer][rows][cols] += A * B[depth][cols]`.

    By default the column tiles u run inside each outer point o (a Conv2D's output row):
    the rows of A that o reads are reused by every tile from cache, but B, the whole
    weight, is streamed once per o unless it fits in L2. Deep late layers (ResNet's 7x7
    stages: 9.4 MB of 3x3x512x512 weights for 7 output rows) are dominated by that. With
    u outermost, one tile's panel of B (depth x VB columns) is reused by every o while A is
    streamed once per tile; the panel must then fit in L2, so a narrower tile (smaller NV)
    is tried when the widest does not. The order with the least estimated traffic wins;
    ties keep the default. Legal either way: u and o are both output loops, and every
    output element still sees its reduction in the original order.

    Load balance is charged too: with u outermost the tiles alone are the parallel
    iterations (one thread packs each panel), so a tile count the threads do not divide
    (ResNet-like 320 columns: 5 tiles of 64 on 2 threads) idles some of them; the traffic
    is divided by the busy fraction (`thread_balance`), and a narrower tile may win on it.

    So with rows outermost: the rows x tiles run as one collapse(2) loop only when the
    tiles cover the columns exactly; a partial last tile (its own kernel call after the
    tile loop) leaves the rows alone parallel, and 7 of them (a 7x7 map) keep 2 threads
    7/8 busy. A narrower tile that divides the columns may then win: MobileNet v2's
    7-row projections to 160 channels take 5 tiles of 32 (35 iterations) instead of 3 of
    48 and one of 16 (7 iterations)."""
    cache = int(0.75 * (cache or t.l2_bytes))
    n_threads = n_threads or t.threads
    b_bytes = 4 * depth_total * cols
    base = choose_tile(rows, cols, t, (nv,))[2]

    def copies(units: int) -> int:
        # Where the weight is big enough to come from L3 or DRAM on every call, each
        # thread's own pass over an operand counts: rows outermost, every thread reads all
        # of B; tiles outermost, every thread reads all of A.
        return min(n_threads, units) if b_bytes >= t.tuning.thread_copy_min_bytes else 1

    # Where each outer point reads rows of A of its own (a batched matmul's [batch, rows,
    # depth] by a shared weight: no windows overlap between points), what must stay in L2
    # beside a tile's panel is the row chunk a kernel call reads, not the point's rows.
    own_rows = a_bytes >= 4 * outer * rows * depth_total

    def rows_outer(rb_: int, nv_: int, cost: float) -> Order:
        vb = t.vlen * nv_
        par = outer * -(-cols // vb) if cols % vb == 0 or outer <= 1 else outer
        # Every column tile reads the point's rows of A again: from L2 where they fit beside
        # one tile's panel, else from beyond it, once per tile (bert_base at batch 8: 1.5
        # MB of rows a sequence beside a 0.6 MB panel of the feed-forward weight).
        a_reads = (1 if a_bytes // outer + 4 * depth_total * vb <= cache
                   else -(-cols // vb))
        return Order(rb_, nv_, False, (a_bytes * a_reads
                                       + b_bytes * (outer if b_bytes > cache else
                                                    copies(outer)))
                     * cost / base / thread_balance(par, n_threads))

    best = rows_outer(rb, nv, base)
    if outer <= 1:
        return best
    for nv_ in range(nv - 1, 0, -1):
        tile = choose_tile(rows, cols, t, (nv_,))
        if tile is not None and (cand := rows_outer(tile[0], nv_, tile[2])).traffic \
                < best.traffic - 1e-9:
            best = cand
    outer_best = None
    for nv_ in range(nv, 0, -1):
        tile = choose_tile(rows, cols, t, (nv_,))
        if tile is None:
            continue
        vb = t.vlen * nv_
        panel = 4 * depth_total * vb + (4 * tile[0] * depth_total if own_rows
                                        else a_bytes // outer)
        n_u = -(-cols // vb)
        traffic = (a_bytes * (n_u if a_bytes > cache else copies(n_u))
                   + b_bytes * (outer if panel > cache else 1))
        # A narrower tile computes less well: charge its cost ratio on the traffic; and
        # the threads' balance in columns (a partial last tile is a smaller share).
        traffic *= tile[2] / base / column_balance(cols, vb, n_threads)
        if outer_best is None or traffic < outer_best.traffic:
            outer_best = Order(tile[0], nv_, True, traffic)
    if outer_best is not None and outer_best.traffic < best.traffic * 0.8:
        return outer_best
    return best
