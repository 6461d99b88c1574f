"""A microkernel's reduction loop run several steps a trip (`Target.k_steps`).

`microkernel.kernel_text` writes a contraction kernel's k loop one step a trip, rolled
(`#pragma GCC unroll 1`), so that gcc never unrolls a small constant K whole and spills the
accumulators. That loop's own instructions cost a share of every step: each trip held
register moves, the panel prefetch's address and test, the counter and the branch, scalar
work that partly issues to the ports the vector FMAs need, beside a step of only 12 FMAs
(a 16-register target's 6x16 tile) or 24 (a 32-register one's 8x48). Here a trip runs
`Shape.steps` steps, unrolled, and a rolled loop the rest of K.
"""
from __future__ import annotations


def blocked_loop(shape, step) -> str:
    """The k loop of a contraction kernel (`shape`, a `microkernel.Shape`) `shape.steps`
    steps a trip (`Target.k_steps`):
    `step(kv)` (a step's C at k = kv) unrolled that many times, the trip's prefetches
    (the lines the rolled loop prefetches over those steps) once before them; then the
    rest of K one step a trip, its prefetches all before it. Every accumulator still
    takes its steps in ascending k: the results are the rolled loop's, bit for bit."""
    u = shape.steps
    assert u % 2 == 0 and not (shape.vec_a or shape.slide), shape

    def ahead(end: str, indent: str) -> str:
        """The prefetches of steps k .. end - 1 (k even)."""
        out = []
        if shape.pf:  # two lines of another group's weight a step, its first steps'
            out += [f"for (int q = k; q < {end} && q < {(shape.pf + 1) // 2}; ++q) {{",
                    "    __builtin_prefetch(pf + 128L * q, 0, 2);",
                    "    __builtin_prefetch(pf + 128L * q + 64, 0, 2);", "}"]
        if shape.pp:  # the next panel's: its lines of these steps, or pps lines a step
            out += [f"const int qe = pps ? ({end}) * pps "
                    f": (int)(((({end}) - 1) * pstep >> 32) + 1);",
                    "for (int q = pps ? k * pps : (int)(k * pstep >> 32); q < qe && q < npp; "
                    "++q)",
                    "    __builtin_prefetch(pp + 64L * q, 0, 2);"]
        return "".join(f"{indent}{ln}\n" for ln in out)

    body = "\n".join(f"    {ln}" for ln in step("ku").splitlines())
    return f"""\
    int k = 0;
    #pragma GCC unroll 1
    for (; k + {u} <= K; k += {u}) {{
{ahead(f"k + {u}", "        ")}        #pragma GCC unroll {u}
        for (int ku = k; ku < k + {u}; ++ku) {{
{body}
        }}
    }}
{ahead("K", "    ")}    #pragma GCC unroll 1
    for (; k < K; ++k) {{
{step("k")}
    }}"""


def trip_steps(k_steps: int, sar: int, sak: int) -> int:
    """The steps a trip of a contraction kernel's k loop runs: the target's `k_steps`, but
    no more than keep one row's reads of a trip clear of the next row's (`sar`, `sak`:
    a's strides per row and per step), and even (`blocked_loop` prefetches by pairs); 1
    where that leaves fewer than 2.

    Where the rows of a tile overlap in `a` within a trip (the first conv's, stride 2
    over 3 channels: rows 6 floats apart, each reading 21 in a row), gcc loads each shared
    value once and keeps it live for every row's step that reads it, in the registers the
    accumulators need, and spills accumulators every step. A trip clear of the next row's
    reads shares nothing (docs/tuning-constants.md, `k_steps`)."""
    if not sar or not sak or k_steps <= 1:
        return k_steps
    steps = min(k_steps, abs(sar) // abs(sak)) // 2 * 2
    return steps if steps >= 2 else 1
