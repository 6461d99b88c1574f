"""The vector target the polyhedral pass shapes its C for: how many floats one vector
register holds and how many vector registers there are.

The microkernels keep a tile's accumulators in vector registers, so both numbers decide the
tiles (`microkernel.fits_registers`, `choose_tile`) and the width of every vector type in
the generated C. A vector type wider than the target's registers is legal GCC C but is a
disaster: on an AVX2 machine gcc keeps a 64-byte vector in memory and moves it through the
stack in 16-byte pieces around every operation (measured on Zen 3: MobileNet v2's AVX-512
shaped C ran 2.8x slower than the unoptimized C). So the pass asks the compiler what the
build's `-march` enables and shapes the C for that:

- AVX-512 (`__AVX512F__`): 16 floats, 32 registers;
- AVX / AVX2 (`__AVX__`): 8 floats, 16 registers;
- anything else (SSE, NEON): 4 floats, 16 registers.

`optimize_source` runs each stage under `use(target)`; `current()` is what the stages read
(the machine's own target, `detect("native")`, outside any `use`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import shutil
import subprocess


@dataclasses.dataclass(frozen=True)
class Target:
    """A vector ISA as the pass sees it."""
    name: str
    vlen: int  # floats in one vector register
    registers: int  # vector registers
    # The tile cost model's (`microkernel._efficiency`): the accumulators that hide the
    # FMA latency, and what one load (a broadcast or a vector) costs against an FMA.
    fma_chains: float = 10.0
    load_cost: float = 0.5
    # A depthwise conv's channel tiles run inside each chunk of rows (`schedule.tile_time`):
    # on AVX2 (Zen 3) MobileNet v2's kernels 0.971x; on AVX-512 (Zen 4) it changes nothing
    # (1.008 and 1/1.003, `ab_kernels.py`, 300 pairs each order, 2026-11-25), so off there.
    depthwise_tiles_in_chunks: bool = False
    # A small map's 1x1 conv runs its pixels as one row of chunks (`schedule.merge_rows`):
    # on AVX2 (Zen 3) MobileNet v2's kernels 0.94-0.95x; on AVX-512 (Zen 4) 1.077x and
    # 1/0.929 the time (the same A/B as above): with 32 registers the per-row 7x48 tiles of
    # the 7- and 14-row maps already hold enough accumulators, and the merged maps' 9x48
    # chunks lose to them. Off there.
    merge_rows: bool = False
    # A 1x1 conv with a short reduction runs in tiles one vector wide, RB x 16
    # (`microkernel.single_vector_tile`): measured faster on Zen 4 (see there). Why is not
    # established (no performance counters in that VM): it is not the separate broadcast
    # instructions of wider tiles, since an 8x48 kernel whose FMAs all took their broadcast
    # from memory (`{1to16}`, inline asm) ran slower, 0.407 against 0.378 ms.
    single_vector_tiles: bool = False

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


# The model's constants were tuned on Zen 4 (AVX-512, the tiles measured in microkernel.py)
# and fitted on Zen 3 (AVX2): there 7 chains and loads at 0.2 of an FMA pick 7x8 tiles for
# the 7-row convs of 7x7 maps instead of 4x16 + 3x16 (MobileNet v2's kernels 0.956x, one
# thread, `ab_kernels.py` over 100 pairs) and keep every other tile; the AVX-512 constants
# there pick the 4x16s, and 7x8 for 14 rows too was slower (1.046x).
AVX512 = Target("avx512", 16, 32, single_vector_tiles=True)
AVX2 = Target("avx2", 8, 16, fma_chains=7.0, load_cost=0.2, depthwise_tiles_in_chunks=True,
              merge_rows=True)
SSE = Target("sse", 4, 16, fma_chains=7.0, load_cost=0.2, depthwise_tiles_in_chunks=True,
             merge_rows=True)
TARGETS = {t.name: t for t in (AVX512, AVX2, SSE)}

_CURRENT: contextvars.ContextVar[Target | None] = contextvars.ContextVar(
    "rstf_poly_target", default=None)


def _from_macros(macros: str) -> Target:
    defined = {ln.split()[1] for ln in macros.splitlines() if ln.startswith("#define ")}
    if "__AVX512F__" in defined:
        return AVX512
    if "__AVX__" in defined:
        return AVX2
    return SSE


def _from_cpuinfo() -> Target:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")),
                         [])
    except OSError:
        flags = []
    return AVX512 if "avx512f" in flags else AVX2 if "avx" in flags else SSE


@functools.lru_cache(maxsize=None)
def detect(march: str = "native", cc: str = "gcc") -> Target:
    """The target that `cc -march=<march>` compiles for (`march` "": no -march), from its
    predefined macros (for `native`, /proc/cpuinfo's flags when the compiler cannot say)."""
    if shutil.which(cc):
        try:
            arch = [f"-march={march}"] if march else []  # "": the compiler's default
            out = subprocess.run([cc, *arch, "-dM", "-E", "-x", "c", "-"],
                                 input="", capture_output=True, text=True, timeout=60)
            if out.returncode == 0:
                return _from_macros(out.stdout)
        except (OSError, subprocess.SubprocessError):
            pass
    return _from_cpuinfo() if march == "native" else SSE


def resolve(target: Target | str | None) -> Target:
    """A Target from a Target, its name, or None (`current()`: the innermost `use`, else
    the machine's own)."""
    if target is None:
        return current()
    if isinstance(target, Target):
        return target
    if target not in TARGETS:
        raise ValueError(f"unknown vector target {target!r} (known: {', '.join(TARGETS)})")
    return TARGETS[target]


def current() -> Target:
    """The target the stages shape their C for: the innermost `use`, else the machine's."""
    return _CURRENT.get() or detect()


@contextlib.contextmanager
def use(target: Target | str | None):
    """Shape the C for `target` (a Target, its name, or None: the machine's) inside."""
    token = _CURRENT.set(resolve(target))
    try:
        yield
    finally:
        _CURRENT.reset(token)
