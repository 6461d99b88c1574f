"""The op library's runtime (rstf/runtime/rstf_kernel.h, the generated wrapper): it exports
nothing of its own, so that op libraries of any rstf versions in one process never bind to
each other's helpers; and shapes that overflow int64 are the op's InvalidArgument error, not
a process abort (TensorShape::AddDim CHECK-fails on them).

The graphs have a dynamic batch whose samples have 0 elements in and 4 out (tf.pad), so a
batch of 2^62 samples is a tensor of no bytes that TensorFlow accepts, while an output or an
expected input of 2^62 x 4 elements overflows. Each call runs in a subprocess, so an abort
fails the test instead of killing the suite."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rstf.pipeline import optimize
from rstf.frontend.tfutil import tf

from harness import make_graph_def, save_graph_def

HUGE = 2 ** 62


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


# Runs the optimized graph on zero-filled inputs of the given shapes (each batch fed through
# a placeholder, so that nothing folds the call away); prints the output's shape or the
# error, as JSON.
CALL = r"""
import json, sys
import tensorflow as tf
lib, graph, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tf.load_op_library(lib)
gd = tf.compat.v1.GraphDef()
with open(graph, "rb") as f:
    gd.ParseFromString(f.read())
g = tf.Graph()
with g.as_default():
    feeds, inputs = {}, {}
    for name, (rows, inner) in shapes.items():
        n = tf.compat.v1.placeholder(tf.int64, [])
        feeds[n] = rows
        inputs[name + ":0"] = tf.zeros(tf.stack([n, tf.constant(inner, tf.int64)]))
    out, = tf.graph_util.import_graph_def(gd, input_map=inputs, return_elements=["out:0"])
    with tf.compat.v1.Session() as s:
        try:
            print(json.dumps({"shape": s.run(tf.shape(out, out_type=tf.int64), feeds).tolist()}))
        except tf.errors.OpError as e:
            print(json.dumps({"error": type(e).__name__, "message": e.message}))
"""


def _call(built, shapes: dict) -> dict:
    out, report = built
    proc = subprocess.run([sys.executable, "-c", CALL, os.path.join(out, report["library"]),
                           os.path.join(out, "optimized.pb"), json.dumps(shapes)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the call ended the process ({proc.returncode}): " + \
        proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.tfbuild
def test_output_shape_overflow_is_an_op_error(team_lib):
    assert _call(team_lib, {"x": [3, 0]}) == {"shape": [3, 4]}
    got = _call(team_lib, {"x": [HUGE, 0]})
    assert got["error"] == "InvalidArgumentError", got
    assert f"output 0 would have shape [{HUGE},4]" in got["message"], got


@pytest.mark.tfbuild
def test_expected_shape_overflow_in_a_message_is_an_op_error(master_lib):
    """x's batch (input 0) sets N; y of another batch fails the check, whose message writes
    the shape y should have had, [N, 4], which is no valid TensorShape."""
    assert master_lib[1]["subgraphs"][0]["inputs"] == ["x:0", "y:0"]
    assert _call(master_lib, {"x": [3, 0], "y": [3, 4]}) == {"shape": [3, 4]}
    got = _call(master_lib, {"x": [HUGE, 0], "y": [1, 4]})
    assert got["error"] == "InvalidArgumentError", got
    assert f"input 1 ('y:0') has shape [1,4], expected [{HUGE},4]" in got["message"], got


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
