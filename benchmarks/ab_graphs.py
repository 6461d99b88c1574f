#!/usr/bin/env python3
"""End-to-end A/B of optimized graphs in one process, call by call, with stock TensorFlow.

    python benchmarks/ab_graphs.py OUTDIR_A OUTDIR_B [--reps 300] [--seed 0] [--onednn]
                                   [--json]

OUTDIR_A and OUTDIR_B are `rstf optimize` output folders of one model (`--optimizer none`
and `poly`, say). Their optimized graphs and the original model run in one TensorFlow
process through its C API (rstf.tfclient: the client's `also` graphs), on the seeded inputs
`rstf compare` feeds, each timed round calling every graph once, in reverse order on
alternate rounds (A B T, T B A, ...). This machine's load comes in bursts of seconds to
minutes: `rstf compare` times each graph in its own process, one after the other, and a
burst that lands on one of them moves the ratio by 2x. Here a burst lands on every graph.
Prints each graph's median latency and the medians of the per-round ratios A/B (B's
speed-up over A) and B/TF. TF is stock TensorFlow with Eigen kernels (TF_ENABLE_ONEDNN_OPTS
is read once per process), or with oneDNN given --onednn. The numbers themselves are
`rstf compare`'s business: the first graph's outputs are checked against TF's only there.
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


def ab(out_a: str, out_b: str, reps: int = 300, seed: int = 0) -> dict:
    """{"a_ms", "b_ms", "tf_ms", "speedup" (median of A/B), "b_over_tf" (median of B/TF),
    "reps"} for the two output folders, interleaved in this process (see the docstring)."""
    from rstf.compare import _read_report, graph_fetches, make_inputs, write_run_files
    from rstf.errors import RstfError
    from rstf.graph import load_model
    from rstf.tfclient import run_graphs

    reports = [_read_report(d) for d in (out_a, out_b)]
    if reports[0]["model"] != reports[1]["model"]:
        raise RstfError(f"{out_a} and {out_b} were optimized from different models")
    report = reports[0]
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(report["model"], pins, report.get("outputs"))
    libs = [os.path.join(d, r["library"]) for d, r in zip((out_a, out_b), reports)
            if r.get("library")]
    with tempfile.TemporaryDirectory() as tmp:
        feeds = make_inputs(graph, seed, None)
        _, orig = write_run_files(tmp, graph, feeds)
        _, (ta, tb, tt) = run_graphs(
            [os.path.join(out_a, "optimized.pb"), os.path.join(out_b, "optimized.pb"), orig],
            libs, feeds, graph_fetches(graph), reps)
    med = statistics.median
    return {"a_ms": med(ta), "b_ms": med(tb), "tf_ms": med(tt),
            "speedup": med(a / b for a, b in zip(ta, tb)),
            "b_over_tf": med(b / t for b, t in zip(tb, tt)), "reps": reps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_a")
    ap.add_argument("out_b")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--onednn", action="store_true", help="TF with oneDNN kernels")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    # Read by TensorFlow once, when the client process loads it.
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1" if args.onednn else "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rstf.errors import RstfError

    try:
        res = ab(args.out_a, args.out_b, args.reps, args.seed)
    except RstfError as e:
        print(f"ab_graphs: {e}", file=sys.stderr)
        return 1
    res["tf"] = "oneDNN" if args.onednn else "Eigen"
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"A {res['a_ms']:.3f} ms  B {res['b_ms']:.3f} ms  TF {res['tf']} {res['tf_ms']:.3f} ms"
          f"  (medians of {args.reps} interleaved rounds)")
    print(f"A/B per round, median: {res['speedup']:.2f}x   B/TF per round, median: "
          f"{res['b_over_tf']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
