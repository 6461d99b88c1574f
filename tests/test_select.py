"""Tests of rstf.partition.select: maximal convex clustering of supported nodes."""

import itertools
import random
import time

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstf.errors import RstfError
from rstf.partition import is_convex, quotient_is_acyclic, select_subgraphs
from rstf.partition.select import ContractionGraph, topological_order


def chain(*names):
    g = nx.DiGraph()
    nx.add_path(g, names)
    return g


def random_dag(n, seed, fan_in=3, window=25):
    """Layered-ish random DAG: node i reads from up to fan_in of the window before it."""
    rng = random.Random(seed)
    g = nx.DiGraph()
    g.add_nodes_from(f"n{i}" for i in range(n))
    for i in range(1, n):
        for _ in range(rng.randint(1, fan_in)):
            g.add_edge(f"n{rng.randrange(max(0, i - window), i)}", f"n{i}")
    return g


def check_invariants(dag, supported, sets):
    """Everything select_subgraphs promises, except maximality."""
    flat = [n for s in sets for n in s]
    assert len(flat) == len(set(flat)), "sets overlap"
    assert set(flat) == {n for n in dag if n in supported}, "not every supported node is covered"
    for s in sets:
        assert s, "empty set"
        assert nx.is_weakly_connected(dag.subgraph(s))
        assert is_convex(dag, s)
        # Each set in a topological order of dag: as the set is convex, every
        # path between two of its nodes stays inside it, so checking the
        # edges inside the set is enough.
        index = {n: i for i, n in enumerate(s)}
        assert all(index[u] < index[v] for u, v in dag.subgraph(s).edges())
    assert quotient_is_acyclic(dag, sets)
    # Sets ordered by the position of their first node in the (documented)
    # insertion-keyed lexicographic topological order.
    order = {n: i for i, n in enumerate(topological_order(dag))}
    firsts = [order[s[0]] for s in sets]
    assert firsts == sorted(firsts)


def check_maximal(dag, sets):
    """No edge between two sets can be contracted without creating a cycle."""
    where = {n: i for i, s in enumerate(sets) for n in s}
    adjacent = {
        tuple(sorted((where[u], where[v])))
        for u, v in dag.edges()
        if u in where and v in where and where[u] != where[v]
    }
    for i, j in adjacent:
        merged = [s for k, s in enumerate(sets) if k not in (i, j)] + [sets[i] + sets[j]]
        assert not quotient_is_acyclic(dag, merged), f"sets {i} and {j} could be merged"


# -- hand-made cases ---------------------------------------------------------


