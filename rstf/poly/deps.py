"""Exact dependences of a raised subgraph, with isl's dataflow analysis.

RAW (flow): each read's last writer; WAR (anti): a write after a read of the same element;
WAW (output): two writes of one element in order; RAR: reads of one element, for reuse.
`validity` = RAW | WAR | WAW is what every new schedule must respect;
`violated(deps, schedule)` lists the kinds a candidate schedule breaks, which is how the pass
refuses an illegal transformation.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from .raise_c import Scop


@dataclasses.dataclass
class Dependences:
    raw: isl.UnionMap
    war: isl.UnionMap
    waw: isl.UnionMap
    rar: isl.UnionMap

    @property
    def validity(self) -> isl.UnionMap:
        return self.raw.union(self.war).union(self.waw)


def _flow(sink: isl.UnionMap, source: isl.UnionMap, schedule: isl.UnionMap,
          must: bool) -> isl.UnionMap:
    info = isl.UnionAccessInfo.from_sink(sink)
    info = info.set_must_source(source) if must else info.set_may_source(source)
    info = info.set_schedule_map(schedule)
    flow = info.compute_flow()
    return flow.get_must_dependence() if must else flow.get_may_dependence()


def compute_dependences(scop: Scop) -> Dependences:
    sched, reads, writes = scop.schedule, scop.reads, scop.writes
    raw = _flow(reads, writes, sched, must=True)
    waw = _flow(writes, writes, sched, must=True)
    war = _flow(writes, reads, sched, must=False)
    rar = _flow(reads, reads, sched, must=False)
    return Dependences(raw.coalesce(), war.coalesce(), waw.coalesce(), rar.coalesce())


def violated(deps: Dependences, schedule: isl.UnionMap) -> list[str]:
    """The dependence kinds whose source does not run strictly before its sink under
    `schedule` (a union map from statement instances to time vectors of one dimension)."""
    bad = []
    for kind in ("raw", "war", "waw"):
        d = getattr(deps, kind)
        if d.is_empty():
            continue
        # Forward in time: every difference (sink time - source time) is lexicographically
        # positive.
        deltas = d.apply_domain(schedule).apply_range(schedule).deltas()
        if not all(s.is_subset(_lex_positive(s.get_space())) for s in _sets(deltas)):
            bad.append(kind)
    return bad


def _sets(u: isl.UnionSet) -> list[isl.Set]:
    result = []
    u.foreach_set(result.append)
    return result


def _lex_positive(space: isl.Space) -> isl.Set:
    """{ d : d >lex 0 } in `space`."""
    n = space.dim(isl.dim_type.set)
    names = [f"d{i}" for i in range(n)]
    clauses = []
    for i in range(n):
        clauses.append(" and ".join([f"{names[j]} = 0" for j in range(i)] + [f"{names[i]} > 0"]))
    text = f"{{ [{', '.join(names)}] : {' or '.join('(' + c + ')' for c in clauses)} }}"
    return isl.Set.read_from_str(space.get_ctx(), text)
