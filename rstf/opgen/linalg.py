"""Conv2D and MatMul: the ops that carry the FLOPs."""
from __future__ import annotations

import math
from typing import NamedTuple

from ..frontend.graph import Graph, Node
from .base import (ArrayParam, OpFunction, OpHandler, Unsupported, broadcast_indices,
                   index_names, op_handler, render, subscript)
from .kslices import tf_k_plan, tf_k_slices, tf_matvec_blocks
from .window import check_window_attrs, window


class ProductOrder(NamedTuple):
    """How a float product [M, K] x [K, N] is summed: `blocks` of k slices (the `k_sliced`
    macro's), and whether each step is one fused multiply-add (`fused`, oneDNN's sgemm) or
    a product rounded and then added (Eigen's own kernels, as the TF wheel builds them)."""
    blocks: list[list[tuple]]
    fused: bool = True


def product_order(ct: str, M: int, K: int, N: int, batched: bool = False,
                  b_transposed: bool = False) -> ProductOrder:
    """TensorFlow's order on this machine: a one-row product with B row-major (M of 1) is
    Eigen's matrix-vector kernel (opgen.kslices `tf_matvec_blocks`), any other
    `tf_k_plan`'s (a batched matmul, whose threads TF spends over the batch, in its
    multi-threaded slices). One fused chain where TF's kernel is another that rstf does not
    follow: a one-column product (N of 1), a one-row product of a transposed B or in a
    batch, and a double product (Eigen's kernel without TF's slices)."""
    if ct != "float" or N == 1 or M == 1 and (batched or b_transposed):
        return ProductOrder([[(0, K)]])
    if M == 1:
        return ProductOrder(tf_matvec_blocks(K, N), fused=False)
    plan = None if batched else tf_k_plan(M, K, N)
    return ProductOrder(plan or [[s] for s in tf_k_slices(K)])


def k_scratch(blocks: list[list[tuple]], shape, ct: str) -> list[ArrayParam]:
    """The scratch arrays `k_sliced` sums `blocks` through: t past one slice, u where a
    later block has slices of its own."""
    scratch = [ArrayParam("t", tuple(shape), ct)] if sum(map(len, blocks)) > 1 else []
    if any(len(b) > 1 for b in blocks[1:]):
        scratch.append(ArrayParam("u", tuple(shape), ct))
    return scratch


def describe_slices(blocks: list[list[tuple]]) -> str:
    """'k slices N' (and ' in B blocks' where the slices are grouped), for summaries."""
    n = sum(map(len, blocks))
    return f"k slices {n}" + (f" in {len(blocks)} blocks" if n > len(blocks) else "")


