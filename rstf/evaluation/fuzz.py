"""Random graphs for differential testing (Csmith-style, for TensorFlow graphs).

`build_graph(chooser)` draws a small NHWC network built from the ops rstf supports: random
shapes, broadcasting, strides, paddings and dilations, fan-out (a tensor read twice),
diamonds through an op rstf does not support (Sin), so selection must keep the parts
convex, and several outputs. Half the graphs are image-shaped (batch 1, at least 14x14,
3, 16 or 32 channels) and may hold Winograd-eligible convolutions (`winograd` steps:
stride-1 3x3, 5x5, 1x7 or 7x1, C and K multiples of 16, at least 14x14 outputs, the
conditions of `rstf.poly.winograd.plan`).

Every decision goes through a chooser (`integer(lo, hi)`, `choice(options)`), so one
generator serves two drivers:
- `random_graph(seed)`: a seeded numpy RandomState; the same seed gives the same graph
  (scripts/fuzz.py's campaign);
- `graphs()`: a hypothesis strategy (tests/test_fuzz.py), which can shrink a failure.
  hypothesis is a test-only dependency, imported only when `graphs()` is called.

Each drawn value is a `RandomGraph`: a frozen GraphDef, its feeds (`image_feeds`: uniform
in [0, 1), as an image model's inputs are, from the recorded `input_seed`), outputs and
recipe. Weights come from a numpy RandomState seeded by a drawn seed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..poly.tuning import Tuning

# Kinds of step, repeated to weigh the draw; image-shaped graphs add WINOGRAD_STEPS.
STEPS = ("conv", "conv", "pool", "relu", "bias", "binary", "binary", "concat", "opaque", "mean",
         "reshape")
WINOGRAD_STEPS = ("winograd",) * 5
# The filters winograd.ALGORITHMS transforms, and the channel counts it takes (multiples of
# the widest vector, 16 floats, so every target's VLEN divides them).
WINOGRAD_KERNELS = ((3, 3), (5, 5), (1, 7), (7, 1))
WINOGRAD_CHANNELS = (16, 32)
MIN_WINOGRAD_PIXELS = Tuning().winograd_min_pixels  # below it, Winograd declines


@dataclasses.dataclass
class RandomGraph:
    graph_def: object
    feeds: dict  # {placeholder name: array}, image_feeds(graph_def, input_seed)
    outputs: list  # output node names
    recipe: list  # the drawn steps, readable in a failure report
    input_seed: int = 0

    def __repr__(self) -> str:
        return "RandomGraph(" + "; ".join(self.recipe) + ")"


class NumpyChooser:
    """Decisions from a seeded numpy RandomState (its streams are stable across versions)."""

    def __init__(self, seed: int):
        self.rng = np.random.RandomState(seed)

    def integer(self, lo: int, hi: int) -> int:  # lo..hi inclusive
        return int(self.rng.randint(lo, hi + 1))

    def choice(self, options):
        return options[self.rng.randint(len(options))]


class _HypothesisChooser:
    def __init__(self, draw, st):
        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def choice(self, options):
        return self.draw(self.st.sampled_from(list(options)))


def random_graph(seed: int, max_steps: int = 7) -> RandomGraph:
    """The graph of `seed` (0 <= seed < 2**32): a pure function of it and `max_steps`."""
    return build_graph(NumpyChooser(seed), max_steps)


def graphs(max_steps: int = 7):
    """A hypothesis strategy of `RandomGraph`s (hypothesis is imported here, not above)."""
    from hypothesis import strategies as st

    @st.composite
    def _graphs(draw):
        return build_graph(_HypothesisChooser(draw, st), max_steps)

    return _graphs()


def image_feeds(graph_def, seed: int) -> dict:
    """Each float Placeholder of `graph_def` (static shape), in node order, filled from one
    RandomState(seed) uniformly in [0, 1)."""
    rng = np.random.RandomState(seed)
    feeds = {}
    for node in graph_def.node:
        if node.op == "Placeholder":
            shape = [d.size for d in node.attr["shape"].shape.dim]
            feeds[node.name] = rng.random_sample(shape).astype(np.float32)
    return feeds


def build_graph(ch, max_steps: int = 7) -> RandomGraph:
    """One random graph, every decision taken by the chooser `ch` (module docstring)."""
    from ..frontend.tfutil import tf

    seed = ch.integer(0, 2**31 - 1)
    rng = np.random.RandomState(seed)
    image = ch.choice([False, True])
    if image:
        n, h, w, c = 1, ch.integer(14, 20), ch.integer(14, 20), ch.choice([3, 16, 32])
    else:
        n, h, w, c = ch.integer(1, 2), ch.integer(3, 9), ch.integer(3, 9), ch.integer(1, 4)
    kinds = STEPS + WINOGRAD_STEPS if image else STEPS
    out_channels = [1, 2, 3, 4, 5, *WINOGRAD_CHANNELS] if image else [1, 2, 3, 4, 5]
    recipe = [f"input [{n},{h},{w},{c}] seed {seed}"]
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [n, h, w, c], name="input")
        pool = [x]  # 4-D NHWC tensors available as operands
        steps = ch.integer(1, max_steps)
        for i in range(steps):
            src = pool[ch.integer(0, len(pool) - 1)]
            _, sh, sw, sc = src.shape.as_list()
            kind = ch.choice(kinds)
            name = f"step{i}"
            if kind == "conv":
                k = ch.integer(1, 4)
                s = ch.integer(1, 3)
                d = ch.integer(1, 2) if s == 1 else 1
                padding = ch.choice(["SAME", "VALID"])
                if padding == "VALID" and (k - 1) * d + 1 > min(sh, sw):
                    padding = "SAME"
                oc = ch.choice(out_channels)
                wts = rng.standard_normal((k, k, sc, oc)).astype(np.float32) / np.sqrt(k * k * sc)
                y = tf.nn.conv2d(src, wts, strides=s, padding=padding, dilations=d, name=name)
                recipe.append(f"{name}=conv k{k} s{s} d{d} {padding} oc{oc}")
            elif kind == "winograd":
                # Its input: a tensor of enough pixels (the graph's input is one), brought to
                # 16 channels by a 1x1 conv first when its channels are not a multiple of 16.
                big = [t for t in pool if t.shape[0] == 1
                       and t.shape[1] * t.shape[2] >= MIN_WINOGRAD_PIXELS]
                src = big[ch.integer(0, len(big) - 1)]
                if src.shape[3] % 16:
                    sc = src.shape[3]
                    wts = rng.standard_normal((1, 1, sc, 16)).astype(np.float32) / np.sqrt(sc)
                    src = tf.nn.conv2d(src, wts, strides=1, padding="SAME", name=f"{name}_1x1")
                    pool.append(src)
                    recipe.append(f"{name}_1x1=conv k1 s1 d1 SAME oc16")
                _, sh, sw, sc = src.shape.as_list()
                kh, kw = ch.choice(WINOGRAD_KERNELS)
                padding = ch.choice(["SAME", "VALID"])
                if padding == "VALID" and (sh - kh + 1) * (sw - kw + 1) < MIN_WINOGRAD_PIXELS:
                    padding = "SAME"
                oc = ch.choice(WINOGRAD_CHANNELS)
                wts = rng.standard_normal((kh, kw, sc, oc)).astype(np.float32) / np.sqrt(
                    kh * kw * sc)
                y = tf.nn.conv2d(src, wts, strides=1, padding=padding, name=name)
                recipe.append(f"{name}=winograd-eligible conv {kh}x{kw} {padding} "
                              f"{sc}->{oc}")
            elif kind == "pool":
                k = ch.integer(1, 3)
                s = ch.integer(1, 3)
                padding = ch.choice(["SAME", "VALID"])
                if padding == "VALID" and k > min(sh, sw):
                    padding = "SAME"
                fn = ch.choice(["max", "avg"])
                op = tf.nn.max_pool2d if fn == "max" else tf.nn.avg_pool2d
                y = op(src, k, s, padding, name=name)
                recipe.append(f"{name}={fn}pool k{k} s{s} {padding}")
            elif kind == "relu":
                y = tf.nn.relu(src, name=name)
                recipe.append(f"{name}=relu")
            elif kind == "bias":
                y = tf.nn.bias_add(src, rng.standard_normal(sc).astype(np.float32), name=name)
                recipe.append(f"{name}=bias_add")
            elif kind == "binary":
                shape = ch.choice(["scalar", "channel", "full", "row", "tensor"])
                other = {"scalar": lambda: rng.standard_normal(()),
                         "channel": lambda: rng.standard_normal(sc),
                         "full": lambda: rng.standard_normal((n, sh, sw, sc)),
                         "row": lambda: rng.standard_normal((1, sh, 1, 1)),
                         "tensor": None}[shape]
                if other is None:
                    same = [t for t in pool if t.shape.as_list() == [n, sh, sw, sc]]
                    operand = same[ch.integer(0, len(same) - 1)]
                else:
                    operand = tf.constant(np.asarray(other(), np.float32))
                op = ch.choice(["add", "sub", "mul", "div"])
                if op == "div":
                    operand = tf.abs(operand) + 0.5 if other is None else tf.constant(
                        np.abs(np.asarray(other(), np.float32)) + 0.5)
                fn = {"add": tf.add, "sub": tf.subtract, "mul": tf.multiply,
                      "div": tf.math.truediv}[op]
                y = fn(src, operand, name=name)
                recipe.append(f"{name}={op} {shape}")
            elif kind == "concat":
                same = [t for t in pool if t.shape.as_list()[:3] == [n, sh, sw]]
                other = same[ch.integer(0, len(same) - 1)]
                y = tf.concat([src, other], axis=ch.choice([3, -1]), name=name)
                recipe.append(f"{name}=concat")
            elif kind == "opaque":  # unsupported: makes diamonds through TensorFlow
                y = tf.math.sin(src, name=name)
                recipe.append(f"{name}=sin (unsupported)")
            elif kind == "mean":
                axes = ch.choice([[1, 2], [2], [-1], [1]])
                y = tf.reduce_mean(src, axes, keepdims=True, name=name)
                recipe.append(f"{name}=mean {axes}")
            else:
                y = tf.reshape(tf.reshape(src, [-1]), [n, sh, sw, sc], name=name)
                recipe.append(f"{name}=reshape flat and back")
            pool.append(y)
        # Every tensor nobody reads is an output; Identity keeps the names stable.
        used = {inp.name for op in g.get_operations() for inp in op.inputs}
        outs = []
        for i, t in enumerate(pool[1:]):
            if t.name not in used:
                outs.append(tf.identity(t, name=f"out{i}").op.name)
        if not outs:
            outs.append(tf.identity(pool[-1], name="out").op.name)
    gd = g.as_graph_def()
    # Its own stream: the weights' RandomState(seed) would repeat its numbers as inputs.
    input_seed = (seed + 1) % 2**31
    return RandomGraph(gd, image_feeds(gd, input_seed), outs, recipe, input_seed)
