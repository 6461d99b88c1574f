#!/usr/bin/env python3
"""Generality sweep: keras.applications image classifiers (and Inception v4) through rstf.

    python benchmarks/zoo.py [--models all|quick|NAME[@SIZE],...] [--input-size H]
                             [--out DIR] [--timeout-per-model S] [--keep] [--no-latency]

For every model: build it at batch 1 with fixed random weights (``models/build.py``:
``keras:NAME`` for a keras.applications constructor, or one of build.py's own names such
as ``inception_v4``), ``rstf.pipeline.optimize`` it and ``rstf.compare.compare`` it with
stock TensorFlow (``reps=1``).  Each model runs in its own subprocess (its own process
group), so a crash, an out-of-memory kill or ``--timeout-per-model`` costs one row, not
the sweep.

Output: one JSON object per model on stdout as it finishes (also appended to
``DIR/zoo.jsonl``), then a markdown table (also written to ``DIR/zoo.md``).  A failed model
has ``"error"``: one line, ``STAGE: ExceptionType: message`` (STAGE is build, optimize,
compare), ``timeout after S s in STAGE`` or ``killed by signal N in STAGE``.

``--input-size H`` (default 96) is raised to the model's minimum where that is larger
(``models.build.min_input_size``: 75 for InceptionV3/InceptionResNetV2/inception_v4, 71
for Xception); ``NAME@SIZE`` sets one model's size (``inception_v4@299``).  ``DIR``
defaults to a fresh temporary folder; the built ``.pb`` and the ``.rstf`` folder of each
model are deleted once it is measured unless ``--keep`` (never commit them).

Exit status: 0 when every model passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from models.build import MODELS, min_input_size  # noqa: E402  (does not import TF)

# Every image classifier in keras.applications (keras 3.15) plus Inception v4, cheapest
# first (roughly by build + optimize cost at 96x96), so the big ones run last.
ALL = [
    "MobileNetV3Small", "MobileNet", "MobileNetV2", "MobileNetV3Large", "EfficientNetB0",
    "EfficientNetV2B0", "NASNetMobile", "DenseNet121", "EfficientNetB1", "EfficientNetV2B1",
    "ResNet50", "ResNet50V2", "EfficientNetB2", "EfficientNetV2B2", "Xception",
    "InceptionV3", "DenseNet169", "EfficientNetB3", "EfficientNetV2B3", "ConvNeXtTiny",
    "VGG16", "VGG19", "DenseNet201", "ResNet101", "ResNet101V2", "EfficientNetB4",
    "inception_v4", "ConvNeXtSmall", "InceptionResNetV2", "ResNet152", "ResNet152V2",
    "EfficientNetV2S", "EfficientNetB5", "ConvNeXtBase", "EfficientNetB6", "EfficientNetV2M",
    "EfficientNetB7", "ConvNeXtLarge", "NASNetLarge", "EfficientNetV2L", "ConvNeXtXLarge",
]
# A representative subset: ~20 minutes on two busy cores with a cold rstf build cache,
# ~11 with a warm one.
QUICK = [
    "MobileNetV3Small", "MobileNet", "EfficientNetB0", "EfficientNetV2B0", "NASNetMobile",
    "DenseNet121", "ResNet50V2", "Xception", "ConvNeXtTiny", "VGG16", "InceptionResNetV2",
    "inception_v4@299",
]
DEFAULT_SIZE = 96


def build_name(model: str) -> str:
    """models/build.py's name for a zoo model name."""
    return model if model in MODELS else f"keras:{model}"


def parse_models(spec: str, default_size: int) -> list[tuple[str, int]]:
    names = {"all": ALL, "quick": QUICK}.get(spec) or [m for m in spec.split(",") if m]
    out = []
    for item in names:
        name, _, size = item.partition("@")
        floor = min_input_size(build_name(name))
        out.append((name, int(size) if size else max(default_size, floor)))
    return out


# --------------------------------------------------------------------------- worker


