#!/usr/bin/env python3
"""Where a subgraph's time goes: time every scheduled group of an optimized subgraph's C.

    python benchmarks/group_profile.py OUTDIR [--subgraph 0] [--reps 20] [--threads N] [--top 25]

OUTDIR is an `rstf optimize` output folder. The subgraph's C (OUTDIR/src/subgraph_<i>.c) is
copied, every call in its entry function is wrapped in a wall-clock timer, and the result is
compiled with the same C flags as the op library into a standalone program that feeds random
inputs (shapes from the file's tensor table, workspace size from report.json). It prints each
call's median time over --reps runs, its share of the entry's time, and the TF nodes it runs,
so that a profile names groups rather than inlined symbols. No TensorFlow in the loop: the sum
is the kernels' own time, without the op wrapper or the harness.

Where the model the folder was optimized from is still at the path report.json names, each
call's conv/matmul FLOPs come from it (`pipeline.node_flops`), and the listing gives each
call's GFLOP/s: the figure to compare with the machine's peak (benchmarks/peak_fma.c).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_TENSOR = re.compile(r"^\*\s+(in\d+|out\d+): (?:input|output) ([a-z ]+)\(([\d, ]*)\)")
_CALL = re.compile(r"^    (sched_\d+|op_\d+)\(.*\);$")
_NODE = re.compile(r"^    /\* (.*) \((\w+)\) \*/$")


def tensor_shapes(src: str) -> dict[str, list[int]]:
    """{'in0': shape, .., 'out0': shape, ..} from the subgraph C's tensor-table comment."""
    return {m.group(1): [int(d) for d in m.group(3).split(",") if d.strip()]
            for m in map(_TENSOR.match, src.splitlines()) if m}


def tensor_ctypes(src: str) -> dict[str, str]:
    """{'in0': its C element type, ..} from the same table ('float', 'int', ...)."""
    return {m.group(1): m.group(2) for m in map(_TENSOR.match, src.splitlines()) if m}


def load_subgraph(outdir: str, subgraph: int, tool: str) -> tuple[str, dict, dict]:
    """(C source, {tensor: shape}, report entry) of one subgraph of an `rstf optimize`
    output folder; `tool` names the caller in the error for a dynamic-batch subgraph."""
    report = json.load(open(os.path.join(outdir, "report.json")))
    sg = report["subgraphs"][subgraph]
    if sg.get("versions", 1) > 1 or report.get("dynamic_batch"):
        raise SystemExit(f"{tool}: dynamic-batch subgraphs are not supported")
    src = open(os.path.join(outdir, sg["source"])).read()
    return src, tensor_shapes(src), sg


# C: the standalone programs' random buffers, one after the other in one arena on 2 MB
# pages, as the op library keeps its weights and workspace (rstf/runtime/rstf_kernel.h).
ALLOC_RAND = """
#include <sys/mman.h>
extern int madvise(void *, size_t, int);  /* (hidden by -std=c11) */
static char *rstf_arena;
static long rstf_arena_used, rstf_arena_size;
static float *alloc_rand(long n) {
    const long bytes = ((n * 4 + 63) / 64) * 64;
    if (rstf_arena_used + bytes > rstf_arena_size) {
        rstf_arena_size = ((bytes + (64L << 20) - 1) >> 21) << 21;
        rstf_arena = aligned_alloc(2L << 20, rstf_arena_size);
        madvise(rstf_arena, rstf_arena_size, 14 /* MADV_HUGEPAGE */);
        rstf_arena_used = 0;
    }
    float *p = (float *)(rstf_arena + rstf_arena_used);
    rstf_arena_used += bytes;
    for (long i = 0; i < n; ++i) p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}
"""


