#!/usr/bin/env python3
"""Generality and speed sweep: keras.applications image classifiers (and Inception v4)
through rstf and every other engine; with ``--models breadth``, the other model classes of
``models/breadth.py`` (vision and decoder transformers, more encoders, U-Net and FPN
decoders; keras-hub needed), each at its own fixed size.

    python benchmarks/zoo.py [--models all|quick|breadth|NAME[@SIZE],...] [--quick] [--input-size H]
                             [--engines LIST|none] [--reps N] [--rounds R] [--out DIR] [--docs]
                             [--timeout-per-model S] [--keep] [--no-latency]

The speed sweep (estimated 25-30 minutes on two cores; the lead's command):

    python benchmarks/zoo.py --quick --out /tmp/zoo --docs

For every model: build it at batch 1 with fixed random weights and calibrated batch-norm
statistics (``models/build.py``: ``keras:NAME`` for a keras.applications constructor, or
one of build.py's own names such as ``inception_v4``) and ``rstf.pipeline.optimize`` it
(the coverage columns). Then, with ``--engines LIST`` (default
``rstf-poly,tf-eigen,tf-onednn,onnxruntime,openvino``; rstf-poly and tf-eigen are always
added), ``rstf.evaluation.bench.bench`` times every engine on the same inputs (uniform in [0, 1), or in
[0, 255) for a model that rescales raw pixels itself, ``models.build.native_input_range``:
the range its batch norms were calibrated on, in the row's ``input_range`` and the table;
``--reps`` timed calls after a warm-up, in ``--rounds`` turns of every engine; rstf-poly
runs the model optimized above) and
measures each one's error against TF Eigen and TF's own oneDNN-vs-Eigen spread; a model
passes when bench's rstf-poly status is ok (error within ``--rtol``). ``--engines none``
instead ``rstf.evaluation.compare.compare``s rstf with stock TensorFlow (``reps=1``), as before the
speed sweep. Each model runs in its own subprocess (its own process group), so a crash, an
out-of-memory kill or ``--timeout-per-model`` costs one row, not the sweep.

Output, in DIR: one JSON object per model on stdout as it finishes (also appended to
``zoo.jsonl``), then a markdown table and, when engines ran, a one-line summary (geomean of
rstf / best other engine, the models rstf is fastest on, the models where it is slower than
stock TF) in ``zoo.md``, and a chart of rstf / best other engine per model in ``zoo.png``.
``--docs`` also writes them, with the machine, date, commit and command line, to
``docs/benchmarks/DATE-zoo.md`` and ``DATE-zoo.png``. A failed model has ``"error"``: one
line, ``STAGE: ExceptionType: message`` (STAGE is build, optimize, bench, compare),
``timeout after S s in STAGE`` or ``killed by signal N in STAGE``.

A row with engines has ``engines`` ({engine: status, reason, median_ms, q1_ms, q3_ms,
max_rel_err, spread_ratio, exact_err, exact_ratio}), ``tf_spread``, ``tf_exact_err`` (TF's
error against the model run in float64, ``rstf.evaluation.exact``; None with
``exact_unavailable``, the reason), ``exact_ratio`` (rstf's over TF's),
``best_other`` ({engine, ms}: the fastest
non-rstf engine whose status is ok, or a mismatch within 2x TF's spread; or None), ``rstf_over_best`` (rstf-poly's median over
best_other's), ``gflop`` (the model's conv + matmul FLOPs, optimize's ``flops_total``) and
``rstf_gflops``.

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
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from models.breadth import BREADTH, DECODERS, HUB, IMAGE, SEQ_LEN  # noqa: E402  (no TF import)
from models.build import MODELS, UNIT_RANGE, min_input_size  # noqa: E402  (no TF import)

# Every image classifier in keras.applications (keras 3.15) plus Inception v4 and RegNetX
# (models/regnet.py: keras.applications has no grouped-convolution model), cheapest
# first (roughly by build + optimize cost at 96x96), so the big ones run last.
ALL = [
    "MobileNetV3Small", "MobileNet", "MobileNetV2", "MobileNetV3Large", "EfficientNetB0",
    "EfficientNetV2B0", "regnetx_002", "NASNetMobile", "DenseNet121", "regnetx_004",
    "EfficientNetB1", "EfficientNetV2B1", "regnetx_008", "ResNet50", "ResNet50V2",
    "regnetx_016", "EfficientNetB2", "EfficientNetV2B2", "Xception", "InceptionV3",
    "regnetx_032", "DenseNet169", "EfficientNetB3", "EfficientNetV2B3", "ConvNeXtTiny", "VGG16",
    "VGG19", "DenseNet201", "ResNet101", "ResNet101V2", "EfficientNetB4", "inception_v4",
    "ConvNeXtSmall", "InceptionResNetV2", "ResNet152", "ResNet152V2", "EfficientNetV2S",
    "EfficientNetB5", "ConvNeXtBase", "EfficientNetB6", "EfficientNetV2M", "EfficientNetB7",
    "ConvNeXtLarge", "NASNetLarge", "EfficientNetV2L", "ConvNeXtXLarge",
]
# A representative subset for the speed sweep, cheapest first: depthwise + squeeze-and-excite
# (MobileNets, EfficientNets: the issue-43 bar names B0, B3, V2B0 and MobileNetV3Large),
# plain and dense residual nets, separable convs (Xception), inception blocks, ConvNeXt's
# 7x7 depthwise + layer norm + GELU, and RegNetX's grouped convolutions (models/regnet.py,
# which keras.applications 3.15 lacks). About 45 s a model with every engine on two cores.
QUICK = [
    "MobileNetV3Small", "MobileNetV2", "MobileNetV3Large", "EfficientNetB0",
    "EfficientNetV2B0", "DenseNet121", "ResNet50", "Xception", "InceptionV3",
    "EfficientNetB3", "ConvNeXtTiny", "regnetx_002", "regnetx_016",
]
DEFAULT_SIZE = 96
DEFAULT_ENGINES = "rstf-poly,tf-eigen,tf-onednn,onnxruntime,openvino"
RSTF = "rstf-poly"  # the engine the sweep is about; always benchmarked
# bench's fields kept per engine in a row (times_ms and the runtime details are dropped).
ENGINE_FIELDS = ("status", "reason", "median_ms", "q1_ms", "q3_ms", "max_rel_err",
                 "spread_ratio", "exact_err", "exact_ratio")


def build_name(model: str) -> str:
    """models/build.py's name for a zoo model name."""
    return model if model in MODELS or model in BREADTH else f"keras:{model}"


