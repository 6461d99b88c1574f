"""`rstf compare`: the optimized graph against stock TensorFlow, numbers and speed.

Both graphs run on the same inputs: seeded random values shaped like real ones, or the
user's `--inputs FILE.npz` (rstf.evaluation.inputs). Errors are measured per output against stock
TensorFlow with Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0), the reference:

- `max_abs_err`: max |rstf - Eigen| over the output's elements;
- `max_rel_err`: max_abs_err / max |Eigen|, the error relative to the output's largest
  magnitude (an image model's largest logit); max_abs_err itself when that is 0. `--rtol`
  is the pass line on it;
- `tf_spread`: how far TensorFlow's own CPU paths are apart on the same inputs: the same
  measure, against Eigen, for stock TensorFlow with oneDNN kernels and for TF Eigen with
  Grappler off (each node run as it is in the graph, no fused kernels), the larger of the
  two (`tf_spread_of` gives both). On an ill-conditioned model the fused and unfused Eigen
  paths differ by far more than the two backends do (MobileNetV3Small at 96x96: 4.7e-4
  against 3.2e-6), and an engine that fuses less than Grappler, as rstf's C does, is judged
  against the first;
- `spread_ratio`: max_rel_err / tf_spread, a figure free of the outputs' scale; None where
  the spread is 0 (TF's paths agree bit for bit) or a value is not finite;
- `exact_err_of`: {rstf, tf_eigen, tf_onednn: max_rel_err against the same graph run in
  float64} (rstf.evaluation.exact, `run_exact`), and `exact_ratio`: rstf's over the
  larger of TF's two, at most 1.0 where rstf is no further from the exact result than
  stock TensorFlow. TF's two paths often round alike, so the spread alone can call an
  engine that only sums in another order many times "outside" it. Where TensorFlow cannot
  run the graph in float64, both are absent and `exact_unavailable` says why.

Latency is the median of `--reps` runs after a warm-up (`timing.WARMUP_S`), for the
optimized graph and for stock TensorFlow with Eigen and with oneDNN kernels, each in its own process, each called through
TensorFlow's C API as a C++ server calls it (rstf.serving.tfclient): a Python Session would add its
own per-call interpreter work to all three.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile

import numpy as np

from ..errors import RstfError
from ..frontend.graph import load_model
from .exact import widen_feeds, widen_graph_def
from .inputs import draw_inputs, make_inputs  # noqa: F401  (make_inputs: benchmarks/)

# The environments of the two stock TensorFlow configurations.
EIGEN_ENV = {"TF_ENABLE_ONEDNN_OPTS": "0"}
ONEDNN_ENV = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def _read_report(out_dir: str) -> dict:
    path = os.path.join(out_dir, "report.json")
    if not os.path.isfile(path):
        raise RstfError(f"{out_dir}: not an rstf output folder (no report.json)")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RstfError(f"{path}: unreadable ({e})") from None


def spread_ratio(err: float | None, spread: float | None) -> float | None:
    """An error over TensorFlow's oneDNN-vs-Eigen spread on the same inputs (module
    docstring); None where it has no meaning: no spread measured, a spread of 0, or a value
    that is not finite (an error of inf already says what there is to say)."""
    if err is None or spread is None or not (math.isfinite(err) and math.isfinite(spread)):
        return None
    return err / spread if spread > 0 else None


def format_ratio(ratio: float | None) -> str:
    """'0.05x', '1.2x', '14x', '140x'; 'n/a' for None."""
    if ratio is None:
        return "n/a"
    if ratio >= 10:
        return f"{ratio:.0f}x"
    return f"{ratio:.1f}x" if ratio >= 0.1 else f"{ratio:.1g}x"


def graph_fetches(graph) -> list[str]:
    """Every output tensor of the graph's output nodes."""
    return [f"{o}:{i}" for o in graph.outputs for i in range(len(graph.nodes[o].out_shapes))]


