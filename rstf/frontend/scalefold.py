"""Per-channel scales folded into the weights of the contraction before them.

A frozen Keras model computes batch norm after a convolution as `conv(x, W) * s + t`, with
`s` and `t` constant vectors over the output channels (rstf.frontend.fold has already evaluated
`gamma * rsqrt(var + eps)`). `conv(x, W) * s == conv(x, W * s)` in real arithmetic, but not
in float32: each product w * s is rounded once, where the unfolded form rounds the sum once
and then its product. Which of the two a model computes is therefore part of its numbers.

Two rules, both `fold_scales(graph_def, keep, rule)`:

- `"tensorflow"`, always applied by the loader: exactly the multiplies TensorFlow itself
  folds at run time. Grappler's constant folding (`MulConvPushDown`) rewrites
  `Mul(Conv2D(x, C1), C2)` into `Conv2D(x, Mul(C1, C2))` when C1 and C2 are constants, the
  Conv2D has no other reader and is no fetched node, and C2 is a single value (any data
  format) or, in NHWC, broadcasts along the filter's output channels only (shape (N,),
  (1, N), ..., (1, 1, 1, N)). It then folds `C1 * C2` in the filter's dtype. Since every
  TensorFlow session does this to a frozen Keras graph, TF Eigen's bits for such a conv
  are `conv(x, W * s)`; computing the unfolded form puts a few ulps in every layer, which
  compound through a deep network (RegNetX and EfficientNet at several times TF's own
  spread). Grappler repeats its passes, so a chain of such Muls folds one after another.
  Depthwise convolutions, MatMuls and a BiasAdd between the conv and the Mul stop it.
- `"all"`, opt-in (`--fold-scales on`, `--optimizer poly` only): also DepthwiseConv2dNative
  and MatMul, and a BiasAdd between the contraction and the Mul. TF computes those
  multiplies after the contraction, so this rule is a few float32 ulps from TF's rounding:
  on calibrated ResNet-50 and MobileNet v2 fed images it put rstf 1.1x to 4.9x TensorFlow's
  own spread (oneDNN against Eigen) from TF Eigen, for no speed the A/B runs could tell
  from noise (docs/benchmarks/2026-11-27-fold-scales.md). It never takes a scale that is
  not finite.

Patterns of `"all"` (NHWC data, a Const filter, a Const float32 scale of shape (N,) or
(1, .., 1, N), N the output channels; every intermediate has this one reader and is no
model output):
- Conv2D -> Mul:                  filter W[..., n] * s[n]
- DepthwiseConv2dNative -> Mul:   filter W[kh, kw, c, m] * s[c * M + m]
- MatMul (no transpose_a) -> Mul: W[k, n] * s[n] (W[n, k] * s[n] with transpose_b)
- each of them -> BiasAdd -> Mul: the same, and the bias b[n] * s[n]
Under either rule the Mul disappears: its readers read the contraction (or the BiasAdd)
instead, and the scaled values become new Consts named `<node>/rstf_scaled`. A Mul that is
a model output stays (its name must remain).

Contract: `fold_scales(graph_def, keep, rule="all", shapes=None)` returns (a new GraphDef,
names of the removed Muls). `shapes`, Grappler's symbolic shapes (`addtrees.grappler_shapes`),
makes the "tensorflow" rule also require what Grappler checks with them: that the Mul's
shape is symbolically the conv's. The input GraphDef is not changed. Consts left without
readers are dropped.
"""
from __future__ import annotations

import numpy as np

from .names import input_node, rebuilt, references, split_tensor
from .tfutil import tf

CONTRACTIONS = {"Conv2D", "DepthwiseConv2dNative", "MatMul"}
RULES = ("tensorflow", "all")


def _const(nodes: dict, tensor: str) -> np.ndarray | None:
    name, idx = split_tensor(tensor)
    nd = nodes.get(name)
    if nd is None or nd.op != "Const" or idx != 0:
        return None
    return tf.make_ndarray(nd.attr["value"].tensor)


def _channel_scale(s: np.ndarray | None, n: int, rank: int) -> np.ndarray | None:
    """`s` as a vector of n, if it is one (broadcast along the last of `rank` axes only)."""
    if s is None or s.dtype != np.float32 or not 1 <= s.ndim <= rank or s.shape[-1] != n:
        return None
    if any(d != 1 for d in s.shape[:-1]) or not np.all(np.isfinite(s)):
        return None
    return s.reshape(n)


