"""`rstf compare`: the optimized graph against stock TensorFlow, numbers and speed.

Both graphs run on the same seeded random inputs (or the user's `--inputs FILE.npz`). Errors
are measured against stock TensorFlow with Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0), per
output: the max absolute error, and that error relative to the output's largest magnitude.
Latency is the median of `--reps` runs after a warm-up, for the optimized graph and for stock
TensorFlow with Eigen and with oneDNN kernels, each in its own process, each called through
TensorFlow's C API as a C++ server calls it (rstf.tfclient): a Python Session would add its
own per-call interpreter work to all three.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

from .errors import RstfError
from .graph import load_model


def _read_report(out_dir: str) -> dict:
    path = os.path.join(out_dir, "report.json")
    if not os.path.isfile(path):
        raise RstfError(f"{out_dir}: not an rstf output folder (no report.json)")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RstfError(f"{path}: unreadable ({e})") from None


def make_inputs(graph, seed: int, user_inputs: str | None,
                batch: int = 1) -> dict[str, np.ndarray]:
    """Seeded random inputs for every Placeholder, or the user's, checked against the graph.
    An unknown dimension 0 (a dynamic batch) gets `batch` samples."""
    rng = np.random.RandomState(seed)
    provided = {}
    if user_inputs:
        try:
            provided = dict(np.load(user_inputs))
        except (OSError, ValueError) as e:
            raise RstfError(f"--inputs {user_inputs}: cannot read ({e})") from None
    feeds = {}
    for p in graph.placeholders:
        shape, dtype = p.shape(0), p.out_dtypes[0]
        if p.name in provided:
            val = np.asarray(provided[p.name])
            if shape is not None and (len(val.shape) != len(shape) or any(
                    d is not None and d != v for d, v in zip(shape, val.shape))):
                raise RstfError(f"--inputs: {p.name} has shape {list(val.shape)}, the graph "
                                f"expects {list(shape)}")
            feeds[f"{p.name}:0"] = val.astype(dtype)
            continue
        if shape and shape[0] is None:
            shape = (batch, *shape[1:])
        if shape is None or any(d is None for d in shape):
            raise RstfError(f"input {p.name!r} has an unknown shape; pass --inputs FILE.npz")
        if np.issubdtype(dtype, np.floating):
            feeds[f"{p.name}:0"] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[f"{p.name}:0"] = rng.randint(0, 4, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[f"{p.name}:0"] = rng.randint(0, 2, size=shape).astype(bool)
        else:
            raise RstfError(f"input {p.name!r}: cannot generate values of dtype {dtype}")
    return feeds


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


def _run(label: str, graph_path: str, libs: list[str], inputs: str, fetches: list[str],
         reps: int, env_extra: dict[str, str], save: str, engine: str = "tf") -> dict:
    cmd = [sys.executable, "-m", "rstf.runner", "--graph", graph_path, "--inputs", inputs,
           "--reps", str(reps), "--save", save, "--engine", engine]
    for lib in libs:
        cmd += ["--lib", lib]
    for t in fetches:
        cmd += ["--fetch", t]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env_extra}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": proc.stderr.strip()[-500:]}
    if proc.returncode != 0 or "error" in result:
        raise RstfError(f"running the {label} graph failed: {result.get('error', '?')}")
    return result


def compare(model: str, out_dir: str, inputs: str | None = None, rtol: float = 1e-4,
            reps: int = 5, seed: int = 0, latency: bool = True, batch: int = 1) -> dict:
    """Errors against TF with Eigen and latencies (module docstring). With `latency=False`
    only the numbers are checked: two runs instead of three, none timed (the fuzzer)."""
    report = _read_report(out_dir)
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(model, pins, report.get("outputs"))
    feeds = make_inputs(graph, seed, inputs, batch)
    fetches = graph_fetches(graph)
    optimized = os.path.join(out_dir, "optimized.pb")
    libs = [os.path.join(out_dir, report["library"])] if report.get("library") else []
    with tempfile.TemporaryDirectory() as tmp:
        in_path, orig_path = write_run_files(tmp, graph, feeds)
        runs = {}
        configs = [("tf_eigen", orig_path, [], {"TF_ENABLE_ONEDNN_OPTS": "0"}),
                   ("tf_onednn", orig_path, [], {"TF_ENABLE_ONEDNN_OPTS": "1"}),
                   ("rstf", optimized, libs, {})]
        for label, path, lib, env in configs if latency else [configs[0], configs[2]]:
            save = os.path.join(tmp, f"{label}.npz")
            runs[label] = _run(label, path, lib, in_path, fetches, reps if latency else 0,
                               env, save)
            runs[label]["outputs"] = [np.load(save)[f"out{i}"] for i in range(len(fetches))]
    outputs, passed = [], True
    for i, name in enumerate(fetches):
        ref = runs["tf_eigen"]["outputs"][i].astype(np.float64)
        got = runs["rstf"]["outputs"][i].astype(np.float64)
        abs_err, rel_err = _errors(ref, got)
        ok = bool(rel_err <= rtol)
        passed &= ok
        outputs.append({"name": name, "shape": list(ref.shape), "max_abs_err": abs_err,
                        "max_rel_err": rel_err, "passed": ok})
        if "tf_onednn" in runs:
            onednn = runs["tf_onednn"]["outputs"][i].astype(np.float64)
            outputs[-1]["onednn_vs_eigen_rel_err"] = _errors(ref, onednn)[1]
    if not latency:
        return {"passed": passed, "rtol": rtol, "outputs": outputs, "seed": seed}
    lat = {k: runs[k]["latency_ms"] for k in ("rstf", "tf_eigen", "tf_onednn")}
    return {"passed": passed, "rtol": rtol, "outputs": outputs, "latency_ms": lat,
            "reps": reps, "seed": seed, "timed_through": runs["rstf"].get("client"),
            "speedup_vs_eigen": lat["tf_eigen"] / lat["rstf"] if lat["rstf"] else None,
            "speedup_vs_onednn": lat["tf_onednn"] / lat["rstf"] if lat["rstf"] else None}


def _errors(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    if ref.shape != got.shape:
        return float("inf"), float("inf")
    if ref.size == 0:
        return 0.0, 0.0
    diff = np.abs(ref - got)
    if not np.all(np.isfinite(diff) | (np.isnan(ref) & np.isnan(got))):
        return float("inf"), float("inf")
    abs_err = float(np.nanmax(diff))
    scale = float(np.nanmax(np.abs(ref)))
    return abs_err, abs_err / scale if scale > 0 else abs_err


# --------------------------------------------------------------------------- per subgraph


def _custom_op_graph_def(op_type: str, slots, graph, prepacked: dict) -> object:
    """A GraphDef: one node of the custom op, its weights set as the splice sets them, and
    a Placeholder `in<i>` feeding each of its other inputs."""
    from .splice import set_weight_attrs
    from .tfutil import tf

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
                         rtol: float = 1e-4, seed: int = 0) -> dict:
    """Run every custom op alone on the intermediate tensors stock TF (Eigen) computed for
    its inputs, and compare its outputs with TF's. For a subgraph over the tolerance, a
    debug build of its C that exposes every node's output names the first bad node."""
    from .cexec import run_subgraph_c
    from .codegen import generate_subgraph
    from .opgen import get_handler
    from .poly.prepack import as_fed
    from .splice import mark_weights
    from .tfutil import tf

    report = _read_report(out_dir)
    pins = {k: tuple(v) for k, v in report.get("pinned_shapes", {}).items()}
    graph = load_model(model, pins, report.get("outputs"), fold=True,  # what optimize saw
                       fold_scales=report.get("options", {}).get("fold_scales", False))
    feeds = make_inputs(graph, seed, inputs)
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
        _run("reference", gpath, [], in_path, fetches, 0, {"TF_ENABLE_ONEDNN_OPTS": "0"}, save)
        ref_npz = np.load(save)
        ref = {t: ref_npz[f"out{i}"] for i, t in enumerate(fetches)}

    def value(t):
        return ref[t] if t in ref else graph.const_value(t)

    lib_path = os.path.join(out_dir, report["library"]) if report.get("library") else None
    if lib_path:
        from .serving import load_library

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
            abs_err, rel_err = _errors(ref[s.tensor].astype(np.float64), v.astype(np.float64))
            outs.append({"name": s.tensor, "max_abs_err": abs_err, "max_rel_err": rel_err})
        worst = max((o["max_rel_err"] for o in outs), default=0.0)
        item = {"name": entry["name"], "op_type": entry["op_type"], "nodes": len(sg.nodes),
                "max_rel_err": worst, "passed": bool(worst <= rtol), "outputs": outs}
        if not item["passed"]:
            item["first_bad_node"] = _first_bad_node(graph, sg, value, rtol, run_subgraph_c,
                                                     generate_subgraph)
            if first_failure is None:
                first_failure = {"subgraph": entry["name"], **(item["first_bad_node"] or {})}
        results.append(item)
    return {"passed": first_failure is None, "rtol": rtol, "subgraphs": results,
            "first_failure": first_failure}


def _first_bad_node(graph, sg, value, rtol, run_subgraph_c, generate_subgraph):
    """Debug build exposing every node's outputs; the first node (topological order) whose
    output differs from TF's by more than `rtol` is where the error starts."""
    debug = generate_subgraph(graph, sg.nodes, sg.index, expose_all=True)
    outs = run_subgraph_c(debug, {s.tensor: value(s.tensor) for s in debug.inputs})
    for n in sg.nodes:
        for t, v in outs.items():
            if t.rpartition(":")[0] != n:
                continue
            abs_err, rel_err = _errors(value(t).astype(np.float64), v.astype(np.float64))
            if not rel_err <= rtol:
                return {"node": n, "op": graph.nodes[n].op, "tensor": t,
                        "max_abs_err": abs_err, "max_rel_err": rel_err}
    return None


class _CallableModule(types.ModuleType):
    """This module is also the API function: `rstf.compare(model, out_dir_or_result, ...)`
    calls `rstf.api.compare` (once imported, a submodule shadows a package attribute of its
    name, so the module itself has to be callable)."""

    def __call__(self, *args, **kwargs):
        from .api import compare as api_compare

        return api_compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
