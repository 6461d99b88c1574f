"""Versioned placement (rstf/poly/versioning.py): SPECIALIZE, TREE-GEN and the dispatch C.

The tree properties are the paper's Lemmas 4.1-4.3 (static-versioning.txt §4.3.2); the
dispatch is compiled and run at, just below and just above every threshold.
"""
import ctypes
import os
import subprocess
import tempfile

import islpy as isl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstf.poly.versioning import (Call, Cnd, PlacedStatement, constraints_of, dispatch_c,
                                  paths, place, preprocess, tree_gen, use_tree)


def _fc():
    return [PlacedStatement("S", isl.Set("[Q, P] -> { S[i, j, k] : 0 <= i, j, k < Q }"), [0, 1])]


def _conv(h=112):
    return [PlacedStatement("C", isl.Set(f"[B, P] -> {{ C[n, o, y, x] : 0 <= n < B and "
                                         f"0 <= o < 64 and 0 <= y < {h} and 0 <= x < {h} }}"),
                            [0, 1, 2, 3])]


def _point_in(ctx: isl.BasicSet, **values) -> bool:
    names = ctx.get_space().get_var_names(isl.dim_type.param)
    fixed = ctx
    for i, n in enumerate(names):
        fixed = fixed.fix_val(isl.dim_type.param, i, isl.Val(values[n]))
    return not fixed.is_empty()


def test_fc_specializes_on_occupancy():
    base = isl.Set("[Q, P] -> { : Q >= 1 and P >= 1 }")
    v = place(_fc(), base, occupancy=1)
    assert [x.placement["S"] for x in v] == [0, None]  # parallel i, or sequential
    assert v[1].parent == 0
    assert _point_in(v[0].context, Q=4, P=4) and not _point_in(v[0].context, Q=3, P=4)
    assert _point_in(v[1].context, Q=3, P=4)
    v2 = place(_fc(), base, occupancy=2)
    assert _point_in(v2[0].context, Q=8, P=4) and _point_in(v2[1].context, Q=7, P=4)


def test_without_specialize_one_version_assumes_large():
    base = isl.Set("[Q, P] -> { : Q >= 1 and P >= 1 }")
    v = place(_fc(), base, specialize=False)
    assert len(v) == 1 and v[0].placement["S"] == 0 and v[0].context.is_universe()


def test_no_version_when_decided_statically():
    base = isl.Set("[B, P] -> { : B >= 1 and P >= 1 and P <= 16 and B >= 64 }")
    v = place(_conv(), base)
    assert len(v) == 1 and v[0].placement["C"] == 0


def test_conv_falls_to_inner_loops_then_sequential():
    base = isl.Set("[B, P] -> { : B >= 1 and P >= 1 }")
    v = place(_conv(), base)
    # batch, then 64 channels, then 112 rows, then nothing: four disjoint contexts.
    assert [x.placement["C"] for x in v] == [0, 1, 2, None]
    for i, a in enumerate(v):
        for b in v[i + 1:]:
            assert a.context.intersect(b.context).is_empty()
    union = v[0].context
    for x in v[1:]:
        union = union.union(x.context)
    assert base.is_subset(union)  # exactly one version for any parameter values


def _check_lemmas(contexts):
    tree = tree_gen(contexts, collapse_ifs=False)  # one constraint per Cnd, as in the lemmas
    keep = preprocess(contexts)
    leaf_paths = paths(tree)
    assert sorted(leaf_paths) == sorted(keep)  # every version reachable
    n = len(keep)
    space = contexts[keep[0]].get_space()
    for i, path in leaf_paths.items():
        ctx = contexts[i]
        # Lemma 4.2: every constraint of the context is on the path, taken as true, and the
        # true conditions describe exactly the context.
        taken = isl.BasicSet.universe(space)
        for c, truth in path:
            if truth:
                taken = taken.add_constraint(c)
        assert taken.is_equal(ctx)
        # Lemma 4.3: path length <= n(s) + #(C_i).
        assert len(path) <= n + len(constraints_of(ctx))
    return tree


def test_tree_lemmas_on_conv_family():
    base = isl.Set("[B, P] -> { : B >= 1 and P >= 1 }")
    v = place(_conv(), base)
    tree = _check_lemmas([x.context for x in v])
    assert isinstance(tree, Cnd)


