"""Row-band fusion across ops: two consecutive scheduled groups run in one loop nest over
their shared outer output loops, and the tensor between them shrinks to one row.

MobileNet's inverted residual block ends with a depthwise convolution (and its batch norm
and ReLU6) whose output feeds a 1x1 projection conv: the projection's output row h reads
the depthwise output's row h and nothing else. Run separately, the depthwise group writes
its whole output (1.8 MB for block 2) and the projection reads it back, out of a shared
L3 that the machine's other tenants thrash. Fused, each iteration of the outer loops
(batch n, row h) runs the producer group on row h, then the consumer group on it, while
the row is in L1: the tensor is *contracted* to one row, a buffer local to the iteration
(and so to the thread), and needs no workspace.

A pair (A, B) of consecutive groups fuses when, for the largest m >= 1 that works:
- one temporary Y is written only by A and read only by B, and every access to Y (in A or
  in B) touches Y[t1]..[tm][...] at the statement's time (pos, t1, .., tm, ...): an
  iteration of the m outer time dimensions writes and reads its own rows of Y only;
- the new times, A at (posA, t1..tm, 0, rest) and B at (posA, t1..tm, 1, rest), keep every
  dependence between the two groups' statements (checked against the exact dependences);
- the band's row loop (time dimension m, Y's dimension m-1) has at least `Tuning.min_band_rows`
  iterations and one row of Y fits the budget of a stack buffer.
A 3x3 convolution after the pair's producer reads rows h-1..h+1, so the check refuses it.

Halo bands (`fuse_halo`, after the row bands). MobileNet v2's block 1 expands a
112x112x16 tensor to 96 channels (4.8 MB, more than a core's L2) for a stride-2 3x3
depthwise convolution: row h of the depthwise output reads expanded rows 2h..2h+2. Here
the expansion group A runs inside the band of its consumer X (a group, or a row band that
starts with it), computing into a buffer of the window's kh rows, for each band row h, the
rows s*h+lo .. s*h+lo+kh-1 it needs. The kh - s rows two windows share belong to both
iterations (overlapped tiling): that is what keeps every iteration, and so the band loop,
parallel. The lowering keeps one window per thread and, when the thread's previous band
row was h-1, keeps those rows instead of computing them again (`emit.CallLowering._carry_rows`: the
window slides down a buffer of a few windows, and they move to its top when it reaches the
end), so only the first band row of each thread's chunk recomputes them. A's
schedule becomes a relation (one point per window holding the row), which isl's AST
generator executes once per point. It is legal when
- A writes nothing but Y (and what its own chain contracts), Y is read by X's first group
  only, and X writes nothing A reads (a later iteration's A may then read any time);
- A's own dependences stay inside one row (recomputing a row repeats A's work exactly);
- every read of Y by X's first group at band row h falls in the window, and every write by
  A is to the row of its own time.
It is worth it only for a stride of 2 or more with kh <= s + 1 (at most one row moved per
band row) and a Y of `Tuning.halo_min_bytes` or more: a smaller one stays in L2 anyway
(docs/tuning-constants.md, `halo_min_bytes`).
Each group keeps its own kernels and register epilogue; the lowering runs them in one
function whose outer parallel loop is the band's row loop.
"""
from __future__ import annotations

import math

import islpy as isl

from .deps import Dependences
from .fuse import array_users
from .scop import Scop
from .tuning import Tuning
from .groups import (CallSchedule, Group, call_dependences, eq_prefix,
                     union_maps, violations)



def _shift(m: isl.Map, pos: int, at: int, j: int) -> isl.Map:
    """The time map with dimension 0 set to `pos` and a new dimension `at` fixed to j."""
    out = isl.dim_type.out
    m = m.project_out(out, 0, 1).insert_dims(out, 0, 1).fix_val(out, 0, pos)
    return m.insert_dims(out, at, 1).fix_val(out, at, j)


def _rows_match(rel: isl.Map, time: isl.Map, m: int) -> bool:
    """Every instance touches Y[t1]..[tm][...] at its time (pos, t1, .., tm, ...)."""
    tr = time.reverse().apply_range(rel)
    nt, ny = tr.dim(isl.dim_type.in_), tr.dim(isl.dim_type.out)
    if ny <= m:
        return False
    t = ", ".join(f"t{i}" for i in range(nt))
    x = ", ".join(f"x{i}" for i in range(ny))
    cons = " and ".join(f"t{i + 1} = x{i}" for i in range(m))
    name = tr.get_tuple_name(isl.dim_type.out)
    want = isl.Map(f"{{ [{t}] -> {name}[{x}] : {cons} }}").align_params(tr.get_space())
    return tr.reset_tuple_id(isl.dim_type.in_).is_subset(want)


