"""Build frozen TensorFlow GraphDefs of keras.applications models with fixed weights.

Usage::

    python models/build.py NAME -o PATH.pb [--input-size H] [--seed S] [--input-range LO,HI]
    python models/build.py bert_small -o PATH.pb [--seq-len L] [--batch B | --dynamic-batch]

NAME is one of ``inception_v3`` (default input 299), ``inception_v4`` (299; built by
``models/inception_v4.py``, not in keras.applications), ``resnet50`` (224) or
``mobilenet_v2`` (224), or ``regnetx_002`` ... ``regnetx_032`` (224; RegNetX, grouped
convolutions, built by ``models/regnet.py``).  ``--input-size H`` builds a smaller (or
larger) square variant, e.g. ``inception_v3`` at 75 or ``mobilenet_v2`` at 96, for fast tests.

NAME may also be ``keras:CTOR`` for any image classifier constructor in
``keras.applications`` (``keras:DenseNet121``, ``keras:EfficientNetB0``, ...; used by
``benchmarks/zoo.py``), at that architecture's standard input size by default
(``KERAS_DEFAULT_SIZE``, else 224) and no smaller than ``KERAS_MIN_INPUT_SIZE`` (else
32).  The weight rules are the same; architectures' extra weight kinds get small
values from the same RandomState (see ``_assign_weights``).

Every model's batch-norm statistics are calibrated on images uniform in [0, 1)
(``_calibrate_batch_norms``), so that activations stay O(1) through the whole depth as
in a trained network fed the inputs it was trained on, and the classifier is rescaled by
a power of two so the logits' std is about 1 on such images (``_calibrate_classifier``).
Feed these models images in [0, 1): `rstf compare` does by default. The exception is a
keras.applications model that rescales raw pixels itself (MobileNetV3, EfficientNet,
EfficientNetV2, ConvNeXt: ``native_input_range``), calibrated on and fed [0, 255)
(`rstf compare --input-range 0,255`); ``build_reference`` returns the range with the graph,
and the script prints it.

The names in ``models/breadth.py``'s ``BREADTH`` (``vit``, ``swin``, ``segformer``, ``gpt2``,
``llama``, ``deberta``, ``unet``, ``fpn``, ...) are the breadth sweep's small transformers and
decoders, at fixed sizes (that module's docstring gives them).

``bert_small`` (4 layers, hidden 512, 8 heads) and ``bert_base`` (BERT-base) are keras-hub
BERT encoders, ``[batch, seq-len]`` int32 inputs, built by ``models/bert.py`` (whose
docstring gives their contract); keras-hub: ``pip install --no-deps -r requirements-models.txt``.

Contract of the produced file (the image models) (and of :func:`build_graph_def`):

* A binary ``GraphDef`` with no variables: every weight is a ``Const``.
* Exactly one input: a ``Placeholder`` named ``input``, float32, static shape
  ``[1, H, H, 3]`` (the batch dimension is fixed at 1).
* Exactly one output: an ``Identity`` node named ``output``, float32
  ``[1, 1000]`` softmax probabilities (the model in inference mode,
  ``training=False``).  Nothing consumes ``output`` and every node in the graph
  is an ancestor of it (or ``output`` itself).
* Weights come only from ``numpy.random.RandomState(seed)``, never from the
  keras/TF RNG and never from a download, so the same (NAME, H, seed) gives
  byte-identical files across processes and machines running the same
  TensorFlow version.

Exit status: 0 on success, 2 on a usage error (including an unknown NAME, which
is reported as a single line on stderr before TensorFlow is even imported; a
``keras:CTOR`` that keras.applications lacks is found, and reported the same way,
once keras is imported).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING

try:  # imported as models.build, or run as a script from models/
    from .bert import BERT_MODELS, DEFAULT_SEQ_LEN, build_bert_graph_def
    from .breadth import BREADTH, build_breadth
    from .freeze import OUTPUT_NAME, freeze_function, write_graph_def
    from .regnet import REGNETX, regnet_x
except ImportError:
    from bert import BERT_MODELS, DEFAULT_SEQ_LEN, build_bert_graph_def
    from breadth import BREADTH, build_breadth
    from freeze import OUTPUT_NAME, freeze_function, write_graph_def
    from regnet import REGNETX, regnet_x

if TYPE_CHECKING:  # Only for annotations: importing TF is slow and noisy.
    import tensorflow as tf

# name -> (keras.applications constructor name, default square input size)
MODELS: dict[str, tuple[str, int]] = {
    "inception_v3": ("InceptionV3", 299),
    "resnet50": ("ResNet50", 224),
    "mobilenet_v2": ("MobileNetV2", 224),
    "inception_v4": ("inception_v4", 299),  # models/inception_v4.py, not keras.applications
    # models/regnet.py (grouped convolutions; keras.applications has no RegNet):
    # regnetx_002 ... regnetx_032
    **{f"regnetx_{v[len('RegNetX'):]}": (v, 224) for v in REGNETX},
}

# Smallest square input keras.applications accepts for each architecture.
# inception_v4 at 75: stem 37, 35, 35, 17, 15, 7x7x384; Reduction-A 3x3; Reduction-B 1x1
# (at 74 Reduction-B's VALID stride-2 3x3 convolutions get a 2x2 input: no output).
MIN_INPUT_SIZE: dict[str, int] = {"inception_v3": 75, "resnet50": 32, "mobilenet_v2": 32,
                                  "inception_v4": 75,
                                  **{n: 32 for n, (v, _) in MODELS.items() if v in REGNETX}}

# "keras:CTOR" names: standard input sizes other than 224, and minimum sizes other than
# 32 (keras.applications' own checks).
KERAS_DEFAULT_SIZE: dict[str, int] = {
    "InceptionV3": 299, "InceptionResNetV2": 299, "Xception": 299, "NASNetLarge": 331,
    "EfficientNetB1": 240, "EfficientNetB2": 260, "EfficientNetB3": 300,
    "EfficientNetB4": 380, "EfficientNetB5": 456, "EfficientNetB6": 528,
    "EfficientNetB7": 600, "EfficientNetV2B1": 240, "EfficientNetV2B2": 260,
    "EfficientNetV2B3": 300, "EfficientNetV2S": 384, "EfficientNetV2M": 480,
    "EfficientNetV2L": 480,
}
KERAS_MIN_INPUT_SIZE: dict[str, int] = {"InceptionV3": 75, "InceptionResNetV2": 75,
                                        "Xception": 71}

# Images in the batch the batch-norm statistics are calibrated on (_calibrate_batch_norms):
# at least CALIBRATION_IMAGES, and enough that the stride-32 stage, the deepest of these
# classifiers, sees CALIBRATION_SAMPLES positions a channel (8 images of its 7x7 map at
# 224x224), at most CALIBRATION_MAX_IMAGES (calibration_count).
CALIBRATION_IMAGES = 8
CALIBRATION_SAMPLES = 8 * 7 * 7
CALIBRATION_MAX_IMAGES = 64

INPUT_NAME = "input"

# A residual branch added onto its shortcut with no normalisation after its last conv (the
# pre-activation ResNet*V2) makes the activations' std grow with every block.  Scaling the
# last conv kernel of every branch ("convS_blockN_3_conv") by 0.25 (cf. Fixup /
# zero-init-residual) keeps it O(1).  (In ResNet50 v1 a calibrated batch norm follows that
# conv and undoes the scale.)  The inverted-residual families damp their branches' last
# batch norm by the same factor (_damped_branch_norms).
BRANCH_DAMPING = 0.25
RESIDUAL_BRANCH_SCALE: dict[str, tuple[str, float]] = {
    "resnet50": ("_3_conv/kernel", BRANCH_DAMPING),
}
# The same rule for the keras:ResNet* family (v1 and v2 name their branches' last conv
# "convS_blockN_3_conv" too); ResNet152 has 50 blocks, so without it the softmax is one-hot.
_KERAS_RESNET = re.compile(r"keras:ResNet\d+(V2)?$")


def _damped_branch_norms(model, name: str) -> set[str]:
    """The batch norms that end a residual branch in keras.applications' inverted-residual
    families (EfficientNet, EfficientNetV2, MobileNetV3): `P_project_bn` where the model
    adds the branch onto its shortcut in a layer `P_add`. Their gamma and beta are scaled by
    BRANCH_DAMPING (the same Fixup / zero-init-residual rule as the ResNets'
    last conv), before calibration, so the layers after them are calibrated on the damped
    stream.

    Why: undamped, each of a deep stage's blocks adds a branch of std 1 onto the stream, and
    the squeeze-and-excite gates multiply what differs between two images. Calibrated, the
    calibration images' logits are O(1), but EfficientNetV2B3's on `rstf compare`'s seed-0
    image had a standard deviation of 15 (a one-hot softmax that hides every engine's
    error). Damped, twelve fresh images gave 0.7-1.2."""
    if not name.startswith("keras:"):
        return set()
    names = {lay.name for lay in _all_layers(model)}
    norms = {n.removesuffix("add") + "project_bn" for n in names if n.endswith("_add")}
    return norms & names


def _residual_rule(name: str) -> tuple[str, float] | None:
    if name in RESIDUAL_BRANCH_SCALE:
        return RESIDUAL_BRANCH_SCALE[name]
    if _KERAS_RESNET.match(name):
        return RESIDUAL_BRANCH_SCALE["resnet50"]
    return None


def default_input_size(name: str) -> int:
    """The model's standard square input size."""
    if name in MODELS:
        return MODELS[name][1]
    return KERAS_DEFAULT_SIZE.get(name[len("keras:"):], 224)


