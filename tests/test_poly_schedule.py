"""The schedule stage of the polyhedral pass (rstf/poly/schedule.py): contraction tiling
around microkernels for every op family and target, checked bit-identical to the textbook C,
and legality against exact dependences (a tiling that breaks one is refused)."""
import re

import islpy as isl
import pytest

from poly_cases import NATIVE, at_l2, _w, _subgraph, CASES, _bitwise_case
from rstf.poly import compute_dependences, optimize_source, raise_subgraph
from rstf.poly.groups import call_dependences
from rstf.poly.contraction import find_contraction
from rstf.poly.schedule import schedule_call
from rstf.poly.target import AVX2, AVX512, AVX512_FULL
from rstf.frontend.tfutil import tf


@pytest.mark.parametrize("target", [AVX512, AVX512_FULL, AVX2], ids=lambda t: t.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_poly_equals_textbook_bitwise(case, target):
    """Every op family, 2 OpenMP threads: the tiled, microkernel, parallel and simd C gives
    bit-identical results (each output element's reduction runs in the original order).
    With Winograd off: on, the 3x3 stride-1 convs agree to 1e-6 instead (test_poly_winograd.py).
    Shaped for AVX-512 (16-float vectors, 32 registers) and for AVX2 (8, 16); the C of a
    target wider than this machine's (NATIVE) is checked as scheduled but not run."""
    shape = CASES[case][0]
    info, sg, new = _bitwise_case(case, run=target.vlen <= NATIVE.vlen, target=at_l2(target))
    assert info["target"] == target.name
    # No vector type wider than the target's registers: gcc would keep it in memory.
    assert f"vector_size({8 * target.vlen})" not in new
    for t in info["tiled"]:
        rb, width = t["tile"]
        nv = -(-width // target.vlen)
        assert width % target.half == 0 and rb * nv + nv + 1 <= target.registers, t
    if case == "conv_grouped_bn_relu":  # each group one column tile: the batch norm and
        # ReLU run after each row of each group, in the conv's one parallel region
        assert [len(f["nodes"]) for f in info["fused"]] == [4], info["fused"]
        assert info["parallel_loops"] == 1
    if case.endswith("_row_blocks"):  # the blocks' loop is each row op's one parallel loop
        step, count = (("= rstf_expf(", 1) if case.startswith("softmax") else
                       ("] / ((float) 256)", 2))  # the softmax; the two moments
        ats = [m.start() for m in re.finditer(re.escape(step), new)]
        assert len(ats) == count
        for at in ats:
            body = new[new.rindex("static void sched_", 0, at):]
            body = body[:body.index("\n}\n")]
            assert body.count("omp parallel") == 1, body
            assert "for (int c1 = 0; c1 <= 7; ++c1)" in body, body  # 8 blocks
            if "select" in case:  # the mask on the probabilities, in the same blocks
                assert "rstf_selectf(" in body, body
                assert [f["nodes"] for f in info["fused"]] == [["Softmax", "SelectV2"]]
    if case.startswith("dense_gelu_per_chunk") and target.vlen == NATIVE.vlen:
        # every kernel call followed by the chain, on the rows of the call's chunk (the
        # chain's row loop starts at the chunk loop's iterator or the last chunk's first
        # row, not at row 0)
        body = new[new.index("static void sched_"):]
        calls = [m.group(0)[:8] for m in re.finditer(r"rstf_mkv\w*\(|rstf_tanhf\(", body)]
        assert calls and calls == ["rstf_mkv", "rstf_tan"] * (len(calls) // 2), calls
        for m in re.finditer(r"rstf_tanhf\(", body):
            since_call = body[body.rindex("rstf_mkv", 0, m.start()):m.start()]
            assert re.search(r"for \(int c\d+ = (c\d+|[1-9]\d*);", since_call), body
    if case.endswith("_masked"):  # every column in a kernel, none in the textbook loops
        cols = 49 if "49" in case else 197
        *whole, last = info["tiled"]
        assert whole and cols - cols // whole[0]["tile"][1] * whole[0]["tile"][1] \
            <= last["tile"][1] < whole[0]["tile"][1], info["tiled"]
        assert not re.search(r"\bfmaf\(", new[new.index("static void sched_"):]), new
        if "bias" in case and target is not AVX512_FULL:  # (FULL merges b and i: no epilogue)
            assert [f["epilogue_in_registers"] for f in info["fused"]] == [True], info["fused"]
    if case == "batch_matmul_one_column_tile_in_registers":  # the row chunks shared out
        assert [t["loops"][0] for t in info["tiled"]] == ["i"]
        assert info["parallel_loops"] == 1 and "omp parallel for" in new, info
    if case == "conv_grouped_wide_bn_relu":  # a group of several column tiles: apart
        assert [len(f["nodes"]) for f in info["fused"]] == [3], info["fused"]
    if case.startswith("conv_grouped"):
        # The weight in panel layout where each group's columns are whole panels (its
        # group loop steps over G / VB of them): 80 columns are five 16-wide panels, not
        # whole 64-wide ones.
        vb = info["tiled"][0]["tile"][1]
        groups = {"conv_grouped": 32, "conv_grouped_bn_relu": 16, "conv_grouped_wide_bn_relu": 80}
        want = {"in1": vb} if groups[case] % vb == 0 else {}
        assert info["prepacked"] == want, (info["prepacked"], info["tiled"])
    if case == "matmul_depth_515_steps":  # 8 steps a trip (Target.k_steps), the rest rolled
        assert "for (int ku = k; ku < k + 8; ++ku)" in new, new
        assert "__builtin_prefetch(pp" in new, new
    if target is AVX2:
        _check_avx2_case(case, shape, info)
        return
    if case.startswith("conv") or case in ("matmul", "matmul_row"):
        assert info["tiled"] and info["kernel_calls"] > 0, info
    # Merged rows (target.merge_rows) are on for AVX2 and AVX512_FULL: a 1x1 conv over a
    # small map whose rows follow each other runs its pixels as one row where the tile
    # model says it pays (contraction.merge_rows): not the 7x7 map's 7x32 tiles of K=160.
    merged = {"conv_1x1_7x7_merged_rows_broadcast_epilogue", "conv_1x1_bn_relu6_in_registers",
              "conv_1x1_bn_residual_in_registers", "conv_mean_matmul_head",
              "conv_1x1_3x3_merged_rows_deep_weights"}
    assert all((t["loops"][0] == "oh x ow") == (target is AVX512_FULL and case in merged)
               for t in info["tiled"] if t["loops"][0] in ("ow", "oh x ow")), info["tiled"]
    # Single-vector tiles (target.single_vector_tiles, AVX512 only): a 1x1 conv of K=16
    # over rows of 23 pixels in 12-row x 16-column tiles (12 + 11 rows), K=64 over rows of
    # 9 in 9x16 (its 100 channels' last 4 in a masked remainder 8 wide); one whose epilogue
    # adds a residual (K=160) keeps the model's 7x32, and so does a reduction too deep
    # (K=256, 5x48). AVX512_FULL takes the model's tiles for all.
    single = {"conv_1x1_bn_relu6_in_registers": [[12, 16]],
              "conv_1x1_bias_relu": [[9, 16], [9, 8]],
              "conv_1x1_7x7_merged_rows_broadcast_epilogue": [[7, 16]],
              "conv_1x1_7x7_merged_rows_residual_in_registers": [[7, 32]],
              "conv_deep_weights_packed": [[5, 48], [5, 32]]}
    if target is AVX512_FULL:
        single.update({k: [[9, 48]] for k in ("conv_1x1_bn_relu6_in_registers",
                                              "conv_1x1_7x7_merged_rows_broadcast_epilogue")})
        single["conv_1x1_bias_relu"] = [[9, 48], [9, 8]]
    if case in single:
        assert [t["tile"] for t in info["tiled"]] == single[case], info["tiled"]
    # 27 steps in all, or 21 (kw x ic) x 7 rows of taps in 21-step calls: kh runs in
    # the kernel too
    if case.startswith("conv_rgb_"):
        assert info["tiled"][0]["reduction"] == ["kh", "kw", "ic"], info["tiled"]
    if case in ("conv_deep_weights_packed", "matmul_row"):
        # The partial last column tile (176 or 40 columns, not a multiple of the tile
        # width) runs in a narrower kernel (with a half vector for 8 columns), not in the
        # textbook loops.
        cols = 176 if case.startswith("conv") else 40
        whole, part = (t["tile"][1] for t in info["tiled"])
        assert len(info["tiled"]) == 2 and part == cols % whole and part % 8 == 0, info
    if case == "conv_deep_weights_packed":
        # The frozen weight is read in panel layout (fed packed by _run_both, bit-identical); were
        # it not a constant, each column tile's panel would be packed per call instead.
        assert info["tiled"][0]["order"] == "column tiles outermost"
        assert info["prepacked"] == {"in1": 48} and info["packed"] == 0, info
        assert optimize_source(sg.source, sg.entry,
                               target=at_l2(target))[1]["packed"] == 1
    elif "tiled" in info:
        assert info["packed"] == 0
    # 50 = 48 + 2 columns, the last two in a masked remainder kernel: the weight's last
    # panel is its 2 columns
    if case in ("conv_same", "conv_valid_stride2", "matmul_row", "matmul"):
        assert list(info["prepacked"]) == ["in1"], info["prepacked"]
    if case.startswith("depthwise") or case == "matmul_transposed_b":
        # read as vectors along v; no unit-stride column
        assert not info["prepacked"], info["prepacked"]
    if case == "matmul_transposed_b":  # b[j][k]: no unit-stride column in b
        assert not info["tiled"]
    if case == "conv_bn_relu6_chain":
        # Mul, AddV2, Relu6 fused into the conv as its row epilogue: the two temporaries
        # between them contracted to scalars, the conv's output to one row.
        assert [len(f["nodes"]) for f in info["fused"]] == [4]
        assert len(info["fused"][0]["contracted"]) == 3
    if case == "pad_depthwise_s2_bn_relu6":  # no padded copy, one parallel region
        assert "(Pad)" not in sg.source and info["parallel_loops"] == 1
        assert [len(f["nodes"]) for f in info["fused"]] == [4], info["fused"]
    if case.endswith("_in_registers"):
        assert [f["epilogue_in_registers"] for f in info["fused"]] == [True], info["fused"]
    elif case == "conv_bn_relu6_chain":  # a 3x3 conv: the rows accumulate kh by kh
        assert [f["epilogue_in_registers"] for f in info["fused"]] == [False], info["fused"]
    if case in ("depthwise_bn_relu6", "pad_depthwise_s2_bn_relu6",
                "depthwise_dilated_bn_in_registers"):
        assert [len(f["nodes"]) for f in info["fused"]] == [len(info["fused"][0]["nodes"])]
        assert "t0" in info["fused"][0]["contracted"] and info["parallel_loops"] == 1
        assert [f["epilogue_in_registers"] for f in info["fused"]] == [True], info["fused"]
        assert all(t["depthwise"] and t["border_chunks"] and t["reduction"] == ["kh", "kw"]
                   for t in info["tiled"]), info["tiled"]
    if case.startswith("depthwise") and info["tiled"]:
        _check_depthwise_tiles(case, shape, info, AVX512)
    if "depthwise" in case:
        assert all(t["order"] == "rows outermost" for t in info["tiled"])
    if case == "depthwise_multiplier2_dilated":
        assert not info["tiled"], info["tiled"]
    if case == "chain_with_fan_out":  # `m` is read by two later ops, at the same point:
        # a scalar too (swish's x, read by its sigmoid and by the product)
        assert info["fused"] and all(len(f["contracted"]) == len(f["nodes"]) - 1
                                     for f in info["fused"])


_SLIDING = ("depthwise_bn_relu6", "depthwise_row16_accumulates",
            "depthwise_row_valid_in_registers", "depthwise_row_5x5_in_registers")


def _check_depthwise_tiles(case, shape, info, target):
    """One vector wide (a remainder of half a vector: a half-vector kernel); at most
    Tuning.dw_max_rb rows, or a sliding row: stride 1, a row of at most 16 outputs, and its
    accumulators, taps and input vector in the target's registers."""
    width = shape[2] - (0 if "valid" not in case else 2)
    taps = 5 if "5x5" in case else 3
    slide = case in _SLIDING and width + taps + 1 <= target.registers
    assert all(t["tile"][1] <= target.vlen and t["sliding_row"] == slide
               and (t["tile"][0] == width if slide else t["tile"][0] <= 8)
               for t in info["tiled"]), info["tiled"]


def _check_avx2_case(case, shape, info):
    """What the AVX2 shapes must do: the contractions in microkernels, a partial column
    tile in a narrower kernel, the epilogues in registers, the depthwise tiles."""
    if case.startswith("conv") or case in ("matmul", "matmul_row"):
        assert info["tiled"] and info["kernel_calls"] > 0, info
    if case in ("conv_deep_weights_packed", "matmul_row"):
        cols = 176 if case.startswith("conv") else 40
        widths = [t["tile"][1] for t in info["tiled"]]
        assert (widths[1:] == [cols % widths[0]] if cols % widths[0] else len(widths) == 1)
    if case.endswith("_in_registers"):
        assert [f["epilogue_in_registers"] for f in info["fused"]] == [True], info["fused"]
    if "merged_rows" in case:  # 7x8 tiles a row unmerged; 5x16 (9 and a 4-row chunk) merged
        assert [(t["loops"], t["tile"]) for t in info["tiled"]] == [
            (["oh x ow", "oc"], [5, 16])], info["tiled"]
    elif case.startswith("conv_1x1"):  # 6 to 10 rows of 6 to 9 pixels: the rows stay
        assert all(t["loops"][0] == "ow" for t in info["tiled"]), info["tiled"]
    if case == "conv_1x1_7x7_merged_rows_broadcast_epilogue":
        assert [f["epilogue_in_registers"] for f in info["fused"]] == [False], info["fused"]
        assert info["fused"][0]["contracted"] == [], info["fused"]
    if case.startswith("depthwise") and info["tiled"]:
        _check_depthwise_tiles(case, shape, info, AVX2)
    if "depthwise" in case:  # (schedule.tile_time)
        assert all(t["order"] == "column tiles inside row chunks" for t in info["tiled"])


def test_sliding_row_falls_back_to_chunks_when_its_border_rule_is_not_the_domains(monkeypatch):
    """A sliding row is used only where isl finds its in-kernel border rule equal to the
    domain (`_slides_exactly`); where it is not, the chunked depthwise kernel runs instead,
    still bit-identical, never the textbook loops."""
    import rstf.poly.schedule as sched

    monkeypatch.setattr(sched, "_slides_exactly", lambda *a: False)
    info, _, _ = _bitwise_case("depthwise_bn_relu6")
    assert info["tiled"] and not info["refused"], info
    assert all(not t["sliding_row"] and t["tile"][0] <= 8 for t in info["tiled"])
    assert [f["epilogue_in_registers"] for f in info["fused"]] == [True]


def test_tiling_that_breaks_a_dependence_is_refused():
    """A contraction with another statement inside its loop nest that reads each partial
    sum: tiling the contraction alone would run whole reductions before those reads, which
    breaks the exact RAW dependences, so the pass keeps the original schedule, says why,
    and the result is still right."""
    src = """
static void op_0(const float a[restrict 8][32], const float b[restrict 32][64], float c[restrict 8][64], float d[restrict 32][8][64])
{
    for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 64; ++j) {
            c[i][j] = 0.0f;
        }
    }
    for (int k = 0; k < 32; ++k) {
        for (int i = 0; i < 8; ++i) {
            for (int j = 0; j < 64; ++j) {
                c[i][j] += a[i][k] * b[k][j];
                d[k][i][j] = c[i][j];
            }
        }
    }
}
void rstf_sg_0(const float *in0, const float *in1, float *out0, float *out1, void *ws)
{
    /* mm (MatMul) */
    op_0((const float (*)[32])in0, (const float (*)[64])in1, (float (*)[64])out0, (float (*)[8][64])out1);
}
"""
    scop = raise_subgraph(src, "rstf_sg_0")
    deps = compute_dependences(scop)
    depth = max(s.schedule.dim(isl.dim_type.out) for s in scop.statements)
    cs = schedule_call(scop, 0, scop.statements, deps, depth, NATIVE)
    assert find_contraction(scop.statements[1], scop, NATIVE) is not None  # it is a contraction...
    assert not cs.kernels and cs.refused and "breaks raw" in cs.refused[0]  # ...not tiled
    assert call_dependences(deps, scop.statements).validity.is_subset(deps.validity)
    new, info = optimize_source(src, "rstf_sg_0", target=NATIVE)
    assert info["optimizer"] == "poly" and info["refused"] and not info["tiled"]
    assert "rstf_mk_" not in new
    # With another op after it, the refusal stays local to this call: the other call's
    # dependences are not the tiling's to check, and the subgraph is still optimized.
    two = src.replace("float *out1, void *ws)", "float *out1, float *out2, void *ws)").replace(
        "(float (*)[8][64])out1);\n}", "(float (*)[8][64])out1);\n"
        "    /* cp (Identity) */\n    op_1((const float (*)[64])out0, (float (*)[64])out2);\n}")
    two = two.replace("void rstf_sg_0", """static void op_1(const float x[restrict 8][64], float y[restrict 8][64])
{
    for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 64; ++j) {
            y[i][j] = x[i][j];
        }
    }
}
void rstf_sg_0""")
    assert "op_1((const" in two and "out2, void *ws" in two
    new, info = optimize_source(two, "rstf_sg_0", target=NATIVE)
    assert info["optimizer"] == "poly" and info["refused"] and info["calls"] == 2, info


def test_failure_after_raising_keeps_the_textbook_c(monkeypatch):
    """A scheduling or lowering error leaves the subgraph's C as it was, with a diagnostic,
    instead of failing `rstf optimize`."""
    import rstf.poly.schedule as sched

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [4, 32], name="x")
        tf.identity(tf.matmul(x, _w(32, 32)), name="out")

    _, sg = _subgraph(build)

    def broken(*a, **k):
        raise isl.Error("simulated")

    monkeypatch.setattr(sched, "schedule_call", broken)
    new, info = optimize_source(sg.source, sg.entry, target=NATIVE)
    assert new == sg.source
    assert info["optimizer"] == "none" and "simulated" in info["diagnostic"]
