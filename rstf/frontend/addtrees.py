"""Trees of additions summed in the order TensorFlow sums them.

Grappler's arithmetic optimizer (`AddOpsRewriteStage`) collapses every tree of Add, AddV2
and AddN nodes into one sum per operand shape: the operands of the same symbolic shape go
into an AddN, in the tree's left-to-right order, and those sums, smallest shape first, are
then added in turn. A residual block's `(conv * s + t) + x` therefore runs as
`(conv' + x) + t` in every TensorFlow session, and float addition is not associative:
summing it as written leaves a last-bit difference in a third of the block's outputs,
which compounds through the network. This pass rewrites such trees into AddV2 chains that
sum in TensorFlow's order (TF's AddN adds its inputs one after another, left to right, so
a chain of AddV2 gives its bits).

Which trees TensorFlow rewrites depends on its symbolic shapes, which `grappler_shapes`
takes from Grappler itself (a fed input's shape is unknown to it, so a tree whose operands
only match through the input does not change). The rules, after `AddOpsRewriteStage`:
- a root is an Add, AddV2 or AddN, no model output, with no control edge in or out, whose
  shape is symbolically defined and which all its operands broadcast to;
- it absorbs each operand that is such a node with exactly one reader and operands that
  broadcast to its own shape, recursively; the rest are the tree's leaves, in order;
- nothing changes unless it absorbed at least one node;
- with three or more leaf shapes the sizes must order them one way only (TensorFlow's
  order among equal or incomparable sizes depends on a hash table); such a tree is left
  as written.
Roots are visited from the last node of the GraphDef to the first, as Grappler does, and a
node absorbed into one tree is no root of another.

Contract: `sum_in_tf_order(graph_def, keep, shapes)` returns (a new GraphDef, the roots
rewritten). The root keeps its name (the tree's last addition), so readers and outputs
still find it; the other additions are new nodes `<root>/rstf_sum_<i>`; absorbed nodes no
longer read are dropped. Only float trees change (an integer sum is the same in any order).
"""
from __future__ import annotations

import functools

from .names import fresh_name, input_node, rebuilt, split_tensor, working_copy
from .tfutil import tf

ADD_OPS = {"Add", "AddV2", "AddN"}
FLOAT_TYPES = {tf.float16.as_datatype_enum, tf.bfloat16.as_datatype_enum,
               tf.float32.as_datatype_enum, tf.float64.as_datatype_enum}


def grappler_shapes(graph_def, fetches: list[str]) -> dict[str, tuple | None]:
    """{'node:i': symbolic shape} as Grappler's static shape inference sees `graph_def`
    with `fetches` fetched: a tuple of dimensions, a positive size where known, the same
    negative number for dimensions known to be equal, -1 for an unknown one; None for an
    unknown rank."""
    from tensorflow.python.grappler import item as grappler_item

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(_without_weights(graph_def), name="")
        for f in fetches:
            g.add_to_collection("train_op", g.get_operation_by_name(f))
        meta = tf.compat.v1.train.export_meta_graph(graph=g)
    props = grappler_item.Item(meta).GetOpProperties()
    return {f"{name}:{i}": None if p.shape.unknown_rank else tuple(d.size for d in p.shape.dim)
            for name, outs in props.items() for i, p in enumerate(outs)}


def _without_weights(graph_def):
    """`graph_def` with every large Const's values dropped (its dtype and shape kept):
    shape inference reads only small constants, and a model's weights would make the
    metagraph Grappler needs cost seconds to build."""
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        m = out.node.add()
        if n.op == "Const" and n.attr["value"].tensor.ByteSize() > 4096:
            m.name, m.op, m.device = n.name, n.op, n.device
            m.input.extend(n.input)
            m.attr["dtype"].CopyFrom(n.attr["dtype"])
            t = m.attr["value"].tensor
            t.dtype = n.attr["value"].tensor.dtype
            t.tensor_shape.CopyFrom(n.attr["value"].tensor.tensor_shape)
        else:
            m.CopyFrom(n)
    return out


def has_add_trees(graph_def) -> bool:
    """Whether some addition reads another (the cheap test before `grappler_shapes`)."""
    adds = {n.name for n in graph_def.node if n.op in ADD_OPS}
    return any(input_node(t) in adds for n in graph_def.node if n.op in ADD_OPS
               for t in n.input)


def _defined(s) -> bool:
    return s is not None and all(d != -1 for d in s)


