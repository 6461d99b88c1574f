"""Check rstf's float exp, sigmoid, tanh, erf, rsqrt and reciprocal (rstf/cgen/tfmath.py) against
TensorFlow's own kernels on every float: the 2^32 bit patterns, in chunks, each helper in the
`omp simd` loop an elementwise statement makes, compiled with the op library's C flags and
run under the flushed denormals TensorFlow runs with.

    python3 benchmarks/tfmath_exhaustive.py [--functions rstf_expf,...] [--stride S]

Prints, per function, the number of inputs whose bits differ (NaN against NaN counts as equal)
and the first few, and exits 1 if any does. `--stride S` checks every S-th bit pattern only.
Run it after a TensorFlow upgrade: the helpers reproduce the algorithms of one TensorFlow build.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# Each helper and the TensorFlow op whose float kernel it reproduces.
OPS = {"rstf_expf": "Exp", "rstf_logisticf": "Sigmoid", "rstf_tanhf": "Tanh",
       "rstf_erff": "Erf", "rstf_rsqrtf": "Rsqrt", "rstf_recipf": "Reciprocal"}

_HARNESS = """
#include <math.h>
#include <xmmintrin.h>
%s
""" + "".join(f"""
__attribute__((noinline)) static void loop_{f}(const float *x, float *y, long n)
{{
    #pragma omp simd
    for (long i = 0; i < n; ++i) y[i] = {f}(x[i]);
}}
__attribute__((visibility("default"))) void v_{f}(const float *x, float *y, long n)
{{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  /* FTZ and DAZ, as in TensorFlow's threads */
    loop_{f}(x, y, n);
    _mm_setcsr(csr);
}}
""" for f in OPS)


def build(directory: str):
    """Compile the helpers' loops into a library in `directory`: (ctypes library, its
    disassembly). `v_<helper>(x, y, n)` runs one over n floats."""
    from rstf.build.compiler import c_flags
    from rstf.cgen.chelpers import helpers_for

    src, so = os.path.join(directory, "tfmath.c"), os.path.join(directory, "tfmath.so")
    with open(src, "w") as f:
        f.write(_HARNESS % helpers_for([f"{f}(x)" for f in OPS]))
    subprocess.run(["gcc", *c_flags(), "-shared", src, "-o", so, "-lm"], check=True)
    asm = subprocess.run(["objdump", "-d", so], capture_output=True, text=True).stdout
    return ctypes.CDLL(so), asm


def run(lib, helper: str, x: np.ndarray) -> np.ndarray:
    """The helper's results on float32 `x`."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.full_like(x, np.nan)
    getattr(lib, f"v_{helper}")(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                                ctypes.c_long(x.size))
    return y


def differing(lib, helper: str, x: np.ndarray):
    """Indices where the helper's bits differ from TensorFlow's kernel on `x` (a multiple of
    8 elements: TensorFlow computes a tensor's last size mod 8 with its scalar path)."""
    import tensorflow as tf

    got = run(lib, helper, x)
    want = getattr(tf.raw_ops, OPS[helper])(x=tf.constant(x)).numpy()
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    return np.flatnonzero(~same), got, want


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--functions", default=",".join(OPS), help="helpers to check")
    ap.add_argument("--stride", type=int, default=1, help="check every S-th bit pattern")
    ap.add_argument("--chunk", type=int, default=1 << 24, help="patterns per TensorFlow call")
    args = ap.parse_args(argv)
    names = [f for f in args.functions.split(",") if f]
    unknown = [f for f in names if f not in OPS]
    if unknown:
        ap.error(f"unknown helper {', '.join(unknown)} (known: {', '.join(OPS)})")
    if args.stride < 1 or args.chunk < 8 or args.chunk % 8:
        ap.error("--stride must be at least 1 and --chunk a positive multiple of 8")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        lib, _ = build(d)
        for helper in names:
            t0, bad, examples = time.time(), 0, []
            step = args.chunk * args.stride
            for start in range(0, 1 << 32, step):
                bits = np.arange(start, min(start + step, 1 << 32), args.stride, dtype=np.uint64)
                x = bits.astype(np.uint32).view(np.float32)
                x = np.concatenate([x, np.zeros(-x.size % 8, np.float32)])
                idx, got, want = differing(lib, helper, x)
                bad += idx.size
                examples += [(float(x[i]), float(got[i]), float(want[i]))
                             for i in idx[:max(0, 5 - len(examples))]]
            print(f"{helper} ({OPS[helper]}): {bad} differing of {(1 << 32) // args.stride} "
                  f"inputs, {time.time() - t0:.0f} s" + (f"; first: {examples}" if bad else ""),
                  flush=True)
            failed += bad > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
