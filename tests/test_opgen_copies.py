"""Split, SplitV, Unpack, Tile, Roll (rstf/opgen/copies.py), ResizeNearestNeighbor and
ResizeBilinear (resize.py) against TensorFlow, exact: every output of a split is read (concatenated in reverse order,
so a part written to the wrong output shows), and the ops' C is run through ctypes."""
import numpy as np
import pytest

from harness import check_against_tf, load_graph_def, make_graph_def, tf

from rstf.opgen import check_node

rng = np.random.RandomState(99)


def ph(shape, name="x", dtype=tf.float32):
    return tf.compat.v1.placeholder(dtype, shape, name=name)


@pytest.mark.parametrize("shape,axis,sizes,dtype", [
    ((1, 4, 128, 16), -1, 2, tf.float32),  # Llama's rotary embedding: halves of the last axis
    ((6, 5), 0, 3, tf.int32),
    ((2, 9, 3), 1, [2, 4, 3], tf.float32),  # SplitV
    ((2, 9, 3), -2, [2, -1, 5], tf.float32),  # SplitV with an inferred part
])
def test_split(shape, axis, sizes, dtype):
    x = (rng.standard_normal(shape) * 5).astype(dtype.as_numpy_dtype)

    def build():
        parts = tf.split(ph(shape, dtype=dtype), sizes, axis=axis)
        tf.identity(tf.concat(parts[::-1], axis=axis), name="out")

    node_op = "Split" if isinstance(sizes, int) else "SplitV"
    g = load_graph_def(make_graph_def(build), outputs=["out"])
    assert [n for n in g.nodes.values() if n.op == node_op]
    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert node_op in sg.source


@pytest.mark.parametrize("shape,multiples,dtype", [
    ((1, 2, 1, 128, 16), [1, 1, 2, 1, 1], tf.float32),  # Llama's grouped-query key repeat
    ((3, 4), [2, 3], tf.int32),
    ((2, 1, 3), [1, 4, 1], tf.bool),
])
def test_tile(shape, multiples, dtype):
    x = rng.standard_normal(shape) > 0 if dtype == tf.bool else \
        (rng.standard_normal(shape) * 5).astype(dtype.as_numpy_dtype)

    def build():
        tf.identity(tf.tile(ph(shape, dtype=dtype), multiples), name="out")

    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert "Tile" in sg.source


