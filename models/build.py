"""Build frozen TensorFlow GraphDefs of keras.applications models with fixed weights.

Usage::

    python models/build.py NAME -o PATH.pb [--input-size H] [--seed S]

NAME is one of ``inception_v3`` (default input 299), ``inception_v4`` (299; built by
``models/inception_v4.py``, not in keras.applications), ``resnet50`` (224) or
``mobilenet_v2`` (224).  ``--input-size H`` builds a smaller (or larger) square
variant, e.g. ``inception_v3`` at 75 or ``mobilenet_v2`` at 96, for fast tests.

Contract of the produced file (and of :func:`build_graph_def`):

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
is reported as a single line on stderr before TensorFlow is even imported).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Only for annotations: importing TF is slow and noisy.
    import tensorflow as tf

# name -> (keras.applications constructor name, default square input size)
MODELS: dict[str, tuple[str, int]] = {
    "inception_v3": ("InceptionV3", 299),
    "resnet50": ("ResNet50", 224),
    "mobilenet_v2": ("MobileNetV2", 224),
    "inception_v4": ("inception_v4", 299),  # models/inception_v4.py, not keras.applications
}

# Smallest square input keras.applications accepts for each architecture.
MIN_INPUT_SIZE: dict[str, int] = {"inception_v3": 75, "resnet50": 32, "mobilenet_v2": 32,
                                  "inception_v4": 75}

INPUT_NAME = "input"
OUTPUT_NAME = "output"

# Per-model deviations from the plain He/BN rules in _assign_weights, needed
# because in inference mode BatchNorm uses the *random* moving statistics and so
# does not re-normalise activations; magnitudes then drift with depth.
#
# CLASSIFIER_SCALE multiplies the (He-scaled) final Dense kernel so the
# pre-softmax logits have a standard deviation of roughly 0.3-2 at the default
# input sizes on a standard-normal input: large enough that the softmax is not
# uniform, small enough that it is not one-hot (max probability well below
# 0.99).  Measured logit std with scale 1.0: inception_v3 ~14, mobilenet_v2
# ~0.35; with these scales: inception_v3 1.4, resnet50 0.75, mobilenet_v2 0.35.
CLASSIFIER_SCALE: dict[str, float] = {
    "inception_v3": 0.1,
    "resnet50": 0.1,
    "mobilenet_v2": 1.0,
    "inception_v4": 0.1,
}

# ResNet50 adds each residual branch onto its shortcut with no effective
# normalisation, so activation std grows ~1.5x per block (logit std ~8e3 after
# 16 blocks, a one-hot softmax).  Scaling the last conv kernel of every branch
# ("convS_blockN_3_conv") by 0.25 (cf. Fixup / zero-init-residual) keeps the
# block outputs' std in ~2-7 throughout.
RESIDUAL_BRANCH_SCALE: dict[str, tuple[str, float]] = {
    "resnet50": ("_3_conv/kernel", 0.25),
}


def _check_name(name: str) -> None:
    if name.startswith("keras:"):
        return  # any keras.applications constructor, checked when it is looked up
    if name not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}"
        )


def _assign_weights(model, name: str, seed: int) -> None:
    """Overwrite every weight of ``model`` from ``RandomState(seed)``.

    Weights are visited in ``model.weights`` order (deterministic for a given
    architecture) and drawn sequentially from one RandomState, so the result
    depends only on (architecture, input size, seed).  Distributions are chosen
    so activations neither explode nor vanish through the network in inference
    mode, where BatchNorm uses these moving statistics instead of batch ones
    (see CLASSIFIER_SCALE and RESIDUAL_BRANCH_SCALE for per-model tweaks).
    """
    import numpy as np

    rng = np.random.RandomState(seed)
    dense_kernels = [
        w for w in model.weights if _short(w) == "kernel" and len(w.shape) == 2
    ]
    # The classifier is the last 2-D kernel in the model (include_top=True).
    classifier = dense_kernels[-1] if dense_kernels else None

    for w in model.weights:
        shape = tuple(int(d) for d in w.shape)
        kind = _short(w)
        if kind == "kernel":
            # Conv2D (kh, kw, in, out) or Dense (in, out): fan_in = all but last.
            fan_in = int(np.prod(shape[:-1]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            if w is classifier:
                value *= CLASSIFIER_SCALE.get(name, 0.1)
            elif name in RESIDUAL_BRANCH_SCALE:
                suffix, scale = RESIDUAL_BRANCH_SCALE[name]
                if w.path.endswith(suffix):
                    value *= scale
        elif kind == "depthwise_kernel":
            # (kh, kw, in, multiplier): each output sees only kh*kw inputs.
            fan_in = shape[0] * shape[1]
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
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
        w.assign(value.astype(np.float32))


def _short(w) -> str:
    """Short weight name ('kernel', 'gamma', ...) for keras 3 variables."""
    return w.name.split("/")[-1].split(":")[0]


def _prune_to_output(graph_def: "tf.compat.v1.GraphDef") -> "tf.compat.v1.GraphDef":
    """Keep only ancestors of ``output``, preserving node order.

    The concrete function's graph wraps its return value in an extra
    ``Identity`` (named ``Identity``, inputs ``["output", "^NoOp"]``), where the
    ``NoOp`` only carries control dependencies on the (now constant) variable
    reads.  Dropping everything that does not feed ``output`` removes both, so
    ``output`` is the graph's final node and its only sink.
    """
    import tensorflow as tf

    by_name = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    stack = [OUTPUT_NAME]
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        for inp in by_name[name].input:
            # "^ctrl", "node:1" -> "node"
            stack.append(inp.lstrip("^").split(":")[0])
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    return out


def build_graph_def(
    name: str, input_size: int | None = None, seed: int = 0
) -> "tf.compat.v1.GraphDef":
    """Return the frozen inference GraphDef of model ``name``.

    ``input_size`` defaults to the model's standard size (299 for
    inception_v3, 224 otherwise); the input is ``[1, input_size, input_size,
    3]`` float32.  Raises ``ValueError`` for an unknown name or an input size
    below ``MIN_INPUT_SIZE[name]``.  See the module
    docstring for the input/output naming and determinism contract.

    Calls ``keras.backend.clear_session()`` first: keras auto-names layers from
    a process-global counter, and those names become TF node names, so without
    the reset a second build in the same process would differ.
    """
    _check_name(name)
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    ctor_name, default_size = MODELS[name] if name in MODELS else (name[len("keras:"):], 224)
    size = default_size if input_size is None else int(input_size)
    if size < MIN_INPUT_SIZE.get(name, 32):
        raise ValueError(f"{name} needs input size >= {MIN_INPUT_SIZE[name]}, got {size}")

    keras.backend.clear_session()
    if ctor_name == "inception_v4":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from inception_v4 import inception_v4

        model = inception_v4(input_shape=(size, size, 3), classes=1000)
    else:
        if not hasattr(keras.applications, ctor_name):
            raise ValueError(f"keras.applications has no {ctor_name!r}")
        model = getattr(keras.applications, ctor_name)(
            weights=None, include_top=True, input_shape=(size, size, 3), classes=1000
        )
    _assign_weights(model, name, seed)

    # autograph is unnecessary for a straight-line keras call.
    @tf.function(autograph=False)
    def infer(x):
        return tf.identity(model(x, training=False), name=OUTPUT_NAME)

    concrete = infer.get_concrete_function(
        tf.TensorSpec([1, size, size, 3], tf.float32, name=INPUT_NAME)
    )
    frozen = convert_variables_to_constants_v2(concrete)
    graph_def = _prune_to_output(frozen.graph.as_graph_def())

    names = {n.name: n for n in graph_def.node}
    if names.get(INPUT_NAME, None) is None or names[INPUT_NAME].op != "Placeholder":
        raise RuntimeError("frozen graph has no Placeholder named 'input'")
    if graph_def.node[-1].name != OUTPUT_NAME or graph_def.node[-1].op != "Identity":
        raise RuntimeError("frozen graph's last node is not Identity 'output'")
    return graph_def


def write_graph_def(graph_def: "tf.compat.v1.GraphDef", path: str) -> None:
    """Atomically write ``graph_def`` as deterministic binary protobuf.

    ``deterministic=True`` fixes map-field (attr) ordering; writing a temp file
    in the destination directory and ``os.replace``-ing it means readers never
    see a partial file.
    """
    data = graph_def.SerializeToString(deterministic=True)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pb")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file 0600; give it ordinary umask-based perms.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    parser.add_argument("-o", "--output", required=True, help="output .pb path")
    parser.add_argument("--input-size", type=int, default=None, metavar="H",
                        help="square input size (default: the model's standard)")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed (default 0)")
    args = parser.parse_args(argv)

    # Validate before importing TensorFlow so the error is the only stderr line.
    if args.name not in MODELS:
        print(f"error: unknown model {args.name!r}; valid names: "
              f"{', '.join(sorted(MODELS))}", file=sys.stderr)
        return 2
    if args.input_size is not None and args.input_size < MIN_INPUT_SIZE[args.name]:
        print(f"error: {args.name} needs --input-size >= "
              f"{MIN_INPUT_SIZE[args.name]}", file=sys.stderr)
        return 2

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quieter build output
    try:  # rstf's quiet import hides TF's C++ start-up banners, when rstf is installed
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
        import rstf.tfutil  # noqa: F401
    except ImportError:
        pass
    graph_def = build_graph_def(args.name, args.input_size, args.seed)
    write_graph_def(graph_def, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
