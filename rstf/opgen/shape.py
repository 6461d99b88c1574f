"""Ops that only move data: Reshape and friends (flat copies), ConcatV2, Pack, and affine
gathers (Transpose, Slice, StridedSlice, ReverseV2)."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node
from .base import (ArrayParam, OpFunction, OpHandler, Unsupported, index_names, numel,
                   op_handler, render)
from .window import affine


@op_handler("Reshape", "Squeeze", "ExpandDims", "Identity", "Snapshot", "StopGradient")
class Copy(OpHandler):
    """A row-major regrouping: the output is the input's buffer copied flat.

    The shape/axis input of Reshape and ExpandDims is not needed: the output shape is static.
    """

    ignored_inputs = (1,)

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        size = numel(node.out_shapes[0])
        body = render("ops/copy.c.j2", size=size, out="y", inp="x")
        ct = self.ctype(node)
        return OpFunction(body, [ArrayParam("x", (size,), ct)], [ArrayParam("y", (size,), ct)],
                          summary=f"{node.op} {size} elements")


@op_handler("IdentityN")
class IdentityN(OpHandler):
    """Output i is input i (tf.custom_gradient wraps activations such as swish in it)."""

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        sizes = [numel(s) for s in node.out_shapes]
        ct = self.ctype(node)
        body = "\n".join(render("ops/copy.c.j2", size=n, out=f"y{k}", inp=f"x{k}")
                          for k, n in enumerate(sizes))
        return OpFunction(body, [ArrayParam(f"x{k}", (n,), ct) for k, n in enumerate(sizes)],
                          [ArrayParam(f"y{k}", (n,), ct) for k, n in enumerate(sizes)],
                          summary=f"IdentityN of {len(sizes)} tensors")


@op_handler("ConcatV2")
class ConcatV2(OpHandler):
    """Concatenation along a constant axis (the last input), each input into its slice."""

    def _axis_input(self, node: Node) -> int:
        return len(node.inputs) - 1

    def data_inputs(self, node: Node) -> list[str]:
        return node.inputs[:-1]

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        if not graph.is_const(node.inputs[-1]):
            raise Unsupported("the concat axis must be a constant")

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        rank = len(out_shape)
        axis = int(graph.const_value(node.inputs[-1]))
        axis = axis + rank if axis < 0 else axis
        idx = index_names("i", rank)
        ct = self.ctype(node)
        parts, ins, offset = [], [], 0
        for k, t in enumerate(self.data_inputs(node)):
            shape = graph.tensor_shape(t)
            out_sub = list(idx)
            out_sub[axis] = f"{idx[axis]} + {offset}" if offset else idx[axis]
            parts.append({"name": f"x{k}", "idx": idx, "shape": shape, "out_sub": out_sub})
            ins.append(ArrayParam(f"x{k}", shape, ct))
            offset += shape[axis]
        body = render("ops/concat.c.j2", parts=parts, out="y")
        return OpFunction(body, ins, [ArrayParam("y", out_shape, ct)],
                          summary=f"ConcatV2 axis {axis} of {len(ins)} -> {list(out_shape)}")


def _index_map(node: Node, graph: Graph) -> np.ndarray:
    """Which flat input element each output element reads, computed by TensorFlow itself:
    the node is re-run (with its constant operands) on an int32 tensor of flat indices."""
    from ..tfutil import tf

    in_shape = graph.tensor_shape(node.inputs[0])
    size = numel(in_shape)
    if size >= 2**31:
        raise Unsupported("input too large for an index map")
    g = tf.Graph()
    with g.as_default():
        ops = [tf.constant(np.arange(size, dtype=np.int32).reshape(in_shape))]
        ops += [tf.constant(graph.const_value(t)) for t in node.inputs[1:]]
        nd = tf.compat.v1.NodeDef()
        nd.CopyFrom(node.node_def)
        nd.name = "gather"
        del nd.input[:]
        nd.input.extend(t.op.name for t in ops)
        if "T" in nd.attr:
            nd.attr["T"].type = tf.int32.as_datatype_enum
        gd = g.as_graph_def()
        gd.node.extend([nd])
    g2 = tf.Graph()
    with g2.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g2) as sess:
        return sess.run("gather:0")


def _affine_fit(index_map: np.ndarray) -> tuple[int, list[int]]:
    """(base, coefficients) with index_map[o] == base + sum(coef[k] * o[k]) everywhere, or
    Unsupported if the gather is not affine in the output indices."""
    shape = index_map.shape
    if index_map.size == 0:
        return 0, [0] * len(shape)
    base = int(index_map.reshape(-1)[0])
    coefs = []
    for k, extent in enumerate(shape):
        if extent == 1:
            coefs.append(0)
            continue
        unit = [0] * len(shape)
        unit[k] = 1
        coefs.append(int(index_map[tuple(unit)]) - base)
    grids = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), np.int64)
    expected = base + sum(c * grids[k] for k, c in enumerate(coefs)) if shape else base
    if not np.array_equal(np.asarray(expected).reshape(shape), index_map):
        raise Unsupported("the element mapping is not affine")
    return base, coefs


@op_handler("Transpose", "Slice", "StridedSlice", "ReverseV2")
class AffineGather(OpHandler):
    """Ops that read each output element from one input element at an affine position.

    The mapping is not re-derived from TF's semantics (masks, negative strides, ellipses):
    TensorFlow evaluates the node on a tensor of flat indices at generation time, and the
    result is fitted to `base + sum(coef_k * o_k)` and checked element by element, so the
    generated subscript is exact or the node is refused.
    """

    ignored_inputs = (1, 2, 3)

    def check(self, node: Node, graph: Graph) -> None:
        super().check(node, graph)
        for t in node.inputs[1:]:
            if not graph.is_const(t):
                raise Unsupported(f"operand {t} must be a constant")
        _affine_fit(_index_map(node, graph))

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        in_shape = graph.tensor_shape(node.inputs[0])
        out_shape = node.out_shapes[0]
        base, coefs = _affine_fit(_index_map(node, graph))
        idx = index_names("i", len(out_shape))
        flat = affine(list(zip(idx, coefs)), base)
        ct = self.ctype(node)
        body = render("ops/gather.c.j2", idx=idx, shape=out_shape, out="y", inp="x",
                      flat=flat)
        return OpFunction(body, [ArrayParam("x", (numel(in_shape),), ct)],
                          [ArrayParam("y", out_shape, ct)],
                          summary=f"{node.op} {list(in_shape)} -> {list(out_shape)}")


@op_handler("Pack")
class Pack(OpHandler):
    """Stack N same-shaped tensors along a new axis: input k fills index k of that axis."""

    def flops(self, node: Node, graph: Graph) -> int:
        return 0

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        out_shape = node.out_shapes[0]
        axis = node.attr["axis"].i if "axis" in node.attr else 0
        axis = axis + len(out_shape) if axis < 0 else axis
        ct = self.ctype(node)
        parts, ins = [], []
        for k, t in enumerate(node.inputs):
            shape = graph.tensor_shape(t)
            idx = index_names("i", len(shape))
            out_sub = idx[:axis] + [str(k)] + idx[axis:]
            parts.append({"name": f"x{k}", "idx": idx, "shape": shape, "out_sub": out_sub})
            ins.append(ArrayParam(f"x{k}", shape, ct))
        body = render("ops/concat.c.j2", parts=parts, out="y")
        return OpFunction(body, ins, [ArrayParam("y", out_shape, ct)],
                          summary=f"Pack axis {axis} of {len(ins)} -> {list(out_shape)}")