def min_input_size(name: str) -> int:
    """The smallest square input size the model builds at."""
    if name in MIN_INPUT_SIZE:
        return MIN_INPUT_SIZE[name]
    return KERAS_MIN_INPUT_SIZE.get(name[len("keras:"):], 32)


def _check_name(name: str) -> None:
    if name in BERT_MODELS or name in BREADTH:
        return
    if name.startswith("keras:") and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name[6:]):
        return  # any keras.applications constructor, checked when it is looked up
    if name not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; valid names: "
            f"{', '.join(sorted([*MODELS, *BERT_MODELS, *BREADTH]))} "
            f"or keras:CTOR (a keras.applications constructor)"
        )


def _assign_weights(model, name: str, seed: int) -> None:
    """Overwrite every weight of ``model`` from ``RandomState(seed)``.

    Weights are visited in ``model.weights`` order (deterministic for a given
    architecture) and drawn sequentially from one RandomState, so the result
    depends only on (architecture, input size, seed).  Distributions are chosen
    so activations neither explode nor vanish through the network in inference
    mode, where BatchNorm uses these moving statistics instead of batch ones
    (see RESIDUAL_BRANCH_SCALE); the batch-norm statistics and the classifier's scale are
    then calibrated (_calibrate_batch_norms, _calibrate_classifier).
    """
    import numpy as np

    rng = np.random.RandomState(seed)
    residual = _residual_rule(name)
    damped = _damped_branch_norms(model, name)

    for w in model.weights:
        shape = tuple(int(d) for d in w.shape)
        kind = _short(w)
        if kind == "kernel":
            # Conv2D (kh, kw, in, out) or Dense (in, out): fan_in = all but last.
            fan_in = int(np.prod(shape[:-1]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            if residual is not None and w.path.endswith(residual[0]):
                value *= residual[1]
        elif kind == "depthwise_kernel":
            # (kh, kw, in, multiplier): each output sees only kh*kw inputs.
            fan_in = shape[0] * shape[1]
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif kind == "pointwise_kernel" and name.startswith("keras:"):
            # SeparableConv2D's 1x1 (1, 1, in, out) half (Xception, NASNet): He over `in`.
            value = rng.standard_normal(shape) * np.sqrt(2.0 / shape[2])
        elif kind == "bias":
            value = rng.standard_normal(shape) * 0.01
        elif kind == "gamma":
            value = rng.uniform(0.8, 1.2, shape)
        elif kind in ("beta", "moving_mean"):
            value = rng.standard_normal(shape) * 0.1
        elif kind == "moving_variance":
            value = rng.uniform(0.5, 1.5, shape)
        elif name.startswith("keras:"):
            # Other architectures (the zoo sweep) have more weight kinds (layer scales,
            # normalisation statistics, ...): small values, still from our RandomState.
            value = (rng.uniform(0.5, 1.5, shape) if "variance" in kind
                     else rng.standard_normal(shape) * 0.05)
        else:
            # Fail loudly rather than leave a keras-RNG-initialised weight in
            # the graph, which would silently break cross-process determinism.
            raise RuntimeError(f"no init rule for weight {w.path!r} {shape}")
        if kind in ("gamma", "beta") and w.path.split("/")[0] in damped:
            value *= BRANCH_DAMPING
        w.assign(value.astype(np.float32))


def calibration_count(size: int) -> int:
    """How many images the statistics of a `size` x `size` model are calibrated on.

    Why more than a few at small sizes: at 96 x 96 the deepest stage is a 3 x 3 map, so 8
    images give its batch norms 72 positions a channel. Statistics that noisy normalise the
    calibration images themselves but not the next image: EfficientNetB0's logits had a
    standard deviation of 4.4 on one of four fresh images (a softmax of 0.84), and
    EfficientNetV2B3's 46 on `rstf compare`'s seed-0 image (one-hot: no engine's error
    shows). With the 7 x 7 map's 392 positions (44 images at 96) those were 1.7 and 15; the
    rest of the way is the residual branches' damping (`_damped_branch_norms`)."""
    side = -(-size // 32)
    need = -(-CALIBRATION_SAMPLES // (side * side))
    return min(CALIBRATION_MAX_IMAGES, max(CALIBRATION_IMAGES, need))


def calibration_images(size: int, count: int | None = None,
                       input_range: tuple[float, float] = (0.0, 1.0)):
    """The in-distribution input the statistics are calibrated on: `count` images
    (`calibration_count(size)` by default) uniform in `input_range` ([0, 1) by default, as
    `rstf compare` feeds an image model), from a fixed RandomState."""
    import numpy as np

    if count is None:
        count = calibration_count(size)
    rng = np.random.RandomState(20160223)
    return rng.uniform(*input_range, (count, size, size, 3)).astype(np.float32)


def _calibrate_batch_norms(model, size: int, input_range) -> None:
    """Set every BatchNormalization's moving mean and variance to the statistics of its own
    input on `calibration_images`, as training on such images would leave them.

    Why: with random moving statistics, batch norm in inference mode does not normalise,
    and activations drift with depth (their mean grows with every ReLU); errors that a
    trained network would show stay invisible. Calibrated, every layer's activations are
    O(1), as in a trained network fed the inputs it was trained on.

    How: one forward pass in training mode with each BN's momentum at 0 (its moving
    statistics become the batch's, and the layer normalises with them, so the next BN sees
    what inference will give it) and dropout off. The statistics are rounded to 12
    significant bits so that the file does not depend on the last bits of the forward pass
    (another machine's kernels sum in another order).
    """
    import keras
    import numpy as np

    bns = [lay for lay in _all_layers(model) if isinstance(lay, keras.layers.BatchNormalization)]
    if not bns:
        return
    drops = [lay for lay in _all_layers(model) if isinstance(lay, keras.layers.Dropout)]
    saved = [(lay, lay.momentum) for lay in bns] + [(lay, lay.rate) for lay in drops]
    for lay in bns:
        lay.momentum = 0.0
    for lay in drops:
        lay.rate = 0.0
    try:
        model(calibration_images(size, input_range=input_range), training=True)
    finally:
        for lay in bns:
            lay.momentum = dict(saved)[lay]
        for lay in drops:
            lay.rate = dict(saved)[lay]
    for lay in bns:
        for w in (lay.moving_mean, lay.moving_variance):
            w.assign(_round_bits(np.asarray(w.numpy(), np.float64), 12).astype(np.float32))


def _all_layers(model):
    """Every layer, nested models' too."""
    out = []
    for lay in model.layers:
        out.extend(_all_layers(lay) if hasattr(lay, "layers") else [lay])
    return out


def _round_bits(x, bits: int):
    import numpy as np

    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 2.0 ** bits) / 2.0 ** bits, e)


def _calibrate_classifier(model, size: int, input_range) -> None:
    """Scale the classifier kernel by a power of two so the logits have a standard
    deviation within a factor sqrt(2) of 1 over `calibration_images`.

    The architectures differ too much for one fixed scale: with the plain rules
    Xception's logits have std ~9e4 and NASNetMobile's ~650 at 96x96 (a one-hot softmax,
    on which rstf's errors would be invisible) and EfficientNetB0's ~0.02 (an almost
    uniform one).  The classifier is the last kernel (Dense, or the 1x1 Conv2D of
    MobileNet v1/v3).  Scaling by a power of two is exact, and rounding log2 of the
    measured std makes the file independent of the forward pass's last-bit rounding.
    """
    import keras
    import numpy as np

    kernels = [w for w in model.weights if _short(w) == "kernel"]
    if not kernels:
        return
    cls = kernels[-1]
    layer = next(lay for lay in model.layers if any(w is cls for w in lay.weights))
    x = calibration_images(size, input_range=input_range)
    feats = np.asarray(keras.Model(model.input, layer.input)(x), np.float64)
    feats = feats.reshape(len(x), -1)
    kernel = np.asarray(cls.numpy(), np.float64)
    if feats.shape[1] != int(np.prod(kernel.shape[:-1])):
        return  # a classifier over a spatial map: leave it
    std = float(np.std(feats @ kernel.reshape(feats.shape[1], -1)))
    if not np.isfinite(std) or std == 0.0:
        return
    cls.assign((kernel * 2.0 ** round(-np.log2(std))).astype(np.float32))


def _short(w) -> str:
    """Short weight name ('kernel', 'gamma', ...) for keras 3 variables."""
    return w.name.split("/")[-1].split(":")[0]


# The pixels a model that rescales its own input takes (keras.applications' MobileNetV3,
# EfficientNet, EfficientNetV2 and ConvNeXt: "input pixel values in [0, 255]").
PIXEL_RANGE = (0.0, 255.0)
UNIT_RANGE = (0.0, 1.0)


def native_input_range(model) -> tuple[float, float]:
    """The images a keras model takes: ``PIXEL_RANGE`` where a ``Rescaling`` or
    ``Normalization`` layer comes before its first layer with weights (the model rescales
    raw pixels itself), else ``UNIT_RANGE``.

    Why it matters: such a model fed [0, 1) sees an almost constant image after its own
    rescaling (MobileNetV3's ``x / 127.5 - 1`` maps [0, 1) into [-1, -0.992)), so batch
    norm calibrated on it subtracts means 100 times the spread around them, and every
    engine's rounding comes out of that cancellation 100 times larger: an input no real
    image gives."""
    for layer in model.layers:
        kind = type(layer).__name__
        if kind in ("Rescaling", "Normalization"):
            return PIXEL_RANGE
        if layer.weights:
            return UNIT_RANGE
    return UNIT_RANGE


def build_graph_def(
    name: str, input_size: int | None = None, seed: int = 0, batch: int | None = 1,
    input_range: tuple[float, float] | None = None,
) -> "tf.compat.v1.GraphDef":
    """Return the frozen inference GraphDef of model ``name``: ``build_reference``'s graph."""
    return build_reference(name, input_size, seed, batch, input_range)[0]


def build_reference(
    name: str, input_size: int | None = None, seed: int = 0, batch: int | None = 1,
    input_range: tuple[float, float] | None = None,
) -> tuple["tf.compat.v1.GraphDef", tuple[float, float]]:
    """Return the frozen inference GraphDef of model ``name`` and the input range its batch
    norms were calibrated on: the range to feed it.

    ``input_size`` defaults to the model's standard size (299 for
    inception_v3 and inception_v4, 224 for resnet50 and mobilenet_v2,
    :func:`default_input_size` for ``keras:CTOR`` names); the input is
    ``[1, input_size, input_size, 3]`` float32.  Raises ``ValueError`` for an
    unknown name or an input size below :func:`min_input_size`. ``batch=None``
    leaves the batch dimension unknown (a serving graph's dynamic batch).  ``input_range``:
    the images the batch-norm statistics are calibrated on are uniform in it; None, the
    model's own (``native_input_range``: [0, 255) for a model that rescales pixels itself,
    else [0, 1)).  See the module
    docstring for the input/output naming and determinism contract.

    Calls ``keras.backend.clear_session()`` first: keras auto-names layers from
    a process-global counter, and those names become TF node names, so without
    the reset a second build in the same process would differ.
    """
    _check_name(name)
    import keras
    import tensorflow as tf

    ctor_name = MODELS[name][0] if name in MODELS else name[len("keras:"):]
    size = default_input_size(name) if input_size is None else int(input_size)
    if size < min_input_size(name):
        raise ValueError(f"{name} needs input size >= {min_input_size(name)}, got {size}")

    keras.backend.clear_session()
    if ctor_name == "inception_v4":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from inception_v4 import inception_v4

        model = inception_v4(input_shape=(size, size, 3), classes=1000)
    elif ctor_name in REGNETX:
        model = regnet_x(ctor_name, input_shape=(size, size, 3), classes=1000)
    else:
        if not ctor_name[:1].isupper() or not hasattr(keras.applications, ctor_name):
            raise ValueError(f"unknown model {name!r}: keras.applications has no "
                             f"{ctor_name!r}")
        model = getattr(keras.applications, ctor_name)(
            weights=None, include_top=True, input_shape=(size, size, 3), classes=1000
        )
    if input_range is None:
        input_range = native_input_range(model)
    _assign_weights(model, name, seed)
    _calibrate_batch_norms(model, size, input_range)
    _calibrate_classifier(model, size, input_range)

    # autograph is unnecessary for a straight-line keras call.
    @tf.function(autograph=False)
    def infer(x):
        return tf.identity(model(x, training=False), name=OUTPUT_NAME)

    concrete = infer.get_concrete_function(
        tf.TensorSpec([batch, size, size, 3], tf.float32, name=INPUT_NAME)
    )
    graph_def = freeze_function(concrete, (OUTPUT_NAME,))

    names = {n.name: n for n in graph_def.node}
    if names.get(INPUT_NAME, None) is None or names[INPUT_NAME].op != "Placeholder":
        raise RuntimeError("frozen graph has no Placeholder named 'input'")
    if graph_def.node[-1].name != OUTPUT_NAME or graph_def.node[-1].op != "Identity":
        raise RuntimeError("frozen graph's last node is not Identity 'output'")
    return graph_def, tuple(float(v) for v in input_range)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}, or keras:CTOR "
                        "for a keras.applications classifier (e.g. keras:DenseNet121)")
    parser.add_argument("-o", "--output", required=True, help="output .pb path")
    parser.add_argument("--input-size", type=int, default=None, metavar="H",
                        help="square input size (default: the model's standard)")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed (default 0)")
    parser.add_argument("--input-range", default=None, metavar="LO,HI",
                        help="calibrate batch norm on images uniform in [LO, HI) and feed "
                        "the model such images (default: 0,255 for a keras model that "
                        "rescales pixels itself, such as MobileNetV3 or EfficientNet, "
                        "else 0,1; the range used is printed)")
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="leave the batch dimension unknown ([?, H, H, 3] or [?, L])")
    parser.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN, metavar="L",
                        help=f"BERT models: sequence length (default {DEFAULT_SEQ_LEN})")
    parser.add_argument("--dynamic-seq", action="store_true",
                        help="BERT models: leave the sequence length unknown ([B, ?]; "
                        "optimize it with --input-shape NAME:?,L for each input)")
    parser.add_argument("--batch", type=int, default=1, metavar="B",
                        help="BERT models: batch size (default 1)")
    args = parser.parse_args(argv)

    # Validate before importing TensorFlow so the error is the only stderr line.
    try:
        _check_name(args.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    input_range = None  # the model's own (native_input_range)
    if args.input_range is not None:
        try:
            input_range = tuple(float(v) for v in args.input_range.split(","))
            if len(input_range) != 2 or not input_range[0] < input_range[1]:
                raise ValueError
        except ValueError:
            print(f"error: --input-range {args.input_range!r}: give LO,HI with LO < HI",
                  file=sys.stderr)
            return 2
    if args.name in BERT_MODELS:
        return _main_bert(args)
    if args.name in BREADTH:
        return _main_breadth(args)
    if args.dynamic_seq:
        print("error: --dynamic-seq is for the BERT models", file=sys.stderr)
        return 2
    if args.input_size is not None and args.input_size < min_input_size(args.name):
        print(f"error: {args.name} needs --input-size >= "
              f"{min_input_size(args.name)}", file=sys.stderr)
        return 2

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quieter build output
    try:  # rstf's quiet import hides TF's C++ start-up banners, when rstf is installed
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
        import rstf.frontend.tfutil  # noqa: F401
    except ImportError:
        pass
    try:
        graph_def, (lo, hi) = build_reference(
            args.name, args.input_size, args.seed, None if args.dynamic_batch else 1,
            input_range)
    except ValueError as e:
        if not str(e).startswith("unknown model"):
            raise
        print(f"error: {e}", file=sys.stderr)  # keras:CTOR that keras.applications lacks
        return 2
    write_graph_def(graph_def, args.output)
    print(f"{args.output}: calibrated on images uniform in [{lo:g}, {hi:g}); feed it those "
          f"(rstf compare --input-range {lo:g},{hi:g})")
    return 0


def _main_bert(args) -> int:
    """`main` for the BERT models: the CNN options do not apply, --seq-len and --batch do."""
    if args.input_size is not None or args.input_range is not None:
        print("error: --input-size and --input-range are for the image models",
              file=sys.stderr)
        return 2
    if args.batch < 1:
        print(f"error: --batch {args.batch}: give a positive size", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        graph_def = build_bert_graph_def(args.name, None if args.dynamic_seq else args.seq_len,
                                         None if args.dynamic_batch else args.batch, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_graph_def(graph_def, args.output)
    return 0


def _main_breadth(args) -> int:
    """`main` for the breadth models (models/breadth.py): fixed sizes, batch 1."""
    if (args.input_size, args.input_range, args.dynamic_batch, args.dynamic_seq,
            args.batch, args.seq_len) != (None, None, False, False, 1, DEFAULT_SEQ_LEN):
        print(f"error: {args.name} is built at its fixed size: only -o and --seed apply",
              file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    graph_def, (lo, hi) = build_breadth(args.name, args.seed)
    write_graph_def(graph_def, args.output)
    images = any(n.op == "Placeholder" and n.attr["dtype"].type == 1 for n in graph_def.node)
    print(f"{args.output}: " + (f"feed images uniform in [{lo:g}, {hi:g})" if images
                                else "feed token ids below the embedding table's rows"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
