"""Exact dependences of a raised subgraph, with isl's dataflow analysis.

All four kinds are *direct* (memory-based, not transitively closed), between statement
instances `S[i] -> T[j]` with S[i] running before T[j] in the original schedule:

- RAW (flow): each read's last writer of that element;
- WAW (output): each write's previous writer of that element;
- WAR (anti): each read's *next* writer of that element (computed on the reversed schedule);
- RAR (input, for reuse): each read's previous read of that element. Not needed for
  legality; computed on first use.

Transitively, every ordered pair of conflicting accesses is covered (a read before two later
writes: WAR to the first, WAW to the second), so `validity` = RAW | WAR | WAW is exactly
what a new schedule must respect: `check_schedule_legal` reports the dependences a
candidate schedule runs backwards (or at the same time), which is how the pass refuses an
illegal transformation.

The analysis runs on the original schedule as an isl schedule tree (sequence and band
nodes): isl splits the problem at sequence nodes, which is much faster than a flat 2d+1
schedule map on inlined programs of hundreds of statements.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from .scop import Scop


@dataclasses.dataclass
class Dependences:
    raw: isl.UnionMap
    war: isl.UnionMap
    waw: isl.UnionMap
    _scop: Scop | None = dataclasses.field(default=None, repr=False)
    _rar: isl.UnionMap | None = dataclasses.field(default=None, repr=False)
    _index: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def validity(self) -> isl.UnionMap:
        return self.raw.union(self.war).union(self.waw)

    @property
    def rar(self) -> isl.UnionMap:
        """Input dependences (previous read of the same element), computed on first use."""
        if self._rar is None:
            s = self._scop
            self._rar = _must(s.reads, s.reads, s.schedule_tree()).coalesce()
        return self._rar

    def kinds(self) -> dict[str, isl.UnionMap]:
        return {"raw": self.raw, "war": self.war, "waw": self.waw}

    def between(self, source: str, sink: str, kind: str = "validity") -> isl.Map | None:
        """The `kind` (raw, war, waw, rar, validity) dependence from statement `source` to
        statement `sink`, or None."""
        if kind not in self._index:
            u = self.validity if kind == "validity" else getattr(self, kind)
            maps: list[isl.Map] = []
            u.foreach_map(maps.append)
            self._index[kind] = {(m.get_tuple_name(isl.dim_type.in_),
                                  m.get_tuple_name(isl.dim_type.out)): m for m in maps}
        return self._index[kind].get((source, sink))


def _must(sink: isl.UnionMap, source: isl.UnionMap, schedule: isl.Schedule) -> isl.UnionMap:
    info = isl.UnionAccessInfo.from_sink(sink).set_must_source(source)
    return info.set_schedule(schedule).compute_flow().get_must_dependence()


def compute_dependences(scop: Scop, rar: bool = False) -> Dependences:
    """RAW, WAR and WAW of the scop's original schedule (RAR too when `rar`; otherwise on
    first access of `Dependences.rar`)."""
    tree = scop.schedule_tree()
    reads, writes = scop.reads, scop.writes
    raw = _must(reads, writes, tree)
    waw = _must(writes, writes, tree)
    # Next writer of each read: the last writer on the reversed schedule, turned around.
    war = _must(reads, writes, scop.schedule_tree(reverse=True)).reverse()
    deps = Dependences(raw.coalesce(), war.coalesce(), waw.coalesce(), scop)
    if rar:
        _ = deps.rar
    return deps


# --------------------------------------------------------------------------- legality


@dataclasses.dataclass
class Violation:
    kind: str  # raw | war | waw
    source: str  # statement names
    sink: str
    pairs: isl.Map  # the dependent instance pairs that the schedule does not order forwards

    def __str__(self) -> str:
        return f"{self.kind} {self.source} -> {self.sink}: {self.pairs}"


def check_schedule_legal(scop: Scop | None, deps: Dependences,
                         new_schedule: isl.UnionMap) -> list[Violation]:
    """The validity dependences that `new_schedule` (statement instances -> time vectors,
    compared lexicographically; shorter vectors are padded with zeros) does not run
    strictly forwards: empty when the schedule is legal. Every statement of the scop must
    be scheduled (KeyError otherwise)."""
    per_stmt = _pad(new_schedule)
    if scop is not None:
        missing = [s.name for s in scop.statements if s.name not in per_stmt]
        if missing:
            raise KeyError(f"the new schedule misses statements {missing[:5]}")
    sched = isl.UnionMap("{ }")
    for m in per_stmt.values():
        sched = sched.union(isl.UnionMap.from_map(m))
    bad: list[Violation] = []
    for kind, u in deps.kinds().items():
        if u.is_empty():
            continue
        # Fast path: every time difference (sink - source) is lexicographically positive.
        deltas = u.apply_domain(sched).apply_range(sched).deltas()
        sets: list[isl.Set] = []
        deltas.foreach_set(sets.append)
        if all(d.is_subset(_lex_positive(d.get_space())) for d in sets):
            continue
        maps: list[isl.Map] = []
        u.foreach_map(maps.append)
        for m in maps:
            src = m.get_tuple_name(isl.dim_type.in_)
            dst = m.get_tuple_name(isl.dim_type.out)
            if src not in per_stmt or dst not in per_stmt:
                raise KeyError(f"the new schedule misses statement "
                               f"{src if src not in per_stmt else dst}")
            forward = per_stmt[src].lex_lt_map(per_stmt[dst])
            rest = m.subtract(forward)
            if not rest.is_empty():
                bad.append(Violation(kind, src, dst, rest.coalesce()))
    return bad


def _lex_positive(space: isl.Space) -> isl.Set:
    """{ d : d >lex 0 } in `space` (cached per dimension count)."""
    n = space.dim(isl.dim_type.set)
    if n == 0:
        return isl.Set("{ [] : false }").align_params(space)
    if n not in _LEX_POSITIVE:
        names = [f"d{i}" for i in range(n)]
        clauses = [" and ".join([f"{names[j]} = 0" for j in range(i)] + [f"{names[i]} > 0"])
                   for i in range(n)]
        _LEX_POSITIVE[n] = isl.Set(
            f"{{ [{', '.join(names)}] : {' or '.join('(' + c + ')' for c in clauses)} }}")
    return _LEX_POSITIVE[n].align_params(space)


_LEX_POSITIVE: dict[int, isl.Set] = {}


def violated(deps: Dependences, schedule: isl.UnionMap) -> list[str]:
    """The dependence kinds (raw, war, waw) that `schedule` breaks."""
    return sorted({v.kind for v in check_schedule_legal(None, deps, schedule)})


def _pad(schedule: isl.UnionMap) -> dict[str, isl.Map]:
    """Per statement schedule maps, all padded with zero dimensions to one time space."""
    maps: list[isl.Map] = []
    schedule.foreach_map(maps.append)
    n = max((m.dim(isl.dim_type.out) for m in maps), default=0)
    out = {}
    for m in maps:
        k = m.dim(isl.dim_type.out)
        if k < n:
            m = m.add_dims(isl.dim_type.out, n - k)
            for i in range(k, n):
                m = m.fix_val(isl.dim_type.out, i, 0)
        m = m.reset_tuple_id(isl.dim_type.out)
        name = m.get_tuple_name(isl.dim_type.in_)
        out[name] = m if name not in out else out[name].union(m)
    return out