def breadth_size(name: str) -> int:
    """A breadth model's fixed input size: the image side, or a token model's length."""
    if name in DECODERS:
        return 128
    return IMAGE if "image_shape" in HUB[name][1] else SEQ_LEN


def parse_models(spec: str, default_size: int) -> list[tuple[str, int]]:
    """'all', 'quick', 'breadth' or 'NAME[@SIZE],...' -> [(name, input size)]; a size not
    given is `default_size` raised to the model's minimum (a breadth model's is fixed)."""
    names = {"all": ALL, "quick": QUICK, "breadth": list(BREADTH)}.get(spec) or \
        [m for m in spec.split(",") if m]
    out = []
    for item in names:
        name, _, size = item.partition("@")
        if name in BREADTH:
            if size and int(size) != breadth_size(name):
                raise ValueError(f"{name} is built at {breadth_size(name)} only")
            out.append((name, breadth_size(name)))
            continue
        floor = min_input_size(build_name(name))
        out.append((name, int(size) if size else max(default_size, floor)))
    return out


def parse_engine_list(text: str) -> tuple[str, ...]:
    """`--engines`: 'none' -> () (compare only); otherwise rstf.evaluation.bench's engine names,
    checked (RstfError), with tf-eigen (bench's reference) and rstf-poly always in."""
    from rstf.evaluation.bench import parse_engines

    if text.strip().lower() == "none":
        return ()
    engines = parse_engines(text)
    return engines if RSTF in engines else (*engines, RSTF)


# --------------------------------------------------------------------------- worker


