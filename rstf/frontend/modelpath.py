"""A model argument as a path: a .pb / .pbtxt path or SavedModel folder as it is, a
`tf.compat.v1.GraphDef` object written to a temporary .pb (`model_path`). Shared by the
Python API (`api`) and `compare.compare_model`.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

from ..errors import RstfError


def is_graph_def(model) -> bool:
    return hasattr(model, "SerializeToString") and hasattr(model, "node")


@contextlib.contextmanager
def model_path(model, name: str = "model"):
    """A path for `model`: itself, or a temporary .pb holding a GraphDef object."""
    if is_graph_def(model):
        with tempfile.TemporaryDirectory(prefix="rstf-model-") as d:
            path = os.path.join(d, f"{name}.pb")
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            yield path
        return
    if isinstance(model, (str, os.PathLike)):
        yield os.fspath(model)
        return
    raise RstfError(f"model: expected a path or a tf.compat.v1.GraphDef, got "
                    f"{type(model).__name__}")
