"""The Python API, mirroring the command line: `rstf.optimize`, `rstf.compare`,
`rstf.inspect` (and `rstf.load`, rstf.serving).

    import rstf

    result = rstf.optimize("model.pb", "model.rstf", input_shapes={"input": (1, 224, 224, 3)},
                           jobs=4)
    print(result)                       # OptimizeResult(model.rstf: 3 subgraphs, ...)
    result.report["flops_covered"]      # report.json, as a dict
    model = result.load()               # = rstf.load("model.rstf"), a callable
    check = rstf.compare("model.pb", result)   # = `rstf compare --json`
    assert check["passed"]
    info = rstf.inspect("model.pb", svg="model.svg")  # = `rstf inspect --json`

A `tf.compat.v1.GraphDef` may replace the model path in `optimize` and `compare`: it is
written to a temporary .pb first. Bad input raises `rstf.errors.RstfError`.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile

from .frontend.modelpath import is_graph_def, model_path


@dataclasses.dataclass
class OptimizeResult:
    """What `rstf.optimize` returns: the report (report.json) and the output folder.

    `result["key"]` reads the report too, as the dict `rstf.optimize` used to return."""

    report: dict
    output_dir: str

    @property
    def subgraphs(self) -> list[dict]:
        """The report's subgraphs: name, op_type, nodes, ops, flops, poly..."""
        return self.report["subgraphs"]

    @property
    def library(self) -> str | None:
        """Path of the custom-op library, or None when no subgraph was generated."""
        lib = self.report.get("library")
        return os.path.join(self.output_dir, lib) if lib else None

    def load(self):
        """The optimized model as a callable: `rstf.load(self.output_dir)`."""
        from .serving import load

        return load(self.output_dir)

    def __getitem__(self, key):
        return self.report[key]

    def __repr__(self) -> str:
        r = self.report
        pct = (f"{100.0 * r['flops_covered'] / r['flops_total']:.1f}%"
               if r.get("flops_total") else "n/a")
        return (f"OptimizeResult({self.output_dir}: {len(self.subgraphs)} subgraphs, nodes "
                f"covered {r['nodes_covered']}/{r['nodes_total']}, conv/matmul FLOPs covered "
                f"{pct}, optimize {r['optimize_seconds']:.1f} s)")


def optimize(model, out_dir=None, *, input_shapes=None, outputs=None, max_ops=None,
             march: str = "native", force: bool = False, optimizer: str = "poly",
             threads: int = 0, occupancy: float = 1.0, jobs: int | None = None,
             winograd: bool = False, fold_scales: bool = False, tuning: str = "auto",
             model_name: str | None = None,
             model_version: int = 1, verbosity: int = 1, progress: bool = False,
             log=None) -> OptimizeResult:
    """`rstf optimize` from Python: optimize `model` into `out_dir`.

    `model`: a .pb / .pbtxt path, a SavedModel folder, or a `tf.compat.v1.GraphDef`.
    `out_dir`: the output folder (default: the model's name + .rstf next to it; for a
    GraphDef, a new temporary folder, returned in `result.output_dir`). The keywords are the
    command's options: `input_shapes` ({name: shape}), `outputs` (node names), `max_ops`,
    `march`, `force`, `optimizer` ('poly' or 'none'), `threads`, `occupancy`, `jobs`,
    `winograd` (`--winograd on|off`), `fold_scales` (`--fold-scales on|off`), `tuning`
    (`--tuning auto|off|PROFILE`), `model_name`,
    `model_version`. `verbosity` 0 is quiet, 1 prints the run's messages, 2 also logs stage
    times; `progress=True` shows the stages as the command does; `log` receives the messages
    instead of stderr.

        >>> result = rstf.optimize("model.pb", "model.rstf", jobs=2)
        >>> result.report["nodes_covered"], result.output_dir
    """
    from .pipeline import DEFAULT_MAX_OPS
    from .pipeline import optimize as run

    given = is_graph_def(model)
    if given and out_dir is None:
        out_dir = os.path.join(tempfile.mkdtemp(prefix="rstf-"), "model.rstf")
    shapes = {k: tuple(v) for k, v in input_shapes.items()} if input_shapes else None
    with model_path(model) as path:
        report = run(path, out_dir, shapes, list(outputs) if outputs else None,
                     DEFAULT_MAX_OPS if max_ops is None else max_ops, march, force, log=log,
                     model_name=model_name, model_version=model_version,
                     optimizer=optimizer, threads=threads, occupancy=occupancy, jobs=jobs,
                     verbosity=verbosity, progress=progress, winograd=winograd,
                     fold_scales=fold_scales, tuning=tuning)
    return OptimizeResult(report, report["output_dir"])