def worker(name: str, size: int, model_dir: str, latency: bool, rtol: float,
           engines: tuple[str, ...] = (), reps: int = 10, rounds: int = 1) -> None:
    """Build and optimize one model, then bench it on `engines` (or, with none, compare it
    with TF); write model_dir/result.json.

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

        import rstf.frontend.tfutil  # noqa: F401  (quiet TF start-up)
        from models.breadth import build_breadth
        from models.build import build_reference, write_graph_def

        # Fed what the model was calibrated on: [0, 1), or raw pixels for a model that
        # rescales them itself (models.build.native_input_range).
        if name in BREADTH:
            graph_def, input_range = build_breadth(name)
        else:
            graph_def, input_range = build_reference(build_name(name), input_size=size)
        row["input_range"] = list(input_range)
        write_graph_def(graph_def, pb)
        row["build_seconds"] = round(time.perf_counter() - t0, 1)
        row["graph_nodes"] = len(graph_def.node)
        row["pb_mb"] = round(os.path.getsize(pb) / 2**20, 1)
        if name not in BREADTH:  # a classifier's softmax
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
            build_cached=rep.get("build_cached"), optimize_log=log_lines[-5:],
            gflop=rep["flops_total"] / 1e9)

        if engines:
            stage("bench")
            from rstf.evaluation.bench import bench

            # rstf-poly runs the model optimized above: the pass is not run twice.
            res = bench([pb], engines, reps=reps, rtol=rtol, optimized={RSTF: rstf_dir},
                        input_range=input_range, rounds=rounds,
                        log=lambda m: print(f"zoo: {name}: {m}", file=sys.stderr, flush=True))
            mod = res["models"][0]
            row.update(engine_fields(mod["engines"], mod["tf_spread"], row["gflop"]),
                       rounds=res["rounds"], tf_exact_err=mod["tf_exact_err"],
                       exact_unavailable=mod["exact_unavailable"])
        else:
            stage("compare")
            from rstf.evaluation.compare import compare

            res = compare(pb, rstf_dir, rtol=rtol, reps=1, latency=latency,
                          input_range=input_range)
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
    from rstf.frontend.tfutil import tf

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x = np.random.RandomState(0).standard_normal((1, size, size, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        y = sess.run("output:0", {"input:0": x})
    return float(np.max(y))


def engine_fields(bench_rows: list[dict], tf_spread, gflop: float) -> dict:
    """A zoo row's speed fields (module docstring) from one model's rstf.evaluation.bench
    engine rows: engines, tf_spread, best_other, rstf_over_best, rstf_gflops; and its verdict: passed
    (bench's rstf-poly status is ok), max_rel_err / spread_ratio / exact_ratio (rstf-poly's, where
    measured) and, when rstf-poly is not ok, rstf_problem ('STATUS: reason')."""
    engines = {r["engine"]: {k: r.get(k) for k in ENGINE_FIELDS} for r in bench_rows}
    rstf = engines.get(RSTF, {"status": "not run", "reason": ""})
    best = best_other(engines)
    out = {"engines": engines, "tf_spread": tf_spread, "best_other": best,
           "rstf_over_best": rstf_over_best(engines, best), "passed": rstf["status"] == "ok"}
    ms = rstf.get("median_ms")
    out["rstf_gflops"] = gflop / (ms / 1e3) if ms else None
    for k in ("max_rel_err", "spread_ratio", "exact_ratio"):
        if rstf.get(k) is not None:
            out[k] = rstf[k]
    if rstf["status"] != "ok":
        out["rstf_problem"] = f"{rstf['status']}: {rstf.get('reason') or ''}".rstrip(": ")
    return out


SPREAD_RATIO_COUNTS = 2.0


def best_other(engines: dict) -> dict | None:
    """{"engine", "ms"} of the fastest engine other than rstf's whose numbers count: status
    ok, or a mismatch (error above --rtol) within 2x TF's own spread, which says the model
    is ill-conditioned on these inputs rather than the engine wrong (TF oneDNN itself is
    then a mismatch). A failure, a missing package or a larger error does not count."""
    def counts(r: dict) -> bool:
        return r["status"] == "ok" or (r["status"] == "mismatch"
                                       and r.get("spread_ratio") is not None
                                       and r["spread_ratio"] <= SPREAD_RATIO_COUNTS)

    timed = [(r["median_ms"], e) for e, r in engines.items()
             if not e.startswith("rstf-") and counts(r) and r.get("median_ms")]
    if not timed:
        return None
    ms, engine = min(timed)
    return {"engine": engine, "ms": ms}


def rstf_over_best(engines: dict, best: dict | None) -> float | None:
    """rstf-poly's median over the best other engine's; None when either is missing."""
    ms = engines.get(RSTF, {}).get("median_ms")
    return ms / best["ms"] if ms and best else None


# --------------------------------------------------------------------------- driver


def run_one(name: str, size: int, out_dir: str, timeout: float, latency: bool,
            rtol: float, keep: bool, engines: tuple[str, ...] = (), reps: int = 10,
            rounds: int = 1) -> dict:
    """One model's row: `worker` in its own process group, killed after `timeout` s; a
    crash or a timeout becomes the row's error."""
    model_dir = os.path.join(out_dir, f"{name}@{size}")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    spec = json.dumps({"name": name, "size": size, "dir": model_dir, "latency": latency,
                       "rtol": rtol, "engines": list(engines), "reps": reps,
                       "rounds": rounds})
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


