"""Run one subgraph's generated C directly, without TensorFlow (ctypes).

Used by `rstf compare --per-subgraph` to localise an error to one node, and by the tests to
check op generators on many shapes without paying for a TensorFlow op build each time.
"""
from __future__ import annotations

import ctypes
import os
import tempfile

import numpy as np

from .compiler import CToolchain, compile_c_shared
from ..cgen.codegen import SubgraphCode


# What outputs hold before the call, so that an element the code forgets shows: NaN for
# floats, a value no index or mask path produces for integers, True for bools.
_UNWRITTEN = {"i": -0x5A5A5A5A, "b": True}


def run_subgraph_c(sg: SubgraphCode, inputs: dict[str, np.ndarray], march: str = "native",
                   toolchain: CToolchain | None = None,
                   team_threads: int = 0) -> dict[str, np.ndarray]:
    """Compile `sg.source` alone (gcc, or `toolchain`) and call its entry; `inputs` maps each
    input slot's tensor name to its value. Returns {output tensor name: value}. Outputs start
    as NaN (integers and bools: _UNWRITTEN) and the workspace as 0xFF bytes, so anything the code forgets to write shows up.
    `team_threads`: run it as the op library does, on that many threads of rstf's OpenMP
    team (`compile_c_shared(team=True)`), instead of on libgomp's."""
    with tempfile.TemporaryDirectory() as d:
        so = os.path.join(d, "sg.so")
        compile_c_shared(sg.source, so, march, toolchain, team=team_threads > 0)
        lib = ctypes.CDLL(so)
        args, keep = [], []
        for slot in sg.inputs:
            arr = np.ascontiguousarray(np.asarray(inputs[slot.tensor], dtype=slot.dtype)
                                       .reshape(slot.shape))
            keep.append(arr)
            args.append(arr.ctypes.data_as(ctypes.c_void_p))
        outs = {}
        for slot in sg.outputs:
            arr = np.full(slot.shape, _UNWRITTEN.get(slot.dtype.kind, np.nan), dtype=slot.dtype)
            outs[slot.tensor] = arr
            args.append(arr.ctypes.data_as(ctypes.c_void_p))
        ws = np.full(max(sg.workspace_bytes, 1), 0xFF, dtype=np.uint8)
        args.append(ws.ctypes.data_as(ctypes.c_void_p))
        if team_threads:
            lib.rstf_call_begin(team_threads)
        getattr(lib, sg.entry)(*args)
        if team_threads:
            lib.rstf_call_end()
        del lib
    return outs
