"""Software prefetch of large frozen weights (rstf/poly/prefetch.py): the next weight
panel during each column tile, and a GEMV's weight during the kernels before it."""
import dataclasses
import os
import re
import subprocess
import tempfile

import pytest

from poly_cases import NATIVE, _bitwise_case

# A kernel's k loop runs Target.k_steps steps a trip (rstf/poly/kloop.py): one (AVX-512),
# its prefetches inside the rolled loop, or several (AVX2), a trip's prefetches in a loop
# over q before its steps.
BLOCKED = NATIVE.k_steps > 1
PANEL_LINE = ("__builtin_prefetch(pp + 64L * q, 0, 2);" if BLOCKED
              else "__builtin_prefetch(pp + 64L * ((k * pstep) >> 32), 0, 2);")
GEMV_LINE = "__builtin_prefetch(pf + 128L * q" if BLOCKED else "__builtin_prefetch(pf + 128L * k"


def _run_c(source: str, *flags: str) -> str:
    """The standard output of a C program (`source`) built with gcc -O2 `flags`."""
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "t.c"), os.path.join(d, "t")
        with open(src, "w") as f:
            f.write(source)
        subprocess.run(["gcc", "-O2", *flags, src, "-o", exe], check=True)
        return subprocess.run([exe], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("threads", [2, 3])
def test_the_next_weight_panel_is_prefetched_during_each_column_tile(threads):
    """Column tiles outermost over a frozen weight of 64 KB or more (a 3x3x256x176 conv on a
    5x5 map, 1.6 MB in panels of 48 columns): each kernel call prefetches its share of the
    next tile's panel (prefetch.plan_panel_prefetch), spread over its steps; bit-identical
    on the team, 2 and 3 threads. The partial last tile (32 columns) has no next panel."""
    info, _, new = _bitwise_case("conv_deep_weights_packed", threads=threads, team=True)
    assert info["tiled"][0]["order"] == "column tiles outermost"
    assert info["panel_prefetched"] == ["Conv2D"], info["panel_prefetched"]
    calls = new.count("rstf_pp_at((const float *)in1 + ")
    assert calls >= 1 and new.count("rstf_pp_lines(") == calls + 1  # (+ its definition)
    assert PANEL_LINE in new
    if BLOCKED:  # a trip's lines: those of its steps, the call's share spread over K
        u = NATIVE.k_steps
        assert (f"const int qe = pps ? (k + {u}) * pps : (int)((((k + {u}) - 1) * pstep >> 32)"
                " + 1);") in new
    assert "const long pstep = K ? ((long)npp << 32) / K + 1 : 0;" in new
    # A weight under 64 KB (a 1x1 conv's 25 KB) is left to the kernels' own reads.
    info, _, new = _bitwise_case("conv_1x1_bias_relu", run=False)
    assert info["panel_prefetched"] == [] and "rstf_pp_at" not in new


@pytest.mark.parametrize("threads", [2, 3])
def test_merged_rows_prefetch_the_next_panel_spread_over_the_call(threads):
    """Rows outermost but only one output row (a 3x3 map's 9 pixels merged): the column
    tile is still the calls' outermost loop (prefetch.tile_first), so each call prefetches
    the next panel; a call's share beyond K lines (here the whole 1280 x 48 panel, 3840
    lines, in one call of K = 1280) is spread over its steps, ceil(share / K) lines a step.
    Bit-identical on the team, 2 and 3 threads."""
    merging = dataclasses.replace(NATIVE, merge_rows=True)  # (as AVX2 and AVX512_FULL do)
    info, _, new = _bitwise_case("conv_1x1_3x3_merged_rows_deep_weights", threads=threads,
                                 team=True, target=merging)
    assert info["tiled"][0]["loops"][0] == "oh x ow", info["tiled"][0]
    assert info["tiled"][0]["order"] == "rows outermost"
    assert info["panel_prefetched"] == ["Conv2D"], info["panel_prefetched"]
    assert "const int pps = npp <= K ? 0 : (npp + K - 1) / K;" in new
    assert "__builtin_prefetch(pp + 64L * q, 0, 2);" in new
    assert new.count("rstf_pp_at((const float *)in1 + ") >= 1


@pytest.mark.parametrize("threads", [2, 3])
def test_each_batch_point_prefetches_the_next_panel_of_a_streamed_weight(threads):
    """A batch of sequences through a dense layer whose weight (2.4 MB) does not stay in
    L2, rows outermost: every sequence runs all the column tiles, reading each panel again
    from L3, so its calls prefetch the next panel, shared among that sequence's calls
    (64 rows), not among all the batch's. Bit-identical on the team, 2 and 3 threads. A
    weight that stays in L2 is not prefetched so."""
    info, _, new = _bitwise_case("batched_dense_streamed_weights", threads=threads, team=True)
    assert info["tiled"][0]["order"] == "rows outermost", info["tiled"][0]
    assert info["panel_prefetched"] == ["MatMul"], info["panel_prefetched"]
    assert new.count("rstf_pp_at((const float *)in1 + ") >= 1
    assert ", 64L), rstf_pp_lines(" in new  # each sequence's 64 rows share the next panel
    info, _, new = _bitwise_case("conv_1x1_bias_relu", run=False)  # 25 KB: no prefetch
    assert info["panel_prefetched"] == [] and "rstf_pp_at" not in new


def test_panel_prefetch_shares_cover_the_next_panel():
    """rstf_pp_at / rstf_pp_lines (prefetch.PANEL_PREFETCH_C): the calls of a tile, each for
    its rows [g0, g1) of n, prefetch every line of the next panel, and no line twice
    but where two calls' shares meet inside it."""
    from rstf.poly.prefetch import PANEL_PREFETCH_C

    main = PANEL_PREFETCH_C + r"""
#include <stdio.h>
int main(void)
{
    static const long cases[][3] = {{196608, 49, 7}, {98304, 49, 1}, {442368, 25, 5},
                                    {4096, 7, 7}, {64 * 1000 + 12, 63, 9}};
    static unsigned char seen[1 << 20];
    for (int c = 0; c < 5; ++c) {
        const long bytes = cases[c][0], n = cases[c][1], rb = cases[c][2];
        const float *panel = (const float *)(1L << 30);
        long total = 0, lines = (bytes + 63) / 64;
        for (long i = 0; i < lines; ++i) seen[i] = 0;
        for (long g0 = 0; g0 < n; g0 += rb) {
            const long g1 = g0 + rb < n ? g0 + rb : n;
            const long first = (rstf_pp_at(panel, bytes, g0, n) - (const char *)panel) / 64;
            const int count = rstf_pp_lines(bytes, g0, g1, n);
            for (long i = first; i < first + count; ++i) seen[i] += 1;
            total += count;
        }
        long missing = 0;
        for (long i = 0; i < lines; ++i) missing += !seen[i];
        printf("%ld %ld %ld\n", lines, total, missing);
    }
    return 0;
}
"""
    rows = _run_c(main)
    for row, calls in zip(rows.split("\n"), (7, 49, 5, 1, 7)):
        lines, total, missing = map(int, row.split())
        assert missing == 0 and lines <= total <= lines + calls - 1, row


@pytest.mark.parametrize("threads", [2, 3])
def test_a_gemv_weight_is_prefetched_by_the_kernels_before_it(threads):
    """A batch-1 MatMul over a frozen weight of 64 KB or more: the 1x1 conv before it (only
    the kernel-free Mean between) prefetches that weight in its kernel calls, each thread
    its share, restarted per call; the results stay bit-identical, on 2 and 3 threads."""
    info, _, new = _bitwise_case("conv_mean_matmul_head", threads=threads, team=True)
    (pf,) = info["prefetched"]
    assert pf["node"] == "Conv2D" and pf["weight"].startswith("in")
    assert 0 < pf["lines_per_call"] <= 2 * 64  # two lines a step of its 64
    assert new.count("++rstf_pf_epoch;") == 1 and "rstf_pf_take((const char *)" in new
    # Each thread's share is capped at the target's L2 (a share of 1.2 MB here, all in).
    assert f"L, {NATIVE.l2_bytes}L, {pf['lines_per_call'] * 64}L)" in new
    assert GEMV_LINE in new
    # A weight under 64 KB (48 KB) is left to the product's own reads.
    info, _, new = _bitwise_case("matmul_row", run=False)
    assert info["prefetched"] == [] and "rstf_pf_take" not in new


def test_prefetching_kernels_in_k_slices_keep_their_accumulators_in_registers():
    """A dense layer whose reduction runs in TF's k slices prefetches the classifier's
    weight after it: the prefetch of its first steps (`k < N`, N a constant) made gcc
    split the k loop, and the copy that runs kept accumulators on the stack. The kernels
    with a prefetch are built without loop splitting, and their loops touch the stack
    less than once a step."""
    from benchmarks.kernel_spills import source_loops, spilling

    info, _, new = _bitwise_case("dense_mean_matmul_head")
    (pf,) = info["prefetched"]
    assert pf["node"] == "MatMul" and pf["lines_per_call"] > 0
    name = rf"rstf_mk\w*p{pf['lines_per_call']}\w*"
    assert re.search(r'"no-split-loops"\)\)\)\n__attribute__\(\(noinline\)\) static void '
                     + name + r"\(", new)
    loops = {fn: ls for fn, ls in source_loops(new, "native").items() if re.match(name, fn)}
    # (gcc 12 -march=native on an AVX-512 Xeon spilled this C without the attribute.)
    assert loops and not spilling(loops), loops


def test_prefetch_takes_each_threads_share_up_to_its_cap():
    """rstf_pf_take (prefetch.PREFETCH_C), on 3 OpenMP threads: each thread's calls take
    consecutive lines of its own share of the weight, `bytes` a call, up to the share's end
    or its first `cap` bytes, then its first lines again; a new epoch restarts them."""
    from rstf.poly.prefetch import PREFETCH_C

    main = PREFETCH_C + r"""
#include <stdio.h>
int main(void)
{
    static const long caps[] = {64 * 1000, 64 * 25};
    const char *base = (const char *)(1L << 30);
    for (int c = 0; c < 4; ++c) {
        ++rstf_pf_epoch;
        long got[3][16];
        #pragma omp parallel num_threads(3)
        {
            const int t = omp_get_thread_num();
            for (int i = 0; i < 16; ++i)
                got[t][i] = (rstf_pf_take(base, 64 * 300, caps[c % 2], 64 * 10) - base) / 64;
        }
        for (int t = 0; t < 3; ++t) {
            for (int i = 0; i < 16; ++i)
                printf("%ld ", got[t][i]);
            printf("\n");
        }
    }
    return 0;
}
"""
    out = _run_c(main, "-fopenmp")
    rows = [list(map(int, r.split())) for r in out.strip().split("\n")]

    def expect(start, n_calls):  # n_calls of 10 lines from `start`, then `start` again
        return [start + 10 * i if i < n_calls else start for i in range(16)]

    whole = [expect(0, 10), expect(100, 10), expect(200, 10)]  # 100-line shares
    capped = [expect(0, 2), expect(100, 2), expect(200, 2)]  # their first 25 lines
    assert rows == whole + capped + whole + capped


@pytest.mark.parametrize("k_steps", [1, 4])
def test_a_calls_panel_share_is_prefetched_whole_and_no_further(k_steps):
    """The generated C's arithmetic, run in C: step k of K prefetches line
    (k * pstep) >> 32 of the call's `npp` (pstep = floor(npp * 2^32 / K) + 1: floor(k * npp
    / K) exactly, for K under 2^18), or, a trip of `k_steps` steps at a time
    (kloop.blocked_loop), those of its steps; each line of the share at least once, none
    past it, for shares shorter than K, as long, and of 1."""
    source = """#include <stdio.h>
int main(void) {
    int bad = 0;
    for (int K = 1; K <= 3100; K += 7)
        for (int npp = 1; npp <= K; npp += (K > 50 ? K / 50 : 1)) {
            const long pstep = ((long)npp << 32) / K + 1;
            static char seen[4000];
            for (int q = 0; q < 4000; ++q) seen[q] = 0;
            for (int k = 0; k < K; k += U) {
                const int end = k + U <= K ? k + U : K;
                const int qe = (int)((((long)end - 1) * pstep >> 32) + 1);
                for (int q = (int)(k * pstep >> 32); q < qe; ++q)
                    seen[q] = 1;
            }
            for (int q = 0; q < 4000; ++q)
                bad += (q < npp) != seen[q];
        }
    printf("%d\\n", bad);
    return 0;
}
"""
    assert _run_c(source, f"-DU={k_steps}").strip() == "0"


def test_a_k_slice_prefetches_its_own_rows_of_the_next_panel():
    """Each call prefetches of the next panel only the rows its statement reads: a k slice
    that is a statement of its own (a sharded k, unfolded) reads K of the panel's rows,
    and prefetching the whole panel for each of the slices read the weight that many times
    over (a batch-4 classifier ran 2.3x TensorFlow's time). Bit-identical on the team."""
    info, _, new = _bitwise_case("matmul_4_rows_k_sharded", team=True)
    assert info["panel_prefetched"], info["panel_prefetched"]
    call = re.compile(r"rstf_mk\w*\([^,]+, (\d+), &in0\[0\]\[(\d+)\], \d+, \d+, [^,]+, "
                      r"(\d+), rstf_pp_at\((.+?), (\d+)L, \(")
    calls = [m.groups() for m in call.finditer(new)]
    assert calls, new
    for K, k0, width, panel, size in calls:
        assert int(size) == int(K) * int(width) * 4, (K, width, size)
        assert (f"+ {width} * ({k0})" in panel) == (k0 != "0"), (k0, panel)
