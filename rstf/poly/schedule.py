"""New schedules for a raised subgraph: contraction tiling around microkernels, checked
against the exact dependences.

Each op-function call is scheduled on its own (calls stay in their original order, so
dependences between calls hold by construction). Within a call every statement keeps its
original 2d+1 schedule, except a *contraction* `Y[..] += A[..] * B[..]` whose loops split
into four roles:

- v: the unit-stride output column (stride 1 in Y and B, absent from A), vectorised;
- k: the innermost reduction loop (absent from Y);
- r: an output row loop (absent from B), register-blocked;
- the others: outer output loops and outer reduction loops, in their original order.

The column loop is tiled by VB = VLEN*NV (VLEN: the floats of a vector register) and the
rows by chunks of RB (sizes from `tilemodel.choose_tile`): for each outer point and
column tile, the rows whose whole tile row lies in the domain (the domain is convex, so
testing the corners suffices) form an interval, cut into RB-row chunks from its start, the
last one shorter. Each chunk is one
instance of a kernel statement `K<S>`, emitted as a microkernel call over the whole k range
(a kernel of that many rows). The order is `outer outputs, column tile, outer reductions,
chunk, k, r, v`: every output element still sees its reduction in the original order, so
the schedule is legal (and checked: `check_schedule_legal` on the call's dependences, the
tiling is dropped otherwise). The points no chunk covers (column remainders, borders where
the reduction range is cut) stay statement `S`, restricted to them, in the same order.

A reduction loop just outside k that continues k contiguously in both operands (a first
convolution's kw around 3 input channels) is merged into the kernel's reduction.

A *depthwise* contraction `Y[.., c] += A[.., c] * B[.., c]` (the column loop at unit stride
in both operands) gets the same tiling around a kernel that loads A as vectors
(`Kernel.vec_a`), one vector (16 channels with AVX-512) wide and at most `Tuning.dw_max_rb` rows:
inlined with its constant strides, gcc loads each input vector once for the taps that
share it (a sliding window) and keeps it in a register, so a tile needs registers for its
accumulators, a row of taps' weights *and* its input window. At 3 vectors wide (8x48) they
spill to the stack; 16 wide they fit (docs/tuning-constants.md, depthwise tiles). A stride-1
row of at most `dw_row_max` outputs is one *sliding-row* call instead (`sliding_row`).

A short reduction (at most `kin_depth` steps in all: the first conv's 3x3x3, a depthwise
conv's 3x3 taps) also runs its next outer reduction loop inside the kernel (`Kernel.kin`:
kh, as the kernel's second reduction level), so one call computes an output's whole
reduction and the fused epilogue can run in registers (`regepi`). So does a longer one,
up to `kin_depth_long` steps, whose own calls would be short (`short_call`: a 3x3 conv
over 32 channels runs kw x ic, not ic alone) or whose next loop no padding border cuts.
Where that leaves one outer reduction (the 3x3 conv's kh), it runs inside as well
(`Kernel.kin3`, the kernel's third level): one call per output's whole reduction.
Such a kernel's reduction ranges are *per chunk* (`Kernel.ranged`): at a padding border
the taps that fall outside the input are cut, so the rows are grouped by the ranges they
have (isl's lexmin/lexmax of each reduction loop, per row) and a border row runs in a
kernel with fewer taps instead of the textbook loops. Grouping by ranges is checked, not
assumed: every instance of the chunked kernel must cover points of the domain only, each
once.

Recognising a contraction and choosing its kernel (roles, tile, merged rows, sliding rows,
the K2 level, with thresholds from `tuning.Tuning`) is
`contraction.py`'s; this module tiles the kernels in time (chunks, the order of the
column tiles and the rows, residual loops) and checks the result (`schedule_call`).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import islpy as isl

from .contraction import (find_contraction, row_expr, run_inside, slide_column,
                          sliding_row)
from .deps import Dependences
from .groups import (CallSchedule, Kernel, extents, flat_addr, is_pointwise, kernel_roles,
                     pad_time, violations)
from .kblocks import choose_k_block
from .kloop import trip_steps
from .kslices import UnslicedStatement
from .tilemodel import choose_order, single_vector_tile
from .scop import Scop, Statement, isl_name
from .target import Target
from .tiles import Extents, TileChoice


def _whole(kern: Kernel) -> dict[str, tuple[int, int]]:
    """The kernel's reduction loops (isl names) that every call runs whole: (lo, hi)."""
    loops = ((kern.k, kern.k_lo, kern.k_hi), (kern.k2, kern.k2_lo, kern.k2_hi))
    return {isl_name(x): (lo, hi) for x, lo, hi in loops if x and x not in kern.ranged}