def _label(r: dict) -> str:
    """'Model@size': a model as the table and the chart name it."""
    return f"{r['model']}@{r['input_size']}"


def _engine_order(rows: list[dict]) -> list[str]:
    """Every engine that has a column, in the order the rows list them."""
    return list(dict.fromkeys(e for r in rows for e in r.get("engines", {})))


def _coverage_cells(r: dict) -> list[str]:
    """The coverage columns of a row (COVERAGE_HEAD), '' where the model did not get so
    far."""
    cov = (f"{r['nodes_covered']}/{r['nodes_total']} "
           f"({_pct(r['nodes_covered'], r['nodes_total'])})" if "nodes_total" in r else "")
    flops = _pct(r["flops_covered"], r["flops_total"]) if "flops_total" in r else ""
    left = (", ".join(f"{k} x{v}" for k, v in r["unsupported"].items()) or "-"
            if "unsupported" in r else "")
    err = f"{r['max_rel_err']:.2g}" if r.get("max_rel_err") is not None else ""
    if "error" in r:
        result = "error: " + r["error"].replace("|", "\\|")
    elif r.get("passed"):
        result = "pass"
    else:
        problem = r.get("rstf_problem", "").replace("|", "\\|")
        result = f"FAIL ({problem})" if problem else "FAIL"
    opt = f"{r['optimize_seconds']:.0f}" if "optimize_seconds" in r else ""
    pmax = f"{r['output_max']:.3f}" if "output_max" in r else ""
    return [cov, flops, left, err, result, opt, pmax]


COVERAGE_HEAD = ["nodes covered", "conv/matmul FLOPs covered", "left to TF (op x count)",
                 "max rel err", "result", "optimize s", "max prob"]


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _engine_cell(e: dict | None) -> str:
    """An engine's median ms; its status where it has no time or is not ok."""
    if e is None:
        return ""
    if e.get("median_ms") is None:
        return e["status"]
    ms = f"{e['median_ms']:.2f}"
    return ms if e["status"] == "ok" else f"{ms} ({e['status']})"


def _input_cell(r: dict) -> str:
    """The table's input cell: the size, and the input range where it is not [0, 1)."""
    lo, hi = r.get("input_range") or UNIT_RANGE
    return str(r["input_size"]) + ("" if (lo, hi) == UNIT_RANGE else f", [{lo:g}, {hi:g})")


def table(rows: list[dict]) -> str:
    """The markdown table, rows in the order given. Without engine results (--engines
    none): model, input and the coverage columns. With them, after the input: GFLOP, one
    median-ms column per engine, rstf / best (other engine), best engine, rstf GFLOP/s and
    rstf's error over TF's spread and over TF's own error against the float64 run, then the
    coverage columns."""
    from rstf.evaluation.bench import LABELS, _fmt
    from rstf.evaluation.compare import format_ratio

    engines = _engine_order(rows)
    if not engines:
        head = ["model", "input", *COVERAGE_HEAD]
        out = [_md_row(head), _md_row(["---"] * len(head))]
        return "\n".join([*out, *(_md_row([r["model"], _input_cell(r),
                                            *_coverage_cells(r)]) for r in rows)])
    head = ["model", "input", "GFLOP", *(f"{LABELS[e]} ms" for e in engines), "rstf / best",
            "best engine", "rstf GFLOP/s", "rstf err / TF spread", "rstf float64 err / TF's",
            *COVERAGE_HEAD]
    out = [_md_row(head), _md_row(["---"] * len(head))]
    for r in rows:
        eng = r.get("engines", {})
        best = r.get("best_other")
        ratio = r.get("rstf_over_best")
        spread = (format_ratio(r.get("spread_ratio")) if r.get("max_rel_err") is not None
                  else "")
        out.append(_md_row([
            r["model"], _input_cell(r), _fmt(r.get("gflop"), ".3g"),
            *(_engine_cell(eng.get(e)) for e in engines),
            _fmt(ratio, ".2f"),
            LABELS[best["engine"]] if best else "-", _fmt(r.get("rstf_gflops"), ".1f"),
            spread, _exact_cell(r), *_coverage_cells(r)]))
    return "\n".join(out)


