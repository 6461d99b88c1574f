"""Row-band fusion across ops (rstf/poly/band.py): a depthwise group with the 1x1 conv that
consumes it, and the halo bands that recompute a window of a 1x1 expansion."""
import re

import numpy as np
import pytest

from poly_cases import rng, tuned, _w, _subgraph, _run_both
from rstf.frontend.tfutil import tf


def _inverted_residual_tail(x, consumer):
    """MobileNet v2's block tail: depthwise + BN + ReLU6, then `consumer` on it."""
    c = x.shape[-1]
    d = tf.nn.relu6(tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(3, 3, c, 1), strides=[1, 1, 1, 1], padding="SAME") * _w(c) + _w(c))
    return consumer(d)


BAND_CASES = {
    # The projection (1x1 conv + BN + residual add) reads the depthwise output's row h
    # only: both groups run in one loop over the rows, the depthwise output contracted
    # to one row per iteration.
    "project_residual": (1, lambda x, d: tf.nn.conv2d(d, _w(1, 1, 32, 24), 1, "SAME")
                         * _w(24) + _w(24) + x[..., :24]),
    # A 3x3 conv reads rows h-1..h+1 of the depthwise output: no band (halo rows).
    "conv3x3_halo": (0, lambda x, d: tf.nn.conv2d(d, _w(3, 3, 32, 24), 1, "SAME")),
    # The depthwise output also leaves the pair (fan-out): it cannot shrink to a row.
    "project_fan_out": (0, lambda x, d: tf.nn.conv2d(d, _w(1, 1, 32, 24), 1, "SAME")
                        + tf.reduce_sum(d, axis=-1, keepdims=True)),
}


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", sorted(BAND_CASES))
def test_band_fusion_across_ops(case, threads):
    """Row-band fusion of a depthwise group with the 1x1 conv that consumes it (see
    rstf/poly/band.py): bit-identical to the textbook C on 2 and 3 threads (an odd split
    of the rows), and refused where a row of the consumer needs other rows (a 3x3 conv)
    or where the tensor between them is read elsewhere."""
    want, consumer = BAND_CASES[case]
    shape = (1, 18, 13, 32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        tf.identity(_inverted_residual_tail(x, lambda d: consumer(x, d)), name="out")

    g, sg = _subgraph(build)
    x = rng.randn(*shape).astype(np.float32)
    ref, got, info, new = _run_both(g, sg, {"x:0": x}, threads=threads)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert len(info["bands"]) == want, info["bands"]
    if want:
        band = info["bands"][0]
        assert band["loops"] == 2 and len(band["nodes"]) == 2, band
        row = band["contracted_to_row"][0]
        # One row buffer per iteration of the parallel row loop, and no workspace for it.
        assert f"float {row}_row[13][32]" in new and f"{row}[restrict" not in new
        assert info["parallel_loops"] == 1, info
        ws_textbook = sg.workspace_bytes
        assert info["workspace_bytes"] < ws_textbook


def _expand_dw(x, stride, padding, cin=16, cmid=48, cout=24):
    """MobileNet v2's block head: 1x1 expansion + BN + ReLU6, then a 3x3 depthwise conv
    (+ BN + ReLU6) at `stride`, then the 1x1 projection."""
    e = tf.nn.relu6(tf.nn.conv2d(x, _w(1, 1, cin, cmid), 1, "SAME") * _w(cmid) + _w(cmid))
    d = tf.nn.relu6(tf.raw_ops.DepthwiseConv2dNative(
        input=e, filter=_w(3, 3, cmid, 1), strides=[1, stride, stride, 1],
        padding=padding) * _w(cmid) + _w(cmid))
    return e, tf.nn.conv2d(d, _w(1, 1, cmid, cout), 1, "SAME") * _w(cout) + _w(cout)


HALO_CASES = {  # (halo bands, the window's first row at band row h minus 2h, build)
    # Stride 2 over 37 rows: SAME pads one row on top, so band row h reads 2h-1..2h+1.
    "stride2_same": (1, -1, lambda x: _expand_dw(x, 2, "SAME")[1]),
    "stride2_valid": (1, 0, lambda x: _expand_dw(x, 2, "VALID")[1]),
    # Stride 1 would compute every expanded row three times: refused.
    "stride1": (0, None, lambda x: _expand_dw(x, 1, "SAME")[1]),
    # The expanded tensor is also read elsewhere: it cannot shrink to a window.
    "fan_out": (0, None,
                lambda x: (lambda e, y: y + tf.reduce_mean(e))(*_expand_dw(x, 2, "SAME"))),
}


@pytest.mark.parametrize("budget, rows", [(0, 3), (18 << 10, 3 + 2 * 2), (None, 3 + 2 * 7)])
def test_halo_band_carries_rows_in_a_sequential_row_loop(budget, rows):
    """A halo band whose row loop does not go parallel (too little work for a region)
    still carries the shared window row, in a plain block: every band row after the
    first computes two expanded rows, bit-identical to the textbook C. The window slides
    down a buffer of as many rows as the byte budget holds (13 x 48 floats a row: 3 in
    no budget, 7 in 18 KB, 17 at most) and the shared row moves up when it reaches the
    end: 19 band rows cover every case, a move at each row down to none at all."""
    target = tuned(halo_min_bytes=0, min_work=10 ** 12,
                   **({} if budget is None else {"window_buffer_bytes": budget}))
    shape = (1, 37, 13, 16)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        tf.identity(_expand_dw(x, 2, "SAME")[1], name="out")

    g, sg = _subgraph(build)
    x = rng.rand(*shape).astype(np.float32)
    ref, got, info, new = _run_both(g, sg, {"x:0": x}, threads=2, target=target)
    np.testing.assert_array_equal(got["out:0"], ref["out:0"])
    assert info["parallel_loops"] == 0 and "#pragma omp parallel" not in new
    (win,) = [b["recomputed_window"] for b in info["bands"] if b["recomputed_window"]]
    ((y, w),) = win.items()
    assert w["carried"] == 1 and w["buffer_rows"] == rows
    assert f"float {y}_row[{rows}][13][48]" in new
    assert f"else if (rstf_base + 5 <= {rows}) rstf_base += 2;" in new
    assert f"memmove(&{y}_row[0], &{y}_row[rstf_base + 2], 1 * sizeof {y}_row[0]);" in new


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", sorted(HALO_CASES))
def test_halo_band_recomputes_the_window(case, threads):
    """A 1x1 expansion fused into the band of the stride-2 depthwise conv that reads it
    (band.fuse_halo): each band row computes the 3 expanded rows it reads into its
    thread's window buffer, so the row loop stays parallel, and the row it shares with
    the band row the thread ran before is moved up instead of recomputed. Bit-identical
    to the textbook C on 2 and 3 threads, refused at stride 1 and with fan-out. The size
    floor is lowered so that a small graph qualifies."""
    target = tuned(halo_min_bytes=0)
    want, first, build_y = HALO_CASES[case]
    shape = (1, 37, 13, 16)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        tf.identity(build_y(x), name="out")

    g, sg = _subgraph(build)
    x = rng.rand(*shape).astype(np.float32)
    ref, got, info, new = _run_both(g, sg, {"x:0": x}, threads=threads, target=target)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    halos = [b for b in info["bands"] if b["recomputed_window"]]
    assert len(halos) == want, info["bands"]
    if want:
        # On the team, a thread that steals band rows starts its own window there.
        _, got, _, _ = _run_both(g, sg, {"x:0": x}, threads=threads, team=True,
                                 target=target)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])
        band_info = halos[0]
        assert len(band_info["nodes"]) == 3 and band_info["loops"] == 2, band_info
        ((y, win),) = band_info["recomputed_window"].items()
        assert win == {"stride": 2, "first": first, "rows": 3, "carried": 1,
                       "buffer_rows": 17}
        # the window is a buffer of each thread of the parallel row loop: no workspace
        assert f"float {y}_row[17][13][48]" in new and f"{y}[restrict" not in new
        # a thread's next band row slides the window down, or moves the shared row up,
        # and computes from the one after
        assert f"memmove(&{y}_row[0], &{y}_row[rstf_base + 2], 1 * sizeof" in new
        # (in the region that declares the windows: the threads' ranges, stolen from)
        assert re.search(r"#pragma omp for schedule\(RSTF_SCHEDULE\(\d+\)\)", new)
        start = "2 * c2" + (f" + {first + 1}" if first + 1 else "")  # (2h + first) + 1
        trimmed = rf"for \(int c4 = \(rstf_carry \? rstf_max\(.*, {re.escape(start)}\) :"
        assert re.search(trimmed, new)
        assert info["workspace_bytes"] < sg.workspace_bytes
