"""rstf: a polyhedral optimizer for TensorFlow graphs.

Public interface: the `rstf` command (rstf.cli), and its Python mirror (rstf.api):

    rstf.optimize(model, out_dir=None, **options) -> OptimizeResult   (`rstf optimize`)
    rstf.compare(model, out_dir_or_result, ...) -> dict                (`rstf compare --json`)
    rstf.inspect(model, svg=None, ...) -> dict                         (`rstf inspect --json`)
    rstf.tune(model, budget="10m", ...) -> dict                        (`rstf tune --json`)
    rstf.load(out_dir) -> callable model                               (rstf.serving.load)

`model` is a .pb / .pbtxt path, a SavedModel folder, or a tf.compat.v1.GraphDef.
`rstf.pipeline.optimize` is the lower-level call that returns the report dict.

    >>> import rstf
    >>> result = rstf.optimize("model.pb", "model.rstf", input_shapes={"input": (1, 8, 8, 3)})
    >>> result
    OptimizeResult(.../model.rstf: 2 subgraphs, nodes covered 8/9, ...)
    >>> rstf.compare("model.pb", result)["passed"]
    True
    >>> outputs = result.load()(input=images)

Everything is imported lazily: `import rstf` does not import TensorFlow.
"""
__version__ = "0.1.0"

__all__ = ["optimize", "compare", "inspect", "tune", "load", "OptimizeResult", "RstfError",
           "__version__"]


def __getattr__(name):
    if name in ("optimize", "inspect", "tune", "OptimizeResult"):
        from . import api

        return getattr(api, name)
    if name == "compare":
        # The submodule rstf.compare is callable: rstf.compare(...) runs rstf.api.compare
        # (a package attribute named like a submodule is replaced by it once imported).
        import importlib

        return importlib.import_module(".compare", __name__)
    if name == "load":
        from .serving import load

        return load
    if name == "RstfError":
        from .errors import RstfError

        return RstfError
    raise AttributeError(f"module 'rstf' has no attribute {name!r}")
