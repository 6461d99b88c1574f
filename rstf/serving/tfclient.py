"""Run and time a frozen graph through TensorFlow's C API: rstf/serving/tf_client.c.

This is how `rstf compare` and the TensorFlow engines of `rstf bench` time a graph. Python's
`Session.run` costs 0.4-0.7 ms of interpreter work a call on a 2-core machine, against about
0.06 ms for `TF_SessionRun` itself (both measured on MobileNetV2, thread CPU time of the
calling thread). A C++ server such as TensorFlow Serving pays only the latter, and that
constant would otherwise sit on both sides of every ratio we report.

The client is compiled once by gcc against the installed TensorFlow's C API and cached by
content (source, TensorFlow's libraries) beside the op-library builds. Nothing here imports
TensorFlow, so a timing process starts in well under a second.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from ..errors import RstfError

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_client.c")

# numpy dtype -> TensorFlow's TF_DataType number (tensorflow/c/tf_datatype.h).
TF_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
             np.dtype(np.uint8): 4, np.dtype(np.int16): 5, np.dtype(np.int8): 6,
             np.dtype(np.int64): 9, np.dtype(np.bool_): 10, np.dtype(np.uint16): 17,
             np.dtype(np.float16): 19, np.dtype(np.uint32): 22, np.dtype(np.uint64): 23}
NP_DTYPES = {v: k for k, v in TF_DTYPES.items()}


class ClientUnavailable(RstfError):
    """The client is not built and cannot be: no gcc."""


def tf_dir() -> str:
    """The installed tensorflow package's folder (its C API headers and libraries)."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise RstfError("TensorFlow is not installed (pip install tensorflow-cpu==2.21.0)")
    return list(spec.submodule_search_locations)[0]


def _tf_libs(tfd: str) -> list[str]:
    libs = [os.path.join(tfd, n) for n in ("libtensorflow_cc.so.2",
                                           "libtensorflow_framework.so.2")]
    missing = [x for x in libs if not os.path.exists(x)]
    if missing:
        raise RstfError(f"TensorFlow's C API library {missing[0]} is missing")
    return libs


def client_path() -> str:
    """The compiled client, built on first use (an atomic rename into the build cache).
    Raises ClientUnavailable when it is not built yet and there is no gcc to build it."""
    from ..build.compiler import run_tool
    from ..build.cache import check_trusted, locked, private_cache_dir

    tfd = tf_dir()
    libs = _tf_libs(tfd)
    key = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        key.update(f.read())
    for lib in libs:
        st = os.stat(lib)
        key.update(f"{lib} {st.st_size} {st.st_mtime_ns}".encode())
    cache = private_cache_dir()
    name = f"tf_client-{key.hexdigest()[:16]}"
    exe = os.path.join(cache, name)
    if os.path.lexists(exe):
        check_trusted(exe)  # it is run: it must be this user's own
        return exe
    if shutil.which("gcc") is None:
        raise ClientUnavailable("gcc is not installed")
    with locked(os.path.join(cache, f".{name}.lock")):
        if os.path.lexists(exe):  # built meanwhile by another process
            check_trusted(exe)
            return exe
        fd, tmp = tempfile.mkstemp(prefix=".tf_client.", dir=cache)
        os.close(fd)
        try:
            run_tool(["gcc", "-O2", "-std=c11", "-w", SOURCE, "-I", os.path.join(tfd, "include"),
                  *libs, f"-Wl,-rpath,{tfd}", "-o", tmp], "the TensorFlow C client")
            os.chmod(tmp, 0o700)
            os.replace(tmp, exe)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return exe


def _unique_by_content(libs: list[str]) -> list[str]:
    """Each library once per content: the same library under two paths would register its
    kernels twice, and TensorFlow refuses to run them (see serving.load_library)."""
    from ..build.compiler import file_sha256

    seen, out = set(), []
    for lib in libs:
        digest = file_sha256(lib)
        if digest not in seen:
            seen.add(digest)
            out.append(lib)
    return out


