"""MaxPool and AvgPool (NHWC, SAME / VALID)."""
from __future__ import annotations

from ..frontend.graph import Graph, Node
from .base import ArrayParam, OpFunction, OpHandler, op_handler, render
from .window import affine, check_nhwc, nhwc_attrs, pad_before, window_access


def _valid_count(out_var: str, stride: int, pad: int, k: int, in_size: int,
                 guards: list[str]) -> str:
    """Number of window positions inside the input along one axis, as a C int expression."""
    if not guards:
        return str(k)
    start = affine([(out_var, stride)], -pad)
    end = affine([(out_var, stride)], k - pad)
    hi = f"({end} < {in_size} ? {end} : {in_size})"
    lo = f"({start} > 0 ? {start} : 0)"
    return f"({hi} - {lo})"


class _Pool(OpHandler):
    kind = ""
    keeps_samples_apart = True  # NHWC windows never cross the batch dimension

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        check_nhwc(node)
        nhwc_attrs(node, "ksize")
        nhwc_attrs(node, "strides")
        pad_before(node, 1, 1, 1, 1, 1, 1)  # rejects unknown padding kinds

    def flops(self, node: Node, graph: Graph) -> int:
        kh, kw = nhwc_attrs(node, "ksize")
        n, oh, ow, c = node.out_shapes[0]
        return n * oh * ow * c * kh * kw

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        xs = graph.tensor_shape(node.inputs[0])
        N, H, W, C = xs
        _, OH, OW, _ = node.out_shapes[0]
        KH, KW = nhwc_attrs(node, "ksize")
        sh, sw = nhwc_attrs(node, "strides")
        ph = pad_before(node, 1, H, OH, KH, sh, 1)
        pw = pad_before(node, 2, W, OW, KW, sw, 1)
        ih, gh = window_access("oh", "kh", sh, 1, ph, H, OH, KH)
        iw, gw = window_access("ow", "kw", sw, 1, pw, W, OW, KW)
        ct = self.ctype(node)
        fs = self.literal_suffix(node)
        count = None
        if self.kind == "avg":
            ch = _valid_count("oh", sh, ph, KH, H, gh)
            cw = _valid_count("ow", sw, pw, KW, W, gw)
            count = f"{ch} * {cw}"
        body = render("ops/pool.c.j2", kind=self.kind, N=N, OH=OH, OW=OW, C=C, KH=KH, KW=KW,
                      ih=ih, iw=iw, guards=gh + gw, out="y", inp="x", ct=ct, count=count,
                      init="-INFINITY" if self.kind == "max" else f"0.0{fs}")
        return OpFunction(body, [ArrayParam("x", xs, ct)],
                          [ArrayParam("y", node.out_shapes[0], ct)],
                          summary=(f"{node.op} {list(xs)} window {KH}x{KW} stride {sh}x{sw} "
                                   f"pad {ph},{pw}"))


@op_handler("MaxPool")
class MaxPool(_Pool):
    kind = "max"


@op_handler("AvgPool")
class AvgPool(_Pool):
    kind = "avg"