def _exact_cell(r: dict) -> str:
    """rstf's error against the float64 run over TF's, 'n/a' where TF is exact to the
    float, 'no float64' where the graph cannot run in float64, '' without a measure."""
    from rstf.evaluation.compare import format_ratio

    if r.get("exact_unavailable"):
        return "no float64"
    return format_ratio(r.get("exact_ratio")) if r.get("max_rel_err") is not None else ""


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def slower_than(rows: list[dict], engine: str) -> list[str]:
    """'Model@size (1.23x)' for every row where rstf-poly's median is above `engine`'s
    (any status with a time: a stock TF engine's time stands even where its error is above
    rtol)."""
    out = []
    for r in rows:
        eng = r.get("engines", {})
        mine, theirs = (eng.get(RSTF, {}).get("median_ms"), eng.get(engine, {}).get("median_ms"))
        if mine and theirs and mine > theirs:
            out.append(f"{_label(r)} ({mine / theirs:.2f}x)")
    return out


def summary(rows: list[dict]) -> str:
    """One line under the table: geomean of rstf / best other engine over the models where
    both ran, how many of them rstf is fastest on, and the models where rstf is slower than
    stock TF Eigen or TF oneDNN. '' when no engine ran (--engines none)."""
    if not _engine_order(rows):
        return ""
    ratios = [r["rstf_over_best"] for r in rows if r.get("rstf_over_best") is not None]
    missing = len(rows) - len(ratios)
    if not ratios:
        return f"rstf / best other engine: no model measured ({missing} without a ratio)."
    parts = [f"rstf / best other engine: geomean {geomean(ratios):.2f}x over {len(ratios)} "
             f"model{'s' if len(ratios) > 1 else ''}"
             + (f" ({missing} without a ratio)" if missing else ""),
             f"rstf fastest on {sum(x < 1 for x in ratios)}/{len(ratios)}"]
    for engine, label in (("tf-eigen", "TF Eigen"), ("tf-onednn", "TF oneDNN")):
        if any(engine in r.get("engines", {}) for r in rows):
            parts.append(f"slower than {label} on: "
                         f"{', '.join(slower_than(rows, engine)) or 'none'}")
    return "; ".join(parts + fidelity_counts(rows)) + "."


def fidelity_counts(rows: list[dict]) -> list[str]:
    """The summary's fidelity parts: on how many models rstf's error is within
    SPREAD_RATIO_COUNTS x TF's spread, and on how many it is no further from the float64
    result than TF's own (exact_ratio <= 1), each over the models with that measure."""
    parts = []
    for key, what in (("spread_ratio", f"error within {SPREAD_RATIO_COUNTS:g}x TF's spread"),
                      ("exact_ratio", "no further from float64 than TF")):
        bound = SPREAD_RATIO_COUNTS if key == "spread_ratio" else 1.0
        xs = [r[key] for r in rows if r.get(key) is not None]
        if xs:
            parts.append(f"rstf {what} on {sum(x <= bound for x in xs)}/{len(xs)}")
    return parts


