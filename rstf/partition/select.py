"""Selecting the subgraphs of a dataflow DAG that rstf replaces by custom ops.

A TensorFlow graph is modelled as an ``nx.DiGraph`` whose nodes are node-name
strings and whose edge ``u -> v`` means that ``v`` consumes something produced
by ``u`` (a data tensor or a control dependency).

Replacing a set of nodes ``S`` by one op is the same as *contracting* ``S`` into
a single node.  That is only sound when the contraction creates no cycle:

* ``S`` must be **convex**: no path may leave ``S`` and come back into it
  (``s1 -> x -> s2`` with ``x`` outside ``S`` would become ``S -> x -> S``).
* When several sets are contracted at once, the **quotient graph** (every set
  contracted to one node, every other node kept as it is) must be acyclic.
  Each set being convex is not enough: ``A = {a1, a2}`` and ``B = {b1, b2}``
  with ``a1 -> b1`` and ``b2 -> a2`` are both convex, yet ``A -> B -> A``.

The quotient being acyclic implies that every set is convex (a path leaving a
set and returning to it is a cycle in the quotient), so the quotient condition
is the one that matters; :func:`is_convex` is still offered because it is the
natural per-set question and is cheaper to answer.

The clustering algorithm is the one XLA uses for auto-clustering: start with
every node in its own cluster, keep the *contracted* graph (clusters as nodes)
acyclic at all times, and contract an edge between two supported clusters only
when that edge is the only path between them.  The contracted graph is kept in a
topological order incrementally (Pearce & Kelly, "A dynamic topological sort
algorithm for directed acyclic graphs", JEA 2007), which lets every "is there
another path?" question be answered by a DFS pruned to the topological window
between the two clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
import heapq

import networkx as nx

from rstf.errors import RstfError

__all__ = ["select_subgraphs", "is_convex", "quotient_is_acyclic"]


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def select_subgraphs(
    dag: nx.DiGraph,
    supported: Callable[[str], bool] | Collection[str],
) -> list[list[str]]:
    """Group the supported nodes of ``dag`` into maximal contractible subgraphs.

    Args:
        dag: The dataflow graph.  Nodes are node names; an edge ``u -> v``
            means ``v`` consumes something from ``u``.  ``nx.MultiDiGraph`` is
            accepted too (parallel edges change nothing here).
        supported: Either a predicate on node names or a collection of the
            supported node names.  Names that are not nodes of ``dag`` are
            ignored.

    Returns:
        A list of disjoint, non-empty lists of supported node names such that

        * every set is weakly connected in ``dag``;
        * every set is convex (no path leaves it and comes back);
        * contracting *all* returned sets at once leaves an acyclic graph;
        * the sets are maximal: for any edge between two returned sets,
          merging them would create a cycle in the contracted graph;
        * every supported node is in exactly one set (single-node sets are
          returned too; callers that want a minimum size may drop sets -
          dropping sets never breaks the properties above, because expanding
          a convex node of an acyclic quotient back into its members cannot
          create a cycle).

        Each set lists its nodes in a topological order of ``dag``; the sets
        are ordered by the topological position of their first node.  The
        topological order used is the lexicographic one keyed by node
        insertion order, so the same graph (built in the same order) always
        gives the same result.

    Raises:
        RstfError: if ``dag`` has a cycle (e.g. TF1 ``while`` loops that were
            not lowered); rstf cannot reason about convexity there.
    """
    order = topological_order(dag)
    pos = {name: i for i, name in enumerate(order)}
    is_supported = _as_predicate(supported)
    sup = [bool(is_supported(name)) for name in order]

    # Integer adjacency in topological numbering; successors sorted so that the
    # edge visiting order (and therefore the result) is deterministic.
    succ = [sorted({pos[v] for v in dag.successors(name)}) for name in order]
    edges = [(u, v) for u in range(len(order)) for v in succ[u]]
    # The identity is a topological order of the initial (uncontracted) graph.
    graph = ContractionGraph(len(order), edges, order=range(len(order)))

    # Candidate edges: both endpoints supported.  Visiting them in topological
    # order of the source grows clusters roughly front to back, like XLA does.
    candidates = [(u, v) for (u, v) in edges if sup[u] and sup[v]]

    # One pass is not enough for maximality: an edge rejected because of a path
    # A -> W -> B may become contractible once W has been merged into A or B.
    # Merging only ever removes such alternative paths by absorbing their
    # intermediate clusters, so iterating to a fixed point terminates (every
    # successful pass reduces the number of clusters) and yields a result in
    # which no edge between two clusters is contractible, i.e. maximal.
    changed = True
    while changed:
        changed = False
        for u, v in candidates:
            a, b = graph.find(u), graph.find(v)
            if a != b and graph.contract(a, b):
                changed = True

    members: dict[int, list[int]] = {}
    for i in range(len(order)):  # ascending i == topological order
        if sup[i]:
            members.setdefault(graph.find(i), []).append(i)
    clusters = sorted(members.values(), key=lambda m: m[0])
    return [[order[i] for i in m] for m in clusters]


def is_convex(dag: nx.DiGraph, nodes: Iterable[str]) -> bool:
    """Return True iff no path of ``dag`` leaves ``nodes`` and re-enters it.

    A convex set can be contracted into a single node without creating a cycle.
    The empty set and single nodes are convex.  Runs in time linear in the part
    of ``dag`` reachable from ``nodes``.

    Raises:
        ValueError: if a node is not in ``dag``.
    """
    inside = set(nodes)
    _check_known(dag, inside)
    # Forward search from the nodes just outside the set, through outside nodes
    # only; reaching the set again means a leave-and-return path exists.
    stack = [w for n in inside for w in dag.successors(n) if w not in inside]
    seen = set(stack)
    while stack:
        x = stack.pop()
        for w in dag.successors(x):
            if w in inside:
                return False
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return True


def quotient_is_acyclic(dag: nx.DiGraph, parts: Iterable[Iterable[str]]) -> bool:
    """Return True iff contracting every part of ``parts`` at once gives a DAG.

    Nodes of ``dag`` that are in no part stay as themselves.  Edges inside a
    part disappear (they are not self-loops of the quotient).  An acyclic
    quotient implies that every part is convex.

    Raises:
        ValueError: if the parts overlap or name a node that is not in ``dag``.
    """
    label: dict[Hashable, Hashable] = {}
    for i, part in enumerate(parts):
        for n in part:
            if n not in dag:
                raise ValueError(f"node {n!r} is not in the graph")
            if n in label:
                raise ValueError(f"node {n!r} is in more than one part")
            label[n] = ("part", i)
    quotient = nx.DiGraph()
    quotient.add_nodes_from(label.get(n, ("node", n)) for n in dag.nodes)
    for u, v in dag.edges():
        lu, lv = label.get(u, ("node", u)), label.get(v, ("node", v))
        if lu != lv:
            quotient.add_edge(lu, lv)
        elif u == v:  # a real self-loop of dag is a cycle whatever the parts
            return False
    return nx.is_directed_acyclic_graph(quotient)


# --------------------------------------------------------------------------
# Shared helpers (also used by rstf.partition.metis)
# --------------------------------------------------------------------------


def topological_order(dag: nx.DiGraph) -> list[str]:
    """Deterministic topological order of ``dag``.

    Among the nodes that are ready, the one inserted into ``dag`` first comes
    first, so the order only depends on how the graph was built, never on hash
    seeds.

    Raises:
        RstfError: if ``dag`` has a cycle.
    """
    insertion = {n: i for i, n in enumerate(dag.nodes)}
    try:
        return list(nx.lexicographical_topological_sort(dag, key=insertion.__getitem__))
    except nx.NetworkXUnfeasible as exc:
        cycle = nx.find_cycle(dag)
        names = " -> ".join(str(u) for u, *_ in cycle)
        raise RstfError(f"the graph has a cycle ({names}); cannot select subgraphs") from exc


class ContractionGraph:
    """A DAG of clusters in which an edge is contracted only if no cycle results.

    Clusters are the integers ``0 .. n-1``; initially every cluster is a node of
    the graph.  :meth:`contract` merges two clusters joined by an edge when that
    edge is the only path between them, which is exactly the condition for the
    contracted graph to stay acyclic (a second path ``a -> x -> ... -> b``
    would become the cycle ``ab -> x -> ... -> ab``).

    A topological rank is kept for every live cluster and maintained under edge
    insertion with the Pearce-Kelly algorithm.  With ranks available, "is there
    a path from ``a`` to ``b`` other than the edge ``a -> b``?" only needs a DFS
    over clusters whose rank lies strictly between ``rank[a]`` and ``rank[b]``:
    a cluster ranked after ``b`` cannot reach ``b``.

    Merged-away clusters keep their id in a union-find structure; use
    :meth:`find` to get the live representative of an original cluster id.
    """

    def __init__(self, n: int, edges: Iterable[tuple[int, int]], order: Sequence[int] | None = None):
        """Build the graph on ``n`` clusters with the given edges.

        Args:
            n: Number of clusters.
            edges: Directed edges ``(a, b)``; duplicates and self-loops are
                ignored (a self-loop is an edge inside one cluster).
            order: A topological order of the clusters, if the caller has one;
                otherwise one is computed.

        Raises:
            ValueError: if the edges contain a cycle.
        """
        self.succ: list[set[int]] = [set() for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        for a, b in edges:
            if a != b:
                self.succ[a].add(b)
                self.pred[b].add(a)
        self._parent = list(range(n))
        if order is None:
            order = self._kahn_order(n)
        self.rank = [0] * n
        for r, c in enumerate(order):
            self.rank[c] = r
        if any(self.rank[a] >= self.rank[b] for a in range(n) for b in self.succ[a]):
            raise ValueError("the order given is not a topological order of the edges")

    def find(self, c: int) -> int:
        """Live representative of the cluster that ``c`` was merged into."""
        parent = self._parent
        root = c
        while parent[root] != root:
            root = parent[root]
        while parent[c] != root:  # path compression
            parent[c], c = root, parent[c]
        return root

    def contract(self, a: int, b: int) -> bool:
        """Merge live clusters ``a`` and ``b`` if that keeps the graph acyclic.

        ``a`` and ``b`` must be live and joined by an edge (either direction).
        Returns True if they were merged (the survivor is ``self.find(a)``),
        False if another path between them exists and nothing changed.
        """
        if b in self.pred[a]:
            a, b = b, a  # orient so that the edge is a -> b
        if b not in self.succ[a]:
            raise ValueError(f"clusters {a} and {b} are not adjacent")
        if self._has_other_path(a, b):
            return False
        # Keep the cluster with more edges so that fewer edges move.
        keep, drop = (a, b) if self._degree(a) >= self._degree(b) else (b, a)
        preds = self.pred[drop] - {keep}
        succs = self.succ[drop] - {keep}
        # Detach `drop` completely, then re-attach its edges to `keep`.  Every
        # intermediate graph is a subgraph of the final merged graph, which is
        # acyclic (checked above), so the Pearce-Kelly insertions never see a
        # cycle.
        for p in self.pred[drop]:
            self.succ[p].discard(drop)
        for s in self.succ[drop]:
            self.pred[s].discard(drop)
        self.pred[drop] = set()
        self.succ[drop] = set()
        self._parent[drop] = keep
        for p in sorted(preds):
            self._insert_edge(p, keep)
        for s in sorted(succs):
            self._insert_edge(keep, s)
        return True

    # -- internals ---------------------------------------------------------

    def _degree(self, c: int) -> int:
        return len(self.succ[c]) + len(self.pred[c])

    def _kahn_order(self, n: int) -> list[int]:
        indeg = [len(p) for p in self.pred]
        ready = [c for c in range(n) if indeg[c] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            c = heapq.heappop(ready)
            order.append(c)
            for s in self.succ[c]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(order) != n:
            raise ValueError("the cluster graph has a cycle")
        return order

    def _has_other_path(self, a: int, b: int) -> bool:
        """Is there a path a -> ... -> b that is not the direct edge a -> b?"""
        rank, succ = self.rank, self.succ
        limit = rank[b]
        stack = [s for s in succ[a] if s != b and rank[s] < limit]
        seen = set(stack)
        while stack:
            x = stack.pop()
            for y in succ[x]:
                if y == b:
                    return True
                # Clusters ranked after b cannot reach b: prune them.
                if rank[y] < limit and y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def _insert_edge(self, x: int, y: int) -> None:
        """Add x -> y, restoring the topological ranks (Pearce-Kelly)."""
        if y in self.succ[x]:
            return
        self.succ[x].add(y)
        self.pred[y].add(x)
        rank = self.rank
        lo, hi = rank[y], rank[x]
        if lo > hi:
            return  # order still valid
        # Only clusters ranked in [lo, hi] can be out of order: the descendants
        # of y ranked below x and the ancestors of x ranked above y.
        forward = self._collect(y, self.succ, lambda r: r < hi)
        if any(x in self.succ[c] for c in forward):
            # y already reaches x: the caller inserted a cycle-closing edge.
            raise AssertionError("edge insertion created a cycle")
        backward = self._collect(x, self.pred, lambda r: r > lo)
        forward.sort(key=rank.__getitem__)
        backward.sort(key=rank.__getitem__)
        # Reuse the same rank values: ancestors of x first, then descendants
        # of y, each group keeping its relative order.
        slots = sorted(rank[c] for c in backward + forward)
        for c, r in zip(backward + forward, slots):
            rank[c] = r

    def _collect(self, start: int, adj: list[set[int]], keep: Callable[[int], bool]) -> list[int]:
        rank = self.rank
        seen = {start}
        stack = [start]
        while stack:
            x = stack.pop()
            for y in adj[x]:
                if y not in seen and keep(rank[y]):
                    seen.add(y)
                    stack.append(y)
        return list(seen)


def _as_predicate(supported: Callable[[str], bool] | Collection[str]) -> Callable[[str], bool]:
    if callable(supported):
        return supported
    names = frozenset(supported)
    return names.__contains__


def _check_known(dag: nx.DiGraph, nodes: Iterable[str]) -> None:
    for n in nodes:
        if n not in dag:
            raise ValueError(f"node {n!r} is not in the graph")
