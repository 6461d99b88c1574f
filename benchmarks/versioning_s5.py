#!/usr/bin/env python3
"""static-versioning.txt §5, reproduced: versioned placement on three parametric layers.

    python benchmarks/versioning_s5.py [--threads P] [--trials 5] [--occupancy 1,2]
                                       [--layers fc,convolution_googlenet,maxpool_resnet]
                                       [--json FILE] [--markdown FILE]

Each layer is a parametric loop nest (fc: square matmul of size Q; convolution_googlenet:
GoogLeNet's first convolution, 7x7 stride 2, 3->64 channels on 224x224, parameter batch;
maxpool_resnet: ResNet's 3x3 stride-2 max pool on 64 channels, parameter height). For each
occupancy c, rstf's placement pass (rstf/poly/versioning.py) places it twice:

- without versioning: the pass assumes the parameter is large (the original context's
  placement, the unchecked assumption the paper starts from);
- with versioning: SPECIALIZE's family, dispatched by TREE-GEN's tree at run time on the
  parameter and P = omp_get_max_threads().

Both are compiled (gcc -O3 -march=native -fopenmp -fno-trapping-math) into the paper's
microkernel harness: initialize_once, then per trial initialize, cache flush (a 64 MiB
write), kernel, check (bit-exact against a sequential reference: every version sums in the
same order). Each process prints its total and every trial's time; the tables give the median
trial. Parameters: [1..limit], eight equally spaced points in [limit+1..max] and
[limit+1..2*limit], limit = c*P. Reported: speed-up = time without / time with versioning,
and the compile-time overhead (placement + code generation in Python, and gcc).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import islpy as isl  # noqa: E402

from rstf.poly import versioning  # noqa: E402


@dataclasses.dataclass
class Layer:
    """A perfect loop nest `for l in loops: body`, with the arrays it reads and writes."""
    name: str
    param: str
    max_param: int
    loops: list[tuple[str, str]]  # (iterator, extent: C and isl expression in the parameter)
    arrays: dict[str, str]  # name -> C declaration dims, e.g. "[Q][Q]"
    sizes: dict[str, str]  # name -> element count, C expression in the parameter
    write: str  # written reference, e.g. "Y[i][j]"
    reads: list[str]  # read references (for the dependences)
    init: str  # statement run before the reduction loops (per output element), or ""
    body: str  # the statement
    outputs: list[str]
    max_trials: int = 1000  # caps --trials for a slow layer


FC = Layer(
    "fc", "Q", 384,
    [("i", "Q"), ("j", "Q"), ("k", "Q")],
    {"X": "[Q][Q]", "W": "[Q][Q]", "Y": "[Q][Q]"},
    {"X": "Q * Q", "W": "Q * Q", "Y": "Q * Q"},
    "Y[i][j]", ["Y[i][j]", "X[i][k]", "W[k][j]"], "",
    "Y[i][j] += X[i][k] * W[k][j];", ["Y"])

CONV = Layer(
    "convolution_googlenet", "B", 8,
    [("n", "B"), ("oh", "112"), ("ow", "112"), ("oc", "64"), ("kh", "7"), ("kw", "7"),
     ("ic", "3")],
    {"X": "[B][230][230][3]", "W": "[7][7][3][64]", "Y": "[B][112][112][64]"},
    {"X": "B * 230 * 230 * 3", "W": "7 * 7 * 3 * 64", "Y": "B * 112 * 112 * 64"},
    "Y[n][oh][ow][oc]", ["Y[n][oh][ow][oc]", "X[n][2 * oh + kh][2 * ow + kw][ic]",
                         "W[kh][kw][ic][oc]"], "",
    "Y[n][oh][ow][oc] += X[n][2 * oh + kh][2 * ow + kw][ic] * W[kh][kw][ic][oc];", ["Y"],
    max_trials=5)

POOL = Layer(
    "maxpool_resnet", "H", 56,
    [("oh", "H"), ("ow", "56"), ("c", "64"), ("kh", "3"), ("kw", "3")],
    {"X": "[2 * H + 1][113][64]", "Y": "[H][56][64]"},
    {"X": "(2 * H + 1) * 113 * 64", "Y": "H * 56 * 64"},
    "Y[oh][ow][c]", ["Y[oh][ow][c]", "X[2 * oh + kh][2 * ow + kw][c]"], "",
    "Y[oh][ow][c] = Y[oh][ow][c] > X[2 * oh + kh][2 * ow + kw][c] ? Y[oh][ow][c] : "
    "X[2 * oh + kh][2 * ow + kw][c];", ["Y"])

LAYERS = {x.name: x for x in (FC, CONV, POOL)}


def _domain(layer: Layer) -> isl.Set:
    its = ", ".join(i for i, _ in layer.loops)
    cons = " and ".join(f"0 <= {i} < {e}" for i, e in layer.loops)
    return isl.Set(f"[{layer.param}, P] -> {{ S[{its}] : {cons} }}")


def _access(layer: Layer, ref: str) -> isl.Map:
    name, rest = ref.split("[", 1)
    subs = ", ".join(s.strip() for s in ("[" + rest).strip("[]").split("]["))
    its = ", ".join(i for i, _ in layer.loops)
    return isl.Map(f"[{layer.param}, P] -> {{ S[{its}] -> {name}[{subs}] }}").intersect_domain(
        _domain(layer))


def parallel_dims(layer: Layer) -> list[int]:
    """Loops that carry no dependence (RAW, WAR, WAW of the one statement on itself)."""
    w = isl.UnionMap.from_map(_access(layer, layer.write))
    r = isl.UnionMap.from_map(_access(layer, layer.reads[0]))
    for ref in layer.reads[1:]:
        r = r.union(isl.UnionMap.from_map(_access(layer, ref)))
    # Iteration pairs touching one element, at least one of them writing it.
    dep = isl.Map.from_union_map(w.apply_range(r.reverse()).union(r.apply_range(w.reverse()))
                                 .union(w.apply_range(w.reverse())))
    n = len(layer.loops)
    out = []
    for d in range(n):
        # Pairs equal on the outer d loops but different on loop d: carried at d.
        eq = isl.Map.universe(dep.get_space())
        for k in range(d):
            eq = eq.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
        carried = dep.intersect(eq).subtract(
            dep.intersect(eq).equate(isl.dim_type.in_, d, isl.dim_type.out, d))
        if carried.is_empty():
            out.append(d)
    return out


def place(layer: Layer, occupancy, specialize: bool = True) -> list[versioning.Version]:
    stmt = versioning.PlacedStatement("S", _domain(layer), parallel_dims(layer))
    base = isl.Set(f"[{layer.param}, P] -> {{ : {layer.param} >= 1 and P >= 1 }}")
    return versioning.place([stmt], base, occupancy, specialize=specialize)


def _params(layer: Layer) -> list[str]:
    """The layer function's parameters: the size, then the arrays (outputs writable)."""
    return [f"long {layer.param}"] + [
        f"{'float' if a in layer.outputs else 'const float'} {a}[restrict]{d[d.index(']') + 1:]}"
        for a, d in layer.arrays.items()]


