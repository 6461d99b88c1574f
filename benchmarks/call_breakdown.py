#!/usr/bin/env python3
"""Where an end-to-end call of an optimized graph goes besides its kernels.

    python benchmarks/call_breakdown.py OUTDIR [--reps 1500] [--seed 0] [--json]

OUTDIR is an `rstf optimize` output folder (the gcc builds: `--optimizer poly` or `none`).
Its op library is rebuilt from OUTDIR/src with RSTF_CALL_TIMES defined, which compiles in
a timestamp at five points of every op call (`RSTF_MARK` in rstf/runtime/rstf_kernel.h) and
changes nothing else: the same op names, so OUTDIR/optimized.pb loads it. The graph then
runs --reps times through TensorFlow's C API (rstf.evaluation.runner, after its warm-up:
the first call and `timing.WARMUP_S` seconds of calls), on the seeded inputs `rstf
compare` feeds. Printed, as medians and 10th / 90th percentiles in microseconds over the
op calls of the --reps timed calls:

- `tensorflow`: from one op call's return to the next one's start (the client's loop and
  TensorFlow's own work after and before the op; with several ops a run, also the TF
  nodes between them);
- `checks`: the op's input checks and output allocations;
- `hand-off`: from the checks' end to the kernels' start (with the library's own OpenMP
  team, taking its lock; with libgomp, handing the call to the library's master thread);
- `kernels`: the generated C;
- `back`: from the kernels' end to the op returning (releasing the lock, or the master's wake-up);

and the client's whole call (`end to end`, ms). No TensorFlow timing source is needed: the
marks are CLOCK_MONOTONIC, written to a file when the process exits.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

PHASES = ["tensorflow", "checks", "hand-off", "kernels", "back"]


def instrumented_library(outdir: str) -> str:
    """The op library of `outdir` rebuilt with RSTF_CALL_TIMES (cached by content)."""
    from rstf.build.compiler import build_library
    from rstf.errors import RstfError

    report = json.load(open(os.path.join(outdir, "report.json")))
    if report.get("compiler", {}).get("cc", "gcc") != "gcc":
        raise RstfError("call_breakdown: only the gcc builds (--optimizer poly|none)")
    src = os.path.join(outdir, "src")
    c_sources = {f"subgraph_{i}.c": open(os.path.join(src, f"subgraph_{i}.c")).read()
                 for i in range(len(report["subgraphs"]))}
    wrapper = "#define RSTF_CALL_TIMES 1\n" + open(os.path.join(src, "rstf_ops.cc")).read()
    lib, _ = build_library(c_sources, wrapper, report.get("options", {}).get("march", "native"))
    return lib


def phases(rows: list[list[float]]) -> dict[str, list[float]]:
    """Per-phase durations (us) from the calls' five timestamps, in call order; the first
    call has no `tensorflow` gap (no call before it) and is left out."""
    out = {p: [] for p in PHASES}
    for prev, row in zip(rows, rows[1:]):
        out["tensorflow"].append(row[0] - prev[4])
        for k, p in enumerate(PHASES[1:]):
            out[p].append(row[k + 1] - row[k])
    return out


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return {"median": statistics.median(values), "p10": q[0], "p90": q[-1]}


def breakdown(outdir: str, reps: int = 1500, seed: int = 0) -> dict:
    from rstf.evaluation.compare import _read_report, graph_fetches, make_inputs, write_run_files
    from rstf.errors import RstfError
    from rstf.frontend.graph import load_model
    from rstf.evaluation.runner import run

    report = _read_report(outdir)
    lib = instrumented_library(outdir)
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(report["model"], pins, report.get("outputs"))
    with tempfile.TemporaryDirectory() as tmp:
        in_path, _ = write_run_files(tmp, graph, make_inputs(graph, seed, None))
        times = os.path.join(tmp, "times.txt")
        os.environ["RSTF_CALL_TIMES_OUT"] = times
        try:
            res = run(os.path.join(outdir, "optimized.pb"), [lib], in_path,
                      graph_fetches(graph), reps, None)
        finally:
            del os.environ["RSTF_CALL_TIMES_OUT"]
        if not os.path.exists(times):
            raise RstfError("call_breakdown: the instrumented op wrote no timestamps")
        rows = [[float(x) for x in line.split()] for line in open(times)]
    # The timed calls' op calls are the last `reps` x (ops a graph call: one a subgraph);
    # the warm-up's last op call before them gives the first one its `tensorflow` gap.
    ops = max(1, len(report.get("subgraphs", [])))
    per = phases(rows[-(reps * ops + 1):])
    return {"calls": len(per["kernels"]), "client": res.get("client"),
            "end_to_end_ms": res["latency_ms"],
            "phases_us": {p: summary(v) for p, v in per.items() if v}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--reps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    res = breakdown(args.outdir, args.reps, args.seed)
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"{res['calls']} op calls after the warm-up, timed through the {res['client']}; "
          f"end to end {res['end_to_end_ms']:.3f} ms (median)")
    for p, s in res["phases_us"].items():
        print(f"  {p:10s} median {s['median']:9.1f} us   p10 {s['p10']:9.1f}   "
              f"p90 {s['p90']:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