def test_preprocess_drops_empty_and_duplicates():
    a = isl.BasicSet("[N, P] -> { : N >= P }")
    b = isl.BasicSet("[N, P] -> { : P >= N + 1 }")
    empty = isl.BasicSet("[N, P] -> { : N >= P and P >= N + 1 }")
    assert preprocess([a, empty, b, isl.BasicSet("[N, P] -> { : P <= N }")]) == [0, 2]
    tree = tree_gen([a, empty, b])
    assert sorted(paths(tree)) == [0, 2]


def test_tree_collapses_nested_ifs():
    a = isl.BasicSet("[N, P] -> { : N >= P and N <= 100 }")
    b = isl.BasicSet("[N, P] -> { : P >= N + 1 }")
    tree = tree_gen([a, b])
    # One leaf's conditions are joined into a conjunction: no Cnd with a lone Cnd child.
    def walk(node):
        if isinstance(node, Call):
            return
        assert not (isinstance(node.then, Cnd) and node.then.orelse is None
                    and node.orelse is None)
        walk(node.then)
        if node.orelse is not None:
            walk(node.orelse)
    walk(tree)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=4, unique=True),
       st.sampled_from([1, 2, 0.5]))
def test_tree_lemmas_random_families(extents, occupancy):
    """Nests whose loops have these static extents under a parametric batch."""
    dims = ", ".join(f"i{k}" for k in range(len(extents)))
    cons = " and ".join(f"0 <= i{k} < {e}" for k, e in enumerate(extents))
    s = PlacedStatement("S", isl.Set(f"[B, P] -> {{ S[b, {dims}] : 0 <= b < B and {cons} }}"),
                        list(range(len(extents) + 1)))
    v = place([s], isl.Set("[B, P] -> { : B >= 1 and P >= 1 }"), occupancy)
    _check_lemmas([x.context for x in v])


def _dispatcher(contexts, params):
    """Compile dispatch_c into `int pick(long <params>)` returning the version index."""
    body = dispatch_c(contexts, lambda i: f"return {i};")
    src = f"int pick({', '.join('long ' + p for p in params)})\n{{\n{body}    return -1;\n}}\n"
    d = tempfile.mkdtemp()
    c, so = os.path.join(d, "d.c"), os.path.join(d, "d.so")
    with open(c, "w") as f:
        f.write(src)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", c, "-o", so], check=True)
    lib = ctypes.CDLL(so)
    lib.pick.restype = ctypes.c_int
    lib.pick.argtypes = [ctypes.c_long] * len(params)
    return lib.pick, src


@pytest.mark.parametrize("occupancy", [1, 2])
def test_dispatch_picks_right_version_at_thresholds(occupancy):
    base = isl.Set("[B, P] -> { : B >= 1 and P >= 1 }")
    v = place(_conv(h=12), base, occupancy)
    contexts = [x.context for x in v]
    pick, src = _dispatcher(contexts, ["B", "P"])
    assert "omp" not in src
    # Thresholds: B = c*P (batch), c*P = 64 (channels), c*P = 12 (rows).
    for p in range(1, 70):
        cp = occupancy * p
        for b in {1, max(1, cp - 1), cp, cp + 1, 100}:
            want = [i for i, ctx in enumerate(contexts) if _point_in(ctx, B=b, P=p)]
            assert len(want) == 1, (b, p)
            assert pick(b, p) == want[0], (b, p, src)


def test_dispatch_chain_or_tree_by_inequality():
    base = isl.Set("[Q, P] -> { : Q >= 1 and P >= 1 }")
    contexts = [x.context for x in place(_fc(), base)]
    assert not use_tree(contexts)  # two versions, one constraint each: the chain is cheaper
    src = dispatch_c(contexts, lambda i: f"v{i}();")
    assert "} else if (" in src
    many = [isl.BasicSet(f"[N, P] -> {{ : N >= {k} and N <= {k} + 9 and P >= 1 and P <= 4 }}")
            for k in range(0, 80, 10)]
    assert use_tree(many)
    pick, _ = _dispatcher(many, ["N", "P"])
    for n in range(0, 80):
        assert pick(n, 2) == n // 10
    assert pick(85, 2) == -1 and pick(5, 9) == -1
