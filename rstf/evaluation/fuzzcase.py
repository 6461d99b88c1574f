"""One differential-fuzzing case: a graph, its inputs and the options it is optimized with,
checked against stock TensorFlow, and saved as a regression file when it fails.

Contract:
- `CONFIGS` names the optimizer settings a campaign draws from: `poly` (with
  `--winograd on`), `poly-nowinograd` (rstf's default), `none`, `graphite`, `polly`; `available_configs`
  keeps those whose compiler is installed (`build.c_toolchain` raises otherwise).
- `check(graph_def, feeds, options, work_dir)` optimizes the graph with `options` and compares
  it with TensorFlow on `feeds` (or, with None, compare's own seeded inputs); returns a
  `Verdict`. Errors of rstf itself (RstfError, or any exception) propagate: the caller
  decides whether that is a failure (the campaign) or an error (pytest).
- `check_kernels(graph_def, feeds, options)` is the quick check a campaign runs on most
  examples: the pipeline's own stages up to the C (load with its folds, select, partition,
  generate, the polyhedral pass, weights prepacked as the splice stores them), each
  subgraph's C compiled alone and run through ctypes (`cexec`) on the intermediate tensors
  stock TensorFlow computed for its inputs, its outputs compared with TensorFlow's at
  `options.rtol`; the folded graph's outputs are compared with the original's as well.
  For `poly` it loads with batch norm's scales folded (`--fold-scales on`, opt-in), where
  `check` runs `optimize`'s default (off): a campaign fuzzes both. It
  skips what `check` alone covers (the C++ wrapper, the splice, the op library's build),
  and costs a compiler run instead of a TensorFlow op build.
- Both raise `TensorFlowFails` when stock TensorFlow cannot run the model itself: no
  reference, so neither a pass nor an rstf failure (a campaign counts them apart).
- `save_regression` writes `<hash>-maxops<N>.pbtxt` (the GraphDef, as text) and beside it
  `<hash>-maxops<N>.json` (the options and the inputs' seed: everything `replay` needs);
  `replay(path, work_dir)` checks such a file again. A .pbtxt without a .json (the first
  format) replays as it always did: poly with Winograd, its max_ops from the name,
  compare's inputs.

The tolerance is compare's (1e-4 of each output's largest magnitude) for every optimizer,
Winograd included: its error is 1e-6 to 1e-5 of a conv's outputs per layer, so the few
layers of a fuzzed graph stay well inside, and a Winograd conv that errs by more is a bug to
look at, not noise. (Through a whole deep network those errors grow to several times
TensorFlow's own spread: why `--winograd` is off by default.)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np

from ..errors import RstfError

# name -> (optimizer, winograd)
CONFIGS = {"poly": ("poly", True), "poly-nowinograd": ("poly", False), "none": ("none", False),
           "graphite": ("graphite", False), "polly": ("polly", False)}
DEFAULT_RTOL = 1e-4  # compare's


@dataclasses.dataclass(frozen=True)
class Options:
    max_ops: int = 400
    optimizer: str = "poly"
    winograd: bool = True
    rtol: float = DEFAULT_RTOL

    @classmethod
    def of(cls, config: str, max_ops: int, rtol: float = DEFAULT_RTOL) -> Options:
        optimizer, winograd = CONFIGS[config]
        return cls(max_ops, optimizer, winograd, rtol)


@dataclasses.dataclass
class Verdict:
    passed: bool
    why: str  # what failed, "" when passed
    max_rel_err: float
    winograd: list  # nodes run as Winograd convolutions (report.json's poly.winograd)
    report: dict
    result: dict  # compare's


def available_configs(names=tuple(CONFIGS)) -> list[str]:
    """The configs of `names` whose compiler is installed."""
    from ..build.compiler import c_toolchain

    out = []
    for name in names:
        try:
            c_toolchain(CONFIGS[name][0])
        except RstfError:
            continue
        out.append(name)
    return out


def check(graph_def, feeds: dict | None, options: Options, work_dir: str,
          jobs: int | None = None) -> Verdict:
    """Optimize into `work_dir` and compare with TensorFlow (module docstring). `jobs`:
    optimize's (a campaign runs one example per process, so 1 there)."""
    from .compare import compare
    from ..pipeline import optimize

    model = os.path.join(work_dir, "fuzz.pb")
    with open(model, "wb") as f:
        f.write(graph_def.SerializeToString())
    inputs = None
    if feeds is not None:
        inputs = os.path.join(work_dir, "inputs.npz")
        np.savez(inputs, **feeds)
    out = os.path.join(work_dir, "fuzz.rstf")
    report = optimize(model, out, max_ops=options.max_ops, force=True, log=lambda m: None,
                      optimizer=options.optimizer, winograd=options.winograd, jobs=jobs,
                      verbosity=0)
    try:
        result = compare(model, out, inputs=inputs, rtol=options.rtol, latency=False)
    except RstfError as e:
        if str(e).startswith("running the tf_eigen graph failed"):
            raise TensorFlowFails(str(e)) from None
        raise
    problems = [f"{o['name']} differs from TensorFlow (max rel err {o['max_rel_err']:.3g} > "
                f"rtol {options.rtol:g})" for o in result["outputs"] if not o["passed"]]
    problems += [f"{sg['name']} has {len(sg['nodes'])} nodes > max_ops {options.max_ops}"
                 for sg in report["subgraphs"] if len(sg["nodes"]) > options.max_ops]
    winograd = [w["node"] for sg in report["subgraphs"]
                for w in (sg.get("poly") or {}).get("winograd", [])]
    worst = max((o["max_rel_err"] for o in result["outputs"]), default=0.0)
    return Verdict(not problems, "; ".join(problems), worst, winograd, report, result)


