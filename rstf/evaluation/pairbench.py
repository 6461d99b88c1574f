"""Time variants of one subgraph's C against each other, run by run, in one process.

Two builds of a subgraph (the tuner's model tiles and a candidate's) timed as separate
programs, seconds apart, each meet their own load on a shared machine: a burst that falls
on one program's runs moves every ratio taken from them by the same factor. Here each
variant is instrumented as `groupbench` instruments one (`compile_unit`: every scheduled
group's call timed), compiled alone, and its entry and timers renamed into a slot of one
program (`pair_timer`), which runs the slots in turn, alternating which goes first, on the
same inputs (each slot with its own workspace), so that the load of any moment falls on
all of them alike. `PairTimer.run` returns every run's per-call seconds, slot by slot and
run by run: a ratio can then be taken between runs made moments apart.

The same unit can fill several slots (two copies of its code): what a ratio moves by with
no change to measure.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile

from ..build.compiler import CUSTOM_OPS_DIR, TEAM_CALLS, TEAM_SOURCE, link_libs, run_tool
from ..errors import RstfError
from ..poly.target import machine_threads
from .groupbench import (ALLOC_RAND, WTIME, bench_c_flags, instrument, tensor_ctypes,
                         tensor_shapes, tensor_allocs)

WARMUP = 3  # untimed runs of each slot first: page faults, the team's threads starting
MIN_RUNS = 8  # the timed runs a program makes before a time limit may stop it


@dataclasses.dataclass(frozen=True)
class Unit:
    """One variant of a subgraph's C, instrumented (`groupbench.instrument`) and compiled
    alone: its object file, its entry's name and parameter list, the calls it times (call,
    its "Type name" nodes) and the workspace it needs. `shapes`/`ctypes`: its tensors'."""
    obj: str
    entry: str
    params: str
    calls: tuple[tuple[str, tuple[str, ...]], ...]
    workspace_bytes: int
    shapes: tuple
    ctypes: tuple


def _params(src: str, entry: str) -> str:
    """The parameter list of `entry`'s definition in `src` (one line, as cgen writes it)."""
    m = re.search(rf"^void {re.escape(entry)}\(([^)]*)\)", src, re.M)
    if m is None:
        raise RstfError(f"no definition of {entry} in the subgraph C")
    return m.group(1)


def compile_unit(source: str, entry: str, workspace_bytes: int, workdir: str) -> Unit:
    """Instrument `entry` of the subgraph C `source` and compile it, with the op library's
    flags and RSTF_TEAM, into an object in `workdir` (which must outlive the Unit)."""
    code, calls = instrument(source, entry)
    d = tempfile.mkdtemp(dir=workdir)
    c, obj = os.path.join(d, "unit.c"), os.path.join(d, "unit.o")
    with open(c, "w") as f:
        f.write(code)
    run_tool(["gcc", *bench_c_flags(), "-DRSTF_TEAM", "-I", CUSTOM_OPS_DIR, "-c", c,
              "-o", obj], "the timing unit")
    return Unit(obj, entry, _params(source, entry),
                tuple((x["call"], tuple(x["nodes"])) for x in calls), workspace_bytes,
                tuple(sorted((k, tuple(v)) for k, v in tensor_shapes(source).items())),
                tuple(sorted(tensor_ctypes(source).items())))


def _slot(unit: Unit, s: int, d: str) -> str:
    """`unit`'s object with its entry and timers renamed for slot `s`, every other symbol
    made local (two copies of one generated C define the same helpers)."""
    out = os.path.join(d, f"slot{s}.o")
    entry, prof = f"rstf_slot{s}_entry", f"rstf_slot{s}_prof"
    run_tool(["objcopy", "--redefine-sym", f"{unit.entry}={entry}",
              "--redefine-sym", f"rstf_prof={prof}", "-G", entry, "-G", prof,
              unit.obj, out], f"the timing unit of slot {s}")
    return out


def _team_object(workdir: str) -> str:
    """rstf's team (rstf/runtime/rstf_team.c) compiled once per `workdir`."""
    obj = os.path.join(workdir, "rstf_team.o")
    if not os.path.exists(obj):
        tmp = obj + f".{os.getpid()}.tmp"
        run_tool(["gcc", *bench_c_flags(), "-DRSTF_TEAM", "-I", CUSTOM_OPS_DIR, "-c",
                  os.path.join(CUSTOM_OPS_DIR, TEAM_SOURCE), "-o", tmp], TEAM_SOURCE)
        os.replace(tmp, obj)
    return obj