def _chunks(s: Statement, kern: Kernel, prefix: str) -> isl.Set:
    """The kernel instances { K[outs, u, reds, s, e] }.

    For each outer point and column tile u, the rows r whose whole row of the tile (every
    k, every column of u) lies in the domain form an interval [lo, hi] (the domain is
    convex, so its corners decide). It is cut into chunks [s, e] of RB rows from lo, the
    last one shorter: TTILE's composition of kernel sizes, so padding borders and row
    remainders run in (smaller) kernels too, not in the textbook loops.

    A ranged kernel's instances are { K[outs, u, reds, lo0, hi0, .., s, e] }: the corners
    are taken over the columns (and any whole-range loop) only, each row's range of each
    ranged loop is its lexmin/lexmax, and the rows are chunked per (outer point, ranges)."""
    outs, reds, r, k, v = kernel_roles(s, kern)
    iv = [isl_name(x) for x in s.iterators]
    vb, rb = kern.vb, kern.rb
    o = outs + ["u"] + reds
    rr = r or "r0"
    ranged = [isl_name(x) for x in kern.ranged]
    # { [o, r, ranged] : every corner (k, v) of the tile row is in the domain }; the ranged
    # loops stay free.
    full = None
    cond = (["r0 = 0"] if r is None else []) + ([f"u = {kern.u_last}"] if kern.cols else [])
    whole = _whole(kern)
    # A sliding row's taps are cut inside the kernel: a row needs some tap in the domain.
    free = []
    if kern.slide:
        del whole[k]
        free = [k]
    # Merged rows: the row rr is m = merged_n * o + r, o and r the statement's own.
    mo = isl_name(kern.merged) if kern.merged else None
    if mo:
        rr = "m_"
        cond.append(f"m_ = {kern.merged_n}*mo_ + mr_")
    rename = {mo: "mo_", r: "mr_"} if mo else {}
    for *corner, cv in itertools.product(*whole.values(), (0, kern.span - 1)):
        fixed = dict(zip(whole, corner))
        target = [f"{vb}*u + {cv}" if x == v else str(fixed[x]) if x in fixed else
                  rename.get(x, x) for x in iv]
        m = isl.Map(f"{prefix}{{ [{', '.join(o + [rr] + ranged + free)}] -> "
                    f"{s.name}[{', '.join(target)}]"
                    + (f" : {' and '.join(cond)}" if cond else "") + " }")
        part = m.intersect_range(s.domain).domain()
        if free:
            part = part.project_out(isl.dim_type.set, len(o) + 1 + len(ranged), len(free))
        full = part if full is None else full.intersect(part)
    if not ranged:
        return _chunk_set(full, len(o), rb, prefix, kern.name)
    # Each row's range of each ranged loop: [o, r] -> [lo0, hi0, lo1, hi1, ..]; the rows
    # are then chunked by (o, ranges).
    orr = ", ".join(o + [rr])
    fiber = isl.Map(f"{prefix}{{ [{orr}, {', '.join(ranged)}] -> [{orr}] }}"
                    ).intersect_domain(full).reverse()
    bounds = None
    for d in ranged:
        one = fiber.apply_range(isl.Map(f"{prefix}{{ [{orr}, {', '.join(ranged)}] -> [{d}] }}"))
        lo_hi = one.lexmin().flat_range_product(one.lexmax())
        bounds = lo_hi if bounds is None else bounds.flat_range_product(lo_hi)
    rg = [f"{b}{i}" for i in range(len(ranged)) for b in ("lo", "hi")]
    keyed = bounds.wrap().flatten().apply(isl.Map(
        f"{prefix}{{ [{orr}, {', '.join(rg)}] -> [{', '.join(o + rg + [rr])}] }}"))
    return _chunk_set(keyed, len(o) + len(rg), rb, prefix, kern.name)


def _covers_once(s: Statement, rel: isl.Map) -> bool:
    """A ranged kernel's instances (`rel`: instance -> the points it computes, before
    intersecting with the domain) touch only points of the domain, each once."""
    return rel.range().is_subset(s.domain) and rel.reverse().is_single_valued()


