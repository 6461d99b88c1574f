#!/usr/bin/env python3
"""Where a subgraph's time goes: time every scheduled group of an optimized subgraph's C.

    python benchmarks/group_profile.py OUTDIR [--subgraph 0] [--reps 20] [--threads N] [--top 25]

OUTDIR is an `rstf optimize` output folder. The subgraph's C (OUTDIR/src/subgraph_<i>.c) is
copied, every call in its entry function is wrapped in a wall-clock timer, and the result is
compiled with the same C flags as the op library into a standalone program that feeds random
inputs (shapes from the file's tensor table, workspace size from report.json). It prints each
call's median time over --reps runs, its share of the entry's time, and the TF nodes it runs,
so that a profile names groups rather than inlined symbols. No TensorFlow in the loop: the sum
is the kernels' own time, without the op wrapper or the harness.

Where the model the folder was optimized from is still at the path report.json names, each
call's conv/matmul FLOPs come from it (`pipeline.node_flops`), and the listing gives each
call's GFLOP/s: the figure to compare with the machine's peak (benchmarks/peak_fma.c). A call
that reads a megabyte or more of the subgraph's inputs (its weights) also gets the rate it
reads them at ("GB/s in"): for a layer whose weights each serve a few rows, the figure to
compare with the machine's read bandwidth (benchmarks/peak_stream.c).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# (ALLOC_RAND and buffers for ab_kernels.py, which builds its own harness.)
from rstf.evaluation.groupbench import (ALLOC_RAND, buffers, call_input_bytes,  # noqa: E402,F401
                                        tensor_shapes, time_calls)


def load_subgraph(outdir: str, subgraph: int, tool: str) -> tuple[str, dict, dict]:
    """(C source, {tensor: shape}, report entry) of one subgraph of an `rstf optimize`
    output folder; `tool` names the caller in the error for a dynamic-batch subgraph."""
    report = json.load(open(os.path.join(outdir, "report.json")))
    sg = report["subgraphs"][subgraph]
    if sg.get("versions", 1) > 1 or report.get("dynamic_batch"):
        raise SystemExit(f"{tool}: dynamic-batch subgraphs are not supported")
    src = open(os.path.join(outdir, sg["source"])).read()
    return src, tensor_shapes(src), sg


def call_flops(outdir: str, calls: list[dict]) -> None:
    """Set each call's "flops" (the conv/matmul FLOPs of its TF nodes) from the model named
    in OUTDIR/report.json; leaves them unset when that model is gone or does not load."""
    from rstf.errors import RstfError
    from rstf.frontend.graph import load_model
    from rstf.pipeline import node_flops
    report = json.load(open(os.path.join(outdir, "report.json")))
    shapes = {**(report.get("input_shapes") or {}), **(report.get("pinned_shapes") or {})}
    try:
        graph = load_model(report["model"], shapes or None, report.get("outputs") or None,
                           fold=True,
                           fold_scales=report.get("options", {}).get("fold_scales", False))
    except (RstfError, OSError, KeyError, ValueError):
        return
    for c in calls:
        names = (n.split(" ", 1)[1] for n in c["nodes"] if " " in n)
        c["flops"] = sum(node_flops(graph, n) for n in names if n in graph.nodes)


def profile(outdir: str, subgraph: int = 0, reps: int = 20, threads: int = 0) -> dict:
    """Per-call median seconds of one subgraph of an rstf output folder."""
    src, shapes, sg = load_subgraph(outdir, subgraph, "group_profile")
    entry = f"rstf_sg_{subgraph}"
    total, calls = time_calls(src, entry, sg["workspace_bytes"], reps, threads)
    for c, nbytes in zip(calls, call_input_bytes(src, entry)):
        c["input_bytes"] = nbytes
    return {"total_seconds": total, "calls": calls, "flops": sg["flops"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--subgraph", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0,
                    help="the team's threads (default: every core)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    res = profile(args.outdir, args.subgraph, args.reps, args.threads)
    total = res["total_seconds"]
    print(f"subgraph {args.subgraph}: {total * 1e3:.3f} ms per run (median of {args.reps}), "
          f"{res['flops'] / total / 1e9:.1f} GFLOP/s over its {res['flops'] / 1e9:.3f} GFLOP")
    by_type: dict[str, float] = {}
    for c in res["calls"]:
        kind = c["nodes"][0].split()[0] if c["nodes"] else "?"
        by_type[kind] = by_type.get(kind, 0.0) + c["seconds"]
    print("by the first node's op type:")
    for kind, s in sorted(by_type.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:28s} {s * 1e3:8.3f} ms {100 * s / total:5.1f}%")
    print(f"top {args.top} calls:")
    if args.top:  # loading the model takes seconds: only for a listing
        call_flops(args.outdir, res["calls"])
    for c in sorted(res["calls"], key=lambda c: -c["seconds"])[:args.top]:
        first = c["nodes"][0] if c["nodes"] else ""
        rate = (f" {c['flops'] / c['seconds'] / 1e9:6.1f} GFLOP/s" if c.get("flops")
                and c["seconds"] > 0 else " " * 14)
        # A group reading a megabyte or more of weights: the rate it streams them at (the
        # bound where each weight serves few rows: benchmarks/peak_stream.c).
        rate += (f" {c['input_bytes'] / c['seconds'] / 1e9:5.1f} GB/s in"
                 if c.get("input_bytes", 0) >= 2**20 and c["seconds"] > 0 else " " * 14)
        print(f"  {c['call']:10s} {c['seconds'] * 1e3:8.3f} ms {100 * c['seconds'] / total:5.1f}%"
              f"{rate}  {first[:90]} (+{max(0, len(c['nodes']) - 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
