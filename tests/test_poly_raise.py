"""The polyhedral pass, first stages: raising generated C into isl, exact dependences,
schedule legality (rstf/poly/raise_c.py, rstf/poly/deps.py), then the parallel-loop stage."""
import re

import islpy as isl
import numpy as np
import pytest

from harness import load_graph_def, make_graph_def, tf
from rstf.cgen.codegen import generate_subgraph
from rstf.poly import (NotRaisable, check_schedule_legal, compute_dependences, raise_subgraph,
                       violated)
from rstf.poly.cparse import c_text, multiply_add

rng = np.random.RandomState(0)


def small():
    """Every op family of the raise: conv with SAME padding guards, bias (broadcast), relu,
    max/avg pools, concat, mean + broadcast subtract, reshape (a view: no statement of its
    own, the matmul reads the Sub's buffer as [1][72]), matmul, broadcast multiply,
    softmax."""
    x = tf.compat.v1.placeholder(tf.float32, [1, 9, 9, 3], name="x")
    y = tf.nn.conv2d(x, rng.randn(3, 3, 3, 4).astype(np.float32), strides=2, padding="SAME")
    y = tf.nn.relu(tf.nn.bias_add(y, rng.randn(4).astype(np.float32)))
    p = tf.nn.max_pool2d(y, 3, 2, "SAME")
    cat = tf.concat([p, tf.nn.avg_pool2d(p, 2, 1, "SAME")], -1)
    centred = cat - tf.reduce_mean(cat, [1, 2], keepdims=True)
    a = tf.matmul(tf.reshape(centred, [1, 72]), rng.randn(72, 5).astype(np.float32))
    tf.nn.softmax(a * rng.randn(5).astype(np.float32), name="out")


