"""Lowering back to readable C (rstf/poly/lower.py, rstf/poly/emit.py): the node comments,
the dependence-based pragmas and their chunks, the fused epilogues, and the epilogue in the
microkernel's registers (rstf/poly/regepi.py) clamping bit for bit."""
import re

import numpy as np

from poly_cases import NATIVE, rng, V, _w, _subgraph, _run_both
from rstf.poly import optimize_source
from rstf.frontend.tfutil import tf


def test_register_epilogue_clamps_with_max_min_bit_for_bit():
    """ReLU6 and ReLU in a kernel's registers run as vector max/min instructions
    (regepi._select), which must pick the same bits as the templates' selects: NaN stays
    NaN, -0 stays -0 (ReLU6(-0 * 1) = -0), +-inf clamp, 6 and its neighbours stay put. The
    1x1 convs' identity weights carry x to the accumulators exactly, so each special value
    reaches the clamp; a negative scale turns the zero accumulators into -0."""
    c = 16
    eye = np.eye(c, dtype=np.float32).reshape(1, 1, c, c)
    scale = np.where(np.arange(c) % 2, -1.0, 1.0).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 5, c], name="x")
        y6 = tf.nn.relu6(tf.nn.conv2d(x, eye, 1, "SAME") * scale)
        y0 = tf.nn.relu(tf.nn.conv2d(x, eye * 2, 1, "SAME") * scale)
        tf.identity(tf.concat([y6, y0], 3), name="out")

    g, sg = _subgraph(build)
    x = rng.uniform(-8, 8, (1, 4, 5, c)).astype(np.float32)
    special = [0.0, -0.0, 6.0, -6.0, np.nextafter(np.float32(6), np.float32(7)),
               np.nextafter(np.float32(6), np.float32(5)), 1e-39, -1e-39]
    x[0, 0, 0] = 0.0  # all zeros: the scaled accumulators are +0 and -0
    x[0, 0, 1, :len(special)] = special
    x[0, 1, 0, :] = -np.float32(special[4])
    x[0, 2, 3, 5] = np.nan  # this pixel's every channel is NaN (0 * NaN in the others)
    x[0, 3, 4, 2] = np.inf
    x[0, 3, 3, 7] = -np.inf
    ref, got, info, new = _run_both(g, sg, {"x:0": x})
    (out,) = got
    np.testing.assert_array_equal(got[out].view(np.int32), ref[out].view(np.int32))
    assert np.isnan(ref[out]).any() and (np.signbit(ref[out]) & (ref[out] == 0)).any()
    assert [f["epilogue_in_registers"] for f in info["fused"]] == [True, True], info["fused"]
    mx, mn, sp = V("rstf_max"), V("rstf_min"), V("rstf_splat")
    assert f"{mx}({sp}(0.0f), {mn}({sp}(6.0f), " in new
    assert re.search(rf"{mx}\({sp}\(0\.0f\), \w+_c\)", new), new[-3000:]
    kernels = new[new.index(" void rstf_mke"):]
    assert V("rstf_sel") + "(" not in kernels


def test_lowered_c_is_readable_and_marked():
    # 40 input channels: the 40-step calls leave kh and kw outside, summing into a row
    # buffer that the Relu reads (Tuning.short_call)
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 17, 17, 40], name="x")
        y = tf.nn.relu(tf.nn.conv2d(x, _w(3, 3, 40, 64), 1, "SAME"))
        tf.identity(tf.reduce_mean(y, [1, 2]), name="out")

    g, sg = _subgraph(build)
    # (Winograd off: on AVX2 it takes this conv, 40 channels being a multiple of 8.)
    new, info = optimize_source(sg.source, sg.entry, winograd=False, target=NATIVE)
    assert "rstf_mk" in new and "#pragma omp parallel for" in new and "#pragma omp simd" in new
    assert info["parallel_loops"] >= 1 and info["simd_loops"] >= 1
    # Every parallel loop in chunks the team's threads can steal (parallel.dynamic_schedule),
    # at least Tuning.min_chunks of them where the loop has that many iterations.
    lines = new.splitlines()
    marked = [i for i, ln in enumerate(lines) if "#pragma omp parallel for" in ln]
    assert len(marked) == info["parallel_loops"]
    for i in marked:
        chunk = re.search(r"schedule\(RSTF_SCHEDULE\((\d+)\)\)$", lines[i])
        loop = re.match(r"\s*for \(int (c\d+) = 0; \1 <= (\d+); \+\+\1\)", lines[i + 1])
        assert chunk and loop, lines[i:i + 2]
        trips = int(loop.group(2)) + 1
        if "collapse(2)" in lines[i]:
            inner = re.match(r"\s*for \(int (c\d+) = 0; \1 <= (\d+); \+\+\1\)", lines[i + 2])
            trips *= int(inner.group(2)) + 1
        assert 1 <= int(chunk.group(1)) <= max(1, trips // 16), lines[i:i + 3]
    # The TF node comments survive. The Relu runs as the conv's row epilogue: one
    # scheduled function for both, the conv's output contracted to a row buffer.
    assert "/* Conv2D (Conv2D) */" in new and new.count("static void sched_") == 3
    assert "/* fused into sched_0 */" in new and "_row[" in new
    assert [len(f["nodes"]) for f in info["fused"]] == [2]
    # One parallel loop, over output rows: the reduction loops carry the += chain and are
    # never marked.
    conv = new.split("static void sched_0")[1].split("static void sched_")[0]
    assert conv.count("parallel for") == 1
