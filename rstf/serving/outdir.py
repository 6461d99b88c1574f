"""The output folder of `rstf optimize`: checked before anything is built, written beside it,
and swapped into place in one step at the end.

Contract:
- `resolve(path)` is the folder the output goes to: absolute, without a trailing slash, and,
  where `path` is a symbolic link to a folder, that folder (the link keeps pointing at the
  new output). A link to anything else, or to nothing, is refused.
- `check(out, force, keep)` raises `RstfError` before the build unless writing `out` can lose
  nothing: `out` does not exist, or (with `force` only) it is a folder that is empty or an
  earlier rstf output (its `report.json` says so), and no path in `keep` (the model, the
  working directory, the build cache) lies inside it.
- `staging(out)` is a new private folder beside `out` to write into; `publish(staging, out,
  force, keep)` makes it `out` atomically, checking `out` again first (it may have appeared
  or changed during the build): without `force` it never replaces anything; with `force`
  the old folder is swapped out and deleted only if it still passes `check`. The published
  folder gets the mode the umask gives a new folder. On failure the staging folder is
  removed and `out` is as it was.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile

from ..errors import RstfError

# renameat2(2) flags (linux/fs.h).
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def resolve(path: str) -> str:
    path = os.path.abspath(path)  # (also drops a trailing slash)
    if os.path.islink(path):
        if not os.path.isdir(path):
            raise RstfError(f"{path} is a symbolic link to something that is not a folder; "
                            f"choose another -o")
        path = os.path.realpath(path)
    return path


def check(out: str, force: bool, keep: dict[str, str]) -> None:
    """`keep`: {what: path} of what must survive (named in the error)."""
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise RstfError(f"{parent}: no such directory for the output")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RstfError(f"{parent}: not writable, cannot create {out}")
    if not os.path.lexists(out):
        return
    if not os.path.isdir(out):
        raise RstfError(f"{out} is a file, not an output folder; choose another -o")
    if not force:
        raise RstfError(f"{out} already exists (choose another -o, or --force to replace it)")
    real = os.path.realpath(out)
    for what, path in keep.items():
        if path and _inside(os.path.realpath(path), real):
            raise RstfError(f"--force would delete {out}, which holds {what} {path}; "
                            f"choose another -o")
    if os.listdir(out) and not _is_rstf_output(out):
        raise RstfError(f"--force replaces only an empty folder or an earlier rstf output "
                        f"(with its report.json); {out} holds other files, choose another -o")


def staging(out: str) -> str:
    return tempfile.mkdtemp(prefix=".rstf-", dir=os.path.dirname(out))


def publish(staged: str, out: str, force: bool, keep: dict[str, str]) -> None:
    try:
        os.chmod(staged, 0o777 & ~_umask())  # (mkdtemp's folder is 0700 whatever the umask)
        if not force:
            if _rename(staged, out, RENAME_NOREPLACE) is False:
                raise RstfError(f"{out} was created while rstf was building; nothing was "
                                f"replaced (choose another -o, or --force)")
            return
        if os.path.lexists(out):
            check(out, force, keep)  # what is there now may not be what was checked
            if _rename(staged, out, RENAME_EXCHANGE) is None:
                # Where renameat2 is not available: two renames, the old folder aside first.
                aside = tempfile.mkdtemp(prefix=".rstf-old-", dir=os.path.dirname(out))
                os.rename(out, os.path.join(aside, "old"))
                os.rename(staged, out)
                staged = aside
        elif _rename(staged, out, RENAME_NOREPLACE) is False:
            raise RstfError(f"{out} was created while rstf was building; nothing was replaced")
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # the staging folder, or the old output


def _rename(src: str, dst: str, flags: int) -> bool | None:
    """renameat2(src, dst, flags): True when done, False when `dst` exists and NOREPLACE
    refused, None when the system or file system has no renameat2 with these flags (then
    NOREPLACE is done as a check and a rename, close to atomic)."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is not None:
        rc = fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
        if rc == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    if flags == RENAME_EXCHANGE:
        return None
    if os.path.lexists(dst):
        return False
    os.rename(src, dst)
    return True


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _is_rstf_output(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "report.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and "rstf_version" in report


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # (not thread-safe: only where /proc does not say)
    os.umask(mask)
    return mask
