"""Pointwise ops with a constant operand moved ahead of a Reshape that splits the last axis.

Keras' `EinsumDense` (attention's query, key and value projections) freezes to a
BatchMatMulV2 [b, s, hidden], a Reshape to [b, s, heads, head_dim], then the bias add over
[heads, head_dim] (and, for the query, a multiply by 1/sqrt(head_dim)). The Reshape is free
in rstf's code (a view of the product's buffer), but the bias add after it runs over a
4-D index space the contraction's epilogue does not share, so it runs as its own pass over
the product. Moved ahead of the Reshape, with its constant flattened to [hidden], the add
is a pointwise op on the product itself and runs in the contraction's registers.

Pattern (float32, shapes known, or all but a dynamic batch: dimension 0 of x and r, the
same unknown since the other axes match): r = Reshape(x) with x of shape [d..., N] and r of shape
[d..., n1, .., nk] (n1 * .. * nk = N: only the last axis is split); p = Add, AddV2, Sub,
Mul, RealDiv, Maximum, Minimum or BiasAdd (NHWC) of r and a Const c that broadcasts along
the leading axes d... only (c's shape, leading ones dropped, fits [n1, .., nk]); r has no
reader but p, carries and takes no control edges and is not a model output (`keep`).

p becomes p(x, c') under a new name, c' = c broadcast to [n1, .., nk] and flattened
(a single value stays as it is), and a Reshape of that to r's shape takes p's name, so p's
readers and the model's signature are unchanged; r goes. Repeated until nothing matches,
so a chain (the bias add, then the query's scale) moves ahead as a whole. Each element
is the same operation on the same two values: the results are bit for bit the same.

Contract: `hoist_pointwise(graph_def, keep, shapes)` returns (a new GraphDef, names of the
ops moved). The input GraphDef is not changed.
"""
from __future__ import annotations

import math

import numpy as np

from .names import (fresh_name, input_node, rebuilt, references, sole_data_reader,
                    split_tensor, static_shape, working_copy)
from .tfutil import tf

DT_FLOAT = 1
POINTWISE = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "BiasAdd"}


def candidates(graph_def) -> bool:
    """Whether some pointwise op reads a Reshape (the pass has work to look at)."""
    reshapes = {n.name for n in graph_def.node if n.op == "Reshape"}
    return any(n.op in POINTWISE and any(input_node(t) in reshapes for t in n.input)
               for n in graph_def.node)


def hoist_pointwise(graph_def, keep, shapes: dict) -> tuple[object, list[str]]:
    """`shapes`: `graph.infer_shapes(graph_def)` (the shapes of the input graph). The loader
    calls it only where `candidates` says so, which spares that shape inference."""
    gd, keep, nodes = working_copy(graph_def, keep)
    removed: set[str] = set()
    moved: list[str] = []
    ahead: dict[str, list] = {}  # node name -> the nodes created to run just before it
    # The static shape of each tensor this pass creates or renames.
    known: dict[str, tuple] = {}

    def shape(tensor: str) -> tuple | None:
        name = split_tensor(tensor)[0]
        return known[name] if name in known else static_shape(shapes, tensor, batch=True)

    while True:
        live = [n for n in gd.node if n.name not in removed]
        refs = references(live)
        hit = None
        for p in live:
            if p.op not in POINTWISE or p.attr["T"].type != DT_FLOAT:
                continue
            if p.op == "BiasAdd" and p.attr["data_format"].s not in (b"", b"NHWC"):
                continue
            for i in (0, 1):
                r, c = nodes.get(input_node(p.input[i])), nodes.get(input_node(p.input[1 - i]))
                if (r is None or c is None or r.op != "Reshape" or c.op != "Const"
                        or split_tensor(p.input[1 - i])[1]
                        or any(t.startswith("^") for t in p.input)
                        or not sole_data_reader(r.name, p, nodes, refs, keep)
                        or r.attr["T"].type != DT_FLOAT or (p.op == "BiasAdd" and i == 1)):
                    continue
                flat = _flat_constant(tf.make_ndarray(c.attr["value"].tensor),
                                      shape(r.input[0]), shape(r.name))
                if flat is not None:
                    hit = (p, i, r, flat)
                    break
            if hit:
                break
        if hit is None:
            break
        p, i, r, flat = hit
        const = gd.node.add()
        const.name = fresh_name(nodes, f"{p.name}/flat_operand")
        const.op = "Const"
        const.attr["dtype"].type = DT_FLOAT
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(flat))
        nodes[const.name] = const
        new = gd.node.add()
        new.CopyFrom(p)
        new.name = fresh_name(nodes, f"{p.name}/before_reshape")
        nodes[new.name] = new
        new.input[i] = r.input[0]
        new.input[1 - i] = const.name
        known[new.name] = shape(r.input[0])
        # p's name now names the Reshape of the new op's result to r's shape.
        out_shape = shape(r.name)
        p.op = "Reshape"
        del p.input[:]
        p.input.extend([new.name, r.input[1]])
        p.attr.clear()
        p.attr["T"].type = DT_FLOAT
        p.attr["Tshape"].CopyFrom(r.attr["Tshape"])
        known[p.name] = out_shape
        removed.add(r.name)
        moved.append(new.name)
        # (r's own moved-ahead nodes, if r was made by an earlier step, go with it.)
        ahead[p.name] = ahead.pop(r.name, []) + ahead.get(p.name, []) + [const, new]
    if not moved:
        return graph_def, []
    # The new nodes go where p was, so that the order of the GraphDef, which the subgraph's
    # calls follow, keeps the op right after the contraction whose epilogue it joins.
    added = {n.name for ns in ahead.values() for n in ns}
    order = []
    for n in gd.node:
        if n.name not in added and n.name not in removed:
            order += _with_ahead(n, ahead)
    return rebuilt(gd, order, keep), moved


def _with_ahead(n, ahead: dict) -> list:
    """n after the nodes moved ahead of it (themselves after theirs)."""
    out = []
    for m in ahead.get(n.name, []):
        out += _with_ahead(m, ahead)
    return out + [n]


def _flat_constant(c: np.ndarray, x_shape, r_shape) -> np.ndarray | None:
    """c as an operand of x instead of r (see the module doc), or None where the pattern's
    shape conditions fail."""
    if x_shape is None or r_shape is None or not x_shape:
        return None
    lead = len(x_shape) - 1
    split = r_shape[lead:]
    if (tuple(r_shape[:lead]) != tuple(x_shape[:-1]) or len(split) < 2 or None in split
            or math.prod(split) != x_shape[-1]):
        return None
    if c.size == 1:
        return c.reshape(()).astype(np.float32)
    dims = list(c.shape)
    while dims and dims[0] == 1 and len(dims) > len(split):
        dims.pop(0)
    if len(dims) > len(split) or c.ndim > len(r_shape):
        return None  # it varies along a leading axis, or would add axes to p's result
    try:
        full = np.broadcast_to(c.reshape(dims), split)
    except ValueError:
        return None
    return np.ascontiguousarray(full, dtype=np.float32).reshape(-1)
