"""Which statements are contractions a microkernel runs, and in what kernel shape.

`find_contraction` recognises `Y += A * B` (spelled `y = fmaf(a, b, y)`) and returns its
`groups.Kernel`: the output row r, the unit-stride column v, the reduction k (with a
second reduction merged into it, or run inside the kernel as its K2 level, `kin`), the tile
from `tilemodel.choose_tile`, a depthwise kernel's vector operand. `merge_rows` merges
a small map's output rows into one row of chunks where the tile model says so, and
`sliding_row` turns a stride-1 depthwise row into one call per output row. The tiling and
ordering of the kernels in time is `schedule.py`'s.
"""
from __future__ import annotations

import dataclasses
import itertools

import islpy as isl
from pycparser import c_ast

from .cparse import multiply_add
from .groups import Kernel, extents, flat_addr, kernel_roles
from .kloop import trip_steps
from .tilemodel import choose_tile, thread_balance
from .scop import Scop, Statement, isl_name
from .target import Target


def find_contraction(s: Statement, scop: Scop, t: Target) -> Kernel | None:
    """The kernel tiling of `s` if it is a contraction the microkernel fits on target `t`,
    else None."""
    factors = multiply_add(s.ast)
    if factors is None or not all(isinstance(f, c_ast.ArrayRef) for f in factors):
        return None
    if s.domain.n_basic_set() != 1 or s.domain.dim(isl.dim_type.param) or not s.iterators:
        return None
    if scop.buffers[s.accesses[-1].array].ctype != "float":
        return None
    by_ref = {id(a.ref): a for a in s.accesses if not a.write}
    x0, x1 = (by_ref.get(id(f)) for f in factors)
    y = s.accesses[-1]
    if x0 is None or x1 is None or x0.array == y.array or x1.array == y.array:
        return None
    iv = [isl_name(v) for v in s.iterators]
    ay = flat_addr(y, scop)
    if ay is None:
        return None
    box = dict(zip(iv, extents(s)))
    for (a, b), vec_a in itertools.product(((x0, x1), (x1, x0)), (False, True)):
        aa, ab = flat_addr(a, scop), flat_addr(b, scop)
        if aa is None or ab is None:
            continue
        # v: the innermost iterator at unit stride in Y and B, absent from A (or, a
        # depthwise kernel, at unit stride in A too).
        vs = [v for v in iv if ay.get(v) == 1 and ab.get(v) == 1
              and aa.get(v, 0) == (1 if vec_a else 0)]
        # (A loop of one iteration is no reduction: a depthwise conv's channel multiplier.)
        reds = [v for v in iv if not ay.get(v) and box[v][1] > box[v][0]]
        if not vs or not reds:
            continue
        v, k = vs[-1], reds[-1]
        if not (aa.get(k) or ab.get(k)):
            continue
        rows = [x for x in iv if x not in (v, k) and ay.get(x) and not ab.get(x)]
        r = rows[-1] if rows else None
        (v_lo, v_hi), (k_lo, k_hi) = box[v], box[k]
        r_lo, r_hi = box[r] if r else (0, 0)
        tile = (choose_tile(r_hi - r_lo + 1, v_hi - v_lo + 1, t, (1,), t.tuning.dw_max_rb) if vec_a
                else choose_tile(r_hi - r_lo + 1, v_hi - v_lo + 1, t))
        if tile is None:
            continue
        rb, nv, _ = tile
        if r is None:
            rb = 1
        c_of = dict(zip(iv, s.iterators))
        kern = Kernel(f"K{s.name}", s.name, c_of.get(r), c_of[k], c_of[v], rb, nv, t.vlen,
                      k_lo, k_hi, a, b, y, vec_a=vec_a, fused=s.ast.op == "=",
                      chunk_outer=vec_a and t.depthwise_tiles_in_chunks,
                      steps=1 if vec_a else trip_steps(t.k_steps, aa.get(r, 0) if r else 0,
                                                       aa.get(k, 0)))
        # Merge the next reduction loop out into k when k's whole range and it walk both
        # operands contiguously: a convolution's (kw, ic) with few input channels (the
        # first layer's 3) makes one long reduction instead of KW short ones.
        n = k_hi - k_lo + 1
        k2 = reds[-2] if len(reds) > 1 else None
        if k2 and (aa.get(k2, 0), ab.get(k2, 0)) == (n * aa.get(k, 0), n * ab.get(k, 0)) \
                and n <= 16:
            kern.k2 = c_of[k2]
            kern.k2_lo, kern.k2_hi = box[k2]
        if s.k_slice:
            # k in TensorFlow's slices (poly/kslices.py): a kernel of one reduction level
            # over the whole of k from 0, restarting every kc steps.
            if isl_name(s.k_slice[0]) != k or kern.k2 or vec_a or k_lo:
                continue
            kern.kc, kern.kc_tail = s.k_slice[1], s.k_slice[2]
        # A short whole reduction: the next loop out runs inside the kernel too, and the
        # ranges become the chunk's own (borders cut taps).
        outer = reds[:-2] if kern.k2 else reds[:-1]
        kin = outer[-1] if outer else None
        steps = kern.depth * (box[kin][1] - box[kin][0] + 1) if kin else 0
        tn = t.tuning
        inside = 0
        if kin and not s.k_slice and (steps <= tn.kin_depth or steps <= tn.kin_depth_long and (
                kern.depth <= tn.short_call or not _cut(s, iv.index(kin), box[kin]))):
            # And the one outer reduction left (a 3x3 conv's kh around kw x ic): then a
            # call runs each output's whole reduction, so the accumulators start from zero
            # in registers and the fused epilogue runs there (`regepi`), instead of each
            # tile going through a row buffer once per kh and the epilogue rereading it.
            inside = 2 if len(outer) == 2 and tn.kin3 else 1
        run_inside(s, kern, scop, inside)
        return merge_rows(s, kern, scop, tile[2], t) or kern
    return None


