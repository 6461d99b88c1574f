"""rstf/build/compiler.py's vector-width preference (`VECTOR_WIDTH_FLAG`): gcc vectorises
the generated C's own loops at 512 bits on AVX-512 machines, with the same bits as at 256,
and leaves the code for machines without AVX-512 as it was."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from rstf.build.compiler import VECTOR_WIDTH_FLAG, c_flags, link_libs
from rstf.cgen.chelpers import helpers_for
from rstf.poly.target import cpu_flags

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None
                                or platform.machine() not in ("x86_64", "AMD64"),
                                reason="compiles x86-64 code with gcc")

# Loops of the kinds gcc vectorises itself in the generated C: an epilogue chain calling
# TensorFlow's tanh, sigmoid, exp and erf (GELU, swish), a division, a select, and a
# row's reciprocal square root (a layer norm).
_FUNCTIONS = ("rstf_tanhf", "rstf_logisticf", "rstf_expf", "rstf_erff", "rstf_rsqrtf")
_LOOPS = """
%s
#define LOOP(f) __attribute__((visibility("default"))) void v_##f( \\
    const float *restrict x, float *restrict y, long n) { \\
    _Pragma("omp simd") for (long i = 0; i < n; ++i) y[i] = f(x[i]); }
%s
__attribute__((visibility("default"))) void v_gelu(const float *restrict x,
                                                   float *restrict y, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) {
        const float c = x[i] * x[i] * x[i];
        const float t = rstf_tanhf(0.7978845608f * (x[i] + 0.044715f * c));
        y[i] = (0.5f * x[i]) * (1.0f + t) / (x[i] > 0.0f ? 1.0f : 1.0f + 1e-7f * x[i]);
    }
}
"""


def _source() -> str:
    calls = [f"{f}(x)" for f in _FUNCTIONS]
    loops = "\n".join(f"LOOP({f})" for f in _FUNCTIONS)
    return _LOOPS % (helpers_for(calls), loops)


def _compile(tmp_path, flags, name, *, shared=True) -> str:
    src = tmp_path / "loops.c"
    src.write_text(_source())
    out = tmp_path / (name + (".so" if shared else ".s"))
    cmd = ["gcc", *flags, "-shared" if shared else "-S", str(src), "-o", str(out)]
    subprocess.run(cmd + (["-lm", *link_libs(flags)] if shared else []), check=True,
                   capture_output=True)
    return str(out)


def _without(flags, flag):
    return [f for f in flags if f != flag]


def test_every_op_library_prefers_the_wide_vectors():
    assert VECTOR_WIDTH_FLAG == "-mprefer-vector-width=512"
    assert VECTOR_WIDTH_FLAG in c_flags("native") and VECTOR_WIDTH_FLAG in c_flags("")


@pytest.mark.parametrize("march", ["haswell", "znver3", "x86-64-v2"])
def test_machines_without_avx512_get_the_same_code(tmp_path, march):
    """The preference only ever picks among the vector widths the ISA has."""
    flags = [f for f in c_flags(march) if f != "-fPIC"]
    wide = _compile(tmp_path, flags, "wide", shared=False)
    narrow = _compile(tmp_path, _without(flags, VECTOR_WIDTH_FLAG), "narrow", shared=False)
    assert open(wide).read() == open(narrow).read()


def test_avx512_code_uses_512_bit_vectors(tmp_path):
    flags = [f for f in c_flags("skylake-avx512") if f != "-fPIC"]
    wide = open(_compile(tmp_path, flags, "wide", shared=False)).read()
    narrow = open(_compile(tmp_path, _without(flags, VECTOR_WIDTH_FLAG), "narrow",
                           shared=False)).read()
    assert "zmm" in wide and "zmm" not in narrow


@pytest.mark.skipif("avx512f" not in cpu_flags(), reason="runs AVX-512 code")
def test_avx512_results_are_the_same_bits_at_either_width(tmp_path):
    flags = c_flags("native")
    libs = {name: ctypes.CDLL(_compile(tmp_path, fl, name)) for name, fl in
            (("wide", flags), ("narrow", _without(flags, VECTOR_WIDTH_FLAG)))}
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64)
                        .astype(np.uint32).view(np.float32),
                        np.linspace(-12, 12, 100_003, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 7.90738964, -104.0],
                                 np.float32)])
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    for f in [*_FUNCTIONS, "gelu"]:
        ys = {}
        for name, lib in libs.items():
            ys[name] = np.empty_like(x)
            getattr(lib, f"v_{f}")(ptr(x), ptr(ys[name]), ctypes.c_long(x.size))
        assert ys["wide"].view(np.uint32).tolist() == ys["narrow"].view(np.uint32).tolist(), f


def test_the_serving_package_builds_with_the_same_preference(tmp_path):
    from rstf.serving import write_serving_ops

    write_serving_ops(str(tmp_path / "pkg"), {"subgraph_0.c": "int x;\n"}, "", {}, "m",
                      march="native")
    assert f'"{VECTOR_WIDTH_FLAG}",' in (tmp_path / "pkg" / "BUILD").read_text()
    assert os.path.isfile(tmp_path / "pkg" / "subgraph_0.c")
