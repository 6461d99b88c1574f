"""Constant folding: constant-only subexpressions become Consts, evaluated by TF itself."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import rstf
from harness import make_graph_def, run_tf, save_graph_def, tf
from rstf.errors import RstfError
from rstf.frontend.fold import fold_constants
from rstf.frontend.graph import load_model


def bn_like():
    x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 3], name="x")
    var = tf.identity(tf.constant([1.0, 2.0, 4.0]), name="var_read")
    gamma = tf.constant([0.5, 1.5, 2.0])
    scale = tf.math.rsqrt(var + 1e-3) * gamma
    scale = tf.reshape(scale, [1, 1, 1, 3], name="scale")
    y = x * scale + tf.constant(0.25)
    tf.identity(y, name="out")
    tf.identity(tf.constant(3.0) * 2.0, name="const_out")  # a constant model output


def test_fold_bn_chain(tmp_path):
    gd = make_graph_def(bn_like)
    folded_gd, folded = fold_constants(gd, keep=["out", "const_out"])
    ops = {n.name: n.op for n in folded_gd.node}
    assert ops["scale"] == "Const" and "var_read" not in ops and "Rsqrt" not in ops.values()
    assert ops["const_out"] == "Const"
    assert "scale" in folded
    x = np.random.RandomState(0).standard_normal((1, 4, 4, 3)).astype(np.float32)
    ref = run_tf(gd, {"x": x}, ["out:0", "const_out:0"])
    got = run_tf(folded_gd, {"x": x}, ["out:0", "const_out:0"])
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(r, g)  # TF computed the folded values: bit-exact


def test_load_model_fold(tmp_path):
    path = save_graph_def(make_graph_def(bn_like), str(tmp_path))
    g = load_model(path, outputs=["out"], fold=True)
    assert {n.op for n in g.nodes.values()} == {"Placeholder", "Const", "Mul", "AddV2",
                                                  "Identity"}
    assert g.nodes["out"].out_shapes == [(1, 4, 4, 3)]


def test_nothing_to_fold():
    def build():
        tf.nn.relu(tf.compat.v1.placeholder(tf.float32, [2], name="x"), name="y")

    gd = make_graph_def(build)
    same, folded = fold_constants(gd, keep=["y"])
    assert folded == [] and same is gd


# --- sizes are checked before anything is computed --------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(rstf.__file__)))

# Runs a command in a fresh process, so RUSAGE_CHILDREN's peak RSS is that command's alone
# (the largest of it and its own children, gcc included), not of anything pytest ran before.
_MEASURE = """
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.run(sys.argv[2:]).returncode
wall = time.monotonic() - t
with open(sys.argv[1], "w") as f:
    f.write(f"{rc} {wall} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
"""


def optimize_measured(pb: str, out: str, tmp_path):
    """`rstf optimize pb -o out -q` in a subprocess running this worktree's rstf:
    (CompletedProcess, wall seconds, peak RSS in bytes)."""
    stats = tmp_path / "stats.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO, *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run([sys.executable, "-c", _MEASURE, str(stats), sys.executable, "-m",
                        "rstf", "optimize", pb, "-o", out, "-q"], capture_output=True,
                       text=True, env=env, timeout=300)
    rc, wall, rss_kb = stats.read_text().split()
    assert int(rc) == r.returncode
    return r, float(wall), int(rss_kb) * 1024  # Linux reports ru_maxrss in KiB


def fill_bomb(n: int, m: int):
    """x: float [m]; out = x + Fill([n, m], 1.0): a few hundred bytes of GraphDef whose Fill
    is n * m * 4 bytes."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [m], name="x")
        fill = tf.raw_ops.Fill(dims=tf.constant([n, m], tf.int32), value=tf.constant(1.0),
                               name="fill")
        tf.raw_ops.AddV2(x=x, y=fill, name="out")

    return make_graph_def(build)


@pytest.fixture(scope="module")
def small_fill_seconds(tmp_path_factory):
    """Seconds of `rstf optimize` (its build left out) on a fill_bomb of one 1x1 Fill: the
    fixed cost of a process that imports TensorFlow and runs the pipeline on this host, to
    which the bombs' times are compared (a slow host takes twice as long as a fast one)."""
    tmp = tmp_path_factory.mktemp("small_fill")
    pb = save_graph_def(fill_bomb(1, 1), str(tmp), "small.pb")
    r, wall, _ = optimize_measured(pb, str(tmp / "out"), tmp)
    assert r.returncode == 0, r.stderr
    with open(tmp / "out" / "report.json") as f:
        return wall - json.load(f)["build_seconds"]


@pytest.mark.parametrize("n", [11585, 1 << 20], ids=["512MiB", "4TiB"])
def test_fill_bomb_is_not_folded(tmp_path, n, small_fill_seconds):
    gd = fill_bomb(n, n)
    assert len(gd.SerializeToString()) < 400
    pb = save_graph_def(gd, str(tmp_path), "bomb.pb")
    out = str(tmp_path / "out")
    r, wall, rss = optimize_measured(pb, out, tmp_path)
    # The model is valid (TF would run it, given the memory): optimize succeeds and leaves
    # the Fill to TensorFlow, never computing it.
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    assert report["nodes_folded"] == 0
    opt = tf.compat.v1.GraphDef()
    with open(os.path.join(out, "optimized.pb"), "rb") as f:
        opt.ParseFromString(f.read())
    assert {n.name: n.op for n in opt.node}["fill"] == "Fill"
    # Compiling the generated Add is a fixed cost of any optimize (seconds on a cold cache),
    # unrelated to folding; the rest must take about what a 1x1 Fill's optimize takes.
    # Computing the 512 MiB Fill pushed the peak RSS well past 1 GB; importing TF alone
    # takes a few hundred MB.
    seconds = wall - report["build_seconds"]
    assert seconds < 2 * small_fill_seconds + 5, (seconds, small_fill_seconds)
    assert rss < 1 << 30, rss


def fill_slice(dims, fill_value=1.0, dtype=tf.int32):
    """out = x + Slice(Fill(dims, fill_value), [0, 0], [1, 1]): a small result computed from
    constants through a large intermediate."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 1], name="x")
        fill = tf.raw_ops.Fill(dims=tf.constant(dims, dtype), value=tf.constant(fill_value),
                               name="fill")
        s = tf.raw_ops.Slice(input=fill, begin=tf.constant([0, 0], dtype),
                             size=tf.constant([1, 1], dtype), name="slice")
        tf.raw_ops.AddV2(x=x, y=s, name="out")

    return make_graph_def(build)


def test_large_intermediate_is_not_computed():
    # A 4 TiB Fill whose 4-byte Slice is all that is fetched: the Fill is over the limit,
    # so neither it nor the Slice folds, and nothing runs.
    gd = fill_slice([1 << 20, 1 << 20])
    t = time.monotonic()
    out, folded = fold_constants(gd, keep=["out"])
    assert time.monotonic() - t < 5
    assert folded == []
    assert {n.name: n.op for n in out.node} == {n.name: n.op for n in gd.node}
    # Dims whose product overflows 64 bits are not folded either.
    out, folded = fold_constants(fill_slice([1 << 40, 1 << 40], dtype=tf.int64), keep=["out"])
    assert folded == []


def test_node_over_limit_is_never_run():
    # The division fails if run: its 16 KiB operands are over `max_bytes`, so they, the
    # division and the Sum reading it stay computations and folding runs none of them.
    def build():
        x = tf.compat.v1.placeholder(tf.int32, [], name="x")
        bad = tf.math.floordiv(tf.fill([64, 64], 1), tf.fill([64, 64], 0), name="bad")
        tf.add(x, tf.reduce_sum(bad, name="total"), name="out")

    gd = make_graph_def(build)
    out, folded = fold_constants(gd, keep=["out"], max_bytes=1 << 10)
    assert folded == []
    assert {n.name: n.op for n in out.node} == {n.name: n.op for n in gd.node}
    with pytest.raises(RstfError, match="node 'bad' \\(FloorDiv\\)"):
        fold_constants(gd, keep=["out"])  # under the limit it is run, and fails


def splat_const(name, shape, value=1.0):
    """A float Const stored as one value over `shape` (a few bytes for any size)."""
    n = tf.compat.v1.NodeDef(name=name, op="Const")
    n.attr["dtype"].type = tf.float32.as_datatype_enum
    t = n.attr["value"].tensor
    t.dtype = tf.float32.as_datatype_enum
    for d in shape:
        t.tensor_shape.dim.add(size=d)
    t.float_val.append(value)
    return n


def test_large_splat_const_is_not_materialized():
    gd = fill_slice([1, 1])
    nodes = {n.name: n for n in gd.node}
    nodes["fill"].CopyFrom(splat_const("fill", [1 << 20, 1 << 20]))
    assert len(gd.SerializeToString()) < 600
    out, folded = fold_constants(gd, keep=["out"])
    assert folded == []
    assert {n.name: n.op for n in out.node}["slice"] == "Slice"


def div_by_zero():
    x = tf.compat.v1.placeholder(tf.int32, [2], name="x")
    div = tf.math.floordiv(tf.constant([4, 5]), tf.constant([1, 0]), name="div")
    tf.add(x, div, name="out")


def test_tf_error_is_one_line():
    with pytest.raises(RstfError) as e:
        fold_constants(make_graph_def(div_by_zero), keep=["out"])
    msg = str(e.value)
    assert msg == "constant folding: node 'div' (FloorDiv): Integer division by zero", msg


def test_tf_error_via_cli(tmp_path):
    pb = save_graph_def(make_graph_def(div_by_zero), str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "rstf", "optimize", pb, "-o",
                        str(tmp_path / "out")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["rstf: error: constant folding: node 'div' (FloorDiv): "
                     "Integer division by zero"], r.stderr


def two_weights():
    x = tf.compat.v1.placeholder(tf.float32, [256], name="x")
    for name in ("a", "b"):
        w = tf.negative(tf.constant(np.arange(256, dtype=np.float32)), name=name)
        tf.add(x, w, name=f"out_{name}")


def test_budget_bounds_the_total():
    gd = make_graph_def(two_weights)
    keep = ["out_a", "out_b"]
    _, folded = fold_constants(gd, keep)
    assert folded == ["a", "b"]
    small, folded = fold_constants(gd, keep, budget_bytes=1500)  # room for one 1 KiB value
    assert len(folded) == 1
    ops = {n.name: n.op for n in small.node}
    assert sorted(ops[n] for n in ("a", "b")) == ["Const", "Neg"]
    x = np.arange(256, dtype=np.float32)
    for r, g in zip(run_tf(gd, {"x": x}, ["out_a:0", "out_b:0"]),
                    run_tf(small, {"x": x}, ["out_a:0", "out_b:0"])):
        np.testing.assert_array_equal(r, g)
    _, folded = fold_constants(gd, keep, budget_bytes=0)
    assert folded == []
