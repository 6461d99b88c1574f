#!/usr/bin/env python3
"""Every convolution and matmul layer of a model, alone, against TensorFlow's own kernel.

    python benchmarks/layer_sweep.py MODEL.pb [--batch 1] [--reps 30] [--tuning auto]
                                     [--work DIR] [--json FILE]

Each distinct Conv2D or MatMul of the frozen MODEL (its input shape at --batch, its weight
shape, strides, padding and dilations) becomes one layer of a new graph: a placeholder, the
op on a fixed random weight, a BiasAdd (a grouped convolution's: an AddV2) and a Relu,
one connected component a layer, so that `rstf optimize` makes each its own custom op. The
graph is optimized once (with `--tuning`, as `rstf optimize` would), then each layer is timed alone in one TensorFlow
process through the C client, stock TensorFlow's graph and rstf's interleaved round by
round (`tfclient.run_graphs`), on inputs uniform in [0, 1). TensorFlow runs its default
kernels (oneDNN on x86; TF_ENABLE_ONEDNN_OPTS=0 in the environment gives Eigen's).

Prints each layer's shapes, both medians and their ratio, then how many layers rstf runs
slower than TensorFlow and the geomean ratio.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

ATTRS = {"Conv2D": ("strides", "padding", "dilations", "explicit_paddings", "data_format"),
         "MatMul": ("transpose_a", "transpose_b")}


def layers(model: str, batch: int) -> list[dict]:
    """The distinct Conv2D and MatMul layers of a frozen model: {op, input, weight, attrs,
    nodes (the model's nodes with that signature)}, at batch `batch`."""
    from rstf.frontend.tfutil import tf

    gd = tf.compat.v1.GraphDef()
    with open(model, "rb") as f:
        gd.ParseFromString(f.read())
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    seen: dict = {}
    for op in g.get_operations():
        if op.type not in ATTRS:
            continue
        x, w = op.inputs[0].shape, op.inputs[1].shape
        if not x.is_fully_defined() and not x[1:].is_fully_defined():
            continue
        if not w.is_fully_defined():
            continue
        attrs = {a: op.get_attr(a) for a in ATTRS[op.type] if a in op.node_def.attr}
        shape = [batch, *x.as_list()[1:]]
        sig = json.dumps([op.type, shape, w.as_list(), attrs], default=str, sort_keys=True)
        seen.setdefault(sig, {"op": op.type, "input": shape, "weight": w.as_list(),
                              "attrs": attrs, "nodes": []})["nodes"].append(op.name)
    return list(seen.values())


def build(specs: list[dict], seed: int = 0):
    """The graph of one component a layer: x<i> -> op -> BiasAdd -> Relu -> y<i>."""
    from rstf.frontend.tfutil import tf

    rng = np.random.RandomState(seed)
    g = tf.Graph()
    with g.as_default():
        for i, s in enumerate(specs):
            x = tf.compat.v1.placeholder(tf.float32, s["input"], name=f"x{i}")
            fan_in = math.prod(s["weight"][:-1])
            w = (rng.standard_normal(s["weight"]) / math.sqrt(fan_in)).astype(np.float32)
            a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in s["attrs"].items()}
            if s["op"] == "Conv2D":
                y = tf.raw_ops.Conv2D(input=x, filter=w, strides=a["strides"],
                                      padding=a["padding"], dilations=a.get("dilations",
                                                                            [1, 1, 1, 1]),
                                      explicit_paddings=a.get("explicit_paddings", []),
                                      data_format=a.get("data_format", "NHWC"))
            else:
                y = tf.raw_ops.MatMul(a=x, b=w, transpose_a=a.get("transpose_a", False),
                                      transpose_b=a.get("transpose_b", False))
            b = rng.standard_normal(y.shape[-1]).astype(np.float32) * 0.1
            # A grouped conv (fewer weight input channels than the input's) takes its bias
            # as an AddV2: TensorFlow's remapper fuses Conv2D + BiasAdd into _FusedConv2D,
            # which refuses grouped convolutions at run time.
            grouped = s["op"] == "Conv2D" and s["weight"][2] != s["input"][3]
            tf.nn.relu(y + b if grouped else tf.nn.bias_add(y, b), name=f"y{i}")
    return g.as_graph_def()


def main(argv=None) -> int:
    import rstf
    from rstf.serving.tfclient import run_graphs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tuning", default="auto", help="rstf optimize --tuning (default auto)")
    ap.add_argument("--work", help="folder for the layer graph and its rstf output "
                    "(default: a temporary one)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = ap.parse_args(argv)
    specs = layers(a.model, a.batch)
    work = a.work or tempfile.mkdtemp(prefix="rstf-layers-")
    os.makedirs(work, exist_ok=True)
    pb = os.path.join(work, "layers.pb")
    with open(pb, "wb") as f:
        f.write(build(specs).SerializeToString())
    res = rstf.optimize(pb, os.path.join(work, "layers.rstf"), force=True, tuning=a.tuning,
                        verbosity=0)
    opt = os.path.join(res.output_dir, "optimized.pb")
    rng = np.random.RandomState(1)
    rows = []
    for i, s in enumerate(specs):
        feeds = {f"x{i}:0": rng.uniform(0, 1, s["input"]).astype(np.float32)}
        _, (tf_ms, rstf_ms) = run_graphs([pb, opt], [res.library], feeds, [f"y{i}:0"], a.reps)
        row = {**{k: s[k] for k in ("op", "input", "weight")},
               "attrs": {k: (v.decode() if isinstance(v, bytes) else v)
                         for k, v in s["attrs"].items() if k in ("strides", "padding")},
               "layers": len(s["nodes"]), "first": s["nodes"][0],
               "tf_ms": statistics.median(tf_ms), "rstf_ms": statistics.median(rstf_ms)}
        row["ratio"] = row["rstf_ms"] / row["tf_ms"]
        rows.append(row)
        print(f"{i:3d} {row['op']:6s} {str(row['input']):20s} {str(row['weight']):20s} "
              f"{str(row['attrs'].get('strides', ''))[:14]:14s} x{row['layers']:<2d} "
              f"TF {row['tf_ms']:8.3f} ms  rstf {row['rstf_ms']:8.3f} ms  {row['ratio']:5.2f}",
              flush=True)
    slower = [r for r in rows if r["ratio"] > 1.0]
    geo = math.exp(statistics.mean(math.log(r["ratio"]) for r in rows))
    print(f"{len(rows)} distinct layers ({sum(r['layers'] for r in rows)} in the model), "
          f"batch {a.batch}: rstf slower than TensorFlow on {len(slower)}, geomean "
          f"{geo:.2f}x, worst {max(r['ratio'] for r in rows):.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "batch": a.batch, "tuning": a.tuning,
                       "rows": rows, "geomean": geo}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
