"""The `rstf` command.

    rstf optimize MODEL [-o OUTDIR] [--input-shape NAME:d0,d1,...] [--outputs A,B]
                        [--max-ops N] [--march ARCH] [--force] [-j N] [-q | -v]
    rstf inspect MODEL [--svg FILE] [--input-shape ...] [--outputs A,B] [--max-ops N] [--json]
    rstf compare MODEL OUTDIR [--inputs FILE.npz] [--input-range LO,HI] [--rtol 1e-4]
                              [--reps N] [--seed S] [--per-subgraph] [--json]
    rstf bench MODEL... [--engines LIST] [--reps N] [--rounds R] [--input-range LO,HI] [--plot FILE.png]
                        [--tuning auto|off|PROFILE] [--json]
    rstf tune MODEL [--budget 10m] [--profile FILE] [--probes N] [--max-probes N] [--reps N]
                    [--pair-seconds S] [--confirm N] [--fresh] [--probe-order ORDER] [--json]

`optimize` shows its stages (live bars with an ETA on a terminal, plain lines otherwise) and
a summary; `-q` prints nothing but errors, `-v` also logs stage times and each subgraph's
polyhedral result. Errors the user can cause print one line, `rstf: error: ...`, and exit with status 2 (bad
usage or input) or 1 (`compare` found outputs outside the tolerance; `bench` found an rstf
engine that failed or whose outputs are outside the tolerance). Set RSTF_DEBUG=1 to see
the traceback of an internal error (or pass --debug).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

from .errors import RstfError


def _fold_scales_arg(p: argparse.ArgumentParser, prefix: str) -> None:
    """--fold-scales on|off, shared by optimize and inspect (they must load a model alike)."""
    p.add_argument("--fold-scales", default="off", choices=["on", "off"],
                   help=prefix + "fold per-channel multiplies after a convolution or matmul "
                   "(batch norm's scale) into its weights (on: a few float32 ulps from TF's "
                   "rounding, 1.1x to 4.9x TF's own spread); off, the default, keeps the "
                   "multiplies in the kernels' epilogues")


SEED_HELP = ("seed of the random inputs (default 0): a 4-D float input (an image) is "
             "uniform in [0, 1), any other float input standard normal, an integer input "
             "that indexes a gather's table ids in [0, rows), any other integer or bool "
             "input 0 or 1")


def _input_range_arg(p: argparse.ArgumentParser) -> None:
    """--input-range LO,HI, shared by compare and bench."""
    p.add_argument("--input-range", metavar="LO,HI",
                   help="draw every random float input uniform in [LO, HI) (default: [0, 1) "
                   "for a 4-D input, an image; standard normal for the others)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rstf", description="Polyhedral optimizer for TensorFlow "
                                "graphs: supported subgraphs become generated custom ops.")
    p.add_argument("--debug", action="store_true",
                   help="show tracebacks of internal errors (same as RSTF_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True)

    o = sub.add_parser("optimize", help="optimize a frozen graph or SavedModel")
    o.add_argument("model", help="binary GraphDef (.pb), text GraphDef (.pbtxt) or SavedModel dir")
    o.add_argument("-o", "--output", help="output folder (default: MODEL stem + .rstf)")
    o.add_argument("--input-shape", action="append", default=[], metavar="NAME:d0,d1,...",
                   help="pin an input's shape (repeatable)")
    o.add_argument("--outputs", help="comma-separated output node names (default: the graph's "
                   "sinks, or the SavedModel signature's outputs)")
    o.add_argument("--max-ops", type=int, default=None,
                   help="split subgraphs larger than this many nodes with METIS (default 400)")
    o.add_argument("--march", default="native", help="gcc -march for the generated code")
    o.add_argument("--optimizer", default="poly", choices=["poly", "none", "graphite", "polly"],
                   help="rstf's polyhedral pass on the generated C (default), the textbook C "
                   "(none), or the textbook C through gcc's Graphite or clang-14's Polly")
    o.add_argument("--threads", type=int, default=0,
                   help="threads of the parallel loops (default 0: what TensorFlow gives "
                   "the op)")
    o.add_argument("--winograd", default="off", choices=["on", "off"],
                   help="poly: on runs stride-1 3x3, 5x5, 1x7 and 7x1 convolutions as "
                   "Winograd F(4x4,3x3), F(4x4,5x5), F(1x4,1x7), F(4x1,7x1) (2.8x to 6x fewer "
                   "multiply-adds, but on in-distribution inputs errors several times "
                   "TensorFlow's own spread: see the README); off, the default, keeps the "
                   "direct kernels, bit-identical to the textbook C")
    _fold_scales_arg(o, "poly: ")
    o.add_argument("--tuning", default="auto", metavar="auto|off|PROFILE",
                   help="poly: register tiles measured by `rstf tune`: 'auto' (default) this "
                        "machine's profile where there is one, 'off' the analytic model's "
                        "alone, or a profile file")
    o.add_argument("--occupancy", type=float, default=1.0,
                   help="versioned placement under a dynamic batch: distribute the batch loop "
                   "when N >= OCCUPANCY * threads (default 1)")
    o.add_argument("--force", action="store_true", help="replace an existing output folder")
    o.add_argument("--model-name", help="name of the SavedModel under OUTDIR/serving/ "
                   "(default: the model file's stem)")
    o.add_argument("--model-version", type=int, default=1,
                   help="version folder of the SavedModel (default 1)")
    o.add_argument("-j", "--jobs", type=int, default=None,
                   help="processes for the polyhedral pass and the compilers (default: the "
                   "number of CPUs); the output does not depend on it")
    talk = o.add_mutually_exclusive_group()
    talk.add_argument("-q", "--quiet", action="store_true",
                      help="print nothing but errors (no progress, no summary)")
    talk.add_argument("-v", "--verbose", action="store_true",
                      help="also log stage times and each subgraph's polyhedral result")

    i = sub.add_parser("inspect", help="show what rstf would do with a model: supported and "
                       "unsupported ops, subgraphs, partitions; optionally draw them")
    i.add_argument("model", help="binary GraphDef (.pb), text GraphDef (.pbtxt) or SavedModel dir")
    i.add_argument("--svg", metavar="FILE", help="draw the graph coloured by partition "
                   "(needs graphviz's `dot`)")
    i.add_argument("--input-shape", action="append", default=[], metavar="NAME:d0,d1,...",
                   help="pin an input's shape (repeatable)")
    i.add_argument("--outputs", help="comma-separated output node names")
    i.add_argument("--max-ops", type=int, default=None,
                   help="split subgraphs larger than this many nodes with METIS (default 400)")
    _fold_scales_arg(i, "as `optimize --optimizer poly` does: ")
    i.add_argument("--json", action="store_true", help="print one JSON object")

    c = sub.add_parser("compare", help="check an optimized graph against stock TensorFlow")
    c.add_argument("model", help="the original model")
    c.add_argument("outdir", help="the folder written by `rstf optimize`")
    c.add_argument("--inputs", metavar="FILE.npz", help=".npz of input arrays, keyed by "
                   "Placeholder name (with or without ':0'); a key naming no input is an "
                   "error, an input the file lacks gets random values, with a warning")
    _input_range_arg(c)
    c.add_argument("--rtol", type=float, default=1e-4,
                   help="the pass line: max error relative to each output's largest magnitude "
                   "(default 1e-4)")
    c.add_argument("--reps", type=int, default=5, help="timed runs per configuration")
    c.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    c.add_argument("--batch", type=int, default=1,
                   help="samples in the random inputs of a dynamic-batch model (default 1)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--per-subgraph", action="store_true",
                   help="run each custom op alone on TF's intermediate tensors and name the "
                   "first subgraph and node whose error exceeds --rtol")
    _bench_parser(sub)
    _tune_parser(sub)
    return p


def _outputs(a) -> list[str] | None:
    return [s for s in a.outputs.split(",") if s] if a.outputs else None


def _max_ops(a) -> int:
    from .pipeline import DEFAULT_MAX_OPS

    return a.max_ops if a.max_ops is not None else DEFAULT_MAX_OPS


def _bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="latency and error of rstf's optimizers, TensorFlow "
                       "(Eigen, oneDNN, XLA), ONNX Runtime and OpenVINO on the same inputs")
    b.add_argument("models", nargs="+", metavar="MODEL", help="models to benchmark")
    b.add_argument("--engines", help="comma-separated engines (default: all of rstf-none, "
                   "rstf-poly, rstf-graphite, rstf-polly, tf-eigen, tf-onednn, tf-xla, "
                   "onnxruntime, openvino; tf-eigen, the reference, always runs)")
    b.add_argument("--reps", type=int, default=5, help="timed runs per engine (default 5)")
    b.add_argument("--rounds", type=int, default=1,
                   help="the engines take turns in this many rounds, each running its share "
                   "of --reps (default 1; on a shared machine, 3 or more)")
    b.add_argument("--plot", metavar="FILE.png", help="draw a grouped bar chart")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--input-shape", action="append", default=[], metavar="NAME:d0,d1,...",
                   help="pin an input's shape (repeatable)")
    b.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    _input_range_arg(b)
    b.add_argument("--rtol", type=float, default=1e-4,
                   help="an engine whose error vs TF Eigen exceeds this is a 'mismatch'")
    b.add_argument("--march", default="native", help="gcc -march for rstf's generated code")
    b.add_argument("--threads", type=int, default=0, help="threads of rstf's parallel loops")
    b.add_argument("--tuning", default="auto", metavar="auto|off|PROFILE",
                   help="rstf-poly's register tiles, as for optimize: 'auto' (default) this "
                        "machine's profile where `rstf tune` wrote one, 'off' the analytic "
                        "model's alone, or a profile file")


def _tune_parser(sub) -> None:
    t = sub.add_parser("tune", help="measure each contraction's register tiles on this "
                       "machine and keep the fastest in its profile (optimize reads it)")
    t.add_argument("model", help="binary GraphDef (.pb), text GraphDef (.pbtxt) or SavedModel dir")
    t.add_argument("--budget", default="10m", help="time to spend, as 600, 90s, 10m or 1h "
                   "(default 10m); a run past it stops between probes, the next one resumes")
    t.add_argument("--profile", metavar="FILE", help="the profile to write (default: this "
                   "machine's, beside the build cache)")
    t.add_argument("--probes", type=int, default=8, help="candidate tiles measured per "
                   "contraction, the model's own first (default 8)")
    t.add_argument("--max-probes", type=int, default=24, help="after the first --probes "
                   "and their confirmation, the budget left probes further candidates, up "
                   "to this many a contraction (default and most 24)")
    t.add_argument("--reps", type=int, default=30, help="timed runs of each side of a "
                   "pairing, the model's tiles and a probe's, in turn (default 30)")
    t.add_argument("--pair-seconds", type=float, default=8.0, help="a pairing stops short "
                   "of --reps once its runs have taken this long (an even count, at least "
                   "8; default 8; 0: never): a large model's probes cost their builds")
    t.add_argument("--confirm", type=int, default=2, help="rounds that time the winning "
                   "tiles again beside the model's before they are kept (default 2)")
    t.add_argument("--fresh", action="store_true", help="measure again what an earlier run "
                   "of this model measured")
    t.add_argument("--probe-order", choices=("auto", "learned", "analytic"), default="auto",
                   help="which candidates the probes run: the learned model's ranking of a "
                   "larger pool, trained on the profile's other runs (learned), the analytic "
                   "model's own order (analytic), or learned where scikit-learn and enough "
                   "other runs are there (auto, the default; a resumed run keeps its order)")
    t.add_argument("--input-shape", action="append", default=[], metavar="NAME:d0,d1,...",
                   help="pin an input's shape (repeatable)")
    t.add_argument("--outputs", help="comma-separated output node names")
    t.add_argument("--max-ops", type=int, default=None, help="as for optimize")
    t.add_argument("--march", default="native", help="gcc -march for the generated code")
    t.add_argument("--threads", type=int, default=0, help="threads of the parallel loops "
                   "(default: every core)")
    _fold_scales_arg(t, "as `optimize` will: ")
    t.add_argument("--json", action="store_true", help="print one JSON object")


def _tune(a) -> int:
    from .frontend.graph import parse_input_shapes
    from .tuner.profile import needed
    from .tuner.search import parse_budget, tune

    budget = parse_budget(a.budget)
    r = tune(a.model, parse_input_shapes(a.input_shape), _outputs(a), profile=a.profile,
             budget=budget, probes=a.probes, reps=a.reps, march=a.march, threads=a.threads,
             max_ops=a.max_ops, fold_scales=a.fold_scales == "on", fresh=a.fresh,
             confirm=a.confirm, probe_order=a.probe_order, max_probes=a.max_probes,
             pair_seconds=a.pair_seconds,
             log=(lambda _m: None) if a.json else (lambda m: print(m, flush=True)))
    if a.json:
        print(json.dumps(r))
        return 0
    rows = r["contractions"]
    won = [c for c in rows if c["choice"] != c["model"]]
    print(f"{len(rows)} contractions, {len(won)} faster in another tile than the model's; "
          + (f"{r['probes_done']} of {r['probes']} probes" if r['probes_done'] < r['probes']
             else f"{r['probes_done']} probes ({r['probes']} first, up to {r['max_probes']})")
          + f" in {r['seconds']:.0f} s"
          + {"budget": " (stopped by the budget: run again to go on)",
             "interrupted": " (interrupted: run again to go on)"}.get(r["stopped"], ""))
    for c in sorted(won, key=lambda c: c["vs_model"]):
        print(f"  {c['model']:>11} -> {c['choice']:>11}: {c['vs_model']:.3f} of the model's "
              f"time ({c['choice_ms']:.3f} ms)  {c['key']}")
    print(f"noise: a timed ratio moved by {100 * r['noise']:.1f}% with no change on this "
          f"machine; a choice beat the model's by at least "
          f"{100 * needed(r['noise'], max(a.confirm, 1)):.1f}% over its confirmation rounds")
    print(f"profile: {r['profile']} (rstf optimize reads it: --tuning auto)")
    return 0


def _bench(a) -> int:
    from .evaluation.bench import bench, parse_engines, plot, rstf_problems, table
    from .frontend.graph import parse_input_shapes
    from .evaluation.inputs import parse_input_range

    if a.plot and not a.plot.lower().endswith(".png"):
        raise RstfError(f"--plot {a.plot}: the chart is a PNG; name it FILE.png")
    r = bench(a.models, parse_engines(a.engines), a.reps, a.seed,
              parse_input_shapes(a.input_shape), a.march, a.threads, a.rtol,
              input_range=parse_input_range(a.input_range), rounds=a.rounds,
              tuning=a.tuning)
    if a.plot:
        plot(r, a.plot)
    print(json.dumps(r) if a.json else table(r))
    problems = rstf_problems(r)
    if problems:  # the table is printed either way; the status is for scripts and CI
        print(f"rstf: error: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0


def _optimize(a) -> int:
    from .frontend.graph import parse_input_shapes
    from .pipeline import optimize

    verbosity = 0 if a.quiet else 2 if a.verbose else 1
    report = optimize(a.model, a.output, parse_input_shapes(a.input_shape), _outputs(a),
                      _max_ops(a), a.march, a.force,
                      model_name=a.model_name, model_version=a.model_version,
                      optimizer=a.optimizer, threads=a.threads, occupancy=a.occupancy,
                      jobs=a.jobs, verbosity=verbosity, progress=True,
                      winograd=a.winograd == "on", fold_scales=a.fold_scales == "on",
                      tuning=a.tuning)
    if a.quiet:
        return 0
    pct = lambda x, y: f"{100.0 * x / y:.1f}%" if y else "n/a"  # noqa: E731
    print(f"optimized {a.model} -> {a.output or report['output_dir']}")
    print(f"  subgraphs: {len(report['subgraphs'])}   nodes covered: {report['nodes_covered']}/"
          f"{report['nodes_total']} ({pct(report['nodes_covered'], report['nodes_total'])})"
          f"   conv/matmul FLOPs covered: {pct(report['flops_covered'], report['flops_total'])}")
    if report["unsupported"]:
        left = ", ".join(f"{op} x{v['count']}" for op, v in report["unsupported"].items())
        print(f"  left to TensorFlow: {left}")
    algos = collections.Counter(w["algorithm"] for sg in report["subgraphs"]
                                for w in (sg.get("poly") or {}).get("winograd", []))
    if algos:
        print("  winograd: " + ", ".join(f"{n} {a}" for a, n in sorted(algos.items())))
    print(f"  optimize time: {report['optimize_seconds']:.1f} s (build "
          f"{report['build_seconds']:.1f} s{', cached' if report['build_cached'] else ''})")
    return 0


def _inspect(a) -> int:
    from .frontend.graph import parse_input_shapes
    from .evaluation.inspect_graph import inspect, print_inspection

    r = inspect(a.model, parse_input_shapes(a.input_shape), _outputs(a), _max_ops(a), a.svg,
                fold_scales=a.fold_scales == "on")
    if a.json:
        print(json.dumps(r))
    else:
        print_inspection(r)
    return 0


def _compare(a) -> int:
    from .evaluation.compare import compare, format_ratio
    from .evaluation.inputs import parse_input_range

    if a.reps < 1:
        raise RstfError("--reps must be at least 1")
    if a.batch < 1:
        raise RstfError("--batch must be at least 1")
    input_range = parse_input_range(a.input_range)
    if a.per_subgraph:
        return _compare_per_subgraph(a, input_range)
    r = compare(a.model, a.outdir, a.inputs, a.rtol, a.reps, a.seed, batch=a.batch,
                input_range=input_range)
    if a.json:
        print(json.dumps(r))
    else:
        _print_inputs(r)
        for o in r["outputs"]:
            of = o["tf_spread_of"]
            print(f"{o['name']}: max_abs_err {o['max_abs_err']:.2g}  max_rel_err "
                  f"{o['max_rel_err']:.2g}  TF spread {o['tf_spread']:.2g} (oneDNN vs Eigen "
                  f"{of['onednn']:.2g}, Eigen without Grappler {of['grappler_off']:.2g})  "
                  f"ratio {format_ratio(o['spread_ratio'])}  {'ok' if o['passed'] else 'FAIL'}")
            if "exact_err_of" in o:
                ex = o["exact_err_of"]
                print(f"  against the float64 run: rstf {ex['rstf']:.2g}, TF Eigen "
                      f"{ex['tf_eigen']:.2g}, TF oneDNN {ex['tf_onednn']:.2g}  rstf / TF's "
                      f"worse {format_ratio(o['exact_ratio'])}")
        if r.get("exact_unavailable"):
            print(f"float64 reference unavailable: {r['exact_unavailable']}")
        lat = r["latency_ms"]
        print(f"latency (median of {r['reps']}, through the {r['timed_through']}): rstf "
              f"{lat['rstf']:.2f} ms, TF Eigen {lat['tf_eigen']:.2f} ms, TF oneDNN "
              f"{lat['tf_onednn']:.2f} ms  (rstf/Eigen {lat['rstf'] / lat['tf_eigen']:.2f}x, "
              "rstf/oneDNN "
              f"{lat['rstf'] / lat['tf_onednn']:.2f}x time)")
        print("PASSED" if r["passed"] else f"FAILED: error above --rtol {a.rtol:g}")
    return 0 if r["passed"] else 1


def _print_inputs(r: dict) -> None:
    """One line: each input's shape and how its values were made."""
    print("inputs: " + "; ".join(f"{k} {'x'.join(map(str, shape)) or 'scalar'} "
                                 f"{r['input_values'][k]}" for k, shape in r["inputs"].items()))


