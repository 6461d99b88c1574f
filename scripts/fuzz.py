#!/usr/bin/env python3
"""A differential-fuzzing campaign, longer than CI's, in parallel processes.

    python scripts/fuzz.py [--minutes M] [--examples N] [--jobs J] [--seed S] [--start K]
                           [--optimizers poly,poly-nowinograd,none,graphite,polly]

Example k of a campaign draws its graph from its own seed, SeedSequence([S, k])
(rstf.evaluation.fuzz: image-shaped inputs uniform in [0, 1), Winograd-eligible convolutions among the steps),
and its max_ops from the same sequence; its optimizer setting cycles through the available
--optimizers (rstf.evaluation.fuzzcase.CONFIGS; graphite and polly only where their compilers are
installed). So a campaign is a pure function of --seed and the examples it reaches,
whatever --jobs. J worker processes (default: the CPU count) each optimize one example at
a time (optimize's own jobs=1) and compare it with stock TensorFlow at --rtol. Every
failure (outputs differ, a subgraph over max_ops, rstf raising, an example running past
--timeout) is saved under --save-dir (tests/data/fuzz_regressions/, which the test suite
replays) as rstf.evaluation.fuzzcase.save_regression writes it: the graph and a sidecar with the
options and the inputs' seed.

Every --full-every'th example (default 50) is checked end to end (`rstf.evaluation.fuzzcase.check`:
optimize, build the op library, splice, compare with TensorFlow); the others take the quick
check (`rstf.evaluation.fuzzcase.check_kernels`: the same stages up to the C, each subgraph's C run
alone through ctypes on TensorFlow's intermediate tensors), which costs a compiler run
instead of a TensorFlow op build and so reaches ten times the examples. A failure either
way is saved the same, and CI replays it end to end.

An example on which stock TensorFlow itself fails (a Grappler rewrite that breaks a valid
graph: TF 2.21 does so on some BiasAdd-then-broadcast-add chains) has no reference: it is
counted as skipped, neither passed nor failed, and not saved.

It stops after --examples, or once --minutes have passed (examples under way finish), or
after --max-failures failures; one line per example, then a summary line. Exit status 1
when anything failed. Op libraries are built into a fresh private cache folder (mode 0700),
removed at the end, unless --cache-dir names one.
"""
import argparse
import concurrent.futures as cf
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from rstf.evaluation.fuzzcase import CONFIGS, DEFAULT_RTOL  # noqa: E402  (no TensorFlow: quick)

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                           "data", "fuzz_regressions")
MAX_OPS = (2, 3, 5, 400)  # tiny ones make METIS split every cluster


def example_plan(seed: int, k: int, configs: list[str]) -> tuple[int, str, int]:
    """(graph seed, config, max_ops) of example k of campaign `seed`. The config is drawn,
    not taken in turn: in turn, every --full-every'th example would get the same one, and
    the end-to-end checks would see one optimizer only."""
    import numpy as np

    graph_seed, pick, config = np.random.SeedSequence([seed, k]).generate_state(3)
    return (int(graph_seed), configs[int(config) % len(configs)],
            MAX_OPS[int(pick) % len(MAX_OPS)])


def _timeout(signum, frame):
    raise TimeoutError("the example ran past --timeout")


def run_example(k: int, graph_seed: int, config: str, max_ops: int, a) -> dict:
    """One example in a worker process: draw, check, save it if it failed."""
    from rstf.evaluation.fuzz import random_graph
    from rstf.evaluation.fuzzcase import (Options, TensorFlowFails, check, check_kernels,
                                          save_regression)

    t0 = time.perf_counter()
    g = random_graph(graph_seed, a.max_steps)
    options = Options.of(config, max_ops, a.rtol)
    full = a.full_every > 0 and k % a.full_every == 0
    out = {"k": k, "seed": graph_seed, "config": config, "max_ops": max_ops, "full": full,
           "recipe": g.recipe, "winograd": 0, "err": None, "saved": None}
    # SIGALRM interrupts even a wait on a compiler or the runner (subprocess.run kills it).
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(a.timeout)
    try:
        if full:
            with tempfile.TemporaryDirectory(prefix="rstf-fuzz-") as d:
                v = check(g.graph_def, g.feeds, options, d, jobs=1)
        else:
            v = check_kernels(g.graph_def, g.feeds, options)
        out.update(passed=v.passed, why=v.why, err=v.max_rel_err, winograd=len(v.winograd))
    except TensorFlowFails as e:  # no reference: counted apart, not saved
        out.update(passed=True, skipped=f"stock TensorFlow fails on the graph: {e}")
    except Exception as e:  # rstf raising on a graph it should take is a failure too
        why = (f"{type(e).__name__}: {e}".splitlines() or [""])[0][:500]
        if type(e).__name__ not in ("RstfError", "TimeoutError"):  # a crash: where
            where = traceback.extract_tb(e.__traceback__)[-1]
            why += f" (at {where.filename}:{where.lineno} in {where.name})"
        out.update(passed=False, why=why)
    finally:
        signal.alarm(0)
    if not out["passed"]:
        out["saved"] = save_regression(
            a.save_dir, g.graph_def, options, g.input_seed, recipe=g.recipe, failure=out["why"],
            found_by=f"scripts/fuzz.py --seed {a.seed}: example {k}, graph seed {graph_seed}, "
                     f"config {config}, {'end-to-end' if full else 'quick'} check")
    out["seconds"] = time.perf_counter() - t0
    return out


def _worker_init(cache: str) -> None:
    os.environ["RSTF_CACHE_DIR"] = cache
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # the quick check's reference is TF Eigen
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the campaign


