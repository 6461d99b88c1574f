"""Timing one runtime's calls (`timed`): the measurement `rstf.evaluation.runner` and the other
engines of `rstf bench` share, in a module of its own so that neither imports the other
for it.
"""
from __future__ import annotations

import statistics
import time

# Untimed calls after the first, for at least this long, before any call is timed (when
# there are timed calls at all). The first call pays for graph optimisation, compilation
# and allocations; the next few still run slower than the rest (caches, page tables,
# thread pools settling), for every engine, each by its own margin. `rstf bench
# --rounds R` starts every engine's process R times and times a few calls in each, so
# without this those first calls would be a fixed share of every median: the numbers
# would measure each engine's start-up, not the steady state a server runs in.
WARMUP_S = 0.3


def warm_up(call, seconds: float) -> int:
    """Call `call` (untimed) until `seconds` have passed, at least once; the number of
    calls."""
    n, end = 0, time.perf_counter() + seconds
    while n == 0 or time.perf_counter() < end:
        call()
        n += 1
    return n


def timed(call, reps: int, save: str | None, **extra) -> dict:
    """One first call (graph optimisation, compilation, allocations), whose outputs (a
    list of arrays) are saved as out0, out1, ...; where `reps` > 0, `warm_up` calls, then
    `reps` timed calls."""
    import numpy as np

    outs = call()
    if reps > 0:
        extra = {**extra, "warmup_s": WARMUP_S, "warmup_calls": warm_up(call, WARMUP_S)}
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    if save:
        np.savez(save, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    return {"latency_ms": statistics.median(times) if times else None, "times_ms": times,
            **extra}