def buffers(shapes: dict, ws_bytes: int, ctypes: dict | None = None) -> tuple[list[str], str]:
    """(the entry's arguments in order: in0.., out0.., ws; the C that allocates them).
    Float tensors hold random values; integer and bool ones (`ctypes`) hold 1 everywhere:
    a valid index of any table, a mask that keeps every position."""
    names = sorted((k for k in shapes if k.startswith("in")), key=lambda k: int(k[2:]))
    names += sorted((k for k in shapes if k.startswith("out")), key=lambda k: int(k[3:]))
    ctypes = ctypes or {}
    alloc = []
    for k in names:
        n, ct = max(1, math.prod(shapes[k])), ctypes.get(k, "float")
        alloc.append(f"    float *{k} = alloc_rand({n});" if ct == "float" else
                     f"    {ct} *{k} = malloc({n} * sizeof({ct}));\n"
                     f"    for (long i = 0; i < {n}; ++i) {k}[i] = 1;")
    alloc.append(f"    void *ws = alloc_rand({(ws_bytes + 3) // 4 or 1});")
    return names + ["ws"], "\n".join(alloc)


def bench_c_flags() -> list[str]:
    """The op library's C flags, for a standalone build that calls the entry from outside."""
    from rstf.build.compiler import c_flags
    return [x for x in c_flags() if x != "-fvisibility=hidden"]


def team_build(unit: str, exe: str, workdir: str) -> None:
    """Compile the C program `unit` with the op library's C flags and RSTF_TEAM and link it
    with rstf's OpenMP team (rstf/runtime/rstf_team.c) instead of libgomp, as the op library
    is built, into `exe`: the parallel loops then run as they do under TensorFlow."""
    from rstf.build.compiler import CUSTOM_OPS_DIR, TEAM_SOURCE, link_libs
    objs = []
    for c in (unit, os.path.join(CUSTOM_OPS_DIR, TEAM_SOURCE)):
        objs.append(os.path.join(workdir, os.path.basename(c) + ".o"))
        subprocess.run(["gcc", *bench_c_flags(), "-DRSTF_TEAM", "-I", CUSTOM_OPS_DIR, "-c", c,
                        "-o", objs[-1]], check=True)
    # Linked without -fopenmp: every GOMP_* and omp_* the program calls is the team's.
    subprocess.run(["gcc", "-pthread", *objs, "-o", exe, "-lm", *link_libs(bench_c_flags())],
                   check=True)


# C: the harness's clock (the team has no omp_get_wtime), before any other include.
WTIME = """#define _POSIX_C_SOURCE 200809L
#include <time.h>
static double rstf_wtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
"""


def instrument(src: str, entry: str) -> tuple[str, list[dict]]:
    """(instrumented C, the timed calls in order) for `entry` in `src`."""
    lines = src.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"void {entry}("))
    calls, nodes, out = [], [], lines[:start]
    for line in lines[start:]:
        node = _NODE.match(line)
        if node:
            nodes.append(f"{node.group(2)} {node.group(1)}")
        call = _CALL.match(line)
        if call:
            k = len(calls)
            calls.append({"call": call.group(1), "nodes": nodes})
            nodes = []
            line = (f"    {{ double _t0 = rstf_wtime(); {line.strip()} "
                    f"rstf_prof[{k}] += rstf_wtime() - _t0; }}")
        elif nodes and "fused into" in line:
            calls[-1]["nodes"].extend(nodes) if calls else None
            nodes = []
        out.append(line)
    head = WTIME + f"double rstf_prof[{max(len(calls), 1)}];\n"
    return head + "\n".join(out) + "\n", calls