def fuse_pair(scop: Scop, deps: Dependences, a: CallSchedule, b: CallSchedule,
              users: dict[str, set[str]], tuning: Tuning) -> Group | None:
    """The band fusion of groups a and b (a runs first), or None (see the module doc).
    `users`: `fuse.array_users(scop)`."""
    if a.chain is None and not a.kernels:
        return None
    for p in (a, b):
        # Packed panels belong to a column-tile loop outside the rows, and a row-buffer
        # epilogue declares its rows by time dimension: neither survives the new dimension.
        if any(k.tile_outer for k in p.kernels) or (p.rows and p.epilogue is None):
            return None
    an = {s.name for s in a.statements}
    bn = {s.name for s in b.statements}
    written = {acc.array for s in a.statements for acc in s.accesses if acc.write}
    ys = [y for y in written if scop.buffers[y].role == "temp" and y not in a.rows
          and not (a.chain and y in a.chain.contracted)
          and users[y] & bn and users[y] <= an | bn
          and not any(acc.write for s in b.statements for acc in s.accesses if acc.array == y)]
    if len(ys) != 1:
        return None
    y = ys[0]
    buf = scop.buffers[y]
    if buf.size is None or not all(isinstance(d, int) for d in buf.shape):
        return None
    pos = int(a.time[a.statements[0].name].range().dim_min_val(0).to_python())
    for m in range(len(buf.shape) - 1, 0, -1):
        row = math.prod(buf.shape[m:]) * 4
        if row > tuning.row_bytes:
            break
        if not all(_rows_match(acc.relation, p.time[s.name], m)
                   for p in (a, b) for s in p.statements for acc in s.accesses
                   if acc.array == y):
            continue
        # the band's row loop: time dimension m = Y's m-1
        if buf.shape[m - 1] < tuning.min_band_rows:
            return None
        time = {}
        for j, p in enumerate((a, b)):
            for s in p.statements:
                time[s.name] = _shift(p.time[s.name], pos, m + 1, j)
        if violations(a.statements + b.statements, deps, time):
            return None
        ast_time = {p.call: {n: _shift(t, pos, m + 1, j) for n, t in p.ast_time.items()}
                    for j, p in enumerate((a, b))}
        return Group([a, b], m, time, ast_time, {y: m})
    return None


def fuse_bands(scop: Scop, deps: Dependences, schedules: list, tuning: Tuning) -> list:
    """The schedules with each fusable consecutive pair replaced by its Group (a group
    joins one band at most)."""
    users = array_users(scop)
    return _fuse_consecutive(schedules, lambda a, b: fuse_pair(scop, deps, a, b, users, tuning)
                             if isinstance(b, CallSchedule) else None)


def _fuse_consecutive(schedules: list, fuse) -> list:
    """The schedules with each group and the entry after it replaced by `fuse(group,
    entry)` where that is not None."""
    out: list = []
    for cs in schedules:
        prev = out[-1] if out else None
        if isinstance(prev, CallSchedule):
            group = fuse(prev, cs)
            if group is not None:
                out[-1] = group
                continue
        out.append(cs)
    return out


def _window(rel: isl.Map, time: isl.Map, m: int, s: int) -> tuple[int, int] | None:
    """(lo, hi): the bounds of x - s*tm over the elements Y[..][x][...] (dimension m-1)
    that the instances touch at their times (pos, t1, .., tm, ...); None if unbounded."""
    tr = time.reverse().apply_range(rel).reset_tuple_id(isl.dim_type.in_)
    nt, ny = tr.dim(isl.dim_type.in_), tr.dim(isl.dim_type.out)
    if tr.dim(isl.dim_type.param) or nt <= m:
        return None
    t = ", ".join(f"t{i}" for i in range(nt))
    x = ", ".join(f"x{i}" for i in range(ny))
    name = tr.get_tuple_name(isl.dim_type.out)
    off = isl.Map(f"{{ [[{t}] -> {name}[{x}]] -> [x{m - 1} - {s} * t{m}] }}")
    d = tr.wrap().apply(off)
    if d.is_empty():
        return None
    lo, hi = d.dim_min_val(0), d.dim_max_val(0)
    if not (lo.is_int() and hi.is_int()):
        return None
    return int(lo.to_python()), int(hi.to_python())


def _reshape(m: isl.Map, text) -> isl.Map:
    """The time map followed by `text(t)`, a map on its time vectors written over the
    names t = [t0, t1, ...] (the map's T stands for the vector)."""
    t = [f"t{i}" for i in range(m.dim(isl.dim_type.out))]
    return m.apply_range(isl.Map(text(t).replace("T", f"[{', '.join(t)}]")))


