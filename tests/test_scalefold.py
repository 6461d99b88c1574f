"""Per-channel scales folded into conv/matmul weights (rstf.frontend.scalefold)."""
import numpy as np
import pytest

from harness import make_graph_def, run_tf, save_graph_def, tf
from rstf.frontend.fold import fold_constants
from rstf.frontend.graph import load_model
from rstf.frontend.scalefold import fold_scales

RNG = np.random.RandomState(0)
OUTS = ["out", "out_mm", "out_inf"]


def const(*shape):
    return tf.constant(RNG.standard_normal(shape).astype(np.float32))


def bn_chains():
    """Every folded pattern, and four that must stay: a conv with a second reader, a
    non-finite scale, a scale that broadcasts over H, and a Mul that is a model output."""
    x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 4], name="x")
    c = tf.nn.conv2d(x, const(3, 3, 4, 8), 1, "SAME", name="conv")
    a = tf.nn.relu6(tf.multiply(c, const(8), name="conv_mul") + const(8))
    d = tf.nn.depthwise_conv2d(a, const(3, 3, 8, 2), [1, 1, 1, 1], "SAME", name="dw")
    d = tf.multiply(tf.reshape(const(16), [1, 1, 1, 16]), d, name="dw_mul")  # scale first
    b = tf.nn.bias_add(tf.nn.conv2d(d, const(1, 1, 16, 8), 1, "VALID", name="pw"),
                       const(8), name="pw_bias")
    b = tf.multiply(b, const(8), name="pw_mul")
    two = tf.nn.conv2d(b, const(1, 1, 8, 8), 1, "VALID", name="two")
    two = tf.multiply(two, const(8), name="two_mul") + two  # the conv is read twice
    inf = tf.nn.conv2d(two, const(1, 1, 8, 8), 1, "VALID", name="inf")
    tf.identity(tf.multiply(inf, tf.constant([1.0] * 7 + [np.inf]), name="inf_mul"),
                name="out_inf")
    h = tf.nn.conv2d(two, const(1, 1, 8, 8), 1, "VALID", name="h")
    h = tf.multiply(h, const(1, 6, 1, 8), name="h_mul")
    m = tf.matmul(tf.reshape(h, [6, 48]), const(8, 48), transpose_b=True, name="mm")
    tf.multiply(m, const(8), name="out_mm")
    last = tf.nn.conv2d(h, const(1, 1, 8, 3), 1, "VALID", name="last")
    tf.multiply(last, const(3), name="out")


def test_fold_scales_patterns():
    gd, _ = fold_constants(make_graph_def(bn_chains), OUTS)
    folded_gd, folded = fold_scales(gd, OUTS)
    assert sorted(folded) == ["conv_mul", "dw_mul", "pw_mul"]
    ops = {n.name: n for n in folded_gd.node}
    for kept in ("two_mul", "inf_mul", "h_mul", "out", "out_mm"):
        assert ops[kept].op == "Mul", kept
    assert ops["conv"].input[1] == "conv/rstf_scaled"
    assert ops["pw_bias"].input[1] == "pw_bias/rstf_scaled"
    # The removed Muls' readers read the contraction (or its BiasAdd) instead.
    assert not any(t.split(":")[0] in folded for n in folded_gd.node for t in n.input)
    x = RNG.standard_normal((1, 6, 6, 4)).astype(np.float32)
    fetch = ["out:0", "out_mm:0", "out_inf:0"]
    ref, got = run_tf(gd, {"x": x}, fetch), run_tf(folded_gd, {"x": x}, fetch)
    for r, g in zip(ref[:2], got[:2]):
        assert np.abs(r - g).max() <= 1e-5 * np.abs(r).max()
        assert not np.array_equal(r, g)  # rounded differently, for real
    # inf_mul stays: its inf channel is inf or nan in the same places, the rest is close
    fin = np.isfinite(ref[2])
    np.testing.assert_array_equal(fin, np.isfinite(got[2]))
    assert np.abs(ref[2][fin] - got[2][fin]).max() <= 1e-5 * np.abs(ref[2][fin]).max()


