"""Timing one runtime's calls (`timed`): the measurement `rstf.evaluation.runner` and the other
engines of `rstf bench` share, in a module of its own so that neither imports the other
for it.
"""
from __future__ import annotations

import statistics
import time


def timed(call, reps: int, save: str | None, **extra) -> dict:
    """One warm-up call (graph optimisation, compilation, allocations), then `reps` timed
    calls; the warm-up's outputs (a list of arrays) are saved as out0, out1, ..."""
    import numpy as np

    outs = call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    if save:
        np.savez(save, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    return {"latency_ms": statistics.median(times) if times else None, "times_ms": times,
            **extra}
