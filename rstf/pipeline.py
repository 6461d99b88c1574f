"""`rstf optimize`, top to bottom: load -> select -> partition -> opgen -> build -> splice.

Each stage is a plain function of the previous stage's value (see docs/design.md); this
module only strings them together and writes the output folder atomically.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re
import shutil
import time

import networkx as nx

from . import __version__
from .build.cache import cache_dir, private_cache_dir
from .build.compiler import CUSTOM_OPS_DIR, RUNTIME_HEADERS, build_library, c_toolchain
from .build.splice import custom_node_names, mark_weights, splice
from .build.wrapper import generate_wrapper, library_digest, op_name
from .cgen import batch
from .cgen.codegen import SubgraphCode, generate_subgraph
from .errors import RstfError
from .frontend.graph import TRIVIAL_OPS, Graph, load_model, split_tensor
from .opgen import check_node, get_handler
from .parallel import run_ordered
from .partition import partition_subgraph, select_subgraphs
from .poly.prepack import as_fed
from .progress import LOGGER, Reporter
from .serving import outdir

DEFAULT_MAX_OPS = 400
# poly: rstf's polyhedral pass then gcc; none: the textbook C, gcc; graphite / polly: the
# textbook C through gcc's Graphite or clang-14's Polly (build.c_toolchain).
OPTIMIZERS = ("poly", "none", "graphite", "polly")
# Op types whose FLOPs the coverage figure counts (the "conv/matmul FLOPs").
FLOP_OPS = {"Conv2D", "MatMul", "DepthwiseConv2dNative", "BatchMatMul", "BatchMatMulV2",
            "BatchMatMulV3", "Conv3D", "Conv2DBackpropInput", "_FusedConv2D", "_FusedMatMul"}


def dataflow_dag(graph: Graph) -> nx.DiGraph:
    """Nodes and their data and control edges, the input of selection and partitioning."""
    dag = nx.DiGraph()
    dag.add_nodes_from(graph.nodes)
    for n in graph.nodes.values():
        for t in n.inputs:
            src = split_tensor(t)[0]
            w = dag.edges[src, n.name]["weight"] + 1 if dag.has_edge(src, n.name) else 1
            dag.add_edge(src, n.name, weight=w)
        for c in n.control_inputs:
            if not dag.has_edge(c, n.name):
                dag.add_edge(c, n.name, weight=1)
    return dag


def supported_nodes(graph: Graph) -> tuple[set[str], dict[str, str]]:
    """Nodes rstf generates code for, and for the others (not trivial) the reason."""
    ok, reasons = set(), {}
    for n in graph.nodes.values():
        if n.op in ("Const", "Placeholder", "PlaceholderWithDefault", "NoOp"):
            continue
        if n.out_shapes and graph.is_const(f"{n.name}:0"):
            continue  # a read of a weight: stays a constant input of the custom op
        reason = check_node(n, graph)
        if reason is None:
            ok.add(n.name)
        else:
            reasons[n.name] = reason
    return ok, reasons


def node_flops(graph: Graph, name: str) -> int:
    """Conv/matmul FLOPs of one node, whether or not rstf supports it (0 for other ops)."""
    n = graph.nodes[name]
    if n.op not in FLOP_OPS or len(n.inputs) < 2 or not n.out_shapes or not n.is_static(0):
        return 0
    a, b = graph.tensor_shape(n.inputs[0]), graph.tensor_shape(n.inputs[1])
    if a is None or b is None or None in a or None in b:
        return 0
    out = math.prod(n.out_shapes[0])
    if n.op.startswith("Depthwise"):  # filter [kh, kw, ic, multiplier]
        return 2 * out * math.prod(b[:-2])
    if "Conv" in n.op:  # filter [kh, kw, ic, oc]: each output sums kh*kw*ic products
        return 2 * out * math.prod(b[:-1])
    transposed = any(n.attr[k].b for k in ("transpose_a", "adj_x") if k in n.attr)
    return 2 * out * (a[-2] if transposed else a[-1])


@dataclasses.dataclass
class Selection:
    """What `select` found: the supported nodes, the reasons for the others, and the maximal
    convex clusters of supported nodes. `clusters` are those worth a custom op; `skipped`
    those that only move data (Identity, Reshape...), which stay in TensorFlow."""

    supported: set[str]
    reasons: dict[str, str]
    dag: nx.DiGraph
    cost: dict[str, int]
    clusters: list[list[str]]
    skipped: list[list[str]]


def select(graph: Graph, keep=None) -> Selection:
    """Supported nodes grouped into clusters. `keep(supported)` narrows the supported set
    further (the dynamic batch's rule) and gives its reasons."""
    supported, reasons = supported_nodes(graph)
    if keep is not None:
        supported, more = keep(supported)
        reasons.update(more)
    dag = dataflow_dag(graph)
    cost, kept, skipped = {}, [], []
    for n in supported:
        h = get_handler(graph.nodes[n].op)
        cost[n] = max(h.flops(graph.nodes[n], graph), 1)
    # Isolated nodes (OpHandler.isolated) are each a cluster of their own; the others are
    # clustered as if those were unsupported, so a single node more keeps the quotient
    # acyclic.
    alone = {n for n in supported if get_handler(graph.nodes[n].op).isolated}
    for c in select_subgraphs(dag, supported - alone) + [[n] for n in sorted(alone)]:
        # A subgraph that only moves data (Identity, Reshape) gains nothing as a custom op.
        if all(cost[n] <= 1 or get_handler(graph.nodes[n].op).flops(graph.nodes[n], graph) == 0
               for n in c):
            skipped.append(c)
        else:
            kept.append(c)
    return Selection(supported, reasons, dag, cost, kept, skipped)


def partition(sel: Selection, max_ops: int, log, advance=None) -> list[list[list[str]]]:
    """Each cluster split by METIS into parts of at most `max_ops` nodes (one part if it is
    small enough); `advance()` is called once per cluster."""
    split_all = []
    for c in sel.clusters:
        split = partition_subgraph(sel.dag, c, max_ops, sel.cost)
        if len(split) > 1:
            log(f"split a subgraph of {len(c)} nodes into {len(split)} parts (METIS)")
        split_all.append(split)
        if advance:
            advance()
    return split_all


def select_parts(graph: Graph, max_ops: int, log,
                 keep=None) -> tuple[list[list[str]], dict[str, str]]:
    """The subgraphs to generate (every cluster's parts, in order) and the reasons."""
    sel = select(graph, keep)
    return [p for split in partition(sel, max_ops, log) for p in split], sel.reasons


def dynamic_graphs(model, input_shapes, outputs, graph: Graph, log,
                   fold_scales: bool = False) -> tuple:
    """(inputs with a dynamic batch, the graph at batch 1 or None, `keep` for `select`):
    an input whose dimension 0 alone is unknown keeps a dynamic batch (rstf/cgen/batch.py); code
    is then generated from the batch-1 graph, for the nodes that are separable per sample."""
    dynamic = batch.dynamic_inputs(graph)
    if not dynamic:
        return dynamic, None, None
    one = load_model(model, input_shapes, outputs, fold=True, fold_scales=fold_scales,
                     batch_pins=dynamic)
    log(f"dynamic batch: {', '.join(repr(n) for n in dynamic)} keep dimension 0 unknown; "
        f"subgraphs run per sample, versioned on the batch size")
    return dynamic, one, lambda supported: batch.separable_nodes(graph, one, supported)


# What the loader's rewrites did, as `optimize` says it: (the Graph's list, the message).
_LOAD_REWRITES = (
    ("bypassed", "bypassed {n} pass-through nodes (Identity, IdentityN...)"),
    ("folded", "folded {n} constant subexpressions"),
    ("divisions_reciprocated", "made {n} divisions by constants multiplies by their "
                               "reciprocals, as TensorFlow's Grappler does"),
    ("tf_scales_folded", "folded {n} multiplies into the Conv2D filters before them, as "
                         "TensorFlow's Grappler does"),
    ("batch_shapes_fixed", "made {n} shapes computed from the dynamic batch constant "
                           "(Reshapes take -1 for it)"),
    ("einsums_lowered", "lowered {n} Einsums to batched matmuls between Transposes and "
                        "Reshapes"),
    ("transposed_convs_lowered", "lowered {n} transposed convolutions to a Conv2D and a "
                                 "depth-to-space shuffle"),
    ("tensordots_merged", "merged {n} dense layers over 3-D inputs (Reshape, MatMul, "
                          "Reshape) into BatchMatMulV2s"),
    ("pointwise_hoisted", "moved {n} pointwise ops ahead of the Reshapes that split their "
                          "operand's last axis"),
    ("transposes_folded", "rewrote {n} batched matmuls so that they read no Transpose of "
                          "their product and no adjoint operand"),
    ("add_trees_reordered", "summed {n} trees of additions in the order TensorFlow's "
                            "Grappler sums them"),
    ("scales_folded", "folded {n} more per-channel scales into conv/matmul weights "
                      "(--fold-scales on)"),
)


def load_for_codegen(model, input_shapes, outputs, fold_scales: bool, log) -> tuple:
    """(graph, dynamic inputs, batch-1 graph or None, `keep`): the model loaded as
    `optimize` generates code from it (constants folded, batch norm's scales too with
    `fold_scales`, then `dynamic_graphs`). `rstf inspect` loads through here as well, so
    its counts and partitions are those `optimize` cuts."""
    graph = load_model(model, input_shapes, outputs, fold=True, fold_scales=fold_scales)
    for attr, text in _LOAD_REWRITES:
        if getattr(graph, attr):
            log(text.format(n=len(getattr(graph, attr))))
    return (graph, *dynamic_graphs(model, input_shapes, outputs, graph, log, fold_scales))


def optimize(model: str, out_dir: str | None = None, input_shapes=None, outputs=None,
             max_ops: int = DEFAULT_MAX_OPS, march: str = "native", force: bool = False,
             log=None, model_name: str | None = None, model_version: int = 1,
             optimizer: str = "poly", threads: int = 0, occupancy: float = 1.0, *,
             jobs: int | None = None, verbosity: int = 1, progress: bool = False,
             winograd: bool = False, fold_scales: bool = False, tuning: str = "auto") -> dict:
    """Optimize `model` into `out_dir`; returns the report (also written as report.json).

    An input whose dimension 0 alone is unknown (and not pinned) keeps a dynamic batch: see
    rstf/cgen/batch.py; `occupancy` is the c of the versioned placement's test N >= c*P.
    `jobs`: processes for the polyhedral pass and compilers for the build (default: the CPU
    count); the output does not depend on it. `verbosity` 0 prints nothing, 1 the run's
    messages, 2 also logs stage times and per-subgraph results (rstf.progress); `progress`
    shows the stages (live bars on a terminal, plain lines otherwise). `log`, if given,
    receives the messages instead of stderr. `winograd` (poly only): stride-1 3x3, 5x5, 1x7
    and 7x1 convs as Winograd (rstf/poly/winograd.py); False keeps every conv bit-identical to
    the textbook C. `fold_scales` (poly only): per-channel multiplies after a conv or matmul
    (batch norm's scale) go into its weights (rstf/frontend/scalefold.py); False keeps them.
    `tuning` (poly only): the register tiles measured by `rstf tune` (rstf/tuner/profile.py):
    'auto' this machine's profile where there is one, 'off' the analytic model's alone, or
    a profile's path.
    """
    if max_ops < 1:
        raise RstfError("--max-ops must be at least 1")
    if optimizer not in OPTIMIZERS:
        raise RstfError(f"--optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    if threads < 0:
        raise RstfError("--threads must be 0 (TensorFlow's) or positive")
    if not occupancy > 0:
        raise RstfError("--occupancy must be positive")
    if model_version < 1:
        raise RstfError("--model-version must be a positive integer")
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise RstfError("--jobs must be at least 1")
    toolchain = c_toolchain(optimizer, march, threads)  # a missing compiler fails here, first
    model_name = model_name or _safe_name(_stem(model))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", model_name):
        raise RstfError(f"--model-name {model_name!r}: use letters, digits, '_', '.', '-'")
    out_dir = outdir.resolve(out_dir or _default_out_dir(model))
    kept = _kept(model)
    outdir.check(out_dir, force, kept)
    private_cache_dir()  # a cache rstf cannot trust fails here, before any work
    target = poly_target(march, toolchain.cc, tuning) if optimizer == "poly" else None
    with Reporter(verbosity, progress, log) as rep:
        return _optimize(rep, model, out_dir, input_shapes, outputs, max_ops, march,
                         model_name, model_version, optimizer, threads, occupancy, jobs,
                         toolchain, winograd, fold_scales and optimizer == "poly", force,
                         kept, target)


def poly_target(march: str, cc: str, tuning: str = "off"):
    """(the polyhedral pass's target, the profile it carries or None): the vector ISA that
    `cc -march=<march>` compiles for (poly/target.py), with the tiles of the profile
    `tuning` names (`tuner.profile.resolve`: 'auto', 'off' or a path). A bad profile fails
    here, before any work."""
    from .poly.target import detect
    from .tuner.profile import resolve

    target = detect(march, cc)
    prof = resolve(tuning, target.name)
    if prof is None:
        return target, None
    return dataclasses.replace(target, tiles=prof.table()), prof


def default_jobs() -> int:
    return os.cpu_count() or 1


def _optimize(rep: Reporter, model, out_dir, input_shapes, outputs, max_ops, march,
              model_name, model_version, optimizer, threads, occupancy, jobs, toolchain,
              winograd, fold_scales, force, kept, target) -> dict:
    log = rep.message
    t0 = time.perf_counter()
    with rep.stage("load"):
        graph, dynamic, one, keep = load_for_codegen(model, input_shapes, outputs,
                                                     fold_scales, log)
    for p in graph.placeholders:
        if not p.is_static(0) and p.name not in dynamic:
            log(f"input {p.name!r} has shape {_fmt_shape(p.shape(0))}: nodes depending on its "
                f"unknown dimensions stay in TensorFlow; pin it with --input-shape "
                f"{p.name}:d0,d1,... ('?' for d0 keeps the batch dynamic)")
    gen = one or graph
    with rep.stage("select"):
        sel = select(gen, keep)
    with rep.stage("partition", len(sel.clusters)) as st:
        parts = [p for split in partition(sel, max_ops, log, st.advance) for p in split]
    reasons = sel.reasons
    if not parts:
        log("warning: no subgraph rstf can generate code for; the output graph is the "
            "original one (see report.json 'unsupported' for the reasons)")
    with rep.stage("generate", len(parts)) as st:
        codes = []
        for i, nodes in enumerate(parts):
            codes.append(generate_subgraph(gen, nodes, i))
            st.advance()
    poly = [{"optimizer": "none" if optimizer == "poly" else optimizer} for _ in codes]
    if optimizer == "poly":
        with rep.stage("optimise", len(codes)) as st:
            from .poly import optimize as poly_optimize

            # The C is shaped for the vector ISA the build's -march enables (poly/target.py),
            # in the tiles this machine's profile measured where it has them.
            vec, prof = target
            if prof is not None:
                log(f"tile choices from {prof.path}: {len(vec.tiles.measured)} of its "
                    f"{len(prof.contractions)} measured contractions differ from the model's")
            # Frozen weights may be re-laid out for the kernels (poly/prepack.py).
            tasks = [(sg.source, sg.entry, True, True,
                      frozenset(s.cname for s in sg.inputs if gen.is_const(s.tensor)),
                      winograd, vec)
                     for sg in codes]
            results = run_ordered(poly_optimize, tasks, jobs, st.advance,
                                  [len(sg.source) for sg in codes])
        poly = [apply_poly(sg, r, log, [gen.nodes[n].op for n in sg.nodes])
                for sg, r in zip(codes, results)]
    for sg, info in zip(codes, poly):
        if one is not None:
            batch.mark_batched(sg, graph, one)
            info["versions"] = batch.wrap(sg, occupancy)
    mark_weights(graph, codes)
    digest = library_digest(codes, f"{toolchain.cc} {' '.join(toolchain.flags)}")
    op_types = [op_name(sg, digest) for sg in codes]
    node_names = custom_node_names(graph, len(codes))
    wrapper = generate_wrapper(codes, op_types, threads)
    c_sources = {f"subgraph_{sg.index}.c": sg.source for sg in codes}
    t_build = time.perf_counter()
    with rep.stage("compile", len(c_sources) + 1 if codes else 0) as st:
        lib, cached = (build_library(c_sources, wrapper, march, jobs=jobs, on_done=st.advance,
                                     toolchain=toolchain) if codes else (None, False))
    build_seconds = time.perf_counter() - t_build
    new_gd = splice(graph, codes, op_types, node_names)

    report = _report(gen, graph.placeholders, codes, op_types, node_names, reasons,
                     input_shapes, model, march, max_ops)
    report["dynamic_batch"] = sorted(dynamic)
    report["options"].update(optimizer=optimizer, threads=threads, occupancy=occupancy,
                             winograd=winograd if optimizer == "poly" else False,
                             fold_scales=fold_scales)
    report["compiler"] = toolchain.describe()
    report["tuning"] = tuning_report(target, poly)
    for entry, info in zip(report["subgraphs"], poly):
        entry["optimizer"] = info["optimizer"]
        contexts = info.pop("versions", [])
        entry["versions"] = max(len(contexts), 1)
        entry["version_contexts"] = contexts
        entry["poly"] = info
    report["signature"] = graph.signature
    report["serving"] = {"model_name": model_name, "version": model_version,
                         "saved_model": f"serving/{model_name}/{model_version}",
                         "ops_package": "serving_ops"}
    report["build_seconds"] = round(build_seconds, 3)
    report["build_cached"] = cached
    report["optimize_seconds"] = round(time.perf_counter() - t0, 3)
    report["output_dir"] = os.path.abspath(out_dir)
    with rep.stage("write"):
        _write_output(out_dir, new_gd, lib, c_sources, wrapper, report, graph.signature,
                      force, kept)
    return report


def tuning_report(target, poly: list[dict]) -> dict:
    """report.json's "tuning": the profile the tiles came from (None: the model's alone)
    and how many tiled kernels took a measured choice."""
    prof = target[1] if target else None
    tiled = [t for info in poly for t in info.get("tiled", [])]
    return {"profile": prof.path if prof else None,
            "kernels_from_profile": sum(t.get("chosen_by") == "profile" for t in tiled),
            "kernels": len(tiled)}


def apply_poly(sg: SubgraphCode, result, log, ops: list[str] | None = None) -> dict:
    """Install one subgraph's polyhedral result (a `poly.PassResult`): its source gains
    parallel loops. Returns the result's report. `ops`: the subgraph's op types, which say
    whether its C was expected to stay outside the polyhedral model (`OpHandler.isolated`)."""
    sg.source = result.source
    if result.workspace_bytes is not None:  # the pass re-plans the workspace
        sg.workspace_bytes = result.workspace_bytes
    sg.prepacked = dict(result.prepacked)
    # The op's inputs as it is fed them: a Winograd weight is a tensor of another shape.
    sg.inputs = as_fed(sg.inputs, sg.prepacked)
    if not result.optimized and ops and all(get_handler(op).isolated for op in ops):
        # A gather's subscripts are data: its C was never raisable, and it was cut into an
        # op of its own for that reason (select). Not a failure worth alarming anyone.
        log(f"subgraph {sg.index} ({', '.join(sorted(set(ops)))}) runs its generated C as it "
            f"is: subscripts that read data are outside the polyhedral model")
    elif not result.optimized:
        log(f"subgraph {sg.index} left unoptimized: {result.diagnostic}")
    else:
        LOGGER.info("subgraph %d: poly in %.2f s: %d tiled, %d fused, %d parallel loops, "
                    "%d simd loops", sg.index, result.seconds, len(result.tiled),
                    len(result.fused), result.parallel_loops, result.simd_loops)
    return result.report()


def _fmt_shape(shape) -> str:
    return "unknown" if shape is None else "[" + ",".join("?" if d is None else str(d)
                                                         for d in shape) + "]"


def _stem(model: str) -> str:
    base = os.path.basename(os.path.normpath(model))
    return base.rsplit(".", 1)[0] if "." in base else base


def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip("._-")
    return name or "model"


def _default_out_dir(model: str) -> str:
    return os.path.join(os.path.dirname(os.path.normpath(model)) or ".", _stem(model) + ".rstf")


def _report(graph: Graph, placeholders, codes: list[SubgraphCode], op_types, node_names,
            reasons, input_shapes, model, march, max_ops) -> dict:
    """`graph` is the one code was generated from (batch 1 under a dynamic batch);
    `placeholders` are the model's own, whose shapes the report gives."""
    covered = {n for sg in codes for n in sg.nodes}
    counted = [n for n in graph.nodes.values() if n.op not in TRIVIAL_OPS]
    flops = {n: node_flops(graph, n) for n in graph.nodes}
    unsupported = collections.defaultdict(lambda: {"count": 0, "reason": ""})
    for name, reason in reasons.items():
        if graph.nodes[name].op in TRIVIAL_OPS:
            continue
        entry = unsupported[graph.nodes[name].op]
        entry["count"] += 1
        entry["reason"] = entry["reason"] or reason
    return {
        "rstf_version": __version__,
        "model": os.path.abspath(model),
        "input_shapes": {p.name: list(p.shape(0)) if p.shape(0) is not None else None
                         for p in placeholders},
        "pinned_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
        "outputs": graph.outputs,
        "options": {"max_ops": max_ops, "march": march},
        "nodes_folded": len(graph.folded),
        "tf_scales_folded": len(graph.tf_scales_folded),
        "divisions_reciprocated": len(graph.divisions_reciprocated),
        "add_trees_reordered": len(graph.add_trees_reordered),
        "scales_folded": len(graph.scales_folded),
        "tensordots_merged": len(graph.tensordots_merged),
        "einsums_lowered": len(graph.einsums_lowered),
        "transposed_convs_lowered": len(graph.transposed_convs_lowered),
        "batch_shapes_fixed": len(graph.batch_shapes_fixed),
        "transposes_folded": len(graph.transposes_folded),
        "pointwise_hoisted": len(graph.pointwise_hoisted),
        "nodes_total": len(counted),
        "nodes_covered": sum(1 for n in counted if n.name in covered),
        "flops_total": sum(flops.values()),
        "flops_covered": sum(f for n, f in flops.items() if n in covered),
        "unsupported": dict(sorted(unsupported.items())),
        "subgraphs": [
            {"name": node_names[i], "op_type": op_types[i], "optimizer": "none",
             "ops": dict(collections.Counter(graph.nodes[n].op for n in sg.nodes)),
             "nodes": sg.nodes, "flops": sg.flops, "op_functions": sg.op_functions,
             "inputs": [s.tensor for s in sg.inputs], "outputs": [s.tensor for s in sg.outputs],
             "workspace_bytes": sg.workspace_bytes,
             "temp_bytes_without_reuse": sg.temp_bytes_unshared,
             "source": f"src/subgraph_{sg.index}.c"}
            for i, sg in enumerate(codes)],
    }


def _kept(model: str) -> dict[str, str]:
    """What `--force` must never delete (outdir.check)."""
    return {"the model": model, "the working directory": os.getcwd(),
            "the build cache": cache_dir()}


def _write_output(out_dir, graph_def, lib, c_sources, wrapper, report, signature, force,
                  keep) -> None:
    """Write everything into a staging folder beside `out_dir`, then publish it there in one
    step (outdir.publish)."""
    from .serving import write_saved_model, write_serving_ops

    tmp = outdir.staging(out_dir)
    try:
        headers = {h: open(os.path.join(CUSTOM_OPS_DIR, h)).read() for h in RUNTIME_HEADERS}
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        for name, text in [*c_sources.items(), ("rstf_ops.cc", wrapper), *headers.items()]:
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        lib_copy = None
        if lib:
            lib_copy = os.path.join(tmp, os.path.basename(lib))
            shutil.copy(lib, lib_copy)
        report["library"] = os.path.basename(lib) if lib else None
        with open(os.path.join(tmp, "optimized.pb"), "wb") as f:
            f.write(graph_def.SerializeToString(deterministic=True))
        serving = report["serving"]
        write_saved_model(os.path.join(tmp, serving["saved_model"]), graph_def, signature,
                          lib_copy)
        write_serving_ops(os.path.join(tmp, serving["ops_package"]), c_sources, wrapper,
                          headers, serving["model_name"], report["options"]["march"])
        with open(os.path.join(tmp, "report.json"), "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    outdir.publish(tmp, out_dir, force, keep)
