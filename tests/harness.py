"""Test helpers: build small TF graphs, and run generated subgraph C without TensorFlow.

Running the C through ctypes costs a gcc call (~0.2 s) instead of a TensorFlow op build
(~15 s of C++ headers), so every op generator can be tested on many shapes.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from rstf.cgen.codegen import generate_subgraph
from rstf.frontend.graph import Graph, load_model
from rstf.build.cexec import run_subgraph_c
from rstf.frontend.tfutil import tf


def make_graph_def(build):
    """`build()` creates ops in a fresh tf.Graph (v1 style); returns its GraphDef."""
    g = tf.Graph()
    with g.as_default():
        build()
    return g.as_graph_def()


def save_graph_def(gd, directory, name="model.pb") -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(gd.SerializeToString())
    return path


def load_graph_def(gd, outputs=None, fold: bool = False) -> Graph:
    """`gd` loaded as written, or with `fold` through the loader's rewrites as `optimize`
    loads a model."""
    with tempfile.TemporaryDirectory() as d:
        return load_model(save_graph_def(gd, d), outputs=outputs, fold=fold)


def run_tf(gd, feeds: dict, fetches: list[str]) -> list[np.ndarray]:
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(fetches, {k if ":" in k else k + ":0": v for k, v in feeds.items()})


def run_generated(graph: Graph, nodes: list[str], feeds: dict, index: int = 0):
    """Generate one subgraph and run its C on `feeds` ({tensor or node name: array}); the
    graph's constants are fed from their values. Returns ({output tensor: array}, code)."""
    sg = generate_subgraph(graph, nodes, index)
    inputs = {}
    for slot in sg.inputs:
        name = slot.tensor
        short = name.removesuffix(":0")
        inputs[name] = (feeds[name] if name in feeds else feeds[short] if short in feeds
                        else graph.const_value(name))
    return run_subgraph_c(sg, inputs), sg


def generated_and_tf(build, feeds: dict, fetch: str = "out:0", fold: bool = False):
    """(C result, TF result, SubgraphCode) for a graph whose every non-constant node is
    generated as one subgraph (`fold`: after the loader's rewrites)."""
    gd = make_graph_def(build)
    g = load_graph_def(gd, outputs=[fetch.split(":")[0]], fold=fold)
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")
             and not g.is_const(f"{n}:0")]
    outs, sg = run_generated(g, nodes, feeds)
    return outs[fetch], run_tf(gd, feeds, [fetch])[0], sg


def assert_tf_bits(build, feeds: dict, fetch: str = "out:0", fold: bool = False):
    """The generated C of `build`'s graph gives TensorFlow's exact float bits (NaN payloads
    included); returns the SubgraphCode, for tests that also read the C."""
    got, ref, sg = generated_and_tf(build, feeds, fetch, fold)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    return sg


def check_against_tf(build, feeds: dict, fetch: str = "out:0", rtol: float = 1e-5,
                     require_all: bool = True, reference=None):
    """Build a graph, generate every non-constant node as one subgraph, and compare the C
    result of `fetch` with TensorFlow's (max error relative to the largest magnitude).
    `reference`: another builder whose graph TensorFlow runs for the expected values (an
    equivalent form of an op that this TensorFlow build cannot run; default `build`).

    Returns (max relative error, SubgraphCode) so tests can also inspect the C.
    """
    from rstf.opgen import check_node

    gd = make_graph_def(build)
    graph = load_graph_def(gd, outputs=[fetch.split(":")[0]])
    nodes = [n for n in graph.topo_order()
             if graph.nodes[n].op not in ("Const", "Placeholder")
             and not graph.is_const(f"{n}:0")]
    if require_all:
        for n in nodes:
            reason = check_node(graph.nodes[n], graph)
            assert reason is None, f"{n}: {reason}"
    outs, sg = run_generated(graph, nodes, feeds)
    ref_gd = gd if reference is None else make_graph_def(reference)
    ref = np.asarray(run_tf(ref_gd, feeds, [fetch])[0])
    got = outs[fetch]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(float(np.max(np.abs(ref))), 1e-30) if ref.size else 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) / scale if ref.size else 0.0
    assert err <= rtol, f"relative error {err:.3g} > {rtol:g}"
    return err, sg


def tiny_cnn(seed: int = 3):
    """A builder of a tiny model with the main op families: conv -> bias -> relu (a
    pointwise chain), max pool, depthwise conv, avg pool, mean, matmul, softmax. Input
    `input` 1x8x8x3, output `out`."""
    rng = np.random.RandomState(seed)
    w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    dw = rng.standard_normal((3, 3, 8, 1)).astype(np.float32)
    m = rng.standard_normal((8, 5)).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
        y = tf.nn.max_pool2d(y, 2, 2, "VALID")
        y = tf.nn.depthwise_conv2d(y, dw, [1, 1, 1, 1], "SAME")
        y = tf.nn.avg_pool2d(y, 2, 1, "SAME")
        y = tf.reduce_mean(y, [1, 2])
        tf.nn.softmax(tf.matmul(y, m), name="out")
    return build