def outer_reductions(s: Statement, kern: Kernel, scop: Scop) -> list[str]:
    """The reduction loops of contraction `s` (isl names, outermost first) that its kernel
    `kern` could run inside a call around k (and a merged k2): the others than k and k2,
    of more than one iteration."""
    iv = [isl_name(v) for v in s.iterators]
    box = dict(zip(iv, extents(s)))
    ay = flat_addr(kern.y, scop)
    inner = {isl_name(x) for x in (kern.k, kern.k2) if x}
    return [v for v in iv if not ay.get(v) and box[v][1] > box[v][0] and v not in inner]


def run_inside(s: Statement, kern: Kernel, scop: Scop, n: int) -> bool:
    """Make `kern` run the `n` innermost of its outer reductions inside each call (0: k
    alone, or k2 too; 1: `kin` as the K2 level; 2: `kin3` too as the K3 level), the others
    staying outside, accumulating through memory. A call's reduction ranges are then the
    chunk's own (`Kernel.ranged`: borders cut taps). `n` is capped at the loops there are.
    False, `kern` unchanged, for kernels whose reduction is fixed otherwise: TensorFlow's k
    slices (one level), merged rows (rows of whole reductions) and sliding rows (made
    from a chunked kernel later)."""
    if s.k_slice or kern.merged or kern.slide:
        return False
    outer = outer_reductions(s, kern, scop)
    n = min(n, 2, len(outer))
    iv = [isl_name(v) for v in s.iterators]
    box = dict(zip(iv, extents(s)))
    c_of = dict(zip(iv, s.iterators))
    loops = [outer[-1 - i] if i < n else None for i in range(2)]
    for attr, x in (("kin", loops[0]), ("kin3", loops[1])):
        lo_hi = box[x] if x else (0, 0)
        setattr(kern, attr, c_of[x] if x else None)
        setattr(kern, f"{attr}_lo", lo_hi[0])
        setattr(kern, f"{attr}_hi", lo_hi[1])
    kern.ranged = ([x for x in (kern.kin3, kern.kin, kern.k2 or kern.k) if x]
                   if kern.kin or kern.vec_a else [])
    return True


