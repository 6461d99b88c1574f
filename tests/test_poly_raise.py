"""The polyhedral pass, first stages: raising generated C into isl, exact dependences."""
import islpy as isl
import numpy as np
import pytest

from harness import load_graph_def, make_graph_def, tf
from rstf.codegen import generate_subgraph
from rstf.poly import NotRaisable, compute_dependences, raise_subgraph, violated

rng = np.random.RandomState(0)


def small():
    x = tf.compat.v1.placeholder(tf.float32, [1, 9, 9, 3], name="x")
    y = tf.nn.conv2d(x, rng.randn(3, 3, 3, 4).astype(np.float32), strides=2, padding="SAME")
    y = tf.nn.relu(tf.nn.bias_add(y, rng.randn(4).astype(np.float32)))
    y = tf.nn.max_pool2d(y, 3, 2, "SAME")
    y = tf.concat([y, tf.nn.avg_pool2d(y, 2, 1, "SAME")], -1)
    y = tf.reshape(y, [1, 72])
    tf.nn.softmax(tf.matmul(y, rng.randn(72, 5).astype(np.float32)), name="out")


@pytest.fixture(scope="module")
def scop():
    g = load_graph_def(make_graph_def(small), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    sg = generate_subgraph(g, nodes, 0)
    return raise_subgraph(sg.source, sg.entry)


def count(s: isl.Set) -> int:
    return s.count_val().to_python()


def by_node(scop, op):
    return [s for s in scop.statements if s.node.endswith(f"({op})")]


def test_statements_and_domains(scop):
    conv_init, conv_update = by_node(scop, "Conv2D")
    assert count(conv_init.domain) == 1 * 5 * 5 * 4
    # SAME padding: the guards remove the taps outside the 9x9 input.
    in_bounds = sum(1 for oh in range(5) for kh in range(3) if 0 <= 2 * oh + kh - 1 < 9) ** 2
    assert count(conv_update.domain) == in_bounds * 3 * 4
    assert len(by_node(scop, "Softmax")) == 6  # max init/update, exp, sum init/update, div
    read = isl.Map("{ S1[n, oh, ow, kh, kw, ic, oc] -> in0[n, 2oh + kh - 1, 2ow + kw - 1, ic] }")
    assert any(r.is_subset(read.intersect_domain(conv_update.domain)) and
               not r.is_empty() for r in conv_update.reads)


def test_flow_dependences_cross_ops_and_views(scop):
    deps = compute_dependences(scop)
    conv_update = by_node(scop, "Conv2D")[1]
    bias = by_node(scop, "BiasAdd")[0]
    reshape = by_node(scop, "Reshape")[0]
    concat = by_node(scop, "ConcatV2")
    raw = deps.raw

    def edge(a, b):
        return not raw.intersect_domain(isl.UnionSet.from_set(a.domain)).intersect_range(
            isl.UnionSet.from_set(b.domain)).is_empty()

    assert edge(conv_update, bias)
    # Reshape views its input flat: the concat's 4-D writes reach it through the linearised
    # buffer, exactly.
    assert any(edge(c, reshape) for c in concat)
    assert violated(deps, scop.schedule) == []  # the original order is legal


def test_illegal_schedule_is_refused(scop):
    """Running the bias add before the convolution would break flow dependences."""
    deps = compute_dependences(scop)
    bias = by_node(scop, "BiasAdd")[0]
    sched = isl.UnionMap("{ }")
    for s in scop.statements:
        m = s.schedule
        if s is bias:
            m = _move_first(m, -1)
        sched = sched.union(isl.UnionMap.from_map(m))
    assert "raw" in violated(deps, sched)


def _move_first(m: isl.Map, value: int) -> isl.Map:
    """The same schedule with its first (call order) time dimension replaced by `value`."""
    n = m.dim(isl.dim_type.out)
    names = [f"t{i}" for i in range(n)]
    shift = isl.Map(f"{{ [{', '.join(names)}] -> [{value}, {', '.join(names[1:])}] }}")
    return m.apply_range(shift)


@pytest.mark.parametrize("body,needle", [
    ("for (int i = 0; i < 4; ++i) { y[i * i] = x[i]; }", "not affine"),
    ("for (int i = 0; i < 4; ++i) { if (x[i] > 0.0f) { y[i] = x[i]; } }", "not affine"),
    ("int i = 0; while (i < 4) { y[i] = x[i]; i = i + 1; }", "outside the raisable subset"),
    ("for (int i = 0; i < 4; i += 2) { y[i] = x[i]; }", "'for' must be"),
])
def test_outside_the_subset_is_refused_precisely(body, needle):
    src = (f"static void op_0(const float x[restrict 4], float y[restrict 16])\n{{\n{body}\n}}\n"
           "void rstf_sg_0(const float *in0, float *out0, void *ws)\n{\n"
           "/* n (Op) */\nop_0((const float *)in0, (float *)out0);\n}\n")
    with pytest.raises(NotRaisable, match=needle) as e:
        raise_subgraph(src, "rstf_sg_0")
    assert "line " in str(e.value)


# ------------------------------------------------------------------ parallel loops
def _loops(scop, **kw):
    from rstf.poly.parallel import find_parallel_loops

    return find_parallel_loops(scop, compute_dependences(scop), **kw)


def test_parallel_loops_respect_dependences(scop):
    loops = _loops(scop, min_work=0)
    by_fn = {}
    for lp in loops:
        by_fn.setdefault(lp.function, []).append(lp)
    conv_fn = by_node(scop, "Conv2D")[0].function
    conv = {lp.iterator: lp for lp in by_fn[conv_fn] if lp.line > 0}
    # Output loops carry nothing; the reduction loops (kh, kw, ic) carry the += chain.
    assert all(lp.parallel for lp in by_fn[conv_fn] if lp.iterator in ("oh", "ow", "oc"))
    assert not any(lp.parallel for lp in by_fn[conv_fn] if lp.iterator in ("kh", "kw", "ic"))
    assert conv["oh"].chosen  # n has one iteration: oh is the outermost useful loop
    matmul_fn = by_node(scop, "MatMul")[0].function
    assert not any(lp.parallel for lp in by_fn[matmul_fn] if lp.iterator == "k")
    # Softmax: the row-max and row-sum updates carry a dependence along c.
    sm_fn = by_node(scop, "Softmax")[0].function
    carried = [lp for lp in by_fn[sm_fn] if lp.iterator == "c" and not lp.parallel]
    assert len(carried) == 2 and not any(lp.chosen for lp in carried)


def test_poly_output_equals_unoptimized_bitwise():
    """Every op family, with every parallelisable loop marked and 2 OpenMP threads: the
    results are bit-identical to the sequential textbook code."""
    import os

    from rstf.cexec import run_subgraph_c
    from rstf.poly.parallel import mark_source

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2, 16, 16, 4], name="x")
        y = tf.nn.conv2d(x, rng.randn(3, 3, 4, 8).astype(np.float32), 1, "SAME")
        y = tf.nn.relu6(tf.nn.bias_add(y, rng.randn(8).astype(np.float32)))
        d = tf.raw_ops.DepthwiseConv2dNative(input=y, filter=rng.randn(3, 3, 8, 2).astype(
            np.float32), strides=[1, 2, 2, 1], padding="SAME")
        p = tf.concat([tf.nn.max_pool2d(d, 3, 1, "SAME"), tf.nn.avg_pool2d(d, 3, 1, "SAME")], -1)
        p = tf.pad(p, [[0, 0], [1, 1], [1, 1], [0, 0]])
        m = tf.reduce_mean(p, [1, 2]) + tf.reduce_max(p, [1, 2])
        t = tf.transpose(tf.reshape(m, [2, 4, 8]), [0, 2, 1])
        tf.nn.softmax(tf.matmul(tf.reshape(t, [2, 32]), rng.randn(32, 10).astype(np.float32)),
                      name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    sg = generate_subgraph(g, nodes, 0)
    scop = raise_subgraph(sg.source, sg.entry)
    loops = _loops(scop, min_work=0)
    assert sum(lp.chosen for lp in loops) >= 10
    x = rng.randn(2, 16, 16, 4).astype(np.float32)
    inputs = {s.tensor: (x if s.tensor == "x:0" else g.const_value(s.tensor)) for s in sg.inputs}
    ref = run_subgraph_c(sg, inputs)
    os.environ["OMP_NUM_THREADS"] = "2"
    sg.source = mark_source(sg.source, loops)
    assert sg.source.count("#pragma omp parallel for") == sum(lp.chosen for lp in loops)
    got = run_subgraph_c(sg, inputs)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