def chart(rows: list[dict], path: str, title: str = "") -> None:
    """zoo.png: one horizontal bar per model (as run, top to bottom) of rstf-poly's time over
    the best other engine's, a line at 1.0 (left of it rstf is the fastest), each bar named
    'Model@size' and labelled with the ratio and that engine; a model without a ratio (it
    failed, or no engine but rstf ran) gets a red cross and the reason."""
    import matplotlib

    matplotlib.use("Agg")  # headless: the sweep runs on servers and in CI
    import matplotlib.pyplot as plt

    from rstf.evaluation.bench import LABELS, save_png

    ratios = [r.get("rstf_over_best") for r in rows]
    top = max([x for x in ratios if x is not None] + [1.0]) * 1.35
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.38 * max(len(rows), 1)), dpi=100)
    for i, (r, x) in enumerate(zip(rows, ratios)):
        if x is None:
            ax.plot([0.02 * top], [i], marker="x", color="#cb181d", markersize=9, mew=2)
            ax.text(0.05 * top, i, _why_no_ratio(r)[:70], va="center", fontsize=8,
                    color="#cb181d")
            continue
        ax.barh(i, x, 0.7, color="#08519c" if x <= 1 else "#de2d26", edgecolor="#333333",
                linewidth=0.5)
        ax.text(x + 0.01 * top, i, f"{x:.2f}x vs {LABELS[r['best_other']['engine']]}",
                va="center", fontsize=8)
    ax.axvline(1.0, color="#222222", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_label(r) for r in rows], fontsize=9)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first model run at the top
    ax.set_xlim(0, top)
    ax.set_xlabel("rstf-poly time / best other engine's time (lower is better; "
                  "< 1: rstf fastest)")
    ax.set_title(title or "keras.applications zoo, batch 1", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    save_png(fig, path, "zoo chart")


def _why_no_ratio(r: dict) -> str:
    if "error" in r:
        return f"failed: {r['error']}"
    if r.get("rstf_problem"):
        return f"rstf-poly {r['rstf_problem']}"
    return "no other engine ran"


# --------------------------------------------------------------------------- report


def git_commit() -> str:
    """`git rev-parse --short HEAD` of the repository, '-dirty' added when the work tree
    has changes; 'unknown' outside git."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no")
                       else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def docs_markdown(md: str, summary_line: str, png_name: str, command: str, date: str,
                  engines: tuple[str, ...], reps: int, rounds: int = 1) -> str:
    """docs/benchmarks/DATE-zoo.md: the machine (CPU model, cores), date, commit and command
    line, then the table, the summary and the chart."""
    from rstf.evaluation.bench import cpu_name

    turns = (f" in {rounds} rounds, the engines taking turns (each engine's process started "
             "again every round)") if rounds > 1 else ", each engine in its own process in turn"
    measure = (f"engines {', '.join(engines)}; median of {reps} timed calls after a "
               f"warm-up{turns}, "
               "inputs uniform in [0, 1) (in [0, 255) where the input column says so: "
               "a model that rescales raw pixels itself); errors vs TF Eigen" if engines
               else "rstf compared with TF (no engines timed)")
    lines = ["# keras.applications zoo: rstf against every engine", "",
             f"- machine: {cpu_name()}, {os.cpu_count()} cores",
             f"- date: {date}", f"- commit: {git_commit()}", f"- command: `{command}`",
             f"- measured: batch 1, {measure}", "", md, ""]
    if summary_line:
        lines += [summary_line, ""]
    if png_name:
        lines += [f"![rstf-poly time / best other engine's time]({png_name})", ""]
    return "\n".join(lines)


def write_outputs(rows: list[dict], out_dir: str, docs: bool, command: str,
                  engines: tuple[str, ...], reps: int, rounds: int = 1) -> str:
    """zoo.md (table + summary) and, when engines ran, zoo.png in `out_dir`; with `docs`
    also docs/benchmarks/DATE-zoo.md (+ .png beside it). Returns the table and summary."""
    md, line = table(rows), summary(rows)
    text = md + (f"\n\n{line}" if line else "")
    with open(os.path.join(out_dir, "zoo.md"), "w") as f:
        f.write(text + "\n")
    png = os.path.join(out_dir, "zoo.png") if engines else ""
    from rstf.evaluation.bench import LABELS

    others = ", ".join(LABELS[e] for e in engines if not e.startswith("rstf-"))
    title = (f"keras.applications zoo, batch 1, median of {reps}: rstf-poly / best of "
             f"{others}")
    if png:
        chart(rows, png, title)
    if docs:
        date = datetime.date.today().isoformat()
        base = os.path.join(ROOT, "docs", "benchmarks", f"{date}-zoo")
        os.makedirs(os.path.dirname(base), exist_ok=True)
        if png:
            shutil.copyfile(png, base + ".png")
        with open(base + ".md", "w") as f:
            f.write(docs_markdown(md, line, os.path.basename(base) + ".png" if png else "",
                                  command, date, engines, reps, rounds))
        print(f"zoo: wrote {base}.md", file=sys.stderr)
    return text


def parse_args(argv: list[str] | None):
    """The command line -> argparse namespace, with .models [(name, size)] and .engines
    (a tuple; () for none) parsed and checked (an error exits with status 2)."""
    from rstf.errors import RstfError

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="all",
                   help="'all' (default: every keras.applications classifier and "
                        "inception_v4, cheapest first), 'quick', or NAME[@SIZE],...")
    p.add_argument("--quick", action="store_true", help="the same as --models quick")
    p.add_argument("--input-size", type=int, default=DEFAULT_SIZE, metavar="H",
                   help=f"square input size (default {DEFAULT_SIZE}; raised to each model's "
                        "minimum)")
    p.add_argument("--engines", default=DEFAULT_ENGINES, metavar="LIST",
                   help=f"engines to time, rstf.evaluation.bench's names "
                        f"(default {DEFAULT_ENGINES}; "
                        "rstf-poly and tf-eigen are always added); 'none': compare rstf "
                        "with TF only")
    p.add_argument("--reps", type=int, default=10, metavar="N",
                   help="timed calls per engine after a warm-up (default 10)")
    p.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="the engines take turns in R rounds, each running its share of the "
                        "--reps (default 1): a shared machine's slow phases then land on "
                        "every engine, not on one")
    p.add_argument("--out", metavar="DIR", help="results folder (default: a temp folder)")
    p.add_argument("--docs", action="store_true",
                   help="also write docs/benchmarks/DATE-zoo.md and DATE-zoo.png")
    p.add_argument("--timeout-per-model", type=float, default=1800, metavar="S",
                   help="kill a model's build+optimize+bench after S seconds (default 1800)")
    p.add_argument("--rtol", type=float, default=1e-4, help="error tolerance (default 1e-4)")
    p.add_argument("--no-latency", action="store_true",
                   help="with --engines none: check the numbers only (compare latency=False)")
    p.add_argument("--keep", action="store_true", help="keep each model's .pb and .rstf")
    p.add_argument("--rows", metavar="ZOO.jsonl",
                   help="run nothing: write the table, chart (and --docs) again from an "
                        "earlier run's rows, its best other engine judged by this version's "
                        "rule")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    if a.reps < 1:
        p.error("--reps must be at least 1")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    try:
        a.engines = parse_engine_list(a.engines)
        a.models = parse_models("quick" if a.quick else a.models, a.input_size)
    except (RstfError, ValueError) as e:
        p.error(str(e))
    return a


def rejudge(path: str) -> list[dict]:
    """The rows of an earlier run's zoo.jsonl, with best_other and rstf_over_best
    recomputed from their engines."""
    from rstf.errors import RstfError

    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise RstfError(f"--rows {path}: {e}") from None
    for r in rows:
        if r.get("engines"):
            r["best_other"] = best_other(r["engines"])
            r["rstf_over_best"] = rstf_over_best(r["engines"], r["best_other"])
    return rows


def main(argv: list[str] | None = None) -> int:
    command = shlex.join(["python3", "benchmarks/zoo.py",
                          *(sys.argv[1:] if argv is None else argv)])
    a = parse_args(argv)
    if a.worker:
        s = json.loads(a.worker)
        worker(s["name"], s["size"], s["dir"], s["latency"], s["rtol"],
               tuple(s["engines"]), s["reps"], s["rounds"])
        return 0

    out_dir = a.out or tempfile.mkdtemp(prefix="rstf-zoo-")
    os.makedirs(out_dir, exist_ok=True)
    if a.rows:
        rows = rejudge(a.rows)
        engines = tuple(dict.fromkeys(e for r in rows for e in r.get("engines") or {}))
        print(write_outputs(rows, out_dir, a.docs, command, engines, a.reps, a.rounds))
        return 0 if all(r.get("passed") for r in rows) else 1
    print(f"zoo: {len(a.models)} models, engines: {', '.join(a.engines) or 'none'}; results "
          f"in {out_dir}", file=sys.stderr, flush=True)
    rows = []
    with open(os.path.join(out_dir, "zoo.jsonl"), "a") as jl:
        for name, size in a.models:
            row = run_one(name, size, out_dir, a.timeout_per_model, not a.no_latency,
                          a.rtol, a.keep, a.engines, a.reps, a.rounds)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            jl.write(line + "\n")
            jl.flush()
    print(write_outputs(rows, out_dir, a.docs, command, a.engines, a.reps, a.rounds))
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
