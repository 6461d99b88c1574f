"""Splitting a large selected subgraph into balanced, contractible parts.

:func:`select_subgraphs` may return subgraphs with thousands of ops; rstf
generates one custom op per part and wants parts of at most ``max_ops`` ops,
with balanced cost and as few tensors crossing between parts as possible.
That is a k-way graph partitioning problem, solved with METIS (``pymetis``).

METIS knows nothing about edge directions, so its parts can be non-convex (a
path leaves a part and comes back) or convex but mutually cyclic (``A -> B``
and ``B -> A``).  :func:`make_convex` repairs any labelling:

    level(v) = max over predecessors u of v in the region of
                   level(u)      if u and v have the same label,
                   level(u) + 1  otherwise,
               0 if v has none,
    new label(v) = (label(v), level(v)).

The only property used below is the edge constraint

    level(w) >= level(v) + (0 if label(v) == label(w) else 1)  for every v -> w,

so after this forward pass nodes may also be moved *up* as long as it holds;
the implementation raises a node towards its same-label consumers, which keeps
e.g. a weight constant (a source, level 0) with the op that reads it.

Along every edge the level never decreases, and across an edge between two
different new labels it strictly increases (same old label and different level
means a larger level; a different old label means +1).  Hence any path that
leaves a new label has a strictly larger level from then on and can never come
back to it: every new label set is convex, and the quotient over all new labels
is acyclic (each quotient edge goes from a smaller level to a larger one).
Splitting a label set into its weakly connected components keeps both
properties: the components have the same level and no edge between them, so
the argument still applies.  The repair can over-split (two nodes of one METIS
part reached by paths that cross different numbers of parts get different
levels although keeping them together would be fine); the greedy merging in
:func:`partition_subgraph` undoes such splits whenever that is safe, using the
exact cycle test of :class:`~rstf.partition.select.ContractionGraph`.

If the subgraph is not convex in the whole graph, paths can leave it and come
back through outside nodes.  The level computation therefore runs over the
*region* ``S ∪ (descendants(S) ∩ ancestors(S))`` with every outside node as a
label of its own, so those paths also raise the level.  Nodes outside the
region cannot lie on a cycle through a part (they either cannot be reached
from ``S`` or cannot reach it), so the region is all that needs checking.
For the usual input, a set from :func:`select_subgraphs`, the region is ``S``
itself.

Why the parts can replace ``S`` in the list returned by
:func:`select_subgraphs`: take a cycle of the new global quotient (``S``
replaced by its parts, the other sets still contracted).  Contracting the parts
back into ``S`` maps it to a closed walk of the old quotient.  If the cycle
visits anything besides parts of ``S``, that walk contains a cycle through
``S`` in the old quotient, which was acyclic; otherwise the cycle only uses
parts of ``S`` and edges between them, which the local repair excludes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
import contextlib
import ctypes
import logging
import math
import os
import sys
import tempfile

import networkx as nx
import pymetis

from rstf.partition.select import ContractionGraph, topological_order

__all__ = ["partition_subgraph", "cut_size", "make_convex"]

_log = logging.getLogger(__name__)

# METIS sums vertex weights in 32-bit integers (idx_t); keep the total well
# inside that range.
_INT32_BUDGET = 2**30
# Resolution of float costs once scaled to integers (relative to the max cost).
_MAX_WEIGHT_SCALE = 10**6


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def partition_subgraph(
    dag: nx.DiGraph,
    nodes: Sequence[str],
    max_ops: int,
    cost: Mapping[str, float] | None = None,
    seed: int = 0,
) -> list[list[str]]:
    """Split ``nodes`` into contractible parts of at most ``max_ops`` nodes.

    Args:
        dag: The whole dataflow graph (see :func:`select_subgraphs`).  An edge
            attribute ``weight`` (a non-negative number, e.g. the number of
            tensors or bytes the edge carries; rounded, at least 1) is used
            as its METIS edge weight;
            otherwise every edge weighs 1, and parallel edges of an
            ``nx.MultiDiGraph`` add up.
        nodes: The nodes to split, normally one set returned by
            :func:`select_subgraphs`.  It does not have to be convex or
            connected; parts are always convex with respect to the whole
            ``dag``.
        max_ops: Maximum number of nodes in a part (>= 1).
        cost: Optional cost of each node (non-negative floats, e.g. estimated
            FLOPs); parts are balanced by this cost.  Nodes missing from the
            mapping count as cost 0.  ``None`` means every node costs 1.
        seed: METIS random seed; the result is deterministic for a given seed.

    Returns:
        Disjoint, non-empty parts covering ``nodes`` exactly, such that

        * every part has at most ``max_ops`` nodes;
        * every part is weakly connected and convex in ``dag``;
        * contracting all parts at once (every other node kept) gives an
          acyclic graph - and if ``nodes`` was one set of a family with an
          acyclic quotient (e.g. the output of :func:`select_subgraphs`),
          replacing it by these parts keeps that quotient acyclic;
        * parts are balanced by ``cost`` and cut few edges: METIS k-way
          with ``k = ceil(len(nodes) / max_ops)`` (default 3% imbalance),
          then the convexity repair, which can only add parts: it splits
          METIS parts and merges pieces back, never beyond the cost of the
          heaviest METIS part or ``max_ops`` nodes.  With a non-uniform
          ``cost`` a cost-balanced METIS part can exceed ``max_ops`` nodes;
          such parts are partitioned again on their own.

        If ``len(nodes) <= max_ops`` the single part ``list(nodes)`` is
        returned as is, in the caller's order, even if it is not connected.
        Otherwise every part lists its nodes in the topological order of
        :func:`~rstf.partition.select.topological_order`; parts are sorted by
        the position of their first node.  An empty ``nodes`` gives ``[]``.

    Raises:
        ValueError: on a bad ``max_ops``, duplicate or unknown nodes, or a
            negative / non-finite cost or edge weight.
        RstfError: if ``dag`` has a cycle.
    """
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 1:
        raise ValueError(f"max_ops must be a positive integer, got {max_ops!r}")
    nodes = list(nodes)
    if len(set(nodes)) != len(nodes):
        raise ValueError("nodes contains duplicates")
    for n in nodes:
        if n not in dag:
            raise ValueError(f"node {n!r} is not in the graph")
    if not nodes:
        return []
    if len(nodes) <= max_ops:
        # Nothing to split.  Returned in the caller's order (which is
        # topological for sets from select_subgraphs) without computing a
        # topological order of the whole graph: this path runs once per
        # selected subgraph and must stay cheap.
        return [nodes]
    pos = {n: i for i, n in enumerate(topological_order(dag))}
    nodes.sort(key=pos.__getitem__)
    if max_ops == 1:
        # Singletons are trivially convex with an acyclic quotient (dag is
        # acyclic).  METIS cannot do k = n: it prints "too many parts" to the
        # C stdout and returns fewer parts.
        return [[n] for n in nodes]
    costs = _costs(nodes, cost)
    parts = _partition(dag, pos, nodes, max_ops, costs, seed)
    return _canonical(parts, pos)


def cut_size(dag: nx.DiGraph, parts: Iterable[Iterable[str]]) -> int:
    """Number of edges of ``dag`` whose endpoints lie in two different parts.

    Edges touching a node that is in no part are not counted.  Parallel edges
    of a multigraph count separately; edge weights are ignored.
    """
    label: dict[Hashable, int] = {}
    for i, part in enumerate(parts):
        for n in part:
            label[n] = i
    cut = 0
    for u, v in dag.edges():  # yields parallel edges separately on multigraphs
        lu, lv = label.get(u), label.get(v)
        if lu is not None and lv is not None and lu != lv:
            cut += 1
    return cut


def make_convex(
    dag: nx.DiGraph, nodes: Sequence[str], labels: Mapping[str, Hashable]
) -> list[list[str]]:
    """Refine an arbitrary labelling of ``nodes`` into contractible parts.

    Returns the weakly connected components of the sets
    ``{v : (labels[v], level(v)) == key}`` (see the module docstring), each in
    topological order, sorted by first node.  Every returned part is a subset
    of one label class, is convex in ``dag``, and the quotient over all parts
    is acyclic.  Labels that are already convex, connected and mutually
    acyclic may still be split when paths into them cross different numbers
    of other labels; :func:`partition_subgraph` merges such pieces back.
    """
    pos = {n: i for i, n in enumerate(topological_order(dag))}
    members = sorted(set(nodes), key=pos.__getitem__)
    return _canonical(_level_split(dag, pos, members, labels), pos)


# --------------------------------------------------------------------------
# Implementation
# --------------------------------------------------------------------------


def _partition(
    dag: nx.DiGraph,
    pos: Mapping[str, int],
    nodes: list[str],
    max_ops: int,
    costs: Mapping[str, float],
    seed: int,
) -> list[list[str]]:
    """Core of :func:`partition_subgraph`; ``nodes`` sorted, > max_ops of them."""
    k = math.ceil(len(nodes) / max_ops)
    labels = _metis_labels(dag, nodes, k, costs, seed)
    pieces = _level_split(dag, pos, nodes, labels)
    if len(pieces) == 1:
        # METIS made no progress (e.g. it put everything in one part).  Fall
        # back to cutting the topological order into chunks of max_ops: after
        # the repair every piece is a subset of a chunk, so no piece is too
        # big and the recursion below cannot loop.
        labels = {n: i // max_ops for i, n in enumerate(nodes)}
        pieces = _level_split(dag, pos, nodes, labels)

    # Pieces that are still too big (METIS balances cost, not node count, and
    # allows a few percent of imbalance) are partitioned again on their own.
    # Each such piece is a strict subset of `nodes` and convex, and splitting
    # it into parts with an acyclic quotient keeps the whole quotient acyclic
    # (module docstring), so the recursion is sound and terminates.
    sized: list[tuple[list[str], Hashable]] = []
    for piece in pieces:
        label = labels[piece[0]]
        if len(piece) > max_ops:
            sized.extend((sub, label) for sub in _partition(dag, pos, piece, max_ops, costs, seed))
        else:
            sized.append((piece, label))

    # Every METIS part's weight bounds how heavy merged pieces may become, so
    # merging never makes the balance worse than what METIS produced.
    label_weight: dict[Hashable, float] = {}
    for n in nodes:
        label_weight[labels[n]] = label_weight.get(labels[n], 0.0) + costs[n]
    weight_cap = max(label_weight.values())
    return _merge_pieces(dag, pos, nodes, sized, max_ops, costs, weight_cap)


def _costs(nodes: Sequence[str], cost: Mapping[str, float] | None) -> dict[str, float]:
    if cost is None:
        return {n: 1.0 for n in nodes}
    out = {}
    for n in nodes:
        c = float(cost.get(n, 0.0))
        if not math.isfinite(c) or c < 0:
            raise ValueError(f"cost of {n!r} must be a finite non-negative number, got {c!r}")
        out[n] = c
    return out


def _int_vertex_weights(nodes: Sequence[str], costs: Mapping[str, float]) -> list[int]:
    """Scale float costs to METIS integer weights >= 1 with a bounded sum."""
    cmax = max(costs[n] for n in nodes)
    if cmax <= 0:
        return [1] * len(nodes)
    # Relative to the largest cost, so resolution is the same for any unit;
    # at least 1 because METIS needs positive weights, and n * scale stays
    # within the int32 budget so METIS' sums cannot overflow.
    scale = max(1, min(_MAX_WEIGHT_SCALE, _INT32_BUDGET // len(nodes)))
    return [max(1, round(costs[n] / cmax * scale)) for n in nodes]


def _edge_weight(data: Mapping) -> int:
    w = data.get("weight", 1)
    try:
        w = float(w)
    except (TypeError, ValueError):
        raise ValueError(f"edge weight must be a number, got {w!r}") from None
    if not math.isfinite(w) or w < 0:
        raise ValueError(f"edge weight must be finite and non-negative, got {w!r}")
    return max(1, round(w))  # METIS requires weights > 0


def _metis_labels(
    dag: nx.DiGraph,
    nodes: Sequence[str],
    k: int,
    costs: Mapping[str, float],
    seed: int,
) -> dict[str, int]:
    """METIS k-way labels of the undirected graph induced by ``nodes``."""
    index = {n: i for i, n in enumerate(nodes)}
    adj: list[dict[int, int]] = [{} for _ in nodes]
    for u in nodes:
        iu = index[u]
        for v, data in dag.adj[u].items():
            iv = index.get(v)
            if iv is None or iv == iu:
                continue
            # On a MultiDiGraph, adj[u][v] maps edge keys to attribute dicts.
            datas = data.values() if dag.is_multigraph() else (data,)
            w = sum(_edge_weight(d) for d in datas)
            # Direction is irrelevant to METIS; u->v and v->u add up.
            adj[iu][iv] = adj[iu].get(iv, 0) + w
            adj[iv][iu] = adj[iv].get(iu, 0) + w
    xadj, adjncy, eweights = [0], [], []
    for nbrs in adj:
        for j in sorted(nbrs):  # sorted: deterministic input, deterministic output
            adjncy.append(j)
            eweights.append(nbrs[j])
        xadj.append(len(adjncy))
    # A disconnected induced graph (or one without edges) is fine for METIS
    # k-way: it balances the weights and simply has nothing to cut between
    # components; the component split in _level_split separates them again.
    with _c_stdout_to_log():
        result = pymetis.part_graph(
            k,
            adjacency=pymetis.CSRAdjacency(xadj, adjncy),
            vweights=_int_vertex_weights(nodes, costs),
            eweights=eweights or None,
            options=pymetis.Options(seed=seed),
            recursive=False,  # k-way: the objective is the total cut over k parts
        )
    return {n: int(p) for n, p in zip(nodes, result.vertex_part)}


@contextlib.contextmanager
def _c_stdout_to_log() -> Iterator[None]:
    """Send what C code prints on file descriptor 1 to the debug log.

    With very uneven vertex weights and many parts per vertex (k close to
    n / 2), METIS prints "You are trying to partition a graph into too many
    parts!" with printf and still returns a usable labelling (fewer parts;
    the repair below does not care).  That text must not end up in the
    output of the rstf command, so fd 1 is pointed at a temporary file for
    the duration of the call.
    """
    # C's printf writes to file descriptor 1 whatever sys.stdout is.
    if sys.stdout is not None:
        sys.stdout.flush()  # keep Python's pending output before ours
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 at all: nothing can be printed anyway
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_stdio()  # so nothing buffered in C leaks out later
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
    if text:
        _log.debug("METIS said: %s", text)


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to talk to
        pass


def _region(dag: nx.DiGraph, nodes: Iterable[str]) -> set[str]:
    """``S ∪ (descendants(S) ∩ ancestors(S))``: every node on a path S -> S."""
    inside = set(nodes)

    def closure(step) -> set[str]:
        seen, stack = set(inside), list(inside)
        while stack:
            for w in step(stack.pop()):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen

    return inside | (closure(dag.successors) & closure(dag.predecessors))


def _level_split(
    dag: nx.DiGraph, pos: Mapping[str, int], nodes: list[str], labels: Mapping[str, Hashable]
) -> list[list[str]]:
    """The convexity repair of the module docstring; ``nodes`` sorted by pos."""
    inside = set(nodes)
    region = sorted(_region(dag, nodes), key=pos.__getitem__)
    level: dict[str, int] = {}
    for v in region:  # topological order, so predecessors come first
        lv = 0
        for u in dag.predecessors(v):
            lu = level.get(u)
            if lu is None:  # outside the region: cannot be on a path S -> S
                continue
            # Nodes outside S are labels of their own: always a level step.
            same = u in inside and v in inside and labels[u] == labels[v]
            lv = max(lv, lu if same else lu + 1)
        level[v] = lv

    # Pull nodes up towards their same-label consumers.  The forward pass puts
    # every node as early as possible, which strands e.g. a weight constant
    # (a source, level 0) away from the op that reads it (level 3) even though
    # both have the same label.  Any level function with
    #   level(w) >= level(v) + (0 if same label else 1)   for every edge v -> w
    # makes the repair correct (module docstring), so v may be raised up to
    # min(level of same-label successors, level of other successors - 1).
    # Raising only loosens the constraints of v's predecessors, and the
    # reverse topological order means v's successors are final already.
    for v in reversed(region):
        if v not in inside:
            continue
        same_min = diff_min = math.inf
        for w in dag.successors(v):
            lw = level.get(w)
            if lw is None:
                continue
            if w in inside and labels[w] == labels[v]:
                same_min = min(same_min, lw)
            else:
                diff_min = min(diff_min, lw - 1)
        if same_min != math.inf:  # only move towards a same-label consumer
            level[v] = max(level[v], min(same_min, diff_min))

    # Weakly connected components of each (label, level) class.
    key = {v: (labels[v], level[v]) for v in nodes}
    parent = {v: v for v in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u in nodes:
        for v in dag.successors(u):
            if v in inside and key[u] == key[v]:
                ru, rv = find(u), find(v)
                if ru != rv:
                    # The earlier node becomes the root: deterministic.
                    if pos[ru] < pos[rv]:
                        parent[rv] = ru
                    else:
                        parent[ru] = rv
    groups: dict[str, list[str]] = {}
    for v in nodes:  # in topological order, so each group is too
        groups.setdefault(find(v), []).append(v)
    return list(groups.values())


def _merge_pieces(
    dag: nx.DiGraph,
    pos: Mapping[str, int],
    nodes: list[str],
    pieces: list[tuple[list[str], Hashable]],
    max_ops: int,
    costs: Mapping[str, float],
    weight_cap: float,
) -> list[list[str]]:
    """Greedily merge adjacent pieces while every invariant is kept.

    Invariants kept by every merge: at most ``max_ops`` nodes per piece, and an
    acyclic quotient (checked exactly by ContractionGraph over the region, so
    pieces also stay convex).  Merges happen along edges only, so pieces stay
    weakly connected.

    Phase 1 only merges pieces cut from the same METIS part, undoing the
    over-splitting of the level repair.  Phase 2 merges any adjacent pieces,
    smallest first, as long as the merged weight stays within ``weight_cap``
    (the heaviest METIS part), to absorb the small slivers the repair leaves
    at part boundaries.  Both phases prefer the neighbour sharing the most
    edges, which removes the most cut edges.
    """
    region = sorted(_region(dag, nodes), key=pos.__getitem__)
    cluster_of: dict[str, int] = {}
    for i, (piece, _) in enumerate(pieces):
        for n in piece:
            cluster_of[n] = i
    n_clusters = len(pieces)
    for n in region:
        if n not in cluster_of:  # outside node: a singleton that never merges
            cluster_of[n] = n_clusters
            n_clusters += 1
    edges = [
        (cluster_of[u], cluster_of[v])
        for u in region
        for v in dag.successors(u)
        if v in cluster_of
    ]
    # Raises if the pieces' quotient had a cycle, which would be a bug above.
    graph = ContractionGraph(n_clusters, edges)

    members = {i: list(p) for i, (p, _) in enumerate(pieces)}
    label = {i: lab for i, (_, lab) in enumerate(pieces)}
    weight = {i: sum(costs[n] for n in p) for i, (p, _) in enumerate(pieces)}

    def neighbours(c: int) -> dict[int, int]:
        """Adjacent live pieces of c -> number of edges between them."""
        count: dict[int, int] = {}
        for n in members[c]:
            for w in (*dag.successors(n), *dag.predecessors(n)):
                cw = cluster_of.get(w)
                if cw is None or cw >= len(pieces):
                    continue  # outside S
                d = graph.find(cw)
                if d != c:
                    count[d] = count.get(d, 0) + 1
        return count

    def run_phase(same_label_only: bool, cap: float) -> None:
        changed = True
        while changed:
            changed = False
            order = sorted(members, key=lambda c: (len(members[c]), pos[members[c][0]]))
            for c in order:
                if c not in members:
                    continue  # merged away earlier in this round
                count = neighbours(c)
                candidates = sorted(count, key=lambda d: (-count[d], len(members[d]), pos[members[d][0]]))
                for d in candidates:
                    if same_label_only and label[d] != label[c]:
                        continue
                    if len(members[c]) + len(members[d]) > max_ops:
                        continue
                    # Small tolerance: float sums of the same costs in
                    # different orders must not block a merge.
                    if weight[c] + weight[d] > cap * (1 + 1e-9):
                        continue
                    if not graph.contract(c, d):
                        continue
                    keep = graph.find(c)
                    drop = d if keep == c else c
                    members[keep] = members[keep] + members.pop(drop)
                    weight[keep] += weight.pop(drop)
                    label.pop(drop)  # same-label merges keep the label
                    changed = True
                    break

    run_phase(same_label_only=True, cap=math.inf)
    run_phase(same_label_only=False, cap=weight_cap)
    return list(members.values())


def _canonical(parts: Iterable[list[str]], pos: Mapping[str, int]) -> list[list[str]]:
    out = [sorted(p, key=pos.__getitem__) for p in parts]
    out.sort(key=lambda p: pos[p[0]])
    return out