def test_dynamic_batch_rules():
    """Under a dynamic batch (check_batch), a split or a tile keeps the samples apart only
    when it leaves axis 0 alone."""
    from rstf.opgen import get_handler
    from rstf.opgen.base import Unsupported

    def build():
        v = ph((2, 6))
        a, b = tf.split(v, 2, axis=0)
        c, d = tf.split(v, 2, axis=1)
        t0, t1 = tf.tile(v, [2, 1]), tf.tile(v, [1, 2])
        tf.identity(tf.reduce_sum(a + b) + tf.reduce_sum(c * d) + tf.reduce_sum(t0)
                    + tf.reduce_sum(t1), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    verdicts = {}
    for n in g.nodes.values():
        if n.op in ("Split", "Tile"):
            try:
                get_handler(n.op).check_batch(n, g)
                verdicts[n.name] = "apart"
            except Unsupported as e:
                verdicts[n.name] = str(e)
    assert sorted(v == "apart" for v in verdicts.values()) == [False, False, True, True], verdicts
    assert all("dynamic batch" in v for v in verdicts.values() if v != "apart")


def test_computed_multiples_stay_in_tensorflow():
    def build():
        reps = tf.compat.v1.placeholder(tf.int32, [2], name="reps")
        tf.identity(tf.tile(ph((3, 4)), reps), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    node = next(n for n in g.nodes.values() if n.op == "Tile")
    assert check_node(node, g)  # its shape, and multiples, are known only at run time


@pytest.mark.parametrize("shape,size,align,half", [
    ((1, 4, 5, 3), (8, 10), False, True),  # Keras' UpSampling2D (TF2: half-pixel centers)
    ((2, 3, 3, 2), (9, 6), False, False),  # legacy rule, unequal factors, batch 2
    ((1, 8, 8, 2), (4, 4), False, False),  # a downscale by 2
    ((1, 5, 7, 2), (3, 4), True, False),  # align_corners: rows 0, 2, 4 (a step rule)
    ((1, 3, 4, 2), (5, 7), True, False),  # align_corners up: rows 0, 1, 1, 2, 2 (refused)
])
def test_resize_nearest(shape, size, align, half):
    from rstf.opgen.resize import affine_rows, nearest_rows

    x = (rng.standard_normal(shape) * 5).astype(np.float32)

    def build():
        tf.identity(tf.compat.v1.image.resize_nearest_neighbor(
            ph(shape), size, align_corners=align, half_pixel_centers=half), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    node = next(n for n in g.nodes.values() if n.op == "ResizeNearestNeighbor")
    affine = all(affine_rows(nearest_rows(shape[1 + d], size[d], align, half), shape[1 + d])
                 for d in (0, 1))
    if not affine:
        assert "not affine" in check_node(node, g)
        return
    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert "ResizeNearestNeighbor" in sg.source


def test_resize_nearest_non_integer_ratio_stays():
    def build():
        tf.identity(tf.compat.v1.image.resize_nearest_neighbor(ph((1, 4, 4, 2)), (6, 6)),
                    name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    node = next(n for n in g.nodes.values() if n.op == "ResizeNearestNeighbor")
    assert "not affine" in check_node(node, g)


@pytest.mark.parametrize("shape,size,align,half,runs", [
    ((1, 5, 6, 3), (10, 12), False, True, 4),  # UpSampling2D(interpolation="bilinear"), 2x
    ((2, 3, 4, 2), (12, 16), False, True, 8),  # 4x: each phase's interior and a border
    ((1, 4, 4, 1), (8, 8), False, False, 3),  # legacy rule: the last row clamped
    ((1, 4, 6, 2), (4, 12), False, True, 1),  # rows unchanged (one run), columns 2x
    ((1, 6, 6, 2), (3, 3), False, True, 1),  # a downscale by 2: one run of a constant step
])
def test_resize_bilinear(shape, size, align, half, runs):
    """Bit for bit TensorFlow's (its product-then-sum steps, its float32 weights), the
    rows' runs as `bilinear_runs` says; on inputs of all magnitudes."""
    from rstf.opgen.resize import bilinear_rows, bilinear_runs

    x = (rng.standard_normal(shape) * 10.0 ** rng.randint(-3, 4, shape)).astype(np.float32)

    def build():
        tf.identity(tf.compat.v1.image.resize_bilinear(
            ph(shape), size, align_corners=align, half_pixel_centers=half), name="out")

    step = size[0] // shape[1] if size[0] % shape[1] == 0 else 1
    assert len(bilinear_runs(*bilinear_rows(shape[1], size[0], align, half), step)) == runs
    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert "ResizeBilinear" in sg.source


@pytest.mark.parametrize("shape,size,align", [
    ((1, 20, 20, 2), (30, 30), False),  # 1.5x: weights that change row by row
    ((1, 16, 16, 2), (32, 32), True),  # align_corners: scale 15/31
])
def test_resize_bilinear_other_ratios_stay(shape, size, align):
    """Rows that need more than MAX_RUNS nests (a tiny image's are taken, a nest a row)."""
    def build():
        tf.identity(tf.compat.v1.image.resize_bilinear(
            ph(shape), size, align_corners=align, half_pixel_centers=not align), name="out")

    g = load_graph_def(make_graph_def(build), outputs=["out"])
    node = next(n for n in g.nodes.values() if n.op == "ResizeBilinear")
    assert "not affine" in check_node(node, g)


@pytest.mark.parametrize("shape,axis", [((3, 4, 5), 1), ((2, 3), 0), ((2, 3, 4), -1)])
def test_unpack(shape, axis):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)

    def build():
        parts = tf.unstack(ph(shape), axis=axis)
        tf.identity(tf.stack(parts[::-1], axis=axis), name="out")

    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert "Unpack" in sg.source


@pytest.mark.parametrize("shape,shift,axis", [
    ((1, 14, 14, 8), [-3, -3], [1, 2]),  # Swin's shifted windows
    ((1, 14, 14, 8), [3, 3], [1, 2]),  # and back
    ((5, 7), [2, 3, -1], [1, 0, 1]),  # two shifts on one axis add up
    ((4, 6), [6], [1]),  # a whole turn: a copy
    ((4, 6), [-13], [-1]),
])
def test_roll(shape, shift, axis):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)

    def build():
        tf.identity(tf.roll(ph(shape), shift, axis), name="out")

    _, sg = check_against_tf(build, {"x": x}, rtol=0.0)
    assert "Roll" in sg.source
