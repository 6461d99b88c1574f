#!/usr/bin/env python3
"""A contraction microkernel against the machine's own ceiling for its tile, in L1, on one core.

    python benchmarks/kernel_ceiling.py [--rows 9] [--width 48] [--k 128] [--rounds 6]

Times three programs, round by round interleaved (this machine's clock moves by +-10% over
minutes when other tenants run: only the ratios within a run mean anything), each the best
of 5 passes of a tile of `--rows` rows x `--width` columns over `--k` reduction steps whose
operands stay in L1:

- `rstf`: the microkernel rstf generates for that tile (`microkernel.kernel_source`, the
  target's k steps a trip, no k slices or prefetch), called as the generated code calls it;
- `asm`: the same loop written out in AVX-512 assembly, every accumulator in its own
  register, the row operand broadcast from memory, two broadcast registers in turn, three
  base pointers and a stride for the rows: no moves, no spills, nothing but the loads and
  FMAs (what a hand-scheduled kernel of this tile can do here);
- `peak`: `benchmarks/peak_fma.c` on one thread (12 chains of register-only FMAs).

Prints each one's median GFLOP/s over the rounds and the kernels as shares of the peak. x86
with AVX-512 and gcc only (the assembly is AT&T x86-64).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DRIVER = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
%(decl)s
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv)
{
    const int K = %(k)d, R = %(rows)d, W = %(width)d;
    const long reps = atol(argv[1]);
    float *a = aligned_alloc(64, 4L * R * K + 64), *b = aligned_alloc(64, 4L * K * W), *y = aligned_alloc(64, 4L * R * W);
    for (long i = 0; i < (long)R * K; ++i) a[i] = 1e-3f * (i %% 13);
    for (long i = 0; i < (long)K * W; ++i) b[i] = 1e-3f * (i %% 7);
    for (long i = 0; i < (long)R * W; ++i) y[i] = 0;
    double best = 1e9;
    for (int pass = 0; pass < 5; ++pass) {
        const double t0 = now();
        for (long r = 0; r < reps; ++r) %(call)s;
        const double t = now() - t0;
        if (t < best) best = t;
    }
    printf("%%.2f\n", 2.0 * R * W * K * reps / best / 1e9);
    return y[0] == 12345.0f;
}
"""


def asm_kernel(rows: int, nv: int, steps: int) -> str:
    """kasm(trips, a, b, sar_bytes, y): y[rows][nv*16] (contiguous) += a (rows at sar) x b
    (contiguous rows of nv*16), `steps` k steps a trip."""
    bases = ["%rsi", "%r10", "%r11", "%r12", "%r13"][:(rows + 2) // 3]
    acc = rows * nv
    assert acc + nv + 2 <= 32 and len(bases) <= 5
    out = [".text", ".globl kasm", ".type kasm,@function", "kasm:", "push %r12", "push %r13",
           "lea (%rcx,%rcx,2), %rax"]
    for prev, base in zip(bases, bases[1:]):
        out.append(f"lea ({prev},%rax), {base}")
    out += [f"vmovups {64 * i}(%r8), %zmm{i}" for i in range(acc)]
    out.append(".p2align 5\n.Lk:")
    for u in range(steps):
        out += [f"vmovups {64 * (u * nv + v)}(%rdx), %zmm{acc + v}" for v in range(nv)]
        for r in range(rows):
            base, scale = bases[r // 3], r % 3
            at = f"{4 * u}({base})" if scale == 0 else f"{4 * u}({base},%rcx,{scale})"
            bc = acc + nv + r % 2
            out.append(f"vbroadcastss {at}, %zmm{bc}")
            out += [f"vfmadd231ps %zmm{bc}, %zmm{acc + v}, %zmm{r * nv + v}" for v in range(nv)]
    out += [f"add ${4 * steps}, {b}" for b in bases]
    out += [f"add ${64 * nv * steps}, %rdx", "dec %rdi", "jnz .Lk"]
    out += [f"vmovups %zmm{i}, {64 * i}(%r8)" for i in range(acc)]
    out += ["pop %r13", "pop %r12", "vzeroupper", "ret", '.section .note.GNU-stack,"",@progbits']
    return "\n".join(out) + "\n"


def build(work: str, name: str, sources: list[str], flags: list[str]) -> str:
    exe = os.path.join(work, name)
    subprocess.run(["gcc", "-O3", "-std=gnu11", "-march=native", "-mprefer-vector-width=512",
                    "-Wno-unused-function", *flags, "-o", exe, *sources], check=True)
    return exe


def main(argv=None) -> int:
    from rstf.poly import microkernel as mk
    from rstf.poly.target import AVX512_FULL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=9)
    ap.add_argument("--width", type=int, default=48, help="columns, a multiple of 16")
    ap.add_argument("--k", type=int, default=128, help="reduction steps (operands in L1)")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args(argv)
    if a.width % 16 or a.k % AVX512_FULL.k_steps:
        ap.error("--width must be a multiple of 16 and --k of the target's k steps")
    t, nv = AVX512_FULL, a.width // 16
    work = tempfile.mkdtemp(prefix="rstf-ceiling-")
    shape = mk.Shape(a.rows, a.width, t.vlen, steps=t.k_steps)
    name = mk.kernel_name(shape)
    rstf_c = os.path.join(work, "rstf_kernel.c")
    with open(rstf_c, "w") as f:
        f.write("#include <stddef.h>\n" + mk.prelude(t) + mk.kernel_source(shape))
    params = dict(k=a.k, rows=a.rows, width=a.width)
    progs = {}
    drv = os.path.join(work, "rstf_driver.c")
    with open(drv, "w") as f:
        f.write(DRIVER % dict(params, decl=f'#include "{rstf_c}"',
                              call=f"{name}(K, a, K, 1, b, W, y, W)"))
    progs["rstf"] = build(work, "rstf", [drv], [])
    with open(os.path.join(work, "k.s"), "w") as f:
        f.write(asm_kernel(a.rows, nv, t.k_steps))
    drv = os.path.join(work, "asm_driver.c")
    with open(drv, "w") as f:
        f.write(DRIVER % dict(params, decl="void kasm(long, const float *, const float *, "
                              "long, float *);", call=f"kasm(K / {t.k_steps}, a, b, 4L * K, y)"))
    progs["asm"] = build(work, "asm", [drv, os.path.join(work, "k.s")], [])
    progs["peak"] = build(work, "peak", [os.path.join(ROOT, "benchmarks", "peak_fma.c")],
                          ["-fopenmp"])
    reps = max(1, int(3e9 / (2 * a.rows * a.width * a.k) / 5))
    got = {p: [] for p in progs}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(a.rounds):
        for p, exe in progs.items():
            out = subprocess.run([exe] if p == "peak" else [exe, str(reps)], env=env,
                                 capture_output=True, text=True).stdout
            got[p].append(float(re.findall(r"[\d.]+(?= GFLOP/s)", out)[0] if p == "peak"
                                else out.split()[0]))
    med = {p: statistics.median(v) for p, v in got.items()}
    print(f"{a.rows}x{a.width} tile, K={a.k} (in L1), one core, medians of {a.rounds} rounds:")
    for p in progs:
        share = f"  {med[p] / med['peak']:.0%} of the peak" if p != "peak" else ""
        print(f"  {p:5s} {med[p]:7.1f} GFLOP/s{share}")
    print(f"  asm / rstf: {med['asm'] / med['rstf']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
