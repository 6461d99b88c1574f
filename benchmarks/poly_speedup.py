#!/usr/bin/env python3
"""The polyhedral pass's speed-up, end to end, with TensorFlow measured in the same run.

    python benchmarks/poly_speedup.py [--models inception_v3,resnet50,mobilenet_v2]
                                      [--reps 7] [--rounds 1] [--out DIR] [--json]

For each model: build it (models/build.py, full input size), `rstf optimize` it with
`--optimizer none` and with `--optimizer poly`, then `rstf compare` each (medians of --reps
runs, rstf, TF Eigen and TF oneDNN each in its own process). With --rounds N the two
compares alternate N times (none, poly, none, poly, ...) and every figure is the median of
its N round medians: this shared machine's load comes in bursts of minutes, and alternating
spreads a burst over both sides of the ratio instead of one; each round's own ratio is
printed beside the median's, to show the spread. The machine's fp32 peak is
measured first (benchmarks/peak_fma.c on every core), so the poly row also reads as a
fraction of the peak. Prints a markdown table (and one JSON object with --json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def peak_gflops(threads: int) -> float:
    """Measured fp32 FMA peak of `threads` cores, GFLOP/s."""
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "peak")
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp",
                        os.path.join(ROOT, "benchmarks", "peak_fma.c"), "-o", exe], check=True)
        out = subprocess.run([exe], env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                             capture_output=True, text=True, check=True).stdout
    return float(out.split("peak")[1].split()[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="inception_v3,resnet50,mobilenet_v2")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the none and poly compares this many times")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from models.build import build_graph_def, write_graph_def
    from rstf.evaluation.compare import compare
    from rstf.pipeline import optimize

    cores = os.cpu_count() or 1
    peak = peak_gflops(cores)
    work = args.out or tempfile.mkdtemp(prefix="rstf-bench-")
    rows = []
    for name in args.models.split(","):
        pb = os.path.join(work, f"{name}.pb")
        write_graph_def(build_graph_def(name), pb)
        row = {"model": name}
        for opt in ("none", "poly"):
            out = os.path.join(work, f"{name}.{opt}.rstf")
            t = time.perf_counter()
            rep = optimize(pb, out, force=True, optimizer=opt, log=lambda m: None)
            row[f"optimize_s_{opt}"] = round(time.perf_counter() - t, 1)
            row["gflop"] = rep["flops_total"] / 1e9
        for _ in range(max(1, args.rounds)):
            for opt in ("none", "poly"):
                res = compare(pb, os.path.join(work, f"{name}.{opt}.rstf"), reps=args.reps)
                lat = res["latency_ms"]
                row.setdefault(f"rstf_{opt}_ms", []).append(lat["rstf"])
                row.setdefault("tf_eigen_ms", []).append(lat["tf_eigen"])
                row.setdefault("tf_onednn_ms", []).append(lat["tf_onednn"])
                err = max(o["max_rel_err"] for o in res["outputs"])
                row[f"max_rel_err_{opt}"] = max(err, row.get(f"max_rel_err_{opt}", 0.0))
                row["passed"] = row.get("passed", True) and res["passed"]
                row["timed_through"] = res.get("timed_through")
        for opt in ("none", "poly"):
            row[f"rstf_{opt}_rounds_ms"] = [round(x, 3) for x in row[f"rstf_{opt}_ms"]]
            row[f"rstf_{opt}_ms"] = statistics.median(row[f"rstf_{opt}_ms"])
        row["tf_eigen_ms"] = statistics.median(row["tf_eigen_ms"])
        row["tf_onednn_ms"] = statistics.median(row["tf_onednn_ms"])
        row["speedup_poly_vs_none"] = row["rstf_none_ms"] / row["rstf_poly_ms"]
        # Each round's none and poly ran back to back: its own ratio shows the spread.
        row["speedup_rounds"] = [round(n / p, 2) for n, p in
                                 zip(row["rstf_none_rounds_ms"], row["rstf_poly_rounds_ms"])]
        row["poly_over_eigen"] = row["rstf_poly_ms"] / row["tf_eigen_ms"]
        row["poly_over_onednn"] = row["rstf_poly_ms"] / row["tf_onednn_ms"]
        row["poly_gflops"] = row["gflop"] / row["rstf_poly_ms"] * 1e3
        row["poly_pct_peak"] = 100 * row["poly_gflops"] / peak
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print(f"fp32 peak measured on {cores} cores: {peak:.0f} GFLOP/s; medians of {args.reps}, "
          f"{max(1, args.rounds)} alternating round(s) (median of the rounds); TF columns: "
          "median over every compare run; rstf timed through the "
          f"{rows[0].get('timed_through', '?') if rows else '?'}\n")
    print("| model | rstf none ms | rstf poly ms | TF Eigen ms | TF oneDNN ms | poly vs none "
          "(each round) | poly / Eigen | poly / oneDNN | poly GFLOP/s (% peak) | max rel err "
          "| optimize s (none, poly) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rounds = ", ".join(f"{x:.2f}" for x in r["speedup_rounds"])
        print(f"| {r['model']} | {r['rstf_none_ms']:.1f} | {r['rstf_poly_ms']:.1f} | "
              f"{r['tf_eigen_ms']:.1f} | {r['tf_onednn_ms']:.1f} | "
              f"{r['speedup_poly_vs_none']:.2f}x ({rounds}) | {r['poly_over_eigen']:.2f}x | "
              f"{r['poly_over_onednn']:.2f}x | {r['poly_gflops']:.0f} ({r['poly_pct_peak']:.0f}%) "
              f"| {max(r['max_rel_err_none'], r['max_rel_err_poly']):.2g} | "
              f"{r['optimize_s_none']}, {r['optimize_s_poly']} |")
    if args.json:
        print(json.dumps({"peak_gflops": peak, "rows": rows}))
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