def harness(entry: str, shapes: dict, ws_bytes: int, reps: int, n_calls: int,
            ctypes: dict | None = None) -> str:
    """A main() that runs `entry` reps times on random inputs (`buffers`), on argv[1]
    threads of the team, and prints per-call medians."""
    from rstf.build.compiler import TEAM_CALLS
    names, allocs = buffers(shapes, ws_bytes, ctypes)
    args = ", ".join(names)
    return f"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
{ALLOC_RAND}
{TEAM_CALLS}
static int cmp(const void *a, const void *b) {{
    double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y);
}}
int main(int argc, char **argv) {{
#if defined(__SSE__)
    /* Denormals flushed (FTZ, DAZ), as TensorFlow runs its kernels: random weights through
       many layers drive activations to the denormal range, which would time the FPU's
       slow path rather than the code. The team's workers follow this thread's mode. */
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
{allocs}
    static double t[{reps}][{n_calls + 1}];
    for (int r = -3; r < {reps}; ++r) {{
        memset(rstf_prof, 0, sizeof rstf_prof);
        double t0 = rstf_wtime();
        rstf_call_begin(atoi(argv[1]));  /* as the op wrapper does around a call */
        {entry}({args});
        rstf_call_end();
        double total = rstf_wtime() - t0;
        if (r < 0) continue;
        for (int k = 0; k < {n_calls}; ++k) t[r][k] = rstf_prof[k];
        t[r][{n_calls}] = total;
    }}
    for (int k = 0; k <= {n_calls}; ++k) {{
        double col[{reps}];
        for (int r = 0; r < {reps}; ++r) col[r] = t[r][k];
        qsort(col, {reps}, sizeof(double), cmp);
        printf("%d %.9f\\n", k, col[{reps} / 2]);
    }}
    return 0;
}}
"""


def call_flops(outdir: str, calls: list[dict]) -> None:
    """Set each call's "flops" (the conv/matmul FLOPs of its TF nodes) from the model named
    in OUTDIR/report.json; leaves them unset when that model is gone or does not load."""
    from rstf.errors import RstfError
    from rstf.frontend.graph import load_model
    from rstf.pipeline import node_flops
    report = json.load(open(os.path.join(outdir, "report.json")))
    shapes = {**(report.get("input_shapes") or {}), **(report.get("pinned_shapes") or {})}
    try:
        graph = load_model(report["model"], shapes or None, report.get("outputs") or None,
                           fold=True,
                           fold_scales=report.get("options", {}).get("fold_scales", False))
    except (RstfError, OSError, KeyError, ValueError):
        return
    for c in calls:
        names = (n.split(" ", 1)[1] for n in c["nodes"] if " " in n)
        c["flops"] = sum(node_flops(graph, n) for n in names if n in graph.nodes)


def profile(outdir: str, subgraph: int = 0, reps: int = 20, threads: int = 0) -> dict:
    """Per-call median seconds of one subgraph of an rstf output folder."""
    src, shapes, sg = load_subgraph(outdir, subgraph, "group_profile")
    entry = f"rstf_sg_{subgraph}"
    code, calls = instrument(src, entry)
    code += harness(entry, shapes, sg["workspace_bytes"], reps, len(calls), tensor_ctypes(src))
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "p.c"), os.path.join(d, "p")
        with open(c, "w") as f:
            f.write(code)
        team_build(c, exe, d)
        out = subprocess.run([exe, str(threads or os.cpu_count() or 1)], capture_output=True,
                             text=True, check=True).stdout
    med = {int(k): float(v) for k, v in (l.split() for l in out.splitlines())}
    total = med.pop(len(calls))
    for k, c in enumerate(calls):
        c["seconds"] = med[k]
    return {"total_seconds": total, "calls": calls, "flops": sg["flops"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--subgraph", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0,
                    help="the team's threads (default: every core)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    res = profile(args.outdir, args.subgraph, args.reps, args.threads)
    total = res["total_seconds"]
    print(f"subgraph {args.subgraph}: {total * 1e3:.3f} ms per run (median of {args.reps}), "
          f"{res['flops'] / total / 1e9:.1f} GFLOP/s over its {res['flops'] / 1e9:.3f} GFLOP")
    by_type: dict[str, float] = {}
    for c in res["calls"]:
        kind = c["nodes"][0].split()[0] if c["nodes"] else "?"
        by_type[kind] = by_type.get(kind, 0.0) + c["seconds"]
    print("by the first node's op type:")
    for kind, s in sorted(by_type.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:28s} {s * 1e3:8.3f} ms {100 * s / total:5.1f}%")
    print(f"top {args.top} calls:")
    if args.top:  # loading the model takes seconds: only for a listing
        call_flops(args.outdir, res["calls"])
    for c in sorted(res["calls"], key=lambda c: -c["seconds"])[:args.top]:
        first = c["nodes"][0] if c["nodes"] else ""
        rate = (f" {c['flops'] / c['seconds'] / 1e9:6.1f} GFLOP/s" if c.get("flops")
                and c["seconds"] > 0 else " " * 14)
        print(f"  {c['call']:10s} {c['seconds'] * 1e3:8.3f} ms {100 * c['seconds'] / total:5.1f}%"
              f"{rate}  {first[:90]} (+{max(0, len(c['nodes']) - 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
