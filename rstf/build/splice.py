"""Splice custom ops into the GraphDef (rstream-tf.txt Fig. 1, last step).

Every selected subgraph is replaced by one node running its custom op. Every other node is
kept as it was, with inputs that read a replaced node rewired to the custom op's outputs.
When a replaced node is one of the model's outputs, an Identity (IdentityN for several
outputs) under its original name keeps it fetchable: users' names never change.

The op's frozen weights (`Slot.weight`: constant inputs) are not inputs of its node but
tensor attributes `w0`, `w1`, ... in input order, holding the value as the op's C reads it:
as it is, or re-laid out for the kernels (`SubgraphCode.prepacked`, panel layout or
Winograd's transformed weights, `prepack.pack`). The kernel reads and checks them once when
TensorFlow builds it (rstf/runtime/rstf_kernel.h, LoadWeight), where a Const input would be
a node run and an input checked on every call. The original Const (and the Identity nodes
forwarding it) is dropped when nothing else reads it, so the graph does not carry the
weight twice.
"""
from __future__ import annotations

from ..cgen.codegen import SubgraphCode
from ..frontend.graph import Graph, split_tensor
from ..frontend.tfutil import tf


def mark_weights(graph: Graph, subgraphs: list[SubgraphCode]) -> None:
    """Set `Slot.weight` on every subgraph input that is a constant of `graph`: it becomes
    an attribute of the op (the wrapper and the splice both follow the flag)."""
    for sg in subgraphs:
        for s in sg.inputs:
            s.weight = graph.is_const(s.tensor)


def _tensor_ref(node: str, index: int) -> str:
    return node if index == 0 else f"{node}:{index}"


def custom_node_names(graph: Graph, count: int) -> list[str]:
    """'rstf/subgraph_<i>', suffixed if the user's graph already has such a name."""
    taken, names = set(graph.nodes), []
    for i in range(count):
        name, k = f"rstf/subgraph_{i}", 1
        while name in taken:
            name, k = f"rstf/subgraph_{i}_{k}", k + 1
        taken.add(name)
        names.append(name)
    return names


def splice(graph: Graph, subgraphs: list[SubgraphCode], op_types: list[str],
           node_names: list[str]):
    """A new GraphDef with each subgraph replaced by a node of its custom op type."""
    owner: dict[str, int] = {n: i for i, sg in enumerate(subgraphs) for n in sg.nodes}
    produced: dict[str, str] = {}  # member tensor read outside -> custom op output
    for i, sg in enumerate(subgraphs):
        for j, slot in enumerate(sg.outputs):
            produced[slot.tensor] = _tensor_ref(node_names[i], j)

    def remap(ref: str) -> str:
        if ref.startswith("^"):
            src = ref[1:]
            return f"^{node_names[owner[src]]}" if src in owner else ref
        node, idx = split_tensor(ref)
        if node in owner:
            return produced[f"{node}:{idx}"]
        return _tensor_ref(node, idx)

    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph.graph_def.versions)
    out.library.CopyFrom(graph.graph_def.library)
    emitted = set()
    for nd in graph.graph_def.node:
        i = owner.get(nd.name)
        if i is None:
            new = out.node.add()
            new.CopyFrom(nd)
            del new.input[:]
            # Only control inputs may repeat once remapped (two members of one op); a data
            # input read twice (concat(x, x), x * x) is two operands and must stay so.
            refs = [remap(r) for r in nd.input]
            new.input.extend([r for r in refs if not r.startswith("^")]
                             + _dedup(r for r in refs if r.startswith("^")))
            continue
        if i not in emitted:
            emitted.add(i)
            _add_custom_node(out, graph, subgraphs[i], op_types[i], node_names[i], owner,
                             remap)
        if nd.name in graph.outputs:
            _add_output_alias(out, graph, nd.name, remap)
    # The weights, now the ops' attributes, and the constants a covered node took as
    # arguments (Pad's paddings, Mean's axes): the generated C has their values built in.
    folded = [t for n in owner for t in graph.nodes[n].inputs if graph.is_const(t)]
    _drop_unread_weights(out, graph, [s.tensor for sg in subgraphs for s in sg.inputs
                                      if s.weight] + folded)
    return out


def weight_value(graph: Graph, slot, spec=None):
    """The constant `slot` as the op's C reads it: re-laid out by `spec` when prepacked (a
    panel width, or a Winograd spec: `winograd.spec`), else as it is."""
    value = graph.const_value(slot.tensor)
    if spec is None:
        return value
    from ..poly.prepack import pack

    return pack(value, spec)


def set_weight_attrs(node, graph: Graph, slots, prepacked: dict) -> None:
    """The op node's attributes w0, w1, ...: its weight slots' values, in input order."""
    for k, s in enumerate(x for x in slots if x.weight):
        node.attr[f"w{k}"].tensor.CopyFrom(
            tf.make_tensor_proto(weight_value(graph, s, prepacked.get(s.cname))))


def _drop_unread_weights(out, graph: Graph, tensors: list[str]) -> None:
    """Remove the Const nodes behind `tensors`, and the forwarding nodes between, that no
    node of `out` reads any more and that are not model outputs. `tensors` must be
    constants: the walk stops at the first Const."""
    candidates = set()
    for t in tensors:
        node = graph.node_of(t)
        while node.name not in candidates:
            candidates.add(node.name)
            if node.op == "Const" or not node.inputs:
                break
            node = graph.node_of(node.inputs[0])
    while True:
        read = {split_tensor(r.lstrip("^"))[0] for nd in out.node for r in nd.input}
        dead = [i for i, nd in enumerate(out.node) if nd.name in candidates
                and nd.name not in read and nd.name not in graph.outputs]
        if not dead:
            return
        for i in reversed(dead):
            del out.node[i]


def _dedup(refs):
    seen, result = set(), []
    for r in refs:
        if r not in seen:
            seen.add(r)
            result.append(r)
    return result


def _add_custom_node(out, graph: Graph, sg: SubgraphCode, op_type: str, name: str, owner,
                     remap) -> None:
    node = out.node.add()
    node.name = name
    node.op = op_type
    set_weight_attrs(node, graph, sg.inputs, sg.prepacked)
    node.input.extend(remap(s.tensor) for s in sg.inputs if not s.weight)
    members = set(sg.nodes)
    controls = []
    for m in sg.nodes:
        for c in graph.nodes[m].control_inputs:
            if c not in members:
                controls.append(remap("^" + c))
    # Inputs the generated code does not read (a Reshape's shape, say) may still order
    # execution in the original graph; keep them as control inputs so nothing is lost.
    for m in sg.nodes:
        for t in graph.nodes[m].inputs:
            src = split_tensor(t)[0]
            if src not in members and t not in {s.tensor for s in sg.inputs}:
                if not graph.is_const(t):
                    controls.append(remap("^" + src))
    node.input.extend(_dedup(c for c in controls if c != f"^{name}"))


def _add_output_alias(out, graph: Graph, name: str, remap) -> None:
    n = graph.nodes[name]
    refs = [remap(f"{name}:{i}") for i in range(len(n.out_shapes))]
    alias = out.node.add()
    alias.name = name
    if len(refs) == 1:
        alias.op = "Identity"
        alias.attr["T"].type = tf.as_dtype(n.out_dtypes[0]).as_datatype_enum
    else:
        alias.op = "IdentityN"
        alias.attr["T"].list.type.extend(tf.as_dtype(d).as_datatype_enum for d in n.out_dtypes)
    alias.input.extend(refs)
