"""Tensor and node names as GraphDefs spell them ('node:1', '^node'), and the op types that
only forward their input: shared by the loader (`graph`) and the passes it runs while
loading (`fold`, `passthrough`, `scalefold`, `tensordot`), which import them from here
rather than from `graph`; and the two steps those passes share: who reads a node, and a
GraphDef rebuilt from the nodes that are left.
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


def references(graph_def) -> dict[str, list[str]]:
    """{node name: the name of the node behind each input that names it (data or control),
    once per such input}. `graph_def` may also be a list of NodeDefs."""
    nodes = getattr(graph_def, "node", graph_def)
    refs: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for src in map(input_node, n.input):
            if src in refs:
                refs[src].append(n.name)
    return refs


def unread_nodes(nodes, starts, keep, within=None) -> set[str]:
    """The nodes from `starts` up (among `within`, when given) that nothing reads once the
    others so found are gone: a pass's dead arithmetic. Never a kept node or a
    Placeholder. `nodes`: a GraphDef's NodeDefs (or the GraphDef)."""
    nodes = list(getattr(nodes, "node", nodes))
    by_name = {n.name: n for n in nodes}
    readers = {name: len(r) for name, r in references(nodes).items()}
    gone, stack = set(), list(starts)
    while stack:
        name = stack.pop()
        n = by_name.get(name)
        if n is None or name in gone or readers[name] or name in keep or \
                n.op.startswith("Placeholder") or (within is not None and name not in within):
            continue
        gone.add(name)
        for t in n.input:
            if input_node(t) in readers:
                readers[input_node(t)] -= 1
                stack.append(input_node(t))
    return gone


def rebuilt(graph_def, nodes, keep) -> object:
    """A GraphDef of `graph_def`'s versions and function library with `nodes`, less the
    Consts nothing reads any more (a folded weight's old value, a removed Reshape's shape)
    unless `keep` names them."""
    used = {input_node(t) for n in nodes for t in n.input}
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in nodes if n.op != "Const" or n.name in used or n.name in keep)
    return out


def fresh_name(names, base: str) -> str:
    """`base`, or `base_1`, `base_2`, .. : the first that `names` does not hold."""
    name, k = base, 0
    while name in names:
        k += 1
        name = f"{base}_{k}"
    return name


def working_copy(graph_def, keep) -> tuple[object, set, dict]:
    """(a copy of `graph_def` for a pass to rewrite in place, `keep` as a set, the copy's
    nodes by name): the start every rewriting pass shares."""
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    return gd, set(keep), {n.name: n for n in gd.node}


def sole_data_reader(name: str, reader, nodes: dict, refs: dict, keep) -> bool:
    """`reader` is the one reference to `name`, through its output 0, as data; and `name`
    itself waits on nothing (no control input) and is not kept (a model output)."""
    if refs.get(name) != [reader.name] or name in keep:
        return False
    t = next(t for t in reader.input if input_node(t) == name)
    return (not t.startswith("^") and split_tensor(t)[1] == 0
            and not any(u.startswith("^") for u in nodes[name].input))


def static_shape(shapes: dict, tensor: str, batch: bool = False) -> tuple | None:
    """`tensor`'s shape in `shapes` (`graph.infer_shapes`' result) when fully known; with
    `batch`, also when dimension 0 alone is unknown (None): a dynamic batch's tensor."""
    name, k = split_tensor(tensor)
    outs = shapes.get(name, ([], []))[0]
    s = outs[k] if k < len(outs) else None
    if s is None or None in (s[1:] if batch else s):
        return None
    return tuple(s)
