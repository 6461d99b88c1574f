"""Compile generated sources into one shared library, cached by content hash.

C sources are compiled with gcc (each subgraph its own translation unit, in parallel), the
C++ wrapper once with TensorFlow's compile flags (its headers are heavy, so all ops share one
unit), and everything is linked with TensorFlow's link flags. The cache key covers every
source byte, the flags, the compiler and TensorFlow versions; a hit costs no compilation.
"""
from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile

from .errors import RstfError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUSTOM_OPS_DIR = os.path.join(REPO_ROOT, "custom_ops")
RUNTIME_HEADERS = ["rstf_kernel.h"]


def c_flags(march: str = "native") -> list[str]:
    # -fno-math-errno lets sqrtf/expf inline without changing results; no -ffast-math,
    # which would change NaN and rounding behaviour against TensorFlow.
    # -fopenmp: the polyhedral pass marks parallel loops `omp parallel for`.
    flags = ["-O3", "-std=c11", "-fPIC", "-fvisibility=hidden", "-fno-math-errno", "-fopenmp"]
    if march:
        flags.append(f"-march={march}")
    return flags + sanitize_flags()


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
    from .tfutil import tf

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def cache_dir() -> str:
    return os.environ.get("RSTF_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "rstf", "builds")


def _run(cmd: list[str], what: str, log_dir: str | None = None) -> None:
    """Run one compiler command; on failure the whole output goes to a log file that the
    one-line error names (a compiler's output is never dumped on the user's terminal)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RstfError(f"cannot run {cmd[0]!r} to compile {what}: {e.strerror} "
                        f"(install gcc and g++)") from None
    if proc.returncode != 0:
        log_dir = log_dir or cache_dir()
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


def build_library(c_sources: dict[str, str], cc_source: str, march: str = "native",
                  jobs: int | None = None, on_done=None) -> tuple[str, bool]:
    """Build (or fetch from the cache) the op library. Returns (path to .so, cache hit).

    Compilation units run over `jobs` compilers (default: the CPU count); `on_done()`, if
    given, is called once per finished unit (each C source, then the wrapper and the link
    as one): len(c_sources) + 1 calls in all, or none on a cache hit."""
    from .tfutil import tf

    cflags = c_flags(march)
    tf_cflags, tf_lflags = tf_flags()
    headers = {h: open(os.path.join(CUSTOM_OPS_DIR, h)).read() for h in RUNTIME_HEADERS}
    key = hashlib.sha256()
    for part in [*sorted(c_sources.items()), ("wrapper.cc", cc_source), *sorted(headers.items()),
                 ("cflags", " ".join(cflags)), ("tf", tf.__version__ + " ".join(tf_cflags)),
                 ("gcc", _compiler_version("gcc")), ("g++", _compiler_version("g++"))]:
        key.update(repr(part).encode())
    digest = key.hexdigest()[:32]
    final_dir = os.path.join(cache_dir(), digest)
    lib = os.path.join(final_dir, f"librstf_{digest[:16]}.so")
    if _verified(lib):
        return lib, True
    os.makedirs(cache_dir(), exist_ok=True)
    # One builder per key: a concurrent `rstf optimize` of the same code waits, then hits.
    with open(os.path.join(cache_dir(), f".{digest}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _verified(lib):
            return lib, True
        if os.path.exists(final_dir):  # a corrupt or partial entry: rebuild it
            shutil.rmtree(final_dir, ignore_errors=True)
        return _build(c_sources, cc_source, headers, cflags, tf_cflags, tf_lflags, digest,
                      final_dir, lib, jobs, on_done or (lambda: None)), False


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(lib: str) -> bool:
    """A cache entry is used only if the library matches the hash recorded when it was built."""
    try:
        with open(lib + ".sha256") as f:
            return f.read().strip() == _file_sha256(lib)
    except OSError:
        return False


def _build(c_sources, cc_source, headers, cflags, tf_cflags, tf_lflags, digest, final_dir,
           lib, jobs, on_done) -> str:
    work = tempfile.mkdtemp(prefix=f".{digest}.", dir=cache_dir())
    try:
        for name, text in [*c_sources.items(), ("wrapper.cc", cc_source), *headers.items()]:
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        cxx = ["g++", "-O2", "-fPIC", "-w", "-I", work, *tf_cflags, "-c",
               os.path.join(work, "wrapper.cc"), "-o", os.path.join(work, "wrapper.o")]
        objs = [os.path.join(work, "wrapper.o")]
        with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
            wrapper = pool.submit(_run, cxx, "the TensorFlow op wrapper")
            futures = [wrapper]
            for name in c_sources:
                obj = os.path.join(work, name + ".o")
                objs.append(obj)
                futures.append(pool.submit(
                    _run, ["gcc", *cflags, "-c", os.path.join(work, name), "-o", obj], name))
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
                if fut is not wrapper:
                    on_done()
        tmp_lib = os.path.join(work, os.path.basename(lib))
        _run(["g++", "-shared", "-fopenmp", "-o", tmp_lib, *objs, *tf_lflags,
              *sanitize_flags()],
             "the op library (link)")
        on_done()
        with open(tmp_lib + ".sha256", "w") as f:
            f.write(_file_sha256(tmp_lib))
        os.rename(work, final_dir)  # atomic publish, under the key's lock
        return lib
    finally:
        if os.path.exists(work):
            shutil.rmtree(work, ignore_errors=True)


def compile_c_shared(source: str, out_path: str, march: str = "native") -> None:
    """Compile one C source alone into a shared library (tests call entries via ctypes)."""
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(source)
        src = f.name
    try:
        flags = [x for x in c_flags(march) if x != "-fvisibility=hidden"]
        _run(["gcc", *flags, "-shared", src, "-o", out_path, "-lm"], "generated C")
    finally:
        os.unlink(src)