def test_diamond_with_unsupported_branch_is_not_merged():
    # a -> b -> d and a -> c -> d with c unsupported: {a, b, d} would have the
    # path a -> c -> d leaving and re-entering it.
    g = nx.DiGraph([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    sup = {"a", "b", "d"}
    sets = select_subgraphs(g, sup)
    assert not any({"a", "d"} <= set(s) for s in sets)
    assert not is_convex(g, ["a", "b", "d"])
    check_invariants(g, sup, sets)
    check_maximal(g, sets)
    # Edges are visited in topological order, so a -> b is merged first.
    assert sets == [["a", "b"], ["d"]]


def test_linear_chain_is_one_set():
    g = chain("x", "y", "z", "w")
    assert select_subgraphs(g, set(g)) == [["x", "y", "z", "w"]]


def test_two_disconnected_islands_give_two_sets():
    g = chain("a1", "a2", "a3")
    nx.add_path(g, ["b1", "b2"])
    assert select_subgraphs(g, set(g)) == [["a1", "a2", "a3"], ["b1", "b2"]]


def test_chain_interrupted_by_unsupported_node_gives_two_sets():
    g = chain("a", "b", "u", "c", "d")
    assert select_subgraphs(g, lambda n: n != "u") == [["a", "b"], ["c", "d"]]


def test_path_through_unsupported_node_blocks_merge():
    # a1 -> a2 directly and also via b1 -> u -> b2 with u unsupported: a1 and
    # a2 may not end up together unless b1, u, b2 do too, which u forbids.
    g = nx.DiGraph([("a1", "a2"), ("a1", "b1"), ("b1", "u"), ("u", "b2"), ("b2", "a2")])
    sup = {"a1", "a2", "b1", "b2"}
    sets = select_subgraphs(g, sup)
    assert not any({"a1", "a2"} <= set(s) for s in sets)
    check_invariants(g, sup, sets)
    check_maximal(g, sets)


def test_unsupported_nodes_and_unknown_names_are_ignored():
    g = chain("a", "b")
    assert select_subgraphs(g, {"a", "not_a_node"}) == [["a"]]
    assert select_subgraphs(g, set()) == []
    assert select_subgraphs(nx.DiGraph(), set()) == []


def test_set_and_predicate_give_the_same_result():
    g = random_dag(200, seed=3)
    sup = {n for n in g if hash(n) % 5}
    assert select_subgraphs(g, sup) == select_subgraphs(g, sup.__contains__)


def test_cycle_is_reported():
    g = nx.DiGraph([("a", "b"), ("b", "a")])
    with pytest.raises(RstfError, match="cycle"):
        select_subgraphs(g, {"a", "b"})


def test_multigraph_is_accepted():
    g = nx.MultiDiGraph([("a", "b"), ("a", "b"), ("b", "c")])
    assert select_subgraphs(g, set(g)) == [["a", "b", "c"]]


# -- the helpers -------------------------------------------------------------


def test_is_convex_and_quotient_helpers():
    g = nx.DiGraph([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    assert is_convex(g, [])
    assert is_convex(g, ["a"])
    assert is_convex(g, ["a", "b", "c", "d"])
    assert not is_convex(g, ["a", "d"])
    assert quotient_is_acyclic(g, [["a", "b"], ["c", "d"]])
    assert not quotient_is_acyclic(g, [["a", "d"]])
    # Individually convex but mutually cyclic.
    h = nx.DiGraph([("a1", "b1"), ("b2", "a2")])
    assert is_convex(h, ["a1", "a2"]) and is_convex(h, ["b1", "b2"])
    assert not quotient_is_acyclic(h, [["a1", "a2"], ["b1", "b2"]])
    with pytest.raises(ValueError):
        quotient_is_acyclic(g, [["a"], ["a"]])
    with pytest.raises(ValueError):
        is_convex(g, ["zzz"])


def test_contraction_graph_rejects_cycle_and_keeps_ranks_valid():
    # 0 -> 1 -> 2 and 0 -> 2: contracting 0-2 would make {0,2} -> 1 -> {0,2}.
    cg = ContractionGraph(3, [(0, 1), (1, 2), (0, 2)])
    assert not cg.contract(0, 2)
    assert cg.contract(0, 1)
    assert cg.contract(cg.find(1), 2)
    assert cg.find(0) == cg.find(1) == cg.find(2)


# -- random graphs -----------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_dags(seed):
    rng = random.Random(1000 + seed)
    g = random_dag(rng.randint(150, 350), seed, fan_in=rng.randint(1, 4), window=rng.choice([5, 25, 400]))
    p = rng.choice([0.5, 0.8, 0.95])
    sup = {n for n in g if rng.random() < p}
    sets = select_subgraphs(g, sup)
    check_invariants(g, sup, sets)
    check_maximal(g, sets)
    # Deterministic, also on an identically built copy.
    assert select_subgraphs(g, sup) == sets
    assert select_subgraphs(nx.DiGraph(g), set(sup)) == sets


@st.composite
def small_dags(draw):
    n = draw(st.integers(1, 10))
    edges = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=25))
    g = nx.DiGraph()
    g.add_nodes_from(f"v{i}" for i in range(n))
    g.add_edges_from((f"v{a}", f"v{b}") for a, b in edges if a < b)
    sup = {f"v{i}" for i in draw(st.sets(st.integers(0, n - 1)))}
    return g, sup


@settings(max_examples=300, deadline=None)
@given(small_dags())
def test_small_dags_property(case):
    g, sup = case
    sets = select_subgraphs(g, sup)
    check_invariants(g, sup, sets)
    check_maximal(g, sets)


def test_small_dags_exhaustive_convexity_oracle():
    # Cross-check is_convex against the definition on every subset of a
    # small graph: S is convex iff no node outside S is both reachable from S
    # and able to reach S.
    g = random_dag(9, seed=7, fan_in=2, window=4)
    nodes = list(g)
    for r in range(len(nodes) + 1):
        for subset in itertools.combinations(nodes, r):
            s = set(subset)
            between = {
                x for x in g if x not in s
                and any(nx.has_path(g, a, x) for a in s)
                and any(nx.has_path(g, x, b) for b in s)
            }
            assert is_convex(g, s) == (not between)


def test_5000_nodes_is_fast():
    g = random_dag(5000, seed=11, fan_in=3, window=300)
    rng = random.Random(11)
    sup = {n for n in g if rng.random() < 0.9}
    start = time.perf_counter()
    sets = select_subgraphs(g, sup)
    elapsed = time.perf_counter() - start
    assert quotient_is_acyclic(g, sets)
    assert elapsed < 5.0, f"select_subgraphs took {elapsed:.2f}s on 5000 nodes"
