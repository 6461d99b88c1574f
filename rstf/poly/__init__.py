"""The polyhedral pass, stage by stage: raise (raise_c), dependences (deps), parallel loops
(parallel). Scheduling for fusion, tiling, placement with versioning and lowering through
the isl AST build on these; see shared/DESIGN.md.
"""
from .deps import Dependences, Violation, check_schedule_legal, compute_dependences, violated
from .raise_c import Access, ArrayInfo, Call, NotRaisable, Scop, Statement, raise_subgraph

__all__ = ["Access", "ArrayInfo", "Call", "Dependences", "NotRaisable", "Scop", "Statement",
           "Violation", "check_schedule_legal", "compute_dependences", "optimize_source",
           "raise_subgraph", "violated"]


def optimize_source(source: str, entry: str) -> tuple[str, dict]:
    """Run the polyhedral pass on one subgraph's C. Returns (new source, report entry).

    Today's pass: raise, exact dependences, and dependence-based parallel loops marked for
    OpenMP (statement order, fusion and tiling are unchanged: that is the next stage).
    Code outside the raisable subset comes back unchanged, with the diagnostic.
    """
    import time

    from .parallel import find_parallel_loops, mark_source

    t0 = time.perf_counter()
    try:
        scop = raise_subgraph(source, entry)
        deps = compute_dependences(scop)
        loops = find_parallel_loops(scop, deps)
    except NotRaisable as e:
        return source, {"optimizer": "none", "diagnostic": str(e),
                        "seconds": round(time.perf_counter() - t0, 3)}
    return mark_source(source, loops), {
        "optimizer": "poly", "statements": len(scop.statements), "loops": len(loops),
        "parallel_loops": sum(1 for lp in loops if lp.chosen),
        "parallelisable_loops": sum(1 for lp in loops if lp.parallel),
        "seconds": round(time.perf_counter() - t0, 3)}