def check_kernels(graph_def, feeds: dict, options: Options, toolchain=None) -> Verdict:
    """The quick check (module docstring). `feeds`: a value for every Placeholder. Runs TF
    in this process: set TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow is imported for an
    Eigen reference. `toolchain`: `build.c_toolchain(options.optimizer)` (looked up when
    None)."""
    from ..build.compiler import c_toolchain
    from ..build.cexec import run_subgraph_c
    from ..cgen.codegen import generate_subgraph
    from .compare import output_errors, graph_fetches
    from ..frontend.graph import load_model
    from ..frontend.modelpath import model_path
    from ..pipeline import apply_poly, select_parts
    from ..build.splice import mark_weights, weight_value

    toolchain = toolchain or c_toolchain(options.optimizer)
    with model_path(graph_def, "fuzz") as model:
        graph = load_model(model, fold=True, fold_scales=options.optimizer == "poly")
    parts, _ = select_parts(graph, options.max_ops, lambda m: None)
    codes = [generate_subgraph(graph, nodes, i) for i, nodes in enumerate(parts)]
    problems = [f"subgraph {i} has {len(p)} nodes > max_ops {options.max_ops}"
                for i, p in enumerate(parts) if len(p) > options.max_ops]
    infos = [{} for _ in codes]
    if options.optimizer == "poly":
        from ..poly import optimize
        from ..poly.target import detect

        vec = detect("native", toolchain.cc).name
        infos = [apply_poly(sg, optimize(
            sg.source, sg.entry, True, True,
            frozenset(s.cname for s in sg.inputs if graph.is_const(s.tensor)),
            options.winograd, vec), lambda m: None) for sg in codes]
    mark_weights(graph, codes)
    outputs = graph_fetches(graph)
    fetches = list(dict.fromkeys(
        [s.tensor for sg in codes for s in sg.inputs + sg.outputs if not s.weight]))
    # The model first: when stock TensorFlow cannot run it (TensorFlowFails), the example
    # is skipped before the loaded graph's run fails the same way as if rstf were wrong.
    original = _tf_run(graph_def, feeds, outputs, reference=True)
    ref = _tf_run(graph.graph_def, feeds, fetches + outputs)
    worst = 0.0
    for t in outputs:  # the folds (constants, batch norm's scales) keep the graph's value
        err = output_errors(original[t].astype(np.float64), ref[t].astype(np.float64))[1]
        worst = max(worst, err)
        if not err <= options.rtol:
            problems.append(f"the folded graph's {t} differs from the model's "
                            f"(max rel err {err:.3g} > rtol {options.rtol:g})")
    for sg, info in zip(codes, infos):
        specs = info.get("prepacked", {})
        ins = {s.tensor: weight_value(graph, s, specs.get(s.cname)) if s.weight
               else ref[s.tensor] for s in sg.inputs}
        got = run_subgraph_c(sg, ins, toolchain=toolchain)  # libgomp's team: a quicker build
        for s in sg.outputs:
            err = output_errors(ref[s.tensor].astype(np.float64),
                                got[s.tensor].astype(np.float64))[1]
            worst = max(worst, err)
            if not err <= options.rtol:
                problems.append(f"subgraph {sg.index}'s {s.tensor} differs from TensorFlow "
                                f"(max rel err {err:.3g} > rtol {options.rtol:g})")
    winograd = [w["node"] for info in infos for w in info.get("winograd", [])]
    return Verdict(not problems, "; ".join(problems), worst, winograd, {}, {})


