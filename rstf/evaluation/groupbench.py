"""Time every scheduled group of a subgraph's C in a standalone program: the op library's
own flags, rstf's thread team, weights and workspace on 2 MB pages, denormals flushed.

`time_calls(source, entry, workspace_bytes)` copies the C, wraps every call in its entry
function (`sched_N`, `op_N`: a scheduled group, or a call the pass left alone) in a
wall-clock timer, compiles it with a `main()` that feeds random inputs (shapes from the
C's tensor-table comment), runs the entry `reps` times after three warm-up runs, and returns
each call's median seconds with the TF nodes it runs. The neighbours' cache state is the
real one: every group runs where it runs in the op, after the groups before it.
No TensorFlow in the loop. `rstf tune` and `benchmarks/group_profile.py` time through here.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import tempfile

from ..build.compiler import (CUSTOM_OPS_DIR, TEAM_CALLS, TEAM_SOURCE, c_flags, link_libs,
                              run_tool)
from ..poly.target import machine_threads

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


def tensor_allocs(shapes: dict, ctypes: dict | None = None) -> tuple[list[str], str]:
    """(the entry's tensor arguments in order: in0.., out0..; the C that allocates them).
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
    return names, "\n".join(alloc)


def buffers(shapes: dict, ws_bytes: int, ctypes: dict | None = None) -> tuple[list[str], str]:
    """(the entry's arguments in order: in0.., out0.., ws; the C that allocates them):
    `tensor_allocs`, and a workspace of `ws_bytes`."""
    names, alloc = tensor_allocs(shapes, ctypes)
    return names + ["ws"], alloc + f"\n    void *ws = alloc_rand({(ws_bytes + 3) // 4 or 1});"


def bench_c_flags() -> list[str]:
    """The op library's C flags, for a standalone build that calls the entry from outside."""
    return [x for x in c_flags() if x != "-fvisibility=hidden"]


def team_build(unit: str, exe: str, workdir: str) -> None:
    """Compile the C program `unit` with the op library's C flags and RSTF_TEAM and link it
    with rstf's OpenMP team (rstf/runtime/rstf_team.c) instead of libgomp, as the op library
    is built, into `exe`: the parallel loops then run as they do under TensorFlow. A
    compiler error is an RstfError naming its first line and a log of the whole output."""
    objs = []
    for c in (unit, os.path.join(CUSTOM_OPS_DIR, TEAM_SOURCE)):
        objs.append(os.path.join(workdir, os.path.basename(c) + ".o"))
        run_tool(["gcc", *bench_c_flags(), "-DRSTF_TEAM", "-I", CUSTOM_OPS_DIR, "-c", c,
                  "-o", objs[-1]], os.path.basename(c))
    # Linked without -fopenmp: every GOMP_* and omp_* the program calls is the team's.
    run_tool(["gcc", "-pthread", *objs, "-o", exe, "-lm", *link_libs(bench_c_flags())],
             "the timing program")


# C: the harness's clock (the team has no omp_get_wtime), before any other include.
WTIME = """#define _POSIX_C_SOURCE 200809L
#include <time.h>
static double rstf_wtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
"""


_C_SIZES = {"float": 4, "double": 8, "int": 4, "long": 8, "short": 2, "char": 1}


def call_input_bytes(src: str, entry: str) -> list[int]:
    """The bytes of the subgraph inputs (`inN`: its weights, and the activations it takes)
    that each call `instrument` times reads, in the same order: a weight-streaming group's
    bandwidth is these over its time."""
    shapes, ctypes = tensor_shapes(src), tensor_ctypes(src)
    lines = src.splitlines()
    out = []
    for line in lines[_entry_start(lines, entry):]:
        if _CALL.match(line):
            names = dict.fromkeys(re.findall(r"\b(in\d+)\b", line))
            out.append(sum(math.prod(shapes[n]) * _C_SIZES.get(ctypes[n].split()[-1], 4)
                           for n in names if n in shapes))
    return out


def _entry_start(lines: list[str], entry: str) -> int:
    """The line where the subgraph C's entry function `entry` begins."""
    return next(i for i, l in enumerate(lines) if l.startswith(f"void {entry}("))


def instrument(src: str, entry: str) -> tuple[str, list[dict]]:
    """(instrumented C, the timed calls in order) for `entry` in `src`."""
    lines = src.splitlines()
    start = _entry_start(lines, entry)
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


@dataclasses.dataclass(frozen=True)
class Timer:
    """A built timing program: its executable and the calls it times, in order."""
    exe: str
    calls: tuple[tuple[str, tuple[str, ...]], ...]  # (call, its "Type name" nodes)

    def run(self, threads: int = 0) -> tuple[float, list[dict]]:
        """(median seconds of a whole run, the calls in order: {"call", "nodes",
        "seconds"}), on `threads` of the team (default: every core this process may
        use)."""
        out = subprocess.run([self.exe, str(threads or machine_threads())],
                             capture_output=True, text=True, check=True).stdout
        med = {int(k): float(v) for k, v in (line.split() for line in out.splitlines())}
        total = med.pop(len(self.calls))
        return total, [{"call": c, "nodes": list(n), "seconds": med[k]}
                       for k, (c, n) in enumerate(self.calls)]


def build_timer(source: str, entry: str, workspace_bytes: int, reps: int,
                workdir: str) -> Timer:
    """The timing program of `entry` in the subgraph C `source` (`reps` timed runs a
    start), built in `workdir`, which must outlive the Timer."""
    code, calls = instrument(source, entry)
    code += harness(entry, tensor_shapes(source), workspace_bytes, reps, len(calls),
                    tensor_ctypes(source))
    d = tempfile.mkdtemp(dir=workdir)
    c, exe = os.path.join(d, "p.c"), os.path.join(d, "p")
    with open(c, "w") as f:
        f.write(code)
    team_build(c, exe, d)
    return Timer(exe, tuple((x["call"], tuple(x["nodes"])) for x in calls))


def time_calls(source: str, entry: str, workspace_bytes: int, reps: int = 20,
               threads: int = 0) -> tuple[float, list[dict]]:
    """`Timer.run` of a program built and run once."""
    with tempfile.TemporaryDirectory() as d:
        return build_timer(source, entry, workspace_bytes, reps, d).run(threads)
