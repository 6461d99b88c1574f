"""Compile generated sources into one shared library, cached by content hash.

C sources are compiled by the optimizer's C toolchain (`c_toolchain`: gcc, gcc with Graphite,
or clang-14 with Polly; each subgraph its own translation unit, in parallel), the C++ wrapper
once by g++ with TensorFlow's compile flags (its headers are heavy, so all ops share one
unit), and everything is linked by g++ with TensorFlow's link flags. The code of `poly` and
`none` runs its parallel loops on the library's own OpenMP team (rstf/runtime/rstf_team.c,
compiled in; see `uses_team`), Graphite's and Polly's on libgomp. The cache key
covers every source byte, the C compiler, its flags and version, and the g++ and TensorFlow
versions; a hit costs no compilation.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile

from .cache import check_trusted, locked, private_cache_dir
from ..cgen.chelpers import LIBMVEC_FUNCTIONS
from ..errors import RstfError

# The runtime the op libraries compile in: package data, so that an installed rstf (not
# only a checkout) has it.
CUSTOM_OPS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "runtime")
RUNTIME_HEADERS = ["rstf_kernel.h"]
# The library's own OpenMP team (the libgomp entry points gcc's code for the generated C
# calls), compiled into the op libraries of `poly` and `none`.
TEAM_SOURCE = "rstf_team.c"


# A loop or subscript whose bound its index type cannot reach (an `int` counting to 2^32)
# never ends, or writes past its buffer: the compilers see it, so their warning is an error
# (opgen.base.MAX_ELEMENTS keeps rstf's own C clear of it).
INDEX_RANGE_ERRORS = {"gcc": ["-Werror=type-limits", "-Werror=overflow"],
                      "clang": ["-Werror=tautological-constant-out-of-range-compare",
                                "-Werror=integer-overflow"]}


# gcc's tuning for AVX-512 machines (skylake-avx512 to sapphirerapids, -march=native on
# them) vectorises loops at 256 bits, to spare cores whose clock drops under 512-bit
# instructions. rstf's microkernels run in 512-bit registers on those machines anyway
# (poly/target.py: the vector types are the target's width), so the clock is already
# paid; the loops gcc vectorises itself (epilogues outside the registers with their tanh,
# sigmoid or erf, layer norms, softmax) then do half the work an instruction for nothing.
# The preference changes only which vector width gcc picks, never the operations or their
# order (no reduction is reassociated without -ffast-math), so results are the same bits;
# on a machine without AVX-512 the code is byte for byte what it was
# (tests/test_compiler_flags.py checks both).
VECTOR_WIDTH_FLAG = "-mprefer-vector-width=512"


def c_flags(march: str = "native") -> list[str]:
    # -fno-math-errno lets sqrtf/expf inline without changing results; no -ffast-math,
    # which would change NaN and rounding behaviour against TensorFlow.
    # -fopenmp: the polyhedral pass marks parallel loops `omp parallel for`.
    flags = ["-O3", "-std=c11", "-fPIC", "-fvisibility=hidden", "-fno-math-errno", "-fopenmp",
             *INDEX_RANGE_ERRORS["gcc"]]
    if march:
        flags.append(f"-march={march}")
    flags.append(VECTOR_WIDTH_FLAG)
    if vector_math("gcc"):
        flags.append(LIBMVEC_FLAG)
    return flags + sanitize_flags()


LIBMVEC_FLAG = "-DRSTF_LIBMVEC"  # the generated C declares libmvec's functions (chelpers)


def link_libs(flags) -> list[str]:
    """The libraries a unit compiled with C `flags` links against, beside libm."""
    return ["-lmvec"] if LIBMVEC_FLAG in flags else []


@functools.lru_cache(maxsize=None)
def vector_math(cc: str) -> bool:
    """Whether `cc` and the C library have glibc's libmvec with the functions
    `chelpers.LIBMVEC_FUNCTIONS` (glibc 2.35 and later, x86-64): a program calling one of
    their 4-lane (SSE) versions compiles and links with -lmvec. Asked once per process."""
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which(cc) is None:
        return False
    program = ("typedef float v4 __attribute__((vector_size(16)));\n"
               + "".join(f"v4 _ZGVbN4v_{f}(v4);\n" for f in LIBMVEC_FUNCTIONS)
               + "int main(void) { v4 x = {0};"
               + "".join(f" x = _ZGVbN4v_{f}(x);" for f in LIBMVEC_FUNCTIONS)
               + " return (int)x[0]; }\n")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "probe.c")
        with open(src, "w") as f:
            f.write(program)
        proc = subprocess.run([cc, src, "-o", os.path.join(d, "probe"), "-lmvec", "-lm"],
                              capture_output=True)
    return proc.returncode == 0


# The C optimizers rstf can hand its generated C to. `poly` and `none` compile with gcc
# (`poly` after rstf's own polyhedral pass); `graphite` and `polly` get the unoptimized C.
POLLY_CC = "clang-14"
POLLY_INSTALL = ("install clang-14 and libpolly-14-dev (`apt-get install -y clang-14 "
                 "libpolly-14-dev`, or `bash scripts/setup.sh`)")


@dataclasses.dataclass(frozen=True)
class CToolchain:
    """The compiler and flags of the generated C objects of one optimizer."""
    optimizer: str
    cc: str
    flags: tuple[str, ...]

    @property
    def uses_team(self) -> bool:
        """Whether the library runs its parallel loops on its own team (rstf_team.c) instead
        of libgomp: the calling TF thread is thread 0, with no hand-off to a master thread.
        `poly` and `none` only: gcc's code for them calls nothing else of libgomp, while
        Graphite's and Polly's loops may (GOMP_loop_*)."""
        return self.optimizer in ("poly", "none") and self.cc == "gcc"

    def describe(self) -> dict:
        version = _compiler_version(self.cc).splitlines()
        return {"optimizer": self.optimizer, "cc": self.cc, "cc_version": version[0] if version
                else "", "c_flags": list(self.flags), "cxx": "g++"}


def c_toolchain(optimizer: str = "poly", march: str = "native", threads: int = 0) -> CToolchain:
    """gcc for `poly` / `none`; gcc with Graphite's loop nest optimizer and auto-parallelizer
    for `graphite`; clang-14 with Polly (parallel, strip-mined vectorization) for `polly`.

    gcc's auto-parallelizer fixes the thread count at compile time (`num_threads(N)`), so
    Graphite code runs on `threads` threads, or as many as the machine has. Polly's parallel
    loops call libgomp and use the threads the op wrapper sets, like rstf's own `omp` loops.
    """
    if march and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", march):
        # It reaches gcc's argv and the serving package's BUILD file as it is.
        raise RstfError(f"--march {march!r} is not a gcc architecture name")
    if optimizer in ("poly", "none"):
        return CToolchain(optimizer, "gcc", tuple(c_flags(march)))
    if optimizer == "graphite":
        n = threads or os.cpu_count() or 1
        return CToolchain(optimizer, "gcc", (*c_flags(march), "-floop-nest-optimize",
                                             "-floop-parallelize-all",
                                             f"-ftree-parallelize-loops={n}"))
    if optimizer == "polly":
        if sanitize_flags():
            raise RstfError("RSTF_SANITIZE=1 builds with gcc's sanitizers; it cannot be used "
                            "with --optimizer polly (clang)")
        _check_polly()
        flags = ["-O3", "-std=c11", "-fPIC", "-fvisibility=hidden", "-fno-math-errno",
                 *INDEX_RANGE_ERRORS["clang"]]
        if march:
            flags.append(f"-march={march}")
        # -polly-parallel emits GOMP_* calls (libgomp, linked by the g++ link step).
        return CToolchain(optimizer, POLLY_CC, (*flags, "-mllvm", "-polly", "-mllvm",
                                                "-polly-parallel", "-mllvm",
                                                "-polly-vectorizer=stripmine"))
    raise RstfError(f"--optimizer {optimizer!r}: choose one of poly, none, graphite, polly")


def _check_polly() -> None:
    """clang-14 must be on PATH and accept -polly (Debian's clang-14 has Polly built in)."""
    cc = shutil.which(POLLY_CC)
    if cc is None:
        raise RstfError(f"--optimizer polly needs {POLLY_CC}, which is not installed: "
                        f"{POLLY_INSTALL}")
    problem = _polly_probe(cc)
    if problem:
        raise RstfError(f"--optimizer polly: {POLLY_CC} cannot run Polly ({problem}): "
                        f"{POLLY_INSTALL}")


@functools.lru_cache(maxsize=None)
def _polly_probe(cc: str) -> str | None:
    """None if `cc` compiles with Polly's parallel code generator, else its first error."""
    proc = subprocess.run([cc, "-O3", "-mllvm", "-polly", "-mllvm", "-polly-parallel",
                           "-x", "c", "-c", "-", "-o", os.devnull], input="int f(void);\n",
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["?"])[0][:200]


def sanitize_flags() -> list[str]:
    """RSTF_SANITIZE=1 builds the generated code with AddressSanitizer and
    UndefinedBehaviorSanitizer; any report aborts. The process that loads such a library
    needs the sanitizer runtimes preloaded (see `sanitizer_env`)."""
    if os.environ.get("RSTF_SANITIZE", "0") in ("", "0"):
        return []
    return ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g"]


def sanitizer_env() -> dict[str, str]:
    """Environment for a Python process that loads sanitized libraries."""
    def lib(name):
        return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                              text=True).stdout.strip()

    return {"RSTF_SANITIZE": "1", "LD_PRELOAD": f"{lib('libasan.so')} {lib('libubsan.so')}",
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def tf_flags() -> tuple[list[str], list[str]]:
    from ..frontend.tfutil import tf

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def run_tool(cmd: list[str], what: str, log_dir: str | None = None) -> None:
    """Run one compiler command; on failure the whole output goes to a log file that the
    one-line error names (a compiler's output is never dumped on the user's terminal)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RstfError(f"cannot run {cmd[0]!r} to compile {what}: {e.strerror} "
                        f"(install gcc and g++)") from None
    if proc.returncode != 0:
        log_dir = log_dir or private_cache_dir()
        os.makedirs(log_dir, exist_ok=True)
        fd, log = tempfile.mkstemp(prefix="build-failed-", suffix=".log", dir=log_dir)
        with os.fdopen(fd, "w") as f:
            f.write(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "error" in ln]
        first = (lines[0] if lines else (proc.stderr or proc.stdout).strip()[-200:]).strip()
        raise RstfError(f"compiling {what} failed: {first[:300]} (full log: {log})")


def _compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    except OSError:
        raise RstfError(f"the C compiler {cc!r} is not installed") from None


def runtime_sources() -> dict[str, str]:
    """{file name: text} of the runtime in rstf/runtime/ that op libraries compile in: the
    kernel header and the OpenMP team."""
    out = {}
    for name in (*RUNTIME_HEADERS, TEAM_SOURCE):
        with open(os.path.join(CUSTOM_OPS_DIR, name)) as f:
            out[name] = f.read()
    return out


def build_library(c_sources: dict[str, str], cc_source: str, march: str = "native",
                  jobs: int | None = None, on_done=None,
                  toolchain: CToolchain | None = None) -> tuple[str, bool]:
    """Build (or fetch from the cache) the op library. Returns (path to .so, cache hit).

    The C sources are compiled by `toolchain` (default: gcc with `c_flags(march)`), over
    `jobs` compilers (default: the CPU count); `on_done()`, if given, is called once per
    finished unit (each C source, then the wrapper and the link as one): len(c_sources) + 1
    calls in all, or none on a cache hit."""
    from ..frontend.tfutil import tf

    toolchain = toolchain or c_toolchain("poly", march)
    tf_cflags, tf_lflags = tf_flags()
    headers = runtime_sources()
    if not toolchain.uses_team:  # (hashed with the sources; a name no generated file has)
        del headers[TEAM_SOURCE]
    digest = cache_key(c_sources, cc_source, headers, toolchain, tf.__version__, tf_cflags)
    cache = private_cache_dir()
    final_dir = os.path.join(cache, digest)
    lib = os.path.join(final_dir, f"librstf_{digest[:16]}.so")
    if _verified(lib):
        return lib, True
    # One builder per key: a concurrent `rstf optimize` of the same code waits, then hits.
    with locked(os.path.join(cache, f".{digest}.lock")):
        if _verified(lib):
            return lib, True
        if os.path.exists(final_dir):  # a corrupt or partial entry: rebuild it
            shutil.rmtree(final_dir, ignore_errors=True)
        return _build(c_sources, cc_source, headers, toolchain, tf_cflags, tf_lflags, digest,
                      final_dir, lib, jobs, on_done or (lambda: None)), False


def cache_key(c_sources: dict[str, str], cc_source: str, headers: dict[str, str],
              toolchain: CToolchain, tf_version: str, tf_cflags: list[str]) -> str:
    """The build cache key: every source byte, the C compiler, its flags and version, g++'s
    version and TensorFlow's version and compile flags."""
    key = hashlib.sha256()
    for part in [*sorted(c_sources.items()), ("wrapper.cc", cc_source), *sorted(headers.items()),
                 ("cc", toolchain.cc), ("cflags", " ".join(toolchain.flags)),
                 ("tf", tf_version + " ".join(tf_cflags)),
                 ("cc version", _compiler_version(toolchain.cc)),
                 ("g++", _compiler_version("g++"))]:
        key.update(repr(part).encode())
    return key.hexdigest()[:32]


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(lib: str) -> bool:
    """Whether the cache holds a whole library at `lib`: False for none, or for one cut short
    (its hash, recorded when it was built, differs). Raises when a file there is not this
    user's own (cache.check_trusted): such a library is never loaded, nor silently rebuilt."""
    if not os.path.lexists(lib):
        return False
    check_trusted(lib)
    if not os.path.lexists(lib + ".sha256"):
        return False
    check_trusted(lib + ".sha256")
    with open(lib + ".sha256") as f:
        return f.read().strip() == file_sha256(lib)


def _build(c_sources, cc_source, headers, toolchain, tf_cflags, tf_lflags, digest, final_dir,
           lib, jobs, on_done) -> str:
    work = tempfile.mkdtemp(prefix=f".{digest}.", dir=os.path.dirname(final_dir))
    try:
        for name, text in [*c_sources.items(), ("wrapper.cc", cc_source), *headers.items()]:
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        team = toolchain.uses_team
        # Hidden: the library exports nothing of its own (TensorFlow finds its ops and
        # kernels through the registrations its static initialisers make), so that two op
        # libraries in one process, from any rstf versions, never bind to each other's code.
        cxx = ["g++", "-O2", "-fPIC", "-w", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
               "-I", work, *tf_cflags,
               *(["-DRSTF_TEAM"] if team else []), "-c",
               os.path.join(work, "wrapper.cc"), "-o", os.path.join(work, "wrapper.o")]
        objs = [os.path.join(work, "wrapper.o")]
        units = list(c_sources)
        if team:
            units.append(TEAM_SOURCE)
        with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
            wrapper = pool.submit(run_tool, cxx, "the TensorFlow op wrapper")
            futures = {wrapper: None}
            for name in units:
                obj = os.path.join(work, name + ".o")
                objs.append(obj)
                # RSTF_TEAM: the generated C's loops run on the team (lower.MACROS).
                futures[pool.submit(
                    run_tool, [toolchain.cc, *toolchain.flags, *(["-DRSTF_TEAM"] if team else []),
                           "-c", os.path.join(work, name), "-o", obj], name)] = name
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
                if futures[fut] in c_sources:  # (the progress counts the subgraphs' units)
                    on_done()
        tmp_lib = os.path.join(work, os.path.basename(lib))
        # With its own team the library needs nothing of libgomp, and must not load it: its
        # GOMP_* are the team's (hidden), so a libgomp loaded beside them is never used.
        run_tool(["g++", "-shared", *(["-pthread"] if team else ["-fopenmp"]), "-o", tmp_lib,
              *objs, *tf_lflags, *link_libs(toolchain.flags), *sanitize_flags()],
             "the op library (link)")
        if team:
            _check_no_libgomp(tmp_lib)
        on_done()
        with open(tmp_lib + ".sha256", "w") as f:
            f.write(file_sha256(tmp_lib))
        os.rename(work, final_dir)  # atomic publish, under the key's lock
        return lib
    finally:
        if os.path.exists(work):
            shutil.rmtree(work, ignore_errors=True)


def _check_no_libgomp(lib: str) -> None:
    """An op library with its own team must call no libgomp entry point the team lacks
    (gcc emits GOMP_loop_* for schedules other than static, GOMP_critical_* for `critical`,
    and so on): such a symbol would stay undefined and fail only when TensorFlow loads it."""
    proc = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True,
                          text=True)
    missing = sorted({ln.split()[-1].split("@")[0] for ln in proc.stdout.splitlines()
                      if re.search(r"\b(GOMP_|omp_)", ln)})
    if proc.returncode != 0 or missing:
        raise RstfError(f"the op library calls libgomp entry points rstf's OpenMP team "
                        f"(rstf/runtime/{TEAM_SOURCE}) does not have: "
                        f"{', '.join(missing) or proc.stderr.strip()[:200]}")


