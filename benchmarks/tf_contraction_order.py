"""Which summation order TensorFlow's float MatMul takes on this machine, shape by shape.

    python3 benchmarks/tf_contraction_order.py [MxKxN ...] [--seed S]

For each product [M, K] x [K, N] (default: a few shapes of the CNN zoo and of BERT), runs
TensorFlow's MatMul with its Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0, the reference of
`rstf compare`) and counts, for each candidate order emulated in numpy, the outputs whose
bits differ from TF's:

- `fma`: one fused multiply-add chain along k from zero (what rstf's contractions compute);
- `fma/kcB`: k in slices of B, each slice one chain from zero, the slices' sums added in
  turn (Eigen's contraction cut into k blocks, each block run by oneDNN's sgemm);
- `fma/tf`: those slices as rstf computes them (`rstf.opgen.kslices.tf_k_slices`: up to
  320 steps, equal, rounded up to 8);
- `muladd/bB`: blocks of B, each a chain of products rounded then added, from zero, the
  blocks' sums added in turn (Eigen's own kernels built without FMA: a one-row product
  is its matrix-vector kernel, blocks of 16, or all of k below 128);
- `fma2`: two chains, even and odd k, then their sum.

Prints one line a shape: the candidates, fewest differing outputs first. A 0 is TF's order
for that shape; a count below the others' can be an order that holds for part of the
outputs only (oneDNN's kernel takes 6 rows by 16 columns on AVX2, and the rows and
columns past the last whole tile take another order). The orders depend on the processor
TF dispatches for (oneDNN picks its kernels at run time) and on its cache sizes (Eigen's k
blocks), so run it on the machine in question; rstf's own contractions take `fma/tf` where
the product is not one row, else `fma` (docs/limitations.md).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

# Read once, when TensorFlow is imported, and rstf's modules import it: before them.
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from rstf.opgen.kslices import tf_k_slices  # noqa: E402

DEFAULT_SHAPES = ["1x1280x1000", "1x96x24", "144x16x24", "144x16x32", "16x256x64",
                  "64x1024x128", "128x768x256"]


def chain(a, b, ks, fused: bool):
    """The [M, N] sum over k in `ks` of a[:, k] b[k, :], in turn from zero: each step one
    rounding (`fused`, exact product in float64 then rounded) or two (product, then sum)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in ks:
        p = a[:, k:k + 1].astype(np.float64) * b[k:k + 1, :].astype(np.float64)
        acc = ((acc + p).astype(np.float32) if fused
               else (acc + p.astype(np.float32)).astype(np.float32))
    return acc


def blocked(a, b, size: int, fused: bool):
    """k in blocks of `size`, each summed from zero by `chain`, the sums added in turn."""
    k = a.shape[1]
    out = None
    for k0 in range(0, k, size):
        part = chain(a, b, range(k0, min(k, k0 + size)), fused)
        out = part if out is None else (out + part).astype(np.float32)
    return out


def candidates(a, b) -> dict:
    """{name: [M, N] result} of every candidate order (module docstring)."""
    k = a.shape[1]
    out = {"fma": chain(a, b, range(k), True),
           "fma2": (chain(a, b, range(0, k, 2), True)
                    + chain(a, b, range(1, k, 2), True)).astype(np.float32)}
    for size in (64, 128, 192, 256, 320, 384, 512):
        if size < k:
            out[f"fma/kc{size}"] = blocked(a, b, size, True)
    out["fma/tf"] = blocked(a, b, tf_k_slices(k)[0][1], True)
    for size in (4, 8, 16, 32, k):
        out[f"muladd/b{size}"] = blocked(a, b, size, False)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES, metavar="MxKxN")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    rng = np.random.default_rng(a.seed)
    for text in a.shapes:
        try:
            m, k, n = (int(x) for x in text.lower().split("x"))
        except ValueError:
            p.error(f"shape {text!r} is not MxKxN")
        lhs = rng.random((m, k), dtype=np.float32)
        rhs = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        ref = tf.matmul(lhs, rhs).numpy().view(np.uint32)
        diffs = sorted((int((c.view(np.uint32) != ref).sum()), name)
                       for name, c in candidates(lhs, rhs).items())
        print(f"{m}x{k}x{n} ({m * n} outputs): "
              + ", ".join(f"{name} {d}" for d, name in diffs[:5]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