def harness(units: list[Unit], reps: int, seconds: float = 0.0) -> str:
    """A main() that runs every slot's entry `reps` times (after `WARMUP` untimed runs)
    on one set of random inputs and outputs, each slot with its own workspace, the slots
    in turn within a run, forwards on even runs and backwards on odd ones, on argv[1]
    threads of the team; and prints one line per slot and run: the slot, the run, each
    call's seconds. With `seconds` > 0 the runs stop after an even count of them, at least
    `MIN_RUNS`, once their time passes `seconds` (a large model's pairing at the time a
    small one's takes: each slot's order still balanced)."""
    shapes, ctypes = dict(units[0].shapes), dict(units[0].ctypes)
    names, allocs = tensor_allocs(shapes, ctypes)
    decls, runs, prints = [], [], []
    for s, u in enumerate(units):
        n = len(u.calls)
        decls.append(f"extern void rstf_slot{s}_entry({u.params});\n"
                     f"extern double rstf_slot{s}_prof[];\n"
                     f"static double rstf_t{s}[{reps}][{max(n, 1)}];")
        allocs += f"\n    void *ws{s} = alloc_rand({(u.workspace_bytes + 3) // 4 or 1});"
        args = ", ".join(names + [f"ws{s}"])
        runs.append(f"""        case {s}: {{
            memset(rstf_slot{s}_prof, 0, {max(n, 1)} * sizeof(double));
            rstf_call_begin(threads);
            rstf_slot{s}_entry({args});
            rstf_call_end();
            if (r < 0) break;
            for (int k = 0; k < {n}; ++k) rstf_t{s}[r][k] = rstf_slot{s}_prof[k];
            break;
        }}""")
        prints.append(f"""    for (int r = 0; r < done; ++r) {{
        printf("{s} %d", r);
        for (int k = 0; k < {n}; ++k) printf(" %.9f", rstf_t{s}[r][k]);
        printf("\\n");
    }}""")
    slots = len(units)
    nl = "\n"
    return f"""{WTIME}
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
{ALLOC_RAND}
{TEAM_CALLS}
{nl.join(decls)}
int main(int argc, char **argv) {{
#if defined(__SSE__)
    _mm_setcsr(_mm_getcsr() | 0x8040);  /* denormals flushed, as TensorFlow runs kernels */
#endif
    const int threads = atoi(argv[1]);
{allocs}
    int done = {reps};
    double start = 0.0;
    for (int r = -{WARMUP}; r < {reps}; ++r) {{
        if (r == 0) start = rstf_wtime();
        for (int j = 0; j < {slots}; ++j)
            switch ((r & 1) ? {slots} - 1 - j : j) {{
{nl.join(runs)}
            }}
        if ({seconds!r} > 0 && r + 1 >= {MIN_RUNS} && (r & 1)
                && rstf_wtime() - start > {seconds!r}) {{
            done = r + 1;
            break;
        }}
    }}
{nl.join(prints)}
    return 0;
}}
"""


@dataclasses.dataclass(frozen=True)
class PairTimer:
    """A built program that times `units` slot by slot (`harness`)."""
    exe: str
    units: tuple[Unit, ...]

    def run(self, threads: int = 0) -> list[list[list[dict]]]:
        """Per slot, per run: its calls in order, {"call", "nodes", "seconds"}, on
        `threads` of the team (default: every core this process may use)."""
        out = subprocess.run([self.exe, str(threads or machine_threads())],
                             capture_output=True, text=True, check=True).stdout
        runs: list[list[list[dict]]] = [[] for _ in self.units]
        for line in out.splitlines():
            s, _r, *secs = line.split()
            calls = self.units[int(s)].calls
            runs[int(s)].append([{"call": c, "nodes": list(n), "seconds": float(t)}
                                 for (c, n), t in zip(calls, secs)])
        return runs


def pair_timer(units: list[Unit], reps: int, workdir: str, seconds: float = 0.0) -> PairTimer:
    """Link `units` (variants of one subgraph: the same tensors) into one timing program
    in `workdir`, `reps` timed runs of each, or fewer where `seconds` (> 0) is spent
    (`harness`)."""
    if len({(u.shapes, u.ctypes) for u in units}) != 1:
        raise RstfError("the variants timed together must have the same tensors")
    d = tempfile.mkdtemp(dir=workdir)
    objs = [_slot(u, s, d) for s, u in enumerate(units)]
    main = os.path.join(d, "main.c")
    with open(main, "w") as f:
        f.write(harness(units, reps, seconds))
    objs.append(os.path.join(d, "main.o"))
    run_tool(["gcc", *bench_c_flags(), "-DRSTF_TEAM", "-c", main, "-o", objs[-1]],
             "the timing program")
    exe = os.path.join(d, "pair")
    # Linked without -fopenmp: every GOMP_* and omp_* the units call is the team's.
    run_tool(["gcc", "-pthread", *objs, _team_object(workdir), "-o", exe, "-lm",
              *link_libs(bench_c_flags())], "the timing program")
    return PairTimer(exe, tuple(units))