def _slides_exactly(s: Statement, kern: Kernel, kdom: isl.Set, rel: isl.Map, scop: Scop,
                    prefix: str) -> bool:
    """A sliding-row kernel computes, of its instance's box `rel` (instance -> points),
    the points whose input column is in [0, extent), each instance a whole row of RB outputs
    from the rows' first. That must be exactly the domain's points of the box, each
    covered once."""
    n = kdom.dim(isl.dim_type.set)
    lo, hi = extents(s)[[isl_name(x) for x in s.iterators].index(isl_name(kern.r))]
    ends = kdom.project_out(isl.dim_type.set, 0, n - 2)
    if not ends.is_equal(isl.Set(f"{prefix}{{ [{lo}, {hi}] }}")) or hi - lo + 1 != kern.rb:
        return False
    d, idx = slide_column(kern)
    extent = scop.buffers[kern.a.array].shape[d]
    col = " + ".join(f"{c}*{x}" if x != 1 else str(c) for x, c in idx.items())
    iv = ", ".join(isl_name(x) for x in s.iterators)
    inb = isl.Set(f"{prefix}{{ {s.name}[{iv}] : 0 <= {col} < {extent} }}")
    mine = rel.intersect_range(inb)
    return (mine.is_equal(rel.intersect_range(s.domain))
            and mine.reverse().is_single_valued())


def _chunk_set(full: isl.Set, n: int, rb: int, prefix: str, name: str) -> isl.Set:
    """{ name[o, s, e] : [s, e] is a chunk of rb rows of the interval {r : (o, r) in full} }."""
    o = [f"o{i}" for i in range(n)]
    on = ", ".join(o)
    to_o = isl.Map(f"{prefix}{{ [{on}, r] -> [{on}] }}").intersect_domain(full).reverse()
    m = to_o.apply_range(isl.Map(f"{prefix}{{ [{on}, r] -> [r] }}"))  # [o] -> [r]
    lo_hi = m.lexmin().flat_range_product(m.lexmax())  # [o] -> [lo, hi]
    chunk = isl.Map(f"{prefix}{{ [lo, hi] -> [s, e] : exists t : t >= 0 and s = lo + {rb}*t "
                    f"and s <= hi and ((e = s + {rb - 1} and e <= hi) or "
                    f"(e = hi and hi < s + {rb - 1})) }}")
    return lo_hi.apply_range(chunk).wrap().flatten().set_tuple_name(name).coalesce()


def tile_order(kern: Kernel, outs: list[str], u: str, reds: list[str]) -> list[str]:
    """The time dimensions above a tile's chunks: outer outputs, column tile, outer
    reductions; the column tile first when `kern.tile_outer`, below the chunk when
    `kern.chunk_outer` (`tile_time`)."""
    if kern.chunk_outer:
        return outs + reds
    return [u] + outs + reds if kern.tile_outer else outs + [u] + reds


def tile_time(kern: Kernel, outs: list[str], u: str, reds: list[str], s: str) -> list[str]:
    """The time dimensions of a chunk starting at row `s` of column tile `u`: `tile_order`,
    then the chunk; or, `kern.chunk_outer`, the chunk, then the column tile. A depthwise
    conv's rows read a window of input rows whose every channel a chunk's tiles share: with
    the tiles inside the chunk, the chunk's window stays in L1 for all of them, instead of
    each tile walking the whole window again (3 input rows of 112x112x32, 43 KB, come back
    from L2 for each 8-channel tile on AVX2). Legal either way (checked): the tiles and the
    chunks are output loops, and every output keeps its reduction order."""
    return tile_order(kern, outs, u, reds) + ([s, u] if kern.chunk_outer else [s])


