"""The op generators a BERT encoder needs, against TensorFlow (C run through ctypes):
BatchMatMul, GatherV2, SelectV2, Cast, the comparisons and logical ops, Pow, Erf/Erfc, and
int32 arithmetic on index and mask paths. The out-of-range gather error is checked end to
end, through the op library (it is reported by the TensorFlow wrapper)."""
import numpy as np
import pytest

from harness import (check_against_tf, load_graph_def, make_graph_def, run_generated, run_tf,
                     tf)

rng = np.random.RandomState(4321)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ph(shape, name="x", dtype=tf.float32):
    return tf.compat.v1.placeholder(dtype, shape, name=name)


# ------------------------------------------------------------------ BatchMatMul
BMM_CASES = [
    # a shape, b shape, adj_x, adj_y
    ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (2, 4, 5), True, False),
    ((2, 3, 4), (2, 5, 4), False, True),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((1, 2, 8, 16), (1, 2, 16, 8), False, False),  # [batch, heads, seq, head_dim]: QK^T
    ((2, 3, 4), (4, 5), False, False),  # a rank-2 operand: one matrix for every batch
    ((3, 1, 2, 4), (5, 4, 3), False, False),  # batch dims broadcast both ways
    ((6, 4), (2, 3, 4, 5), False, False),
    ((1, 2, 3), (4, 1, 3, 2), True, True),
]


@pytest.mark.parametrize("sa,sb,ax,ay", BMM_CASES)
def test_batch_matmul_v2(sa, sb, ax, ay):
    a, b = randn(*sa), randn(*sb)

    def build():
        tf.identity(tf.raw_ops.BatchMatMulV2(x=ph(sa, "a"), y=ph(sb, "b"), adj_x=ax, adj_y=ay),
                    name="out")

    check_against_tf(build, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["BatchMatMul", "BatchMatMulV3"])
def test_batch_matmul_v1_v3_constant_weight(op):
    a, w = randn(2, 5, 6), randn(2, 7, 6)

    def build():
        args = dict(x=ph(a.shape, "a"), y=tf.constant(w), adj_y=True)
        if op == "BatchMatMulV3":
            args["Tout"] = tf.float32
        tf.identity(getattr(tf.raw_ops, op)(**args), name="out")

    check_against_tf(build, {"a": a})


# ------------------------------------------------------------------ GatherV2
@pytest.mark.parametrize("params,ids,axis,idt", [
    ((50, 8), (2, 7), 0, tf.int32),  # token embedding: [batch, seq] ids
    ((50, 8), (), 0, tf.int32),  # a scalar index
    ((4, 9, 3), (5,), 1, tf.int64),  # an inner axis, int64 ids
    ((6, 5), (2, 2), -1, tf.int32),  # a negative axis
])
def test_gather_v2(params, ids, axis, idt):
    table = randn(*params)
    rows = params[axis]
    idx = rng.randint(0, rows, ids).astype(idt.as_numpy_dtype)

    def build():
        tf.identity(tf.gather(tf.constant(table), ph(ids, "ids", idt), axis=axis), name="out")

    _, sg = check_against_tf(build, {"ids": idx}, rtol=0.0)
    assert "rstf_index_error(" in sg.source


@pytest.mark.parametrize("params,ids,axis,batch_dims", [
    ((1, 2, 5, 9), (1, 2, 5, 6), 3, 3),  # DeBERTa: take_along_axis over the last axis
    ((3, 7, 4), (3, 5), 1, 1),  # per-sample rows of a computed table
    ((2, 6, 4), (2, 3, 2), 1, -2),  # a negative batch_dims counts from the indices' end
    ((2, 3, 8), (2, 4), 2, 1),  # an axis past the shared ones
])
def test_gather_v2_batch_dims(params, ids, axis, batch_dims):
    """The first batch_dims axes of params and indices are shared; params computed (DeBERTa's
    is a transposed score tensor), indices fed."""
    x = randn(*params)
    idx = rng.randint(0, params[axis], ids).astype(np.int32)

    def build():
        table = tf.nn.relu(ph(params, "x"))  # a computed table, not a Const
        tf.identity(tf.gather(table, ph(ids, "ids", tf.int32), axis=axis,
                              batch_dims=batch_dims), name="out")

    _, sg = check_against_tf(build, {"x": x, "ids": idx}, rtol=0.0)
    assert "rstf_index_error(" in sg.source


