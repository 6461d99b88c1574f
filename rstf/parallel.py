"""Run one function over many tasks in worker processes, results in task order.

The workers are spawned, not forked (the parent holds TensorFlow's threads), so they import
only the module of the function they run: keep such functions in modules that do not import
TensorFlow (rstf.poly). Task arguments and results are pickled.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import signal


def _ignore_sigint() -> None:  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_ordered(fn, tasks: list[tuple], jobs: int, advance=lambda: None,
                weights: list[float] | None = None) -> list:
    """[fn(*t) for t in tasks], over `jobs` processes when jobs > 1 and there are several
    tasks (in this process otherwise). `advance()` is called as each task finishes. The
    heaviest tasks (by `weights`) start first; the results keep the order of `tasks`."""
    if jobs <= 1 or len(tasks) <= 1:
        results = []
        for t in tasks:
            results.append(fn(*t))
            advance()
        return results
    results = [None] * len(tasks)
    order = range(len(tasks)) if weights is None else sorted(
        range(len(tasks)), key=lambda i: -weights[i])
    pool = cf.ProcessPoolExecutor(min(jobs, len(tasks)), multiprocessing.get_context("spawn"),
                                  initializer=_ignore_sigint)
    try:
        futures = {pool.submit(fn, *tasks[i]): i for i in order}
        for fut in cf.as_completed(futures):
            results[futures[fut]] = fut.result()
            advance()
    except BaseException:  # an error or Ctrl-C: stop the workers now, not after their tasks
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        raise
    pool.shutdown()
    return results
