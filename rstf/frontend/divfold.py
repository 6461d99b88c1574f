"""Divisions by a constant as multiplies by its reciprocal, as TensorFlow's Grappler runs them.

Grappler's constant folding (`ReduceDivToReciprocalMul`) rewrites a floating-point `Div`
or `RealDiv` whose divisor is a constant into `Mul(x, Reciprocal(c))`, and folds the
reciprocal with TensorFlow's own Reciprocal kernel. Every session does this, the fetched
nodes included (measured: a graph's output `x / 6` comes back as `x * (1 / 6)`), so TF's
bits for a Keras hard-swish's `relu6(x + 3) * x / 6`, or a GELU's `x / sqrt(2)`, are those of
the multiply. `x / c` and `x * (1 / c)` differ in the last bit for some x.

The reciprocal is computed by TensorFlow's Reciprocal itself (eagerly), as Grappler folds
it: for a constant of 8 elements or more, Eigen's vector path (the processor's estimate
refined), which differs from `1 / c` in some elements.

Contract: `reciprocal_divisions(graph_def)` returns (a new GraphDef, names of the divisions
rewritten). Each rewritten node keeps its name, becomes a Mul, and reads a new Const
`<node>/rstf_reciprocal`; float32 and float64 only. The input GraphDef is not changed.
Consts left without readers are dropped.
"""
from __future__ import annotations

import numpy as np

from .names import fresh_name, rebuilt, split_tensor
from .tfutil import tf

DIVISIONS = {"Div", "RealDiv"}
FLOATS = {tf.float32.as_datatype_enum, tf.float64.as_datatype_enum}


def reciprocal_divisions(graph_def) -> tuple[object, list[str]]:
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    nodes = {n.name: n for n in gd.node}
    taken, new, done = set(nodes), [], []
    for n in gd.node:
        if n.op not in DIVISIONS or len(n.input) < 2 or n.attr["T"].type not in FLOATS:
            continue
        name, idx = split_tensor(n.input[1])
        c = nodes.get(name)
        if c is None or c.op != "Const" or idx != 0:
            continue
        value = tf.make_ndarray(c.attr["value"].tensor)
        recip = tf.math.reciprocal(tf.constant(value)).numpy()
        r = tf.compat.v1.NodeDef(name=fresh_name(taken, f"{n.name}/rstf_reciprocal"),
                                 op="Const", device=c.device)
        taken.add(r.name)
        r.attr["dtype"].type = c.attr["dtype"].type
        r.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(recip, value.dtype)))
        new.append(r)
        n.op = "Mul"
        n.input[1] = r.name
        done.append(n.name)
    if not done:
        return graph_def, []
    return rebuilt(gd, [*gd.node, *new], []), done
