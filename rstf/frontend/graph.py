"""Load a TensorFlow model into rstf's graph IR.

Contract: `load_model(path, input_shapes)` accepts a binary GraphDef (`.pb`), a text
GraphDef (`.pbtxt`) or a SavedModel directory (its `serving_default` signature, frozen), and
returns a `Graph`: the GraphDef with every node's output shapes and dtypes taken from
TensorFlow's own shape inference, and the values of constant tensors on demand.
Every failure the user can cause raises `RstfError` with a one-line message.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable

import numpy as np

from ..errors import RstfError
from .names import FORWARDING_OPS, input_node, split_tensor, tensor_name  # noqa: F401
from .shapes import infer_shapes, one_line
from .tfutil import tf

# Nodes that never count as computation in coverage figures.
PROTOBUF_LIMIT = 2**31  # bytes: protobuf cannot parse a message this large
TRIVIAL_OPS = {"Const", "Identity", "Placeholder", "PlaceholderWithDefault", "NoOp"}


@dataclasses.dataclass
class Node:
    """One GraphDef node with its inferred output signature.

    `inputs` are canonical tensor names ('n:i'); control inputs are kept apart, without '^'.
    `out_shapes[i]` is a tuple of ints, with None for an unknown dimension, or None when even
    the rank is unknown.
    """

    name: str
    op: str
    inputs: list[str]
    control_inputs: list[str]
    attr: object  # the NodeDef's attr map (protobuf)
    out_shapes: list[tuple | None]
    out_dtypes: list[np.dtype | None]
    node_def: object

    def shape(self, index: int = 0) -> tuple | None:
        return self.out_shapes[index]

    def is_static(self, index: int = 0) -> bool:
        s = self.out_shapes[index]
        return s is not None and all(d is not None for d in s)


class Graph:
    """The loaded model: nodes in GraphDef order, consumers, constants, inputs and outputs."""

    def __init__(self, graph_def, nodes: list[Node], outputs: list[str]):
        self.graph_def = graph_def
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.outputs = outputs  # node names whose output(s) the model returns
        self.consumers: dict[str, list[str]] = {n.name: [] for n in nodes}
        for n in nodes:
            for t in n.inputs:
                self.consumers[split_tensor(t)[0]].append(n.name)
            for c in n.control_inputs:
                self.consumers[c].append(n.name)
        self._const_cache: dict[str, np.ndarray] = {}
        self.folded: list[str] = []  # nodes evaluated at load time (rstf.frontend.fold)
        # pass-through nodes removed at load time (rstf.frontend.passthrough)
        self.bypassed: list[str] = []
        # Muls folded into conv filters as Grappler folds them (rstf.frontend.scalefold)
        self.tf_scales_folded: list[str] = []
        # divisions by constants now multiplies, as Grappler runs them (rstf.frontend.divfold)
        self.divisions_reciprocated: list[str] = []
        self.scales_folded: list[str] = []  # more, under --fold-scales on
        # roots of Add trees now summed in Grappler's order (rstf.frontend.addtrees)
        self.add_trees_reordered: list[str] = []
        # MatMuls now BatchMatMulV2s (rstf.frontend.tensordot)
        self.tensordots_merged: list[str] = []
        # nodes made constant or batch-free by rstf.frontend.batchshape
        self.batch_shapes_fixed: list[str] = []
        # Einsums now batched matmuls between Transposes and Reshapes (rstf.frontend.einsum)
        self.einsums_lowered: list[str] = []
        # Conv2DBackpropInputs now a Conv2D and a depth-to-space (rstf.frontend.deconv)
        self.transposed_convs_lowered: list[str] = []
        # nodes rewritten by folding Transposes into batched matmuls (rstf.frontend.transposes)
        self.transposes_folded: list[str] = []
        # pointwise ops moved ahead of a Reshape that splits the last axis (.reshapes)
        self.pointwise_hoisted: list[str] = []
        # {"inputs": {key: tensor}, "outputs": {key: tensor}}: the names users call it by
        self.signature: dict = {}

    @property
    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.op == "Placeholder"]

    def node_of(self, tensor: str) -> Node:
        return self.nodes[split_tensor(tensor)[0]]

    def tensor_shape(self, tensor: str) -> tuple | None:
        node, idx = split_tensor(tensor)
        return self.nodes[node].out_shapes[idx]

    def tensor_dtype(self, tensor: str):
        node, idx = split_tensor(tensor)
        return self.nodes[node].out_dtypes[idx]

    def const_source(self, tensor: str) -> str | None:
        """The Const node a tensor ultimately forwards, or None if it is not a constant."""
        node = self.node_of(tensor)
        seen = set()
        while node.op in FORWARDING_OPS and node.inputs and node.name not in seen:
            seen.add(node.name)
            node = self.node_of(node.inputs[0])
        return node.name if node.op == "Const" else None

    def is_const(self, tensor: str) -> bool:
        return self.const_source(tensor) is not None

    def const_value(self, tensor: str) -> np.ndarray:
        """The value of a constant tensor (Const, or Identity chains over one)."""
        src = self.const_source(tensor)
        if src is None:
            raise KeyError(f"{tensor} is not a constant")
        if src not in self._const_cache:
            self._const_cache[src] = tf.make_ndarray(self.nodes[src].attr["value"].tensor)
        return self._const_cache[src]

    def topo_order(self) -> list[str]:
        """Node names in a topological order (stable w.r.t. GraphDef order)."""
        indeg = {name: 0 for name in self.nodes}
        for n in self.nodes.values():
            for t in n.inputs:
                indeg[n.name] += 1
            indeg[n.name] += len(n.control_inputs)
        ready = [name for name, d in indeg.items() if d == 0]
        order = []
        position = {name: i for i, name in enumerate(self.nodes)}
        import heapq

        heap = [(position[n], n) for n in ready]
        heapq.heapify(heap)
        while heap:
            _, name = heapq.heappop(heap)
            order.append(name)
            for c in self.consumers[name]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, (position[c], c))
        if len(order) != len(self.nodes):
            raise RstfError("the graph has a cycle (control flow loops are not supported)")
        return order


# --------------------------------------------------------------------------- reading


def read_graph_def(path: str):
    """Read a binary GraphDef, a text GraphDef or a SavedModel directory into a GraphDef.

    Returns (graph_def, signature or None). A SavedModel's signature maps its input and
    output keys to tensor names; a bare GraphDef has none (its outputs are inferred later).
    """
    from google.protobuf import message, text_format

    if not os.path.exists(path):
        raise RstfError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        return _read_saved_model(path)
    gd = tf.compat.v1.GraphDef()
    if os.path.getsize(path) >= PROTOBUF_LIMIT:
        raise RstfError(f"{path}: {os.path.getsize(path) / 2**30:.1f} GiB is over protobuf's "
                        f"2 GiB limit for one GraphDef; export the model as a SavedModel, "
                        f"whose weights live in variable files")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RstfError(f"{path}: cannot read ({e.strerror})") from None
    if not data:
        raise RstfError(f"{path}: the file is empty, not a TensorFlow graph")
    if path.endswith(".pbtxt"):
        try:
            text_format.Parse(data.decode("utf-8"), gd)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            raise RstfError(f"{path}: not a text GraphDef ({one_line(e)})") from None
    else:
        try:
            gd.ParseFromString(data)
        except message.DecodeError as e:
            raise RstfError(f"{path}: not a binary GraphDef ({one_line(e)})") from None
    if not gd.node:
        raise RstfError(f"{path}: the graph has no nodes (is it a TensorFlow GraphDef?)")
    return gd, None


def _read_saved_model(path: str):
    """Freeze the `serving_default` signature of a SavedModel into a GraphDef."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        raise RstfError(f"{path}: a directory but not a SavedModel (no saved_model.pb)")
    try:
        loaded = tf.saved_model.load(path)
    except Exception as e:  # TF raises many types here; all mean "cannot load"
        raise RstfError(f"{path}: cannot load the SavedModel ({one_line(e)})") from None
    sig = loaded.signatures.get("serving_default")
    if sig is None:
        raise RstfError(f"{path}: the SavedModel has no 'serving_default' signature")
    frozen = convert_variables_to_constants_v2(sig)
    gd = frozen.graph.as_graph_def()
    # Flattening orders dict keys the way the frozen function orders its tensors.
    in_keys = sorted(sig.structured_input_signature[1])
    outs = sig.structured_outputs
    out_keys = (sorted(outs) if isinstance(outs, dict)
                else [f"output_{i}" for i in range(len(frozen.outputs))])
    signature = {
        "inputs": {k: t.name for k, t in zip(in_keys, frozen.inputs)},
        "outputs": {k: t.name for k, t in zip(out_keys, frozen.outputs)},
    }
    return gd, signature


