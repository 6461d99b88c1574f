"""TensorFlow's own shape inference over a GraphDef: the loader's and its passes' source of
static shapes. Kept apart from `graph` so that the passes `graph` runs while loading can
use it without importing `graph` back.
"""
from __future__ import annotations

import numpy as np

from ..errors import RstfError
from .tfutil import tf


def one_line(e: BaseException) -> str:
    """An exception's text on one line, at most 300 characters."""
    return " ".join(str(e).split())[:300] or type(e).__name__


def infer_shapes(gd) -> dict[str, tuple[list, list]]:
    """Run TensorFlow's shape inference by importing the GraphDef into a tf.Graph.

    Returns {node name: (output shapes, output numpy dtypes)}.
    """
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except Exception as e:  # ValueError / InvalidArgumentError / NotFoundError for unknown ops
        raise RstfError(f"TensorFlow cannot import the graph ({one_line(e)})") from None
    result = {}
    for op in g.get_operations():
        shapes, dtypes = [], []
        for t in op.outputs:
            s = t.shape
            shapes.append(None if s.rank is None else tuple(s.as_list()))
            try:
                dtypes.append(np.dtype(t.dtype.as_numpy_dtype))
            except (TypeError, AttributeError):
                dtypes.append(None)  # resource and variant tensors
        result[op.name] = (shapes, dtypes)
    return result
