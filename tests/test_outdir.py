"""The output folder: `--force` replaces only what rstf wrote, the final step is atomic and
re-checked, and the folder honours the umask (rstf/serving/outdir.py)."""
import json
import os
import stat
import subprocess
import sys

import pytest

from rstf.serving import outdir
from rstf.errors import RstfError
from test_cli_inputs import assert_one_line_error, rstf, tiny_pb  # noqa: F401 (fixture)


def _tree(folder):
    """{relative path: bytes} of every file under `folder`."""
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def _project(tmp_path, tiny_pb):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "m.pb").write_bytes(open(tiny_pb, "rb").read())
    (project / "src" / "main.py").write_text("print('mine')\n")
    (project / "NOTES").write_text("precious\n")
    return project


def test_force_never_deletes_the_model_or_other_files(tmp_path, tiny_pb):
    project = _project(tmp_path, tiny_pb)
    before = _tree(project)
    r = rstf("optimize", str(project / "m.pb"), "-o", str(project), "--force")
    assert_one_line_error(r, "holds the model")
    assert _tree(project) == before
    # The model elsewhere: the folder still holds files rstf did not write.
    r = rstf("optimize", tiny_pb, "-o", str(project), "--force")
    assert_one_line_error(r, "holds other files")
    assert _tree(project) == before
    # An earlier rstf output that now holds the model as well is not replaced either.
    (project / "report.json").write_text(json.dumps({"rstf_version": "0.1.0"}))
    r = rstf("optimize", str(project / "m.pb"), "-o", str(project), "--force")
    assert_one_line_error(r, "holds the model")
    assert (project / "NOTES").read_text() == "precious\n"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".rstf")]


def test_force_never_deletes_the_working_directory(tmp_path, tiny_pb):
    work = tmp_path / "work"
    (work / "deep").mkdir(parents=True)
    (work / "deep" / "f").write_text("x")
    r = rstf("optimize", tiny_pb, "-o", str(tmp_path / "work"), "--force", cwd=str(work / "deep"))
    assert_one_line_error(r, "holds the working directory")
    assert (work / "deep" / "f").read_text() == "x"


def test_force_replaces_an_earlier_output_and_an_empty_folder(tmp_path, tiny_pb):
    """(tiny_pb's batch is unknown: no subgraph, no build, the whole output all the same.)"""
    out = tmp_path / "o"
    out.mkdir()
    assert rstf("optimize", tiny_pb, "-o", str(out), "--force").returncode == 0
    first = json.loads((out / "report.json").read_text())
    (out / "stale").write_text("from an earlier run")
    r = rstf("optimize", tiny_pb, "-o", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "stale").exists() and (out / "optimized.pb").exists()
    assert json.loads((out / "report.json").read_text())["model"] == first["model"]
    assert sorted(os.listdir(tmp_path)) == ["o"]  # no staging or old folder left


def test_force_through_a_link(tmp_path, tiny_pb):
    real = tmp_path / "real"
    assert rstf("optimize", tiny_pb, "-o", str(real)).returncode == 0
    (real / "stale").write_text("x")
    os.symlink(real, tmp_path / "link")
    r = rstf("optimize", tiny_pb, "-o", str(tmp_path / "link") + "/", "--force")
    assert r.returncode == 0, r.stderr
    assert os.path.islink(tmp_path / "link") and (tmp_path / "link" / "report.json").exists()
    assert not (real / "stale").exists()
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(tmp_path / "dangling"),
                               "--force"), "symbolic link")


@pytest.mark.parametrize("made", ["empty", "full"])
def test_a_folder_made_during_the_build_is_never_replaced(tmp_path, made):
    """Without --force, `publish` re-checks at the rename: an empty folder would otherwise be
    replaced by rename(2) without a word."""
    out = str(tmp_path / "o")
    outdir.check(out, False, {})
    staged = outdir.staging(out)
    open(os.path.join(staged, "report.json"), "w").write("{}")
    os.mkdir(out)  # someone else, while rstf was building
    if made == "full":
        open(os.path.join(out, "theirs"), "w").write("x")
    with pytest.raises(RstfError, match="created while rstf was building"):
        outdir.publish(staged, out, False, {})
    assert os.listdir(out) == ([] if made == "empty" else ["theirs"])
    assert sorted(os.listdir(tmp_path)) == ["o"]


def test_force_checks_again_at_the_final_step(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    outdir.check(str(out), True, {})  # empty when checked
    staged = outdir.staging(str(out))
    (out / "theirs").write_text("x")  # then filled during the build
    with pytest.raises(RstfError, match="holds other files"):
        outdir.publish(staged, str(out), True, {})
    assert (out / "theirs").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["o"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_output_folder_honours_the_umask(tmp_path, tiny_pb, mask):
    out = tmp_path / "o"
    code = (f"import os, sys; os.umask({mask}); sys.argv = ['rstf', 'optimize', {tiny_pb!r}, "
            f"'-o', {str(out)!r}]; from rstf.cli import main; sys.exit(main())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~mask
    assert stat.S_IMODE(os.stat(out / "report.json").st_mode) == 0o666 & ~mask
