#!/usr/bin/env python3
"""Generality and speed sweep: keras.applications image classifiers (and Inception v4)
through rstf and every other engine; with ``--models breadth``, the other model classes of
``models/breadth.py`` (vision and decoder transformers, more encoders, U-Net and FPN
decoders; keras-hub needed), each at its own fixed size.

    python benchmarks/zoo.py [--models all|quick|breadth|NAME[@SIZE],...] [--quick] [--input-size H]
                             [--engines LIST|none] [--reps N] [--rounds R] [--out DIR] [--docs]
                             [--timeout-per-model S] [--keep] [--no-latency]
                             [--tuning auto|off|PROFILE]

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
out-of-memory kill or ``--timeout-per-model`` costs one row, not the sweep; inside it the
build, the softmax check and the optimization each run in a process of their own, so the
engines start with that memory given back (a 1.4 GB ConvNeXtXLarge needs up to 18 GB at
each stage).

Output, in DIR: one JSON object per model on stdout as it finishes (also appended to
``zoo.jsonl``), then a markdown table and, when engines ran, a one-line summary (geomean of
rstf / best other engine, the models rstf is fastest on, the models where it is slower than
stock TF) in ``zoo.md``, and a chart of rstf / best other engine per model in ``zoo.png``.
``--docs`` also writes them, with the machine, date, commit and command line, to
``docs/benchmarks/DATE-zoo.md`` and ``DATE-zoo.png``. A failed model has ``"error"``: one
line, ``STAGE: ExceptionType: message`` (STAGE is build, softmax, optimize, bench, compare),
``timeout after S s in STAGE`` or ``killed by signal N in STAGE``.

A row with engines has ``engines`` ({engine: status, reason, median_ms, q1_ms, q3_ms,
max_rel_err, spread_ratio, exact_err, exact_ratio}), ``tf_spread``, ``tf_exact_err`` (TF's
error against the model run in float64, ``rstf.evaluation.exact``; None with
``exact_unavailable``, the reason), ``exact_ratio`` (rstf's over TF's),
``tuning`` (report.json's: the ``rstf tune`` profile that chose some of rstf's tiles, or
``"profile": None`` for the analytic model's alone; ``--tuning`` as ``rstf optimize``'s,
default ``auto``: this machine's profile where there is one), ``best_other`` ({engine,
ms}: the fastest
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
from models.build import MODELS, min_input_size  # noqa: E402  (no TF import)
from benchmarks.zoo_report import RSTF, SPREAD_RATIO_COUNTS, write_outputs  # noqa: E402

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
           engines: tuple[str, ...] = (), reps: int = 10, rounds: int = 1,
           tuning: str = "auto") -> None:
    """Build and optimize one model, then bench it on `engines` (or, with none, compare it
    with TF); write model_dir/result.json.

    Runs in a child process. model_dir/stage holds the current stage, so the parent
    can say where a killed or timed-out child was. The build, the softmax check and the
    optimization each run in a process of their own (`run_stage`): none gives its memory
    back to the system (TensorFlow's and the allocator's pools), and a large model's TF
    runners need it (ConvNeXtLarge: 10 GB to build, 10 GB to optimize, 10 GB for TF Eigen
    to run)."""
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
        row.update(run_stage("build", {"name": name, "size": size, "dir": model_dir}))
        input_range = tuple(row["input_range"])
        if name not in BREADTH:  # a classifier's softmax
            stage("softmax")
            row.update(run_stage("softmax", {"dir": model_dir, "size": size,
                                             "input_range": input_range}))
        stage("optimize")
        row.update(run_stage("optimize", {"dir": model_dir, "tuning": tuning}))

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
            from rstf.evaluation.compare import compare, spread_ratio

            res = compare(pb, rstf_dir, rtol=rtol, reps=1, latency=latency,
                          input_range=input_range)
            row["max_rel_err"] = max(o["max_rel_err"] for o in res["outputs"])
            row["max_abs_err"] = max(o["max_abs_err"] for o in res["outputs"])
            row["passed"] = res["passed"]
            if latency:  # TF's own spread and the float64 reference come with the timing
                row["latency_ms"] = res["latency_ms"]
                row["tf_spread"] = max(o["tf_spread"] for o in res["outputs"])
                row["spread_ratio"] = spread_ratio(row["max_rel_err"], row["tf_spread"])
                row["exact_ratio"] = max((o["exact_ratio"] for o in res["outputs"]
                                          if o.get("exact_ratio") is not None), default=None)
        stage("done")
    except StageFailed as e:
        row["error"] = f"{row.get('stage', '?')}: {e}"[:400]
    except BaseException as e:  # noqa: BLE001 -- reported, one line
        row["error"] = f"{row.get('stage', '?')}: {_error_line(e)}"[:400]
    row["seconds"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(model_dir, "result.json"), "w") as f:
        json.dump(row, f)


def _error_line(e: BaseException) -> str:
    """`Type: message` on one line: a row's error after its stage."""
    return f"{type(e).__name__}: {' '.join(str(e).split()) or repr(e)}"


