"""rstf.frontend.passthrough: readers of Identity / IdentityN / StopGradient / Snapshot read what it
forwards; the model's values, outputs and orderings are unchanged."""
import numpy as np
import pytest

from rstf.frontend.passthrough import bypass
from rstf.frontend.tfutil import tf


def _run(gd, fetches, feeds):
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        return sess.run(fetches, feeds)


@tf.custom_gradient
def _swish(x):
    # What Keras' EfficientNet freezes to: the activation wrapped in IdentityN.
    y = x * tf.sigmoid(x)
    return y, lambda dy: dy


def _swish_graph():
    rng = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 3], name="x")
        w = tf.constant(rng.standard_normal((3, 3, 3, 8)).astype(np.float32))
        a = _swish(tf.nn.conv2d(x, w, 1, "SAME"))
        b = tf.identity(tf.stop_gradient(tf.identity(a)), name="chain")
        tf.nn.relu(b * 2.0, name="out")
        tf.identity(a, name="also_out")  # a model output that is an Identity
    return g.as_graph_def(), {"x:0": rng.random_sample((1, 6, 6, 3)).astype(np.float32)}


def test_bypass_rewires_readers_and_drops_the_forwarding_nodes():
    gd, feeds = _swish_graph()
    assert "IdentityN" in {n.op for n in gd.node}
    new, removed = bypass(gd, ["out", "also_out"])
    ops = {n.name: n.op for n in new.node}
    assert "IdentityN" not in ops.values() and "StopGradient" not in ops.values()
    assert "chain" in removed and "chain" not in ops
    assert ops["also_out"] == "Identity"  # an output stays, so its name is still there
    # Nothing reads a forwarding node any more; the input GraphDef is unchanged.
    forwarding = {n for n, op in ops.items() if op in ("Identity", "IdentityN", "StopGradient")}
    assert not {t.split(":")[0] for n in new.node for t in n.input} & forwarding
    assert "IdentityN" in {n.op for n in gd.node}
    before = _run(gd, ["out:0", "also_out:0"], feeds)
    after = _run(new, ["out:0", "also_out:0"], feeds)
    for a, b in zip(before, after):
        assert np.array_equal(a, b)


def test_identityn_output_k_is_input_k():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [4], name="y")
        a, b = tf.identity_n([x + 1.0, y * 3.0], name="pair")
        tf.subtract(b, a, name="out")
    gd = g.as_graph_def()
    new, removed = bypass(gd, ["out"])
    assert removed == ["pair"]
    out = next(n for n in new.node if n.name == "out")
    assert list(out.input) == ["mul", "add"]
    feeds = {"x:0": np.arange(4, dtype=np.float32), "y:0": np.ones(4, np.float32)}
    assert np.array_equal(_run(gd, "out:0", feeds), _run(new, "out:0", feeds))


@pytest.mark.parametrize("how", ["has a control input", "is read through a control edge"])
def test_nodes_that_order_something_are_kept(how):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        first = tf.add(x, 1.0, name="first")
        if how == "has a control input":
            with tf.control_dependencies([first]):
                mid = tf.identity(x, name="mid")
            tf.multiply(mid, 2.0, name="out")
        else:
            mid = tf.identity(x, name="mid")
            with tf.control_dependencies([mid]):
                tf.multiply(x, 2.0, name="out")
    gd = g.as_graph_def()
    new, removed = bypass(gd, ["out", "first"])
    assert removed == []
    assert [list(n.input) for n in new.node] == [list(n.input) for n in gd.node]


@pytest.mark.tfbuild
def test_swish_runs_in_the_conv_epilogue_without_copies(tmp_path):
    """End to end: the IdentityN of a custom-gradient swish leaves no copy in the C, and the
    optimized graph matches TensorFlow."""
    from rstf.evaluation.compare import compare
    from rstf.pipeline import optimize

    gd, _ = _swish_graph()
    model = tmp_path / "swish.pb"
    model.write_bytes(gd.SerializeToString())
    out = tmp_path / "swish.rstf"
    report = optimize(str(model), str(out), log=lambda m: None, verbosity=0)
    nodes = [n for sg in report["subgraphs"] for n in sg["nodes"]]
    assert nodes and not [n for n in nodes if "IdentityN" in n or n == "chain"]
    source = "".join(p.read_text() for p in (out / "src").glob("subgraph_*.c"))
    assert "rstf_logisticf(" in source and "IdentityN" not in source
    assert compare(str(model), str(out), latency=False)["passed"]
