"""The vector target the polyhedral pass shapes its C for: how many floats one vector
register holds and how many vector registers there are.

The microkernels keep a tile's accumulators in vector registers, so both numbers decide the
tiles (`microkernel.fits_registers`, `choose_tile`) and the width of every vector type in
the generated C. A vector type wider than the target's registers is legal GCC C but is a
disaster: on an AVX2 machine gcc keeps a 64-byte vector in memory and moves it through the
stack in 16-byte pieces around every operation (docs/tuning-constants.md, vector width).
So the pass asks the compiler what the
build's `-march` enables and shapes the C for that:

- AVX-512 (`__AVX512F__`): 16 floats, 32 registers;
- AVX / AVX2 (`__AVX__`): 8 floats, 16 registers;
- anything else (SSE, NEON): 4 floats, 16 registers.

The pass takes its target as an argument (`poly.optimize(..., target=)`) and hands it to
every stage that shapes C; nothing reads it from ambient state. A target also says what
the tile model assumes of the machine: its per-core L2 (`l2_bytes`) and the threads the
generated code runs with (`threads`), by default this machine's.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import tempfile

from .tuning import Tuning


@dataclasses.dataclass(frozen=True)
class Target:
    """A vector ISA as the pass sees it."""
    name: str
    vlen: int  # floats in one vector register
    registers: int  # vector registers
    # The tile cost model's (`tilemodel._efficiency`): the accumulators that hide the
    # FMA latency, and what one load (a broadcast or a vector) costs against an FMA.
    fma_chains: float = 10.0
    load_cost: float = 0.5
    # A depthwise conv's channel tiles run inside each chunk of rows (`schedule.tile_time`):
    # with 16 registers the chunk's input rows stay in L1 across its tiles; with 32 the
    # order does not matter.
    depthwise_tiles_in_chunks: bool = False
    # A small map's 1x1 conv runs its pixels as one row of chunks (`contraction.merge_rows`):
    # with 16 registers a 7-pixel row leaves a tile too few accumulators; with 32 on
    # half-width FMA pipes the per-row 7x48 tiles already hold enough, and the merged
    # maps' 9x48 chunks lose to them.
    merge_rows: bool = False
    # A 1x1 conv with a short reduction runs in tiles one vector wide, RB x 16
    # (`tilemodel.single_vector_tile`), where that measured faster: half-width FMA
    # pipes. Why is not established.
    single_vector_tiles: bool = False
    # Reduction steps a trip of a contraction kernel's k loop runs, unrolled
    # (`kloop.blocked_loop`). A rolled step's own instructions (the counter, the panel
    # prefetch's address and test, gcc's register moves) are scalar ALU work, and on x86
    # some of it issues to the ports the vector FMAs need: with 16 registers a step is at
    # most 12 FMAs, with 32 an 8x48 tile's 24, and either way a trip of several steps
    # divides that share (docs/tuning-constants.md has the A/B runs behind 8).
    k_steps: int = 8
    # The machine the tile-order model (`tilemodel.choose_order`) plans for: bytes of L2
    # a core, and the threads the generated code runs with. 0: this machine's (sysfs, and
    # the cores this process may use: TensorFlow gives an op as many by default).
    l2: int = 0
    cores: int = 0
    # The pass's thresholds and cost-model weights (`tuning.Tuning`).
    tuning: Tuning = Tuning()
    # Register tiles and loop orders measured on this machine (`tiles.TileTable`, from
    # `rstf tune`'s profile), which override the model's where they name a contraction.
    tiles: object = None  # a tiles.TileTable (tiles.py imports this module)

    @property
    def l2_bytes(self) -> int:
        return self.l2 or machine_l2_bytes()

    @property
    def threads(self) -> int:
        return self.cores or machine_threads()

    @property
    def half(self) -> int:
        """Floats in a tile's last, half vector (tile widths are multiples of this)."""
        return self.vlen // 2

    @property
    def max_registers(self) -> int:
        """Registers a kernel's accumulators and operands may take: all but one, left for
        the broadcast operand."""
        return self.registers - 1

    def vtype(self, floats: int | None = None) -> str:
        """The C vector type of `floats` floats (default: one register's)."""
        return f"rstf_v{floats or self.vlen}"


# The targets' defaults. Where each value came from, host by host: docs/tuning-constants.md;
# `rstf tune` measures the tiles they lead to on the machine that serves. AVX2 and SSE cores
# hide the FMA latency with fewer chains and load relatively cheaper than AVX-512 ones.
AVX512 = Target("avx512", 16, 32, single_vector_tiles=True)
# AVX-512 on cores whose FMA pipes are 512 bits wide (`fma_full_width`: two 512-bit FMAs a
# cycle, not one in two 256-bit halves). With an FMA a cycle to spare, a tile's loads weigh
# more, and the wider tiles load fewer operands per FMA.
AVX512_FULL = Target("avx512-full", 16, 32, merge_rows=True)
AVX2 = Target("avx2", 8, 16, fma_chains=7.0, load_cost=0.2, depthwise_tiles_in_chunks=True,
              merge_rows=True)
SSE = Target("sse", 4, 16, fma_chains=7.0, load_cost=0.2, depthwise_tiles_in_chunks=True,
             merge_rows=True)
TARGETS = {t.name: t for t in (AVX512, AVX512_FULL, AVX2, SSE)}


