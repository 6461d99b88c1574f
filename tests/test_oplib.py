"""The op library's runtime (custom_ops/rstf_kernel.h, the generated wrapper): it exports
nothing of its own, so that op libraries of any rstf versions in one process never bind to
each other's helpers."""
from __future__ import annotations

import os
import subprocess

import pytest

from rstf.pipeline import optimize
from rstf.tfutil import tf

from harness import make_graph_def, save_graph_def


def pad_only():
    x = tf.compat.v1.placeholder(tf.float32, [None, 0], name="x")
    tf.identity(tf.pad(x, [[0, 0], [2, 2]]) * 2.0, name="out")


def pad_and_add():
    x = tf.compat.v1.placeholder(tf.float32, [None, 0], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 4], name="y")
    tf.identity(tf.pad(x, [[0, 0], [2, 2]]) + y, name="out")


def _optimize(tmp_path_factory, build, optimizer):
    d = tmp_path_factory.mktemp(build.__name__)
    model = save_graph_def(make_graph_def(build), str(d))
    out = str(d / "out")
    report = optimize(model, out, log=lambda m: None, optimizer=optimizer)
    assert report["dynamic_batch"] and len(report["subgraphs"]) == 1
    return out, report


@pytest.fixture(scope="module")
def team_lib(tmp_path_factory):
    """pad_only, on rstf's OpenMP team (`none`: the polyhedral pass is beside the point)."""
    return _optimize(tmp_path_factory, pad_only, "none")


@pytest.fixture(scope="module")
def master_lib(tmp_path_factory):
    """pad_and_add, without the team (Graphite's code runs on OmpMaster and libgomp)."""
    return _optimize(tmp_path_factory, pad_and_add, "graphite")


def _exports(lib: str) -> list[tuple[str, str]]:
    """(type, demangled name) of each symbol the library defines for others to bind to."""
    proc = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], capture_output=True,
                          text=True, check=True)
    return [(f[1], f[2]) for f in (ln.split(maxsplit=2) for ln in proc.stdout.splitlines())
            if len(f) == 3]


@pytest.mark.tfbuild
@pytest.mark.parametrize("which", ["team_lib", "master_lib"])
def test_library_exports_nothing_of_its_own(which, request):
    """No GNU-unique symbol (one instance per process, whichever library defined it first:
    OmpMaster's master was one) and nothing of rstf's runtime, the team's or the generated
    code's."""
    out, report = request.getfixturevalue(which)
    exports = _exports(os.path.join(out, report["library"]))
    assert not [e for e in exports if e[0] == "u"], exports
    assert not [e for e in exports
                if "rstf" in e[1].lower() or e[1].startswith(("GOMP_", "omp_"))], exports
