"""Transposes around batched matmuls folded into the matmul's adjoint flags.

TensorFlow lowers an einsum whose axes are not in matmul order to Transposes around a
`BatchMatMulV2`. Attention's scores, `einsum("aecd,abcd->acbe", key, query)` in Keras'
MultiHeadAttention, become Transpose(key) [b, h, k, d], Transpose(query) [b, h, d, q], their
product [b, h, k, q], and a Transpose of that product to [b, h, q, k]. As generated code
each Transpose is a full copy, the last one a strided one, and it stands between the
product and the mask, so the mask cannot run in the product's epilogue. Two identities
remove most of them:

- (X Y)^T = Y^T X^T. A Transpose that swaps only the last two axes of a batched matmul's
  product becomes the matmul of the operands the other way round, each adjoint flag
  flipped.
- A Transpose read as an adjoint operand is a Transpose by the same permutation with its
  last two entries swapped, and no adjoint; where that permutation is the identity, the
  operand is the Transpose's input itself.

- (rule 3, once, after the others) A right operand read as an adjoint is read without
  it: rstf's kernels read the right operand by rows, and the polyhedral pass leaves a
  product that reads it by columns in its textbook order. A computed operand gets its own
  Transpose (a cache-tiled copy); a constant of rank 3 or more (per-head values, such as
  DeBERTa's folded relative-position keys) is transposed at load time. A 2-D weight is
  left to the kernels' own layout (rstf.poly.prepack).

Attention's scores become one matmul of query as [b, h, q, d] by key as [b, h, d, k], with
no Transpose of the product: two copies instead of three, and the mask and softmax read
the product in order. The sums are the same products summed: rstf's kernel picks its own
order either way.

Pattern conditions: the permutation is a Const; the matmul (rule 1) or the Transpose
(rule 2) has no reader but the node rewritten, through its output 0, as data, carries no
control input, and is not a model output (`keep`); the element type is float32.

Contract: `fold_transposes(graph_def, keep)` returns (a new GraphDef, names of the nodes
rewritten). The input GraphDef is not changed. A rewritten product keeps the name of the
Transpose it replaces, so its readers and the model's signature are unchanged.
"""
from __future__ import annotations

import numpy as np

from .names import (fresh_name, input_node, rebuilt, references, sole_data_reader,
                    split_tensor, working_copy)
from .shapes import infer_shapes
from .tfutil import tf