def _line(directive: str, text: str) -> str:
    if "\n" in text or "\r" in text:
        raise RstfError(f"a {directive} name or path holds a line break: {text!r}")
    return f"{directive} {text}\n"


def run_graph(graph_path: str, libs: list[str], feeds: dict[str, np.ndarray],
              fetches: list[str], reps: int, warmup_s: float = 0.0
              ) -> tuple[list[np.ndarray], list[float]]:
    """One warm-up call of the frozen graph, whose outputs are returned, then (where
    `reps` > 0) untimed calls for `warmup_s` seconds, then `reps` timed calls (ms each).
    Feeds and fetches are "node:index" tensor names; `libs` are op
    libraries to load first. A fetch that is also fed returns the fed value, as a Python
    Session does (TensorFlow's C API refuses it). Raises RstfError with TensorFlow's
    message on failure."""
    outputs, times = run_graphs([graph_path], libs, feeds, fetches, reps, warmup_s=warmup_s)
    return outputs, times[0]


def run_graphs(graph_paths: list[str], libs: list[str], feeds: dict[str, np.ndarray],
               fetches: list[str], reps: int, block: int = 1, warmup_s: float = 0.0
               ) -> tuple[list[np.ndarray], list[list[float]]]:
    """`run_graph` of several frozen graphs with the same feeds and fetches in one process,
    their timed calls interleaved in `reps` rounds (A B, B A, ...: the client's `also`
    graphs), each graph called `block` times in a row a round, after `warmup_s` seconds of
    untimed calls of every graph in turn: (the first graph's warm-up outputs, each graph's
    reps x block times in ms, call by call)."""
    exe = client_path()
    graph_path, *also = graph_paths
    asked = fetches
    fetches = [t for t in dict.fromkeys(fetches) if t not in feeds]
    with tempfile.TemporaryDirectory(prefix="rstf-run-") as work:
        spec = [_line("dir", work), f"reps {int(reps)}\n", f"block {int(block)}\n",
                f"warmup {1e3 * float(warmup_s):.3f}\n"]
        spec += [_line("lib", os.path.abspath(x)) for x in _unique_by_content(libs)]
        spec.append(_line("graph", os.path.abspath(graph_path)))
        spec += [_line("also", os.path.abspath(x)) for x in also]
        for i, (name, value) in enumerate(feeds.items()):
            value = np.asarray(value, order="C")  # (ascontiguousarray makes a scalar 1-d)
            if value.dtype not in TF_DTYPES:
                raise RstfError(f"feed {name!r}: dtype {value.dtype} is not supported")
            value.tofile(os.path.join(work, f"in{i}.bin"))
            words = [TF_DTYPES[value.dtype], value.ndim, *value.shape, name]
            spec.append(_line("feed", " ".join(str(w) for w in words)))
        spec += [_line("fetch", t) for t in fetches]
        spec_path = os.path.join(work, "spec")
        # surrogateescape: a path that is not UTF-8 goes back to its own bytes.
        with open(spec_path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.writelines(spec)
        proc = subprocess.run([exe, spec_path], capture_output=True, text=True,
                              errors="replace")
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = " ".join(proc.stderr.split())[-300:]
            raise RstfError(f"the TensorFlow C client failed (exit {proc.returncode}): {tail}")
        result = json.loads(lines[-1])
        if "error" in result:
            raise RstfError(result["error"])
        outputs = []
        for i, meta in enumerate(result["outputs"]):
            dtype = NP_DTYPES.get(meta["dtype"])
            if dtype is None:
                raise RstfError(f"fetch {fetches[i]!r}: TF dtype {meta['dtype']} is not "
                                "supported")
            data = np.fromfile(os.path.join(work, f"out{i}.bin"), dtype=dtype)
            outputs.append(data.reshape(meta["shape"]))
    got = dict(zip(fetches, outputs))
    return [got[t] if t in got else np.asarray(feeds[t]).copy() for t in asked], \
        [result["times_ms"], *result.get("also_times_ms", [])]
