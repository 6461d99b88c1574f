"""rstf/cgen/chelpers.py and tfmath.py: the generated C's own exp, sigmoid, tanh, erf, rsqrt
and reciprocal (TensorFlow's, bit for bit) and the libmvec declarations."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np
import pytest

from rstf.build.compiler import c_flags
from rstf.cgen import tfmath
from rstf.cgen.chelpers import helpers_for

from benchmarks.tfmath_exhaustive import OPS, build, differing


@pytest.fixture(scope="module")
def built():
    with tempfile.TemporaryDirectory() as d:
        yield build(d)


def _inputs() -> np.ndarray:
    """Random bit patterns (every sign, exponent, NaNs, infinities, subnormals), dense sweeps
    of the ranges where the functions are not constant, and the ends of their clamps. A
    multiple of 8 elements: TensorFlow computes a tensor's last (size mod 8) elements with its
    scalar path (tfmath.py)."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2 ** 32, 1 << 21, dtype=np.uint64).astype(np.uint32)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 88.723, 88.73,
                        88.72, 89.0, -104.0, -104.01, -103.99, -87.0, -87.5, 87.0, 16.6355324,
                        16.64, -16.64, 7.90738964, -7.90738964, 8.0, -8.0, 4.0, -4.0, 1e30,
                        -1e30, 1e-30, -1e-30, 2.0 ** -126, 2.0 ** -149, 0.5], dtype=np.float32)
    x = np.concatenate([bits.view(np.float32), special,
                        np.linspace(-110, 90, 1_000_000, dtype=np.float32),
                        np.linspace(-9, 9, 1_000_000, dtype=np.float32)])
    return np.concatenate([x, np.zeros(-x.size % 8, np.float32)])


@pytest.mark.parametrize("f", sorted(OPS))
def test_bit_identical_to_tensorflows_kernel(built, f):
    lib, _ = built
    x = _inputs()
    bad, got, want = differing(lib, f, x)
    assert bad.size == 0, [(float(x[i]), float(got[i]), float(want[i])) for i in bad[:5]]


def test_the_simd_loops_vectorise_without_a_libm_call(built):
    _, asm = built
    # rsqrt and the reciprocal are the processor's scalar estimates: not vectorised.
    for f in OPS.keys() - {"rstf_rsqrtf", "rstf_recipf"}:
        body = asm.split(f"<loop_{f}>:")[1].split("\n\n")[0]
        assert "call" not in body, f  # no libm call, no vector-ABI libmvec call either
        # At the width gcc's tuning for this CPU prefers: 512-bit on some AVX-512 parts,
        # 256-bit on others (-mprefer-vector-width=256, e.g. -march=rocketlake).
        if "avx2" in open("/proc/cpuinfo").read():
            assert "zmm" in body or "ymm" in body, f


def test_a_file_defines_only_the_helpers_it_calls():
    assert helpers_for(["y[i] = rstf_expf(x[i]);"]) == tfmath.BLENDF + "\n" + tfmath.EXPF
    both = helpers_for(["y[i] = rstf_erff(x[i]);", "z = rstf_logisticf(y[i]);"])
    assert both == "\n".join([tfmath.BLENDF, tfmath.LOGISTICF, tfmath.ERFF])
    assert helpers_for(["y[i] = expf(x[i]);", "y[i] = x[i];"]) == ""


_LIBM_LOOPS = """
#include <math.h>
%s
#define LOOP(f) __attribute__((visibility("default"))) void v##f(const float *x, float *y, \\
    long n) { for (long i = 0; i < n; ++i) y[i] = f(x[i]); }
LOOP(erfcf)
"""


def _build_libm_loops(d, flags):
    from rstf.build.compiler import link_libs

    src, so = os.path.join(d, "m.c"), os.path.join(d, f"m{len(flags)}.so")
    with open(src, "w") as f:
        f.write(_LIBM_LOOPS % helpers_for(["erfcf(x)"]))
    subprocess.run(["gcc", *flags, "-shared", src, "-o", so, "-lm", *link_libs(flags)],
                   check=True)
    asm = subprocess.run(["objdump", "-d", so], capture_output=True, text=True).stdout
    return ctypes.CDLL(so), asm


@pytest.mark.parametrize("with_libmvec", [True, False])
def test_libm_loops_vectorise_with_libmvec_and_stay_within_its_bounds(with_libmvec):
    """With RSTF_LIBMVEC (where build.vector_math finds glibc's libmvec), the erfcf loop
    calls its vector versions; without it the same C calls the scalar function. Either way
    the results are within the bounds chelpers states, against the result in double."""
    from math import erfc

    from rstf.build.compiler import LIBMVEC_FLAG, vector_math

    if with_libmvec and not vector_math("gcc"):
        pytest.skip("this C library has no libmvec (glibc < 2.35 or not x86-64)")
    flags = [f for f in c_flags() if f != LIBMVEC_FLAG] + ([LIBMVEC_FLAG] if with_libmvec
                                                           else [])
    with tempfile.TemporaryDirectory() as d:
        lib, asm = _build_libm_loops(d, flags)
        x = np.concatenate([np.linspace(-12, 12, 200001, dtype=np.float32),
                            np.float32(2.0) ** -np.arange(1, 120, dtype=np.float32)])
        # (libmvec's bound, glibc's scalar one: chelpers.py)
        for name, ref, bounds in (("erfcf", erfc, (2.0, 3.5)),):
            bound = bounds[0] if with_libmvec else bounds[1]
            assert ("_ZGV" in asm and f"v_{name}" in asm) == with_libmvec, name
            y = np.empty_like(x)
            getattr(lib, f"v{name}")(x.ctypes.data_as(ctypes.c_void_p),
                                     y.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(x.size))
            want = np.array([ref(float(v)) for v in x])
            ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
            ulp = np.maximum(ulp, np.float64(np.finfo(np.float32).smallest_subnormal))
            err = np.abs(y.astype(np.float64) - want) / ulp
            assert err.max() <= bound, (name, float(err.max()), float(x[err.argmax()]))


def test_vector_math_is_false_without_a_compiler():
    from rstf.build.compiler import vector_math

    assert vector_math("no-such-compiler-rstf") is False