class StageFailed(Exception):
    """A stage's process failed: the message is its one-line error."""


def run_stage(stage: str, spec: dict) -> dict:
    """Run `STAGES[stage](spec)` in a process of its own (this file with `--stage`; in
    the worker's process group, so a timeout kills it too) and return its fields; its
    error, or its death, raises StageFailed."""
    out = os.path.join(spec["dir"], f"{stage}.json")
    if os.path.exists(out):
        os.unlink(out)
    rc = subprocess.run([sys.executable, os.path.abspath(__file__), "--stage", stage,
                         json.dumps(spec)], cwd=ROOT).returncode
    fields = _read_json(out)
    if fields is None:
        raise StageFailed(f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
    if "error" in fields:
        raise StageFailed(fields["error"])
    return fields


def stage_main(stage: str, spec: dict) -> int:
    """A `--stage` process: DIR/STAGE.json gets the stage's fields, or {"error": one line}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        fields = STAGES[stage](spec)
    except BaseException as e:  # noqa: BLE001 -- reported, one line
        fields = {"error": _error_line(e)}
    with open(os.path.join(spec["dir"], f"{stage}.json"), "w") as f:
        json.dump(fields, f)
    return 0 if "error" not in fields else 1


def _build(spec: dict) -> dict:
    """Build the model into DIR/model.pb: its input range and size."""
    import rstf.frontend.tfutil  # noqa: F401  (quiet TF start-up)
    from models.breadth import build_breadth
    from models.build import build_reference, write_graph_def

    t0 = time.perf_counter()
    name, size = spec["name"], spec["size"]
    pb = os.path.join(spec["dir"], "model.pb")
    # Fed what the model was calibrated on: [0, 1), or raw pixels for a model that
    # rescales them itself (models.build.native_input_range).
    if name in BREADTH:
        graph_def, input_range = build_breadth(name)
    else:
        graph_def, input_range = build_reference(build_name(name), input_size=size)
    write_graph_def(graph_def, pb)
    return {"input_range": list(input_range),
            "build_seconds": round(time.perf_counter() - t0, 1),
            "graph_nodes": len(graph_def.node),
            "pb_mb": round(os.path.getsize(pb) / 2**20, 1)}


def _softmax(spec: dict) -> dict:
    """A classifier's largest probability on the fed image (`_output_max`): a stage of its
    own because TF's session holds as much memory again as the build."""
    import numpy as np

    from rstf.frontend.graph import read_graph_def

    graph_def, _ = read_graph_def(os.path.join(spec["dir"], "model.pb"))
    return {"output_max": _output_max(graph_def, spec["size"], spec["input_range"], np)}


def _optimize(spec: dict) -> dict:
    """rstf.pipeline.optimize DIR/model.pb into DIR/model.rstf: the coverage fields."""
    from rstf.pipeline import optimize

    log_lines: list[str] = []
    rep = optimize(os.path.join(spec["dir"], "model.pb"),
                   os.path.join(spec["dir"], "model.rstf"), force=True,
                   log=log_lines.append, tuning=spec.get("tuning", "auto"))
    return dict(
        nodes_total=rep["nodes_total"], nodes_covered=rep["nodes_covered"],
        flops_total=rep["flops_total"], flops_covered=rep["flops_covered"],
        unsupported={k: v["count"] for k, v in rep["unsupported"].items()},
        unsupported_reasons={k: v["reason"] for k, v in rep["unsupported"].items()},
        subgraphs=len(rep["subgraphs"]), nodes_folded=rep.get("nodes_folded"),
        optimize_seconds=rep["optimize_seconds"],
        build_cached=rep.get("build_cached"), optimize_log=log_lines[-5:],
        gflop=rep["flops_total"] / 1e9,
        # The profile `rstf tune` wrote that chose some tiles ({"profile": None, ...}: the
        # analytic model's alone); `--tuning auto` reads this machine's where it has one.
        tuning=rep.get("tuning"))


STAGES = {"build": _build, "softmax": _softmax, "optimize": _optimize}


def _output_max(graph_def, size: int, input_range, np) -> float:
    """Largest softmax probability on the image every engine is fed (`rstf bench`'s and
    `rstf compare`'s seed 0: uniform in `input_range`): near 1/1000 or near 1 means the
    random weights make a degenerate model on which errors are hard to see."""
    from rstf.frontend.tfutil import tf

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x = np.random.RandomState(0).uniform(*input_range, (1, size, size, 3)).astype(np.float32)
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
            rounds: int = 1, tuning: str = "auto") -> dict:
    """One model's row: `worker` in its own process group, killed after `timeout` s; a
    crash or a timeout becomes the row's error."""
    model_dir = os.path.join(out_dir, f"{name}@{size}")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    spec = json.dumps({"name": name, "size": size, "dir": model_dir, "latency": latency,
                       "rtol": rtol, "engines": list(engines), "reps": reps,
                       "rounds": rounds, "tuning": tuning})
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
    p.add_argument("--tuning", default="auto", metavar="auto|off|PROFILE",
                   help="rstf optimize's --tuning (default auto: the tiles `rstf tune` "
                        "measured on this machine where it has a profile; off: the "
                        "analytic model's alone); each row's 'tuning' says which")
    p.add_argument("--no-latency", action="store_true",
                   help="with --engines none: check the numbers only (compare latency=False)")
    p.add_argument("--keep", action="store_true", help="keep each model's .pb and .rstf")
    p.add_argument("--rows", metavar="ZOO.jsonl",
                   help="run nothing: write the table, chart (and --docs) again from an "
                        "earlier run's rows, its best other engine judged by this version's "
                        "rule")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--stage", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker or a.stage:
        return a
    if a.reps < 1:
        p.error("--reps must be at least 1")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    if a.tuning not in ("auto", "off") and not os.path.isfile(a.tuning):
        p.error(f"--tuning {a.tuning}: no such profile (auto, off or a file `rstf tune` "
                f"wrote)")
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
    if a.stage:
        return stage_main(a.stage[0], json.loads(a.stage[1]))
    if a.worker:
        s = json.loads(a.worker)
        worker(s["name"], s["size"], s["dir"], s["latency"], s["rtol"],
               tuple(s["engines"]), s["reps"], s["rounds"], s.get("tuning", "auto"))
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
                          a.rtol, a.keep, a.engines, a.reps, a.rounds, a.tuning)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            jl.write(line + "\n")
            jl.flush()
    print(write_outputs(rows, out_dir, a.docs, command, a.engines, a.reps, a.rounds))
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
