"""The exact reference: the same frozen graph run by TensorFlow in float64.

TensorFlow's two CPU paths (Eigen and oneDNN kernels) often share their rounding: where
oneDNN has no kernel of its own (a grouped convolution, a depthwise one) both run Eigen's,
and where both have one they sum a dot product in similar orders. Their spread, oneDNN
against Eigen, then understates how far any float32 engine is from the result the model
defines, and an engine that sums in another order (rstf's register tiles) looks many times
"outside TF's spread" while being as exact as TensorFlow, or more. The float64 run answers
the question the spread cannot: is an engine further from the exact result than stock
TensorFlow is?

`widen_graph_def` turns every float32 type, type list and constant of a GraphDef into
float64; `widen_feeds` does the same to the inputs, whose float32 values are kept exactly.
`exact_errors` gives each engine's error against the float64 outputs, in
rstf.evaluation.compare's measure (max |engine - exact| / max |exact|), and
`exact_ratio` an engine's error over the worse of TensorFlow's two paths: at most 1.0 means
no further from the exact result than stock TensorFlow.

Some graphs cannot be widened: an op with no float64 CPU kernel (FusedBatchNormV3's scale and
statistics are float32 only) fails in TensorFlow; the callers then report the reference as
unavailable, with TensorFlow's reason, and judge by the spread alone.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import RstfError


def widen_graph_def(graph_def):
    """A copy of `graph_def` computing in float64 wherever it computed in float32: every
    float32 type attribute (`T`, `dtype`, `DstT`...), every float32 entry of a type-list
    attribute (`IdentityN`'s `T`) and every float32 tensor attribute (a `Const`'s value),
    in the graph and in its function library."""
    from tensorflow.core.framework import types_pb2

    from ..frontend.tfutil import tf

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    nodes = list(out.node)
    for fn in out.library.function:
        nodes += list(fn.node_def)
    for node in nodes:
        for attr in node.attr.values():
            which = attr.WhichOneof("value")
            if which == "type" and attr.type == types_pb2.DT_FLOAT:
                attr.type = types_pb2.DT_DOUBLE
            elif which == "list" and types_pb2.DT_FLOAT in attr.list.type:
                widened = [types_pb2.DT_DOUBLE if t == types_pb2.DT_FLOAT else t
                           for t in attr.list.type]
                del attr.list.type[:]
                attr.list.type.extend(widened)
            elif which == "tensor" and attr.tensor.dtype == types_pb2.DT_FLOAT:
                value = tf.make_ndarray(attr.tensor).astype(np.float64)
                attr.tensor.CopyFrom(tf.make_tensor_proto(value))
    return out


def widen_feeds(feeds: dict) -> dict:
    """The inputs with every float32 array as float64 (the same values, exactly)."""
    return {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}


def run_exact(graph, feeds: dict, fetches: list[str], tmp: str):
    """(outputs, None): the fetches of `graph` (an rstf.frontend.graph.Graph) widened to
    float64, run by stock TensorFlow with Eigen kernels and Grappler off (each node as the
    graph has it) on the widened `feeds`; or (None, reason) where TensorFlow cannot run the
    widened graph. Files go to `tmp`."""
    from .compare import EIGEN_ENV, run_engine

    path = os.path.join(tmp, "exact.pb")
    with open(path, "wb") as f:
        f.write(widen_graph_def(graph.graph_def).SerializeToString())
    inputs = os.path.join(tmp, "exact_inputs.npz")
    np.savez(inputs, **widen_feeds(feeds))
    save = os.path.join(tmp, "exact.npz")
    try:
        run_engine("float64", path, [], inputs, fetches, 0, EIGEN_ENV, save, rewrites=False)
    except RstfError as e:
        return None, str(e)
    with np.load(save) as npz:
        return [npz[f"out{i}"].astype(np.float64) for i in range(len(fetches))], None


def exact_errors(exact: list, outputs: list) -> float:
    """An engine's worst max_rel_err over the outputs, against the float64 outputs."""
    from .compare import output_errors

    return max((output_errors(x, np.asarray(o, dtype=np.float64))[1]
                for x, o in zip(exact, outputs)), default=0.0)


def exact_ratio(err: float | None, tf_errs: list) -> float | None:
    """`err` over the largest of TensorFlow's own errors against the exact result (its
    paths that ran); None where either is missing, that error is 0 or a value is not
    finite."""
    from .compare import spread_ratio

    tf_errs = [e for e in tf_errs if e is not None]
    return spread_ratio(err, max(tf_errs)) if tf_errs else None