def merge_rows(s: Statement, kern: Kernel, scop: Scop, cost: float,
               t: Target) -> Kernel | None:
    """The kernel with its rows r merged with the next outer output loop o (`Kernel.merged`)
    where that is exact and pays, else None.

    A 1x1 stride-1 convolution over a 7x7 map has output rows of 7 pixels: on AVX2 (16
    registers) they run as 7x8 tiles (7 accumulators, 8 loads a step) because a 6x16 tile
    leaves a 1-row remainder per row. Its input and output rows follow each other in
    memory, though (o's stride is exactly n times r's in A and in Y), so the 49 pixels are
    one row of a GEMM, tiled by choose_tile over all 49 (9 chunks of 5x16 and one of 4
    rows; docs/tuning-constants.md, `merge_rows`). Exact when r runs 0..n-1 whole, o's
    range is cut by nothing, the strides line
    up in A and Y and B does not depend on o. Only for o of fewer than `Tuning.min_band_rows`
    rows: a row band, which fuses groups over o, cannot take those anyway. On the targets
    that say so (`Target.merge_rows`: AVX2 and AVX512_FULL, where it was measured)."""
    if not t.merge_rows or kern.vec_a or kern.kin or kern.ranged or kern.slide \
            or kern.r is None:
        return None
    outs, _, r, _, v = kernel_roles(s, kern)
    if not outs:
        return None
    o = outs[-1]
    iv = [isl_name(x) for x in s.iterators]
    box = dict(zip(iv, extents(s)))
    (o_lo, o_hi), (r_lo, r_hi) = box[o], box[r]
    n = r_hi + 1
    if r_lo != 0 or o_hi == o_lo or o_hi - o_lo + 1 >= t.tuning.min_band_rows:
        return None
    if _cut(s, iv.index(o), box[o]) or _cut(s, iv.index(r), box[r]):
        return None
    aa, ab, ay = (flat_addr(x, scop) for x in (kern.a, kern.b, kern.y))
    if ab.get(o, 0) or any(x.get(o, 0) != n * x.get(r, 0) for x in (aa, ay)):
        return None
    n_o, cols = o_hi - o_lo + 1, box[v][1] - box[v][0] + 1
    tile = choose_tile(n_o * n, cols, t)
    if tile is None:
        return None
    # The parallel iterations: unmerged, o x the column tiles (collapsed); merged, the
    # tiles alone when a shorter last chunk (its own call after the chunk loop) stops the
    # collapse, so charge the threads' idle share (20 tiles on 16 threads).
    tiles = -(-cols // (t.vlen * tile[1]))
    par = tiles * (1 if n_o * n % tile[0] else n_o * n // tile[0])
    busy = (thread_balance(par, t.threads)
            / thread_balance(n_o * -(-cols // kern.vb), t.threads))
    if tile[2] / busy >= cost * t.tuning.merge_gain:
        return None
    o_c = dict(zip(iv, s.iterators))[o]
    return dataclasses.replace(kern, rb=tile[0], nv=tile[1], merged=o_c, merged_n=n)


def row_expr(kern: Kernel) -> str:
    """The kernel's row coordinate over its statement's iterators (isl names): r, or
    merged_n * o + r."""
    r = isl_name(kern.r) if kern.r else "0"
    return f"{kern.merged_n}*{isl_name(kern.merged)} + {r}" if kern.merged else r


def slide_column(kern: Kernel) -> tuple[int, dict] | None:
    """(dimension, index) of the row operand's one dimension that the rows r walk, when it
    is `r + k + constant` and no other index holds r or k: a stride-1, dilation-1 window."""
    ri, ki = isl_name(kern.r), isl_name(kern.k)
    dims = [d for d, idx in enumerate(kern.a.index) if ri in idx or ki in idx]
    if len(dims) != 1:
        return None
    idx = {x: c for x, c in kern.a.index[dims[0]].items() if c}
    if {x: c for x, c in idx.items() if x != 1} != {ri: 1, ki: 1}:
        return None
    return dims[0], idx


def sliding_row(s: Statement, kern: Kernel, scop: Scop, t: Target) -> Kernel | None:
    """A depthwise kernel as a sliding row (`Kernel.slide`) where that applies: stride 1
    and dilation 1 along the rows, kh run inside (kin), and at most `Tuning.dw_row_max` outputs a
    row. One call then computes a whole output row of 16 channels, loading each input
    column once for the up to KW outputs that read it; the kw taps a padding border cuts
    are skipped inside the kernel, so a row is one call instead of a chunk of RB rows plus
    a one-row kernel at each border. kh stays ranged per output row (`Kernel.ranged`).
    None where it does not apply; the chunked kernel `kern` is then the one to use, and
    also where the sliding row's border rule turns out not to be the domain's
    (`_slides_exactly`). Rows of 28 spill their 28 accumulators (docs/tuning-constants.md,
    `dw_row_max`).
    """
    if not kern.vec_a or not kern.kin or kern.k2 or kern.r is None:
        return None
    col = slide_column(kern)
    if col is None:
        return None
    d, idx = col
    box = dict(zip([isl_name(x) for x in s.iterators], extents(s)))
    (r_lo, r_hi), (k_lo, k_hi) = box[isl_name(kern.r)], box[isl_name(kern.k)]
    rows, taps = r_hi - r_lo + 1, k_hi - k_lo + 1
    if not 1 < rows <= t.tuning.dw_row_max or rows + taps + 1 > t.max_registers + 1:
        return None  # (registers: the accumulators, the taps' weights and the input vector)
    first = r_lo + k_lo + idx.get(1, 0)  # the input column of the row's first tap
    off = max(0, -first)  # the kernel's pointer is at column first + off, the first valid
    extent = scop.buffers[kern.a.array].shape[d]
    cols = min(extent - first - off, rows + taps - 1 - off)
    if off >= taps or cols < 1:
        return None
    return dataclasses.replace(kern, rb=rows, slide=(taps, cols, off), ranged=[kern.kin],
                               steps=1)


def _cut(s: Statement, d: int, lo_hi: tuple[int, int]) -> bool:
    """Whether the range of iterator d of `s` depends on the other iterators (a padding
    border cuts it): the domain is not its projection times [lo, hi]."""
    free = s.domain.eliminate(isl.dim_type.set, d, 1)
    box = isl.Set.universe(s.domain.get_space())
    box = box.lower_bound_val(isl.dim_type.set, d, lo_hi[0]).upper_bound_val(
        isl.dim_type.set, d, lo_hi[1])
    return not free.intersect(box).is_equal(s.domain)
