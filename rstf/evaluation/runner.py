"""Run a frozen graph and time it, in its own process: `python -m rstf.evaluation.runner ...`.

`rstf compare` starts one runner per configuration because TensorFlow reads
TF_ENABLE_ONEDNN_OPTS once, at import: stock TF with Eigen kernels and stock TF with oneDNN
cannot share a process. The runner loads optional op libraries, feeds the inputs from an
.npz file, fetches the requested tensors, saves them to an .npz file and prints one JSON line
with the latencies. TensorFlow graphs are called through TensorFlow's C API by default
(rstf.serving.tfclient: no Python interpreter work inside the timed calls), or from a Python Session
with `--client python`. `--engine` picks another runtime for the same frozen graph (`rstf bench`:
XLA, ONNX Runtime, OpenVINO; see rstf/evaluation/bench.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from .timing import WARMUP_S, timed


def run(graph_path: str, libs: list[str], inputs_path: str, fetches: list[str],
        reps: int, save: str | None, client: str = "c", rewrites: bool = True) -> dict:
    """The frozen graph through TensorFlow: with `client="c"` through its C API
    (rstf.serving.tfclient, the way a C++ server calls Session::Run), with `client="python"` through
    a Python Session, whose per-call interpreter work is then counted in every latency.
    Without gcc to build the C client, the Python Session it is, and the result says so.
    `rewrites=False`: a Python Session with Grappler off, every node run as it is in the
    graph (no fused kernels): `compare` measures TF's own spread with it."""
    import numpy as np

    from ..serving.tfclient import ClientUnavailable, run_graph

    feeds = dict(np.load(inputs_path))
    label = "Python Session"
    if client == "c" and rewrites:
        try:
            outs, times = run_graph(graph_path, libs, feeds, fetches, reps, WARMUP_S)
        except ClientUnavailable as e:
            label = f"Python Session (no TF C API client: {e})"
        else:
            if save:
                np.savez(save, **{f"out{i}": o for i, o in enumerate(outs)})
            return {"latency_ms": statistics.median(times) if times else None,
                    "times_ms": times, "client": "TF C API",
                    **({"warmup_s": WARMUP_S} if reps > 0 else {})}  # as `timed` says

    from ..serving import load_library
    from ..frontend.tfutil import tf

    for lib in libs:
        load_library(lib)
    gd = tf.compat.v1.GraphDef()
    with open(graph_path, "rb") as f:
        gd.ParseFromString(f.read())
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    config = tf.compat.v1.ConfigProto()
    if not rewrites:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        label += ", Grappler off"
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        feed = {g.get_tensor_by_name(k): v for k, v in feeds.items()}
        fetch = [g.get_tensor_by_name(t) for t in fetches]
        return timed(lambda: sess.run(fetch, feed), reps, save, client=label)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rstf.evaluation.runner")
    p.add_argument("--graph", required=True)
    p.add_argument("--lib", action="append", default=[])
    p.add_argument("--inputs", required=True)
    p.add_argument("--fetch", action="append", default=[])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--save")
    p.add_argument("--engine", default="tf",
                   help="tf, or one of rstf.evaluation.bench's other runtimes")
    p.add_argument("--client", choices=["c", "python"], default="c",
                   help="with --engine tf: call the Session through TensorFlow's C API (the "
                   "default) or from Python")
    p.add_argument("--no-rewrites", action="store_true",
                   help="with --engine tf: a Python Session with Grappler off (no fused kernels)")
    a = p.parse_args(argv)
    try:
        if a.engine == "tf":
            result = run(a.graph, a.lib, a.inputs, a.fetch, a.reps, a.save, a.client,
                         not a.no_rewrites)
        else:
            from .bench import RUNTIMES

            result = RUNTIMES[a.engine](a.graph, a.inputs, a.fetch, a.reps, a.save)
    except Exception as e:  # reported to the parent as one line
        print(json.dumps({"error": " ".join(str(e).split())[:500] or type(e).__name__}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
