"""`rstf bench`: every engine on one tiny model; not installed and failing engines."""
import json

import pytest

from harness import make_graph_def, save_graph_def, tf, tiny_cnn
from rstf.evaluation import bench as bench_mod
from rstf.cli import main
from rstf.errors import RstfError


def _status_when_installed(engine):
    return "not installed" if bench_mod.missing_packages(engine) else "ok"


@pytest.mark.tfbuild
def test_bench_every_engine(tmp_path, capsys):
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path), "tiny.pb")
    png = tmp_path / "bench.png"
    assert main(["bench", model, "--reps", "2", "--json", "--plot", str(png)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["reps"] == 2 and r["machine"]["cores"] >= 1
    (m,) = r["models"]
    assert m["name"] == "tiny" and m["inputs"] == {"input": [1, 8, 8, 3]}
    rows = {row["engine"]: row for row in m["engines"]}
    assert list(rows) == list(bench_mod.ENGINES)  # every engine has a row, in order
    for engine, row in rows.items():
        assert row["status"] == _status_when_installed(engine), row
        if row["status"] != "ok":
            assert "pip install" in row["reason"]
            continue
        assert len(row["times_ms"]) == 2
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["q1_ms"] <= row["q3_ms"] and row["ratio_vs_eigen"] > 0
        assert row["max_rel_err"] <= 1e-4
    assert rows["tf-eigen"]["ratio_vs_eigen"] == 1.0 and rows["tf-eigen"]["max_rel_err"] == 0
    assert rows["tf-xla"]["hlo_instructions"] > 0  # XLA compiled the graph
    assert "clang-14" in rows["rstf-polly"]["compiler"]
    assert "-floop-nest-optimize" in rows["rstf-graphite"]["compiler"]
    if rows["openvino"]["status"] == "ok":
        assert rows["openvino"]["precision"] == "f32"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000
    text = bench_mod.table(r)
    for label in bench_mod.LABELS.values():
        assert label in text
    assert "tiny (input 1x8x8x3 uniform [0, 1)), TF spread (oneDNN vs Eigen) " in text
    assert m["tf_spread"] == rows["tf-onednn"]["max_rel_err"]
    md = bench_mod.markdown_table(r)
    assert md.count("\n| tiny |") == len(bench_mod.ENGINES)


def _unconvertible_model(directory):
    """BesselI0e: TensorFlow runs it; tf2onnx and OpenVINO's frontend do not convert it."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [6], name="input")
        tf.identity(tf.math.bessel_i0e(x) * 2.0, name="out")
    return save_graph_def(make_graph_def(build), directory, "bessel.pb")


def test_failed_and_not_installed_engines_are_rows(tmp_path, monkeypatch):
    model = _unconvertible_model(str(tmp_path))
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no clang-14: rstf-polly is not installed
    monkeypatch.setitem(bench_mod.PACKAGES, "openvino", ("openvino", "rstf_no_such_module"))
    r = bench_mod.bench([model], ["onnxruntime", "openvino", "rstf-polly"], reps=1,
                        log=lambda m: None)
    rows = {row["engine"]: row for row in r["models"][0]["engines"]}
    assert list(rows) == ["tf-eigen", "onnxruntime", "openvino", "rstf-polly"]
    assert rows["tf-eigen"]["status"] == "ok"
    if bench_mod.missing_packages("onnxruntime"):
        assert rows["onnxruntime"]["status"] == "not installed"
    else:  # the bench goes on after an engine fails, with a one-line reason
        assert rows["onnxruntime"]["status"] == "failed"
        assert "BesselI0e" in rows["onnxruntime"]["reason"]
    assert rows["openvino"]["status"] == "not installed"
    assert "rstf_no_such_module" in rows["openvino"]["reason"]
    assert rows["rstf-polly"]["status"] == "not installed"
    assert "apt-get install" in rows["rstf-polly"]["reason"]
    for row in rows.values():
        assert "\n" not in row["reason"] and len(row["reason"]) <= 240
    text = bench_mod.table(r)
    assert sum("  not installed: " in ln for ln in text.splitlines()) == 2
    png = tmp_path / "b.png"
    bench_mod.plot(r, str(png))  # rows without a number are named, not drawn
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_optimized_folder_is_run_not_rebuilt(tmp_path):
    """bench(optimized={engine: DIR}) runs the rstf engine from DIR (zoo.py's optimize
    output) without optimizing again: a folder without report.json is that engine's failure,
    not a fresh optimize; and it names one model's folder, so one model only."""
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path), "tiny.pb")
    empty = tmp_path / "not-rstf"
    empty.mkdir()
    r = bench_mod.bench([model], ["rstf-poly"], reps=1, log=lambda m: None,
                        optimized={"rstf-poly": str(empty)})
    rows = {row["engine"]: row for row in r["models"][0]["engines"]}
    assert rows["tf-eigen"]["status"] == "ok"
    assert rows["rstf-poly"]["status"] == "failed"
    assert "not an rstf output folder" in rows["rstf-poly"]["reason"]
    with pytest.raises(RstfError, match="one model"):
        bench_mod.bench([model, model], ["rstf-poly"], optimized={"rstf-poly": str(empty)})


