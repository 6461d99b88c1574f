"""Progress display, -q / -v, and --jobs: the parallel polyhedral pass gives the same output."""
import io
import json
import os

import pytest

from harness import make_graph_def, save_graph_def
from rstf import cli
from rstf.parallel import run_ordered
from rstf.pipeline import optimize
from rstf.progress import Reporter
from test_pipeline import small_cnn  # conv -> ... | erf | ... -> softmax: two subgraphs

TIMINGS = {"optimize_seconds", "build_seconds", "build_cached", "output_dir"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_graph_def(make_graph_def(small_cnn), str(tmp_path_factory.mktemp("prog")))


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _square(x, y):  # top level: picklable for the worker processes
    return x * y


def test_run_ordered_keeps_task_order():
    tasks = [(i, i + 1) for i in range(7)]
    steps = []
    want = [x * y for x, y in tasks]
    assert run_ordered(_square, tasks, 1, lambda: steps.append(1)) == want
    assert run_ordered(_square, tasks, 2, lambda: steps.append(1),
                       weights=[1, 9, 3, 7, 5, 0, 2]) == want
    assert len(steps) == 14


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Reporter(progress=True, stream=out) as rep:
        with rep.stage("load"):
            pass
        with rep.stage("optimise", 20) as st:
            for _ in range(20):
                st.advance()
        rep.message("hello")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("rstf: load done in ")
    assert lines[1] == "rstf: optimise 0/20"
    # one line per tenth, not one per step
    steps = [ln for ln in lines if ln.startswith("rstf: optimise ") and "eta" in ln]
    assert [ln.split()[2].rstrip(",") for ln in steps] == [f"{2 * k}/20" for k in range(1, 10)]
    assert lines[-2].startswith("rstf: optimise 20/20 done in ")
    assert lines[-1] == "rstf: hello"
    assert "\x1b" not in out.getvalue()
    assert set(rep.timings) == {"load", "optimise"}


def test_live_bars_on_a_terminal():
    out = FakeTTY()
    with Reporter(progress=True, stream=out) as rep:
        assert rep.live and not rep.plain
        with rep.stage("compile", 3) as st:
            st.advance(3)
        rep.message("a message above the bars")
    text = out.getvalue()
    assert "compile" in text and "3/3" in text and "a message above the bars" in text


def test_quiet_reporter_prints_nothing():
    out = FakeTTY()
    with Reporter(verbosity=0, progress=True, stream=out) as rep:
        with rep.stage("load"):
            rep.message("not shown")
    assert out.getvalue() == ""


def _strip(report):
    report = {k: v for k, v in report.items() if k not in TIMINGS}
    for sg in report["subgraphs"]:
        sg["poly"] = {k: v for k, v in sg["poly"].items() if k != "seconds"}
    return report


@pytest.mark.tfbuild
def test_jobs_do_not_change_the_output(model, tmp_path):
    outs = {}
    for jobs in (1, 2):
        out = str(tmp_path / f"j{jobs}")
        optimize(model, out, jobs=jobs, log=lambda m: None)
        outs[jobs] = out
    a, b = (os.path.join(outs[j], "src") for j in (1, 2))
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    assert any(f.startswith("subgraph_1") for f in os.listdir(a))  # the pool had 2 tasks
    for f in os.listdir(a):
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read()
    reports = [json.load(open(os.path.join(outs[j], "report.json"))) for j in (1, 2)]
    assert _strip(reports[0]) == _strip(reports[1])
    assert all(sg["optimizer"] == "poly" for sg in reports[0]["subgraphs"])


@pytest.mark.tfbuild
def test_cli_quiet_verbose_and_plain_progress(model, tmp_path, capsys):
    assert cli.main(["optimize", model, "-o", str(tmp_path / "q"), "-q", "-j", "2"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    assert os.path.isfile(tmp_path / "q" / "report.json")

    assert cli.main(["optimize", model, "-o", str(tmp_path / "n")]) == 0
    out, err = capsys.readouterr()  # pytest's capture is not a terminal: plain lines
    assert "subgraphs: 2" in out
    for line in ("rstf: optimise 0/2", "rstf: optimise 2/2 done in", "rstf: load done in",
                 "rstf: compile ", "rstf: write done in"):
        assert line in err, err
    assert "\x1b" not in err and "stage load" not in err

    assert cli.main(["optimize", model, "-o", str(tmp_path / "v"), "-v", "--jobs", "1"]) == 0
    out, err = capsys.readouterr()
    for stage in ("load", "select", "partition", "generate", "optimise", "compile", "write"):
        assert f"rstf: stage {stage}: " in err, err
    assert "rstf: subgraph 0: poly in " in err and "rstf: subgraph 1: poly in " in err


def test_bad_jobs_and_exclusive_flags(model, tmp_path, capsys):
    assert cli.main(["optimize", model, "-o", str(tmp_path / "x"), "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip() == "rstf: error: --jobs must be at least 1"
    with pytest.raises(SystemExit):
        cli.main(["optimize", model, "-q", "-v"])
    assert not os.path.exists(tmp_path / "x")


def test_failed_stage_prints_only_the_error(tmp_path, capsys):
    assert cli.main(["optimize", str(tmp_path / "nope.pb"), "-o", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"rstf: error: {tmp_path / 'nope.pb'}: no such file or directory"]
