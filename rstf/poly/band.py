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
- the band's row loop (time dimension m, Y's dimension m-1) has at least MIN_ROWS
  iterations and one row of Y fits the budget of a stack buffer.
A 3x3 convolution after the pair's producer reads rows h-1..h+1, so the check refuses it:
fusing it needs recomputed halo rows, which this pass does not do.
Each group keeps its own kernels and register epilogue; the lowering runs them in one
function whose outer parallel loop is the band's row loop.
"""
from __future__ import annotations

import dataclasses
import math

import islpy as isl

from . import regepi
from .deps import Dependences
from .fuse import array_users
from .raise_c import Scop
from .schedule import CallSchedule, _violations

ROW_BYTES = 256 * 1024  # largest contracted row (a stack buffer per iteration)
MIN_ROWS = 16  # fewer band rows: the groups' own finer parallel loops balance better


@dataclasses.dataclass
class BandGroup:
    """Consecutive scheduled groups fused over their m outer time dimensions."""
    parts: list[CallSchedule]
    m: int  # time dimensions 1..m shared (the band's loops)
    time: dict[str, isl.Map]  # every original statement's new time
    ast_time: dict[str, dict[str, isl.Map]]  # part's call -> its AST statements' new times
    rows: dict[str, int]  # band-contracted buffer -> its leading dimensions dropped (m)

    @property
    def call(self) -> int:
        return self.parts[0].call

    @property
    def statements(self):
        return [s for p in self.parts for s in p.statements]

    @property
    def kernels(self):
        return [k for p in self.parts for k in p.kernels]

    @property
    def refused(self):
        return [r for p in self.parts for r in p.refused]


def parts_of(cs) -> list[CallSchedule]:
    """The groups a scheduled entry runs: a band's parts, or the group itself."""
    return cs.parts if isinstance(cs, BandGroup) else [cs]


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
              users: dict[str, set[str]]) -> BandGroup | None:
    """The band fusion of groups a and b (a runs first), or None (see the module doc).
    `users`: `fuse.array_users(scop)`."""
    if a.chain is None and not a.kernels:
        return None
    for p in (a, b):
        # Packed panels belong to a column-tile loop outside the rows, and a row-buffer
        # epilogue declares its rows by time dimension: neither survives the new dimension.
        if any(k.tile_outer for k in p.kernels) or (p.rows and regepi.plan(scop, p) is None):
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
        if row > ROW_BYTES:
            break
        if not all(_rows_match(acc.relation, p.time[s.name], m)
                   for p in (a, b) for s in p.statements for acc in s.accesses
                   if acc.array == y):
            continue
        if buf.shape[m - 1] < MIN_ROWS:  # the band's row loop: time dimension m = Y's m-1
            return None
        time = {}
        for j, p in enumerate((a, b)):
            for s in p.statements:
                time[s.name] = _shift(p.time[s.name], pos, m + 1, j)
        if _violations(a.statements + b.statements, deps, time):
            return None
        ast_time = {p.call: {n: _shift(t, pos, m + 1, j) for n, t in p.ast_time.items()}
                    for j, p in enumerate((a, b))}
        return BandGroup([a, b], m, time, ast_time, {y: m})
    return None


def fuse_bands(scop: Scop, deps: Dependences, schedules: list) -> list:
    """The schedules with each fusable consecutive pair replaced by its BandGroup (a group
    joins one band at most)."""
    out: list = []
    users = array_users(scop)
    for cs in schedules:
        prev = out[-1] if out else None
        if isinstance(prev, CallSchedule) and isinstance(cs, CallSchedule):
            group = fuse_pair(scop, deps, prev, cs, users)
            if group is not None:
                out[-1] = group
                continue
        out.append(cs)
    return out
