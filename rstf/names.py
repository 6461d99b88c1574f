"""Tensor and node names as GraphDefs spell them ('node:1', '^node'), and the op types that
only forward their input: shared by the loader (`graph`) and the passes it runs while
loading (`fold`, `passthrough`, `scalefold`), which import them from here rather than
from `graph`.
"""
from __future__ import annotations


# Ops that only forward a tensor: a chain of them over a Const is itself a constant.
FORWARDING_OPS = {"Identity", "StopGradient", "Snapshot"}


def split_tensor(name: str) -> tuple[str, int]:
    """'node:1' -> ('node', 1); 'node' -> ('node', 0). Control inputs ('^x') are not tensors."""
    if name.startswith("^"):
        raise ValueError(f"control input {name!r} is not a tensor")
    node, sep, idx = name.rpartition(":")
    if sep and idx.isdigit():
        return node, int(idx)
    return name, 0


def input_node(ref: str) -> str:
    """The node a NodeDef input names: 'node:1', 'node' and the control input '^node' all
    name 'node'."""
    return split_tensor(ref.lstrip("^"))[0]


def tensor_name(node: str, index: int) -> str:
    """Canonical tensor name: always 'node:index'."""
    return f"{node}:{index}"