def _nest_c(layer: Layer, placed: int | None, fname: str) -> str:
    lines = [f"static void {fname}({', '.join(_params(layer))})", "{"]
    ind = "    "
    for depth, (it, ext) in enumerate(layer.loops):
        if depth == placed:
            lines.append(f"{ind}#pragma omp parallel for schedule(static)")
        lines.append(f"{ind}for (long {it} = 0; {it} < {ext}; ++{it})")
        ind += "    "
    lines.append(f"{ind}{layer.body}")
    lines.append("}")
    return "\n".join(lines)


def layer_c(layer: Layer, versions: list[versioning.Version], versioned: bool) -> str:
    """The layer's C: its versions and the entry `layer(param, arrays)`."""
    used = versions if versioned else versions[:1]
    p = layer.param
    out = ["/* generated by benchmarks/versioning_s5.py: " + layer.name +
           (" with versioned placement */" if versioned else " without versioning */"),
           "int omp_get_max_threads(void);"]
    for i, v in enumerate(used):
        out.append(f"/* version {i}: context {versioning.context_c(v.context)}, "
                   f"placed loop {v.placement['S']} */")
        out.append(_nest_c(layer, v.placement["S"], f"{layer.name}_v{i}"))
    args = ", ".join([p] + list(layer.arrays))
    out.append(f"void {layer.name}({', '.join(_params(layer))})")
    out.append("{")
    out.append("    const long P = omp_get_max_threads();")
    if versioned:
        out.append(versioning.dispatch_c([v.context for v in used],
                                         lambda i: f"{layer.name}_v{i}({args});").rstrip())
    else:
        out.append(f"    (void)P;\n    {layer.name}_v0({args});")
    out.append("}")
    # The sequential reference for `check`.
    out.append(_nest_c(layer, None, f"{layer.name}_ref"))
    return "\n".join(out) + "\n"


