"""Contractions in TensorFlow's k slices: the rule (rstf/opgen/kslices.py), the textbook C
against TensorFlow's bits, and the polyhedral pass's one-statement form of it
(rstf/poly/kslices.py) against the textbook C."""
import re

import numpy as np
import pytest

from harness import assert_tf_bits, tf
from poly_cases import NATIVE, _run_both, _subgraph, at_l2
from rstf.poly.target import AVX2
from rstf.opgen import kslices
from rstf.opgen.kslices import EIGEN_K_CAP, tf_k_plan, tf_k_slices, tf_matvec_blocks
from rstf.opgen.linalg import describe_slices, product_order
from rstf.poly import optimize_source, raise_subgraph
from rstf.poly.kslices import fold_k_slices

rng = np.random.RandomState(31)


@pytest.mark.parametrize("k,expected", [
    (16, [(0, 16)]), (320, [(0, 320)]),
    (321, [(0, 168), (168, 321)]),  # two slices of ceil(321 / 2) = 161, rounded up to 8
    (512, [(0, 256), (256, 512)]),
    (768, [(0, 256), (256, 512), (512, 768)]),
    (1280, [(i, i + 320) for i in range(0, 1280, 320)]),  # four whole slices
    (3072, [(i, min(3072, i + 312)) for i in range(0, 3072, 312)]),  # 10 slices, 9 of 312
])
def test_slices_are_tensorflows(k, expected):
    assert tf_k_slices(k) == expected


@pytest.mark.parametrize("k", range(1, 4000, 37))
def test_slices_cover_k_in_equal_steps(k):
    s = tf_k_slices(k)
    assert s[0][0] == 0 and s[-1][1] == k
    assert all(a[1] == b[0] for a, b in zip(s, s[1:]))
    sizes = [hi - lo for lo, hi in s]
    assert all(0 < n <= EIGEN_K_CAP for n in sizes) and len(set(sizes[:-1])) <= 1
    assert len(s) == 1 or sizes[0] % 8 == 0 and sizes[-1] <= sizes[0]


def _matmul(m, k, n, tb=False, bias=True):
    w = (rng.standard_normal((n, k) if tb else (k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [m, k], name="x")
        y = tf.matmul(x, w, transpose_b=tb)
        tf.identity(tf.nn.relu(tf.nn.bias_add(y, b)) if bias else y, name="out")
    return build, {"x": rng.random_sample((m, k)).astype(np.float32)}


# Shapes whose rows and columns are many enough that TensorFlow does not shard k over its
# threads (BERT's projections are such): there its order is the slices' in every output.
# Row counts that are whole multiples of 6 or leave 4 or 5: on AVX2 the last 1 to 3 rows
# past a multiple of 6 take another order (docs/limitations.md).
@pytest.mark.parametrize("m,k,n,tb", [(96, 400, 64, False), (96, 1280, 64, False),
                                      (132, 768, 96, True), (124, 3072, 64, False)])
def test_matmul_gives_tensorflows_bits(m, k, n, tb):
    build, feeds = _matmul(m, k, n, tb)
    sg = assert_tf_bits(build, feeds)
    assert describe_slices(product_order("float", m, k, n).blocks) in sg.source


def _batch_matmul(b, m, k, n):
    w = (rng.standard_normal((b, k, n)) / np.sqrt(k)).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [b, m, k], name="x")
        tf.identity(tf.linalg.matmul(x, w), name="out")
    return build, {"x": rng.random_sample((b, m, k)).astype(np.float32)}


def test_batch_matmul_gives_tensorflows_bits():
    sg = assert_tf_bits(*_batch_matmul(4, 96, 1000, 64))
    assert "k slices 4" in sg.source


@pytest.mark.parametrize("k,n,size", [(127, 40, 127), (128, 40, 16), (1408, 1000, 16),
                                      (200, 8000, 4), (200, 7999, 16)])
def test_matvec_blocks_are_eigens(k, n, size):
    blocks = tf_matvec_blocks(k, n)
    assert all(len(b) == 1 for b in blocks) and blocks[0][0] == (0, min(k, size))
    assert [b[0][1] for b in blocks][-1] == k and len(blocks) == -(-k // size)


# One-row products are Eigen's matrix-vector kernel (blocks of 16 along k, products rounded
# before the sum), a classifier's Dense and a squeeze-and-excite block's 1x1 convolutions
# on their 1x1 map alike; a short k is one block.
@pytest.mark.parametrize("k,n", [(700, 64), (90, 24), (200, 8100)])
def test_matrix_vector_products_give_tensorflows_bits(k, n):
    sg = assert_tf_bits(*_matmul(1, k, n))
    assert f"k slices {len(tf_matvec_blocks(k, n))}" in sg.source


def test_pointwise_conv_on_a_one_pixel_map_gives_tensorflows_bits():
    w = (rng.standard_normal((1, 1, 352, 88)) / np.sqrt(352)).astype(np.float32)
    b = rng.standard_normal(88).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 1, 1, 352], name="x")
        y = tf.nn.conv2d(x, w, 1, "VALID")
        tf.identity(tf.nn.sigmoid(tf.nn.bias_add(y, b)), name="out")
    sg = assert_tf_bits(build, {"x": rng.random_sample((1, 1, 1, 352)).astype(np.float32)})
    assert "k slices 22" in sg.source