def _broadcastable(a, b) -> bool:
    """Grappler's ShapesBroadcastable: symbolic dimensions compare as numbers."""
    if not (_defined(a) and _defined(b)):
        return False
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _smaller(a, b) -> bool:
    """Grappler's CompareSymbolicallyShapedTensorSizes(a, b): a's size is known smaller."""
    def split(s):
        size, unknown = 1, {}
        for d in s:
            if d > 0:
                size *= d
            else:
                unknown[d] = unknown.get(d, 0) + 1
        return size, unknown
    (sa, ua), (sb, ub) = split(a), split(b)
    for d in set(ua) | set(ub):
        common = min(ua.get(d, 0), ub.get(d, 0))
        ua[d], ub[d] = ua.get(d, 0) - common, ub.get(d, 0) - common
    left, right = sum(ua.values()), sum(ub.values())
    if left == 0 and right == 0:
        return sa < sb
    return sa <= sb and left == 0 and right > 0


def _ordered(shapes: list) -> list | None:
    """The leaf shapes smallest first, or None where TensorFlow's order is not determined
    by the sizes (three or more shapes, two of them equal or incomparable; with two, either
    order gives the same sum)."""
    cmp = lambda a, b: -1 if _smaller(a, b) else 1 if _smaller(b, a) else 0  # noqa: E731
    if len(shapes) > 2 and any(cmp(a, b) == 0 for i, a in enumerate(shapes)
                               for b in shapes[i + 1:]):
        return None
    return sorted(shapes, key=functools.cmp_to_key(cmp))


def sum_in_tf_order(graph_def, keep: list[str], shapes: dict):
    gd, keep, nodes = working_copy(graph_def, keep)
    readers: dict[str, list[tuple[str, bool]]] = {n.name: [] for n in gd.node}
    for n in gd.node:
        for t in n.input:
            if input_node(t) in readers:
                readers[input_node(t)].append((n.name, t.startswith("^")))

    def data_inputs(n):
        return [t for t in n.input if not t.startswith("^")]

    def shape(t):
        name, i = split_tensor(t)
        return shapes.get(f"{name}:{i}")

    def candidate(n) -> bool:
        """CanOptimize: an addition no one keeps, without control edges, not yet taken."""
        return (n.op in ADD_OPS and n.name not in keep and n.name not in taken
                and len(data_inputs(n)) == len(n.input)
                and not any(ctrl for _, ctrl in readers[n.name])
                and n.attr["T"].type in FLOAT_TYPES)

    def operands_broadcast(n) -> bool:
        return all(_broadcastable(shape(n.name), shape(t)) for t in data_inputs(n))

    taken: set[str] = set()
    gone: set[str] = set()
    rewritten = []
    before: dict[str, list] = {}  # each root's new additions, placed just before it
    names = set(nodes)
    for root in reversed(list(gd.node)):
        if not (candidate(root) and _defined(shape(root.name)) and operands_broadcast(root)):
            continue
        leaves, absorbed = [], []
        for t in data_inputs(root):
            queue = [t]
            while queue:
                t = queue.pop(0)
                n = nodes.get(input_node(t))
                if (n is not None and split_tensor(t)[1] == 0 and candidate(n)
                        and len(readers[n.name]) == 1 and operands_broadcast(n)):
                    absorbed.append(n)
                    queue[:0] = data_inputs(n)
                else:
                    leaves.append(t)
        if not absorbed:
            continue
        groups: dict[tuple, list[str]] = {}
        for t in leaves:
            groups.setdefault(shape(t), []).append(t)
        order = _ordered(list(groups))
        if order is None or len(leaves) < 2:
            continue
        taken.update(n.name for n in absorbed)
        taken.add(root.name)
        gone.update(n.name for n in absorbed)  # their one reader was in the tree
        # TensorFlow's AddN sums left to right; then the shapes' sums, smallest first.
        adds: list = []
        partial = None
        for s in order:
            group_sum = groups[s][0]
            for t in groups[s][1:]:
                group_sum = _add((group_sum, t), root, names, adds)
            partial = group_sum if partial is None else _add((partial, group_sum), root,
                                                             names, adds)
        last = adds.pop()  # the last addition is the root itself
        names.discard(last.name)
        before[root.name] = adds
        root.op = "AddV2"
        del root.input[:]
        root.input.extend(last.input)
        if "N" in root.attr:
            del root.attr["N"]
        rewritten.append(root.name)
    if not rewritten:
        return gd, []
    # (in GraphDef order next to their root: the loader's topological order follows it, and
    # the fusion passes find the sum right after the contraction that feeds it)
    order = [m for n in gd.node if n.name not in gone for m in before.get(n.name, []) + [n]]
    return rebuilt(gd, order, keep), rewritten


def _add(pair, root, names: set, adds: list) -> str:
    """A new AddV2 `pair[0] + pair[1]` of `root`'s dtype, appended to `adds` (the root's
    additions so far); returns its name."""
    name = fresh_name(names, f"{root.name}/rstf_sum_{len(adds)}")
    names.add(name)
    nd = tf.compat.v1.NodeDef(name=name, op="AddV2", input=list(pair))
    nd.attr["T"].CopyFrom(root.attr["T"])
    adds.append(nd)
    return name