def test_mismatch_is_reported():
    row = {**bench_mod._row("tf-xla", "ok"), "median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0}
    r = {"machine": {"cpu": "cpu", "cores": 2, "tensorflow": "2"}, "reps": 1, "rtol": 1e-4,
         "engines": ["tf-xla"], "models": [{"name": "m", "inputs": {"x": [2]},
                                            "engines": [row]}]}
    assert "TF XLA" in bench_mod.table(r) and "| m | TF XLA | 1.00 |" in \
        bench_mod.markdown_table(r)


def test_bad_engine_list(tmp_path, capsys):
    with pytest.raises(RstfError, match="unknown engine 'tvm'"):
        bench_mod.parse_engines("rstf-poly,tvm")
    assert bench_mod.parse_engines("rstf-poly")[0] == "tf-eigen"  # the reference always runs
    assert main(["bench", "missing.pb", "--engines", "xla"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rstf: error: --engines: unknown engine 'xla'") and err.count("\n") == 1
    assert main(["bench", "missing.pb", "--reps", "0"]) == 2
    assert "--reps" in capsys.readouterr().err
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path))
    assert main(["bench", model, "--plot", str(tmp_path / "chart.svg")]) == 2
    assert "PNG" in capsys.readouterr().err



def test_bench_exit_status_gates_on_rstf_engines(monkeypatch, capsys):
    """`rstf bench` prints its table either way, and exits 1 when an rstf engine failed or
    mismatched TF Eigen; another engine's failure or absence does not change the status."""
    def row(engine, status):
        return {"engine": engine, "status": status}

    def fake(rows):
        return lambda *a, **k: {"machine": {}, "reps": 1, "seed": 0, "rtol": 1e-4,
                                "engines": [], "models": [{"name": "m", "engines": rows}]}

    ok = [row("tf-eigen", "ok"), row("rstf-poly", "ok"), row("onnxruntime", "failed"),
          row("openvino", "not installed"), row("rstf-polly", "not installed")]
    monkeypatch.setattr(bench_mod, "bench", fake(ok))
    assert main(["bench", "m.pb", "--json"]) == 0
    assert bench_mod.rstf_problems(bench_mod.bench()) == []
    assert json.loads(capsys.readouterr().out)["models"][0]["engines"] == ok
    for status in ("mismatch", "failed"):
        bad = ok + [row("rstf-none", status)]
        monkeypatch.setattr(bench_mod, "bench", fake(bad))
        assert main(["bench", "m.pb", "--json"]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out)["models"][0]["engines"] == bad  # the result still prints
        assert err.strip() == f"rstf: error: m: rstf-none {status}"


def test_engines_take_turns_in_rounds(tmp_path, monkeypatch):
    """bench(rounds=R): every engine runs once a round for its share of the reps, the
    order reversed on alternate rounds, its times pooled; an rstf engine's model is
    optimized once, in the first round, and run from that folder after."""
    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path), "tiny.pb")
    optimized = []
    real = bench_mod._optimize
    monkeypatch.setattr(bench_mod, "_optimize",
                        lambda engine, *a: optimized.append(engine) or real(engine, *a))
    log = []
    r = bench_mod.bench([model], ["rstf-poly", "tf-onednn"], reps=3, rounds=2,
                        log=log.append)
    assert (r["reps"], r["rounds"]) == (4, 2)  # 2 a round
    turns = [m.removeprefix("tiny: ") for m in log if m.startswith("tiny: ")]
    assert turns == ["tf-eigen (round 1 of 2)", "rstf-poly (round 1 of 2)",
                     "tf-onednn (round 1 of 2)", "tf-onednn (round 2 of 2)",
                     "rstf-poly (round 2 of 2)", "tf-eigen (round 2 of 2)"]
    assert optimized == ["rstf-poly"]
    rows = {row["engine"]: row for row in r["models"][0]["engines"]}
    for row in rows.values():
        assert row["status"] == "ok" and len(row["times_ms"]) == 4, row
        assert row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["max_rel_err"] <= 1e-4
    assert "the engines taking turns in 2 rounds" in bench_mod.table(r)
    for bad in (0, 4):
        with pytest.raises(RstfError, match="--rounds"):
            bench_mod.bench([model], ["tf-onednn"], reps=3, rounds=bad)


@pytest.mark.tfbuild
def test_bench_takes_the_tiles_it_is_told(tmp_path, capsys):
    """`rstf bench --tuning` builds rstf-poly as `optimize --tuning` would: 'off' the
    analytic model's tiles, a profile's path its tiles (the row and the table say which);
    a profile that is not there is one line before any engine runs."""
    from rstf.pipeline import poly_target
    from rstf.tuner.profile import Profile

    model = save_graph_def(make_graph_def(tiny_cnn()), str(tmp_path), "tiny.pb")
    target = poly_target("native", "gcc")[0]
    prof = Profile(str(tmp_path / "p.json"), {"target": target.name, "cpu": "x", "threads": 2})
    prof.save()
    for tuning, profile in (("off", None), (prof.path, prof.path)):
        assert main(["bench", model, "--engines", "rstf-poly", "--reps", "1", "--json",
                     "--tuning", tuning]) == 0
        r = json.loads(capsys.readouterr().out)
        row = {row["engine"]: row for row in r["models"][0]["engines"]}["rstf-poly"]
        assert r["tuning"] == tuning and row["status"] == "ok", row
        assert row["tuning"]["profile"] == profile
        assert row["tuning"]["kernels_from_profile"] == 0  # (an empty profile)
        text = bench_mod.table(r)
        assert (f"from the profile {prof.path}" in text) == (profile is not None), text
    assert main(["bench", model, "--engines", "rstf-poly", "--tuning",
                 str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "none.json: no such file" in err and err.count("\n") == 1, err
