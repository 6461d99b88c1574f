"""Building the nodes that replace one node of a GraphDef (rstf.frontend.einsum,
rstf.frontend.deconv): fresh names under the replaced node's, its device, float32 `T`, and
the last node made taking the replaced node's place and name, so that its readers and the
model's signature are unchanged."""
from __future__ import annotations

import numpy as np

from .names import fresh_name
from .tfutil import tf

DT_FLOAT = 1


class Lowering:
    """The nodes of one node's lowering; `finish` puts the last one in the node's place."""

    def __init__(self, e, nodes: dict):
        self.e, self.nodes, self.new = e, nodes, []

    def node(self, op: str, suffix: str, inputs: list[str], t: bool = True):
        n = tf.compat.v1.NodeDef(name=fresh_name(self.nodes, f"{self.e.name}/{suffix}"), op=op)
        n.input.extend(inputs)
        n.device = self.e.device
        if t:
            n.attr["T"].type = DT_FLOAT
        self.nodes[n.name] = n
        self.new.append(n)
        return n

    def const(self, suffix: str, value: np.ndarray) -> str:
        c = self.node("Const", suffix, [], t=False)
        c.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
        c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        return c.name

    def transpose(self, tensor: str, perm: list[int], suffix: str) -> str:
        if perm == sorted(perm):
            return tensor
        n = self.node("Transpose", suffix, [tensor, self.const(f"{suffix}/perm",
                                                               np.asarray(perm, np.int32))])
        n.attr["Tperm"].type = tf.int32.as_datatype_enum
        return n.name

    def reshape(self, tensor: str, dims: list, suffix: str) -> str:
        """A Reshape to `dims`, None: -1 (the dynamic batch)."""
        n = self.node("Reshape", suffix, [tensor, self.const(
            f"{suffix}/shape", np.asarray([-1 if d is None else d for d in dims], np.int32))])
        n.attr["Tshape"].type = tf.int32.as_datatype_enum
        return n.name

    def finish(self) -> list:
        """The new nodes, the last one now under the replaced node's name (and NodeDef)."""
        name = self.e.name
        last = self.new.pop()
        del self.nodes[last.name]
        self.e.Clear()
        self.e.CopyFrom(last)
        self.e.name = name
        return self.new + [self.e]