def test_tensorflow_rule_is_grapplers():
    """The "tensorflow" rule folds what Grappler's MulConvPushDown folds, and nothing else:
    TensorFlow running the folded graph gives the bits it gives for the original one,
    where it folds them itself (non-finite scales included)."""
    gd, _ = fold_constants(make_graph_def(bn_chains), OUTS)
    folded_gd, folded = fold_scales(gd, OUTS, rule="tensorflow")
    assert sorted(folded) == ["conv_mul", "inf_mul"]
    ops = {n.name: n for n in folded_gd.node}
    for kept in ("dw_mul", "pw_mul", "two_mul", "h_mul", "out", "out_mm"):
        assert ops[kept].op == "Mul", kept
    x = RNG.standard_normal((1, 6, 6, 4)).astype(np.float32)
    fetch = ["out:0", "out_mm:0", "out_inf:0"]
    for r, g in zip(run_tf(gd, {"x": x}, fetch), run_tf(folded_gd, {"x": x}, fetch)):
        np.testing.assert_array_equal(r.view(np.uint32), g.view(np.uint32))


def grappler_cases():
    """Muls Grappler folds into a Conv2D's filter (a scalar, a (1, N) scale on the left, a
    chain of two) and one it does not: a (1, 1, 6, N) scale, which also varies over W."""
    x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 4], name="x")
    a = tf.multiply(tf.nn.conv2d(x, const(3, 3, 4, 8), 1, "SAME"), tf.constant(0.3),
                    name="scalar_mul")
    a = tf.multiply(const(1, 8), tf.nn.conv2d(a, const(1, 1, 8, 8), 1, "SAME"),
                    name="left_mul")
    a = tf.multiply(tf.multiply(tf.nn.conv2d(a, const(1, 1, 8, 8), 1, "SAME"), const(8),
                                name="chain_1"), const(8), name="chain_2")
    a = tf.multiply(tf.nn.conv2d(a, const(1, 1, 8, 8), 1, "SAME"), const(1, 1, 6, 8),
                    name="over_w")
    tf.identity(tf.nn.relu(a + const(8)), name="out")


def test_tensorflow_rule_patterns():
    gd, _ = fold_constants(make_graph_def(grappler_cases), ["out"])
    folded_gd, folded = fold_scales(gd, ["out"], rule="tensorflow")
    assert sorted(folded) == ["chain_1", "chain_2", "left_mul", "scalar_mul"]
    x = RNG.standard_normal((1, 6, 6, 4)).astype(np.float32)
    r, g = run_tf(gd, {"x": x}, ["out:0"])[0], run_tf(folded_gd, {"x": x}, ["out:0"])[0]
    np.testing.assert_array_equal(r.view(np.uint32), g.view(np.uint32))


def test_load_model_fold_scales(tmp_path):
    path = save_graph_def(make_graph_def(bn_chains), str(tmp_path))
    g = load_model(path, outputs=OUTS, fold=True, fold_scales=True)
    assert sorted(g.tf_scales_folded) == ["conv_mul", "inf_mul"]
    assert sorted(g.scales_folded) == ["dw_mul", "pw_mul"]
    assert "conv_mul" not in g.nodes and g.nodes["conv"].out_shapes == [(1, 6, 6, 8)]
    # The replaced weights and scales had no other reader: gone.
    assert all(n.op != "Const" or g.consumers[n.name] or n.name in g.outputs
               for n in g.nodes.values())
    g = load_model(path, outputs=OUTS, fold=True)
    assert g.scales_folded == [] and sorted(g.tf_scales_folded) == ["conv_mul", "inf_mul"]
    assert load_model(path, outputs=OUTS).tf_scales_folded == []  # without fold: as written


