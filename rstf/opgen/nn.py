"""Neural-network layer ops beyond Conv2D: depthwise convolution, padding, batch norm."""
from __future__ import annotations

import numpy as np

from ..frontend.graph import Graph, Node
from ..frontend.names import split_tensor
from .base import (ArrayParam, OpFunction, OpHandler, Unsupported, eigen_vector_prefix,
                   index_names, numel, op_handler, render)
from .window import check_window_attrs, window


def c_float_literal(value: float, suffix: str = "f") -> str:
    """An exact C literal for a float32 value: its shortest decimal that reads back as the
    same float32 ('-1.5f', '0.001f'), else a hex float; INFINITY/NAN spelled out."""
    value = np.float32(value)
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    text = str(value)  # numpy prints the shortest round-tripping digits
    if not any(ch in text for ch in ".e"):
        text += ".0"
    if np.float32(text) != value or np.signbit(np.float32(text)) != np.signbit(value):
        text = float(value).hex()  # exact by construction
    return text + suffix


@op_handler("DepthwiseConv2dNative")
class DepthwiseConv2d(OpHandler):
    keeps_samples_apart = True
    """NHWC depthwise convolution with a depth multiplier; filter [KH][KW][C][M]."""

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        check_window_attrs(node)

    def flops(self, node: Node, graph: Graph) -> int:
        kh, kw, _, _ = graph.tensor_shape(node.inputs[1])
        return 2 * numel(node.out_shapes[0]) * kh * kw

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        xs, ws = (graph.tensor_shape(t) for t in node.inputs)
        N, _, _, C = xs
        KH, KW, _, M = ws
        _, OH, OW, OC = node.out_shapes[0]
        win = window(node, xs, node.out_shapes[0], KH, KW)
        ct = self.ctype(node)
        body = render("ops/depthwise.c.j2", N=N, OH=OH, OW=OW, OC=OC, KH=KH, KW=KW, C=C, M=M,
                      ih=win.ih, iw=win.iw, guards=win.guards, out="y", inp="x", filt="w",
                      fs=self.literal_suffix(node))
        return OpFunction(
            body, [ArrayParam("x", xs, ct), ArrayParam("w", ws, ct)],
            [ArrayParam("y", node.out_shapes[0], ct)],
            summary=(f"DepthwiseConv2dNative {list(xs)} x {list(ws)} -> "
                     f"{list(node.out_shapes[0])}, {win.describe()}"))


@op_handler("Pad", "PadV2")
class Pad(OpHandler):
    """Constant padding (any rank); PadV2's pad value must be a constant scalar."""

    def check_batch(self, node: Node, graph: Graph) -> None:
        if graph.const_value(node.inputs[1]).reshape(-1, 2)[0].any():
            raise Unsupported("Pad along the dynamic batch dimension")

    ignored_inputs = (1, 2)
    const_inputs = (1,)

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if node.op == "PadV2":
            if len(node.inputs) < 3 or not graph.is_const(node.inputs[2]):
                raise Unsupported("PadV2's constant_values must be a constant")
            if graph.const_value(node.inputs[2]).size != 1:
                raise Unsupported("PadV2's constant_values must be a scalar")

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        in_shape = graph.tensor_shape(node.inputs[0])
        out_shape = node.out_shapes[0]
        pads = graph.const_value(node.inputs[1]).reshape(-1, 2)[:, 0].tolist()
        value = np.float32(0.0)
        if node.op == "PadV2":
            value = np.float32(graph.const_value(node.inputs[2]).reshape(()))
        in_idx = index_names("i", len(in_shape))
        interior = [f"{v} + {p}" if p else v for v, p in zip(in_idx, pads)]
        ct = self.ctype(node)
        body = render("ops/pad.c.j2", out="y", inp="x", out_idx=index_names("o", len(out_shape)),
                      out_shape=out_shape, in_idx=in_idx, in_shape=in_shape, interior=interior,
                      value=c_float_literal(value, self.literal_suffix(node)))
        return OpFunction(body, [ArrayParam("x", in_shape, ct)], [ArrayParam("y", out_shape, ct)],
                          summary=f"{node.op} {list(in_shape)} -> {list(out_shape)} value {value}")


def fused_into_conv(node: Node, graph: Graph) -> bool:
    """Whether Grappler's remapper fuses batch norm `node` into the Conv2D before it
    (FindConv2DWithBatchNorm: a `_FusedConv2D` whose output kernel computes
    `(x - mean) * a + offset`, where a lone batch norm becomes `x * a + b`): float32, the
    conv NHWC with this batch norm its one reader and no model output, neither with a
    control edge."""
    src, port = split_tensor(node.inputs[0])
    conv = graph.nodes.get(src)
    if conv is None or conv.op != "Conv2D" or port != 0 or src in graph.outputs:
        return False
    if (node.out_dtypes[0] != np.float32 or conv.out_dtypes[0] != np.float32
            or (conv.attr["data_format"].s or b"NHWC") != b"NHWC"):
        return False
    controls = lambda n: n.control_inputs or any(  # noqa: E731
        n.name in graph.nodes[c].control_inputs for c in graph.consumers[n.name])
    return graph.consumers[src] == [node.name] and not controls(conv) and not controls(node)


@op_handler("FusedBatchNorm", "FusedBatchNormV3")
class FusedBatchNorm(OpHandler):
    """Inference batch normalisation (is_training false), NHWC; only `y` is generated, in
    the form TensorFlow computes it in that graph (`fused_into_conv`)."""

    keeps_samples_apart = True  # moving statistics are constants in inference

    def num_outputs(self, node: Node) -> int:
        return 1

    def data_inputs(self, node: Node) -> list[str]:
        return node.inputs[:5]

    def check(self, node: Node, graph: Graph) -> None:
        if self.attr_bool(node, "is_training", True):
            raise Unsupported("training-mode batch norm")
        fmt = self.attr_str(node, "data_format", "NHWC")
        if fmt not in ("NHWC", "NDHWC"):  # channels last: the channel is the last subscript
            raise Unsupported(f"data_format {fmt}")
        super().check(node, graph)

    def flops(self, node: Node, graph: Graph) -> int:
        return 2 * numel(node.out_shapes[0])

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        shape = node.out_shapes[0]
        C = shape[-1]
        ct = self.ctype(node)
        eps = np.float32(node.attr["epsilon"].f if "epsilon" in node.attr else 1e-4)
        fs, ms = self.literal_suffix(node), self.math_suffix(node)
        # Float: TensorFlow's vector rsqrt for whole packets of channels (batchnorm.c.j2).
        est = eigen_vector_prefix(C) if ms == "f" else 0
        after_conv = fused_into_conv(node, graph)
        body = render("ops/batchnorm.c.j2", C=C, idx=index_names("i", len(shape)), shape=shape,
                      out="y", inp="x", scale="scale", offset="offset", mean="mean",
                      var="variance", a="a", b="b", eps=c_float_literal(eps, fs), fs=fs,
                      ms=ms, est=est, rsqrt_fn="rstf_rsqrtf",
                      after_conv=after_conv)
        ins = [ArrayParam("x", shape, ct)] + [ArrayParam(n, (C,), ct) for n in
                                               ("scale", "offset", "mean", "variance")]
        scratch = [ArrayParam("a", (C,), ct)] + ([] if after_conv else [ArrayParam("b", (C,), ct)])
        return OpFunction(body, ins, [ArrayParam("y", shape, ct)], scratch=scratch,
                          summary=f"{node.op} {list(shape)} epsilon {eps}"
                          + (" (fused into its conv, as in TensorFlow)" if after_conv else ""))