def _order(s: Statement, kern: Kernel, scop: Scop, t: Target) -> None:
    """Set the kernel's loop order (and maybe a narrower tile) from `choose_order`, then
    take the target's measured choice where its `TileTable` has one (`tiles.py`: tile,
    order, steps a trip and the outer reductions a call runs inside), then its K blocks
    for that tile and order (`kblocks.choose_k_block`)."""
    outs, reds, r, k, v = kernel_roles(s, kern)
    box = dict(zip([isl_name(x) for x in s.iterators], extents(s)))
    n = lambda x: box[x][1] - box[x][0] + 1
    depth = math.prod(n(x) for x in reds) * kern.depth
    a = scop.buffers[kern.a.array]
    if a.size is None or kern.vec_a:  # (a depthwise kernel's B is a few taps: no panel)
        return
    rows = (n(r) * n(isl_name(kern.merged)) if kern.merged else n(r)) if r else 1
    # A's bytes the contraction reads: at most its outputs' rows times their reduction,
    # which is less than A where the rows skip some of it (a stride-2 1x1 conv reads a
    # quarter of its input: ResNet's 28x28x512 to 14x14x1024, 0.4 of 1.6 MB, the
    # difference between A fitting L2 beside a panel or not) and more where windows
    # overlap (a 3x3 conv's taps: then A's size).
    outer = math.prod(map(n, outs))
    a_bytes = 4 * min(a.size, outer * rows * depth)
    order = choose_order(kern.rb, kern.nv, rows, n(v), outer, depth, a_bytes, t)
    kern.rb, kern.nv, kern.tile_outer = order.rb, order.nv, order.tile_outer
    # Rows outermost, a call's rows of A are read again by each column tile from L1: there
    # single-vector tiles pay where the reduction is short (`tilemodel.single_vector_tile`)
    # and one loop (a 1x1 conv's, a GEMM's). With the column tiles outermost, each tile
    # streams A again from L2, NV times as often; first convs (their kw x ic and kh in the
    # call) measured either way: MobileNet v2's 3% faster, Inception v3's 5% slower.
    if (t.single_vector_tiles and not kern.tile_outer and not kern.merged and r
            and not kern.kin and not kern.k2 and not _residual_after(s, kern.y.array, scop)):
        one = single_vector_tile(rows, n(v), kern.depth, t)
        if one is not None:
            kern.rb, kern.nv = one[0], one[1]
    if t.tiles is not None:  # a measured choice, where the machine's profile has one
        loops = tuple(x for x, on in (("kin", kern.kin), ("kin3", kern.kin3), ("k2", kern.k2),
                                      ("merged", kern.merged)) if on)
        ext = Extents(rows, n(v), outer, depth, kern.depth, loops)
        choice, kern.chosen_by = t.tiles.pick(TileChoice(kern.rb, kern.nv, kern.tile_outer),
                                              ext, t)
        kern.rb, kern.nv, kern.tile_outer = choice.rb, choice.nv, choice.tile_outer
        kern.key = ext.key(t)
        if choice.inside >= 0 and run_inside(s, kern, scop, choice.inside):
            kern.inside_chosen = choice.inside
            reds = kernel_roles(s, kern)[1]
        if choice.steps and kern.steps == t.k_steps:
            # (a kernel whose rows overlap in A within a trip keeps the fewer steps
            # `trip_steps` allowed it; so does it at the measured count)
            aa = flat_addr(kern.a, scop) or {}
            kern.steps = trip_steps(choice.steps, aa.get(r, 0) if r else 0, aa.get(k, 0))
            kern.steps_chosen = choice.steps
    kern.kb = choose_k_block(kern, rows, math.prod(map(n, reds)), t)


def _residual_after(s: Statement, y: str, scop: Scop) -> bool:
    """Whether the pointwise statements after contraction `s` that read its output y, and
    what they write in turn, read another tensor of y's size: a residual add, which the
    contraction's epilogue will run (or whose other operand y is: a shortcut, counted too,
    to stay on the measured side). ResNet-50's 1x1 convs before one measured 1-7% slower in
    single-vector tiles, MobileNet v2's and Inception v3's others 1-8% faster."""
    size = scop.buffers[y].size
    if size is None:
        return False
    seen, todo = {y}, [y]
    while todo:
        array = todo.pop()
        for t in scop.statements:
            if t.call == s.call or not any(a.array == array and not a.write
                                           for a in t.accesses) or not is_pointwise(t, scop):
                continue
            for a in t.accesses:
                if a.array in seen:
                    continue
                if not a.write and scop.buffers[a.array].size == size:
                    return True
                if a.write:
                    seen.add(a.array)
                    todo.append(a.array)
    return False