@pytest.fixture(scope="module")
def code():
    g = load_graph_def(make_graph_def(small), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    return generate_subgraph(g, nodes, 0)


@pytest.fixture(scope="module")
def scop(code):
    return raise_subgraph(code.source, code.entry)


@pytest.fixture(scope="module")
def deps(scop):
    return compute_dependences(scop)


def count(s: isl.Set) -> int:
    return s.count_val().to_python()


def by_op(scop, op):
    return [s for s in scop.statements if s.op == op]


def one(scop, op, k=0):
    return by_op(scop, op)[k]


def dep(deps, a, b, kind="raw") -> isl.Map:
    m = deps.between(a.name, b.name, kind)
    return m if m is not None else isl.Map("{ [] -> [] : false }")


# ------------------------------------------------------------------ raise


def test_statements_per_op(scop):
    counts = {}
    for s in scop.statements:
        counts[s.op] = counts.get(s.op, 0) + 1
    assert counts == {"Conv2D": 2, "BiasAdd": 1, "Relu": 1, "MaxPool": 2, "AvgPool": 3,
                      "ConcatV2": 2, "Mean": 3, "Sub": 1, "MatMul": 2,
                      "Mul": 1, "Softmax": 8}
    # Softmax over 5 classes: max init/update, exp, sum init/update/+0 (TensorFlow's order,
    # a row shorter than a packet), the reciprocal, the product.
    assert [s.name for s in scop.statements] == [f"S{k}" for k in range(len(scop.statements))]
    assert one(scop, "Softmax").node == "out" and one(scop, "Conv2D").node == "Conv2D"
    assert [c.op for c in scop.calls][:3] == ["Conv2D", "BiasAdd", "Relu"]


def test_unguarded_domains_are_the_loop_trip_products(code, scop):
    """Checked against the C text itself: each 'for' line's constant bounds."""
    lines = code.source.splitlines()
    for s in scop.statements:
        if s.guards:
            continue
        trips = 1
        for ln in s.loop_lines:
            m = re.search(r"for \(int (\w+) = (\d+); \1 < (\d+); \+\+\1\)", lines[ln - 1])
            trips *= int(m.group(3)) - int(m.group(2))
        assert count(s.domain) == trips, s.name


def _taps(out, k, stride, pad, size):
    return sum(1 for o in range(out) for t in range(k) if 0 <= o * stride + t - pad < size)


def test_guarded_domains(scop):
    conv = one(scop, "Conv2D", 1)
    assert len(conv.guards) == 4 and conv.iterators == ["n", "oh", "ow", "kh", "kw", "ic",
                                                        "oc"]
    assert count(conv.domain) == _taps(5, 3, 2, 1, 9) ** 2 * 3 * 4
    assert count(one(scop, "MaxPool", 1).domain) == _taps(3, 3, 2, 1, 5) ** 2 * 4
    assert count(one(scop, "AvgPool", 1).domain) == _taps(3, 2, 1, 0, 3) ** 2 * 4


def test_access_relations(scop):
    conv = one(scop, "Conv2D", 1)
    x = isl.Map("{ S1[n, oh, ow, kh, kw, ic, oc] -> in0[n, 2oh + kh - 1, 2ow + kw - 1, ic] }")
    w = isl.Map("{ S1[n, oh, ow, kh, kw, ic, oc] -> in1[kh, kw, ic, oc] }")
    y = isl.Map("{ S1[n, oh, ow, kh, kw, ic, oc] -> t0[n, oh, ow, oc] }")
    reads = isl.UnionMap("{ }")
    for r in conv.reads:
        reads = reads.union(isl.UnionMap.from_map(r))
    expect = isl.UnionMap("{ }")
    for m in (x, w, y):  # the step y = fmaf(x, w, y) reads its accumulator
        expect = expect.union(isl.UnionMap.from_map(m.intersect_domain(conv.domain)))
    assert reads.is_equal(expect)
    assert len(conv.writes) == 1 and conv.writes[0].is_equal(y.intersect_domain(conv.domain))
    # No access leaves its array: the guards keep the padded window inside the 9x9 input.
    assert conv.reads[0].range().is_subset(isl.Set("{ in0[0, h, w, c] : 0 <= h < 9 and "
                                                   "0 <= w < 9 and 0 <= c < 3 }"))
    # Broadcasting: the Sub reads the mean at [n, 0, 0, c]; the Mul the [5] vector at [c].
    sub, mul = one(scop, "Sub"), one(scop, "Mul")
    assert any(r.is_equal(isl.Map("{ S14[0, h, w, c] -> t6[0, 0, 0, c] : 0 <= h < 3 and "
                                  "0 <= w < 3 and 0 <= c < 8 }")) for r in sub.reads)
    assert any(r.is_equal(isl.Map("{ S17[0, c] -> in4[c] : 0 <= c < 5 }")) for r in mul.reads)
    # The statement's AST and accesses are kept for re-emission.
    assert c_text(conv.ast) == ("y[n][oh][ow][oc] = fmaf(x[n][oh * 2 + kh - 1][ow * 2 + kw - 1][ic], "
                              "w[kh][kw][ic][oc], y[n][oh][ow][oc])")
    assert [c_text(f) for f in multiply_add(conv.ast)] == [
        "x[n][oh * 2 + kh - 1][ow * 2 + kw - 1][ic]", "w[kh][kw][ic][oc]"]
    assert [a.param for a in conv.accesses] == ["x", "w", "y", "y"]


def test_buffers_views_and_workspace_offsets(scop):
    b = scop.arrays
    assert b["in0"].role == "input" and b["out0"].role == "output" and b["t0"].role == "temp"
    assert b["in0"].shape == (1, 9, 9, 3) and not b["in0"].linearised
    # The Sub's output is viewed [1][3][3][8] by the Sub and [1][72] by the MatMul, through
    # the Reshape, a view of the same bytes: flat.
    sub_out = one(scop, "Sub").writes[0].get_tuple_name(isl.dim_type.out)
    assert b[sub_out].linearised and b[sub_out].shape == (72,)
    assert b[sub_out].views == ((1, 3, 3, 8), (1, 72))
    # Temporaries sharing workspace bytes stay distinct arrays; the offsets are recorded.
    assert b["t0"].offset == b["t2"].offset == 0
    assert scop.context.is_equal(isl.Set("{ : }")) and scop.params == []


def test_original_schedule_is_2d_plus_1_textual_order(scop):
    depth = max(2 * s.depth + 1 for s in scop.statements)
    times = []
    for s in scop.statements:
        assert s.schedule.dim(isl.dim_type.out) == depth
        assert len(s.path) == 2 * s.depth + 1
        assert list(s.path[1::2]) == s.iterators
        times.append(s.schedule.intersect_domain(s.domain).range().lexmin())
    # Statements' first instances run in textual order.
    for a, b in zip(times, times[1:]):
        assert a.lex_lt_set(b).is_equal(isl.Map.from_domain_and_range(a, b))
    assert scop.schedule_tree().get_domain().is_equal(scop.domain)


def test_raise_ignores_pragmas(code, scop):
    marked = code.source.replace("    for (", "    #pragma omp parallel for\n    for (")
    assert marked.count("#pragma omp") > 3
    assert len(raise_subgraph(marked, code.entry).statements) == len(scop.statements)


# ------------------------------------------------------------------ dependences


def test_flow_dependences_between_ops_are_exact(scop, deps):
    conv, bias = one(scop, "Conv2D", 1), one(scop, "BiasAdd")
    d = dep(deps, conv, bias)
    # Each bias-add instance reads the last conv update of its element: the last tap in
    # bounds (ic = 2; kh = 2 except the bottom row oh = 4, whose kh = 2 tap is padding).
    assert d.reverse().is_single_valued() and d.range().is_equal(bias.domain)
    assert d.is_equal(isl.Map(
        "{ S1[0, oh, ow, kh, kw, 2, oc] -> S2[0, oh, ow, oc] : 0 <= oh < 5 and 0 <= ow < 5 "
        "and 0 <= oc < 4 and (oh < 4 and kh = 2 or oh = 4 and kh = 1) "
        "and (ow < 4 and kw = 2 or ow = 4 and kw = 1) }"))
    assert dep(deps, one(scop, "Conv2D", 0), bias).is_empty()  # killed by the updates
    assert not dep(deps, bias, one(scop, "Relu")).is_empty()


def test_flow_through_a_flat_view(scop, deps):
    """The Sub writes [1][3][3][8], the MatMul reads the same buffer as [1][72] (the
    Reshape between them is a view, no copy): the dependence is exact element by element
    through the linearised buffer."""
    sub, matmul = one(scop, "Sub"), one(scop, "MatMul", 1)
    assert "Reshape" not in {s.op for s in scop.statements}
    assert dep(deps, sub, matmul).is_equal(isl.Map(
        "{ S14[0, h, w, c] -> S16[0, k, j] : k = 24h + 8w + c and 0 <= h < 3 and 0 <= w < 3 "
        "and 0 <= c < 8 and 0 <= j < 5 }"))
    # The two concat statements feed the mean and the Sub; only the second, channels 4..7.
    cat0, cat1 = by_op(scop, "ConcatV2")
    assert not dep(deps, cat0, sub).is_empty() and not dep(deps, cat1, one(scop, "Mean", 1)
                                                            ).is_empty()
    assert dep(deps, cat1, sub).range().is_equal(isl.Set(
        "{ S14[0, h, w, c] : 0 <= h < 3 and 0 <= w < 3 and 4 <= c < 8 }"))


def test_anti_output_and_input_dependences(scop, deps):
    init, update = by_op(scop, "MatMul")
    assert dep(deps, init, update, "waw").is_equal(isl.Map(
        "{ S15[0, j] -> S16[0, 0, j] : 0 <= j < 5 }"))
    assert dep(deps, update, update, "war").is_equal(isl.Map(
        "{ S16[0, k, j] -> S16[0, k + 1, j] : 0 <= k < 71 and 0 <= j < 5 }"))
    # Temporaries sharing bytes are distinct arrays: no false WAW between conv and relu.
    assert dep(deps, one(scop, "Conv2D", 1), one(scop, "Relu"), "waw").is_empty()
    # Input dependences (reuse): overlapping conv windows; the pool output read twice.
    conv = one(scop, "Conv2D", 1)
    assert not dep(deps, conv, conv, "rar").is_empty()
    avg, cat0 = one(scop, "AvgPool", 1), one(scop, "ConcatV2", 0)
    assert not dep(deps, avg, cat0, "rar").is_empty()


def test_tree_and_map_schedules_give_the_same_dependences(scop, deps):
    info = isl.UnionAccessInfo.from_sink(scop.reads).set_must_source(scop.writes)
    raw = info.set_schedule_map(scop.schedule).compute_flow().get_must_dependence()
    assert raw.is_equal(deps.raw)


# ------------------------------------------------------------------ legality


def _schedule(scop, replace: dict) -> isl.UnionMap:
    """The original schedule with some statements' maps replaced (text)."""
    u = isl.UnionMap("{ }")
    for s in scop.statements:
        m = isl.Map(replace[s.name]) if s.name in replace else s.schedule
        u = u.union(isl.UnionMap.from_map(m))
    return u


def test_original_schedule_is_legal(scop, deps):
    assert check_schedule_legal(scop, deps, scop.schedule) == []
    assert violated(deps, scop.schedule) == []


def test_running_a_consumer_first_is_refused(scop, deps):
    """The bias add moved before the convolution breaks its flow dependence."""
    conv, bias = one(scop, "Conv2D", 1), one(scop, "BiasAdd")
    moved = _schedule(scop, {bias.name: "{ S2[a, b, c, d] -> [-1, a, 0, b, 0, c, 0, d, 0] }"})
    bad = check_schedule_legal(scop, deps, moved)
    assert any(v.kind == "raw" and (v.source, v.sink) == (conv.name, bias.name) for v in bad)
    assert "raw" in violated(deps, moved)


def test_legal_and_illegal_loop_transformations(scop, deps):
    # Interchanging the bias add's loops, and fusing the relu into its loop nest: legal.
    ok = _schedule(scop, {"S2": "{ S2[a, b, c, d] -> [2, a, 0, c, 0, b, 0, d, 0] }",
                          "S3": "{ S3[a, b, c, d] -> [2, a, 0, c, 0, b, 0, d, 1] }"})
    assert check_schedule_legal(scop, deps, ok) == []
    # Reversing the matmul's k loop reorders its += chain: exact dependences refuse it.
    rev = _schedule(scop, {"S16": "{ S16[i, k, j] -> [13, i, 0, -k, 0, j, 0] }"})
    kinds = {(v.kind, v.source, v.sink) for v in check_schedule_legal(scop, deps, rev)}
    assert ("raw", "S16", "S16") in kinds and ("waw", "S16", "S16") in kinds


# ------------------------------------------------------------------ outside the subset

_OP = "static void op_0(const float x[restrict 4], float y[restrict 16])\n{{\n{body}\n}}\n"
_ENTRY = ("void rstf_sg_0(const float *in0, float *out0, void *ws)\n{{\n{decls}"
          "/* n (Op) */\nop_0((const float *)in0, (float *)out0);\n{extra}}}\n")


@pytest.mark.parametrize("body,message", [
    ("for (int i = 0; i < 4; ++i) { y[i * i] = x[i]; }",
     "line 3: subscript 'y[i * i]' is not affine"),
    ("for (int i = 0; i < 4; ++i) { y[abs(i)] = x[i]; }",
     "line 3: subscript 'y[abs(i)]' is not affine (function call)"),
    ("for (int i = 0; i < 4; ++i) { if (x[i] > 0.0f) { y[i] = x[i]; } }",
     "line 3: condition 'x[i] > 0.0f' is not affine"),
    ("for (int i = 0; i < 4; ++i) { if (i > 0 || i < 2) { y[i] = x[i]; } }",
     "line 3: condition 'i > 0 || i < 2' is not a conjunction"),
    ("for (int i = 0; i < 4; ++i) { if (i > 0) { y[i] = x[i]; } else { y[i] = 0; } }",
     "line 3: 'if' with an 'else' branch"),
    ("int i = 0; while (i < 4) { y[i] = x[i]; i = i + 1; }",
     "line 3: local declaration in op_0 is outside the raisable subset"),
    ("while (1) { y[0] = x[0]; }", "line 3: 'while' loop in op_0 is outside"),
    ("for (int i = 0; i < 4; ++i) { y[i] = x[i]; } goto end; end: ;", "line 3: 'goto'"),
    ("for (int i = 0; i < 4; i += 2) { y[i] = x[i]; }",
     "line 3: 'for' step 'i += 2' of 'i' is not '++i'"),
    ("for (int i = 0; i <= 3; ++i) { y[i] = x[i]; }",
     "line 3: 'for' condition 'i <= 3' is not 'i < upper bound'"),
    ("for (int i = 0; i < 4; ++i) { for (int j = 0; j < i * i; ++j) { y[j] = x[i]; } }",
     "line 3: upper bound 'i * i' of 'j' is not affine"),
    ("for (int i = 0; i < 4; ++i) { *(y + i) = x[i]; }",
     "line 3: assignment to '*(y + i)', not to an array element"),
    ("for (int i = 0; i < 4; ++i) { y[i] = *(x + i); }", "line 3: '*(x + i)'"),
    ("for (int i = 0; i < 4; ++i) { y[i] = foo(x[i]); }", "line 3: call to 'foo'"),
    ("for (int i = 0; i < 4; ++i) { y[x[i]] = 1.0f; }",
     "line 3: subscript 'y[x[i]]' is not affine (array element (data-dependent))"),
])
def test_outside_the_subset_is_refused_precisely(body, message):
    src = _OP.format(body=body) + _ENTRY.format(decls="", extra="")
    with pytest.raises(NotRaisable) as e:
        raise_subgraph(src, "rstf_sg_0")
    assert str(e.value).startswith(message), str(e.value)


def test_entry_function_outside_the_subset():
    op = _OP.format(body="for (int i = 0; i < 4; ++i) { y[i] = x[i]; }")
    with pytest.raises(NotRaisable, match=r"line 9: Assignment in the entry function"):
        raise_subgraph(op + _ENTRY.format(decls="", extra="out0[0] = 1.0f;\n"), "rstf_sg_0")
    arith = re.escape("line 8: argument '((float *) out0) + 1' is not a (cast) buffer")
    with pytest.raises(NotRaisable, match=arith):
        raise_subgraph(op + _ENTRY.format(decls="", extra="").replace(
            "(float *)out0", "(float *)out0 + 1"), "rstf_sg_0")
    with pytest.raises(NotRaisable, match="no entry function"):
        raise_subgraph(op, "rstf_sg_0")


# ------------------------------------------------------------------ parameters

PARAMETRIC = """
static void op_0(int n, const float x[restrict n][4], float y[restrict n][4])
{
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < 4; ++j) {
            y[i][j] = x[i][j] * 2.0f;
        }
    }
}
static void op_1(int n, const float x[restrict n][4], float y[restrict n])
{
    for (int i = 0; i < n; ++i) {
        y[i] = 0.0f;
        for (int j = 0; j < 4; ++j) {
            if (j >= 1 && i + j < n + 2) {
                y[i] += x[i][j];
            }
        }
    }
}
void sg(const float *in0, float *out0, int N, void *ws)
{
    float *t0 = (float *)((char *)ws + 0);
    /* a (Mul) */
    op_0(N, (const float (*)[4])in0, (float (*)[4])t0);
    /* b (Sum) */
    op_1(N, (const float (*)[4])t0, (float *)out0);
}
"""


def test_int_parameters_become_isl_parameters():
    scop = raise_subgraph(PARAMETRIC, "sg")
    assert scop.params == ["N"] and scop.arrays["t0"].shape == ("N", 4)
    s0, s1, s2 = scop.statements
    assert (s0.node, s0.op, s2.node, s2.op) == ("a", "Mul", "b", "Sum")

    def at(s, n):
        return count(s.domain.fix_val(isl.dim_type.param, 0, n))

    assert at(s0, 5) == 20 and at(s1, 5) == 5 and at(s2, 5) == 4 * 3 + 2
    deps = compute_dependences(scop)
    assert dep(deps, s0, s2).is_equal(isl.Map(
        "[N] -> { S0[i, j] -> S2[i, j] : 0 <= i < N and 1 <= j <= 3 and i + j < N + 2 }"))
    assert check_schedule_legal(scop, deps, scop.schedule) == []