# C: with `compile_c_shared(team=True)`, what the op wrapper does around a call, exported:
# the team's lock and its thread count.
TEAM_CALLS = """
void rstf_team_lock(void);
void rstf_team_unlock(void);
void omp_set_num_threads(int);
__attribute__((visibility("default"))) void rstf_call_begin(int threads) {
    rstf_team_lock();
    omp_set_num_threads(threads);
}
__attribute__((visibility("default"))) void rstf_call_end(void) { rstf_team_unlock(); }
"""


def compile_c_shared(source: str, out_path: str, march: str = "native",
                     toolchain: CToolchain | None = None, team: bool = False) -> None:
    """Compile one C source alone into a shared library (tests call entries via ctypes),
    with gcc and `c_flags(march)`, or with `toolchain`'s compiler and flags. `team`: with
    rstf's OpenMP team and RSTF_TEAM, as the op library runs it (its loops dynamic), and
    `rstf_call_begin(threads)` / `rstf_call_end()` to call around the entry."""
    toolchain = toolchain or c_toolchain("poly", march)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "source.c")
        with open(src, "w") as f:
            f.write(source + (TEAM_CALLS if team else ""))
        # (the team's definitions are hidden: its unit's GOMP_* bind inside the library)
        units = [src, os.path.join(CUSTOM_OPS_DIR, TEAM_SOURCE)] if team else [src]
        flags = [x for x in toolchain.flags if x != "-fvisibility=hidden"]
        flags += ["-DRSTF_TEAM"] if team else []
        # Polly's parallel loops call libgomp, which clang does not link by itself.
        libs = ["-lm"] if toolchain.cc == "gcc" else ["-lm", "-lgomp"]
        libs += link_libs(flags)
        run_tool([toolchain.cc, *flags, "-shared", *units, "-o", out_path, *libs], "generated C")