def write_run_files(tmp: str, graph, feeds: dict) -> tuple[str, str]:
    """The inputs (.npz) and the frozen GraphDef (.pb) the runner processes read, in `tmp`;
    the original model may be a SavedModel or a text graph."""
    in_path = os.path.join(tmp, "inputs.npz")
    np.savez(in_path, **feeds)
    orig_path = os.path.join(tmp, "original.pb")
    with open(orig_path, "wb") as f:
        f.write(graph.graph_def.SerializeToString())
    return in_path, orig_path


# TensorFlow's and absl's start-up chatter, which fills a crashed runner's stderr.
_LOG_NOISE = re.compile(r"^\s*$|^[IWE]\d{4} |^WARNING: All log messages before absl|"
                        r"oneDNN custom operations are on|TF_ENABLE_ONEDNN_OPTS|"
                        r"^To enable the following instructions|rebuild TensorFlow with")


def runner_failure(proc) -> str:
    """Why a runner process gave no result: how it ended (an exit status, or the signal
    that killed it) and the last lines of its stderr that are not start-up chatter."""
    how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
           else f"exit status {proc.returncode}")
    if proc.returncode == -signal.SIGKILL:
        # What Linux's out-of-memory killer sends, and what a user meets first: tf2onnx's
        # conversion of a BERT-base graph alone peaks at about 20 GB.
        how += " (as the system does when memory runs out)"
    lines = [ln.strip() for ln in proc.stderr.splitlines() if not _LOG_NOISE.search(ln)]
    tail = " ".join(lines[-3:])[-400:]
    return f"{how}: {tail}" if tail else how


def run_engine(label: str, graph_path: str, libs: list[str], inputs: str, fetches: list[str],
               reps: int, env_extra: dict[str, str], save: str, engine: str = "tf",
               rewrites: bool = True) -> dict:
    cmd = [sys.executable, "-m", "rstf.evaluation.runner", "--graph", graph_path,
           "--inputs", inputs, "--reps", str(reps), "--save", save, "--engine", engine,
           *([] if rewrites else ["--no-rewrites"])]
    for lib in libs:
        cmd += ["--lib", lib]
    for t in fetches:
        cmd += ["--fetch", t]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env_extra}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": runner_failure(proc)}
    if proc.returncode != 0 or "error" in result:
        raise RstfError(f"running the {label} graph failed: {result.get('error', '?')}")
    return result


def run_exact(graph, feeds: dict, fetches: list[str], tmp: str):
    """(outputs, None): the fetches of `graph` (an rstf.frontend.graph.Graph) widened to
    float64 (rstf.evaluation.exact), run by stock TensorFlow with Eigen kernels and
    Grappler off (each node as the graph has it) on the widened `feeds`; or (None, reason)
    where TensorFlow cannot run the widened graph. Files go to `tmp`."""
    from ..frontend import graph as graph_mod

    wide = widen_graph_def(graph.graph_def)
    size = wide.ByteSize()
    if size >= graph_mod.PROTOBUF_LIMIT:  # written, it would not parse again
        return None, (f"the float64 graph is {size / 2**30:.1f} GiB, over protobuf's 2 GiB "
                      f"limit for one GraphDef")
    path = os.path.join(tmp, "exact.pb")
    with open(path, "wb") as f:
        f.write(wide.SerializeToString())
    del wide
    inputs = os.path.join(tmp, "exact_inputs.npz")
    np.savez(inputs, **widen_feeds(feeds))
    save = os.path.join(tmp, "exact.npz")
    try:
        run_engine("float64", path, [], inputs, fetches, 0, EIGEN_ENV, save, rewrites=False)
    except RstfError as e:
        return None, str(e)
    with np.load(save) as npz:
        return [npz[f"out{i}"].astype(np.float64) for i in range(len(fetches))], None


def worst_rel_err(refs: list, outputs: list) -> float:
    """An engine's worst max_rel_err over the outputs, against the reference outputs
    `refs` (TF Eigen's, or the float64 run's)."""
    return max((output_errors(np.asarray(r, dtype=np.float64),
                              np.asarray(o, dtype=np.float64))[1]
                for r, o in zip(refs, outputs)), default=0.0)