def fuse_halo(scop: Scop, deps: Dependences, a, x, users: dict[str, set[str]],
              tuning: Tuning):
    """A's group run inside X's band with the tensor between them contracted to a
    recomputed window of rows (see the module doc), or None. `a` is a CallSchedule, `x`
    a CallSchedule or a Group without a halo."""
    if not isinstance(a, CallSchedule) or not a.kernels:
        return None
    if isinstance(x, Group) and x.halo:
        return None
    parts = Group.of(x).parts
    for p in [a, *parts]:
        if any(k.tile_outer for k in p.kernels) or (p.rows and p.epilogue is None):
            return None
    b = parts[0]
    an = {s.name for s in a.statements}
    bn = {s.name for s in b.statements}
    local = set(a.rows) | set(a.chain.contracted if a.chain else ())
    written = {acc.array for s in a.statements for acc in s.accesses if acc.write} - local
    if len(written) != 1:
        return None
    y = written.pop()
    buf = scop.buffers[y]
    if (buf.role != "temp" or buf.size is None or buf.size * 4 < tuning.halo_min_bytes
            or not all(isinstance(d, int) for d in buf.shape) or len(buf.shape) < 3
            or not users[y] <= an | bn or not users[y] & bn):
        return None
    xs = [s for p in parts for s in p.statements]
    x_written = {acc.array for s in xs for acc in s.accesses if acc.write}
    a_read = {acc.array for s in a.statements for acc in s.accesses if not acc.write}
    if x_written & (a_read | {y}):
        return None
    ms = [x.m] if isinstance(x, Group) else range(len(buf.shape) - 1, 1, -1)
    for m in ms:
        if not all(_rows_match(acc.relation, a.time[s.name], m)
                   for s in a.statements for acc in s.accesses if acc.array == y):
            continue
        reads = [(acc.relation, x.time[s.name]) for s in b.statements for acc in s.accesses
                 if acc.array == y]
        if not all(_rows_match(rel, t, m - 1) for rel, t in reads):
            continue
        # The band's stride: the one whose windows are narrowest (on a finite domain any
        # stride gives bounded ones, a wrong stride wide ones).
        best = None
        for st in range(2, tuning.max_stride + 1):
            win = [_window(rel, t, m, st) for rel, t in reads]
            if all(win):
                lo, hi = min(w[0] for w in win), max(w[1] for w in win)
                if best is None or hi - lo < best[2] - best[1]:
                    best = (st, lo, hi)
        if best is None:
            continue
        st, lo, hi = best
        kh = hi - lo + 1
        h0 = min(int(x.time[s.name].range().dim_min_val(m).to_python()) for s in xs)
        h1 = max(int(x.time[s.name].range().dim_max_val(m).to_python()) for s in xs)
        if (kh > st + 1 or h1 - h0 + 1 < tuning.min_band_rows
                or kh * math.prod(buf.shape[m:]) * 4 > tuning.row_bytes):
            return None
        if not _halo_legal(scop, deps, a, xs, m):
            return None
        pos = int(a.time[a.statements[0].name].range().dim_min_val(0).to_python())
        # A: (pos, t1..t(m-1), h, 0, tm, ...) for every band row h whose window holds tm
        a_map = (lambda t: f"{{ T -> [{pos}, {', '.join(t[1:m])}, h, 0, {', '.join(t[m:])}] : "
                 f"{st} * h + {lo} <= t{m} <= {st} * h + {hi} and {h0} <= h <= {h1} }}")
        if isinstance(x, Group):  # X's parts 0, 1, .. become 1, 2, ..; one more dim
            x_map = (lambda t: f"{{ T -> [{pos}, {', '.join(t[1:m + 1])}, t{m + 1} + 1, "
                     f"{', '.join(t[m + 2:] + ['0'])}] }}")
        else:  # X: part 1 of the band, at the same depth as A
            x_map = (lambda t: f"{{ T -> [{pos}, {', '.join(t[1:m + 1])}, 1, "
                     f"{', '.join(t[m + 1:] + ['0'])}] }}")
        time = {s.name: _reshape(a.time[s.name], a_map) for s in a.statements}
        time.update({s.name: _reshape(x.time[s.name], x_map) for s in xs})
        ast_time = {a.call: {k: _reshape(v, a_map) for k, v in a.ast_time.items()}}
        for p in parts:
            at = x.ast_time[p.call] if isinstance(x, Group) else p.ast_time
            ast_time[p.call] = {k: _reshape(v, x_map) for k, v in at.items()}
        band_rows = dict(x.rows) if isinstance(x, Group) else {}
        band_rows[y] = m - 1
        return Group([a, *parts], m, time, ast_time, band_rows, {y: (st, lo, kh)})
    return None


def _halo_legal(scop: Scop, deps: Dependences, a: CallSchedule, xs: list, m: int) -> bool:
    """No dependence from X back to A, and A's own ones within one row (the same time
    dimensions 0..m): then running any of A's rows again, in any band iteration, after
    any of X's, computes the same values (see the module doc)."""
    valid = call_dependences(deps, a.statements + xs).validity
    a_dom = scop.union_set(s.domain for s in a.statements)
    x_dom = scop.union_set(s.domain for s in xs)
    if not valid.intersect_domain(x_dom).intersect_range(a_dom).is_empty():
        return False
    own = valid.intersect_domain(a_dom).intersect_range(a_dom)
    if own.is_empty():
        return True
    sched = union_maps(a.time[s.name] for s in a.statements)
    n = a.time[a.statements[0].name].dim(isl.dim_type.out)
    pairs = own.apply_domain(sched).apply_range(sched)
    return pairs.is_subset(isl.UnionMap.from_map(eq_prefix(n, m + 1)))


def fuse_halos(scop: Scop, deps: Dependences, schedules: list, tuning: Tuning) -> list:
    """The schedules with each group fused, by `fuse_halo`, into the band of the next."""
    users = array_users(scop)
    return _fuse_consecutive(
        schedules, lambda a, x: fuse_halo(scop, deps, a, x, users, tuning))
