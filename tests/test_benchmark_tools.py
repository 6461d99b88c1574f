"""The kernel-level benchmark tools (benchmarks/group_profile.py, benchmarks/ab_kernels.py)
on a small conv + batch-norm + ReLU6 subgraph: an output folder is written by hand (the
subgraph's C and a report.json), so no TensorFlow op library is built. Then the Winograd
probe (benchmarks/winograd_probe.c): its numbers are right on small shapes."""
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.ab_kernels import ab
from benchmarks.group_profile import call_flops, profile
from harness import generate_subgraph, load_graph_def, make_graph_def, save_graph_def
from rstf.poly import optimize_source
from rstf.frontend.tfutil import tf

rng = np.random.RandomState(3)


def _build():
    x = tf.compat.v1.placeholder(tf.float32, (1, 12, 12, 16), name="x")
    y = tf.nn.conv2d(x, rng.randn(1, 1, 16, 32).astype(np.float32), 1, "SAME")
    y = y * rng.rand(32).astype(np.float32) + rng.rand(32).astype(np.float32)
    tf.nn.relu6(y, name="out")


def _outdir(root, name, source, workspace, flops):
    """An `rstf optimize`-shaped folder with just what the tools read."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "src"))
    with open(os.path.join(d, "src", "subgraph_0.c"), "w") as f:
        f.write(source)
    with open(os.path.join(d, "report.json"), "w") as f:
        json.dump({"subgraphs": [{"source": "src/subgraph_0.c", "workspace_bytes": workspace,
                                  "flops": flops, "versions": 1}]}, f)
    return d


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    g = load_graph_def(make_graph_def(_build), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    sg = generate_subgraph(g, nodes, 0)
    new, info = optimize_source(sg.source, sg.entry)
    assert info["optimizer"] == "poly", info
    root = str(tmp_path_factory.mktemp("bench"))
    return (_outdir(root, "none", sg.source, sg.workspace_bytes, sg.flops),
            _outdir(root, "poly", new, info["workspace_bytes"], sg.flops))


def test_group_profile_names_every_timed_group(folders):
    res = profile(folders[1], reps=5, threads=2)
    assert res["total_seconds"] > 0
    assert res["calls"], "no group was timed"
    nodes = [n for c in res["calls"] for n in c["nodes"]]
    assert any(n.startswith("Conv2D ") for n in nodes), nodes
    assert all(c["seconds"] >= 0 for c in res["calls"])
    # Every call's time is part of the entry's.
    assert sum(c["seconds"] for c in res["calls"]) <= res["total_seconds"] * 1.5


def test_group_profile_counts_each_groups_flops_from_the_model(folders, tmp_path):
    """The model report.json names gives each timed group its conv FLOPs (the 1x1 conv:
    12*12 pixels x 32 outputs x 16 inputs x 2); with the model gone, none are set."""
    calls = profile(folders[1], reps=2, threads=1)["calls"]
    report_path = os.path.join(folders[1], "report.json")
    report = json.load(open(report_path))
    report["model"] = save_graph_def(make_graph_def(_build), str(tmp_path))
    with open(report_path, "w") as f:
        json.dump(report, f)
    call_flops(folders[1], calls)
    conv = [c for c in calls if any(n.startswith("Conv2D ") for n in c["nodes"])]
    assert [c["flops"] for c in conv] == [12 * 12 * 32 * 16 * 2], calls
    assert sum(c["flops"] for c in calls) == 12 * 12 * 32 * 16 * 2
    os.remove(report["model"])
    fresh = [{k: v for k, v in c.items() if k != "flops"} for c in calls]
    call_flops(folders[1], fresh)
    assert not any("flops" in c for c in fresh)


def test_group_profile_counts_the_inputs_each_call_reads(folders):
    """Each timed call's "input_bytes": the subgraph inputs (weights) named in its
    arguments, each once, at its element type's size; the bandwidth column's numerator."""
    from rstf.evaluation.groupbench import call_input_bytes

    src = """/*
*   in0: input float(2, 3) x
*   in1: input int(4,) ids
*   in12: input double(5,) w
*/
void rstf_sg_0(void)
{
    sched_0((const float *)in0, (const float *)in0, (float *)t1);
    sched_1((const int *)in1, (const float *)in12, (float *)out0);
    sched_2((const float *)t1, (float *)out1);
}
"""
    assert call_input_bytes(src, "rstf_sg_0") == [24, 16 + 40, 0]
    calls = profile(folders[1], reps=2, threads=1)["calls"]
    conv = [c for c in calls if any(n.startswith("Conv2D ") for n in c["nodes"])]
    assert conv and conv[0]["input_bytes"] >= (12 * 12 * 16 + 16 * 32) * 4, conv


def test_ab_interleaves_two_builds_of_one_subgraph(folders):
    res = ab(folders[0], folders[1], reps=6, threads=2)
    assert res["pairs"] == 6
    assert res["a_ms"] > 0 and res["b_ms"] > 0 and res["ratio"] > 0


def test_ab_refuses_subgraphs_with_different_tensors(folders, tmp_path):
    """Outputs must agree; an input may differ (a weight fed in another layout, such as
    Winograd's U): both sides then get the larger buffer."""
    src = open(os.path.join(folders[0], "src", "subgraph_0.c")).read()
    other = _outdir(str(tmp_path), "other", src.replace("float(1, 12, 12, 32)",
                                                        "float(1, 12, 12, 33)"), 0, 1)
    with pytest.raises(SystemExit, match="different tensor tables"):
        ab(folders[0], other, reps=2)
    relaid = _outdir(str(tmp_path), "relaid", src.replace("float(1, 12, 12, 16)",
                                                          "float(1, 12, 12, 17)"), 0, 1)
    assert ab(folders[0], relaid, reps=2)["pairs"] == 2


PROBE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "benchmarks", "winograd_probe.c")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("probe") / "wp")
    subprocess.run(["gcc", "-O3", "-std=c11", "-fno-math-errno", "-fopenmp", "-march=native",
                    PROBE, "-o", exe, "-lm"], check=True)
    return exe


