#!/usr/bin/env python3
"""Generality sweep: keras.applications image classifiers through rstf.

    python benchmarks/zoo.py [--models VGG16,ResNet50V2,...] [--input-size 96] [--out DIR]
                             [--timeout-per-model 900]

Each model is built at batch 1 with fixed random weights (models/build.py, "keras:NAME"),
optimized and compared with stock TensorFlow, in its own subprocess (a crash or a timeout
costs one row, not the sweep). Prints one JSON line per model, then a markdown table.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
DEFAULT = ("VGG16,ResNet50V2,InceptionResNetV2,Xception,MobileNet,MobileNetV3Small,"
           "DenseNet121,NASNetMobile,EfficientNetB0,EfficientNetV2B0,ConvNeXtTiny")
MIN_SIZE = {"InceptionResNetV2": 75, "Xception": 71, "NASNetMobile": 32}

WORKER = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from models.build import build_graph_def, write_graph_def
from rstf.pipeline import optimize
from rstf.compare import compare
name, size, out = {name!r}, {size}, {out!r}
t0 = time.perf_counter()
write_graph_def(build_graph_def("keras:" + name, input_size=size), out + ".pb")
rep = optimize(out + ".pb", out + ".rstf", force=True, log=lambda m: None)
res = compare(out + ".pb", out + ".rstf", latency=False)
print(json.dumps({{"model": name, "input_size": size,
    "nodes_total": rep["nodes_total"], "nodes_covered": rep["nodes_covered"],
    "flops_total": rep["flops_total"], "flops_covered": rep["flops_covered"],
    "unsupported": {{k: v["count"] for k, v in rep["unsupported"].items()}},
    "subgraphs": len(rep["subgraphs"]), "optimize_seconds": rep["optimize_seconds"],
    "max_rel_err": max(o["max_rel_err"] for o in res["outputs"]), "passed": res["passed"],
    "seconds": round(time.perf_counter() - t0, 1)}}))
"""


def run_one(name, size, out_dir, timeout):
    out = os.path.join(out_dir, name)
    code = WORKER.format(root=ROOT, name=name, size=size, out=out)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "input_size": size, "error": f"timeout after {timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return {"model": name, "input_size": size, "error": (err[-1] if err else "?")[:300]}
    return json.loads(lines[-1])


def table(rows) -> str:
    out = ["| model | input | nodes covered | conv/matmul FLOPs covered | max rel err | "
           "result | left to TF |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['input_size']} | | | | error: {r['error']} | |")
            continue
        pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "n/a"  # noqa: E731
        left = ", ".join(f"{k} x{v}" for k, v in r["unsupported"].items()) or "-"
        out.append(f"| {r['model']} | {r['input_size']} | {r['nodes_covered']}/"
                   f"{r['nodes_total']} ({pct(r['nodes_covered'], r['nodes_total'])}) | "
                   f"{pct(r['flops_covered'], r['flops_total'])} | {r['max_rel_err']:.2g} | "
                   f"{'pass' if r['passed'] else 'FAIL'} | {left} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=DEFAULT)
    p.add_argument("--input-size", type=int, default=96)
    p.add_argument("--out")
    p.add_argument("--timeout-per-model", type=int, default=900)
    a = p.parse_args()
    out_dir = a.out or tempfile.mkdtemp(prefix="rstf-zoo-")
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        size = max(a.input_size, MIN_SIZE.get(name, 32))
        rows.append(run_one(name, size, out_dir, a.timeout_per_model))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