@pytest.mark.parametrize("m,n,tb", [(1, 16, True), (8, 1, False)])
def test_other_vector_products_keep_one_chain(m, n, tb):
    """A one-column product and a one-row product of a transposed B: another of TF's
    kernels, which rstf does not follow: one chain, no scratch."""
    w = np.ones((n, 700) if tb else (700, n), np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [m, 700], name="x")
        tf.identity(tf.matmul(x, w, transpose_b=tb), name="out")
    _, sg = _subgraph(build)
    assert "k slices 1" in sg.source and "scratch" not in sg.source


def _optimized(build, feeds, target=NATIVE):
    g, sg = _subgraph(build)
    ref, got, info, new = _run_both(g, sg, {f"{k}:0": v for k, v in feeds.items()},
                                    target=target)
    for name in ref:
        np.testing.assert_array_equal(got[name].view(np.uint32), ref[name].view(np.uint32))
    return info, new, sg


@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core AVX-512 machine with a 32 KiB L1 and 32 MiB L3, for the tests that read the C's
    slices (TensorFlow's plan follows the machine; the TF-bits tests use this one's)."""
    monkeypatch.setattr(kslices, "machine_pool", lambda: 2)
    monkeypatch.setattr(kslices, "machine_caches", lambda: (32 << 10, 32 << 20))
    monkeypatch.setattr(kslices, "machine_sgemm_k_block", lambda: 384)


@pytest.mark.parametrize("m,k,n", [(128, 768, 96), (16, 700, 33), (7, 1000, 100), (2, 1000, 17)])
def test_poly_runs_the_slices_in_one_kernel(m, k, n, two_cores):
    """The slices fold into one kernel statement (kernels named for their slice) whose
    results are the textbook C's bit for bit: whole tiles, a masked remainder (33, 17
    columns), short chunks of rows."""
    build, feeds = _matmul(m, k, n)
    info, new, sg = _optimized(build, feeds)
    plan = product_order("float", m, k, n).blocks
    assert all(len(b) == 1 for b in plan) and len(plan) > 1, plan
    kc = plan[0][0][1]
    assert {(t["node"], t["statement"]) for t in info["tiled"]} == {("MatMul", "S1")}
    assert f"c{kc}_" in new and "K_all" in new
    assert info["statements"] == len(raise_subgraph(sg.source, sg.entry).statements) \
        - 3 * (len(plan) - 1)


@pytest.mark.parametrize("k,n", [(1408, 1000), (352, 88), (200, 8100)])
def test_poly_runs_a_matrix_vector_product_in_one_kernel(k, n, two_cores):
    """Eigen's matrix-vector order (blocks of 16 or 4, unfused steps) folds into one kernel
    statement too, and gives the textbook C's bits."""
    build, feeds = _matmul(1, k, n)
    info, new, sg = _optimized(build, feeds)
    size = tf_matvec_blocks(k, n)[0][0][1]
    assert {(t["node"], t["statement"]) for t in info["tiled"]} == {("MatMul", "S1")}
    assert f"c{size}_" in new and "K_all" in new


