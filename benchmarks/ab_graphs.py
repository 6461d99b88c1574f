#!/usr/bin/env python3
"""End-to-end A/B of optimized graphs in one process, call by call, with stock TensorFlow.

    python benchmarks/ab_graphs.py OUTDIR_A OUTDIR_B [--rounds 100] [--block 4] [--seed 0]
                                   [--onednn] [--json]

OUTDIR_A and OUTDIR_B are `rstf optimize` output folders of one model (`--optimizer none`
and `poly`, say). Their optimized graphs and the original model run in one TensorFlow
process through its C API (rstf.serving.tfclient: the client's `also` graphs), on the seeded inputs
`rstf compare` feeds, each timed round calling every graph --block times in a row, the
graphs in reverse order on alternate rounds (A B T, T B A, ...). This machine's load comes
in bursts of seconds to minutes: `rstf compare` times each graph in its own process, one
after the other, and a burst that lands on one of them moves the ratio by 2x. Here a burst
lands on every graph. A graph's first call of a block is not counted: the other graphs'
weights have just been through the caches (three copies of MobileNet v2's 14 MB against
the AVX2 host's 32 MB L3). Measured there, that first call costs little: poly 5.70 against
5.63 ms, none 22.2 against 21.9, TF Eigen 20.6 against 20.0 (60 rounds of 4). Prints each
graph's median latency (over the counted calls) and the medians of the per-round ratios A/B
(B's speed-up over A) and B/TF, each round's figure the median of its block's counted
calls. TF is stock TensorFlow with Eigen kernels (TF_ENABLE_ONEDNN_OPTS
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


def ab(out_a: str, out_b: str, rounds: int = 100, block: int = 4, seed: int = 0) -> dict:
    """{"a_ms", "b_ms", "tf_ms", "speedup" (median of A/B), "b_over_tf" (median of B/TF),
    "ratios" and "ratios_over_tf" (those per round), "rounds", "block"} for the two output
    folders, interleaved in this process (see the docstring)."""
    from rstf.evaluation.compare import _read_report, graph_fetches, make_inputs, write_run_files
    from rstf.errors import RstfError
    from rstf.frontend.graph import load_model
    from rstf.serving.tfclient import run_graphs

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
        _, times = run_graphs(
            [os.path.join(out_a, "optimized.pb"), os.path.join(out_b, "optimized.pb"), orig],
            libs, feeds, graph_fetches(graph), rounds, block)
    med = statistics.median
    skip = 1 if block > 1 else 0
    # [graph][round] -> the block's counted calls
    per = [[t[r * block + skip:(r + 1) * block] for r in range(rounds)] for t in times]
    a_ms, b_ms, tf_ms = (med(x for c in g for x in c) for g in per)
    ta, tb, tt = ([med(x) for x in g] for g in per)
    ratios, over_tf = [a / b for a, b in zip(ta, tb)], [b / t for b, t in zip(tb, tt)]
    return {"a_ms": a_ms, "b_ms": b_ms, "tf_ms": tf_ms,
            "speedup": med(ratios), "b_over_tf": med(over_tf),
            "ratios": ratios, "ratios_over_tf": over_tf, "rounds": rounds, "block": block}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_a")
    ap.add_argument("out_b")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--block", type=int, default=4,
                    help="each graph's calls a round, in a row; the first is not counted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--onednn", action="store_true", help="TF with oneDNN kernels")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    # Read by TensorFlow once, when the client process loads it.
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1" if args.onednn else "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rstf.errors import RstfError

    try:
        if args.rounds < 1 or args.block < 1:
            raise RstfError("--rounds and --block must be at least 1")
        res = ab(args.out_a, args.out_b, args.rounds, args.block, args.seed)
    except RstfError as e:
        print(f"ab_graphs: {e}", file=sys.stderr)
        return 1
    res["tf"] = "oneDNN" if args.onednn else "Eigen"
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"A {res['a_ms']:.3f} ms  B {res['b_ms']:.3f} ms  TF {res['tf']} {res['tf_ms']:.3f} ms"
          f"  ({args.rounds} interleaved rounds of {args.block} calls each)")
    print(f"A/B per round, median: {res['speedup']:.2f}x   B/TF per round, median: "
          f"{res['b_over_tf']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