def exact_ratio(err: float | None, tf_errs: list) -> float | None:
    """`err` over the largest of TensorFlow's own errors against the exact result (its
    paths that ran); None where either is missing, that error is 0 or a value is not
    finite."""
    tf_errs = [e for e in tf_errs if e is not None]
    return spread_ratio(err, max(tf_errs)) if tf_errs else None


def compare(model: str, out_dir: str, inputs: str | None = None, rtol: float = 1e-4,
            reps: int = 5, seed: int = 0, latency: bool = True, batch: int = 1,
            input_range: tuple[float, float] | None = None, warn=None) -> dict:
    """Errors against TF with Eigen, TF's own spread, and latencies (module docstring), on
    the inputs of `rstf.evaluation.inputs.draw_inputs` (`inputs`: the user's .npz;
    `input_range`: every random float input uniform in [LO, HI); `warn`: receives the warnings, default stderr).
    With `latency=False` only the numbers are checked: two runs instead of three, none
    timed, and no TF spread (the fuzzer); `tf_spread` and `spread_ratio` are then None."""
    report = _read_report(out_dir)
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(model, pins, report.get("outputs"))
    feeds, sources = draw_inputs(graph, seed, inputs, batch, input_range, warn)
    fetches = graph_fetches(graph)
    optimized = os.path.join(out_dir, "optimized.pb")
    libs = [os.path.join(out_dir, report["library"])] if report.get("library") else []
    with tempfile.TemporaryDirectory() as tmp:
        in_path, orig_path = write_run_files(tmp, graph, feeds)
        runs = {}
        configs = [("tf_eigen", orig_path, [], EIGEN_ENV, True),
                   ("tf_onednn", orig_path, [], ONEDNN_ENV, True),
                   ("rstf", optimized, libs, {}, True),
                   ("tf_eigen_plain", orig_path, [], EIGEN_ENV, False)]
        for label, path, lib, env, rewrites in configs if latency else [configs[0], configs[2]]:
            save = os.path.join(tmp, f"{label}.npz")
            timed = latency and rewrites  # the Grappler-off run gives numbers only
            runs[label] = run_engine(label, path, lib, in_path, fetches,
                                     reps if timed else 0, env, save, rewrites=rewrites)
            runs[label]["outputs"] = [np.load(save)[f"out{i}"] for i in range(len(fetches))]
        exact, unavailable = run_exact(graph, feeds, fetches, tmp) if latency else (None, None)
    outputs, passed = [], True
    for i, name in enumerate(fetches):
        ref = runs["tf_eigen"]["outputs"][i].astype(np.float64)
        got = runs["rstf"]["outputs"][i].astype(np.float64)
        abs_err, rel_err = output_errors(ref, got)
        ok = bool(rel_err <= rtol)
        passed &= ok
        spread = parts = None
        if "tf_onednn" in runs:
            parts = {k: output_errors(ref, runs[run]["outputs"][i].astype(np.float64))[1]
                     for k, run in (("onednn", "tf_onednn"), ("grappler_off", "tf_eigen_plain"))}
            spread = max(parts.values())
        out = {"name": name, "shape": list(ref.shape), "max_abs_err": abs_err,
               "max_rel_err": rel_err, "tf_spread": spread, "tf_spread_of": parts,
               "spread_ratio": spread_ratio(rel_err, spread), "passed": ok}
        if exact is not None:
            of = {k: output_errors(exact[i], runs[k]["outputs"][i].astype(np.float64))[1]
                  for k in ("rstf", "tf_eigen", "tf_onednn")}
            out.update(exact_err_of=of,
                       exact_ratio=exact_ratio(of["rstf"], [of["tf_eigen"], of["tf_onednn"]]))
        outputs.append(out)
    result = {"passed": passed, "rtol": rtol, "outputs": outputs, "seed": seed,
              "inputs": _shapes(feeds),
              "input_values": sources}
    if not latency:
        return result
    result["exact_unavailable"] = unavailable
    lat = {k: runs[k]["latency_ms"] for k in ("rstf", "tf_eigen", "tf_onednn")}
    return {**result, "latency_ms": lat, "reps": reps,
            "timed_through": runs["rstf"].get("client"),
            "speedup_vs_eigen": lat["tf_eigen"] / lat["rstf"] if lat["rstf"] else None,
            "speedup_vs_onednn": lat["tf_onednn"] / lat["rstf"] if lat["rstf"] else None}


