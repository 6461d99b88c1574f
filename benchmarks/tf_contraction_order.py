"""Which summation order TensorFlow's float MatMul takes on this machine, shape by shape.

    python3 benchmarks/tf_contraction_order.py [MxKxN | conv:HxWxC:KHxKW:OC[:sS][:valid] ...]
                                               [--seed S]

For each product [M, K] x [K, N] (default: a few shapes of the CNN zoo and of BERT), runs
TensorFlow's MatMul with its Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0, the reference of
`rstf compare`) and counts, for each candidate order emulated in numpy, the outputs whose
bits differ from TF's. A `conv:` shape is a batch-1 Conv2D of an H x W x C input with a
KH x KW x C x OC filter (stride S, default 1; SAME padding unless `valid`): TensorFlow's
spatial convolution is a contraction of the image patches, [OH*OW, KH*KW*C] with the
channels innermost and the padding as zeros, with the [KH*KW*C, OC] filter, and the
candidates are the same orders over that reduction. The candidates:

- `fma`: one fused multiply-add chain along k from zero (what rstf's contractions compute);
- `fma/kcB`: k in slices of B, each slice one chain from zero, the slices' sums added in
  turn (Eigen's contraction cut into k blocks, each block run by oneDNN's sgemm);
- `fma/tf`: those slices as rstf computes them for a multi-threaded product and a
  convolution (`rstf.opgen.kslices.tf_conv_k_slices`: Eigen's, up to 320 steps, equal,
  rounded up to 8, each cut by this machine's oneDNN sgemm blocks);
- `muladd/bB`: blocks of B, each a chain of products rounded then added, from zero, the
  blocks' sums added in turn (Eigen's own kernels built without FMA: a one-row product
  is its matrix-vector kernel, blocks of 16, or all of k below 128);
- `fma/plan`: `rstf.opgen.kslices.tf_k_plan`'s blocks (Eigen's cost model's decisions for
  a plain product: one thread, or k sharded over the threads), where it has one;
- `fma2`: two chains, even and odd k, then their sum;
- `fma/tf+pairs`: `fma/tf`, but the 1 to 8 columns past the last 16 (where there are such)
  sum each slice as `fma2` does: oneDNN's one-vector remainder kernel on an AVX2 machine
  (docs/limitations.md; rstf does not follow it).

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
from rstf.opgen.kslices import tf_conv_k_slices, tf_k_plan  # noqa: E402

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


def two_chains(a, b, lo: int, hi: int):
    """The sum over k in [lo, hi) as two fused chains from zero, the even and the odd steps,
    then their sum."""
    return (chain(a, b, range(lo, hi, 2), True)
            + chain(a, b, range(lo + 1, hi, 2), True)).astype(np.float32)


def planned(a, b, blocks, fused: bool = True, part=None):
    """`blocks` of k slices (`tf_k_plan`'s form): each slice summed from zero by `chain`
    (or by `part(a, b, lo, hi)`), a block's slices added in turn, then the blocks' sums in
    turn."""
    out = None
    for block in blocks:
        s = None
        for lo, hi in block:
            p = part(a, b, lo, hi) if part else chain(a, b, range(lo, hi), fused)
            s = p if s is None else (s + p).astype(np.float32)
        out = s if out is None else (out + s).astype(np.float32)
    return out


def paired(a, b, blocks, cols: int):
    """`planned` over `blocks`, with the last `cols` columns of each slice summed by
    `two_chains`."""
    out = planned(a, b, blocks)
    out[:, b.shape[1] - cols:] = planned(a, b[:, b.shape[1] - cols:], blocks, part=two_chains)
    return out


def blocked(a, b, size: int, fused: bool):
    """k in blocks of `size`, each summed from zero by `chain`, the sums added in turn."""
    k = a.shape[1]
    return planned(a, b, [[(k0, min(k, k0 + size))] for k0 in range(0, k, size)], fused)


def patches(x, kh: int, kw: int, stride: int, same: bool):
    """The [OH*OW, KH*KW*C] image patches of a [H, W, C] input, as TensorFlow's spatial
    convolution contracts them: taps row by row, channels innermost, padding as zeros."""
    h, w, _ = x.shape
    if same:
        oh, ow = -(-h // stride), -(-w // stride)
        ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - w, 0)
        x = np.pad(x, ((ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    taps = [x[i:i + stride * oh:stride, j:j + stride * ow:stride, :]
            for i in range(kh) for j in range(kw)]
    return np.stack(taps, axis=2).reshape(oh * ow, -1)


def parse_shape(text: str):
    """`MxKxN` as ("matmul", (m, k, n)), or a `conv:` shape (module docstring) as ("conv",
    (h, w, c, kh, kw, oc, stride, same)); ValueError where it is neither."""
    if not text.lower().startswith("conv:"):
        m, k, n = (int(x) for x in text.lower().split("x"))
        return "matmul", (m, k, n)
    parts = text.lower().split(":")[1:]
    if len(parts) < 3:
        raise ValueError(text)
    h, w, c = (int(x) for x in parts[0].split("x"))
    kh, kw = (int(x) for x in parts[1].split("x"))
    oc, stride, same = int(parts[2]), 1, True
    for opt in parts[3:]:
        if opt == "valid":
            same = False
        elif opt.startswith("s"):
            stride = int(opt[1:])
        else:
            raise ValueError(text)
    return "conv", (h, w, c, kh, kw, oc, stride, same)


def operands(tf, kind: str, dims, rng):
    """(lhs [M, K], rhs [K, N], TensorFlow's [M, N] result) for a parsed shape: inputs
    uniform in [0, 1), weights normal / sqrt(K)."""
    if kind == "matmul":
        m, k, n = dims
        lhs = rng.random((m, k), dtype=np.float32)
        rhs = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        return lhs, rhs, tf.matmul(lhs, rhs).numpy()
    h, w, c, kh, kw, oc, stride, same = dims
    x = rng.random((h, w, c), dtype=np.float32)
    f = (rng.standard_normal((kh, kw, c, oc)) / np.sqrt(kh * kw * c)).astype(np.float32)
    ref = tf.nn.conv2d(x[None], f, stride, "SAME" if same else "VALID").numpy()
    return patches(x, kh, kw, stride, same), f.reshape(-1, oc), ref.reshape(-1, oc)


def candidates(a, b) -> dict:
    """{name: [M, N] result} of every candidate order (module docstring)."""
    k = a.shape[1]
    out = {"fma": chain(a, b, range(k), True),
           "fma2": two_chains(a, b, 0, k)}
    for size in (64, 128, 192, 256, 320, 384, 512):
        if size < k:
            out[f"fma/kc{size}"] = blocked(a, b, size, True)
    sliced = [[s] for s in tf_conv_k_slices(k)]
    out["fma/tf"] = planned(a, b, sliced)
    if 1 <= b.shape[1] % 16 <= 8:
        out["fma/tf+pairs"] = paired(a, b, sliced, b.shape[1] % 16)
    plan = tf_k_plan(a.shape[0], k, b.shape[1])
    if plan and plan != sliced:
        out["fma/plan"] = planned(a, b, plan)
    for size in (4, 8, 16, 32, k):
        out[f"muladd/b{size}"] = blocked(a, b, size, False)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES, metavar="SHAPE",
                   help="MxKxN, or conv:HxWxC:KHxKW:OC[:sS][:valid]")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    rng = np.random.default_rng(a.seed)
    for text in a.shapes:
        try:
            kind, dims = parse_shape(text)
        except ValueError:
            p.error(f"shape {text!r} is neither MxKxN nor conv:HxWxC:KHxKW:OC[:sS][:valid]")
        lhs, rhs, ref = operands(tf, kind, dims, rng)
        ref = ref.view(np.uint32)
        diffs = sorted((int((c.view(np.uint32) != ref).sum()), name)
                       for name, c in candidates(lhs, rhs).items())
        print(f"{text} ({ref.size} outputs, K {lhs.shape[1]}): "
              + ", ".join(f"{name} {d}" for d, name in diffs[:5]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
