#!/usr/bin/env python3
"""Which microkernels of an optimized model touch the stack inside their loops.

    python benchmarks/kernel_spills.py OUTDIR [--march native] [--per 12]

A contraction kernel keeps its RB x NV accumulators in vector registers for the whole
reduction (rstf/poly/microkernel.py). When gcc runs out of registers in the kernel's loops
it spills them, and the kernel loads and stores accumulators every step: ResNet-50's first
conv on AVX2, whose rows overlap in their input, ran 2.3x slower so (`kloop.trip_steps`).
Nothing in the C says so; the assembly does.

Each src/subgraph_*.c of OUTDIR (an `rstf optimize` output folder) is compiled to
assembly with the op library's C flags (`-march` as given), and every loop of each
microkernel (`rstf_mk*`, gcc's clones included) that holds FMAs is counted: its FMAs and its vector
registers' stack accesses. A loop with more than one such access per --per FMAs (12: one
step of AVX2's 6x16 tile) is printed. Reads x86 gcc assembly (AT&T syntax); elsewhere it
finds no loop.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rstf.build.compiler import c_flags, sanitize_flags  # noqa: E402


def kernel_loops(asm: str, pattern: str = r"rstf_mk\w*") -> dict[str, list[tuple[int, int]]]:
    """{function: [(FMAs, vector stack accesses) of each loop holding FMAs]} for the
    functions of `asm` (gcc's x86 output) whose name, less gcc's clone suffixes, matches
    `pattern`. A loop is a label and a later branch back to it, counted without the loops
    nested in it (gcc's block layout also branches backwards around straight-line code
    that runs once a call, such as the accumulators' stores). Only vector registers' stack
    accesses count (spilled accumulators, operands, broadcasts); a pointer spilled to the
    stack costs far less."""
    out = {}
    for m in re.finditer(rf"^({pattern}(?:\.\w+)*):$", asm, re.M):
        end = asm.find(".cfi_endproc", m.end())
        lines = asm[m.end():end if end >= 0 else len(asm)].splitlines()
        labels = {ln[:-1]: i for i, ln in enumerate(lines) if re.fullmatch(r"\.L\w+:", ln)}
        spans = []
        for i, ln in enumerate(lines):
            back = re.match(r"\s+j\w+\s+(\.L\w+)$", ln)
            if back and labels.get(back.group(1), i) < i:
                spans.append((labels[back.group(1)], i))
        loops = []
        for lo, hi in spans:
            inner = [(a, b) for a, b in spans if lo <= a and b <= hi and (a, b) != (lo, hi)]
            body = [ln for j, ln in enumerate(lines[lo:hi], lo)
                    if not any(a <= j <= b for a, b in inner)]
            fmas = sum("vfmadd" in b or "vfnmadd" in b for b in body)
            if fmas:
                loops.append((fmas, sum(("(%rsp)" in b or "(%rbp)" in b)
                                        and re.search(r"%[xyz]mm", b) is not None
                                        for b in body)))
        out[m.group(1)] = loops
    return out


def spilling(loops: dict[str, list[tuple[int, int]]], per: int = 12) -> list[tuple]:
    """(function, FMAs, stack accesses) of each loop with more than one stack access per
    `per` FMAs."""
    return [(fn, f, s) for fn, ls in loops.items() for f, s in ls if s > f // per]


def source_loops(source: str, march: str = "native", include: str = "") -> dict:
    """`kernel_loops` of one C source compiled with the op library's flags (its release
    build's: without RSTF_SANITIZE's instrumentation, which puts its own stack accesses in
    every loop)."""
    with tempfile.TemporaryDirectory(prefix="rstf-spills-") as tmp:
        c, s = os.path.join(tmp, "k.c"), os.path.join(tmp, "k.s")
        with open(c, "w") as f:
            f.write(source)
        flags = [f for f in c_flags(march) if f not in sanitize_flags()]
        subprocess.run(["gcc", *flags, *(["-I", include] if include else []),
                        "-S", "-o", s, c], check=True)
        with open(s) as f:
            return kernel_loops(f.read())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--march", default="native")
    ap.add_argument("--per", type=int, default=12,
                    help="FMAs a loop may run per stack access (default 12)")
    a = ap.parse_args(argv)
    sources = sorted(glob.glob(os.path.join(a.outdir, "src", "subgraph_*.c")))
    if not sources:
        print(f"kernel_spills: no src/subgraph_*.c in {a.outdir}", file=sys.stderr)
        return 2
    kernels = found = 0
    for path in sources:
        with open(path) as f:
            loops = source_loops(f.read(), a.march, os.path.dirname(path))
        kernels += len(loops)
        for fn, fmas, stack in spilling(loops, a.per):
            found += 1
            print(f"{os.path.basename(path)}: {fn}: a loop of {fmas} FMAs with {stack} "
                  "vector stack accesses")
    print(f"{kernels} kernel functions in {len(sources)} subgraphs; {found} loops move vectors "
          f"through the stack more than once per {a.per} FMAs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
