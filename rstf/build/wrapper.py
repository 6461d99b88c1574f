"""The C++ TensorFlow op wrapper: one registered op and kernel per subgraph (§II.F).

Op names come from a hash of the generated code *and* of the whole library's code, so two
optimized graphs, even of one model with different options, never register the same name
with different meanings.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from .. import __version__
from ..cgen import chelpers
from ..cgen.cescape import c_comment, c_string
from ..cgen.codegen import Slot, SubgraphCode
from ..opgen.base import render

# dtype -> (REGISTER_OP type, DataType enum, C++ element type: the C side's `unsigned char`
# for a bool is C++ `bool`, the one TensorFlow's Tensor::flat<> accepts; same layout).
TF_TYPES = {np.dtype(np.float32): ("float", "DT_FLOAT", "float"),
            np.dtype(np.int32): ("int32", "DT_INT32", "int32_t"),
            np.dtype(np.int64): ("int64", "DT_INT64", "int64_t"),
            np.dtype(np.bool_): ("bool", "DT_BOOL", "bool")}


def runtime_digest() -> str:
    """A hash of the code every op library carries besides its generated C: the wrapper's
    template and the runtime in rstf/runtime/ (the kernel header, the OpenMP team). Two
    libraries of the same generated C from two versions of that code are different
    libraries: loaded in one process, the same op names would clash ("Multiple OpKernel
    registrations match")."""
    from .compiler import runtime_sources

    templates = os.path.join(os.path.dirname(os.path.dirname(__file__)), "templates")
    with open(os.path.join(templates, "wrapper.cc.j2")) as f:
        texts = [f.read(), *runtime_sources().values()]
    h = hashlib.sha256()
    for text in texts:
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def library_digest(subgraphs: list[SubgraphCode], compiler: str = "") -> str:
    """`compiler` names the C toolchain: its compiler and flags. The same C compiled by
    Graphite or Polly, for another `--march`, or with other flags by another rstf is
    another library, and must not register the same op names: TensorFlow refuses to load
    both in one process (two versions of a model in one TensorFlow Serving, an A/B of two
    builds); nor must the same C with another runtime (`runtime_digest`)."""
    h = hashlib.sha256(__version__.encode() + compiler.encode() + runtime_digest().encode())
    for sg in subgraphs:
        # (which inputs are weights is part of the op's signature: attributes, not inputs)
        h.update(sg.digest.encode() + bytes(s.weight for s in sg.inputs))
    return h.hexdigest()


def op_name(sg: SubgraphCode, lib_digest: str) -> str:
    """'Rstf' + 16 hex digits: a valid TF op name ([A-Z][A-Za-z0-9_]*)."""
    return "Rstf" + hashlib.sha256(f"{lib_digest}/{sg.index}/{sg.digest}".encode()).hexdigest()[:16]


def _tensor(slot: Slot) -> dict:
    """`dims` for run-time checks and allocation (N: the batch read from the inputs),
    `static_dims` for graph-time shape inference (-1: unknown)."""
    tf_type, dt_enum, cxx = TF_TYPES[slot.dtype]
    dims = [str(d) for d in slot.shape]
    static = list(dims)
    if slot.batched:
        dims[0], static[0] = "N", "-1"
    return {"tf_type": tf_type, "dt_enum": dt_enum, "ctype": cxx, "dims": dims,
            "static_dims": static, "batched": slot.batched,
            "name_literal": c_string(slot.tensor), "comment": c_comment(slot.tensor)}


def _cxx(slot: Slot) -> str:
    return TF_TYPES[slot.dtype][2]


def _args(sg: SubgraphCode) -> list[str]:
    """The entry function's input arguments in its order: a weight from the kernel's
    copy of its attribute tensor (`weights_`, rstf_kernel.h), any other input from the
    op's input list."""
    out, n_in, n_w = [], 0, 0
    for s in sg.inputs:
        if s.weight:
            out.append(f"weights_.at<{_cxx(s)}>({n_w})")
            n_w += 1
        else:
            out.append(f"ctx->input({n_in}).flat<{_cxx(s)}>().data()")
            n_in += 1
    return out


def generate_wrapper(subgraphs: list[SubgraphCode], names: list[str], threads: int = 0) -> str:
    ops = []
    for sg, name in zip(subgraphs, names):
        inputs = [s for s in sg.inputs if not s.weight]
        c_params = (["long", "long"] * sg.dynamic_batch
                    + [f"const {_cxx(s)} *" for s in sg.inputs]
                    + [f"{_cxx(s)} *" for s in sg.outputs] + ["void *"])
        ops.append({"index": sg.index, "entry": sg.entry, "name_literal": c_string(name),
                    "kernel": f"{name}Kernel", "node_count": len(sg.nodes),
                    "first_node": c_string(sg.nodes[0]), "c_params": c_params,
                    "inputs": [_tensor(s) for s in inputs],
                    "weights": [_tensor(s) for s in sg.inputs if s.weight],
                    "args": _args(sg), "outputs": [_tensor(s) for s in sg.outputs],
                    "workspace": max(sg.workspace_bytes, 0), "dynamic": sg.dynamic_batch,
                    "batch_input": next((k for k, s in enumerate(inputs) if s.batched),
                                        None),
                    "index_errors": chelpers.INDEX_ERROR_SYMBOL in sg.source})
    return render("wrapper.cc.j2", version=__version__, ops=ops, threads=threads,
                  index_errors=any(op["index_errors"] for op in ops),
                  index_error_symbol=chelpers.INDEX_ERROR_SYMBOL)
