"""evaluation.pairbench: variants of one subgraph's C timed in turn in one program."""
import statistics

import pytest

from rstf.errors import RstfError
from rstf.evaluation import pairbench

N = 1 << 14


def subgraph_c(repeat: int, n: int = N) -> str:
    """A subgraph C as cgen writes one (tensor table, a scheduled group per node, the
    entry calling them), whose second group does `repeat` times the first's work."""
    return f"""/*
* Tensors:
*   in0: input float({n},) x:0
*   out0: output float({n},) y:0
*/
static float helper(float v) {{ return v * 0.5f + 1.0f; }}
static void sched_0(const float *in0, float *t) {{
    for (long i = 0; i < {n}; ++i) t[i] = helper(in0[i]);
}}
static void sched_1(const float *t, float *out0) {{
    for (int r = 0; r < {repeat}; ++r)
        for (long i = 0; i < {n}; ++i) out0[i] = out0[i] * 0.25f + t[i];
}}
void rstf_sg_0(const float *in0, float *out0, void *ws)
{{
    /* model/scale (Mul) */
    sched_0(in0, (float *)ws);
    /* model/acc (AddV2) */
    sched_1((const float *)ws, out0);
}}
"""


def test_each_slot_times_its_own_variant_run_by_run(tmp_path):
    """Two variants of one subgraph, linked into one program: each slot's runs carry its
    own calls with their nodes, and the variant with 64 times the work in its second group
    is the slower there, run after run, while the first groups (the same code) match."""
    work = str(tmp_path)
    fast = pairbench.compile_unit(subgraph_c(1), "rstf_sg_0", 4 * N, work)
    slow = pairbench.compile_unit(subgraph_c(64), "rstf_sg_0", 4 * N, work)
    assert fast.params == "const float *in0, float *out0, void *ws"
    assert [c for c, _ in fast.calls] == ["sched_0", "sched_1"]
    assert fast.calls[1][1] == ("AddV2 model/acc",)
    runs = pairbench.pair_timer([fast, slow], 9, work).run(1)
    assert [len(r) for r in runs] == [9, 9]
    for slot in runs:
        for run in slot:
            assert [c["call"] for c in run] == ["sched_0", "sched_1"]
            assert all(c["seconds"] > 0 for c in run)
    ratio = statistics.median(s[1]["seconds"] / f[1]["seconds"] for f, s in zip(*runs))
    assert ratio > 8, ratio


def test_one_unit_fills_two_slots_as_two_copies(tmp_path):
    """The same unit twice (the tuner's measure of its own noise): its entry and every
    other global are renamed or made local per slot, so the two copies link and run."""
    work = str(tmp_path)
    unit = pairbench.compile_unit(subgraph_c(2), "rstf_sg_0", 4 * N, work)
    a, b = pairbench.pair_timer([unit, unit], 5, work).run(1)
    assert len(a) == len(b) == 5
    assert all(len(r) == 2 for r in a + b)


def test_variants_of_different_tensors_are_refused(tmp_path):
    work = str(tmp_path)
    a = pairbench.compile_unit(subgraph_c(1), "rstf_sg_0", 4 * N, work)
    b = pairbench.compile_unit(subgraph_c(1, n=N // 2), "rstf_sg_0", 2 * N, work)
    with pytest.raises(RstfError, match="same tensors"):
        pairbench.pair_timer([a, b], 3, work)


def test_the_harness_alternates_which_slot_runs_first():
    """Odd runs take the slots backwards: neither variant always runs after the other."""
    unit = pairbench.Unit("x.o", "e", "float *out0, void *ws", (("sched_0", ()),), 64,
                          (("out0", (4,)),), (("out0", "float"),))
    c = pairbench.harness([unit, unit], 7)
    assert "switch ((r & 1) ? 2 - 1 - j : j)" in c
    assert "for (int r = -3; r < 7; ++r)" in c
    assert "rstf_slot0_entry(out0, ws0)" in c and "rstf_slot1_entry(out0, ws1)" in c


def test_a_time_limit_stops_the_runs_early_at_an_even_count(tmp_path):
    """`seconds`: the runs stop once they have taken that long, after an even count of them
    (each slot first as often as second) and at least `MIN_RUNS`; every slot reports the
    runs made, no more."""
    work = str(tmp_path)
    unit = pairbench.compile_unit(subgraph_c(4), "rstf_sg_0", 4 * N, work)
    a, b = pairbench.pair_timer([unit, unit], 50, work, seconds=1e-9).run(1)
    assert len(a) == len(b) == pairbench.MIN_RUNS
    a, b = pairbench.pair_timer([unit, unit], 12, work, seconds=3600.0).run(1)
    assert len(a) == len(b) == 12
