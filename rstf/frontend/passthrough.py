"""Pass-through nodes bypassed: readers of an Identity (or IdentityN, StopGradient, Snapshot)
read what it forwards.

Keras wraps activations whose gradient it defines itself (EfficientNet's swish,
`tf.custom_gradient`) in an `IdentityN`, and frozen graphs keep `Identity` nodes between
layers. In inference they only forward a tensor, but as nodes they split fusible chains and,
generated as code, each is a full copy of its tensor. Bypassed here, before code is
generated, a conv's epilogue reaches the activation after it, and the copies are gone.

Rules:
- Output k of IdentityN is its input k; the others' output 0 is their input 0.
- Only data inputs are rewired. A node that carries control inputs, or that is read
  through a control edge (`^name`), still orders something: it is kept as it is, and its
  readers are not rewired.
- Chains resolve to their first non-forwarding source.
- A bypassed node that is one of the model's outputs (`keep`) stays, so the model's
  signature still names it; the others are removed once nothing reads them.

Contract: `bypass(graph_def, keep)` returns (a new GraphDef, names of the removed nodes).
The input GraphDef is not changed.
"""
from __future__ import annotations

from .names import FORWARDING_OPS, split_tensor

PASS_THROUGH = FORWARDING_OPS | {"IdentityN"}


def bypass(graph_def, keep) -> tuple[object, list[str]]:
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    nodes = {n.name: n for n in gd.node}
    ordering = {t[1:] for n in gd.node for t in n.input if t.startswith("^")}

    def forwards(n) -> bool:
        return (n.op in PASS_THROUGH and n.name not in ordering
                and not any(t.startswith("^") for t in n.input))

    def source(tensor: str, depth: int = 0) -> str:
        """The tensor a data input ultimately reads, through forwarding nodes."""
        name, k = split_tensor(tensor)
        n = nodes.get(name)
        if n is None or not forwards(n) or depth > len(nodes):
            return tensor
        index = k if n.op == "IdentityN" else 0
        if index >= len(n.input):
            return tensor
        return source(n.input[index], depth + 1)

    for n in gd.node:
        for i, t in enumerate(n.input):
            if not t.startswith("^"):
                s = source(t)
                if s != t:
                    n.input[i] = s
    read = {split_tensor(t.lstrip("^"))[0] for n in gd.node for t in n.input}
    keep = set(keep)
    removed = [n.name for n in gd.node
               if forwards(n) and n.name not in keep and n.name not in read]
    if removed:
        gone = set(removed)
        kept = [n for n in gd.node if n.name not in gone]
        del gd.node[:]
        gd.node.extend(kept)
    return gd, removed
