"""`rstf bench`: one model, the same seeded random inputs, every engine; latency and error.

The inputs are rstf.evaluation.inputs' (`--seed`, `--input-range`); errors are
rstf.compare's measure against TF Eigen, and `tf-onednn`'s error is the model's TF spread, which every engine's
error is also given relative to (`spread_ratio`). The same graph run by TensorFlow in float64
(rstf.evaluation.exact) is the exact reference: each engine's error against it
(`exact_err`), over the larger of TF Eigen's and TF oneDNN's (`exact_ratio`), says whether
the engine is further from the exact result than stock TensorFlow, which the spread cannot
say where TF's two paths round alike.

Engines:

- `rstf-none`, `rstf-poly`, `rstf-graphite`, `rstf-polly`: the model optimized by rstf with
  that `--optimizer` (each into a temporary folder, through `rstf.pipeline.optimize`), run in
  stock TensorFlow with the op library loaded;
- `tf-eigen`, `tf-onednn`: stock TensorFlow with TF_ENABLE_ONEDNN_OPTS=0 / 1 (a Session on the
  frozen graph, as `rstf compare` runs it); `tf-eigen` is the reference of every ratio and
  error, and always runs. These and the rstf engines are called through TensorFlow's C API
  (rstf.serving.tfclient), as a C++ server calls them;
- `tf-xla`: the frozen graph as a `tf.function(jit_compile=True)`: XLA must compile the whole
  graph (or the engine fails), and the runner reports the size of the HLO module it ran;
- `onnxruntime`: the graph converted by tf2onnx, on ONNX Runtime's CPU provider;
- `openvino`: the frozen graph read by OpenVINO's TensorFlow frontend, compiled for CPU with
  `INFERENCE_PRECISION_HINT=f32` (OpenVINO would otherwise use bf16 where the CPU has it).

The other three are called from their Python APIs: ONNX Runtime's and OpenVINO's are thin
bindings; `tf-xla`'s `tf.function` call costs more Python per call than the others.

Every engine runs in its own process (`python -m rstf.evaluation.runner --engine ...`):
one first call, untimed calls for `timing.WARMUP_S` seconds (the first calls after it still
run slower, each engine by its own margin), then `reps` timed calls; the result keeps every
time, the median, min/max and quartiles. With `rounds` R > 1 the engines take turns: R rounds, each running every engine
once for its share of the `reps` (the order reversed on alternate rounds), and each
engine's times pooled. A shared machine's slow phases last seconds to minutes (a vCPU taken
away halves a 2-core machine's speed): engines run one after the other can land one in
such a phase and another not, and their ratio then says nothing; taking turns spreads the
phases over every engine. An rstf engine's model is optimized once, in the first round.
An engine whose Python package is missing is reported "not installed"; one that
fails (a compile error, a conversion error) is reported "failed" with a one-line reason, and
the bench goes on.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile

import numpy as np

from ..errors import RstfError
from .timing import WARMUP_S

RSTF_OPTIMIZERS = ("none", "poly", "graphite", "polly")
ENGINES = (*(f"rstf-{o}" for o in RSTF_OPTIMIZERS), "tf-eigen", "tf-onednn", "tf-xla",
           "onnxruntime", "openvino")
REFERENCE = "tf-eigen"
LABELS = {"rstf-none": "rstf none", "rstf-poly": "rstf poly", "rstf-graphite": "rstf graphite",
          "rstf-polly": "rstf polly", "tf-eigen": "TF Eigen", "tf-onednn": "TF oneDNN",
          "tf-xla": "TF XLA", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}
# Python packages an engine's process imports (beyond TensorFlow), and how to get them.
PACKAGES = {"onnxruntime": ("onnxruntime", "tf2onnx"), "openvino": ("openvino",)}
INSTALL_HINT = "pip install 'rstf[bench]'"
# Process environment of the TensorFlow-based engines.
TF_ENV = {"tf-eigen": {"TF_ENABLE_ONEDNN_OPTS": "0"}, "tf-onednn": {"TF_ENABLE_ONEDNN_OPTS": "1"}}


def parse_engines(text: str | None) -> tuple[str, ...]:
    """`--engines a,b,c` -> engine names, checked; tf-eigen (the reference) is always added."""
    if not text:
        return ENGINES
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in ENGINES]
    if bad:
        raise RstfError(f"--engines: unknown engine {bad[0]!r}; choose from {', '.join(ENGINES)}")
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
    return tuple(dict.fromkeys(names))


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's guess where there is none);
    does not import TensorFlow."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    return cpu


def machine() -> dict:
    from ..frontend.tfutil import tf

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "tensorflow": tf.__version__}


def bench(models, engines=ENGINES, reps: int = 5, seed: int = 0, input_shapes=None,
          march: str = "native", threads: int = 0, rtol: float = 1e-4, log=None,
          input_range: tuple[float, float] | None = None,
          optimized: dict[str, str] | None = None, rounds: int = 1,
          tuning: str = "auto") -> dict:
    """Run every engine on every model (module docstring), on rstf.evaluation.inputs' random inputs
    (`input_range`: every float input uniform in [LO, HI)), `reps` timed calls each, in
    `rounds` turns of every engine (`reps` rounded up to a multiple of them).
    `optimized` ({engine: DIR}, one model only): an rstf engine whose model is already in
    DIR, written by rstf.pipeline.optimize with that engine's optimizer, `march` and
    `threads`, runs from there rather than optimizing the model again (benchmarks/zoo.py
    has optimized it for its coverage report). `tuning` (rstf-poly): the register tiles
    `rstf optimize --tuning` takes, 'auto' (this machine's profile where `rstf tune` wrote
    one), 'off' or a profile's path. Returns {"machine", "reps", "rounds", "tuning",
    "seed", "rtol", "input_range", "engines", "models": [{"model", "name", "inputs" ({name:
    shape}), "input_values" ({name: how its values were drawn}), "outputs", "tf_spread"
    (tf-onednn's max_rel_err, None when it did not run), "engines": [row]}]}; a row has
    "engine", "label", "status" ("ok", "mismatch": error above `rtol`, "failed",
    "not installed"), "reason", "median_ms", "min_ms", "max_ms", "q1_ms", "q3_ms",
    "times_ms", "ratio_vs_eigen" (time / TF Eigen's), "max_rel_err" (vs TF Eigen, the worst
    output) and "spread_ratio" (max_rel_err / the model's tf_spread; None when either is
    missing, the spread is 0 or a value is not finite), "exact_err" (max_rel_err against the
    float64 run) and "exact_ratio" (exact_err / the model's "tf_exact_err", the larger of TF
    Eigen's and TF oneDNN's), and an rstf-poly row "tuning" (report.json's: the profile its
    tiles came from, None for the model's alone, and how many kernels took a measured
    choice); the model's "exact_unavailable" says why there is no float64
    run, when there is none."""
    from .inputs import parse_input_range

    log = log or (lambda msg: print(f"rstf bench: {msg}", file=sys.stderr))
    if isinstance(models, str):
        models = [models]
    if not models:
        raise RstfError("bench needs at least one model")
    if reps < 1:
        raise RstfError("--reps must be at least 1")
    if not 1 <= rounds <= reps:
        raise RstfError(f"--rounds {rounds}: give 1 to --reps ({reps}) rounds")
    per_round = -(-reps // rounds)
    engines = parse_engines(",".join(engines))
    input_range = parse_input_range(input_range)  # "LO,HI" or a pair, checked
    optimized = optimized or {}
    if "rstf-poly" in engines:  # a bad --tuning profile is one line, before any engine runs
        from ..build.compiler import c_toolchain
        from ..pipeline import poly_target
        poly_target(march, c_toolchain("poly", march, threads).cc, tuning)
    if optimized and len(models) > 1:
        raise RstfError("bench: optimized= names one model's outputs; give one model")
    results = [_bench_model(m, engines, per_round, rounds, seed, input_shapes, march, threads,
                            rtol, log, input_range, optimized, tuning) for m in models]
    return {"machine": machine(), "reps": per_round * rounds, "rounds": rounds,
            "seed": seed, "rtol": rtol, "tuning": tuning,
            "input_range": list(input_range) if input_range else None,
            "engines": list(engines), "models": results}


def rstf_problems(result: dict) -> list[str]:
    """'model: engine status' for every rstf engine row of a `bench` result that is a
    mismatch (error above rtol) or failed: what makes `rstf bench` exit with status 1.
    Other engines' failures (a converter that rejects an op) and engines not installed
    are reported in the table only."""
    return [f"{m['name']}: {row['engine']} {row['status']}"
            for m in result["models"] for row in m["engines"]
            if row["engine"].startswith("rstf-") and row["status"] in ("mismatch", "failed")]


def _bench_model(model, engines, reps, rounds, seed, input_shapes, march, threads, rtol, log,
                 input_range, optimized, tuning="auto") -> dict:
    from .compare import (exact_ratio, graph_fetches, run_exact, spread_ratio,
                          worst_rel_err, write_run_files)
    from ..frontend.graph import load_model
    from .inputs import draw_inputs

    graph = load_model(model, input_shapes)
    feeds, sources = draw_inputs(graph, seed, None, input_range=input_range)
    fetches = graph_fetches(graph)
    name = os.path.basename(os.path.normpath(model)).rsplit(".", 1)[0] or model
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rstf-bench-") as tmp:
        inputs, original = write_run_files(tmp, graph, feeds)
        outputs = {}
        ready = dict(optimized)  # rstf engines' output folders, once optimized
        # The reference first: every other engine is compared with it.
        order = sorted(engines, key=lambda e: e != REFERENCE)
        for turn in range(rounds):
            for engine in order if turn % 2 == 0 else order[::-1]:
                if engine in rows and rows[engine]["status"] != "ok":
                    continue  # failed or missing in an earlier round
                log(f"{name}: {engine}" + (f" (round {turn + 1} of {rounds})"
                                           if rounds > 1 else ""))
                row, outs = _run_engine(engine, model, tmp, original, inputs, fetches, reps,
                                        input_shapes, graph.outputs, march, threads, log,
                                        ready.get(engine), tuning)
                if engine.startswith("rstf-") and os.path.isfile(
                        os.path.join(tmp, engine, "report.json")):
                    ready.setdefault(engine, os.path.join(tmp, engine))
                if engine in rows and row["status"] == "ok":
                    row = _pooled(rows[engine], row)
                rows[engine] = row
                if outs is not None:
                    outputs.setdefault(engine, outs)
                elif engine in outputs:
                    del outputs[engine]
        exact, unavailable = run_exact(graph, feeds, fetches, tmp)
        if unavailable:
            log(f"{name}: float64 reference unavailable: {unavailable}")
    ref = outputs.get(REFERENCE)
    ref_ms = rows[REFERENCE].get("median_ms")
    for engine, row in rows.items():
        if engine not in outputs:
            continue
        if ref_ms and row.get("median_ms") is not None:
            row["ratio_vs_eigen"] = row["median_ms"] / ref_ms
        if ref is not None:
            row["max_rel_err"] = worst_rel_err(ref, outputs[engine])
            if not row["max_rel_err"] <= rtol:
                row["status"] = "mismatch"
                row["reason"] = f"max_rel_err {row['max_rel_err']:.3g} > rtol {rtol:g}"
    spread = rows.get("tf-onednn", {}).get("max_rel_err")
    for engine, row in rows.items():
        row["spread_ratio"] = spread_ratio(row["max_rel_err"], spread)
        if exact is not None and engine in outputs:
            row["exact_err"] = worst_rel_err(exact, outputs[engine])
    tf_exact = [rows[e]["exact_err"] for e in ("tf-eigen", "tf-onednn") if e in rows]
    for row in rows.values():
        row["exact_ratio"] = exact_ratio(row["exact_err"], tf_exact)
    return {"model": os.path.abspath(model), "name": name,
            "inputs": {k.removesuffix(":0"): list(v.shape) for k, v in feeds.items()},
            "input_values": sources, "outputs": fetches, "tf_spread": spread,
            "tf_exact_err": max((e for e in tf_exact if e is not None), default=None),
            "exact_unavailable": unavailable, "engines": [rows[e] for e in engines]}


def _row(engine: str, status: str, reason: str = "") -> dict:
    return {"engine": engine, "label": LABELS[engine], "status": status,
            "reason": " ".join(reason.split())[:240], "median_ms": None, "min_ms": None,
            "max_ms": None, "q1_ms": None, "q3_ms": None, "times_ms": [],
            "ratio_vs_eigen": None, "max_rel_err": None, "spread_ratio": None,
            "exact_err": None, "exact_ratio": None}


def missing_packages(engine: str) -> list[str]:
    return [p for p in PACKAGES.get(engine, ()) if importlib.util.find_spec(p) is None]


def _run_engine(engine, model, tmp, original, inputs, fetches, reps, input_shapes, outputs,
                march, threads, log, optimized_dir=None, tuning="auto"):
    """(row, outputs or None) of one engine; failures become the row's status. An rstf
    engine with `optimized_dir` runs the model optimized there."""
    from .compare import run_engine

    missing = missing_packages(engine)
    if missing:
        return _row(engine, "not installed", f"needs {', '.join(missing)} ({INSTALL_HINT})"), None
    graph_path, libs, env, runtime, detail = original, [], dict(TF_ENV.get(engine, {})), "tf", {}
    try:
        if engine.startswith("rstf-") and optimized_dir:
            graph_path, libs, detail = _optimized_output(optimized_dir)
        elif engine.startswith("rstf-"):
            graph_path, libs, detail = _optimize(engine, model, tmp, input_shapes, outputs,
                                                 march, threads, log, tuning)
        elif engine in ("tf-xla", "onnxruntime", "openvino"):
            runtime = engine
        save = os.path.join(tmp, f"{engine}.npz")
        result = run_engine(engine, graph_path, libs, inputs, fetches, reps, env, save, runtime)
        with np.load(save) as npz:
            outs = [npz[f"out{i}"] for i in range(len(fetches))]
    except _NotInstalled as e:
        return _row(engine, "not installed", str(e)), None
    except RstfError as e:
        return _row(engine, "failed", str(e)), None
    except Exception as e:  # an engine's bug must not stop the bench
        return _row(engine, "failed", f"{type(e).__name__}: {e}"), None
    row = _row(engine, "ok")
    row.update(**detail, **{k: v for k, v in result.items()
                            if k not in ("latency_ms", "times_ms")})
    row.update(_timing(result["times_ms"]))
    return row, outs


def _timing(times_ms: list[float]) -> dict:
    """A row's timing fields from its calls' times, in the order they ran."""
    times = sorted(times_ms)
    if not times:
        return {"median_ms": None, "min_ms": None, "max_ms": None, "q1_ms": None,
                "q3_ms": None, "times_ms": []}
    q = np.percentile(times, [25, 75])
    return {"median_ms": statistics.median(times), "min_ms": times[0], "max_ms": times[-1],
            "q1_ms": float(q[0]), "q3_ms": float(q[1]), "times_ms": list(times_ms)}


def _pooled(first: dict, later: dict) -> dict:
    """An engine's row over its rounds so far: the first round's row, every round's times."""
    return {**first, **_timing(first["times_ms"] + later["times_ms"])}


class _NotInstalled(Exception):
    pass


def _optimize(engine, model, tmp, input_shapes, outputs, march, threads, log,
              tuning="auto"):
    from ..build.compiler import c_toolchain
    from ..pipeline import optimize

    optimizer = engine.removeprefix("rstf-")
    try:
        c_toolchain(optimizer, march, threads)
    except RstfError as e:  # the C optimizer's compiler is missing
        raise _NotInstalled(str(e)) from None
    out = os.path.join(tmp, engine)
    report = optimize(model, out, input_shapes, outputs, march=march, optimizer=optimizer,
                      threads=threads, log=lambda m: log(f"{engine}: {m}"), tuning=tuning)
    return _output_files(out, report)


def _optimized_output(out: str):
    """_optimize's answer for a model optimized earlier into `out` (its report.json)."""
    try:
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise RstfError(f"{out}: not an rstf output folder ({e})") from None
    return _output_files(out, report)


def _output_files(out: str, report: dict):
    """(optimized graph, op libraries, row details) of the optimize output in `out`."""
    libs = [os.path.join(out, report["library"])] if report.get("library") else []
    detail = {"optimize_seconds": report["optimize_seconds"],
              "compiler": f"{report['compiler']['cc']} {' '.join(report['compiler']['c_flags'])}"}
    if report.get("tuning"):  # (rstf-poly's)
        detail["tuning"] = report["tuning"]
    return os.path.join(out, "optimized.pb"), libs, detail


# --------------------------------------------------------------------------- the runtimes
# Each runs in the engine's own process (rstf.evaluation.runner --engine NAME) and returns
# timing.timed's dict, with what shows that the runtime really ran the graph.


def _feeds(inputs_path: str) -> dict[str, np.ndarray]:
    with np.load(inputs_path) as npz:
        return dict(npz)


def _read_graph_def(graph_path: str):
    from ..frontend.tfutil import tf

    gd = tf.compat.v1.GraphDef()
    with open(graph_path, "rb") as f:
        gd.ParseFromString(f.read())
    return gd


def run_xla(graph_path, inputs_path, fetches, reps, save) -> dict:
    """The frozen graph as one `tf.function(jit_compile=True)`: XLA compiles all of it."""
    from .timing import timed
    from ..frontend.tfutil import tf

    gd = _read_graph_def(graph_path)
    feeds = _feeds(inputs_path)
    wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(gd, name=""),
                                         [])
    g = wrapped.graph
    pruned = wrapped.prune([g.get_tensor_by_name(k) for k in feeds],
                           [g.get_tensor_by_name(t) for t in fetches])
    fn = tf.function(lambda *xs: pruned(*xs), jit_compile=True)
    args = [tf.constant(v) for v in feeds.values()]
    hlo = fn.experimental_get_compiler_ir(*args)(stage="hlo")  # fails unless XLA compiles it
    return timed(lambda: [t.numpy() for t in fn(*args)], reps, save,
                 hlo_instructions=sum(1 for ln in hlo.splitlines() if " = " in ln))


def run_onnxruntime(graph_path, inputs_path, fetches, reps, save) -> dict:
    """tf2onnx's conversion of the frozen graph, on ONNX Runtime's CPU provider."""
    import onnxruntime as ort
    import tf2onnx

    from .timing import timed

    feeds = _feeds(inputs_path)
    proto, _ = tf2onnx.convert.from_graph_def(_read_graph_def(graph_path),
                                              input_names=list(feeds), output_names=fetches)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return timed(lambda: sess.run(fetches, feeds), reps, save,
                 version=f"onnxruntime {ort.__version__}, tf2onnx {tf2onnx.__version__}, "
                 f"opset {proto.opset_import[0].version}")


def run_openvino(graph_path, inputs_path, fetches, reps, save) -> dict:
    """OpenVINO's TensorFlow frontend on the frozen graph, CPU, fp32 inference."""
    import openvino as ov

    from .timing import timed

    feeds = _feeds(inputs_path)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(graph_path), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    ports = [compiled.output(t) for t in fetches]

    def call():
        res = request.infer(feeds)
        return [np.array(res[p]) for p in ports]

    return timed(call, reps, save, version=f"openvino {ov.__version__}",
                 precision=compiled.get_property("INFERENCE_PRECISION_HINT").to_string())


RUNTIMES = {"tf-xla": run_xla, "onnxruntime": run_onnxruntime, "openvino": run_openvino}


# --------------------------------------------------------------------------- output


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(result: dict) -> str:
    """The printed table: per model, one row per engine."""
    m = result["machine"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores; TensorFlow {m['tensorflow']}; "
             f"median of {result['reps']} runs after a {WARMUP_S:g} s warm-up"
             f"{_rounds_text(result)}; spread: min-max; errors vs "
             f"TF Eigen (rtol {result['rtol']:g}), err/TF spread: max_rel_err over TF oneDNN's; "
             "f64 err/TF's: error against the float64 run over TF's worse one"]
    for mod in result["models"]:
        exact = (f", TF's error against float64 {_fmt(mod.get('tf_exact_err'), '.2g')}"
                 if not mod.get("exact_unavailable")
                 else f", float64 reference unavailable: {mod['exact_unavailable']}")
        lines += ["", f"{mod['name']} ({_inputs_text(mod)}), TF spread (oneDNN vs Eigen) "
                  f"{_fmt(mod.get('tf_spread'), '.2g')}{exact}",
                  f"  {'engine':<14} {'median ms':>10} {'min-max ms':>17} {'time/Eigen':>10} "
                  f"{'max_rel_err':>11} {'err/TF spread':>13} {'f64 err/TF':>10}  status"]
        for r in mod["engines"]:
            label, *numbers, status = _row_cells(r)
            lines.append(f"  {label:<14} " + " ".join(
                f"{c:>{w}}" for c, w in zip(numbers, (10, 17, 10, 11, 13, 10))) + f"  {status}")
            if r.get("tuning"):
                lines.append(f"  {'':<14} {_tuning_text(r['tuning'])}")
    return "\n".join(lines)


def _tuning_text(tuning: dict) -> str:
    """Where an rstf-poly row's register tiles came from (report.json's "tuning")."""
    if not tuning.get("profile"):
        return f"tiles: the analytic model's, all {tuning['kernels']} kernels"
    return (f"tiles: {tuning['kernels_from_profile']} of {tuning['kernels']} kernels from "
            f"the profile {tuning['profile']}")


def _rounds_text(result: dict) -> str:
    rounds = result.get("rounds", 1)
    return f", the engines taking turns in {rounds} rounds" if rounds > 1 else ""


def _row_cells(r: dict) -> list[str]:
    """An engine row's cells, as both tables show them: engine, median ms, min-max ms,
    time / TF Eigen, max_rel_err, err / TF spread, float64 error / TF's, status."""
    spread = "-" if r["min_ms"] is None else f"{r['min_ms']:.2f}-{r['max_ms']:.2f}"
    ratio = "-" if r["ratio_vs_eigen"] is None else f"{r['ratio_vs_eigen']:.2f}x"
    return [r["label"], _fmt(r["median_ms"], ".2f"), spread, ratio,
            _fmt(r["max_rel_err"], ".2g"), _spread_ratio_text(r), _exact_ratio_text(r),
            r["status"] + (f": {r['reason']}" if r["reason"] else "")]


def _inputs_text(mod: dict) -> str:
    """'input 1x8x8x3 uniform [0, 1), ids 1x16 ids in [0, 2)...': shapes and values."""
    values = mod.get("input_values", {})
    return ", ".join(f"{k} {'x'.join(map(str, v))}" + (f" {values[k]}" if k in values else "")
                     for k, v in mod["inputs"].items())


def _spread_ratio_text(row: dict) -> str:
    """The row's error over the TF spread; '-' without an error, 'n/a' without a ratio."""
    from .compare import format_ratio

    return "-" if row.get("max_rel_err") is None else format_ratio(row.get("spread_ratio"))


def _exact_ratio_text(row: dict) -> str:
    """The row's error against the float64 run over TF's; '-' without one."""
    from .compare import format_ratio

    return "-" if row.get("exact_err") is None else format_ratio(row.get("exact_ratio"))


def markdown_table(result: dict) -> str:
    """The same numbers as a Markdown table (docs/bench.md)."""
    out = ["| model | engine | median ms | min-max ms | time / TF Eigen | max_rel_err | "
           "err / TF spread | float64 err / TF's | status |",
           "|---|---|---|---|---|---|---|---|---|"]
    for mod in result["models"]:
        for r in mod["engines"]:
            *cells, status = _row_cells(r)
            out.append(f"| {mod['name']} | " + " | ".join(cells)
                       + f" | {status.replace('|', '/')} |")
    return "\n".join(out)


COLORS = {"rstf-none": "#9ecae1", "rstf-poly": "#08519c", "rstf-graphite": "#4292c6",
          "rstf-polly": "#6baed6", "tf-eigen": "#e6550d", "tf-onednn": "#fd8d3c",
          "tf-xla": "#fdae6b", "onnxruntime": "#31a354", "openvino": "#756bb1"}


def plot(result: dict, path: str) -> None:
    """A grouped bar chart like the paper's Fig. 4/5: one group per model, one bar per engine
    (median latency, min-max error bars); engines without a number are named at their slot."""
    try:
        import matplotlib
    except ImportError:
        raise RstfError(f"--plot needs matplotlib ({INSTALL_HINT})") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = result["engines"]
    models = result["models"]
    width = 0.8 / len(engines)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(engines) * len(models) + 1.5), 4.8),
                           dpi=100)
    medians = [r["median_ms"] for m in models for r in m["engines"] if r["median_ms"]]
    log_scale = bool(medians) and max(medians) / min(medians) > 20
    top = max(r["max_ms"] for m in models for r in m["engines"] if r["max_ms"]) if medians else 1
    base = min(medians) * 0.6 if log_scale else 0  # where engines without a number are named
    for j, engine in enumerate(engines):
        xs, ys, lo, hi = [], [], [], []
        for i, m in enumerate(models):
            r = next(r for r in m["engines"] if r["engine"] == engine)
            x = i - 0.4 + width * (j + 0.5)
            if r["median_ms"] is None:
                ax.text(x, base, f" {r['status']}",
                        rotation=90, ha="center", va="bottom", fontsize=8, color="#666666")
                continue
            xs.append(x)
            ys.append(r["median_ms"])
            lo.append(r["median_ms"] - r["min_ms"])
            hi.append(r["max_ms"] - r["median_ms"])
        bars = ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=3, label=LABELS[engine],
                      color=COLORS[engine], edgecolor="#333333", linewidth=0.5,
                      error_kw={"elinewidth": 0.8, "ecolor": "#222222"})
        for b, y, h in zip(bars, ys, hi):
            ax.text(b.get_x() + b.get_width() / 2, y + h, f"{y:.0f}" if y >= 100 else
                    f"{y:.3g}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels([m["name"] for m in models], fontsize=10)
    if log_scale:
        ax.set_yscale("log")
        ax.set_ylim(base * 0.8, top * 2)
    else:
        ax.set_ylim(0, top * 1.15)
    ax.set_ylabel(f"latency per inference, ms{', log scale' if log_scale else ''}\n"
                  "(lower is better)")
    mach = result["machine"]
    ax.set_title(f"rstf bench: median of {result['reps']} runs, error bars min-max\n"
                 f"{mach['cpu']}, {mach['cores']} cores, TensorFlow {mach['tensorflow']}",
                 fontsize=10)
    ax.legend(fontsize=8, ncol=min(len(engines), 5), loc="upper center",
              bbox_to_anchor=(0.5, -0.08), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    save_png(fig, path, "--plot")


def save_png(fig, path: str, what: str) -> None:
    """Write matplotlib figure `fig` to `path` as a PNG, atomically (a reader never sees
    half a file), and close it. RstfError, naming `what`, when `path`'s folder is missing."""
    import matplotlib.pyplot as plt

    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        plt.close(fig)
        raise RstfError(f"{what} {path}: no such directory")
    fd, tmp = tempfile.mkstemp(prefix=".rstf-plot-", suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for the temp name only
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