def compare(model, out_dir, inputs: str | None = None, rtol: float = 1e-4, reps: int = 5,
            seed: int = 0, per_subgraph: bool = False, batch: int = 1,
            input_range: tuple[float, float] | str | None = None, warn=None) -> dict:
    """`rstf compare` from Python: the dict `rstf compare --json` prints.

    `model`: the original model (path or GraphDef); `out_dir`: the folder `optimize` wrote,
    or its `OptimizeResult`. `inputs`: an .npz of input arrays keyed by Placeholder name (a
    key naming no input raises RstfError; an input it lacks is drawn at random, with a
    warning). Random inputs (rstf.evaluation.inputs) are seeded by `seed`: a 4-D float input is
    uniform in [0, 1), other floats standard normal, integer ids of a gather's table in
    [0, rows), other integers and bools 0 or 1; `input_range` ((LO, HI) or "LO,HI") draws
    every float input uniform in [LO, HI) instead. `batch`: samples in the random inputs of
    a dynamic-batch model. `warn` receives the warnings (default: stderr).

    Per output: `max_abs_err` and `max_rel_err` (max |error| / max |TF Eigen output|)
    against TF Eigen, `passed` (max_rel_err <= `rtol`), `tf_spread` (TF oneDNN's
    max_rel_err against TF Eigen on the same inputs) and `spread_ratio` (max_rel_err /
    tf_spread; None when the spread is 0), `exact_err_of` (rstf's, TF Eigen's and TF
    oneDNN's max_rel_err against the graph run in float64) and `exact_ratio` (rstf's over
    the worse of TF's; `exact_unavailable` says why, where TF cannot run the graph in
    float64). With `per_subgraph`, each custom op is checked
    alone (`rstf compare --per-subgraph`), with the same fields per subgraph.

        >>> check = rstf.compare("model.pb", result)
        >>> check["passed"], check["outputs"][0]["spread_ratio"], check["latency_ms"]["rstf"]
    """
    from .evaluation.compare import compare_model

    return compare_model(model, out_dir, inputs, rtol, reps, seed, per_subgraph, batch,
                         input_range, warn)


def inspect(model, *, input_shapes=None, outputs=None, max_ops=None, svg=None,
            fold_scales: bool = False) -> dict:
    """`rstf inspect` from Python: the dict `rstf inspect --json` prints (op types with
    counts and FLOPs, subgraphs, partitions); `svg` also draws the graph. `fold_scales`
    (`--fold-scales on|off`) loads the model as `optimize(fold_scales=)` does.

        >>> info = rstf.inspect("model.pb", svg="model.svg")
        >>> [(p["name"], p["nodes"]) for p in info["partitions"]]
    """
    from .evaluation.inspect_graph import inspect as run

    shapes = {k: tuple(v) for k, v in input_shapes.items()} if input_shapes else None
    with model_path(model) as path:
        return run(path, shapes, list(outputs) if outputs else None, max_ops, svg,
                   fold_scales)


def tune(model, *, input_shapes=None, outputs=None, profile: str | None = None,
         budget="10m", probes: int = 8, reps: int = 30, confirm: int = 2,
         march: str = "native", threads: int = 0, max_ops=None, fold_scales: bool = False,
         fresh: bool = False, probe_order: str = "auto", max_probes: int = 24,
         pair_seconds: float = 8.0, log=None) -> dict:
    """`rstf tune` from Python: the dict `rstf tune --json` prints (`profile`, the
    `contractions` with the model's and the chosen tile, `probes_done`, `probe_order`,
    `stopped`, and `noise`: how much a timed ratio moved on this machine with no change).
    The keywords are the command's options, with its defaults; `budget` is seconds or a
    string such as "10m".
    `log` receives the progress lines (default: none).

        >>> rstf.tune("model.pb", budget="5m")["profile"]
    """
    from .tuner.search import parse_budget, tune as run

    secs = parse_budget(str(budget))
    shapes = {k: tuple(v) for k, v in input_shapes.items()} if input_shapes else None
    with model_path(model) as path:
        return run(path, shapes, list(outputs) if outputs else None, profile=profile,
                   budget=secs, probes=probes, reps=reps, confirm=confirm, march=march,
                   threads=threads, max_ops=max_ops, fold_scales=fold_scales, fresh=fresh,
                   probe_order=probe_order, max_probes=max_probes, pair_seconds=pair_seconds,
                   log=log or (lambda _m: None))