def _tiling(s: Statement, kerns: list[Kernel], pos: int, prefix: str, scop: Scop):
    """([(kernel domain, kernel time)] per kernel, residual time, T_S): the schedule of a
    tiled contraction (its whole tiles' kernel, maybe a remainder kernel). T_S is every
    point's time as it actually runs (in a kernel chunk, or in the residual loops), which
    is what the dependence check is given. None when a ranged kernel's chunks would not
    cover each point of the domain once (`_covers_once`)."""
    kern = kerns[0]
    outs, reds, r, k, v = kernel_roles(s, kern)
    iv = [isl_name(x) for x in s.iterators]
    vb = kern.vb
    o = outs + ["u"] + reds
    ranged = [isl_name(x) for x in kern.ranged]
    rg = [f"{b}{i}" for i in range(len(ranged)) for b in ("lo", "hi")]
    # K blocks: the block kb, one more outer reduction (its points' time: floor(k / kb))
    kbl, kb_expr = (["kb"], [f"floor(({k} - {kern.k_lo})/{kern.kb})"]) if kern.kb else ([], [])
    kd = ", ".join(o + kbl + rg + ["s", "e"])
    k2 = [isl_name(x) for x in (kern.kin3, kern.kin, kern.k2) if x]  # reductions around k
    zeros = ", 0" * (3 + len(k2))
    # A ranged kernel's loops run its chunk's ranges; the others their whole range.
    red_cond = "".join(f"lo{i} <= {x} <= hi{i} and " for i, x in enumerate(ranged)) \
        + "".join(f"{lo} <= {x} <= {hi} and " for x, (lo, hi) in _whole(kern).items())
    ot = tile_time(kern, outs, "u", reds + kbl, "s")
    rx = row_expr(kern)
    row = f"s <= {rx} <= e and " if r else ""
    if kern.kb:
        row += (f"{kern.k_lo} + {kern.kb}*kb <= {k} < {kern.k_lo} + {kern.kb}*kb + {kern.kb}"
                " and ")
    out, covered, start = [], None, None
    for kn in kerns:
        kdom = _chunks(s, kn, prefix)
        if kern.kb:
            kdom = _k_blocks(kdom, len(o), kn, prefix)
        ktime = isl.Map(f"{prefix}{{ {kn.name}[{kd}] -> [{pos}, {', '.join(ot)}{zeros}] }}"
                        ).intersect_domain(kdom)
        rel = isl.Map(f"{prefix}{{ {kn.name}[{kd}] -> {s.name}[{', '.join(iv)}] : "
                      f"{row}{red_cond if ranged else ''}{vb}*u <= {v} < {vb}*u + {kn.span} }}")
        rel = rel.intersect_domain(kdom)
        if kn.slide and not _slides_exactly(s, kn, kdom, rel, scop, prefix):
            return None
        if ranged and not kn.slide and not _covers_once(s, rel):
            return None
        rel = rel.intersect_range(s.domain)
        st = rel.reverse().apply_range(isl.Map(f"{prefix}{{ {kn.name}[{kd}] -> [s] }}"))
        covered = rel.range() if covered is None else covered.union(rel.range())
        start = st if start is None else start.union(st)
        out.append((kdom, ktime))
    u_expr = f"floor(({v})/{vb})"
    head = isl.Map(f"{prefix}{{ {s.name}[{', '.join(iv)}] -> "
                   f"[{', '.join([str(pos)] + tile_order(kern, outs, u_expr, reds + kb_expr))}]"
                   " }")
    below = [u_expr] if kern.chunk_outer else []  # the column tile, below the chunk
    tail = isl.Map(f"{prefix}{{ {s.name}[{', '.join(iv)}] -> "
                   f"[{', '.join(below + k2 + [k, rx, v])}] }}")
    t_cov = head.flat_range_product(start).flat_range_product(tail).intersect_domain(covered)
    rest = s.domain.subtract(covered).coalesce()
    rest_time = tile_order(kern, outs, u_expr, reds + kb_expr) + [rx] + below + k2 + [k, v]
    t_rest = isl.Map(f"{prefix}{{ {s.name}[{', '.join(iv)}] -> [{pos}, "
                     f"{', '.join(rest_time)}, 0] }}").intersect_domain(rest)
    return out, t_rest, t_cov.union(t_rest)


def _k_blocks(kdom: isl.Set, n: int, kern: Kernel, prefix: str) -> isl.Set:
    """The chunks `kdom` { K[o.., s, e] } (n outer dimensions o) once per K block:
    { K[o.., kb, s, e] : 0 <= kb < the blocks of k }."""
    d = kdom.dim(isl.dim_type.set)
    xs = [f"x{i}" for i in range(d)]
    m = isl.Map(f"{prefix}{{ {kern.name}[{', '.join(xs)}] -> "
                f"{kern.name}[{', '.join(xs[:n] + ['kb'] + xs[n:])}] : "
                f"0 <= kb < {kern.k_blocks} }}")
    return kdom.apply(m)