def sysfs_cache_bytes(level: int, kinds: tuple) -> int | None:
    """The size of this machine's cache of `level` and one of `kinds` ("Data", "Unified")
    as Linux reports it in sysfs, or None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index"):
                continue
            read = lambda f: open(os.path.join(base, entry, f)).read().strip()  # noqa: E731
            if int(read("level")) == level and read("type") in kinds:
                text = read("size").upper()
                scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return None


def machine_l2_bytes() -> int:
    """This machine's per-core L2 cache (the generated code is built for it: -march=native),
    from sysfs; 1 MiB when unknown."""
    return sysfs_cache_bytes(2, ("Unified", "Data")) or 1 << 20


def machine_threads() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _from_macros(macros: str) -> Target:
    defined = {ln.split()[1] for ln in macros.splitlines() if ln.startswith("#define ")}
    if "__AVX512F__" in defined:
        return AVX512
    if "__AVX__" in defined:
        return AVX2
    return SSE


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The ISA flags Linux reports for this machine's first CPU (empty where it does not)."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((ln.split(":", 1)[1].split() for ln in f
                                   if ln.startswith("flags")), []))
    except OSError:
        return frozenset()


def _from_cpuinfo() -> Target:
    flags = cpu_flags()
    return AVX512 if "avx512f" in flags else AVX2 if "avx" in flags else SSE


@functools.lru_cache(maxsize=None)
def detect(march: str = "native", cc: str = "gcc") -> Target:
    """The target that `cc -march=<march>` compiles for (`march` "": no -march), from its
    predefined macros (for `native`, /proc/cpuinfo's flags when the compiler cannot say).
    For `native` AVX-512, `fma_full_width` tells AVX512 from AVX512_FULL."""
    if shutil.which(cc):
        try:
            arch = [f"-march={march}"] if march else []  # "": the compiler's default
            out = subprocess.run([cc, *arch, "-dM", "-E", "-x", "c", "-"],
                                 input="", capture_output=True, text=True, timeout=60)
            if out.returncode == 0:
                found = _from_macros(out.stdout)
                if found is AVX512 and march == "native" and fma_full_width(cc):
                    return AVX512_FULL
                return found
        except (OSError, subprocess.SubprocessError):
            pass
    return _from_cpuinfo() if march == "native" else SSE


# Times `n` steps of 12 independent FMA chains on 512-bit and on 256-bit vectors and prints
# the best of 7 tries of each (seconds): twelve chains cover 4-cycle FMAs on two pipes.
_FMA_PROBE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
#define CHAINS(T, SET1, FMA, ADD)                                             \
    T m = SET1(0.999f), c = SET1(1e-3f);                                      \
    T a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4);   \
    T a5 = SET1(5), a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9);   \
    T a10 = SET1(10), a11 = SET1(11);                                         \
    for (long i = 0; i < n; ++i) {                                            \
        a0 = FMA(a0, m, c); a1 = FMA(a1, m, c); a2 = FMA(a2, m, c);           \
        a3 = FMA(a3, m, c); a4 = FMA(a4, m, c); a5 = FMA(a5, m, c);           \
        a6 = FMA(a6, m, c); a7 = FMA(a7, m, c); a8 = FMA(a8, m, c);           \
        a9 = FMA(a9, m, c); a10 = FMA(a10, m, c); a11 = FMA(a11, m, c);       \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3),         \
                         "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),    \
                         "+v"(a9), "+v"(a10), "+v"(a11));                     \
    }                                                                         \
    a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));   \
    a0 = ADD(a0, ADD(ADD(a8, a9), ADD(a10, a11)));                            \
    return a0[0];
__attribute__((noinline)) static float zmm(long n) {
    CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
}
__attribute__((noinline)) static float ymm(long n) {
    CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
}
int main(void) {
    double best[2] = {1e9, 1e9};
    float sink = 0;
    for (int r = 0; r < 7; ++r) {
        double t0 = now();
        sink += zmm(20000);
        double t1 = now();
        sink += ymm(20000);
        double t2 = now();
        if (t1 - t0 < best[0]) best[0] = t1 - t0;
        if (t2 - t1 < best[1]) best[1] = t2 - t1;
    }
    printf("%.9f %.9f %d\n", best[0], best[1], sink != 0.0f);
    return 0;
}
"""


def full_width(zmm_s: float, ymm_s: float) -> bool:
    """Whether 512-bit FMAs ran at the 256-bit ones' rate (as many per second) in the probe:
    about 1x their time on full-width pipes, 2x on halves; the cut is at 1.5x."""
    return zmm_s < 1.5 * ymm_s


@functools.lru_cache(maxsize=None)
def fma_full_width(cc: str = "gcc") -> bool:
    """Whether this machine's cores run a 512-bit FMA as fast as a 256-bit one, timed by a
    tiny C probe (about 0.2 s, once a process; False when it cannot build or run). The
    best of 7 tries of each width keeps a busy host from deciding: a preempted try is
    simply not the best one."""
    with tempfile.TemporaryDirectory(prefix="rstf-fma-") as tmp:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write(_FMA_PROBE)
        try:
            subprocess.run([cc, "-O2", "-mavx512f", "-mfma", src, "-o", exe],
                           capture_output=True, check=True, timeout=60)
            out = subprocess.run([exe], capture_output=True, text=True, check=True,
                                 timeout=60).stdout.split()
            return full_width(float(out[0]), float(out[1]))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return False


def resolve(target: Target | str | None) -> Target:
    """A Target from a Target, its name, or None (this machine's: `detect()`)."""
    if target is None:
        return detect()
    if isinstance(target, Target):
        return target
    if target not in TARGETS:
        raise ValueError(f"unknown vector target {target!r} (known: {', '.join(TARGETS)})")
    return TARGETS[target]