def _shapes(feeds: dict) -> dict[str, list]:
    """{input name: shape} of the feeds, as the JSON results give them."""
    return {k.removesuffix(":0"): list(v.shape) for k, v in feeds.items()}


def output_errors(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(max_abs_err, max_rel_err) of `got` against the reference `ref` (module docstring),
    relative to `ref`'s largest finite magnitude; equal values (the same infinity, NaN in
    both) differ by nothing; (inf, inf) for a shape mismatch or any other non-finite
    difference."""
    if ref.shape != got.shape:
        return float("inf"), float("inf")
    if ref.size == 0:
        return 0.0, 0.0
    with np.errstate(invalid="ignore"):  # inf - inf: decided by `same` below
        diff = np.abs(ref - got)
    same = (ref == got) | (np.isnan(ref) & np.isnan(got))
    diff = np.where(same, 0, diff)
    if not np.all(np.isfinite(diff)):
        return float("inf"), float("inf")
    abs_err = float(diff.max())
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    return abs_err, abs_err / scale if scale > 0 else abs_err


# --------------------------------------------------------------------------- per subgraph


def _custom_op_graph_def(op_type: str, slots, graph, prepacked: dict) -> object:
    """A GraphDef: one node of the custom op, its weights set as the splice sets them, and
    a Placeholder `in<i>` feeding each of its other inputs."""
    from ..build.splice import set_weight_attrs
    from ..frontend.tfutil import tf

    gd = tf.compat.v1.GraphDef()
    fed = [s for s in slots if not s.weight]
    for i, s in enumerate(fed):
        p = gd.node.add()
        p.name = f"in{i}"
        p.op = "Placeholder"
        p.attr["dtype"].type = tf.as_dtype(s.dtype).as_datatype_enum
        p.attr["shape"].shape.CopyFrom(tf.TensorShape(s.shape).as_proto())
    n = gd.node.add()
    n.name = "op"
    n.op = op_type
    n.input.extend(f"in{i}" for i in range(len(fed)))
    set_weight_attrs(n, graph, slots, prepacked)
    return gd


def compare_per_subgraph(model: str, out_dir: str, inputs: str | None = None,
                         rtol: float = 1e-4, seed: int = 0,
                         input_range: tuple[float, float] | None = None, warn=None) -> dict:
    """Run every custom op alone on the intermediate tensors stock TF (Eigen) computed for
    its inputs, and compare its outputs with TF's (the errors of `compare`, per subgraph
    output and the worst per subgraph). The TF spread of a subgraph is stock TF with oneDNN
    on the subgraph's original nodes, fed those same intermediate tensors, against Eigen.
    For a subgraph over the tolerance, a debug build of its C that exposes every node's
    output names the first bad node. `inputs`, `input_range`, `warn`: as for `compare`."""
    from ..build.cexec import run_subgraph_c
    from ..cgen.codegen import generate_subgraph
    from ..opgen import get_handler
    from ..poly.prepack import as_fed
    from ..build.splice import mark_weights
    from ..frontend.tfutil import tf

    report = _read_report(out_dir)
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(model, pins, report.get("outputs"), fold=True,  # what optimize saw
                       fold_scales=report.get("options", {}).get("fold_scales", False))
    feeds, sources = draw_inputs(graph, seed, inputs, 1, input_range, warn)
    codes = []
    for i, entry in enumerate(report["subgraphs"]):
        missing = [n for n in entry["nodes"] if n not in graph.nodes]
        if missing:
            raise RstfError(f"{out_dir} does not match {model}: node {missing[0]!r} of "
                            f"{entry['name']} is not in the model")
        codes.append(generate_subgraph(graph, entry["nodes"], i))
    # Everything the check reads: each subgraph's inputs and each member's outputs.
    fetches = []
    for sg in codes:
        fetches += [s.tensor for s in sg.inputs if not graph.is_const(s.tensor)]
        for n in sg.nodes:
            k = get_handler(graph.nodes[n].op).num_outputs(graph.nodes[n])
            fetches += [f"{n}:{j}" for j in range(k)]
    fetches = list(dict.fromkeys(fetches))
    with tempfile.TemporaryDirectory() as tmp:
        in_path, gpath, save = (os.path.join(tmp, f) for f in ("in.npz", "g.pb", "ref.npz"))
        np.savez(in_path, **feeds)
        with open(gpath, "wb") as f:
            f.write(graph.graph_def.SerializeToString())
        run_engine("reference", gpath, [], in_path, fetches, 0, EIGEN_ENV, save)
        with np.load(save) as ref_npz:
            ref = {t: ref_npz[f"out{i}"] for i, t in enumerate(fetches)}
        onednn = _onednn_per_subgraph(graph, codes, ref, tmp)

    def value(t):
        return ref[t] if t in ref else graph.const_value(t)

    lib_path = os.path.join(out_dir, report["library"]) if report.get("library") else None
    if lib_path:
        from ..serving import load_library

        load_library(lib_path)
    results, first_failure = [], None
    for sg, entry in zip(codes, report["subgraphs"]):
        # Weights the op reads in panel layout (or as Winograd's U, another shape) are fed
        # as the splice stores them.
        panels = entry.get("poly", {}).get("prepacked", {})
        mark_weights(graph, [sg])
        slots = as_fed(sg.inputs, panels)
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(
                _custom_op_graph_def(entry["op_type"], slots, graph, panels), name="")
        feed = {f"in{i}:0": value(s.tensor)
                for i, s in enumerate(s for s in sg.inputs if not s.weight)}
        with tf.compat.v1.Session(graph=g) as sess:
            got = sess.run([f"op:{j}" for j in range(len(sg.outputs))], feed)
        outs = []
        for s, v in zip(sg.outputs, got):
            r = ref[s.tensor].astype(np.float64)
            abs_err, rel_err = output_errors(r, v.astype(np.float64))
            spread = output_errors(r, onednn[s.tensor].astype(np.float64))[1]
            outs.append({"name": s.tensor, "max_abs_err": abs_err, "max_rel_err": rel_err,
                         "tf_spread": spread, "spread_ratio": spread_ratio(rel_err, spread)})
        worst = max((o["max_rel_err"] for o in outs), default=0.0)
        spread = max((o["tf_spread"] for o in outs), default=0.0)
        item = {"name": entry["name"], "op_type": entry["op_type"], "nodes": len(sg.nodes),
                "max_rel_err": worst, "tf_spread": spread,
                "spread_ratio": spread_ratio(worst, spread), "passed": bool(worst <= rtol),
                "outputs": outs}
        if not item["passed"]:
            item["first_bad_node"] = _first_bad_node(graph, sg, value, rtol, run_subgraph_c,
                                                     generate_subgraph)
            if first_failure is None:
                first_failure = {"subgraph": entry["name"], **(item["first_bad_node"] or {})}
        results.append(item)
    return {"passed": first_failure is None, "rtol": rtol, "subgraphs": results,
            "first_failure": first_failure, "seed": seed,
            "inputs": _shapes(feeds),
            "input_values": sources}


def _onednn_per_subgraph(graph, codes, ref: dict, tmp: str) -> dict:
    """{subgraph output tensor: its value from stock TF with oneDNN}, each subgraph's nodes
    fed its inputs' values in `ref` (Eigen's), as its custom op is fed. Subgraphs share a
    run unless one's output is another's input: a fed tensor that is fetched returns the
    fed value instead of being computed."""
    rounds: list[tuple[set, set]] = []  # (fed tensors, fetched tensors) of one run
    for sg in codes:
        fed = {s.tensor for s in sg.inputs if not graph.is_const(s.tensor)}
        fetched = {s.tensor for s in sg.outputs}
        for r_fed, r_fetched in rounds:
            if not (fed & r_fetched or fetched & r_fed):
                r_fed |= fed
                r_fetched |= fetched
                break
        else:
            rounds.append((fed, fetched))
    values = {}
    for k, (fed, fetched) in enumerate(rounds):
        in_path, save, cut_path = (os.path.join(tmp, f"onednn{k}.{x}")
                                   for x in ("in.npz", "out.npz", "pb"))
        cut, names = fed_as_placeholders(graph.graph_def, {t: ref[t] for t in fed})
        with open(cut_path, "wb") as f:
            f.write(cut.SerializeToString())
        np.savez(in_path, **{names[t]: ref[t] for t in sorted(fed)})
        fetch = sorted(fetched)
        run_engine("TF oneDNN", cut_path, [], in_path, fetch, 0, ONEDNN_ENV, save)
        with np.load(save) as npz:
            values.update((t, npz[f"out{i}"]) for i, t in enumerate(fetch))
    return values


def fed_as_placeholders(graph_def, values: dict) -> tuple[object, dict[str, str]]:
    """A copy of `graph_def` in which every data input reading a tensor of `values`
    ("node:k" -> array) reads a new Placeholder of that value's dtype and shape instead:
    (the copy, {tensor: the Placeholder's tensor name}). Why not feed the tensors themselves:
    with oneDNN on, TF's graph rewrites fuse a node with its consumers (a Conv2D with the
    add after it) even when the node's output is fed, and the run then fails to find it."""
    from ..frontend.names import fresh_name, split_tensor, tensor_name
    from ..frontend.tfutil import tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    taken = {n.name for n in out.node}
    names: dict[str, str] = {}
    for i, (t, v) in enumerate(sorted(values.items())):
        name = fresh_name(taken, f"rstf_fed_{i}")
        taken.add(name)
        p = out.node.add(name=name, op="Placeholder")
        p.attr["dtype"].type = tf.as_dtype(np.asarray(v).dtype).as_datatype_enum
        p.attr["shape"].shape.CopyFrom(tf.TensorShape(np.shape(v)).as_proto())
        names[t] = tensor_name(name, 0)
    for n in out.node:
        for j, inp in enumerate(n.input):
            if not inp.startswith("^") and tensor_name(*split_tensor(inp)) in names:
                n.input[j] = names[tensor_name(*split_tensor(inp))]
    return out, names


def _first_bad_node(graph, sg, value, rtol, run_subgraph_c, generate_subgraph):
    """Debug build exposing every node's outputs; the first node (topological order) whose
    output differs from TF's by more than `rtol` is where the error starts."""
    debug = generate_subgraph(graph, sg.nodes, sg.index, expose_all=True)
    outs = run_subgraph_c(debug, {s.tensor: value(s.tensor) for s in debug.inputs})
    for n in sg.nodes:
        for t, v in outs.items():
            if t.rpartition(":")[0] != n:
                continue
            abs_err, rel_err = output_errors(value(t).astype(np.float64), v.astype(np.float64))
            if not rel_err <= rtol:
                return {"node": n, "op": graph.nodes[n].op, "tensor": t,
                        "max_abs_err": abs_err, "max_rel_err": rel_err}
    return None


def compare_model(model, out_dir, inputs: str | None = None, rtol: float = 1e-4,
                  reps: int = 5, seed: int = 0, per_subgraph: bool = False, batch: int = 1,
                  input_range=None, warn=None) -> dict:
    """`rstf.api.compare` (whose docstring says what it returns): `model` a path or a
    GraphDef, `out_dir` the output folder or an `OptimizeResult`."""
    from .inputs import parse_input_range
    from ..frontend.modelpath import model_path

    out_dir = getattr(out_dir, "output_dir", out_dir)  # an api.OptimizeResult
    if reps < 1:
        raise RstfError("--reps must be at least 1")
    if batch < 1:
        raise RstfError("--batch must be at least 1")
    input_range = parse_input_range(input_range)
    with model_path(model) as path:
        if per_subgraph:
            return compare_per_subgraph(path, out_dir, inputs, rtol, seed, input_range, warn)
        return compare(path, out_dir, inputs, rtol, reps, seed, batch=batch,
                       input_range=input_range, warn=warn)