def _scaled_filter(nd, w: np.ndarray, s: np.ndarray | None):
    """(the contraction's weight with its output channels scaled by s, the scale vector),
    or None when the pattern is not supported."""
    if w.dtype != np.float32:
        return None
    if nd.op == "MatMul":
        if nd.attr["transpose_a"].b or w.ndim != 2:
            return None
        tb = nd.attr["transpose_b"].b
        v = _channel_scale(s, w.shape[0] if tb else w.shape[1], 2)
        return None if v is None else (w * v[:, None] if tb else w * v, v)
    if nd.attr["data_format"].s not in (b"NHWC", b"") or w.ndim != 4:
        return None
    if nd.op == "Conv2D":
        v = _channel_scale(s, w.shape[3], 4)
        return None if v is None else (w * v, v)
    v = _channel_scale(s, w.shape[2] * w.shape[3], 4)  # depthwise: channel c * M + m
    return None if v is None else (w * v.reshape(w.shape[2], w.shape[3]), v)


def _grappler_filter(nd, w: np.ndarray, s: np.ndarray | None):
    """(W * s, s) where Grappler's MulConvPushDown folds the Mul by `s` into Conv2D `nd`'s
    filter `w` (IsValidConstShapeForMulConvPushDown), else None."""
    if nd.op != "Conv2D" or w.ndim != 4 or s is None or s.dtype != w.dtype:
        return None
    fmt = nd.attr["data_format"].s or b"NHWC"
    if s.ndim <= len(fmt) and s.size == 1:
        return w * s.reshape(()), s
    if fmt != b"NHWC" or s.ndim > 4 or s.shape[-1] != w.shape[3]:
        return None
    if any(d != 1 for d in s.shape[:-1]):
        return None
    return w * s.reshape(-1), s


def _same_symbolic_shape(a, b) -> bool:
    """Grappler's ShapesSymbolicallyEqual: known ranks, no unknown (-1) dimension, equal."""
    return a is not None and a == b and all(d != -1 for d in a)


def _const_node(name: str, value: np.ndarray):
    nd = tf.compat.v1.NodeDef(name=name, op="Const")
    nd.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    nd.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    return nd


def fold_scales(graph_def, keep: list[str], rule: str = "all", shapes: dict | None = None):
    if rule not in RULES:
        raise ValueError(f"unknown scale-folding rule {rule!r}")
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    removed = []
    while True:  # a chain Conv2D -> Mul -> Mul folds one Mul a round, as Grappler's passes do
        gd, folded = _fold_once(gd, keep, rule, shapes)
        if not folded:
            return gd, removed
        removed += folded


def _fold_once(gd, keep: list[str], rule: str, shapes: dict | None):
    """One round of `fold_scales` over `gd` (changed in place where nothing folds)."""
    nodes = {n.name: n for n in gd.node}
    refs = references(gd)
    keep = set(keep)

    def only_reader(name: str):
        """The node reading output 0 of `name`, when it is the one reference to `name`."""
        if len(refs[name]) != 1 or name in keep:
            return None
        r = nodes[refs[name][0]]
        t = next(t for t in r.input if input_node(t) == name)
        return r if not t.startswith("^") and split_tensor(t)[1] == 0 else None

    filter_rule = _scaled_filter if rule == "all" else _grappler_filter
    folded, new_nodes, renamed = [], [], {}
    taken = set(nodes)
    for c in list(gd.node):
        if c.op not in CONTRACTIONS or len(c.input) != 2:
            continue
        bias = None
        mul = only_reader(c.name)
        if mul is not None and mul.op == "BiasAdd" and rule == "all":
            if (mul.attr["data_format"].s not in (b"NHWC", b"")
                    or input_node(mul.input[0]) != c.name):
                continue
            bias, mul = mul, only_reader(mul.name)
        if mul is None or mul.op != "Mul" or len(mul.input) != 2 or mul.name in keep:
            continue
        if rule == "tensorflow" and shapes is not None and not _same_symbolic_shape(
                shapes.get(f"{mul.name}:0"), shapes.get(f"{c.name}:0")):
            continue  # Grappler cannot tell that the Mul keeps the conv's shape
        prev = (bias or c).name
        ins = [input_node(t) for t in mul.input]
        w = _const(nodes, c.input[1])
        scaled = None if w is None else filter_rule(
            c, w, _const(nodes, mul.input[1 - ins.index(prev)]))
        if scaled is None:
            continue
        w2, v = scaled
        changes = [(c, w2)]
        if bias is not None:
            b = _const(nodes, bias.input[1])
            if b is None or b.dtype != np.float32 or b.shape != v.shape:
                continue
            changes.append((bias, b * v))
        for src, value in changes:
            name = f"{src.name}/rstf_scaled"
            while name in taken:
                name += "_"
            taken.add(name)
            new_nodes.append(_const_node(name, value))
            src.input[1] = name
        renamed[mul.name] = prev
        folded.append(mul.name)
    if not folded:
        return gd, []
    # Readers of each removed Mul read what it multiplied instead (a Mul has one output).
    for n in gd.node:
        for i, t in enumerate(n.input):
            src = input_node(t)
            if src in renamed:
                n.input[i] = ("^" if t.startswith("^") else "") + renamed[src]
    gone = set(folded)
    return rebuilt(gd, [n for n in gd.node if n.name not in gone] + new_nodes, keep), folded