# --------------------------------------------------------------------------- shapes


def parse_input_shapes(specs: Iterable[str]) -> dict[str, tuple]:
    """Parse `--input-shape NAME:d0,d1,...` values. d0 may be `?`: dimension 0 stays
    unknown (None), a dynamic batch, while the others are pinned (a BERT exported with
    [?, ?] ids, served at one sequence length)."""
    out = {}
    for spec in specs or ():
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise RstfError(f"--input-shape {spec!r}: expected NAME:d0,d1,...")
        parts = dims.split(",") if dims else []
        if "?" in parts[1:]:
            raise RstfError(f"--input-shape {spec!r}: only dimension 0 (the batch) may stay "
                            "unknown ('?')")
        try:
            shape = tuple(None if (k == 0 and d == "?") else int(d)
                          for k, d in enumerate(parts))
        except ValueError:
            raise RstfError(f"--input-shape {spec!r}: dimensions must be integers, or '?' "
                            "for dimension 0") from None
        if any(d is not None and d <= 0 for d in shape):
            raise RstfError(f"--input-shape {spec!r}: dimensions must be positive")
        out[name] = shape
    return out


def _pin_placeholders(gd, input_shapes: dict[str, tuple[int, ...]]) -> None:
    """Write pinned shapes into the Placeholder `shape` attrs (in place)."""
    by_name = {n.name: n for n in gd.node}
    for name, shape in input_shapes.items():
        node = by_name.get(name)
        if node is None or node.op != "Placeholder":
            known = ", ".join(n.name for n in gd.node if n.op == "Placeholder") or "none"
            raise RstfError(f"--input-shape: no Placeholder named {name!r} (inputs: {known})")
        old = tf.TensorShape(node.attr["shape"].shape)
        new = tf.TensorShape(shape)
        if not old.is_compatible_with(new):
            raise RstfError(f"--input-shape {name}: {list(shape)} is incompatible with the "
                            f"graph's {old}")
        node.attr["shape"].shape.CopyFrom(new.as_proto())


