"""--optimizer graphite | polly: the unoptimized C through gcc's Graphite or clang-14's Polly.

The op families run as plain C (ctypes, no TensorFlow build) compiled by each toolchain and
are compared with TensorFlow; one model goes through the whole pipeline with each.
"""
import os
import stat

import numpy as np
import pytest

from harness import load_graph_def, make_graph_def, run_tf, save_graph_def, tf, tiny_cnn
from rstf.build import compiler as build
from rstf.build.cexec import run_subgraph_c
from rstf.cli import main
from rstf.cgen.codegen import generate_subgraph
from rstf.evaluation.compare import compare
from rstf.errors import RstfError
from rstf.pipeline import optimize

rng = np.random.RandomState(11)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape):
    return tf.compat.v1.placeholder(tf.float32, shape, name="x")


W = randn(3, 3, 4, 6)
DW = randn(3, 3, 4, 2)
M = randn(7, 12)
B = randn(6)

FAMILIES = {
    "conv": lambda: tf.nn.conv2d(ph([1, 9, 9, 4]), W, 2, "SAME", name="out"),
    "depthwise": lambda: tf.nn.depthwise_conv2d(ph([1, 8, 8, 4]), DW, [1, 1, 1, 1], "VALID",
                                                name="out"),
    "matmul": lambda: tf.matmul(ph([5, 12]), M, transpose_b=True, name="out"),
    "maxpool": lambda: tf.nn.max_pool2d(ph([1, 9, 9, 4]), 3, 2, "SAME", name="out"),
    "avgpool": lambda: tf.nn.avg_pool2d(ph([2, 8, 8, 3]), 2, 2, "VALID", name="out"),
    "chain": lambda: tf.nn.softmax(tf.nn.relu6(tf.nn.bias_add(
        tf.nn.conv2d(ph([1, 6, 6, 4]), W, 1, "VALID"), B) * 0.5 + 1.0), name="out"),
}
FEED_SHAPES = {"conv": (1, 9, 9, 4), "depthwise": (1, 8, 8, 4), "matmul": (5, 12),
               "maxpool": (1, 9, 9, 4), "avgpool": (2, 8, 8, 3), "chain": (1, 6, 6, 4)}


@pytest.mark.parametrize("optimizer", ["graphite", "polly"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_families_match_tf(optimizer, family):
    gd = make_graph_def(FAMILIES[family])
    graph = load_graph_def(gd, outputs=["out"])
    nodes = [n for n in graph.topo_order() if graph.nodes[n].op not in ("Const", "Placeholder")
             and not graph.is_const(f"{n}:0")]
    sg = generate_subgraph(graph, nodes, 0)
    x = randn(*FEED_SHAPES[family])
    inputs = {s.tensor: x if s.tensor == "x:0" else graph.const_value(s.tensor)
              for s in sg.inputs}
    got = run_subgraph_c(sg, inputs, toolchain=build.c_toolchain(optimizer))["out:0"]
    ref = run_tf(gd, {"x": x}, ["out:0"])[0]
    err = np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err <= 1e-5, f"{family} with {optimizer}: relative error {err:.3g}"


def test_toolchains():
    graphite = build.c_toolchain("graphite", "native", threads=3)
    assert graphite.cc == "gcc"
    assert {"-floop-nest-optimize", "-floop-parallelize-all",
            "-ftree-parallelize-loops=3"} <= set(graphite.flags)
    polly = build.c_toolchain("polly")
    assert polly.cc == "clang-14"
    assert "-polly" in polly.flags and "-polly-parallel" in polly.flags
    assert build.c_toolchain("none").cc == build.c_toolchain("poly").cc == "gcc"
    with pytest.raises(RstfError, match="choose one of"):
        build.c_toolchain("ppcg")


def test_cache_key_distinguishes_optimizers():
    sources, headers = {"subgraph_0.c": "void f(void) {}\n"}, {"rstf_kernel.h": "//\n"}
    keys = {o: build.cache_key(sources, "// wrapper\n", headers, build.c_toolchain(o), "2.x",
                               ["-I."])
            for o in ("none", "graphite", "polly")}
    assert len(set(keys.values())) == 3
    assert keys["polly"] == build.cache_key(sources, "// wrapper\n", headers,
                                            build.c_toolchain("polly"), "2.x", ["-I."])
    other_threads = build.cache_key(sources, "// wrapper\n", headers,
                                    build.c_toolchain("graphite", threads=7), "2.x", ["-I."])
    assert other_threads != keys["graphite"]  # gcc bakes the thread count into the code


def _polly_error(tmp_path, capsys, monkeypatch, path):
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path))
    monkeypatch.setenv("PATH", path)
    code = main(["optimize", model, "-o", str(tmp_path / "out"), "--optimizer", "polly"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "out").exists()
    assert err.startswith("rstf: error: ") and err.count("\n") == 1, err
    assert "apt-get install -y clang-14 libpolly-14-dev" in err and "Traceback" not in err
    return err


def test_missing_clang_is_one_clear_line(tmp_path, capsys, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    err = _polly_error(tmp_path, capsys, monkeypatch, str(empty))
    assert "clang-14, which is not installed" in err


def test_clang_without_polly_is_one_clear_line(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "bin" / "clang-14"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"clang (LLVM option parsing): Unknown command line "
                    "argument '-polly'.\" >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    err = _polly_error(tmp_path, capsys, monkeypatch, f"{fake.parent}:{os.environ['PATH']}")
    assert "cannot run Polly" in err and "-polly" in err


@pytest.mark.tfbuild
@pytest.mark.parametrize("optimizer", ["graphite", "polly"])
def test_model_matches_tf(optimizer, tmp_path):
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path))
    out = str(tmp_path / optimizer)
    report = optimize(model, out, optimizer=optimizer, log=lambda m: None)
    assert report["options"]["optimizer"] == optimizer
    compiler = report["compiler"]
    assert compiler["optimizer"] == optimizer and compiler["cxx"] == "g++"
    assert compiler["cc"] == ("clang-14" if optimizer == "polly" else "gcc")
    assert compiler["cc_version"] and "-O3" in compiler["c_flags"]
    assert all(s["optimizer"] == optimizer for s in report["subgraphs"])
    assert report["nodes_covered"] == report["nodes_total"]
    # The C is the textbook C: what --optimizer none writes, not the polyhedral pass's.
    source = open(os.path.join(out, "src", "subgraph_0.c")).read()
    assert "#pragma omp" not in source
    r = compare(model, out, latency=False)
    assert r["passed"], r["outputs"]
    assert r["outputs"][0]["max_rel_err"] <= 1e-5
