"""The vector target the pass shapes its C for (rstf/poly/target.py): which ISA the build's
-march enables, and for AVX-512 on this machine, whether its FMA pipes are full width."""
from __future__ import annotations

import os
import subprocess

import pytest

from rstf.poly import target
from rstf.poly.target import AVX2, AVX512, AVX512_FULL, SSE, TARGETS, resolve


def _native_avx512() -> bool:
    return target.detect().vlen == 16


def test_targets_resolve_by_name():
    """The optimize workers get the target by name (pipeline.py): every one round-trips."""
    for t in (AVX512, AVX512_FULL, AVX2, SSE):
        assert resolve(t.name) is t and TARGETS[t.name] is t
    with pytest.raises(ValueError, match="unknown vector target"):
        resolve("avx1024")


def test_full_width_target_differs_only_in_the_tuned_flags():
    """AVX512_FULL is AVX-512's registers with the choices measured on Zen 5."""
    assert (AVX512_FULL.vlen, AVX512_FULL.registers) == (AVX512.vlen, AVX512.registers)
    assert AVX512.single_vector_tiles and not AVX512_FULL.single_vector_tiles
    assert AVX512_FULL.merge_rows and not AVX512.merge_rows


@pytest.mark.parametrize("zmm, ymm, full", [(1.0, 1.0, True), (1.3, 1.0, True),
                                             (1.9, 1.0, False), (2.1, 1.0, False)])
def test_full_width_cut(zmm, ymm, full):
    """Full-width pipes time 512-bit FMAs like 256-bit ones (Zen 5: 29.2 us against 29.2 for
    the probe's 240K FMAs); double-pumped ones take twice as long."""
    assert target.full_width(zmm, ymm) is full


@pytest.mark.parametrize("width, expected", [(True, AVX512_FULL), (False, AVX512)])
def test_native_avx512_follows_the_fma_probe(monkeypatch, width, expected):
    """`native` AVX-512 asks the probe; a named -march never does (it may not be this
    machine): there the Zen 4 constants stay."""
    monkeypatch.setattr(target, "fma_full_width", lambda cc="gcc": width)
    macros = "#define __AVX512F__ 1\n#define __AVX__ 1\n"

    class Done:
        returncode, stdout = 0, macros

    monkeypatch.setattr(target.subprocess, "run", lambda *a, **k: Done)
    detect = target.detect.__wrapped__  # not the process's cached answer
    assert detect("native") is expected
    assert detect("skylake-avx512") is AVX512
    Done.stdout = "#define __AVX__ 1\n"
    assert detect("native") is AVX2


def test_fma_probe_builds_and_times_both_widths(tmp_path):
    """The probe's C builds; on an AVX-512 machine it runs and prints two positive times."""
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(target._FMA_PROBE)
    subprocess.run(["gcc", "-O2", "-mavx512f", "-mfma", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    # Twelve FMAs a step on each width, all in registers (no spill between them).
    dis = subprocess.run(["objdump", "-d", str(exe)], capture_output=True, text=True).stdout
    assert sum("vfmadd" in ln and "zmm" in ln for ln in dis.splitlines()) >= 12
    assert sum("vfmadd" in ln and "ymm" in ln for ln in dis.splitlines()) >= 12
    if not _native_avx512():
        return
    zmm, ymm, _ = subprocess.run([str(exe)], capture_output=True, text=True,
                                 check=True).stdout.split()
    assert float(zmm) > 0 and float(ymm) > 0
    assert isinstance(target.fma_full_width(), bool)


def test_fma_probe_without_a_compiler_says_half_width(tmp_path):
    """A compiler that cannot build the probe leaves the Zen 4 constants (False)."""
    missing = os.path.join(tmp_path, "no-such-cc")
    assert target.fma_full_width.__wrapped__(missing) is False
