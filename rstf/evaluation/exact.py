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
rstf.evaluation.compare runs the widened graph (`run_exact`) and measures each engine
against it (`worst_rel_err`: max |engine - exact| / max |exact|; `exact_ratio`: an engine's
error over the worse of TensorFlow's two paths, at most 1.0 where it is no further from the
exact result than stock TensorFlow).

Some graphs cannot be widened: an op with no float64 CPU kernel (FusedBatchNormV3's scale and
statistics are float32 only) fails in TensorFlow; the callers then report the reference as
unavailable, with TensorFlow's reason, and judge by the spread alone.
"""
from __future__ import annotations

import numpy as np


def widen_graph_def(graph_def):
    """A copy of `graph_def` computing in float64 wherever it computed in float32 (and in
    complex128 where in complex64: FNet's Fourier transforms): every such type attribute
    (`T`, `dtype`, `DstT`, `Tcomplex`...), every such entry of a type-list attribute
    (`IdentityN`'s `T`) and every such tensor attribute (a `Const`'s value), in the graph
    and in its function library.

    Ops whose output is float32 whatever their input (`FLOAT_RESULT_OPS`: the image resizes)
    keep computing in float32 there, then a Cast widens what they give their readers: the
    reference carries one float32 rounding at that point, and the graph still runs."""
    from tensorflow.core.framework import types_pb2

    from ..frontend.tfutil import tf

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    nodes = list(out.node)
    for fn in out.library.function:
        nodes += list(fn.node_def)
    wide = {types_pb2.DT_FLOAT: types_pb2.DT_DOUBLE,
            types_pb2.DT_COMPLEX64: types_pb2.DT_COMPLEX128}
    for node in nodes:
        for attr in node.attr.values():
            which = attr.WhichOneof("value")
            if which == "type" and attr.type in wide:
                attr.type = wide[attr.type]
            elif which == "list" and set(attr.list.type) & set(wide):
                widened = [wide.get(t, t) for t in attr.list.type]
                del attr.list.type[:]
                attr.list.type.extend(widened)
            elif which == "tensor" and attr.tensor.dtype in wide:
                value = tf.make_ndarray(attr.tensor)
                value = value.astype(np.float64 if value.dtype == np.float32 else np.complex128)
                attr.tensor.CopyFrom(tf.make_tensor_proto(value))
    for node in list(out.node):
        if node.op in FLOAT_RESULT_OPS:
            original = node.name
            node.name = f"{original}/rstf_float32_result"
            cast = out.node.add(name=original, op="Cast", input=[node.name])
            cast.device = node.device
            cast.attr["SrcT"].type = types_pb2.DT_FLOAT
            cast.attr["DstT"].type = types_pb2.DT_DOUBLE
    return out


# TensorFlow ops whose output dtype is float32 for every input dtype (no output type attr).
FLOAT_RESULT_OPS = frozenset({"ResizeBilinear", "ResizeBicubic", "ResizeArea"})


def widen_feeds(feeds: dict) -> dict:
    """The inputs with every float32 array as float64 (the same values, exactly)."""
    return {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
