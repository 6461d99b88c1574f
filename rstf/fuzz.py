"""Random graphs for differential testing (Csmith-style, for TensorFlow graphs).

`graphs()` is a hypothesis strategy drawing a small NHWC network built from the ops rstf
supports: random shapes, broadcasting, strides, paddings and dilations, fan-out (a tensor
read twice), diamonds through an op rstf does not support (Erf), so selection must keep the
parts convex, and several outputs. Each drawn value is a `RandomGraph` holding a frozen
GraphDef and its input feeds; `tests/test_fuzz.py` runs a bounded number in CI and
`scripts/fuzz.py` a longer campaign.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st


@dataclasses.dataclass
class RandomGraph:
    graph_def: object
    feeds: dict  # {placeholder name: array}
    outputs: list  # output node names
    recipe: list  # the drawn steps, readable in a failure report

    def __repr__(self) -> str:
        return "RandomGraph(" + "; ".join(self.recipe) + ")"


def _conv_out(size, k, s, d, padding):
    eff = (k - 1) * d + 1
    return -(-size // s) if padding == "SAME" else (size - eff) // s + 1


@st.composite
def graphs(draw, max_steps: int = 7) -> RandomGraph:
    from .tfutil import tf

    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.RandomState(seed)
    n = draw(st.integers(1, 2))
    h = draw(st.integers(3, 9))
    w = draw(st.integers(3, 9))
    c = draw(st.integers(1, 4))
    recipe = [f"input [{n},{h},{w},{c}] seed {seed}"]
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [n, h, w, c], name="input")
        pool = [x]  # 4-D NHWC tensors available as operands
        steps = draw(st.integers(1, max_steps))
        for i in range(steps):
            src = pool[draw(st.integers(0, len(pool) - 1))]
            _, sh, sw, sc = src.shape.as_list()
            kind = draw(st.sampled_from(
                ["conv", "conv", "pool", "relu", "bias", "binary", "binary", "concat",
                 "erf", "mean", "reshape"]))
            name = f"step{i}"
            if kind == "conv":
                k = draw(st.integers(1, 4))
                s = draw(st.integers(1, 3))
                d = draw(st.integers(1, 2)) if s == 1 else 1
                padding = draw(st.sampled_from(["SAME", "VALID"]))
                if padding == "VALID" and (k - 1) * d + 1 > min(sh, sw):
                    padding = "SAME"
                oc = draw(st.integers(1, 5))
                wts = rng.standard_normal((k, k, sc, oc)).astype(np.float32) / np.sqrt(k * k * sc)
                y = tf.nn.conv2d(src, wts, strides=s, padding=padding, dilations=d, name=name)
                recipe.append(f"{name}=conv k{k} s{s} d{d} {padding} oc{oc}")
            elif kind == "pool":
                k = draw(st.integers(1, 3))
                s = draw(st.integers(1, 3))
                padding = draw(st.sampled_from(["SAME", "VALID"]))
                if padding == "VALID" and k > min(sh, sw):
                    padding = "SAME"
                fn = draw(st.sampled_from(["max", "avg"]))
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
                shape = draw(st.sampled_from(["scalar", "channel", "full", "row", "tensor"]))
                other = {"scalar": lambda: rng.standard_normal(()),
                         "channel": lambda: rng.standard_normal(sc),
                         "full": lambda: rng.standard_normal((n, sh, sw, sc)),
                         "row": lambda: rng.standard_normal((1, sh, 1, 1)),
                         "tensor": None}[shape]
                if other is None:
                    same = [t for t in pool if t.shape.as_list() == [n, sh, sw, sc]]
                    operand = same[draw(st.integers(0, len(same) - 1))]
                else:
                    operand = tf.constant(np.asarray(other(), np.float32))
                op = draw(st.sampled_from(["add", "sub", "mul", "div"]))
                if op == "div":
                    operand = tf.abs(operand) + 0.5 if other is None else tf.constant(
                        np.abs(np.asarray(other(), np.float32)) + 0.5)
                fn = {"add": tf.add, "sub": tf.subtract, "mul": tf.multiply,
                      "div": tf.math.truediv}[op]
                y = fn(src, operand, name=name)
                recipe.append(f"{name}={op} {shape}")
            elif kind == "concat":
                same = [t for t in pool if t.shape.as_list()[:3] == [n, sh, sw]]
                other = same[draw(st.integers(0, len(same) - 1))]
                y = tf.concat([src, other], axis=draw(st.sampled_from([3, -1])), name=name)
                recipe.append(f"{name}=concat")
            elif kind == "erf":  # unsupported: makes diamonds through TensorFlow
                y = tf.math.erf(src, name=name)
                recipe.append(f"{name}=erf (unsupported)")
            elif kind == "mean":
                axes = draw(st.sampled_from([[1, 2], [2], [-1], [1]]))
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
    feeds = {"input": rng.standard_normal((n, h, w, c)).astype(np.float32)}
    return RandomGraph(g.as_graph_def(), feeds, outs, recipe)