def _remainder(s: Statement, kern: Kernel) -> Kernel | None:
    """A kernel for the last, partial column tile (AVX-512, 24 output channels: one tile of
    16, then 8; 1000 classes: 15 tiles of 64, then 40; attention over 197 tokens: 12 tiles
    of 16, then 5), or None. Its width is the next multiple of half a vector, the last
    vector's lanes past the columns masked off (`Shape.pad`): a depthwise or sliding-row
    kernel, which reads its row operand as vectors too, takes only the multiple of half a
    vector, and leaves the rest to the textbook loops."""
    _, _, _, _, v = kernel_roles(s, kern)
    lo, hi = dict(zip([isl_name(x) for x in s.iterators], extents(s)))[v]
    vb, half = kern.vb, kern.vl // 2
    u_last = hi // vb
    left = hi - max(lo, vb * u_last) + 1
    cols = left if not (kern.vec_a or kern.slide) else left // half * half
    if cols == 0 or cols >= vb or lo > vb * u_last:
        return None
    return dataclasses.replace(kern, name=f"{kern.name}r", cols=cols, u_last=u_last,
                               pad=-cols % half, dims=list(kern.dims))


def _unsliced(s: Statement, why: str) -> None:
    """Raise `UnslicedStatement` for a k-sliced statement (`Statement.k_slice`) that its
    kernels will not compute whole: its C alone does not say what it computes."""
    if s.k_slice:
        raise UnslicedStatement(f"{s.name} ({s.node}), summed in k slices: {why}")


def schedule_call(scop: Scop, call: int, stmts: list[Statement], deps: Dependences,
                  depth: int, target: Target, tile: bool = True) -> CallSchedule:
    """The new schedule of one call's statements (see the module docstring), its tiles
    shaped for `target`."""
    prefix = f"[{', '.join(map(isl_name, scop.params))}] -> " if scop.params else ""
    time = {s.name: pad_time(s.schedule.intersect_domain(s.domain), depth) for s in stmts}
    cs = CallSchedule(call, stmts, dict(time), dict(time))
    for s in stmts:
        kern = find_contraction(s, scop, target) if tile else None
        if kern is None:
            _unsliced(s, "no microkernel takes it")
            continue
        _order(s, kern, scop, target)
        outs, reds, _, _, _ = kernel_roles(s, kern)
        i2c = {isl_name(c): c for c in s.iterators}
        tiling = None
        # A sliding row where it applies and is exact, else the chunks of rows.
        for kern in filter(None, (sliding_row(s, kern, scop, target), kern)):
            kern.dims = ([i2c[x] for x in outs] + ["u"] + [i2c[x] for x in reds]
                         + (["kb"] if kern.kb else [])
                         + [f"{b}{i}" for i in range(len(kern.ranged)) for b in ("lo", "hi")]
                         + ["s", "e"])
            kerns = [kern] + [x for x in [_remainder(s, kern)] if x is not None]
            tiling = _tiling(s, kerns, s.path[0], prefix, scop)
            if tiling is not None:
                break
        if tiling is None:
            cs.refused.append(f"{s.name} ({s.node}): its rows do not group by reduction "
                              f"range")
            _unsliced(s, "its rows do not group by reduction range")
            continue
        tiles, t_rest, t_s = tiling
        if tiles[0][0].is_empty():
            _unsliced(s, "no whole tile")
            continue
        if not t_rest.is_empty():
            _unsliced(s, "points are left to the textbook loops")
        trial = dict(cs.time)
        trial[s.name] = pad_time(t_s, depth)
        bad = violations(stmts, deps, trial)
        if bad:
            cs.refused.append(f"{s.name} ({s.node}): tiling breaks {bad[0]}")
            _unsliced(s, f"tiling breaks {bad[0]}")
            continue
        cs.time[s.name] = trial[s.name]
        cs.ast_time[s.name] = pad_time(t_rest, depth)
        for kn, (kdom, ktime) in zip(kerns, tiles):
            if not kdom.is_empty():
                cs.ast_time[kn.name] = pad_time(ktime, depth)
                cs.kernels.append(kn)
    return cs


