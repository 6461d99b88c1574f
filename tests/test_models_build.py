"""Tests for models/build.py: determinism, runnability and CLI errors.

Uses mobilenet_v2 at a small input size so the whole file runs in well under a
minute on 2 CPU cores.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The models/ directory is not an installed package; import it from the repo.
if REPO not in sys.path:
    sys.path.insert(0, REPO)

tf = pytest.importorskip("tensorflow")
from models.build import build_graph_def  # noqa: E402

SIZE = 64  # small but valid for mobilenet_v2 (>= 32)


@pytest.fixture(scope="module")
def graph_def():
    return build_graph_def("mobilenet_v2", input_size=SIZE)


def test_build_is_deterministic_in_process(graph_def):
    # A second in-process build must not pick up different keras auto-names
    # or RNG state: the serialized bytes must match exactly.
    again = build_graph_def("mobilenet_v2", input_size=SIZE)
    assert graph_def.SerializeToString(deterministic=True) == again.SerializeToString(
        deterministic=True
    )


def test_seed_changes_weights(graph_def):
    other = build_graph_def("mobilenet_v2", input_size=SIZE, seed=1)
    assert graph_def.SerializeToString(deterministic=True) != other.SerializeToString(
        deterministic=True
    )


def test_graph_contract_and_runs(graph_def):
    nodes = {n.name: n for n in graph_def.node}
    assert nodes["input"].op == "Placeholder"
    assert graph_def.node[-1].name == "output" and graph_def.node[-1].op == "Identity"
    assert not any(n.op in ("VarHandleOp", "ReadVariableOp") for n in graph_def.node)

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x_t = g.get_tensor_by_name("input:0")
    y_t = g.get_tensor_by_name("output:0")
    assert x_t.shape.as_list() == [1, SIZE, SIZE, 3]
    assert y_t.shape.as_list() == [1, 1000]

    x = np.random.RandomState(123).uniform(0, 1, (1, SIZE, SIZE, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        y = sess.run(y_t, {x_t: x})
    assert y.shape == (1, 1000)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-4)
    # Softmax neither one-hot nor exactly uniform.
    assert y.max() < 0.99
    assert y.max() > y.min()


def test_activations_are_o1_on_in_distribution_images(graph_def):
    """Batch norm calibrated on images in [0, 1): every batch norm's and ReLU's output has a
    standard deviation of order 1 on such an image, as in a trained network, and the logits
    too (the test that would have caught errors hidden by logits in the thousands)."""
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    ops = [o for o in g.get_operations() if o.type in ("FusedBatchNormV3", "Relu6", "Relu")]
    logits = [o for o in g.get_operations() if o.type == "Softmax"][0].inputs[0]
    x = np.random.RandomState(5).uniform(0, 1, (1, SIZE, SIZE, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        values = sess.run([o.outputs[0] for o in ops] + [logits], {"input:0": x})
    stds = np.array([v.std() for v in values])
    assert len(ops) > 30 and np.median(stds) > 0.2 and stds.max() < 5, stds
    assert 0.3 < values[-1].std() < 3.0


def test_unknown_name_cli(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "models", "build.py"), "no_such_net",
         "-o", str(tmp_path / "x.pb")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no_such_net" in lines[0] and "mobilenet_v2" in lines[0]
    assert not (tmp_path / "x.pb").exists()


def test_unknown_name_function():
    with pytest.raises(ValueError, match="valid names"):
        build_graph_def("no_such_net")


@pytest.fixture(scope="module")
def v4_graph_def():
    return build_graph_def("inception_v4", input_size=75)  # the smallest input it takes


def test_inception_v4_architecture(v4_graph_def):
    """Paper's Fig. 9: 149 conv layers (each Conv2D + BN + ReLU), 14 average pools (4 A,
    7 B, 3 C blocks), 4 max pools, one 1000-way dense layer; deterministic at 75x75."""
    import collections

    gd = v4_graph_def
    ops = collections.Counter(n.op for n in gd.node)
    assert ops["Conv2D"] == 149 and ops["AvgPool"] == 14 and ops["MaxPool"] == 4
    assert ops["MatMul"] == 1 and ops["Softmax"] == 1
    assert gd.SerializeToString(deterministic=True) == build_graph_def(
        "inception_v4", input_size=75).SerializeToString(deterministic=True)
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(gd, name="")
    assert g.get_tensor_by_name("output:0").shape.as_list() == [1, 1000]


def _run(graph_def, size: int, hi: float = 1.0) -> np.ndarray:
    """The model's output on a seeded image of size x size, uniform in [0, hi) (what its
    batch norm was calibrated on)."""
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x = np.random.RandomState(0).uniform(0, hi, (1, size, size, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        return sess.run("output:0", {"input:0": x})


def test_inception_v4_runs(v4_graph_def):
    y = _run(v4_graph_def, 75)
    assert y.shape == (1, 1000) and np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-4)
    # Neither one-hot nor uniform (at 75 the 1x1 final map gives a flat softmax, max
    # ~0.0012; at 299 its max is ~0.07).
    assert 1.1 * y.min() < y.max() < 0.99


def test_inception_v4_shapes_and_params():
    """42.7M parameters (as the paper's / TF-slim's), an 8x8x1536 map before the pooling at
    299x299; 75 is the smallest input (74 leaves Reduction-B nothing to convolve)."""
    import keras

    sys.path.insert(0, os.path.join(REPO, "models"))
    from inception_v4 import inception_v4

    keras.backend.clear_session()
    model = inception_v4(input_shape=(299, 299, 3))
    assert model.count_params() == 42_711_400
    pool = next(l for l in model.layers if isinstance(l, keras.layers.GlobalAveragePooling2D))
    assert tuple(pool.input.shape) == (None, 8, 8, 1536)
    assert tuple(model.output.shape) == (None, 1000)
    with pytest.raises(ValueError, match=">= 75"):
        build_graph_def("inception_v4", input_size=74)
    with pytest.raises(ValueError):
        keras.backend.clear_session()
        inception_v4(input_shape=(74, 74, 3))


def test_regnetx_architecture():
    """models/regnet.py's RegNetX002: a stem, 1 + 1 + 4 + 7 X blocks whose 3x3 convolutions
    are grouped in groups of 8 channels (24 -> 3 groups ... 368 -> 46), a 1x1 shortcut
    where each stage's first block changes the shape, and a softmax over 1000 classes."""
    import keras

    sys.path.insert(0, os.path.join(REPO, "models"))
    from regnet import REGNETX, regnet_x

    keras.backend.clear_session()
    model = regnet_x("RegNetX002", input_shape=(64, 64, 3))
    convs = [l for l in model.layers if isinstance(l, keras.layers.Conv2D)]
    depths, widths, group_width = REGNETX["RegNetX002"]
    grouped = [l for l in convs if l.groups > 1]
    assert len(convs) == 1 + 3 * sum(depths) + len(depths)
    assert [l.groups for l in grouped] == [w // group_width for d, w in zip(depths, widths)
                                           for _ in range(d)]
    assert all(l.kernel_size == (3, 3) and l.filters // l.groups == 8 for l in grouped)
    assert not any(l.use_bias for l in convs)
    assert tuple(model.output.shape) == (None, 1000)
    with pytest.raises(ValueError, match=">= 32"):
        build_graph_def("regnetx_002", input_size=31)


def test_keras_names_checked():
    # Minimum sizes of keras:CTOR names are ValueErrors (not KeyErrors), found before
    # any model is built; unknown constructors are ValueErrors too.
    with pytest.raises(ValueError, match="keras:Xception needs input size >= 71"):
        build_graph_def("keras:Xception", input_size=64)
    with pytest.raises(ValueError, match="keras:DenseNet121 needs input size >= 32"):
        build_graph_def("keras:DenseNet121", input_size=31)
    with pytest.raises(ValueError, match="valid names"):
        build_graph_def("keras:../x")
    with pytest.raises(ValueError, match="keras.applications has no 'NoSuchNet'"):
        build_graph_def("keras:NoSuchNet", input_size=32)


def test_calibration_count_fills_the_deepest_map():
    """The batch norms see as many positions a channel at the stride-32 stage at a small
    input as at 224 (8 images of 7x7), within [8, 64] images; 224 and 299 keep 8."""
    from models.build import calibration_count, calibration_images

    assert calibration_count(224) == calibration_count(299) == 8
    assert calibration_count(96) == 44 and calibration_count(32) == 64
    x = calibration_images(96, input_range=(0.0, 255.0))
    assert x.shape == (44, 96, 96, 3) and 0 <= x.min() and x.max() < 255
    # a larger count only appends images: the first 8 are those of a count of 8
    np.testing.assert_array_equal(calibration_images(96, 8), calibration_images(96)[:8])


def test_residual_branches_damped_in_inverted_residual_families():
    """EfficientNet's `P_project_bn` before each `P_add` is damped (gamma and beta scaled
    by 0.25 before calibration); a block without the add, and models outside the
    keras: families (the reference mobilenet_v2), are not."""
    import keras
    from models.build import _damped_branch_norms

    m = keras.applications.EfficientNetB0(weights=None, input_shape=(32, 32, 3))
    damped = _damped_branch_norms(m, "keras:EfficientNetB0")
    names = {lay.name for lay in m.layers}
    assert damped and all(d.endswith("_project_bn") for d in damped)
    assert all(d[:-len("project_bn")] + "add" in names for d in damped)
    assert "block1a_project_bn" in names and "block1a_project_bn" not in damped
    assert _damped_branch_norms(m, "mobilenet_v2") == set()


@pytest.mark.parametrize("ctor", ["EfficientNetV2B0", "MobileNetV3Large"])
def test_inverted_residual_logits_o1_on_fresh_images(ctor):
    """On images the calibration never saw (the seeds `rstf compare` and `rstf bench`
    draw), the logits stay O(1): no one-hot softmax hiding every engine's error."""
    from models.build import build_reference

    gd, rng = build_reference(f"keras:{ctor}", input_size=96)
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(gd, name="")
    logits = [o for o in g.get_operations() if o.type == "Softmax"][-1].inputs[0]
    with tf.compat.v1.Session(graph=g) as sess:
        for seed in range(4):
            x = np.random.RandomState(seed).uniform(*rng, (1, 96, 96, 3)).astype(np.float32)
            std = sess.run(logits, {"input:0": x}).std()
            assert 0.3 < std < 3.0, (seed, std)


def test_keras_classifier_calibrated():
    """keras:CTOR names get their classifier rescaled by a power of two (plain rules give
    Xception logits with std ~1e5: a one-hot softmax that would hide any error)."""
    y = _run(build_graph_def("keras:Xception", input_size=71), 71)
    assert y.shape == (1, 1000) and np.all(np.isfinite(y))
    assert 0.003 < y.max() < 0.5 and y.min() > 0


def test_pixel_models_calibrated_on_pixels(tmp_path):
    """A keras model that rescales raw pixels itself (MobileNetV3's `x / 127.5 - 1`) is
    calibrated on, and reported as taking, [0, 255); one without such a layer keeps
    [0, 1); an explicit range wins. Fed [0, 1), MobileNetV3 would see a nearly constant
    image and its batch norms would cancel means 100x their spread."""
    import keras
    from models.build import PIXEL_RANGE, UNIT_RANGE, build_reference, native_input_range

    assert native_input_range(keras.applications.MobileNetV3Small(
        weights=None, input_shape=(32, 32, 3))) == PIXEL_RANGE
    assert native_input_range(keras.applications.MobileNetV2(
        weights=None, input_shape=(32, 32, 3))) == UNIT_RANGE
    gd, rng = build_reference("keras:MobileNetV3Small", input_size=32)
    assert rng == PIXEL_RANGE
    y = _run(gd, 32, hi=255.0)
    assert np.all(np.isfinite(y)) and 0.002 < y.max() < 0.5
    assert build_reference("mobilenet_v2", input_size=32)[1] == UNIT_RANGE
    assert build_reference("mobilenet_v2", input_size=32, input_range=(0.0, 255.0))[1] \
        == PIXEL_RANGE
    out = tmp_path / "v3.pb"
    r = subprocess.run([sys.executable, os.path.join(REPO, "models", "build.py"),
                        "keras:MobileNetV3Small", "--input-size", "32", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "uniform in [0, 255)" in r.stdout and "--input-range 0,255" in r.stdout


def _grouped_conv_model():
    """A grouped Conv2D (keras 3 runs it through a nested XLA function) and 1x1 Conv2Ds, the
    grouped filter (5 x 5 x 1 x 64 floats) and the first 1x1 kernel above freeze's weight
    threshold."""
    import keras

    keras.backend.clear_session()
    inp = keras.Input((8, 8, 16))
    x = keras.layers.Conv2D(64, 5, padding="same", groups=16)(inp)  # multiplier 4
    x = keras.layers.Conv2D(64, 1)(x)
    model = keras.Model(inp, keras.layers.Conv2D(3, 1)(x))
    rng = np.random.RandomState(0)
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype(np.float32) * 0.1)
    fn = tf.function(lambda t: tf.identity(model(t, training=False), name="output"))
    return model, fn.get_concrete_function(tf.TensorSpec([1, 8, 8, 16], tf.float32,
                                                         name="input"))


def test_grouped_conv_call_inlined_as_depthwise():
    """keras 3 runs a grouped Conv2D through a nested XLA function; freezing leaves a
    StatefulPartitionedCall that freeze.py inlines, rewriting the depthwise-grouped Conv2D
    as DepthwiseConv2dNative (ConvNeXt's 7x7 depthwise convolutions)."""
    import collections

    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from models import freeze

    model, concrete = _grouped_conv_model()
    raw = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    assert any(n.op == "StatefulPartitionedCall" for n in raw.node)
    gd = freeze.freeze_function(concrete, ("output",))
    ops = collections.Counter(n.op for n in gd.node)
    assert ops["DepthwiseConv2dNative"] == 1 and ops["Conv2D"] == 2
    assert "StatefulPartitionedCall" not in ops and not gd.library.function
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(gd, name="")
    x_in = np.random.RandomState(1).standard_normal((1, 8, 8, 16)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        y = sess.run("output:0", {"input:0": x_in})
    np.testing.assert_allclose(y, np.asarray(model(x_in)), rtol=1e-5, atol=1e-5)


def test_freeze_function_is_the_public_freeze_byte_for_byte():
    """freeze_function leaves out convert_variables_to_constants_v2's copies of the weights
    (its memory), not anything of its graph: the same bytes, node order and attributes
    included, weights above the threshold too."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from models import freeze

    _, concrete = _grouped_conv_model()
    public = freeze._prune_to_outputs(freeze._inline_calls(
        convert_variables_to_constants_v2(concrete).graph.as_graph_def()))
    lean = freeze.freeze_function(concrete, ("output",))
    assert any(len(n.attr["value"].tensor.tensor_content) > freeze._WEIGHT_BYTES
               for n in lean.node if n.op == "Const")
    assert lean.SerializeToString(deterministic=True) == \
        public.SerializeToString(deterministic=True)


def test_keras_name_cli_errors(tmp_path):
    script = os.path.join(REPO, "models", "build.py")
    for args, needle in ((["keras:Xception", "--input-size", "64"], ">= 71"),
                         (["keras:NoSuchNet", "--input-size", "32"], "NoSuchNet"),
                         (["bert_small", "--seq-len", "513"], "outside [1, 512]"),
                         (["bert_base", "--batch", "0"], "--batch 0"),
                         (["bert_small", "--input-size", "64"], "image models")):
        proc = subprocess.run([sys.executable, script, *args, "-o", str(tmp_path / "x.pb")],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr.strip().splitlines()[-1], proc.stderr
        assert not (tmp_path / "x.pb").exists()


def test_zoo_driver_helpers():
    """benchmarks/zoo.py's model list and table, without running any model."""
    from benchmarks import zoo, zoo_report

    assert ("Xception", 71) in zoo.parse_models("Xception", 32)
    assert zoo.parse_models("inception_v4@299,VGG16", 96) == [("inception_v4", 299),
                                                              ("VGG16", 96)]
    assert zoo.build_name("inception_v4") == "inception_v4"
    assert zoo.build_name("DenseNet121") == "keras:DenseNet121"
    assert "inception_v4" in zoo.ALL and len(zoo.ALL) == len(set(zoo.ALL))
    md = zoo_report.table([
        {"model": "A", "input_size": 96, "nodes_total": 10, "nodes_covered": 5,
         "flops_total": 4, "flops_covered": 4, "unsupported": {"Erf": 2},
         "max_rel_err": 1e-6, "passed": True, "optimize_seconds": 3.0, "output_max": 0.1},
        {"model": "B", "input_size": 96, "error": "optimize: RstfError: a | b"}])
    lines = md.splitlines()
    assert "| A | 96 | 5/10 (50.0%) | 100.0% | Erf x2 | 1e-06 | pass | 3 | 0.100 |" in lines
    assert lines[-1].startswith("| B | 96 |") and "a \\| b" in lines[-1]
