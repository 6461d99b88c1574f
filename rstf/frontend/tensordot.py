"""Dense layers over 3-D inputs joined back into one contraction.

Keras' `Dense` on a [B, S, K] input (a transformer's feed-forward layers) freezes to
`Tensordot`: a Reshape of x to [B*S, K], a MatMul by W [K, N], a Reshape back to [B, S, N],
then the BiasAdd and activation. As generated code each Reshape is a full copy of its
tensor, and the second one stands between the contraction and its BiasAdd, so neither the
bias nor the activation can run in the contraction's epilogue. Rewritten as one
`BatchMatMulV2` of x by W (TensorFlow broadcasts a 2-D right operand over x's leading
axes, and it is the op Keras' `EinsumDense` freezes to), the copies are gone and the chain
after it fuses as it does after the attention projections. The result is the same sum of
products: rstf's kernel chooses its order either way.

Pattern (float32, shapes known, or all but a dynamic batch: x's dimension 0):
- r1 = Reshape(x, [M, K]), x of rank 3 or more and shape [d..., K] with prod(d) = M (M
  unknown where d0 is: [?, K] holds x's elements in order whatever its first dimension);
- m = MatMul(r1, W) without transpose_a (transpose_b becomes adj_y), W of rank 2;
- r2 = Reshape(m, [d..., N]): x's leading axes again (an unknown d0 in the same place: the
  element count fixes it to x's);
- r1 and m have no reader but the next node, carry and take no control edges, and are not
  model outputs (`keep`).

r2 becomes the BatchMatMulV2 under its own name, so its readers and the model's signature
are unchanged; r1 and m are removed.

Contract: `merge_tensordots(graph_def, keep, shapes)` returns (a new GraphDef, names of the MatMuls
removed). The input GraphDef is not changed.
"""
from __future__ import annotations

import math

from .names import input_node, rebuilt, references, sole_data_reader, static_shape

DT_FLOAT = 1


def merge_tensordots(graph_def, keep, shapes: dict) -> tuple[object, list[str]]:
    """`shapes`: `graph.infer_shapes(graph_def)`."""
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    nodes = {n.name: n for n in gd.node}
    refs = references(gd)
    keep = set(keep)

    def shape(tensor: str) -> tuple | None:
        return static_shape(shapes, tensor, batch=True)

    def only_reader(name: str, reader) -> bool:
        return sole_data_reader(name, reader, nodes, refs, keep)

    removed, merged = set(), []
    for r2 in gd.node:
        if r2.op != "Reshape" or r2.attr["T"].type != DT_FLOAT:
            continue
        m = nodes.get(input_node(r2.input[0]))
        if m is None or m.op != "MatMul" or m.attr["transpose_a"].b:
            continue
        r1 = nodes.get(input_node(m.input[0]))
        if r1 is None or r1.op != "Reshape" or not (only_reader(r1.name, m)
                                                    and only_reader(m.name, r2)):
            continue
        x, w = r1.input[0], m.input[1]
        xs, ws, out = shape(x), shape(w), shape(r2.name)
        if (xs is None or ws is None or out is None or len(xs) < 3 or len(ws) != 2
                or None in ws):
            continue
        adj_y = m.attr["transpose_b"].b
        lead = xs[:-1]
        rows = None if lead[0] is None else math.prod(lead)
        if shape(r1.name) != (rows, xs[-1]) or out != lead + (ws[0 if adj_y else 1],):
            continue
        controls = [t for t in r2.input if t.startswith("^")]
        r2.op = "BatchMatMulV2"
        del r2.input[:]
        r2.input.extend([x, w] + controls)
        r2.attr.clear()
        r2.attr["T"].type = DT_FLOAT
        r2.attr["adj_x"].b = False
        r2.attr["adj_y"].b = adj_y
        removed |= {r1.name, m.name}
        merged.append(m.name)
    if not merged:
        return graph_def, []
    return rebuilt(gd, [n for n in gd.node if n.name not in removed], keep), merged