def test_poly_matrix_vector_epilogue_over_a_tile_and_its_masked_rest(two_cores):
    """28 columns: a kernel of whole vectors and one of the rest (AVX-512: 16 and 12 masked
    lanes; AVX2: 24 and 4), each with the bias and swish in its registers; their epilogue
    kernels are named apart (they once collided)."""
    w = (rng.standard_normal((1, 1, 448, 28)) / np.sqrt(448)).astype(np.float32)
    b = rng.standard_normal(28).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 1, 1, 448], name="x")
        r = tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "VALID"), b)
        tf.identity(r * tf.sigmoid(r), name="out")
    info, new, _ = _optimized(build, {"x": rng.random_sample((1, 1, 1, 448)).astype(np.float32)})
    kernels = set(re.findall(r"rstf_mke0_1x(\d+)u(?:m(\d+))?\w*\(", new))
    assert len(kernels) == 2 and sum(int(n) - int(m or 0) for n, m in kernels) == 28, kernels


def test_poly_squeeze_and_excite_gives_the_textbook_bits(two_cores):
    """A squeeze-and-excite block's reduce and expand convolutions on the pooled one-pixel
    map (Eigen's matrix-vector order, k of 352 and of 22), with swish and a sigmoid over 22
    and 352 channels (the last 6 of 22 on TF's scalar path): the poly build is the textbook
    C's bits, and they are TensorFlow's."""
    w1 = (rng.standard_normal((1, 1, 352, 22)) / np.sqrt(352)).astype(np.float32)
    w2 = (rng.standard_normal((1, 1, 22, 352)) / np.sqrt(22)).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 352], name="x")
        m = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
        r = tf.nn.conv2d(m, w1, 1, "VALID") + 0.1
        r = r * tf.sigmoid(r)
        e = tf.sigmoid(tf.nn.conv2d(r, w2, 1, "VALID") - 0.2)
        tf.identity(x * e, name="out")
    feeds = {"x": rng.random_sample((1, 6, 6, 352)).astype(np.float32)}
    info, new, sg = _optimized(build, feeds)
    assert "rstf_logistic_tailf" in sg.source and "k slices 22" in sg.source
    assert_tf_bits(build, feeds)  # and the textbook C is TensorFlow's


def test_poly_slices_on_a_16_register_target(two_cores):
    """AVX2's kernels run 8 steps a trip of k (kloop.blocked_loop), their panel prefetches
    spread over the whole of K: each slice's trips and its share of the lines."""
    build, feeds = _matmul(128, 960, 96)
    info, new, _ = _optimized(build, feeds, target=at_l2(AVX2))
    assert "K_all" in new and "npp_all" in new and "ku < k + 8" in new, info["tiled"]


def test_poly_batch_matmul_slices():
    info, new, _ = _optimized(*_batch_matmul(3, 20, 650, 40))
    assert len({t["statement"] for t in info["tiled"]}) == 1
    assert f"c{tf_k_slices(650)[0][1]}_" in new


def test_unkernelled_slices_stay_textbook_slices():
    """Without tiling no kernel computes the folded statement: the pass runs on the
    unfolded slices, whose C says what it computes."""
    build, feeds = _matmul(16, 700, 32, bias=False)
    g, sg = _subgraph(build)
    new, info = optimize_source(sg.source, sg.entry, tile=False, target=NATIVE)
    assert info["optimizer"] == "poly" and not info["tiled"]
    assert info["statements"] == len(raise_subgraph(sg.source, sg.entry).statements)
    assert "K_all" not in new


