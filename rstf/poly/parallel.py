"""Dependence-based parallel loops (the first transformation of the polyhedral pass).

A loop is parallel when no validity dependence (RAW, WAR, WAW) between two instances of the
statements it encloses is carried by it: whenever the two instances agree on every outer
time dimension, they also agree on the loop's. This is exact (isl), so a loop is marked
`omp parallel for` only when that is legal; for each loop nest the outermost parallel loop
with at least `min_trip` iterations is chosen (a batch-1 `n` loop cannot occupy threads).

Loops are identified by their statements' 2d+1 time path prefix, and reported by the source
line of their `for`, which is where `mark_source` inserts the pragma. An op function shared
by several calls (identical specialisations) is marked only where every call agrees.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from .deps import Dependences
from .scop import Scop, Statement


def dynamic_schedule(chunk: int) -> str:
    """The schedule clause of the pass's parallel loops (`lower.MACROS`' RSTF_SCHEDULE):
    with rstf's OpenMP team (rstf/runtime/rstf_team.c), chunks of `chunk` iterations in any
    order, which the team runs as a static loop whose threads steal from each other's ends
    when one falls behind (a core slowed by its neighbours, or taken by another of
    TensorFlow's threads); with libgomp, static."""
    return f"schedule(RSTF_SCHEDULE({chunk}))"


@dataclasses.dataclass
class Loop:
    function: str
    line: int  # source line of its 'for'
    iterator: str
    trip: int
    parallel: bool
    chosen: bool = False


def _eq_prefix(n: int, p: int) -> isl.Map:
    """{ [t] -> [t'] : t_i = t'_i for i < p } on n-dimensional time vectors."""
    a = [f"a{i}" for i in range(n)]
    b = [f"b{i}" for i in range(n)]
    cons = " and ".join(f"a{i} = b{i}" for i in range(p)) or "true"
    return isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {cons} }}")


def _trip(s: Statement, depth: int) -> int:
    dom = s.domain
    lo = dom.dim_min_val(depth).to_python()
    hi = dom.dim_max_val(depth).to_python()
    return int(hi - lo + 1)


MIN_WORK = 16384  # statement instances under a loop before a parallel region pays off


def find_parallel_loops(scop: Scop, deps: Dependences, min_trip: int = 2,
                        min_work: int = MIN_WORK) -> list[Loop]:
    sched = scop.schedule
    n_time = scop.statements[0].schedule.dim(isl.dim_type.out) if scop.statements else 0
    # Dependences between instances of one call, as pairs of time vectors: computed once
    # per call, then each loop only adds equalities on its own prefix.
    by_call: dict[int, list[Statement]] = {}
    for s in scop.statements:
        by_call.setdefault(s.call, []).append(s)
    times_of_call = {}
    for call, stmts in by_call.items():
        dom = isl.UnionSet("{ }")
        for s in stmts:
            dom = dom.union(isl.UnionSet.from_set(s.domain))
        d = deps.validity.intersect_domain(dom).intersect_range(dom)
        times_of_call[call] = None if d.is_empty() else isl.Map.from_union_map(
            d.apply_domain(sched).apply_range(sched))
    boxes = {s.name: _box(s) for s in scop.statements}

    loops: dict[tuple, list[Statement]] = {}
    for s in scop.statements:
        for j, x in enumerate(s.path):
            if isinstance(x, str):  # an iterator's time dimension (constants between)
                loops.setdefault(tuple(s.path[:j + 1]), []).append(s)
    per_call: dict[tuple, Loop] = {}
    work: dict[tuple, int] = {}
    for key, stmts in loops.items():
        p = len(key) - 1  # the loop's time dimension
        depth = sum(1 for x in key if isinstance(x, str)) - 1  # its iterator index
        times = times_of_call[stmts[0].call]
        parallel = True
        if times is not None:
            inside = times.intersect(_same_loop(n_time, key))
            parallel = inside.is_subset(_eq_prefix(n_time, p + 1))
        first = stmts[0]
        per_call[key] = Loop(first.function, first.loop_lines[depth], key[-1],
                             max(boxes[s.name][depth] for s in stmts), parallel)
        work[key] = sum(_prod(boxes[s.name]) for s in stmts)
    # Choose, per nest, the outermost parallel loop that can occupy the threads, entered
    # once per call: every loop around it runs a single iteration.
    for key, loop in per_call.items():
        outer = [per_call[key[:j + 1]] for j, x in enumerate(key[:-1]) if isinstance(x, str)]
        if (loop.parallel and loop.trip >= min_trip and work[key] >= min_work
                and all(o.trip == 1 for o in outer)):
            loop.chosen = True
    # An op function shared by several calls: mark a line only if every call chose it.
    by_line: dict[tuple, list[Loop]] = {}
    for loop in per_call.values():
        by_line.setdefault((loop.function, loop.line), []).append(loop)
    return [Loop(fn, line, group[0].iterator, max(g.trip for g in group),
                 all(g.parallel for g in group), all(g.chosen for g in group))
            for (fn, line), group in sorted(by_line.items())]


def _same_loop(n: int, key: tuple) -> isl.Map:
    """Pairs of time vectors both inside the loop `key` (its constant positions) and in the
    same iteration of every loop around it (equal iterator dimensions before it)."""
    a = [f"a{i}" for i in range(n)]
    b = [f"b{i}" for i in range(n)]
    cons = []
    for i, x in enumerate(key[:-1]):
        if isinstance(x, str):
            cons.append(f"a{i} = b{i}")
        else:
            cons.append(f"a{i} = {x} and b{i} = {x}")
    return isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {' and '.join(cons) or 'true'} }}")


def _box(s: Statement) -> list[int]:
    """Trip count of each iterator of a statement (its domain's bounding box)."""
    return [_trip(s, k) for k in range(len(s.iterators))]


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def mark_source(source: str, loops: list[Loop]) -> str:
    """Insert `#pragma omp parallel for` before every chosen loop's line."""
    lines = source.splitlines()
    chosen = {loop.line for loop in loops if loop.chosen}
    out = []
    for i, text in enumerate(lines, start=1):
        if i in chosen:
            indent = text[:len(text) - len(text.lstrip())]
            out.append(f"{indent}#pragma omp parallel for")
        out.append(text)
    return "\n".join(out) + "\n"
