"""The build cache is the user's alone: a library or client planted there is never loaded or
run, its lock never follows a link (rstf/build/cache.py)."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

from rstf.build import cache
from rstf.errors import RstfError
from rstf.serving import tfclient
from test_cli_inputs import assert_one_line_error, tiny_pb  # noqa: F401 (fixture)

# A library that, once loaded, leaves a mark: what an attacker would plant.
PLANTED_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(getenv("RSTF_TEST_MARK"), "w");
    if (f) { fputs("planted code ran\n", f); fclose(f); }
}
"""


def _optimize(pb, out, cache_dir, mark):
    env = {**os.environ, "RSTF_CACHE_DIR": str(cache_dir), "RSTF_TEST_MARK": str(mark)}
    return subprocess.run([sys.executable, "-m", "rstf", "optimize", pb, "-o", str(out),
                           "--input-shape", "x:2,4", "-q"], capture_output=True, text=True,
                          env=env)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_pb):
    """A private cache holding tiny_pb's library: (cache folder, the library's path)."""
    d = tmp_path_factory.mktemp("cache-src") / "cache"
    r = _optimize(tiny_pb, d.parent / "o", d, d.parent / "unused")
    assert r.returncode == 0, r.stderr
    libs = [os.path.join(d, e, f) for e in os.listdir(d) if not e.startswith(".")
            if os.path.isdir(d / e) for f in os.listdir(d / e) if f.endswith(".so")]
    assert len(libs) == 1
    return d, os.path.relpath(libs[0], d)


def _plant(tmp_path, built, mode=0o755):
    """A copy of the cache whose library is replaced by PLANTED_C, its .sha256 to match."""
    src, rel = built
    d = tmp_path / "cache"
    shutil.copytree(src, d, symlinks=True)
    lib = d / rel
    subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib)],
                   input=PLANTED_C, text=True, check=True)
    from rstf.build.compiler import file_sha256

    (d / (rel + ".sha256")).write_text(file_sha256(str(lib)))
    os.chmod(lib, mode)
    return d, lib


@pytest.mark.tfbuild
def test_planted_library_in_a_world_writable_cache_is_never_loaded(tmp_path, tiny_pb, built):
    d, _ = _plant(tmp_path, built)
    os.chmod(d, 0o777)
    mark, out = tmp_path / "mark", tmp_path / "o"
    r = _optimize(tiny_pb, out, d, mark)
    assert_one_line_error(r, "writable by others", "chmod go-w")
    assert not mark.exists() and not out.exists()
    # The control: in the cache made private again the same library is a hit (the checks are
    # about who could have written it, and this test wrote it as this user), and it runs.
    os.chmod(d, 0o700)
    _optimize(tiny_pb, out, d, mark)
    assert mark.exists()


@pytest.mark.tfbuild
def test_a_cached_file_others_may_write_is_refused(tmp_path, tiny_pb, built):
    d, lib = _plant(tmp_path, built, mode=0o757)
    mark = tmp_path / "mark"
    r = _optimize(tiny_pb, tmp_path / "o", d, mark)
    assert_one_line_error(r, "not written by you alone", "remove it")
    assert not mark.exists()
    if os.geteuid() == 0:  # (only root can give a file to another user)
        os.chmod(lib, 0o755)
        os.chown(lib, 65534, 65534)
        assert_one_line_error(_optimize(tiny_pb, tmp_path / "o", d, mark), "uid 65534")
        assert not mark.exists()


@pytest.mark.tfbuild
def test_the_lock_never_follows_a_link(tmp_path, tiny_pb, built):
    src, rel = built
    d = tmp_path / "cache"
    shutil.copytree(src, d, symlinks=True)
    digest = rel.split(os.sep)[0]
    shutil.rmtree(d / digest)  # so that the build takes the lock
    for f in os.listdir(d):
        if f.endswith(".lock"):
            os.unlink(d / f)
    victim = tmp_path / "victim"
    victim.write_text("not to be truncated\n")
    os.symlink(victim, d / f".{digest}.lock")
    r = _optimize(tiny_pb, tmp_path / "o", d, tmp_path / "mark")
    assert_one_line_error(r, "lock")
    assert victim.read_text() == "not to be truncated\n"


def test_cache_folder_is_created_private_and_checked(tmp_path, monkeypatch):
    d = tmp_path / "a" / "cache"
    monkeypatch.setenv("RSTF_CACHE_DIR", str(d))
    assert cache.private_cache_dir() == str(d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for mode in (0o770, 0o707, 0o777):
        os.chmod(d, mode)
        with pytest.raises(RstfError, match="writable by others"):
            cache.private_cache_dir()
    os.chmod(d, 0o755)
    assert cache.private_cache_dir() == str(d)  # readable by others is fine
    # A folder above it that anyone may write, without the sticky bit /tmp has.
    os.chmod(tmp_path / "a", 0o777)
    with pytest.raises(RstfError, match="which anyone may write"):
        cache.private_cache_dir()
    os.chmod(tmp_path / "a", 0o777 | stat.S_ISVTX)
    assert cache.private_cache_dir() == str(d)
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("RSTF_CACHE_DIR", str(f))
    with pytest.raises(RstfError):
        cache.private_cache_dir()


def test_cached_client_gets_the_same_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("RSTF_CACHE_DIR", str(tmp_path / "cache"))
    exe = tfclient.client_path()
    assert stat.S_IMODE(os.stat(exe).st_mode) == 0o700
    mark = tmp_path / "mark"
    with open(exe, "w") as f:  # planted: a script that leaves a mark
        f.write(f"#!/bin/sh\necho ran > {mark}\n")
    os.chmod(exe, 0o777)
    with pytest.raises(RstfError, match="not written by you alone"):
        tfclient.client_path()
    os.chmod(exe, 0o700)
    os.chmod(tmp_path / "cache", 0o777)
    with pytest.raises(RstfError, match="writable by others"):
        tfclient.run_graph(str(tmp_path / "g.pb"), [], {}, ["y:0"], 1)
    assert not mark.exists()
    os.unlink(exe)
    os.symlink(tmp_path / "elsewhere", exe)  # a link is not a regular file
    os.chmod(tmp_path / "cache", 0o700)
    with pytest.raises(RstfError, match="not a regular file"):
        tfclient.client_path()
