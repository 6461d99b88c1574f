"""Generated code under AddressSanitizer and UndefinedBehaviorSanitizer (RSTF_SANITIZE=1).

Each test runs a child pytest/python with the sanitizer runtimes preloaded, so a report in
generated code aborts the child and fails the test.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from rstf.build.compiler import sanitizer_env

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def run_sanitized(args, timeout=3000):
    env = {**os.environ, **sanitizer_env()}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.sanitize
def test_sanitizers_are_really_on(tmp_path):
    """An off-by-one in 'generated' code is reported, so a clean run means something."""
    code = textwrap.dedent(f"""
        import ctypes, numpy as np
        from rstf.build.compiler import compile_c_shared
        src = "void rstf_sg_0(const float *in0, float *out0, void *ws) {{ for (int i = 0; i <= 4; ++i) out0[i] = in0[i]; }}"
        compile_c_shared(src, {str(tmp_path / 'oob.so')!r})
        lib = ctypes.CDLL({str(tmp_path / 'oob.so')!r})
        a = np.ones(4, np.float32); b = np.zeros(4, np.float32)
        lib.rstf_sg_0(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p), None)
        print("not caught")
    """)
    r = run_sanitized(["-c", code])
    assert r.returncode != 0 and "not caught" not in r.stdout
    assert "AddressSanitizer" in r.stderr


@pytest.mark.sanitize
def test_op_generators_under_sanitizers():
    # About 450 tests, each building and running its C with ASan: on two workers
    # (pytest-xdist) they take about half the time of one. The timeout leaves room for the
    # suite's other worker competing for the same cores.
    r = run_sanitized(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "2",
                       "tests/test_opgen.py"] + [
                          f for f in ("tests/test_opgen_nn.py", "tests/test_opgen_more.py",
                                      "tests/test_poly_schedule.py", "tests/test_poly_emit.py",
                                      "tests/test_poly_prefetch.py", "tests/test_poly_microkernel.py",
                                      "tests/test_poly_contraction.py", "tests/test_poly_lower.py",
                                      "tests/test_poly_band.py", "tests/test_poly_winograd.py",
                                      "tests/test_poly_rowblock.py")
                          if os.path.exists(os.path.join(ROOT, f))])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout


@pytest.mark.sanitize
def test_one_model_under_sanitizers():
    r = run_sanitized(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                       "tests/test_models.py", "-k",
                       "test_model_optimizes_and_matches and inception_v3"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed" in r.stdout
