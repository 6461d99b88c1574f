"""rstf: a polyhedral optimizer for TensorFlow graphs.

Public interface: the `rstf` command (rstf.cli), and

    rstf.optimize(model, out_dir, ...) -> report dict     (rstf.pipeline.optimize)
    rstf.compare.compare(model, out_dir, ...) -> result   (also `rstf compare`)
    rstf.load(out_dir) -> callable model                  (rstf.serving.load)

They are imported lazily: `import rstf` does not import TensorFlow.
"""
__version__ = "0.1.0"

__all__ = ["optimize", "load", "__version__"]


def __getattr__(name):
    if name == "optimize":
        from .pipeline import optimize

        return optimize
    if name == "load":
        from .serving import load

        return load
    raise AttributeError(f"module 'rstf' has no attribute {name!r}")