def test_fold_needs_the_whole_pattern(two_cores):
    """Only the template's sequence folds: a product with one slice is left as it is, and
    the fold marks the statement with its k iterator and slice length."""
    for k, folded in ((300, False), (700, True)):
        build, _ = _matmul(8, k, 16, bias=False)
        _, sg = _subgraph(build)
        scop = raise_subgraph(sg.source, sg.entry)
        out = fold_k_slices(scop)
        marked = [s.k_slice for s in out.statements if s.k_slice]
        assert (out is not scop) == folded
        kc = product_order("float", 8, k, 16).blocks[0][0][1]
        assert marked == ([("k", kc, ())] if folded else [])


def test_fold_takes_onednns_tail(monkeypatch):
    """oneDNN's block of 256 halves Eigen's slices of 312 (k = 3072) into 156 and its last
    of 264 into 132 + 132: the fold marks the uniform run and the tail, and the kernels
    (named for both) give the textbook C's bits."""
    monkeypatch.setattr(kslices, "machine_pool", lambda: 2)
    monkeypatch.setattr(kslices, "machine_caches", lambda: (32 << 10, 32 << 20))
    monkeypatch.setattr(kslices, "machine_sgemm_k_block", lambda: 256)
    build, feeds = _matmul(124, 3072, 64)
    _, sg = _subgraph(build)
    marked = [s.k_slice for s in fold_k_slices(raise_subgraph(sg.source, sg.entry)).statements
              if s.k_slice]
    assert marked == [("k", 156, (132, 132))]
    info, new, _ = _optimized(build, feeds)
    assert "c156t132t132_" in new and {t["statement"] for t in info["tiled"]} == {"S1"}


def _conv1x1(h, c, o, stride, width=None):
    """A 1x1 convolution of an h x width (default h) x c map, bias and ReLU6 after."""
    width = width or h
    w = (rng.standard_normal((1, 1, c, o)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, h, width, c], name="x")
        tf.identity(tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, w, stride, "SAME"), b)),
                    name="out")
    return build, {"x": rng.random_sample((1, h, width, c)).astype(np.float32)}


@pytest.mark.parametrize("h,c,o,stride", [(14, 480, 80, 1), (28, 384, 64, 2)])
def test_pointwise_conv_gives_tensorflows_bits(h, c, o, stride):
    """A 1x1 convolution is TensorFlow's matrix product over the input channels, in its
    slices (EfficientNet's and MobileNet's projections)."""
    build, feeds = _conv1x1(h, c, o, stride)
    sg = assert_tf_bits(build, feeds)
    assert f"k slices {len(tf_k_slices(c))}" in sg.source


def test_wider_windows_keep_one_chain():
    w = np.ones((3, 3, 400, 8), np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 400], name="x")
        tf.identity(tf.nn.conv2d(x, w, 1, "VALID"), name="out")
    _, sg = _subgraph(build)
    assert "k slices 1" in sg.source and "scratch" not in sg.source


def test_poly_slices_with_the_epilogue_in_registers():
    """A sliced 1x1 convolution whose bias and ReLU6 run in the kernel's registers: the
    last slice's sum goes back into the accumulators before the chain."""
    build, feeds = _conv1x1(7, 1152, 192, 1)
    info, new, _ = _optimized(build, feeds)
    kc = product_order("float", 49, 1152, 192).blocks[0][0][1]  # 288, 144 on AVX2
    assert "K_all" in new and f"ks += {kc}" in new
    assert [f["epilogue_in_registers"] for f in info["fused"]] == [True], info["fused"]


MACHINE = dict(pool=2, caches=(32 << 10, 32 << 20), sgemm_k_block=384)