def test_gather_int_table_and_isolated():
    """A gather of an int32 table (position ids) works, and is selected alone: its C is
    outside the raisable subset, so it must not drag its neighbours out of the poly pass."""
    from harness import load_graph_def
    from rstf.pipeline import select

    table = np.arange(40, dtype=np.int32).reshape(10, 4)
    idx = np.array([[3, 0, 9]], np.int32)

    def build():
        g = tf.gather(tf.constant(table), ph((1, 3), "ids", tf.int32))
        tf.identity(g * 2 + 1, name="out")

    check_against_tf(build, {"ids": idx}, rtol=0.0)
    sel = select(load_graph_def(make_graph_def(build), outputs=["out"]))
    gathers = [c for c in sel.clusters if any("GatherV2" in n for n in c)]
    assert gathers == [["GatherV2"]], sel.clusters


# ------------------------------------------------------------------ select, cast, compare
def test_select_v2_broadcast():
    c = rng.rand(1, 1, 4, 4) > 0.5
    t, e = randn(2, 3, 4, 4), randn(4)

    def build():
        cond = ph(c.shape, "c", tf.bool)
        tf.identity(tf.raw_ops.SelectV2(condition=cond, t=ph(t.shape, "t"), e=ph(e.shape, "e")),
                    name="out")

    _, sg = check_against_tf(build, {"c": c, "t": t, "e": e}, rtol=0.0)
    # Floats go through the helper that reads both operands (it vectorises: chelpers.SELECTF)
    assert "rstf_selectf(x0[0][0][i2][i3], x1[i0][i1][i2][i3], x2[i3])" in sg.source
    assert "static inline float rstf_selectf" in sg.source


def test_select_v2_keeps_the_other_operands_non_finite_values_out():
    """Both operands are read, one is kept: an inf or NaN in the lane not chosen, as after
    attention's softmax of a fully masked row, never reaches the output."""
    c = np.array([True, False, True, False])
    t = np.array([1.5, np.nan, -np.inf, 2.0], np.float32)
    e = np.array([np.inf, -0.0, np.nan, 3.0], np.float32)

    def build():
        tf.identity(tf.raw_ops.SelectV2(condition=ph((4,), "c", tf.bool), t=ph((4,), "t"),
                                        e=ph((4,), "e")), name="out")

    feeds = {"c": c, "t": t, "e": e}
    gd = make_graph_def(build)
    graph = load_graph_def(gd, outputs=["out"])
    got = run_generated(graph, ["SelectV2", "out"], feeds)[0]["out:0"]
    want = run_tf(gd, feeds, ["out:0"])[0]
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[1]) and not np.isnan(got).any()


def test_select_v2_int32_mask_path():
    """keras-hub's attention mask: int32 padding mask -> bool -> SelectV2 of int32."""
    m = (rng.rand(2, 6) > 0.3).astype(np.int32)

    def build():
        mask = ph(m.shape, "m", tf.int32)
        b = tf.cast(mask, tf.bool)
        y = tf.raw_ops.SelectV2(condition=b, t=mask + 3, e=tf.zeros_like(mask) - 7)
        tf.identity(tf.cast(tf.expand_dims(y, 1), tf.float32), name="out")

    check_against_tf(build, {"m": m}, rtol=0.0)


CASTS = [(tf.float32, tf.int32), (tf.float32, tf.int64), (tf.float32, tf.bool),
         (tf.int32, tf.float32), (tf.int32, tf.bool), (tf.bool, tf.float32),
         (tf.bool, tf.int32), (tf.int64, tf.int32), (tf.int32, tf.int64)]


@pytest.mark.parametrize("src,dst", CASTS)
def test_cast(src, dst):
    x = (randn(3, 5) * 4).round(1)
    x[0, :3] = [0.0, -0.0, -2.7]
    x = x.astype(src.as_numpy_dtype) if src != tf.bool else x > 0

    def build():
        y = tf.cast(ph(x.shape, "x", src), dst)
        # compare in float32: the harness measures errors in floats
        tf.identity(tf.cast(y, tf.float32) if dst != tf.float32 else y, name="out")

    check_against_tf(build, {"x": x}, rtol=0.0)


COMPARES = ["Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual"]


@pytest.mark.parametrize("op", COMPARES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.int32])
def test_compare(op, dtype):
    a = rng.randint(-3, 4, (2, 3, 4)).astype(dtype.as_numpy_dtype)
    b = rng.randint(-3, 4, (4,)).astype(dtype.as_numpy_dtype)
    if dtype == tf.float32:
        a[0, 0, :2] = np.nan  # NaN compares false, except under NotEqual

    def build():
        y = getattr(tf.raw_ops, op)(x=ph(a.shape, "a", dtype), y=ph(b.shape, "b", dtype))
        tf.identity(tf.cast(y, tf.float32), name="out")

    check_against_tf(build, {"a": a, "b": b}, rtol=0.0)


