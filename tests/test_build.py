"""The build step: failures point to a log, cache entries are verified before use."""
import os

import pytest

from rstf.build import compiler as build
from rstf.errors import RstfError


def test_compiler_failure_names_the_log(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) { return x; }\n")
    with pytest.raises(RstfError) as e:
        build.run_tool(["gcc", "-c", str(bad), "-o", str(tmp_path / "bad.o")], "bad.c",
                   str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "compiling bad.c failed" in msg and "full log: " in msg
    log = msg.rsplit("full log: ", 1)[1].rstrip(")")
    assert "undeclared" in open(log).read()


def test_missing_compiler_is_one_clear_line(tmp_path):
    with pytest.raises(RstfError, match="install gcc"):
        build.run_tool(["no-such-gcc-rstf", "-c", "x.c"], "x.c", str(tmp_path))


def test_cache_entries_are_verified(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF library bytes")
    assert not build._verified(str(lib))  # no recorded hash: not trusted
    (tmp_path / "lib.so.sha256").write_text(build.file_sha256(str(lib)))
    assert build._verified(str(lib))
    lib.write_bytes(b"\x7fELF truncated")  # corrupted after the fact
    assert not build._verified(str(lib))


def test_op_names_follow_the_runtime(tmp_path, monkeypatch):
    """The same generated C with another op-library runtime (here the OpenMP team) gets
    other op names, so both libraries load in one process; the same runtime, the same."""
    from rstf.build.wrapper import library_digest

    with open(os.path.join(build.CUSTOM_OPS_DIR, build.TEAM_SOURCE)) as f:
        team = f.read()
    before = library_digest([])
    copy = tmp_path / "team.c"
    copy.write_text(team)
    monkeypatch.setattr(build, "TEAM_SOURCE", str(copy))  # (an absolute path joins as is)
    assert library_digest([]) == before
    copy.write_text(team + "\n/* another team */\n")
    assert library_digest([]) != before