@pytest.mark.parametrize("shape", [
    ("9", "7", "16", "64"),  # odd sizes: half tiles at the bottom and right; all of V at once
    ("147", "147", "32", "64"),  # V over 4 MB: one tile row at a time per thread
])
def test_winograd_probe_agrees_with_the_direct_convolution(probe, shape):
    """Both Winograd schedules (with and without the weight transform in the call) match
    the direct convolution + scale, bias, ReLU to well within TF's 1e-4, odd sizes included."""
    out = subprocess.run([probe, *shape, "1"], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2"}).stdout
    assert "direct" in out and "wino+wt" in out, out
    errors = [float(e) for e in out.rsplit(":", 1)[1].split(",")]
    assert len(errors) == 2 and all(0 <= e < 1e-5 for e in errors), out


def test_winograd_probe_rejects_shapes_it_does_not_handle(probe):
    r = subprocess.run([probe, "8", "8", "20", "64"], capture_output=True, text=True)
    assert r.returncode == 2 and "multiple of 16" in r.stderr


@pytest.mark.tfbuild
def test_call_breakdown_times_each_phase_of_an_op_call(tmp_path):
    """benchmarks/call_breakdown.py rebuilds a real output folder's library with its call
    timestamps and splits the end-to-end call into TensorFlow, checks, hand-off, kernels
    and back: every phase measured for every call, and together within the client's call."""
    from benchmarks.call_breakdown import PHASES, breakdown
    from rstf.pipeline import optimize

    model = save_graph_def(make_graph_def(_build), str(tmp_path))
    out = str(tmp_path / "out")
    optimize(model, out, log=lambda m: None)
    res = breakdown(out, reps=40)
    assert res["calls"] == 40 and res["client"] == "TF C API"
    assert list(res["phases_us"]) == PHASES
    for p, s in res["phases_us"].items():
        assert 0 <= s["p10"] <= s["median"] <= s["p90"], (p, s)
    inside = sum(res["phases_us"][p]["median"] for p in PHASES[1:])
    assert inside <= 1.5 * res["end_to_end_ms"] * 1e3  # the op's part of the client's call
    assert res["phases_us"]["kernels"]["median"] > 0


@pytest.mark.tfbuild
def test_ab_graphs_interleaves_two_optimized_graphs_and_tensorflow(tmp_path):
    """benchmarks/ab_graphs.py runs two output folders of one model (`none`, `poly`) and
    the original graph in one TensorFlow process, round by round: every median and
    per-round ratio measured; folders of different models are refused in one line."""
    from benchmarks.ab_graphs import ab, main
    from rstf.pipeline import optimize

    model = save_graph_def(make_graph_def(_build), str(tmp_path))
    outs = {o: str(tmp_path / o) for o in ("none", "poly")}
    for o, d in outs.items():
        optimize(model, d, optimizer=o, log=lambda m: None)
    res = ab(outs["none"], outs["poly"], rounds=10, block=3)
    assert (res["rounds"], res["block"]) == (10, 3), res
    assert min(res["a_ms"], res["b_ms"], res["tf_ms"]) > 0, res
    # The medians of the per-round ratios, one ratio a round. (Not compared with the ratio
    # of the medians: with calls of 8-10 us a busy host can set them 3x apart, as one CI
    # run did: 0.25 against 0.78.)
    assert len(res["ratios"]) == len(res["ratios_over_tf"]) == 10, res
    assert min(res["ratios"] + res["ratios_over_tf"]) > 0, res
    assert res["speedup"] == statistics.median(res["ratios"]), res
    assert res["b_over_tf"] == statistics.median(res["ratios_over_tf"]), res
    other = str(tmp_path / "other")
    os.makedirs(other)
    with open(os.path.join(outs["poly"], "report.json")) as f:
        report = json.load(f)
    with open(os.path.join(other, "report.json"), "w") as f:
        json.dump({**report, "model": model + ".elsewhere"}, f)
    assert main([outs["none"], other]) == 1


@pytest.mark.tfbuild
def test_ab_subgraphs_times_two_builds_of_each_subgraph_in_one_program(tmp_path):
    """benchmarks/ab_subgraphs.py: each subgraph of two output folders of one model
    (`none`, `poly`) timed side by side in one program: each side's median and the
    median ratio, per subgraph and in all; folders of different models, or cut into
    different subgraphs, are refused in one line."""
    from benchmarks.ab_subgraphs import ab, main
    from rstf.pipeline import optimize

    model = save_graph_def(make_graph_def(_build), str(tmp_path))
    outs = {o: str(tmp_path / o) for o in ("none", "poly")}
    for o, d in outs.items():
        optimize(model, d, optimizer=o, log=lambda m: None)
    res = ab(outs["none"], outs["poly"], reps=5, threads=1)
    assert res["subgraphs"] and all(min(r["a_ms"], r["b_ms"], r["speedup"]) > 0
                                    for r in res["subgraphs"]), res
    assert res["a_ms"] == pytest.approx(sum(r["a_ms"] for r in res["subgraphs"]))
    assert res["speedup"] > 0
    with open(os.path.join(outs["poly"], "report.json")) as f:
        report = json.load(f)
    for name, changed in (("other", {"model": model + ".elsewhere"}),
                          ("cut", {"subgraphs": report["subgraphs"] * 2})):
        d = str(tmp_path / name)
        os.makedirs(d)
        with open(os.path.join(d, "report.json"), "w") as f:
            json.dump({**report, **changed}, f)
        assert main([outs["none"], d]) == 1


def test_group_profile_feeds_integer_inputs(tmp_path):
    """A subgraph with an int32 input (a BERT padding mask) builds and runs: the harness
    declares it with its own C type and fills it with 1, a valid index or mask."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (4, 32), name="x")
        m = tf.compat.v1.placeholder(tf.int32, (4, 32), name="mask")
        y = tf.matmul(x, rng.randn(32, 32).astype(np.float32))
        tf.multiply(y, tf.cast(m, tf.float32), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    sg = generate_subgraph(g, nodes, 0)
    assert " int(" in sg.source  # the tensor table names the int input's type
    new, info = optimize_source(sg.source, sg.entry)
    res = profile(_outdir(str(tmp_path), "int", new, info["workspace_bytes"], sg.flops),
                  reps=2, threads=1)
    assert res["total_seconds"] > 0 and res["calls"]


def test_layer_sweep_builds_each_distinct_layer_alone(tmp_path):
    """benchmarks/layer_sweep.py: a model's distinct Conv2D/MatMul layers at the asked
    batch, each rebuilt as one component (op, BiasAdd, Relu) with the same attributes."""
    from benchmarks.layer_sweep import build, layers

    w3 = rng.randn(3, 3, 8, 16).astype(np.float32)
    m = rng.randn(16, 10).astype(np.float32)

    def model():
        x = tf.compat.v1.placeholder(tf.float32, (None, 9, 9, 8), name="x")
        y = tf.nn.relu(tf.nn.conv2d(x, w3, 2, "SAME"))
        y = tf.nn.conv2d(tf.nn.relu(tf.nn.conv2d(x, w3, 2, "SAME") + y), rng.randn(
            1, 1, 16, 16).astype(np.float32), 1, "VALID")
        tf.matmul(tf.reduce_mean(y, [1, 2]), m, name="out")

    pb = save_graph_def(make_graph_def(model), str(tmp_path))
    specs = layers(pb, 4)
    ops = sorted((s["op"], tuple(s["weight"]), len(s["nodes"])) for s in specs)
    assert ops == [("Conv2D", (1, 1, 16, 16), 1), ("Conv2D", (3, 3, 8, 16), 2),
                   ("MatMul", (16, 10), 1)]
    conv = next(s for s in specs if s["weight"] == [3, 3, 8, 16])
    assert conv["input"] == [4, 9, 9, 8] and conv["attrs"]["strides"] == [1, 2, 2, 1]
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(build(specs), name="")
    for i, s in enumerate(specs):
        y = g.get_tensor_by_name(f"y{i}:0")
        assert y.op.type == "Relu" and g.get_tensor_by_name(f"x{i}:0").shape == s["input"]
    want = {(3, 3, 8, 16): [4, 5, 5, 16], (1, 1, 16, 16): [4, 5, 5, 16], (16, 10): [4, 10]}
    for i, s in enumerate(specs):
        assert g.get_tensor_by_name(f"y{i}:0").shape.as_list() == want[tuple(s["weight"])]


_SPILLING_ASM = """\
rstf_mk_2x8.constprop.0:
.L3:
\tvfmadd231ps\t(%rdx), %ymm1, %ymm0
\tvmovaps\t%ymm0, 8(%rsp)
\tvfmadd231ps\t32(%rdx), %ymm1, %ymm2
\tvmovaps\t8(%rsp), %ymm0
\tjne\t.L3
\tret
\t.cfi_endproc
rstf_mk_1x8:
.L5:
\tvfmadd231ps\t(%rdx), %ymm1, %ymm0
\tjne\t.L5
\t.cfi_endproc
other:
.L7:
\tvfmadd231ps\t(%rsp), %ymm1, %ymm0
\tjne\t.L7
\t.cfi_endproc
"""


def test_kernel_spills_counts_each_kernel_loops_stack_accesses(folders, capsys):
    """benchmarks/kernel_spills.py: a microkernel loop's FMAs and vector stack accesses
    (gcc's clones included, other functions not; a pointer's spill not counted), the loops
    with more than one per `per` FMAs, and the command over an output folder's subgraphs."""
    from benchmarks.kernel_spills import kernel_loops, main, spilling

    loops = kernel_loops(_SPILLING_ASM)
    assert loops == {"rstf_mk_2x8.constprop.0": [(2, 2)], "rstf_mk_1x8": [(1, 0)]}
    assert spilling(loops) == [("rstf_mk_2x8.constprop.0", 2, 2)]
    assert main([folders[1]]) == 0
    assert "kernel functions in 1 subgraphs" in capsys.readouterr().out
    assert main([os.path.dirname(folders[1])]) == 2  # no src/subgraph_*.c there


def test_tf_contraction_order_names_tensorflows_orders():
    """benchmarks/tf_contraction_order.py against TF's MatMul: a one-row product is Eigen's
    own matrix-vector kernel, built without FMA in TensorFlow's wheel on every x86 machine:
    k in blocks of 16 (200 >= 128), products rounded then added, the blocks' sums in turn;
    a product of many rows and columns sums TF's k slices (rstf.opgen.kslices: 512 in two
    of 256), and so does a 3x3 convolution over its flattened (kh, kw, ic) reduction (576
    in two of 288), not one chain. The emulation's own pieces: a block as long as k is the
    one chain; the patches of a 1x1 convolution are its input's pixels; paired columns are
    two chains, even and odd k, where the others keep the slices' one chain."""
    from benchmarks.tf_contraction_order import (blocked, chain, paired, parse_shape, patches,
                                                 planned)

    a, b = rng.rand(3, 40).astype(np.float32), rng.randn(40, 5).astype(np.float32)
    for fused in (True, False):
        np.testing.assert_array_equal(blocked(a, b, 40, fused), chain(a, b, range(40), fused))
    b20 = rng.randn(40, 20).astype(np.float32)
    slices = [[(0, 20)], [(20, 40)]]
    got = paired(a, b20, slices, 4)
    np.testing.assert_array_equal(got[:, :16], planned(a, b20, slices)[:, :16])
    halves = [(chain(a, b20[:, 16:], range(lo, hi, 2), True)
               + chain(a, b20[:, 16:], range(lo + 1, hi, 2), True)).astype(np.float32)
              for lo, hi in (s[0] for s in slices)]
    np.testing.assert_array_equal(got[:, 16:], (halves[0] + halves[1]).astype(np.float32))
    x = rng.rand(5, 4, 3).astype(np.float32)
    np.testing.assert_array_equal(patches(x, 1, 1, 1, True), x.reshape(20, 3))
    assert patches(x, 3, 3, 2, True).shape == (3 * 2, 27)
    assert parse_shape("conv:12x12x64:3x3:64:s2:valid") == ("conv", (12, 12, 64, 3, 3, 64, 2,
                                                                      False))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "tf_contraction_order.py"), "1x200x40",
         "96x512x64", "conv:12x12x64:3x3:64"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 0, proc.stderr[-2000:]
    one_row, many, conv = proc.stdout.splitlines()
    assert one_row.startswith("1x200x40 (40 outputs, K 200): muladd/b16 0, "), one_row
    for line in (many, conv):
        assert "fma/tf 0" in line and "fma 0" not in line.replace("fma/", ""), line