def test_logical_ops():
    a, b = rng.rand(3, 4) > 0.5, rng.rand(4) > 0.5

    def build():
        x, y = ph(a.shape, "a", tf.bool), ph(b.shape, "b", tf.bool)
        z = tf.logical_or(tf.logical_and(x, y), tf.logical_not(x))
        tf.identity(tf.cast(z, tf.float32), name="out")

    check_against_tf(build, {"a": a, "b": b}, rtol=0.0)


# ------------------------------------------------------------------ int32 arithmetic
def test_int32_arithmetic_index_path():
    """Position ids and mask offsets: int32 AddV2, Sub, Mul, Maximum, Neg, ExpandDims."""
    m = rng.randint(0, 2, (2, 5)).astype(np.int32)

    def build():
        x = ph(m.shape, "m", tf.int32)
        y = tf.raw_ops.AddV2(x=x * 3, y=tf.constant(np.arange(5, dtype=np.int32))) - 1
        y = tf.maximum(-y, -4)
        tf.identity(tf.cast(tf.expand_dims(y, 1), tf.float32), name="out")

    check_against_tf(build, {"m": m}, rtol=0.0)


# ------------------------------------------------------------------ Pow, Erf, Erfc
@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, 1.0, 0.0, -0.5, -1.0, 1.7, -1.5])
def test_pow_constant_exponent(exponent):
    x = np.abs(randn(4, 33)) + 0.1
    x[0, :4] = [0.0 if exponent > 0 else 0.25, 1.0, 7.5, 1e-3]  # 0^-1.5 is inf

    def build():
        tf.identity(tf.pow(ph(x.shape), tf.constant(exponent, tf.float32)), name="out")

    check_against_tf(build, {"x": x}, rtol=3e-7)


def test_pow_runtime_exponent_broadcast():
    x, e = np.abs(randn(3, 5)) + 0.5, randn(5)

    def build():
        tf.identity(tf.pow(ph(x.shape), ph(e.shape, "e")), name="out")

    check_against_tf(build, {"x": x, "e": e}, rtol=3e-7)


def test_pow_half_special_values():
    """x^0.5 in a TensorFlow graph is Sqrt (Grappler's ConvertPow): -0 gives -0 and -inf NaN,
    where powf would give +0 and +inf; the generated C agrees with the graph bit for bit."""
    x = np.array([-0.0, -np.inf, np.inf, 4.0, 0.0, 2.0], np.float32)

    def build():
        tf.identity(tf.pow(ph(x.shape), tf.constant(0.5)), name="out")

    from harness import load_graph_def, run_generated, run_tf

    gd = make_graph_def(build)
    graph = load_graph_def(gd, outputs=["out"])
    nodes = [n for n in graph.topo_order() if graph.nodes[n].op not in ("Const", "Placeholder")]
    got = run_generated(graph, nodes, {"x": x})[0]["out:0"]
    ref = run_tf(gd, {"x": x}, ["out:0"])[0]
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(ref[0]))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", [tf.math.erf, tf.math.erfc, tf.math.tanh])
def test_erf_erfc_tanh(op):
    x = np.linspace(-6, 6, 2001, dtype=np.float32).reshape(3, 667)

    def build():
        tf.identity(op(ph(x.shape)), name="out")

    check_against_tf(build, {"x": x}, rtol=2e-6)


def test_exact_gelu_chain():
    """keras' exact GELU: 0.5 x (1 + erf(x / sqrt 2))."""
    x = randn(2, 8, 16) * 3

    def build():
        v = ph(x.shape)
        tf.identity(0.5 * v * (1.0 + tf.math.erf(v / np.float32(np.sqrt(2.0)))), name="out")

    check_against_tf(build, {"x": x}, rtol=2e-6)


# ------------------------------------------------------------------ gather errors, end to end
@pytest.mark.tfbuild
def test_gather_out_of_range_is_invalid_argument(tmp_path):
    import rstf
    from harness import save_graph_def

    table = randn(10, 4)

    def build():
        g = tf.gather(tf.constant(table), ph((1, 3), "ids", tf.int32))
        tf.identity(tf.nn.relu(g), name="out")

    path = save_graph_def(make_graph_def(build), str(tmp_path))
    result = rstf.optimize(path, str(tmp_path / "o"), jobs=1, log=lambda m: None)
    run = result.load()
    good = np.array([[0, 9, 4]], np.int32)
    np.testing.assert_array_equal(np.asarray(run(ids=good)["out"]),
                                  np.maximum(table[good[0]], 0)[None])
    for bad in (10, -1):
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"indices = {bad} is not in"):
            run(ids=np.array([[0, bad, 1]], np.int32))
    np.testing.assert_array_equal(np.asarray(run(ids=good)["out"]),
                                  np.maximum(table[good[0]], 0)[None])