def harness_c(layer: Layer) -> str:
    """The paper's microkernel structure around `layer`: initialize_once, initialize, kernel,
    check; the cache is flushed after initialize. Prints the kernel time of all trials."""
    p = layer.param
    decl = "\n".join(f"static float *{a}, *{a}_ref;" for a in layer.arrays)
    alloc = "\n".join(f"    {a} = malloc(sizeof(float) * ({layer.sizes[a]}));\n"
                      f"    {a}_ref = malloc(sizeof(float) * ({layer.sizes[a]}));"
                      for a in layer.arrays)
    init = "\n".join(
        f"    for (long e = 0; e < {layer.sizes[a]}; ++e) {a}[e] = {a}_ref[e] = "
        + ("0.0f;" if a in layer.outputs and "+=" in layer.body else
           "-1e30f;" if a in layer.outputs else
           f"(float)((e * 7 + {k}) % 13) * 0.25f - 1.5f;")
        for k, a in enumerate(layer.arrays))
    init_kernel = "\n".join(ln.replace(f" = {a}_ref[e] = ", " = ")
                            for a, ln in zip(layer.arrays, init.split("\n")))
    cast = {a: f"(float (*){d[d.index(']') + 1:]}){a}" if d.count("[") > 1 else a
            for a, d in layer.arrays.items()}
    cast_ref = {a: c.replace(f"){a}", f"){a}_ref") if c != a else f"{a}_ref"
                for a, c in cast.items()}
    args = ", ".join([p] + [cast[a] for a in layer.arrays])
    args_ref = ", ".join([p] + [cast_ref[a] for a in layer.arrays])
    check = "\n".join(
        f"    for (long e = 0; e < {layer.sizes[a]}; ++e)\n"
        f"        if ({a}[e] != {a}_ref[e]) {{ fprintf(stderr, \"check failed: {a}[%ld]\\n\", e);"
        f" exit(1); }}" for a in layer.outputs)
    return f"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "layer.c"
{decl}
static char *flush_buf;
static long {p};
static void initialize_once(void)
{{
{alloc}
    flush_buf = malloc(64 << 20);
{init}
    {layer.name}_ref({args_ref});  /* the reference, once */
}}
static void initialize(void)
{{
{init_kernel}
}}
static void flush_cache(void)
{{
    memset(flush_buf, (int)(clock() & 0x7f), 64 << 20);
}}
static void kernel(void) {{ {layer.name}({args}); }}
static void check(void)
{{
{check}
}}
int main(int argc, char **argv)
{{
    if (argc != 3) {{ fprintf(stderr, "usage: %s PARAM TRIALS\\n", argv[0]); return 2; }}
    {p} = atol(argv[1]);
    const int trials = atoi(argv[2]);
    initialize_once();
    double total = 0;
    double *each = malloc(sizeof(double) * (trials > 0 ? trials : 1));
    for (int t = 0; t < trials; ++t) {{
        initialize();
        flush_cache();
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        kernel();
        clock_gettime(CLOCK_MONOTONIC, &b);
        each[t] = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
        total += each[t];
        check();
    }}
    /* The total over all trials (the paper's figure), then each trial's time. */
    printf("%.9f", total);
    for (int t = 0; t < trials; ++t) printf(" %.9f", each[t]);
    printf("\\n");
    return 0;
}}
"""


def build(layer: Layer, occupancy, versioned: bool, work: str) -> tuple[str, float, float, int]:
    """Compile one microkernel; returns (exe, pass seconds, gcc seconds, versions)."""
    t_pass = float("inf")
    for _ in range(3):  # the best of three: the first call also warms isl up
        t0 = time.perf_counter()
        versions = place(layer, occupancy, specialize=versioned)
        src = layer_c(layer, versions, versioned)
        t_pass = min(t_pass, time.perf_counter() - t0)
    d = os.path.join(work, f"{layer.name}_c{occupancy}_{'v' if versioned else 'nv'}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "layer.c"), "w") as f:
        f.write(src)
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write(harness_c(layer))
    exe = os.path.join(d, "bench")
    t1 = time.perf_counter()
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-fno-trapping-math",
                    "-o", exe, os.path.join(d, "main.c")], check=True, cwd=d)
    return exe, t_pass, time.perf_counter() - t1, len(versions)


def param_values(limit: int, top: int) -> list[int]:
    small = list(range(1, limit + 1))
    step = (top - limit - 1) / 7 if top > limit + 1 else 0
    spread = sorted({round(limit + 1 + k * step) for k in range(8)} if step else set())
    near = list(range(limit + 1, 2 * limit + 1))
    return sorted(set(small) | set(spread) | set(near))


def run(exe: str, value: int, trials: int, threads: int) -> list[float]:
    """Each trial's kernel time, seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "false"}
    out = subprocess.run([exe, str(value), str(trials)], capture_output=True, text=True,
                         env=env, check=True)
    return [float(x) for x in out.stdout.split()[1:]]