DT_FLOAT = 1
DT_INT32 = 3
MATMULS = {"BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}


def fold_transposes(graph_def, keep) -> tuple[object, list[str]]:
    """Apply rules 1 and 2 (see the module doc) until neither applies, then rule 3 once."""
    ops = {n.op for n in graph_def.node}
    if not ops & MATMULS:
        return graph_def, []
    gd, keep, nodes = working_copy(graph_def, keep)
    removed: set[str] = set()
    changed: list[str] = []
    while "Transpose" in ops:
        live = [n for n in gd.node if n.name not in removed]
        refs = references(live)
        step = (_swap_product(live, nodes, refs, keep)
                or _absorb_adjoint(gd, live, nodes, refs, keep))
        if step is None:
            break
        gone, name = step
        removed |= gone
        changed.append(name)
    # Once only: rule 1 may set adjoint flags again, and would undo it.
    live = [n for n in gd.node if n.name not in removed]
    made, ahead = _materialize_adjoint(gd, live, nodes)
    changed += made
    if not changed:
        return graph_def, []
    added = {n.name for ns in ahead.values() for n in ns}
    order = [m for n in live if n.name not in added for m in ahead.get(n.name, []) + [n]]
    return rebuilt(gd, order, keep), sorted(set(changed))


def _perm(nodes: dict, tensor: str) -> list[int] | None:
    """The constant permutation named by `tensor`, or None."""
    c = nodes.get(input_node(tensor))
    if c is None or c.op != "Const":
        return None
    return [int(v) for v in np.asarray(tf.make_ndarray(c.attr["value"].tensor)).ravel()]


def _add_const(gd, nodes: dict, base: str, value: np.ndarray):
    """A new Const node of `gd` holding `value`, named `base` or a fresh variant of it."""
    c = gd.node.add()
    c.name = fresh_name(nodes, base)
    nodes[c.name] = c
    c.op = "Const"
    c.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    return c


def _swapped(p: list[int]) -> list[int]:
    return p[:-2] + [p[-1], p[-2]]


def _float(n) -> bool:
    return n.attr["T"].type == DT_FLOAT


def _swap_product(live, nodes, refs, keep):
    """Rule 1: Transpose(BMM(x, y, ax, ay), [.., n-1, n-2]) -> BMM(y, x, !ay, !ax)."""
    for t in live:
        if t.op != "Transpose" or not _float(t):
            continue
        m = nodes.get(input_node(t.input[0]))
        p = _perm(nodes, t.input[1])
        if m is None or m.op not in MATMULS or p is None or len(p) < 2:
            continue
        if p != _swapped(list(range(len(p)))) or not sole_data_reader(m.name, t, nodes,
                                                                        refs, keep):
            continue
        x, y = m.input[0], m.input[1]
        ax, ay = m.attr["adj_x"].b, m.attr["adj_y"].b
        controls = [u for u in t.input if u.startswith("^")]
        attrs = {k: m.attr[k] for k in m.attr}
        t.op = m.op
        del t.input[:]
        t.input.extend([y, x] + controls)
        t.attr.clear()
        for k, v in attrs.items():
            t.attr[k].CopyFrom(v)
        t.attr["adj_x"].b, t.attr["adj_y"].b = not ay, not ax
        return {m.name}, t.name
    return None


def _absorb_adjoint(gd, live, nodes, refs, keep):
    """Rule 2: BMM(Transpose(x, p), .., adj) -> BMM(Transpose(x, swapped p), .., no adj)."""
    for m in live:
        if m.op not in MATMULS or not _float(m):
            continue
        for k, flag in ((0, "adj_x"), (1, "adj_y")):
            t = nodes.get(input_node(m.input[k]))
            if not m.attr[flag].b or t is None or t.op != "Transpose":
                continue
            p = _perm(nodes, t.input[1])
            if p is None or len(p) < 2 or not sole_data_reader(t.name, m, nodes, refs, keep):
                continue
            q = _swapped(p)
            m.attr[flag].b = False
            if q == list(range(len(q))):
                m.input[k] = t.input[0]
                return {t.name}, m.name
            perm = _add_const(gd, nodes, f"{t.name}/perm_swapped", np.array(q, np.int32))
            t.input[1] = perm.name
            t.attr["Tperm"].type = DT_INT32
            return set(), m.name
    return None


def _materialize_adjoint(gd, live, nodes) -> list[str]:
    """Rule 3: BMM(x, y, adj_y) -> BMM(x, Transpose(y, swap of the last two axes)), or of
    y's value transposed where y is a Const of rank 3 or more. rstf's contraction kernels
    read the right operand a row of columns at a time; an adjoint one would be read a column at a stride, and the
    polyhedral pass leaves such a product in its textbook order (DeBERTa's relative-position
    scores, a gathered [h, 2k, d] read as [h, d, 2k]: 7 GFLOP/s, against 200 tiled). The
    Transpose is a cache-tiled copy of an operand a fraction of the product's work."""
    made, ahead = [], {}
    shapes = None
    for m in live:
        if m.op not in MATMULS or not _float(m) or not m.attr["adj_y"].b:
            continue
        y = nodes.get(input_node(m.input[1]))
        if y is None:
            continue
        if y.op == "Const":
            value = tf.make_ndarray(y.attr["value"].tensor)
            if value.ndim < 3:
                continue  # a 2-D weight is laid out for the kernel at optimize time
            # A per-head constant (DeBERTa's relative-position keys, folded): transposed now.
            c = _add_const(gd, nodes, f"{m.name}/adjoint_value",
                           np.ascontiguousarray(np.swapaxes(value, -1, -2)))
            m.input[1] = c.name
            m.attr["adj_y"].b = False
            made.append(m.name)
            ahead[m.name] = [c]
            continue
        if shapes is None:
            shapes = infer_shapes(gd)
        name, k = split_tensor(m.input[1])
        outs = shapes.get(name, ([], []))[0]
        if k >= len(outs) or outs[k] is None or len(outs[k]) < 2:
            continue
        perm = _add_const(gd, nodes, f"{m.name}/adjoint_perm",
                          np.array(_swapped(list(range(len(outs[k])))), np.int32))
        t = gd.node.add()
        t.name = fresh_name(nodes, f"{m.name}/adjoint")
        nodes[t.name] = t
        t.op = "Transpose"
        t.input.extend([m.input[1], perm.name])
        t.attr["T"].type = DT_FLOAT
        t.attr["Tperm"].type = DT_INT32
        m.input[1] = t.name
        m.attr["adj_y"].b = False
        made.append(m.name)
        ahead[m.name] = [perm, t]
    return made, ahead