@pytest.mark.parametrize("fold", ["on", "off"])
def test_optimize_fold_scales(tmp_path, fold):
    """End to end: the option reaches the report, and the optimized graph matches TF."""
    from rstf.evaluation.compare import compare
    from rstf.pipeline import optimize

    path = save_graph_def(make_graph_def(bn_chains), str(tmp_path))
    out = str(tmp_path / "o.rstf")
    rep = optimize(path, out, outputs=OUTS, fold_scales=fold == "on",
                   log=lambda m: None, verbosity=0)
    assert rep["options"]["fold_scales"] is (fold == "on")
    assert rep["scales_folded"] == (2 if fold == "on" else 0)
    assert rep["tf_scales_folded"] == 2
    res = compare(path, out, latency=False)
    # out_inf's inf channel is inf or NaN where TF's is (TF folds that scale as well)
    outs = {o["name"]: o for o in res["outputs"]}
    assert all(o["passed"] for o in outs.values()), outs


@pytest.mark.parametrize("fold", ["on", "off"])
def test_inspect_folds_as_optimize_does(tmp_path, fold, capsys):
    """`rstf inspect` loads the model as `optimize` does, so its partitions are the ones
    `optimize` generates: without the Muls TensorFlow folds itself, and under `on` without
    the others it folds."""
    from rstf import cli
    from rstf.evaluation.inspect_graph import inspect
    from rstf.pipeline import select_parts

    path = save_graph_def(make_graph_def(bn_chains), str(tmp_path))
    on = fold == "on"
    r = inspect(path, outputs=OUTS, fold_scales=on)
    assert r["fold_scales"] is on and r["scales_folded"] == (2 if on else 0)
    graph = load_model(path, outputs=OUTS, fold=True, fold_scales=on)
    parts, _ = select_parts(graph, 400, lambda m: None)
    assert [p["node_names"] for p in r["partitions"]] == parts
    names = {n for p in parts for n in p}
    assert ("dw_mul" in names) is not on and "two_mul" in names  # two_mul never folds
    assert "conv_mul" not in names  # TensorFlow folds it itself
    assert cli.main(["inspect", path, "--outputs", ",".join(OUTS), "--fold-scales", fold]) == 0
    assert f"{4 if on else 2} scales folded into weights" in capsys.readouterr().out


# Output channels (a group's, grouped) in whole 16s: on AVX2 TensorFlow sums the columns
# past the last 16 in another order (docs/limitations.md).
@pytest.mark.parametrize("h,c,groups,o,k,stride", [
    (12, 168, 1, 176, 1, 1),   # RegNetX's 1x1 (its 168 channels, 176 out)
    (12, 112, 7, 112, 3, 1),   # a grouped 3x3 as RegNetX's, groups of 16
    (24, 112, 7, 112, 3, 2),
    (48, 3, 1, 32, 3, 2),      # a stem conv
])
def test_batch_norm_after_a_conv_gives_tensorflows_bits(h, c, groups, o, k, stride):
    """Keras' batch norm after a bias-free conv (`conv * s + t`, ReLU): the generated C,
    after the loader's fold, computes what TensorFlow computes once Grappler has put `s`
    into the filter, bit for bit."""
    from harness import assert_tf_bits

    w = (RNG.standard_normal((k, k, c // groups, o)) / np.sqrt(k * k * c / groups))
    s = RNG.uniform(0.5, 1.5, o)
    t = RNG.standard_normal(o) * 0.1

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, h, h, c], name="x")
        y = tf.nn.conv2d(x, w.astype(np.float32), stride, "SAME")
        y = y * tf.constant(s.astype(np.float32)) + tf.constant(t.astype(np.float32))
        tf.identity(tf.nn.relu(y), name="out")
    feeds = {"x": RNG.random_sample((1, h, h, c)).astype(np.float32)}
    assert_tf_bits(build, feeds, fold=True)