def worker(name: str, size: int, model_dir: str, latency: bool, rtol: float) -> None:
    """Build, optimize and compare one model; write model_dir/result.json.

    Runs in a child process. model_dir/stage holds the current stage, so the parent
    can say where a killed or timed-out child was."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    row: dict = {"model": name, "input_size": size}
    stage_file = os.path.join(model_dir, "stage")
    pb, rstf_dir = os.path.join(model_dir, "model.pb"), os.path.join(model_dir, "model.rstf")

    def stage(s: str) -> None:
        with open(stage_file, "w") as f:
            f.write(s)
        row["stage"] = s

    t0 = time.perf_counter()
    try:
        stage("build")
        import numpy as np

        import rstf.tfutil  # noqa: F401  (quiet TF start-up)
        from models.build import build_graph_def, write_graph_def

        graph_def = build_graph_def(build_name(name), input_size=size)
        write_graph_def(graph_def, pb)
        row["build_seconds"] = round(time.perf_counter() - t0, 1)
        row["graph_nodes"] = len(graph_def.node)
        row["pb_mb"] = round(os.path.getsize(pb) / 2**20, 1)
        row["output_max"] = _output_max(graph_def, size, np)
        del graph_def

        stage("optimize")
        from rstf.pipeline import optimize

        log_lines: list[str] = []
        rep = optimize(pb, rstf_dir, force=True, log=log_lines.append)
        row.update(
            nodes_total=rep["nodes_total"], nodes_covered=rep["nodes_covered"],
            flops_total=rep["flops_total"], flops_covered=rep["flops_covered"],
            unsupported={k: v["count"] for k, v in rep["unsupported"].items()},
            unsupported_reasons={k: v["reason"] for k, v in rep["unsupported"].items()},
            subgraphs=len(rep["subgraphs"]), nodes_folded=rep.get("nodes_folded"),
            optimize_seconds=rep["optimize_seconds"],
            build_cached=rep.get("build_cached"), optimize_log=log_lines[-5:])

        stage("compare")
        from rstf.compare import compare

        res = compare(pb, rstf_dir, rtol=rtol, reps=1, latency=latency)
        row["max_rel_err"] = max(o["max_rel_err"] for o in res["outputs"])
        row["max_abs_err"] = max(o["max_abs_err"] for o in res["outputs"])
        row["passed"] = res["passed"]
        if latency:
            row["latency_ms"] = res["latency_ms"]
        stage("done")
    except BaseException as e:  # noqa: BLE001 -- reported, one line
        msg = " ".join(str(e).split()) or repr(e)
        row["error"] = f"{row.get('stage', '?')}: {type(e).__name__}: {msg}"[:400]
    row["seconds"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(model_dir, "result.json"), "w") as f:
        json.dump(row, f)


def _output_max(graph_def, size: int, np) -> float:
    """Largest softmax probability on a N(0,1) input: near 1/1000 or near 1 means the
    random weights make a degenerate model on which errors are hard to see."""
    from rstf.tfutil import tf

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x = np.random.RandomState(0).standard_normal((1, size, size, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        y = sess.run("output:0", {"input:0": x})
    return float(np.max(y))


# --------------------------------------------------------------------------- driver


def run_one(name: str, size: int, out_dir: str, timeout: float, latency: bool,
            rtol: float, keep: bool) -> dict:
    model_dir = os.path.join(out_dir, f"{name}@{size}")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    spec = json.dumps({"name": name, "size": size, "dir": model_dir, "latency": latency,
                       "rtol": rtol})
    started = datetime.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    with open(os.path.join(model_dir, "log.txt"), "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", spec],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:  # the worker and its compilers / TF runners: its own process group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            rc = None
    row = _read_json(os.path.join(model_dir, "result.json"))
    stage = _read_text(os.path.join(model_dir, "stage")) or "start-up"
    if rc is None:
        row = {"model": name, "input_size": size, **{k: v for k, v in (row or {}).items()
                                                      if k not in ("error", "stage")},
               "error": f"timeout after {timeout:g} s in {stage}"}
    elif row is None:
        why = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        tail = _last_line(os.path.join(model_dir, "log.txt"))
        row = {"model": name, "input_size": size,
               "error": f"{why} in {stage}" + (f" (last output: {tail})" if tail else "")}
    row.pop("stage", None)
    row["started"] = started
    row["wall_seconds"] = round(time.perf_counter() - t0, 1)
    if not keep:
        for p in ("model.pb", "model.rstf"):
            path = os.path.join(model_dir, p)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else (
                os.path.exists(path) and os.unlink(path))
    return row


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _last_line(path: str) -> str:
    lines = [ln.strip() for ln in _read_text(path).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _pct(a, b) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def table(rows: list[dict]) -> str:
    out = ["| model | input | nodes covered | conv/matmul FLOPs covered | left to TF "
           "(op x count) | max rel err | result | optimize s | max prob |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cov = (f"{r['nodes_covered']}/{r['nodes_total']} "
               f"({_pct(r['nodes_covered'], r['nodes_total'])})" if "nodes_total" in r else "")
        flops = _pct(r["flops_covered"], r["flops_total"]) if "flops_total" in r else ""
        left = (", ".join(f"{k} x{v}" for k, v in r["unsupported"].items()) or "-"
                if "unsupported" in r else "")
        err = f"{r['max_rel_err']:.2g}" if "max_rel_err" in r else ""
        if "error" in r:
            result = "error: " + r["error"].replace("|", "\\|")
        else:
            result = "pass" if r.get("passed") else "FAIL"
        opt = f"{r['optimize_seconds']:.0f}" if "optimize_seconds" in r else ""
        pmax = f"{r['output_max']:.3f}" if "output_max" in r else ""
        out.append(f"| {r['model']} | {r['input_size']} | {cov} | {flops} | {left} | {err} | "
                   f"{result} | {opt} | {pmax} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="all",
                   help="'all' (default: every keras.applications classifier and "
                        "inception_v4, cheapest first), 'quick', or NAME[@SIZE],...")
    p.add_argument("--input-size", type=int, default=DEFAULT_SIZE, metavar="H",
                   help=f"square input size (default {DEFAULT_SIZE}; raised to each model's "
                        "minimum)")
    p.add_argument("--out", metavar="DIR", help="results folder (default: a temp folder)")
    p.add_argument("--timeout-per-model", type=float, default=1800, metavar="S",
                   help="kill a model's build+optimize+compare after S seconds (default 1800)")
    p.add_argument("--rtol", type=float, default=1e-4, help="compare tolerance (default 1e-4)")
    p.add_argument("--no-latency", action="store_true",
                   help="check the numbers only (compare latency=False)")
    p.add_argument("--keep", action="store_true", help="keep each model's .pb and .rstf")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        s = json.loads(a.worker)
        worker(s["name"], s["size"], s["dir"], s["latency"], s["rtol"])
        return 0

    models = parse_models(a.models, a.input_size)
    out_dir = a.out or tempfile.mkdtemp(prefix="rstf-zoo-")
    os.makedirs(out_dir, exist_ok=True)
    print(f"zoo: {len(models)} models, results in {out_dir}", file=sys.stderr, flush=True)
    rows = []
    with open(os.path.join(out_dir, "zoo.jsonl"), "a") as jl:
        for name, size in models:
            row = run_one(name, size, out_dir, a.timeout_per_model, not a.no_latency,
                          a.rtol, a.keep)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            jl.write(line + "\n")
            jl.flush()
    md = table(rows)
    with open(os.path.join(out_dir, "zoo.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
