"""Trees of additions summed in Grappler's order (rstf.frontend.addtrees)."""
import numpy as np
import pytest

from harness import assert_tf_bits, load_graph_def, make_graph_def, run_tf, tf
from rstf.frontend.addtrees import _ordered, _smaller, grappler_shapes, sum_in_tf_order

RNG = np.random.RandomState(0)


def const(*shape):
    return tf.constant(RNG.standard_normal(shape).astype(np.float32))


def residual(leaf_is_input: bool):
    """A RegNet block's tail: relu((conv(r) * s + t) + r). Grappler sums it as
    (conv' + r) + t when it can tell conv' and r apart from t by their shapes; not when r
    is the fed input itself, whose shape it does not trust."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 16], name="x")
        r = x if leaf_is_input else tf.nn.relu(tf.nn.conv2d(x, const(1, 1, 16, 16), 1, "SAME"))
        c = tf.nn.conv2d(r, const(1, 1, 16, 16) / 4, 1, "SAME")
        tf.identity(tf.nn.relu((c * const(16) + const(16)) + r, name="sum"), name="out")
    return build


@pytest.mark.parametrize("leaf_is_input", [False, True])
def test_residual_sums_give_tensorflows_bits(leaf_is_input):
    build = residual(leaf_is_input)
    g = load_graph_def(make_graph_def(build), outputs=["out"], fold=True)
    assert len(g.add_trees_reordered) == (0 if leaf_is_input else 1)
    feeds = {"x": RNG.standard_normal((1, 6, 6, 16)).astype(np.float32)}
    assert_tf_bits(build, feeds, fold=True)


def trees():
    """A right-deep tree of one shape, a tree of three shapes, and one whose middle
    addition has a second reader (it stays a leaf: only a sole reader is absorbed)."""
    x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 8], name="x")
    # (of one convolution: Grappler knows its channels, not those of x * const, and gives
    # each convolution's H and W symbols of their own, which unary ops keep)
    y = tf.nn.conv2d(x, const(1, 1, 8, 8), 1, "SAME")
    a, b, c = tf.nn.relu(y), tf.nn.sigmoid(y), tf.nn.tanh(y)
    tf.add(a, tf.add(b, c), name="right_deep")
    s, v = const(), const(8)
    tf.add(a, tf.add(v, tf.add(s, b)), name="three_shapes")
    inner = tf.add(b, v, name="inner")
    tf.add(tf.add(inner, a), c, name="shared")
    tf.identity(inner, name="also_inner")


OUTS = ["right_deep", "three_shapes", "shared", "also_inner"]


def test_trees_sum_in_tensorflows_order():
    gd = make_graph_def(trees)
    new, roots = sum_in_tf_order(gd, OUTS, grappler_shapes(gd, OUTS))
    # A model output is no root (TF preserves it), but the tree below it is one: a + (v +
    # (s + b)) keeps its last addition and sums v + (s + b) in TF's order. Read through
    # Identities, the three trees are rewritten whole.
    assert roots == ["Add_2"]
    outs = [f"{o}_id" for o in OUTS]

    def wrapped():
        trees()
        for o in OUTS:
            tf.identity(tf.compat.v1.get_default_graph().get_tensor_by_name(f"{o}:0"),
                        name=f"{o}_id")
    gd = make_graph_def(wrapped)
    new, roots = sum_in_tf_order(gd, outs, grappler_shapes(gd, outs))
    assert sorted(roots) == ["right_deep", "shared", "three_shapes"]
    nodes = {n.name: n for n in new.node}
    assert "inner" in nodes  # read twice: a leaf, computed as written
    x = RNG.standard_normal((1, 4, 4, 8)).astype(np.float32)
    fetch = [f"{o}:0" for o in outs]
    for o, ref, got in zip(outs, run_tf(gd, {"x": x}, fetch), run_tf(new, {"x": x}, fetch)):
        np.testing.assert_array_equal(ref.view(np.uint32), got.view(np.uint32), err_msg=o)
    # ... and summed as written, they would not be the same bits
    a_b_c = run_tf(gd, {"x": x}, ["right_deep_id:0"])[0]
    g2 = tf.Graph()
    with g2.as_default():
        tf.graph_util.import_graph_def(gd, name="")
        parts = [g2.get_tensor_by_name(n) for n in ("Relu:0", "Sigmoid:0", "Tanh:0")]
    with tf.compat.v1.Session(graph=g2) as sess:
        a, b, c = sess.run(parts, {"x:0": x})
    assert np.array_equal(a_b_c, (a + b) + c) and not np.array_equal(a_b_c, a + (b + c))


def test_shape_order_is_grapplers():
    big = (-2, -3, -4, 8)
    assert _smaller((), (8,)) and _smaller((8,), big) and not _smaller(big, (8,))
    assert not _smaller((8,), (1, 8)) and not _smaller((1, 8), (8,))  # equal sizes
    assert _ordered([big, (), (8,)]) == [(), (8,), big]
    assert _ordered([big, (8,), (1, 8)]) is None  # TF's order would depend on a hash
    assert sorted(_ordered([(8,), (1, 8)])) == [(1, 8), (8,)]  # two: either order, same sum
