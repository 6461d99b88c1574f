"""Zero padding absorbed into the convolutions that read it.

Keras writes a stride-2 "same" convolution as `ZeroPadding2D` then a VALID convolution
(MobileNet v2's four downsampling depthwise convolutions, ResNet's first layer), so the
generated C would copy the whole activation into a padded buffer, zero its border, and
let the convolution read the copy. When every reader of such a Pad is a convolution of
this subgraph that takes it as its data input, the Pad is not emitted at all: each reader
becomes the same convolution of the Pad's input with EXPLICIT padding, whose window
guards skip the padded taps. A skipped tap is a `+= 0 * w` the copy would have added, so
results are those of the copy (bar the sign of an all-zero sum, and a NaN or infinite
weight meeting the padding).

Contract: `absorb_pads(graph, nodes)` returns ({absorbed Pad names}, {reader name: the
rewritten reader Node}); the caller emits the readers as rewritten and skips the Pads.
The graph itself is not changed.
"""
from __future__ import annotations

import dataclasses

from .graph import Graph, Node

# The window ops whose generators take EXPLICIT padding of H and W (opgen.window).
READERS = {"Conv2D", "DepthwiseConv2dNative"}


def _spatial_pads(pad: Node, graph: Graph) -> list[int] | None:
    """[top, bottom, left, right] of a zero Pad of an NHWC tensor along H and W only."""
    if pad.op not in ("Pad", "PadV2") or not graph.is_const(pad.inputs[1]):
        return None
    if pad.op == "PadV2":
        if len(pad.inputs) < 3 or not graph.is_const(pad.inputs[2]):
            return None
        value = graph.const_value(pad.inputs[2])
        if value.size != 1 or float(value.reshape(())) != 0.0:
            return None
    pads = graph.const_value(pad.inputs[1])
    if pads.shape != (4, 2) or pads[0].any() or pads[3].any() or (pads < 0).any():
        return None
    return [int(p) for p in pads[1:3].reshape(-1)]


def _reader_ok(reader: Node, pad_tensor: str) -> bool:
    """A convolution reading `pad_tensor` as its data input only, NHWC, VALID or EXPLICIT."""
    if reader.op not in READERS or reader.inputs[0] != pad_tensor:
        return False
    if any(t == pad_tensor for t in reader.inputs[1:]) or reader.control_inputs:
        return False
    fmt = reader.attr["data_format"].s if "data_format" in reader.attr else b"NHWC"
    padding = reader.attr["padding"].s if "padding" in reader.attr else b"VALID"
    return fmt == b"NHWC" and padding in (b"VALID", b"EXPLICIT")


def _rewritten(reader: Node, source: str, pads: list[int]) -> Node:
    """`reader` reading `source` with `pads` ([top, bottom, left, right]) added to its own."""
    nd = type(reader.node_def)()
    nd.CopyFrom(reader.node_def)
    old = list(nd.attr["explicit_paddings"].list.i) if nd.attr["padding"].s == b"EXPLICIT" \
        else [0] * 8
    new = [0, 0, old[2] + pads[0], old[3] + pads[1], old[4] + pads[2], old[5] + pads[3], 0, 0]
    nd.attr["padding"].s = b"EXPLICIT"
    del nd.attr["explicit_paddings"].list.i[:]
    nd.attr["explicit_paddings"].list.i.extend(new)
    nd.input[0] = source
    return dataclasses.replace(reader, inputs=[source, *reader.inputs[1:]], attr=nd.attr,
                               node_def=nd)


def absorb_pads(graph: Graph, nodes: list[str]) -> tuple[set[str], dict[str, Node]]:
    members = set(nodes)
    absorbed: set[str] = set()
    rewritten: dict[str, Node] = {}
    for name in nodes:
        pad = graph.nodes[name]
        pads = _spatial_pads(pad, graph)
        if pads is None or name in graph.outputs:
            continue
        readers = graph.consumers[name]
        tensor = f"{name}:0"
        if not readers or any(r not in members or not _reader_ok(graph.nodes[r], tensor)
                              for r in readers):
            continue
        absorbed.add(name)
        for r in readers:
            rewritten[r] = _rewritten(graph.nodes[r], pad.inputs[0], pads)
    return absorbed, rewritten