def infer_outputs(gd) -> list[str]:
    """A bare GraphDef names no outputs: take the sinks that compute something."""
    used = {split_tensor(t.lstrip("^"))[0] for n in gd.node for t in n.input}
    return [n.name for n in gd.node
            if n.name not in used and n.op not in ("Const", "NoOp", "Placeholder")]


def load_model(path: str, input_shapes: dict[str, tuple[int, ...]] | None = None,
               outputs: list[str] | None = None, fold: bool = False,
               fold_scales: bool = False, batch_pins: dict | None = None) -> Graph:
    """Load a model file or directory into a `Graph` with static shapes where TF knows them.

    With `fold`, the loader's rewrites run in this order (each lists what it did in an
    attribute of the Graph):
    - pass-through nodes are bypassed (rstf.frontend.passthrough; `bypassed`);
    - shape arithmetic over a dynamic batch becomes constant (rstf.frontend.batchshape;
      `batch_shapes_fixed`);
    - nodes computable from constants alone are evaluated (rstf.frontend.fold; `folded`);
    - a float division by a constant becomes a multiply by its reciprocal, as Grappler runs
      it (rstf.frontend.divfold; `divisions_reciprocated`);
    - a constant multiply after a Conv2D goes into its filter where TensorFlow's Grappler
      puts it (rstf.frontend.scalefold, rule "tensorflow"; `tf_scales_folded`);
    - trees of additions are summed in the order Grappler's arithmetic optimizer sums them
      (rstf.frontend.addtrees; `add_trees_reordered`);
    - each two-operand Einsum becomes a batched matmul between Transposes and Reshapes
      (rstf.frontend.einsum; `einsums_lowered`);
    - each transposed convolution becomes a Conv2D and a depth-to-space shuffle
      (rstf.frontend.deconv; `transposed_convs_lowered`);
    - each Dense over a 3-D input (Reshape, MatMul, Reshape) becomes one BatchMatMulV2
      (rstf.frontend.tensordot; `tensordots_merged`, the MatMuls);
    - pointwise ops with a constant operand move ahead of a Reshape that splits the last
      axis (rstf.frontend.reshapes; `pointwise_hoisted`);
    - Transposes around batched matmuls go into their adjoint flags
      (rstf.frontend.transposes; `transposes_folded`).
    With `fold_scales` too, the other per-channel multiplies after a contraction go into its
    weights (rstf.frontend.scalefold, rule "all"; `scales_folded`, the Muls removed).

    `batch_pins` pins more input shapes after the dynamic batch's shape arithmetic is made
    constant: the batch-1 graph of a dynamic-batch model (rstf/cgen/batch.py) is so
    rewritten exactly as the dynamic one, node for node.
    """
    gd, signature = read_graph_def(path)
    # Grappler's symbolic shapes (`addtrees`) are those of the graph TF will run: the one
    # read (the pins below only set Placeholder shapes, which Grappler does not trust).
    as_read = gd
    if input_shapes:
        _pin_placeholders(gd, input_shapes)
    sig_outputs = None
    if signature:
        sig_outputs = list(dict.fromkeys(split_tensor(t)[0]
                                         for t in signature["outputs"].values()))
    outs = outputs or sig_outputs or infer_outputs(gd)
    names = {n.name for n in gd.node}
    for o in outs:
        if o not in names:
            raise RstfError(f"output {o!r} is not a node of the graph")
    folded, bypassed, merged, transposes, hoisted, batch_shapes, einsums, deconvs = (
        [] for _ in range(8))
    if fold:
        from .batchshape import constant_batch_shapes
        from .deconv import lower_transposed_convs
        from .einsum import lower_einsums
        from .fold import fold_constants
        from .passthrough import bypass
        from .tensordot import merge_tensordots
        from .reshapes import candidates as hoist_candidates, hoist_pointwise
        from .transposes import fold_transposes

        infer_shapes(gd)  # a graph TF cannot import fails here, with its one-line message
        gd, bypassed = bypass(gd, outs)
        gd, batch_shapes = constant_batch_shapes(gd, outs)
    if batch_pins:
        _pin_placeholders(gd, batch_pins)
    tf_scales, add_trees, divisions = [], [], []
    if fold:
        from .addtrees import grappler_shapes, has_add_trees, sum_in_tf_order
        from .divfold import reciprocal_divisions
        from .scalefold import fold_scales as fold_scale_muls

        gd, folded = fold_constants(gd, outs)
        gd, divisions = reciprocal_divisions(gd)
        # Grappler's symbolic shapes, which its rewrites consult (computed once, if needed;
        # folding a Mul into a conv makes no addition read another)
        trees = has_add_trees(gd)
        tf_shapes = (grappler_shapes(as_read, outs)
                     if trees or any(n.op == "Conv2D" for n in gd.node) else None)
        gd, tf_scales = fold_scale_muls(gd, outs, rule="tensorflow", shapes=tf_shapes)
        if trees:
            gd, add_trees = sum_in_tf_order(gd, outs, tf_shapes)
        if any(n.op == "Einsum" for n in gd.node):
            gd, einsums = lower_einsums(gd, outs, infer_shapes(gd))
        if any(n.op == "Conv2DBackpropInput" for n in gd.node):
            gd, deconvs = lower_transposed_convs(gd, outs, infer_shapes(gd))
        if any(n.op == "MatMul" for n in gd.node):
            gd, merged = merge_tensordots(gd, outs, infer_shapes(gd))
        if hoist_candidates(gd):
            gd, hoisted = hoist_pointwise(gd, outs, infer_shapes(gd))
        gd, transposes = fold_transposes(gd, outs)
    scales = []
    if fold and fold_scales:
        gd, scales = fold_scale_muls(gd, outs, rule="all")
    graph = build_graph(gd, outs)
    graph.folded = folded
    graph.bypassed = bypassed
    graph.tf_scales_folded = tf_scales
    graph.divisions_reciprocated = divisions
    graph.add_trees_reordered = add_trees
    graph.scales_folded = scales
    graph.tensordots_merged = merged
    graph.transposes_folded = transposes
    graph.pointwise_hoisted = hoisted
    graph.batch_shapes_fixed = batch_shapes
    graph.einsums_lowered = einsums
    graph.transposed_convs_lowered = deconvs
    if signature is None or outputs:
        signature = default_signature(graph)
    graph.signature = signature
    return graph


def default_signature(graph: Graph) -> dict:
    """Signature keys of a bare GraphDef: Placeholder names, and output node names (with
    '_<i>' for a node's further outputs)."""
    outs = {}
    for o in graph.outputs:
        for i in range(len(graph.nodes[o].out_shapes)):
            outs[o if i == 0 else f"{o}_{i}"] = tensor_name(o, i)
    return {"inputs": {p.name: tensor_name(p.name, 0) for p in graph.placeholders},
            "outputs": outs}


def build_graph(gd, outputs: list[str]) -> Graph:
    """The IR of a GraphDef: nodes with TF-inferred output shapes and dtypes."""
    info = infer_shapes(gd)
    nodes = []
    for nd in gd.node:
        data_inputs, control = [], []
        for t in nd.input:
            if t.startswith("^"):
                control.append(t[1:])
            else:
                data_inputs.append(tensor_name(*split_tensor(t)))
        shapes, dtypes = info.get(nd.name, ([], []))
        nodes.append(Node(nd.name, nd.op, data_inputs, control, nd.attr, shapes, dtypes, nd))
    return Graph(gd, nodes, outputs)
