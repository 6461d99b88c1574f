"""The build cache folder, where op libraries and the TensorFlow C client are kept by content
hash, and from where rstf loads and runs them: so it must be the user's alone.

Contract:
- `cache_dir()` is its path: `RSTF_CACHE_DIR`, or `~/.cache/rstf/builds`.
- `private_cache_dir()` creates it (mode 0700) if missing, then returns it only if it is a
  folder owned by the current user that neither group nor others may write, and no folder
  above it may be written by others unless it is sticky (as /tmp is); otherwise it raises a
  one-line `RstfError` that names the fix. A library found there is then one this user wrote.
- `check_trusted(path)` raises unless `path` is a regular file (not a link) owned by the
  current user and not writable by group or others: what a cache hit must be before it is
  copied, loaded or run.
- `locked(path)` holds an exclusive lock on the lock file `path`, created 0600 and opened
  without following a link (a planted link would otherwise be truncated or created through).

Why the checks and not the `.sha256` beside each library alone: anyone who can write a
library into the folder can write its hash too; the hash only tells a library cut short
by a crash from a whole one.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat

from ..errors import RstfError

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def cache_dir() -> str:
    return os.environ.get("RSTF_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "rstf", "builds")


def private_cache_dir() -> str:
    path = os.path.abspath(cache_dir())
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        raise RstfError(f"cannot create the build cache {path}: {e.strerror} (set "
                        f"RSTF_CACHE_DIR to a folder of your own)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RstfError(f"the build cache {path} is not a folder (set RSTF_CACHE_DIR to a "
                        f"folder of your own)")
    me = os.geteuid()
    if st.st_uid != me:
        raise RstfError(f"the build cache {path} belongs to uid {st.st_uid}, not to you "
                        f"(uid {me}): set RSTF_CACHE_DIR to a folder of your own")
    if st.st_mode & _WRITABLE_BY_OTHERS:
        raise RstfError(f"the build cache {path} is writable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}), who could plant code rstf loads: "
                        f"run `chmod go-w {path}`, or set RSTF_CACHE_DIR to a private folder")
    real = os.path.realpath(path)
    parent = os.path.dirname(real)
    while parent != os.path.dirname(parent):
        _check_ancestor(parent, path)
        parent = os.path.dirname(parent)
    _check_ancestor(parent, path)
    return path


def _check_ancestor(folder: str, cache: str) -> None:
    """Who may write a folder above the cache may put another folder in its place."""
    st = os.stat(folder)
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise RstfError(f"the build cache {cache} lies in {folder}, which anyone may write "
                        f"(mode {stat.S_IMODE(st.st_mode):o}): set RSTF_CACHE_DIR to a "
                        f"folder of your own outside it")
    if st.st_uid not in (0, os.geteuid()) and st.st_mode & _WRITABLE_BY_OTHERS:
        raise RstfError(f"the build cache {cache} lies in {folder}, which belongs to uid "
                        f"{st.st_uid} and is writable by others: set RSTF_CACHE_DIR to a "
                        f"folder of your own")


def check_trusted(path: str) -> None:
    try:
        st = os.lstat(path)
    except OSError as e:
        raise RstfError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RstfError(f"{path} in the build cache is not a regular file: remove it")
    if st.st_uid != os.geteuid() or st.st_mode & _WRITABLE_BY_OTHERS:
        raise RstfError(f"{path} in the build cache was not written by you alone (uid "
                        f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): rstf will not "
                        f"load it; remove it")


@contextlib.contextmanager
def locked(path: str):
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise RstfError(f"cannot open the build cache's lock {path}: {e.strerror} "
                        f"(a link or another user's file there: remove it)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
