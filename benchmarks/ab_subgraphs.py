#!/usr/bin/env python3
"""A/B of two `rstf optimize` outputs of one model, subgraph by subgraph, in one program each.

    python benchmarks/ab_subgraphs.py OUTDIR_A OUTDIR_B [--reps 60] [--threads N] [--json]

OUTDIR_A and OUTDIR_B are output folders of the same model built two ways (`--tuning off`
and a tuned profile, say). Each subgraph's C from both is linked into one timing program
(`rstf.evaluation.pairbench`: the op library's flags and thread team, 2 MB pages) that runs
the two in turn, run by run, so that a burst of the machine's load falls on both; that is
what `rstf tune` measures by. `ab_graphs.py` times the whole graphs in TensorFlow, which
adds TensorFlow's own work and its noise; this times only what rstf generated.

Prints, per subgraph and in all: each side's median milliseconds and the median over runs
of A's time over B's (B's speed-up; the subgraphs' figures weighted by A's time).
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


def ab(out_a: str, out_b: str, reps: int = 60, threads: int = 0) -> dict:
    """{"subgraphs": [{"name", "a_ms", "b_ms", "speedup"}], "a_ms", "b_ms", "speedup"}."""
    from rstf.errors import RstfError
    from rstf.evaluation.compare import _read_report
    from rstf.evaluation.pairbench import compile_unit, pair_timer

    reports = [_read_report(d) for d in (out_a, out_b)]
    if reports[0]["model"] != reports[1]["model"]:
        raise RstfError(f"{out_a} and {out_b} were optimized from different models")
    pairs = list(zip(reports[0]["subgraphs"], reports[1]["subgraphs"]))
    if len(reports[0]["subgraphs"]) != len(reports[1]["subgraphs"]) or \
            any(a["name"] != b["name"] for a, b in pairs):
        raise RstfError(f"{out_a} and {out_b} cut the model into different subgraphs")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rstf-ab-") as work:
        for i, sgs in enumerate(pairs):
            units = []
            for d, sg in zip((out_a, out_b), sgs):
                with open(os.path.join(d, sg["source"])) as f:
                    units.append(compile_unit(f.read(), f"rstf_sg_{i}",
                                              sg["workspace_bytes"], work))
            runs = pair_timer(units, reps, work).run(threads)
            a, b = ([sum(c["seconds"] for c in run) for run in side] for side in runs)
            rows.append({"name": sgs[0]["name"], "a_ms": statistics.median(a) * 1e3,
                         "b_ms": statistics.median(b) * 1e3,
                         "speedup": statistics.median(x / y for x, y in zip(a, b))})
    a_ms = sum(r["a_ms"] for r in rows)
    return {"subgraphs": rows, "a_ms": a_ms, "b_ms": sum(r["b_ms"] for r in rows),
            "speedup": sum(r["speedup"] * r["a_ms"] for r in rows) / a_ms if a_ms else 1.0}


def main(argv=None) -> int:
    from rstf.errors import RstfError
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_a")
    p.add_argument("out_b")
    p.add_argument("--reps", type=int, default=60, help="timed runs of each side (default 60)")
    p.add_argument("--threads", type=int, default=0, help="team threads (default: all)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        r = ab(a.out_a, a.out_b, a.reps, a.threads)
    except RstfError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    for row in r["subgraphs"]:
        print(f"{row['name']}: A {row['a_ms']:.3f} ms, B {row['b_ms']:.3f} ms, "
              f"A/B {row['speedup']:.3f}")
    print(f"all: A {r['a_ms']:.3f} ms, B {r['b_ms']:.3f} ms, A/B {r['speedup']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