def median_trial(exe: str, value: int, trials: int, repeats: int, threads: int) -> float:
    """The median trial over `repeats` processes of `trials` trials each. The shared VM's
    steal time puts millisecond spikes on microsecond kernels; a total would keep them."""
    return statistics.median(t for _ in range(repeats) for t in run(exe, value, trials, threads))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--trials", type=int, default=21,
                    help="trials per process (convolution_googlenet: at most 5)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of TRIALS trials per point; the median is kept")
    ap.add_argument("--occupancy", default="1,2")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--from-json", help="only print the tables of an earlier --json run")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            print(markdown(json.load(f)))
        return 0
    work = tempfile.mkdtemp(prefix="rstf-s5-")
    results = {"threads": args.threads, "trials": args.trials, "repeats": args.repeats,
               "cpu": _cpu(), "layers": []}
    for name in args.layers.split(","):
        layer = LAYERS[name]
        for occ in [float(x) if "." in x else int(x) for x in args.occupancy.split(",")]:
            nv = build(layer, occ, False, work)
            v = build(layer, occ, True, work)
            limit = int(occ * args.threads)
            rows = []
            for value in param_values(limit, layer.max_param):
                if value > layer.max_param:
                    continue
                trials = min(args.trials, layer.max_trials)
                t_nv = median_trial(nv[0], value, trials, args.repeats, args.threads)
                t_v = median_trial(v[0], value, trials, args.repeats, args.threads)
                rows.append({"param": value, "without_s": t_nv, "with_s": t_v,
                             "speedup": t_nv / t_v})
                print(f"{name} c={occ} {layer.param}={value}: without {t_nv * 1e3:.3f} ms, "
                      f"with {t_v * 1e3:.3f} ms, speed-up {t_nv / t_v:.2f}", flush=True)
            results["layers"].append({
                "layer": name, "param": layer.param, "occupancy": occ, "limit": limit,
                "versions": v[3],
                "contexts": [versioning.context_c(x.context) for x in place(layer, occ)],
                "compile": {"pass_s_without": nv[1], "pass_s_with": v[1],
                            "gcc_s_without": nv[2], "gcc_s_with": v[2]},
                "rows": rows})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    md = markdown(results)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    print(md)
    return 0


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def markdown(results: dict) -> str:
    out = [f"Machine: {results['cpu']}, {results['threads']} threads (OMP_NUM_THREADS). "
           f"Times are the median kernel time of one trial, over {results['repeats']} runs of "
           f"{results['trials']} trials (5 for convolution_googlenet), the cache flushed "
           f"before each trial.", ""]
    for L in results["layers"]:
        c = L["compile"]
        out.append(f"### {L['layer']}, occupancy {L['occupancy']} (limit c*P = {L['limit']}), "
                   f"{L['versions']} versions")
        out.append("")
        out.append("Contexts: " + "; ".join(f"`{x}`" for x in L["contexts"]))
        out.append("")
        out.append(f"Compile time: placement + C generation {c['pass_s_without'] * 1e3:.1f} ms "
                   f"without, {c['pass_s_with'] * 1e3:.1f} ms with versioning "
                   f"({c['pass_s_with'] / max(c['pass_s_without'], 1e-9):.2f}x); gcc "
                   f"{c['gcc_s_without']:.2f} s without, {c['gcc_s_with']:.2f} s with "
                   f"({c['gcc_s_with'] / max(c['gcc_s_without'], 1e-9):.2f}x).")
        out.append("")
        out.append(f"| {L['param']} | without (ms) | with (ms) | speed-up (without / with) |")
        out.append("|---:|---:|---:|---:|")
        for r in L["rows"]:
            out.append(f"| {r['param']} | {r['without_s'] * 1e3:.4g} | {r['with_s'] * 1e3:.4g} "
                       f"| {r['speedup']:.2f} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
