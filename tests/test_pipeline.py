"""The whole path on small graphs: optimize -> splice -> load the custom ops -> compare."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import make_graph_def, run_tf, save_graph_def, tf
from rstf.cgen.codegen import generate_subgraph
from rstf.evaluation.compare import compare
from rstf.frontend.graph import load_model
from rstf.pipeline import dataflow_dag, optimize, supported_nodes
from rstf.build.splice import custom_node_names, mark_weights, splice

rng = np.random.RandomState(7)
W1 = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
B1 = rng.standard_normal(8).astype(np.float32)
W2 = rng.standard_normal((8 * 2, 10)).astype(np.float32)


def small_cnn():
    """conv -> bias -> relu -> (pool | sin) -> concat -> mean -> matmul -> softmax.

    Sin has no generator, so it splits the graph; the output is a supported node.
    """
    x = tf.compat.v1.placeholder(tf.float32, [1, 12, 12, 3], name="input")
    y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, W1, 2, "SAME"), B1), name="relu")
    a = tf.nn.max_pool2d(y, 3, 1, "SAME")
    b = tf.math.sin(y, name="sin")
    y = tf.concat([a, b], -1)
    y = tf.reduce_mean(y, [1, 2])
    tf.nn.softmax(tf.matmul(y, W2), name="probs")


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    return save_graph_def(make_graph_def(small_cnn), str(d))


def test_splice_structure(small_model):
    graph = load_model(small_model)
    assert graph.outputs == ["probs"]
    supported, reasons = supported_nodes(graph)
    assert "sin" in reasons and "sin" not in supported
    from rstf.partition import select_subgraphs

    parts = select_subgraphs(dataflow_dag(graph), supported)
    assert len(parts) == 2  # before and after the unsupported Sin
    codes = [generate_subgraph(graph, p, i) for i, p in enumerate(parts)]
    names = custom_node_names(graph, len(codes))
    mark_weights(graph, codes)
    gd = splice(graph, codes, ["RstfA", "RstfB"], names)
    by_name = {n.name: n for n in gd.node}
    for p in parts:
        for n in p:
            assert n not in by_name or n == "probs"  # replaced, except the kept output name
    assert by_name["probs"].op == "Identity"  # the model's output name survives
    assert by_name["probs"].input == [names[1]]
    # Sin now reads the first custom op's output; the second custom op reads Sin.
    assert by_name["sin"].input[0].startswith(names[0])
    assert any(i.startswith("sin") for i in by_name[names[1]].input)
    # Weights are not C source: they are the custom op's tensor attributes (its node
    # holds each value, as a Const's does), in input order, not Const inputs; the Consts
    # nothing else reads are gone.
    weights = [s for s in codes[0].inputs if s.weight]
    assert weights and all(graph.is_const(s.tensor) for s in weights)
    assert not any(s.weight for s in codes[0].inputs if not graph.is_const(s.tensor))
    node = by_name[names[0]]
    for k, s in enumerate(weights):
        np.testing.assert_array_equal(tf.make_ndarray(node.attr[f"w{k}"].tensor),
                                      graph.const_value(s.tensor))
    assert len(node.input) == len(codes[0].inputs) - len(weights) + sum(
        i.startswith("^") for i in node.input)
    assert not any(n.op == "Const" for n in gd.node)


@pytest.mark.tfbuild
def test_optimize_and_compare(small_model, tmp_path):
    out = str(tmp_path / "out")
    report = optimize(small_model, out, log=lambda m: None)
    assert sorted(os.listdir(out)) == sorted(
        ["optimized.pb", "report.json", "src", "serving", "serving_ops", report["library"]])
    for key in ("nodes_total", "nodes_covered", "flops_total", "flops_covered",
                "optimize_seconds", "subgraphs"):
        assert key in report
    assert report["flops_covered"] == report["flops_total"] > 0
    assert report["nodes_covered"] == report["nodes_total"] - 1  # all but Sin
    for sg in report["subgraphs"]:
        assert {"name", "ops", "flops", "optimizer"} <= set(sg)
        assert sg["optimizer"] == "poly" and sg["poly"]["statements"] > 0
    result = compare(small_model, out, reps=1)
    assert result["passed"], result
    assert result["outputs"][0]["max_rel_err"] < 1e-5
    assert set(result["latency_ms"]) == {"rstf", "tf_eigen", "tf_onednn"}
    assert result["timed_through"] == "TF C API"  # the C client loaded the op library

    # Loading in TF directly: same result, and a wrong-shape input is a clean error.
    from rstf.serving import load_library

    lib = load_library(os.path.join(out, report["library"]))
    assert lib is not None
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(os.path.join(out, "optimized.pb"), "rb").read())
    ops = {n.op for n in gd.node}
    assert not ops & {"Conv2D", "MatMul", "Softmax", "MaxPool"}
    x = rng.standard_normal((1, 12, 12, 3)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        got = s.run("probs:0", {"input:0": x})
    g0 = tf.Graph()
    with g0.as_default():
        orig = tf.compat.v1.GraphDef()
        orig.ParseFromString(open(small_model, "rb").read())
        tf.graph_util.import_graph_def(orig, name="")
    with tf.compat.v1.Session(graph=g0) as s:
        ref = s.run("probs:0", {"input:0": x})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)

    # The custom op checks its inputs at run time: feed a mis-shaped tensor straight in.
    op_name = report["subgraphs"][0]["op_type"]
    node = next(n for n in gd.node if n.op == op_name)
    n_in = sum(not i.startswith("^") for i in node.input)
    weights = {a: v.tensor for a, v in node.attr.items() if a.startswith("w")}
    assert weights and n_in + len(weights) == len(report["subgraphs"][0]["inputs"])
    fn = getattr(lib, _snake(op_name))

    def call(inputs, attrs):  # (graph mode: eager ops take no tensor-valued attributes)
        with tf.Graph().as_default() as g:
            y = fn(*[tf.constant(v) for v in inputs], **attrs)
        with tf.compat.v1.Session(graph=g) as s:
            return s.run(y)

    bad = [np.zeros([1, 2, 2, 3], np.float32)] + [np.zeros([1], np.float32)] * (n_in - 1)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)) as e:
        call(bad, weights)
    assert "input 0" in str(e.value) or "Dimension" in str(e.value) or "shape" in str(e.value)
    # Its weights are checked once, when the kernel is built: a mis-shaped one is named.
    w0 = tf.make_ndarray(weights["w0"])
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        call([x], dict(weights, w0=tf.make_tensor_proto(w0.ravel()[:1])))
    assert "weight w0 (" in str(e.value) and f"expected {list(w0.shape)}".replace(
        " ", "") in str(e.value).replace(" ", ""), str(e.value)
    # With the placeholder's shape unknown, graph construction lets a wrong shape through:
    # the op's own run-time check (CheckInput) names the input and both shapes.
    for n in gd.node:
        if n.op == "Placeholder":
            n.attr["shape"].shape.Clear()
            n.attr["shape"].shape.unknown_rank = True
    g1 = tf.Graph()
    with g1.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g1) as s:
        for shape, got in (((1, 13, 12, 3), "[1,13,12,3]"), ((1, 12, 12), "[1,12,12]")):
            with pytest.raises(tf.errors.InvalidArgumentError) as e:
                s.run("probs:0", {"input:0": np.zeros(shape, np.float32)})
            assert (f"input 0 ('input:0') has shape {got}, expected [1,12,12,3]"
                    in str(e.value)), str(e.value)

    # A second run is a cache hit and replaces nothing without --force.
    again = optimize(small_model, str(tmp_path / "again"), log=lambda m: None)
    assert again["build_cached"]
    from rstf.errors import RstfError

    with pytest.raises(RstfError, match="already exists"):
        optimize(small_model, out, log=lambda m: None)


def _snake(name):
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.tfbuild
def test_cli_json_and_failure_exit(small_model, tmp_path):
    out = str(tmp_path / "o")
    run = lambda *a: subprocess.run([sys.executable, "-m", "rstf", *a],  # noqa: E731
                                    capture_output=True, text=True)
    r = run("optimize", small_model, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "nodes covered" in r.stdout
    r = run("compare", small_model, out, "--json", "--reps", "1")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["passed"] and data["rtol"] == 1e-4
    assert {"name", "max_abs_err", "max_rel_err"} <= set(data["outputs"][0])
    # An impossible tolerance fails with a non-zero exit.
    r = run("compare", small_model, out, "--json", "--reps", "1", "--rtol", "-1")
    assert r.returncode == 1 and json.loads(r.stdout)["passed"] is False


@pytest.mark.tfbuild
def test_per_subgraph_names_the_first_bad_node(small_model, tmp_path, monkeypatch):
    """A wrong generator (ReLU that forgets to clamp) is caught and localised to its node."""
    from rstf.evaluation.compare import compare_per_subgraph
    from rstf.opgen.elementwise import Relu

    good = str(tmp_path / "good")
    optimize(small_model, good, log=lambda m: None)
    r = compare_per_subgraph(small_model, good)
    assert r["passed"] and r["first_failure"] is None
    assert len(r["subgraphs"]) == 2 and all(s["max_rel_err"] < 1e-5 for s in r["subgraphs"])

    monkeypatch.setattr(Relu, "expr", "{0}")
    bad = str(tmp_path / "bad")
    optimize(small_model, bad, log=lambda m: None)
    r = compare_per_subgraph(small_model, bad)
    assert not r["passed"]
    f = r["first_failure"]
    assert f["subgraph"] == "rstf/subgraph_0" and f["node"] == "relu" and f["op"] == "Relu"


@pytest.mark.tfbuild
def test_the_same_c_built_with_other_flags_gets_other_op_names(small_model, tmp_path):
    """Two builds of one model whose C is the same but whose compiler flags are not
    (another --march, or another rstf's flags) are two libraries: both load in one
    TensorFlow process (two versions of a model in one TensorFlow Serving, an A/B)."""
    from rstf.serving import load_library

    outs = {m: str(tmp_path / m) for m in ("native", "x86-64-v3")}
    reports = {m: optimize(small_model, out, march=m, optimizer="none", log=lambda _: None)
               for m, out in outs.items()}
    sources = [open(os.path.join(out, "src", "subgraph_0.c")).read() for out in outs.values()]
    assert sources[0] == sources[1]
    names = [[sg["op_type"] for sg in r["subgraphs"]] for r in reports.values()]
    assert not set(names[0]) & set(names[1])
    x = rng.random((1, 12, 12, 3)).astype(np.float32)
    got = []
    for m, out in outs.items():
        load_library(os.path.join(out, reports[m]["library"]))
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(open(os.path.join(out, "optimized.pb"), "rb").read())
        got += run_tf(gd, {"input": x}, ["probs:0"])
    np.testing.assert_array_equal(got[0], got[1])


W_BIG = rng.standard_normal((1024, 1024)).astype(np.float32) / 32  # 4 MB: two 2 MB pages


def big_mlp():
    x = tf.compat.v1.placeholder(tf.float32, [4, 1024], name="input")
    h = tf.nn.relu(tf.matmul(x, W_BIG))
    tf.nn.relu(tf.matmul(h, W_BIG) + 1.0, name="out")


# Run in a fresh process: loads the library and the graph, calls it from 4 threads at once
# (the kernel's one workspace must serve them one at a time), prints the largest error
# against the expected values and the process's memory on transparent huge pages.
_CONCURRENT = r"""
import sys, threading, numpy as np, tensorflow as tf
lib, pb, ref_path = sys.argv[1:4]
tf.load_op_library(lib)
gd = tf.compat.v1.GraphDef()
gd.ParseFromString(open(pb, "rb").read())
g = tf.Graph()
with g.as_default():
    tf.graph_util.import_graph_def(gd, name="")
ref = np.load(ref_path)
errs = []
with tf.compat.v1.Session(graph=g) as s:
    def work(k):
        for r in range(15):
            x = ref["x"][(k + r) % 4]
            got = s.run("out:0", {"input:0": x})
            errs.append(float(np.max(np.abs(got - ref["y"][(k + r) % 4]))))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    huge = [int(l.split()[1]) for l in open("/proc/self/smaps_rollup")
            if l.startswith("AnonHuge")]  # (while the session holds the kernel)
print(len(errs), max(errs), huge[0] if huge else -1)
"""


@pytest.mark.tfbuild
def test_weights_on_huge_pages_and_concurrent_calls(tmp_path):
    """The kernel copies its weights into one buffer on 2 MB pages and keeps one workspace:
    calls from several threads at once still get their own right results."""
    pb = save_graph_def(make_graph_def(big_mlp), str(tmp_path))
    out = str(tmp_path / "out")
    report = optimize(pb, out, log=lambda m: None)
    assert report["subgraphs"][0]["workspace_bytes"] > 0
    xs = rng.standard_normal((4, 4, 1024)).astype(np.float32)
    ys = np.stack([np.maximum(np.maximum(x @ W_BIG, 0) @ W_BIG + 1, 0) for x in xs])
    np.savez(tmp_path / "ref.npz", x=xs, y=ys)
    proc = subprocess.run([sys.executable, "-c", _CONCURRENT,
                           os.path.join(out, report["library"]),
                           os.path.join(out, "optimized.pb"), str(tmp_path / "ref.npz")],
                          capture_output=True, text=True, env={**os.environ,
                                                               "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls, err, huge_kb = proc.stdout.split()
    assert int(calls) == 60 and float(err) < 1e-3 * float(np.max(np.abs(ys)))
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        thp = ""
    if "[always]" in thp or "[madvise]" in thp:  # where huge pages may be had at all
        assert int(huge_kb) >= 2048, "the weights are not on 2 MB pages"


def test_a_gather_left_to_its_generated_c_is_reported_as_expected():
    """A gather's C is never raisable (its subscripts are data), so its op says so plainly;
    any other subgraph the pass leaves is reported as left unoptimized, with the reason."""
    import types

    from rstf.pipeline import apply_poly

    sg = types.SimpleNamespace(index=3, source="", workspace_bytes=0, prepacked={}, inputs=[])
    result = types.SimpleNamespace(
        source="int x;", workspace_bytes=None, prepacked={}, optimized=False,
        diagnostic="line 30: local declaration in op_0 is outside the raisable subset",
        report=lambda: {"optimizer": "poly"})
    said = []
    apply_poly(sg, result, said.append, ["GatherV2"])
    apply_poly(sg, result, said.append, ["GatherV2", "AddV2"])
    assert said[0].startswith("subgraph 3 (GatherV2) runs its generated C as it is")
    assert said[1] == f"subgraph 3 left unoptimized: {result.diagnostic}"
