"""Register-blocked microkernels for contractions (PolyScientist's split: a microkernel for
the innermost loops, polyhedral loops around it; shared/papers/polyscientist.txt).

A kernel `rstf_mk_<RB>x<NV>` computes, for a tile of RB rows and VB = 16*NV contiguous
columns, `y[r][0:VB] += sum_k a[r, k] * b[k][0:VB]` over K reduction steps, keeping the
RB x NV accumulators in vector registers for the whole reduction (the textbook loop nest
reloads and stores them on every step). Rows and reduction steps are at arbitrary element
strides, so one kernel serves Conv2D (rows = output columns, k = input channels, any
stride or dilation) and MatMul alike. The accumulation order of every output element is
the same as the textbook nest's (k ascending, one fused multiply-add a step), so results
are bit-identical to it.

GCC vector extensions rather than intrinsics: the code stays portable C (any -march
compiles it; AVX-512 makes one vector one register).
"""
from __future__ import annotations

VLEN = 16  # floats per vector: one AVX-512 register
MAX_REGISTERS = 31  # of the 32 zmm registers, leave one for the broadcast operand


def fits_registers(rb: int, nv: int) -> bool:
    """RB x NV accumulators + NV loaded b vectors + one broadcast fit in the registers."""
    return rb * nv + nv + 1 <= MAX_REGISTERS


PRELUDE = """\
/* Microkernel vector type: 16 floats (one AVX-512 register); unaligned, may alias. */
typedef float rstf_v16 __attribute__((vector_size(64), aligned(4), may_alias));
"""


def kernel_name(rb: int, nv: int) -> str:
    return f"rstf_mk_{rb}x{nv}"


def kernel_source(rb: int, nv: int) -> str:
    """The C of one microkernel (static inline; needs PRELUDE)."""
    name = kernel_name(rb, nv)
    return f"""\
/* y[r][0:{VLEN * nv}] += sum over k of a[r*sar + k*sak] * b[k*sbk + 0:{VLEN * nv}], r < {rb}:
   {rb}x{nv} accumulators stay in vector registers for the whole reduction. */
static inline void {name}(int K, const float *restrict a, long sar, long sak,
                          const float *restrict b, long sbk, float *restrict y, long syr)
{{
    rstf_v16 acc[{rb}][{nv}];
    for (int r = 0; r < {rb}; ++r)
        for (int v = 0; v < {nv}; ++v)
            acc[r][v] = *(const rstf_v16 *)(y + r * syr + {VLEN} * v);
    for (int k = 0; k < K; ++k) {{
        rstf_v16 bv[{nv}];
        for (int v = 0; v < {nv}; ++v)
            bv[v] = *(const rstf_v16 *)(b + k * sbk + {VLEN} * v);
        for (int r = 0; r < {rb}; ++r) {{
            const float av = a[r * sar + k * sak];
            for (int v = 0; v < {nv}; ++v)
                acc[r][v] += av * bv[v];
        }}
    }}
    for (int r = 0; r < {rb}; ++r)
        for (int v = 0; v < {nv}; ++v)
            *(rstf_v16 *)(y + r * syr + {VLEN} * v) = acc[r][v];
}}
"""


def dispatch_name(rb: int, nv: int) -> str:
    return f"rstf_mkv_{rb}x{nv}"


def dispatch_source(shapes: list[tuple[int, int]]) -> str:
    """Every kernel the (RB, NV) tilings need: for each, kernels of 1..RB rows (a chunk at a
    padding border or a row remainder is shorter) and `rstf_mkv_<RB>x<NV>(rows, ...)`,
    which calls the one for `rows` (a switch: full chunks take the first case)."""
    needed = sorted({(r, nv) for rb, nv in shapes for r in range(1, rb + 1)})
    out = [kernel_source(r, nv) for r, nv in needed]
    for rb, nv in sorted(set(shapes)):
        cases = "".join(f"    case {r}: {kernel_name(r, nv)}(K, a, sar, sak, b, sbk, y, syr); "
                        f"break;\n" for r in range(rb - 1, 0, -1))
        out.append(f"""\
/* {rb} rows of {VLEN * nv} columns, or fewer at a border or a remainder. */
static void {dispatch_name(rb, nv)}(int rows, int K, const float *restrict a, long sar, long sak,
                          const float *restrict b, long sbk, float *restrict y, long syr)
{{
    switch (rows) {{
    case {rb}: {kernel_name(rb, nv)}(K, a, sar, sak, b, sbk, y, syr); break;
{cases}    }}
}}
""")
    return "\n".join(out) + "\n"


def _efficiency(rb: int, nv: int) -> float:
    """Rough fraction of the FMA peak a kernel of rb x nv accumulators reaches: RB*NV FMAs
    a step for RB + NV loads, and at least 8 independent accumulators to hide the FMA
    latency on two pipes."""
    acc = rb * nv
    return min(1.0, acc / 10) * acc / (acc + (rb + nv) / 2)


def choose_tile(rows: int, cols: int) -> tuple[int, int, float] | None:
    """(RB, NV, estimated cost per output) for a contraction over `rows` x `cols` outputs,
    or None when no kernel tile fits (cols < 16).

    The cost model: a row of the tiling is cut into chunks of RB rows and one shorter
    remainder chunk (run by the RB = remainder kernel), each at its `_efficiency`; the
    columns are covered by floor(cols/VB) tiles of VB = 16*NV, the rest runs in the
    residual textbook loops, about 4x slower than a kernel.
    """
    best = None
    for nv in (4, 3, 2, 1):
        vb = VLEN * nv
        if cols < vb:
            continue
        covered = cols // vb * vb / cols
        for rb in range(1, min(rows, 14) + 1):
            if not fits_registers(rb, nv):
                continue
            full, rem = divmod(rows, rb)
            per_row = (full * rb / _efficiency(rb, nv)
                       + (rem / _efficiency(rem, nv) if rem else 0.0)) / rows
            cost = covered * per_row + (1 - covered) * 4.0
            if best is None or cost < best[2] - 1e-9:
                best = (rb, nv, cost)
    return best