def test_plan_follows_eigens_threads():
    """Eigen's cost model on a 2-core machine with a 32 KiB L1: a small product runs on
    one thread, in L1-sized blocks (k 368 one chain, k 500 two slices of 256); one with a
    long k is sharded over k, each half in its own slices; a big one takes the 320 cap."""
    one = lambda k: [[s] for s in tf_k_slices(k)]  # noqa: E731
    assert tf_k_plan(9, 368, 368, **MACHINE) == [[(0, 368)]]
    assert tf_k_plan(9, 500, 64, **MACHINE) == [[(0, 256)], [(256, 500)]]
    assert tf_k_plan(4, 1000, 64, **MACHINE) == [[(0, 336)], [(336, 672)], [(672, 1000)]]
    assert tf_k_plan(9, 1152, 192, **MACHINE) == [[(0, 288), (288, 576)],
                                                   [(576, 864), (864, 1152)]]
    assert tf_k_plan(128, 768, 3072, **MACHINE) == one(768)
    assert tf_k_plan(196, 480, 80, **MACHINE) == one(480)
    # a larger L1 moves the one-thread blocks past oneDNN's 384, which halves them
    big_l1 = dict(pool=2, caches=(48 << 10, 32 << 20))
    assert tf_k_plan(9, 500, 64, **big_l1, sgemm_k_block=384) == [[(0, 250)], [(250, 500)]]
    assert tf_k_plan(4, 1000, 64, **big_l1, sgemm_k_block=384) == [
        [(0, 252)], [(252, 504)], [(504, 752)], [(752, 1000)]]
    assert tf_k_plan(9, 500, 64, **big_l1, sgemm_k_block=0) == [[(0, 500)]]
    # one thread runs everything in its blocks
    assert tf_k_plan(128, 768, 3072, pool=1, caches=(32 << 10, 32 << 20),
                     sgemm_k_block=384) == [[(0, 384)], [(384, 768)]]
    # oneDNN's block of 256 (AVX2) halves Eigen's slices of 288 and 320, not one of 256
    avx2 = dict(pool=2, caches=(32 << 10, 32 << 20), sgemm_k_block=256)
    assert tf_k_plan(96, 1280, 64, **avx2) == [[(i, i + 160)] for i in range(0, 1280, 160)]
    assert tf_k_plan(96, 576, 64, **avx2) == [[(i, i + 144)] for i in range(0, 576, 144)]
    assert tf_k_plan(128, 768, 3072, **avx2) == one(768)


def test_sgemm_blocks_follow_onednn():
    """oneDNN's k blocks of one sgemm call: 384 while 768 or more remain, then halves."""
    assert kslices._sgemm_blocks(0, 384, 384) == [(0, 384)]
    assert kslices._sgemm_blocks(0, 385, 384) == [(0, 193), (193, 385)]
    assert kslices._sgemm_blocks(100, 1000, 384) == [(100, 484), (484, 742), (742, 1000)]
    assert kslices._sgemm_blocks(0, 1000, 0) == [(0, 1000)]
    assert kslices._sgemm_blocks(0, 320, 256) == [(0, 160), (160, 320)]
    assert kslices._sgemm_blocks(0, 256, 256) == [(0, 256)]


@pytest.mark.parametrize("m,k,n", [(12, 368, 368), (10, 500, 64), (4, 1000, 64),
                                   (12, 1152, 192), (36, 672, 112), (11, 2048, 64)])
def test_small_products_give_tensorflows_bits(m, k, n):
    """TensorFlow's order on this machine, where its cost model runs the product on one
    thread or shards it over k (the plan above, for this machine's cores and caches)."""
    sg = assert_tf_bits(*_matmul(m, k, n))
    assert f"k slices {sum(map(len, tf_k_plan(m, k, n)))}" in sg.source


@pytest.mark.parametrize("h,w,c,o", [(3, 4, 368, 368), (3, 4, 1152, 192), (6, 6, 672, 112)])
def test_small_pointwise_convs_give_tensorflows_bits(h, w, c, o):
    """EfficientNet's and RegNet's 1x1 convolutions on small maps (3x4: a 3x3 map's 9
    pixels leave 3 rows past a multiple of 6, another order on AVX2, docs/limitations.md)
    and 6x6, bias and ReLU6 after; and the polyhedral pass's kernels give the textbook C's
    bits for them (where the blocks have slices of their own, without the fold)."""
    build, feeds = _conv1x1(h, c, o, 1, w)
    assert_tf_bits(build, feeds)
    _optimized(build, feeds)
