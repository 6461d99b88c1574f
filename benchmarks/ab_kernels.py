#!/usr/bin/env python3
"""A/B of two builds of one subgraph's C, interleaved run by run, without TensorFlow.

    python benchmarks/ab_kernels.py OUTDIR_A OUTDIR_B [--subgraph 0] [--reps 200]
                                    [--threads N]

This machine's load comes in bursts of seconds to minutes, so two builds timed one after the
other can differ by 50% for no reason of their own. Here both subgraph C files (same tensor
table, so the same inputs) are compiled into shared libraries with the op library's C flags,
loaded into one process, and called alternately (A, B, B, A, ...) on the same inputs. A burst
then lands on both sides. Each library carries rstf's OpenMP team (rstf/runtime/rstf_team.c) and
each call takes the team's lock, as in the op library, so the parallel loops run as they do
under TensorFlow. Prints each side's median and the median of the per-pair ratios
B/A, the figure to quote (below 1: B is faster).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.group_profile import ALLOC_RAND, buffers, load_subgraph  # noqa: E402
from rstf.build.compiler import compile_c_shared  # noqa: E402


def _main_c(entry: str, shapes: dict, ws_bytes: int, reps: int) -> str:
    """A main() that dlopens argv[1] and argv[2] and prints one 'a b' time pair per line."""
    names, allocs = buffers(shapes, ws_bytes)
    args = ", ".join(names)
    params = ", ".join(["float *"] * (len(names) - 1) + ["void *"])
    decls = ", ".join([f"float *{k}" for k in names[:-1]] + ["void *ws"])
    return f"""
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
typedef void (*entry_t)({params});
typedef void (*begin_t)(int);
typedef void (*end_t)(void);
{ALLOC_RAND}
static double run(entry_t f, begin_t begin, end_t end, int threads, {decls}) {{
    double t0 = omp_get_wtime();
    begin(threads);
    f({args});
    end();
    return omp_get_wtime() - t0;
}}
int main(int argc, char **argv) {{
    entry_t f[2];
    begin_t begin[2];
    end_t end[2];
    const int threads = atoi(argv[3]);
    for (int i = 0; i < 2; ++i) {{
        void *h = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {{ fprintf(stderr, "%s\\n", dlerror()); return 1; }}
        f[i] = (entry_t)dlsym(h, "{entry}");
        begin[i] = (begin_t)dlsym(h, "rstf_call_begin");
        end[i] = (end_t)dlsym(h, "rstf_call_end");
    }}
{allocs}
    for (int r = -3; r < {reps}; ++r) {{
        /* A B, then B A: neither side always runs second (warmer caches). */
        int first = r & 1;
        double t[2];
        t[first] = run(f[first], begin[first], end[first], threads, {args});
        t[!first] = run(f[!first], begin[!first], end[!first], threads, {args});
        if (r >= 0) printf("%.9f %.9f\\n", t[0], t[1]);
    }}
    return 0;
}}
"""


def ab(dir_a: str, dir_b: str, subgraph: int = 0, reps: int = 200, threads: int = 0) -> dict:
    """{'a_ms', 'b_ms' (medians), 'ratio' (median of per-pair b/a), 'pairs'}."""
    src_a, shapes, sg_a = load_subgraph(dir_a, subgraph, "ab_kernels")
    src_b, shapes_b, sg_b = load_subgraph(dir_b, subgraph, "ab_kernels")
    if shapes.keys() != shapes_b.keys() or any(
            shapes[k] != shapes_b[k] for k in shapes if not k.startswith("in")):
        raise SystemExit("ab_kernels: the two subgraphs have different tensor tables")
    # An input may be fed in another layout on one side (a weight fed as Winograd's U,
    # another shape): both sides get the larger buffer, each reading what it reads.
    shapes = {k: max(shapes[k], shapes_b[k], key=math.prod) for k in shapes}
    entry = f"rstf_sg_{subgraph}"
    with tempfile.TemporaryDirectory() as d:
        libs = []
        for tag, src in (("a", src_a), ("b", src_b)):
            libs.append(os.path.join(d, f"{tag}.so"))
            compile_c_shared(src, libs[-1], team=True)  # with rstf_call_begin / _end
        c, exe = os.path.join(d, "main.c"), os.path.join(d, "main")
        with open(c, "w") as f:
            f.write(_main_c(entry, shapes, max(sg_a["workspace_bytes"], sg_b["workspace_bytes"]),
                            reps))
        subprocess.run(["gcc", "-O2", "-fopenmp", c, "-o", exe, "-ldl"], check=True)
        out = subprocess.run([exe, *libs, str(threads or os.cpu_count() or 1)],
                             capture_output=True, text=True, check=True).stdout
    pairs = [tuple(float(x) for x in line.split()) for line in out.splitlines()]
    return {"a_ms": statistics.median(p[0] for p in pairs) * 1e3,
            "b_ms": statistics.median(p[1] for p in pairs) * 1e3,
            "ratio": statistics.median(p[1] / p[0] for p in pairs), "pairs": len(pairs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir_a")
    ap.add_argument("dir_b")
    ap.add_argument("--subgraph", type=int, default=0)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0,
                    help="the team's threads (default: every core)")
    args = ap.parse_args(argv)
    r = ab(args.dir_a, args.dir_b, args.subgraph, args.reps, args.threads)
    print(f"A {r['a_ms']:.3f} ms  B {r['b_ms']:.3f} ms  (medians of {r['pairs']} interleaved "
          f"pairs); B/A per pair, median: {r['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
