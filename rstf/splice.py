"""Splice custom ops into the GraphDef (rstream-tf.txt Fig. 1, last step).

Every selected subgraph is replaced by one node running its custom op. Every other node is
kept as it was, with inputs that read a replaced node rewired to the custom op's outputs.
When a replaced node is one of the model's outputs, an Identity (IdentityN for several
outputs) under its original name keeps it fetchable: users' names never change.
"""
from __future__ import annotations

from .codegen import SubgraphCode
from .graph import Graph, split_tensor
from .tfutil import tf


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
            new.input.extend(_dedup(remap(r) for r in nd.input))
            continue
        if i not in emitted:
            emitted.add(i)
            _add_custom_node(out, graph, subgraphs[i], op_types[i], node_names[i], owner,
                             node_names, remap)
        if nd.name in graph.outputs:
            _add_output_alias(out, graph, nd.name, remap)
    return out


def _dedup(refs):
    seen, result = set(), []
    for r in refs:
        if r not in seen:
            seen.add(r)
            result.append(r)
    return result


def _add_custom_node(out, graph: Graph, sg: SubgraphCode, op_type: str, name: str, owner,
                     node_names, remap) -> None:
    node = out.node.add()
    node.name = name
    node.op = op_type
    node.input.extend(remap(s.tensor) for s in sg.inputs)
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
