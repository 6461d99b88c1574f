"""rstf/cgen/chelpers.py: the generated C's own vectorisable exp."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np
import pytest

from rstf.build.compiler import c_flags
from rstf.cgen.chelpers import EXPF, helpers_for

# A loop over the helper the way Softmax's exp statement calls it (`omp simd`), and the
# same loop over libm's expf.
_HARNESS = """
#include <math.h>
%s
__attribute__((visibility("default"))) void vexp(const float *x, float *y, long n)
{
    #pragma omp simd
    for (long i = 0; i < n; ++i) y[i] = rstf_expf(x[i]);
}
"""


@pytest.fixture(scope="module")
def built():
    with tempfile.TemporaryDirectory() as d:
        src, so = os.path.join(d, "e.c"), os.path.join(d, "e.so")
        with open(src, "w") as f:
            f.write(_HARNESS % EXPF)
        subprocess.run(["gcc", *c_flags(), "-shared", src, "-o", so, "-lm"], check=True)
        asm = subprocess.run(["objdump", "-d", so], capture_output=True, text=True).stdout
        lib = ctypes.CDLL(so)
        lib.vexp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
        yield lib, asm


def _vexp(lib, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.full_like(x, np.nan)
    lib.vexp(x.ctypes.data, y.ctypes.data, x.size)
    return y


def test_within_one_ulp_of_exp_over_the_whole_float_range(built):
    lib, _ = built
    # Every float result from the smallest normal to FLT_MAX, densely, plus Softmax's
    # typical range; the reference is exp in double, rounded once.
    x = np.concatenate([np.linspace(-87.33, 88.72, 2_000_003, dtype=np.float32),
                        np.linspace(-20, 0, 100_001, dtype=np.float32)])
    got = _vexp(lib, x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - ref) / ulp) <= 1.01  # measured 1.0006


def test_special_values_and_the_ends_of_the_range(built):
    lib, _ = built
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 89.0, 88.8, 1e30, -1e30, -104.0,
                  -200.0, -88.0, -100.0], dtype=np.float32)
    got = _vexp(lib, x)
    assert np.isnan(got[0])
    assert got[1] == np.inf and got[2] == 0.0
    assert got[3] == 1.0 and got[4] == 1.0 and got[5] == np.float32(np.e)
    assert got[6] == np.inf and got[7] == np.inf and got[8] == np.inf  # past FLT_MAX
    assert got[9] == 0.0 and got[10] == 0.0 and got[11] == 0.0        # below subnormals
    # The subnormal range: the result rounds to the nearest subnormal (one rounding more).
    ref = np.exp(x[12:].astype(np.float64))
    assert np.all(np.abs(got[12:] - ref) <= np.float64(2 ** -149))


def test_the_simd_loop_vectorises_without_a_libm_call(built):
    _, asm = built
    body = asm.split("<vexp>:")[1].split("\n\n")[0]
    assert "call" not in body  # no expf@plt, no vector-ABI libmvec call either
    # Vectorised at the width gcc's tuning for this CPU prefers: 512-bit on some AVX-512
    # parts, 256-bit on others (-mprefer-vector-width=256, e.g. -march=rocketlake).
    if "avx2" in open("/proc/cpuinfo").read():
        assert "zmm" in body or "ymm" in body


def test_a_file_defines_only_the_helpers_it_calls():
    assert helpers_for(["y[i] = rstf_expf(x[i]);"]) == EXPF
    assert helpers_for(["y[i] = expf(x[i]);", "y[i] = x[i];"]) == ""


_LIBM_LOOPS = """
#include <math.h>
%s
#define LOOP(f) __attribute__((visibility("default"))) void v##f(const float *x, float *y, \\
    long n) { for (long i = 0; i < n; ++i) y[i] = f(x[i]); }
LOOP(tanhf)
LOOP(erff)
LOOP(erfcf)
"""


def _build_libm_loops(d, flags):
    from rstf.build.compiler import link_libs

    src, so = os.path.join(d, "m.c"), os.path.join(d, f"m{len(flags)}.so")
    with open(src, "w") as f:
        f.write(_LIBM_LOOPS % helpers_for(["tanhf(x)"]))
    subprocess.run(["gcc", *flags, "-shared", src, "-o", so, "-lm", *link_libs(flags)],
                   check=True)
    asm = subprocess.run(["objdump", "-d", so], capture_output=True, text=True).stdout
    return ctypes.CDLL(so), asm


@pytest.mark.parametrize("with_libmvec", [True, False])
def test_libm_loops_vectorise_with_libmvec_and_stay_within_its_bounds(with_libmvec):
    """With RSTF_LIBMVEC (where build.vector_math finds glibc's libmvec), the loops call
    its vector versions; without it the same C calls the scalar functions. Either way the
    results are within the bounds chelpers states, against the result in double."""
    from math import erf, erfc, tanh

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
        for name, ref, bounds in (("tanhf", tanh, (1.5, 2.5)), ("erff", erf, (4.0, 1.5)),
                                  ("erfcf", erfc, (2.0, 3.5))):
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
