"""Serving the optimized graph: a SavedModel, a ModelServer ops package, a Python loader.

TensorFlow Serving loads SavedModels but not op libraries at run time: custom ops are linked
into the ModelServer binary from source, as a `cc_library` with `alwayslink = 1`
(SERVING.md). Plain TensorFlow users call `rstf.load(OUTDIR)`, or `tf.load_op_library` and
then `tf.saved_model.load`.
"""
from __future__ import annotations

import json
import os

from ..errors import RstfError

BUILD_TEMPLATE = "serving_BUILD.j2"
_LOADED: dict[str, object] = {}  # library content hash -> the module tf.load_op_library gave


def load_library(path: str):
    """`tf.load_op_library`, once per library *content*.

    The same library under two paths (an output folder and its copy, the build cache and
    the output folder) would register every kernel twice, and TensorFlow then refuses to run
    the op ("Multiple OpKernel registrations"). Op names derive from the code's hash, so
    equal content means equal ops: loading it again is skipped.
    """
    import hashlib

    from ..frontend.tfutil import tf

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest not in _LOADED:
        _LOADED[digest] = tf.load_op_library(path)
    return _LOADED[digest]


def write_saved_model(export_dir: str, graph_def, signature: dict, lib_path: str | None) -> None:
    """A TF1-style SavedModel of `graph_def` (no variables: weights are Consts) whose
    `serving_default` signature keeps the original keys, shapes and dtypes."""
    from ..frontend.tfutil import tf

    if lib_path:
        load_library(lib_path)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    info = tf.compat.v1.saved_model.utils.build_tensor_info
    with tf.compat.v1.Session(graph=g) as sess:
        sig = tf.compat.v1.saved_model.signature_def_utils.build_signature_def(
            inputs={k: info(g.get_tensor_by_name(t)) for k, t in signature["inputs"].items()},
            outputs={k: info(g.get_tensor_by_name(t)) for k, t in signature["outputs"].items()},
            method_name=tf.saved_model.PREDICT_METHOD_NAME)
        builder = tf.compat.v1.saved_model.Builder(export_dir)
        builder.add_meta_graph_and_variables(
            sess, [tf.saved_model.SERVING], signature_def_map={"serving_default": sig},
            strip_default_attrs=True)
        builder.save()


def write_serving_ops(pkg_dir: str, c_sources: dict[str, str], wrapper: str,
                      headers: dict[str, str], model_name: str, march: str = "") -> None:
    """A Bazel package for TF Serving's tree: the generated sources, the header they need,
    and a BUILD with one `cc_library(alwayslink = 1)` named `rstf_ops`, its C built with
    `-march=<march>` (none when empty; `build.c_toolchain` has checked it is a plain name)
    and the op library's vector-width preference (`build.compiler.VECTOR_WIDTH_FLAG`),
    and with glibc's libmvec where this machine's gcc has it (`build.vector_math`: the
    serving machine needs glibc 2.35 or later then)."""
    from ..build.compiler import (INDEX_RANGE_ERRORS, LIBMVEC_FLAG, VECTOR_WIDTH_FLAG,
                                  vector_math)
    from ..opgen.base import render

    os.makedirs(pkg_dir)
    for name, text in [*c_sources.items(), ("rstf_ops.cc", wrapper), *headers.items()]:
        with open(os.path.join(pkg_dir, name), "w") as f:
            f.write(text)
    with open(os.path.join(pkg_dir, "BUILD"), "w") as f:
        f.write(render(BUILD_TEMPLATE, c_sources=sorted(c_sources), headers=sorted(headers),
                       model_name=model_name, march=march,
                       index_range_errors=INDEX_RANGE_ERRORS["gcc"],
                       vector_width=VECTOR_WIDTH_FLAG,
                       libmvec=LIBMVEC_FLAG if vector_math("gcc") else ""))


class RstfModel:
    """The optimized graph as a callable: `model(input=array, ...) -> {output key: tensor}`.

    Keys are the original signature's (a GraphDef's Placeholder and output node names).
    """

    def __init__(self, out_dir: str):
        from ..frontend.tfutil import tf

        path = os.path.join(out_dir, "report.json")
        if not os.path.isfile(path):
            raise RstfError(f"{out_dir}: not an rstf output folder (no report.json)")
        with open(path) as f:
            report = json.load(f)
        if report.get("library"):
            load_library(os.path.join(out_dir, report["library"]))
        gd = tf.compat.v1.GraphDef()
        with open(os.path.join(out_dir, "optimized.pb"), "rb") as f:
            gd.ParseFromString(f.read())
        sig = report["signature"]
        self.input_names = list(sig["inputs"])
        self.output_names = list(sig["outputs"])
        wrapped = tf.compat.v1.wrap_function(
            lambda: tf.graph_util.import_graph_def(gd, name=""), [])
        graph = wrapped.graph
        feeds = [graph.get_tensor_by_name(t) for t in sig["inputs"].values()]
        self._dtypes = [t.dtype for t in feeds]
        self._fn = wrapped.prune(
            feeds=feeds,
            fetches=[graph.get_tensor_by_name(t) for t in sig["outputs"].values()])

    def __call__(self, **inputs):
        missing = set(self.input_names) - set(inputs)
        extra = set(inputs) - set(self.input_names)
        if missing or extra:
            raise TypeError(f"expected inputs {self.input_names}, got {sorted(inputs)}")
        from ..frontend.tfutil import tf

        outs = self._fn(*[tf.convert_to_tensor(inputs[k], dtype)
                          for k, dtype in zip(self.input_names, self._dtypes)])
        return dict(zip(self.output_names, outs))


def load(out_dir: str) -> RstfModel:
    """Load an `rstf optimize` output folder: its op library and its graph, as a callable."""
    return RstfModel(out_dir)