def _compare_per_subgraph(a, input_range) -> int:
    from .evaluation.compare import compare_per_subgraph, format_ratio

    r = compare_per_subgraph(a.model, a.outdir, a.inputs, a.rtol, a.seed, input_range)
    if a.json:
        print(json.dumps(r))
        return 0 if r["passed"] else 1
    _print_inputs(r)
    for s in r["subgraphs"]:
        print(f"{s['name']} ({s['nodes']} nodes): max_rel_err {s['max_rel_err']:.2g}  "
              f"TF spread (oneDNN vs Eigen) {s['tf_spread']:.2g}  "
              f"ratio {format_ratio(s['spread_ratio'])}  {'ok' if s['passed'] else 'FAIL'}")
    f = r["first_failure"]
    if f is None:
        print("PASSED: every subgraph matches TensorFlow")
        return 0
    where = f" at node {f['node']!r} ({f['op']}), max_rel_err {f['max_rel_err']:.3g}" \
        if "node" in f else ""
    print(f"FAILED: first failing subgraph {f['subgraph']}{where}")
    return 1


def _attach_range_values(argv: list[str]) -> list[str]:
    """`--input-range -1,1` -> `--input-range=-1,1`: argparse takes "-1,1" (or "-inf,0")
    for an option, only a plain negative number passing as a value, and would refuse the
    natural form. Whatever follows is the value; parse_input_range judges it."""
    out = []
    for arg in argv:
        if out and out[-1] == "--input-range" and "--" not in out:
            out[-1] = f"--input-range={arg}"
        else:
            out.append(arg)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parser().parse_args(_attach_range_values(argv))
    if a.debug:
        os.environ["RSTF_DEBUG"] = "1"
    try:
        return {"optimize": _optimize, "inspect": _inspect, "compare": _compare,
                "bench": _bench, "tune": _tune}[a.command](a)
    except RstfError as e:
        print(f"rstf: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rstf: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never a traceback for the user; RSTF_DEBUG=1 shows it
        if os.environ.get("RSTF_DEBUG"):
            raise
        msg = " ".join(str(e).split())[:300]
        print(f"rstf: internal error: {type(e).__name__}: {msg} (RSTF_DEBUG=1 for details)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