class TensorFlowFails(Exception):
    """Stock TensorFlow itself cannot run the model (a Grappler rewrite that breaks a valid
    graph, say): the example has no reference, and says nothing of rstf."""


def _tf_run(graph_def, feeds: dict, fetches: list[str], reference: bool = False) -> dict:
    from ..frontend.tfutil import tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        try:
            values = sess.run(fetches, {f"{k}:0": v for k, v in feeds.items()})
        except tf.errors.OpError as e:
            if not reference:
                raise
            # TF's message: "Graph execution error:", where and what, the stack trace
            lines = [ln.strip() for ln in e.message.splitlines() if ln.strip()]
            what = next((ln for ln in lines if not ln.startswith(("Graph execution error",
                                                                  "Detected at", "Node:"))),
                        lines[0] if lines else type(e).__name__)
            raise TensorFlowFails(what[:300]) from None
    return dict(zip(fetches, values))


def save_regression(directory: str, graph_def, options: Options, input_seed: int | None,
                    **notes) -> str:
    """Write the graph and its sidecar (module docstring); `notes` (the recipe, what
    failed, how it was found) go into the sidecar for the reader. Returns the .pbtxt's path.
    The name hashes the graph and the options, so one graph failing two ways is two files."""
    from google.protobuf import text_format

    text = text_format.MessageToString(graph_def)
    meta = {"max_ops": options.max_ops, "optimizer": options.optimizer,
            "winograd": options.winograd, "rtol": options.rtol,
            "inputs": None if input_seed is None else {"distribution": "uniform [0, 1)",
                                                      "seed": input_seed}}
    key = hashlib.sha256((text + json.dumps(meta, sort_keys=True)).encode()).hexdigest()[:12]
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, f"{key}-maxops{options.max_ops}")
    with open(stem + ".json", "w") as f:
        json.dump({**meta, **notes}, f, indent=1, default=str)
        f.write("\n")
    with open(stem + ".pbtxt", "w") as f:
        f.write(text)
    return stem + ".pbtxt"


def load_regression(path: str) -> tuple[object, dict | None, Options]:
    """(GraphDef, feeds or None for compare's own inputs, Options) of a regression file."""
    from google.protobuf import text_format

    from .fuzz import image_feeds
    from ..frontend.tfutil import tf

    with open(path) as f:
        gd = text_format.Parse(f.read(), tf.compat.v1.GraphDef())
    sidecar = path.removesuffix(".pbtxt") + ".json"
    if not os.path.exists(sidecar):  # the first format: max_ops in the name alone
        max_ops = int(os.path.basename(path).split("-maxops")[1].split(".")[0])
        return gd, None, Options(max_ops)
    with open(sidecar) as f:
        meta = json.load(f)
    options = Options(meta["max_ops"], meta["optimizer"], meta["winograd"],
                      meta.get("rtol", DEFAULT_RTOL))
    inputs = meta.get("inputs")
    return gd, None if inputs is None else image_feeds(gd, inputs["seed"]), options


def replay(path: str, work_dir: str) -> Verdict:
    gd, feeds, options = load_regression(path)
    return check(gd, feeds, options, work_dir)