def _fmt_time(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, help="stop starting examples after this long")
    p.add_argument("--examples", type=int,
                   help="examples to run (default 200 without --minutes, else no limit)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: the CPU count)")
    p.add_argument("--seed", type=int, default=0, help="the campaign's seed")
    p.add_argument("--start", type=int, default=0,
                   help="first example to run: resumes a campaign stopped after example "
                        "START-1 (an example is a function of --seed and its number alone)")
    p.add_argument("--optimizers", default=",".join(CONFIGS),
                   help="configs to cycle through, of " + ", ".join(CONFIGS) +
                        " (those not installed are left out)")
    p.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                   help="compare's tolerance (a negative one fails every example: the tests "
                        "use it to check the failure path)")
    p.add_argument("--max-steps", type=int, default=7, help="ops drawn per graph, at most")
    p.add_argument("--full-every", type=int, default=50,
                   help="check every N'th example end to end, the others with the quick "
                        "check (1: all end to end; 0: none)")
    p.add_argument("--max-failures", type=int, default=10,
                   help="stop starting examples after this many failures (0: never)")
    p.add_argument("--timeout", type=int, default=600, help="seconds one example may take")
    p.add_argument("--save-dir", default=os.path.normpath(REGRESSIONS),
                   help="where failures are saved (default tests/data/fuzz_regressions)")
    p.add_argument("--cache-dir", help="the build cache (default: a fresh private folder, "
                                       "removed at the end)")
    a = p.parse_args(argv)
    if a.examples is None and a.minutes is None:
        a.examples = 200
    if a.jobs < 1:
        p.error("--jobs must be at least 1")
    if a.start < 0:
        p.error("--start must be 0 or more")
    if a.full_every < 0:
        p.error("--full-every must be 0 or more")
    unknown = [c for c in a.optimizers.split(",") if c not in CONFIGS]
    if unknown:
        p.error(f"--optimizers: unknown {', '.join(unknown)}; choose of {', '.join(CONFIGS)}")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    from rstf.evaluation.fuzzcase import available_configs

    wanted = a.optimizers.split(",")
    configs = available_configs(wanted)
    missing = [c for c in wanted if c not in configs]
    if missing:
        print(f"fuzz: not installed, left out: {', '.join(missing)}", flush=True)
    if not configs:
        print("fuzz: no optimizer to run", file=sys.stderr)
        return 2
    own_cache = a.cache_dir is None
    cache = tempfile.mkdtemp(prefix="rstf-fuzz-cache-") if own_cache else a.cache_dir
    stats = {c: {"n": 0, "failed": 0, "winograd": 0, "full": 0, "skipped": 0}
             for c in configs}
    done = failures = 0
    t0 = time.monotonic()
    deadline = t0 + a.minutes * 60 if a.minutes is not None else None

    def more() -> bool:
        return ((a.examples is None or started < a.start + a.examples)
                and (deadline is None or time.monotonic() < deadline)
                and not (a.max_failures and failures >= a.max_failures))

    print(f"fuzz: seed {a.seed}, {a.jobs} jobs, configs {', '.join(configs)}, rtol {a.rtol:g}"
          + (f", {a.examples} examples" if a.examples is not None else "")
          + (f" from example {a.start}" if a.start else "")
          + (f", {a.minutes:g} minutes" if a.minutes is not None else ""), flush=True)
    started = a.start
    pool = cf.ProcessPoolExecutor(a.jobs, multiprocessing.get_context("spawn"),
                                  initializer=_worker_init, initargs=(cache,),
                                  max_tasks_per_child=50)
    running = set()
    try:
        while True:
            while len(running) < a.jobs and more():
                running.add(pool.submit(run_example, started,
                                        *example_plan(a.seed, started, configs), a))
                started += 1
            if not running:
                break
            finished, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for f in finished:
                r = f.result()
                done += 1
                s = stats[r["config"]]
                s["n"] += 1
                s["winograd"] += bool(r["winograd"])
                s["full"] += r["full"]
                s["skipped"] += bool(r.get("skipped"))
                if not r["passed"]:
                    failures += 1
                    s["failed"] += 1
                el = time.monotonic() - t0
                err = "-" if r["err"] is None else f"{r['err']:.1e}"
                verdict = "SKIP" if r.get("skipped") else "ok  " if r["passed"] else "FAIL"
                print(f"[{done} done, {failures} failed, {_fmt_time(el)}, "
                      f"{done / el * 60:.1f}/min] {verdict} "
                      f"#{r['k']} {r['config']} max_ops={r['max_ops']} err={err} "
                      f"winograd={r['winograd']} {'e2e ' if r['full'] else ''}"
                      f"{r['seconds']:.0f}s: {'; '.join(r['recipe'])}", flush=True)
                if r.get("skipped"):
                    print(f"  {r['skipped']}", flush=True)
                if not r["passed"]:
                    print(f"  {r['why']}\n  saved {r['saved']}", flush=True)
    except KeyboardInterrupt:
        print("fuzz: interrupted; examples under way are dropped", flush=True)
        pool.shutdown(wait=False, cancel_futures=True)
    else:
        pool.shutdown()
    finally:
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    el = time.monotonic() - t0
    per = ", ".join(f"{c} {s['n']} ({s['full']} end to end, {s['failed']} failed, "
                    f"{s['skipped']} skipped"
                    + (f", {s['winograd']} with Winograd" if CONFIGS[c][1] else "") + ")"
                    for c, s in stats.items())
    print(f"fuzz: {done} examples, {failures} failures, {_fmt_time(el)}, "
          f"{done / el * 60 if el else 0:.1f} examples/min; {per}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