@op_handler("Conv2D")
class Conv2D(OpHandler):
    keeps_samples_apart = True  # windows slide over H and W only
    """NHWC x HWIO, any strides and dilations, SAME / VALID / EXPLICIT padding, and grouped
    convolution (the input has a multiple of the filter's input channels)."""

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        check_window_attrs(node)
        x, w = (graph.tensor_shape(t) for t in node.inputs)
        if not w[2] or x[3] % w[2] or not x[3] or w[3] % (x[3] // w[2]):
            raise Unsupported(f"{x[3]} input channels do not split into groups of {w[2]} "
                              f"with {w[3]} output channels")

    def flops(self, node: Node, graph: Graph) -> int:
        n, oh, ow, oc = node.out_shapes[0]
        kh, kw, ic, _ = graph.tensor_shape(node.inputs[1])
        return 2 * n * oh * ow * oc * kh * kw * ic

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        xs, ws = (graph.tensor_shape(t) for t in node.inputs)
        N, _, _, IC = xs
        KH, KW, _, OC = ws
        _, OH, OW, _ = node.out_shapes[0]
        win = window(node, xs, node.out_shapes[0], KH, KW)
        ct = self.ctype(node)
        G = IC // ws[2]  # groups: input channels per group = the filter's in-channels
        # A 1x1 convolution is TF's matrix product [N*OH*OW, IC] x [IC, OC], in its k
        # slices; a wider window's reduction runs over (kh, kw, ic), one chain.
        pointwise = KH == KW == 1 and G == 1 and not win.guards
        order = product_order(ct, N * OH * OW, IC, OC) if pointwise else \
            ProductOrder([[(0, IC)]])
        slices = order.blocks
        body = render("ops/conv2d.c.j2", N=N, OH=OH, OW=OW, OC=OC, KH=KH, KW=KW, IC=ws[2],
                      G=G, OCG=OC // G, ih=win.ih, iw=win.iw, guards=win.guards, out="y",
                      inp="x", filt="w", fs=self.literal_suffix(node), slices=slices,
                      fused=order.fused, ms=self.math_suffix(node))
        return OpFunction(
            body, [ArrayParam("x", xs, ct), ArrayParam("w", ws, ct)],
            [ArrayParam("y", node.out_shapes[0], ct)],
            scratch=k_scratch(slices, node.out_shapes[0], ct),
            summary=(f"Conv2D {list(xs)} x {list(ws)} -> {list(node.out_shapes[0])}, "
                     f"{win.describe()}, groups {G}, {describe_slices(slices)}"))


@op_handler("MatMul")
class MatMul(OpHandler):
    """C = op(A) op(B) with transpose_a / transpose_b folded into the subscripts."""

    def check_batch(self, node: Node, graph: Graph) -> None:
        # Row n of C is row n of A times B: per sample when A is not transposed and B is a
        # constant (a Dense layer).
        if self.attr_bool(node, "transpose_a"):
            raise Unsupported("MatMul with transpose_a mixes the samples of a dynamic batch")
        if not graph.is_const(node.inputs[1]):
            raise Unsupported("MatMul whose second operand is not a constant, under a dynamic "
                              "batch")

    def flops(self, node: Node, graph: Graph) -> int:
        m, n = node.out_shapes[0]
        a = graph.tensor_shape(node.inputs[0])
        k = a[0] if self.attr_bool(node, "transpose_a") else a[1]
        return 2 * m * n * k

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        ta, tb = self.attr_bool(node, "transpose_a"), self.attr_bool(node, "transpose_b")
        a_shape, b_shape = (graph.tensor_shape(t) for t in node.inputs)
        M, N = node.out_shapes[0]
        K = a_shape[0] if ta else a_shape[1]
        ct = self.ctype(node)
        order = product_order(ct, M, K, N, b_transposed=tb)
        slices = order.blocks
        body = render("ops/matmul.c.j2", M=M, N=N, K=K, out="c", slices=slices,
                      fused=order.fused,
                      a="a[k][i]" if ta else "a[i][k]", b="b[j][k]" if tb else "b[k][j]",
                      fs=self.literal_suffix(node), ms=self.math_suffix(node))
        return OpFunction(body, [ArrayParam("a", a_shape, ct), ArrayParam("b", b_shape, ct)],
                          [ArrayParam("c", (M, N), ct)],
                          scratch=k_scratch(slices, (M, N), ct),
                          summary=f"MatMul {M}x{K}x{N} transpose_a={ta} transpose_b={tb}, "
                                  f"{describe_slices(slices)}")


@op_handler("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
class BatchMatMul(OpHandler):
    """C[b...] = op(A[b...]) op(B[b...]) over the last two dimensions, op = adj_x / adj_y
    (a transpose: float32 only, so no conjugate). The batch dimensions broadcast with numpy's
    rules (V2 and V3; BatchMatMul v1 requires them equal, a special case), and a rank-2
    operand is one matrix for every batch."""

    def _dims(self, node: Node, graph: Graph):
        a, b = (graph.tensor_shape(t) for t in node.inputs[:2])
        if len(a) < 2 or len(b) < 2:
            raise Unsupported(f"operands of rank {len(a)} and {len(b)}; both need rank >= 2")
        ax, ay = self.attr_bool(node, "adj_x"), self.attr_bool(node, "adj_y")
        M, K = (a[-1], a[-2]) if ax else (a[-2], a[-1])
        K2, N = (b[-1], b[-2]) if ay else (b[-2], b[-1])
        if K != K2:
            raise Unsupported(f"inner dimensions {K} and {K2} differ")
        return a, b, ax, ay, M, K, N

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        a, b, _, _, M, _, N = self._dims(node, graph)
        out = node.out_shapes[0]
        if tuple(out[-2:]) != (M, N):
            raise Unsupported(f"output {list(out)} is not [..., {M}, {N}]")
        names = index_names("b", len(out) - 2)
        for shape in (a, b):
            try:
                broadcast_indices(shape[:-2], out[:-2], names)
            except ValueError as e:
                raise Unsupported(str(e)) from None

    def check_batch(self, node: Node, graph: Graph) -> None:
        # Batch entry n of C reads batch entry n of each operand: per sample when the output
        # is batched (rank >= 3) and every non-constant operand has the output's rank.
        rank = len(node.out_shapes[0])
        if rank < 3:
            raise Unsupported("BatchMatMul of matrices mixes the samples of a dynamic batch")
        for t in node.inputs[:2]:
            if not graph.is_const(t) and len(graph.tensor_shape(t)) != rank:
                raise Unsupported("BatchMatMul operand broadcast along the dynamic batch")

    def flops(self, node: Node, graph: Graph) -> int:
        _, _, _, _, M, K, N = self._dims(node, graph)
        return 2 * math.prod(node.out_shapes[0][:-2]) * M * N * K

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        a, b, ax, ay, M, K, N = self._dims(node, graph)
        out = tuple(node.out_shapes[0])
        bshape = list(out[:-2])
        bidx = index_names("b", len(bshape))
        a_sub = broadcast_indices(a[:-2], bshape, bidx) + (["k", "i"] if ax else ["i", "k"])
        b_sub = broadcast_indices(b[:-2], bshape, bidx) + (["j", "k"] if ay else ["k", "j"])
        ct = self.ctype(node)
        slices = product_order(ct, M, K, N, batched=True).blocks
        body = render("ops/batch_matmul.c.j2", bidx=bidx, bshape=bshape, M=M, N=N, K=K,
                      out="c", a=subscript("a", a_sub), b=subscript("b", b_sub), slices=slices,
                      fs=self.literal_suffix(node), ms=self.math_suffix(node))
        return OpFunction(body, [ArrayParam("a", tuple(a), ct), ArrayParam("b", tuple(b), ct)],
                          [ArrayParam("c", out, ct)],
                          scratch=k_scratch(slices, out, ct),
                          summary=f"{node.op} {list(a)} x {list(b)} -> {list(out)} "
                                  f"adj_x={ax} adj_y={ay}, {describe_slices(slices)}")
