"""benchmarks/zoo.py's speed sweep: rows, table, summary, chart and options from synthetic
rows (no model built), and one real model end to end (tfbuild)."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import zoo, zoo_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _engine(status="ok", ms=None, err=0.0, spread=None, reason="", exact=None):
    return {"engine": None, "status": status, "reason": reason, "median_ms": ms,
            "q1_ms": ms and ms * 0.9, "q3_ms": ms and ms * 1.1,
            "max_rel_err": err if ms is not None else None, "spread_ratio": spread,
            "exact_err": exact and err * 2, "exact_ratio": exact}


def _bench_rows(**engines):
    """rstf.evaluation.bench engine rows (the fields zoo keeps, plus ones it drops) for
    engine=row."""
    out = []
    for name, row in engines.items():
        out.append({**row, "engine": name.replace("_", "-"), "times_ms": [1.0, 2.0],
                    "label": name, "min_ms": None})
    return out


def _row(model, size, **engines):
    """A zoo row with engine results, as the worker writes it."""
    row = {"model": model, "input_size": size, "nodes_total": 10, "nodes_covered": 10,
           "flops_total": 2_000_000_000, "flops_covered": 2_000_000_000, "unsupported": {},
           "optimize_seconds": 4.0, "output_max": 0.5, "gflop": 2.0}
    row.update(zoo.engine_fields(_bench_rows(**engines), 2e-6, row["gflop"]))
    return row


def _rows():
    """Three models: rstf fastest; rstf slower than OpenVINO and TF oneDNN, ONNX Runtime a
    mismatch; and one that failed in its optimize stage."""
    return [
        _row("MobileNetV2", 96, rstf_poly=_engine(ms=1.0, err=1e-6, spread=0.5, exact=0.8),
             tf_eigen=_engine(ms=3.0), tf_onednn=_engine(ms=2.0, err=2e-6, spread=1.0),
             onnxruntime=_engine(ms=1.5, err=1e-6), openvino=_engine(ms=1.25, err=1e-6)),
        _row("EfficientNetB0", 96, rstf_poly=_engine(ms=8.0, err=1e-6, spread=2.5, exact=1.5),
             tf_eigen=_engine(ms=9.0), tf_onednn=_engine(ms=6.0, err=2e-6, spread=1.0),
             onnxruntime=_engine("mismatch", ms=1.0, err=1e-2),
             openvino=_engine(ms=4.0, err=1e-6)),
        {"model": "ConvNeXtTiny", "input_size": 96,
         "error": "optimize: RstfError: no | pipe"},
    ]


def test_best_other_and_ratio():
    rows = _rows()
    # MobileNetV2: OpenVINO (1.25 ms) is the fastest other engine; rstf's 1.0 ms is 0.8x.
    assert rows[0]["best_other"] == {"engine": "openvino", "ms": 1.25}
    assert rows[0]["rstf_over_best"] == pytest.approx(0.8)
    # EfficientNetB0: ONNX Runtime's 1 ms is a mismatch and does not count.
    assert rows[1]["best_other"] == {"engine": "openvino", "ms": 4.0}
    assert rows[1]["rstf_over_best"] == pytest.approx(2.0)
    assert rows[0]["passed"] and rows[0]["max_rel_err"] == 1e-6
    assert rows[0]["rstf_gflops"] == pytest.approx(2000.0)  # 2 GFLOP in 1 ms
    assert rows[0]["engines"]["tf-onednn"] == {
        "status": "ok", "reason": "", "median_ms": 2.0, "q1_ms": 1.8, "q3_ms": 2.2,
        "max_rel_err": 2e-6, "spread_ratio": 1.0, "exact_err": None,
        "exact_ratio": None}  # times_ms, label... dropped
    assert rows[0]["exact_ratio"] == 0.8 and rows[1]["exact_ratio"] == 1.5
    assert zoo.best_other({"rstf-poly": _engine(ms=1.0)}) is None
    # An ill-conditioned model: every engine is a mismatch at --rtol, TF oneDNN too, but
    # within 2x TF's spread, so their times count; a 3x one does not.
    ill = {"rstf-poly": _engine("mismatch", ms=2.0, err=3e-4, spread=1.5),
           "tf-onednn": _engine("mismatch", ms=3.0, err=2e-4, spread=1.0),
           "openvino": _engine("mismatch", ms=1.0, err=6e-4, spread=3.0)}
    assert zoo.best_other(ill) == {"engine": "tf-onednn", "ms": 3.0}
    assert zoo.rstf_over_best({"rstf-poly": _engine(ms=1.0)}, None) is None


def test_rstf_failure_fails_the_row():
    row = _row("A", 32, rstf_poly=_engine("mismatch", ms=1.0, err=1e-2,
                                          reason="max_rel_err 0.01 > rtol 0.0001"),
               tf_eigen=_engine(ms=2.0))
    assert not row["passed"] and row["rstf_problem"] == "mismatch: max_rel_err 0.01 > rtol 0.0001"
    assert row["rstf_over_best"] == pytest.approx(0.5)  # the time is still reported
    failed = _row("B", 32, rstf_poly=_engine("failed", reason="compile error"),
                  tf_eigen=_engine(ms=2.0))
    assert not failed["passed"] and failed["rstf_over_best"] is None
    assert failed["rstf_gflops"] is None and "max_rel_err" not in failed
    md = zoo_report.table([row, failed]).splitlines()
    assert "FAIL (mismatch: max_rel_err 0.01 > rtol 0.0001)" in md[2]
    assert "| failed | 2.00 | - | TF Eigen |" in md[3]


def test_table_and_summary_with_engines():
    rows = _rows()
    lines = zoo_report.table(rows).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:13] == ["model", "input", "GFLOP", "rstf poly ms", "TF Eigen ms",
                         "TF oneDNN ms", "ONNX Runtime ms", "OpenVINO ms", "rstf / best",
                         "best engine", "rstf GFLOP/s", "rstf err / TF spread",
                         "rstf float64 err / TF's"]
    assert head[13:] == zoo_report.COVERAGE_HEAD  # the coverage columns are kept
    assert lines[2].startswith("| MobileNetV2 | 96 | 2 | 1.00 | 3.00 | 2.00 | 1.50 | 1.25 | "
                               "0.80 | OpenVINO | 2000.0 | 0.5x | 0.8x | 10/10 (100.0%) |")
    assert "| 2.5x | 1.5x |" in lines[3]
    assert "| 1.00 (mismatch) | 4.00 | 2.00 | OpenVINO |" in lines[3]
    assert lines[4].startswith("| ConvNeXtTiny | 96 |") and "no \\| pipe" in lines[4]
    assert len(lines) == 5  # rows as run, no summary inside the table
    line = zoo_report.summary(rows)
    assert line == ("rstf / best other engine: geomean 1.26x over 2 models (1 without a "
                    "ratio); rstf fastest on 1/2; slower than TF Eigen on: none; slower than "
                    "TF oneDNN on: EfficientNetB0@96 (1.33x); rstf error within 2x TF's "
                    "spread on 1/2; rstf no further from float64 than TF on 1/2.")
    # A model whose graph TensorFlow cannot run in float64 says so in its cell.
    assert zoo_report._exact_cell({"max_rel_err": 1e-6, "exact_unavailable": "no kernel"}) == \
        "no float64"


def test_table_without_engines_is_the_compare_table():
    rows = [{"model": "A", "input_size": 96, "nodes_total": 10, "nodes_covered": 5,
             "flops_total": 4, "flops_covered": 4, "unsupported": {"Erf": 2},
             "max_rel_err": 1e-6, "passed": False, "optimize_seconds": 3.0,
             "output_max": 0.1}, {"model": "B", "input_size": 96, "error": "build: X: y"}]
    lines = zoo_report.table(rows).splitlines()
    assert lines[0] == ("| model | input | nodes covered | conv/matmul FLOPs covered | left to "
                        "TF (op x count) | max rel err | result | optimize s | max prob |")
    assert lines[2] == "| A | 96 | 5/10 (50.0%) | 100.0% | Erf x2 | 1e-06 | FAIL | 3 | 0.100 |"
    assert lines[3] == "| B | 96 |  |  |  |  | error: build: X: y |  |  |"
    assert zoo_report.summary(rows) == ""
    # numbers-only rows run with the timing carry TF's spread and the float64 run's ratio
    rows[0].update(tf_spread=1e-6, spread_ratio=1.0, exact_ratio=0.5)
    lines = zoo_report.table(rows).splitlines()
    assert lines[0].startswith("| model | input | rstf err / TF spread | rstf float64 err / "
                               "TF's | nodes covered |")
    assert lines[2].startswith("| A | 96 | 1.0x | 0.5x | 5/10 (50.0%) |")
    assert lines[3] == "| B | 96 |  |  |  |  |  |  | error: build: X: y |  |  |"


def test_summary_when_nothing_was_measured():
    rows = [_row("A", 32, rstf_poly=_engine("failed"), tf_eigen=_engine(ms=2.0))]
    assert zoo_report.summary(rows) == "rstf / best other engine: no model measured (1 without a ratio)."


def test_outputs_chart_and_docs(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo_report, "ROOT", str(tmp_path))  # --docs writes under ROOT/docs
    engines = zoo.parse_engine_list(zoo.DEFAULT_ENGINES)
    text = zoo_report.write_outputs(_rows(), str(tmp_path), True, "python3 benchmarks/zoo.py --docs",
                             engines, 10)
    assert (tmp_path / "zoo.md").read_text() == text + "\n"
    assert text.endswith(zoo_report.summary(_rows()))
    png = (tmp_path / "zoo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(png) < 300_000
    (md,) = (tmp_path / "docs" / "benchmarks").glob("*-zoo.md")
    date = md.name.removesuffix("-zoo.md")
    doc = md.read_text()
    assert f"- date: {date}" in doc and "- command: `python3 benchmarks/zoo.py --docs`" in doc
    assert " cores" in doc.splitlines()[2] and "- commit: " in doc
    assert zoo_report.table(_rows()) in doc and f"![rstf-poly time / best other engine's time]" \
        f"({date}-zoo.png)" in doc
    assert (tmp_path / "docs" / "benchmarks" / f"{date}-zoo.png").read_bytes() == png


def test_chart_of_failed_models_only(tmp_path):
    path = tmp_path / "only-failed.png"
    zoo_report.chart([{"model": "A", "input_size": 32, "error": "build: boom"}], str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_no_chart_without_engines(tmp_path):
    rows = [{"model": "B", "input_size": 96, "error": "build: X: y"}]
    zoo_report.write_outputs(rows, str(tmp_path), False, "cmd", (), 10)
    assert (tmp_path / "zoo.md").exists() and not (tmp_path / "zoo.png").exists()


def test_arguments():
    a = zoo.parse_args(["--quick"])
    assert a.models == [(m, 96) for m in zoo.QUICK]  # 96 is above every quick model's minimum
    assert a.engines == ("rstf-poly", "tf-eigen", "tf-onednn", "onnxruntime", "openvino")
    assert a.reps == 10 and a.rounds == 1 and not a.docs
    for required in ("EfficientNetB0", "MobileNetV2", "ResNet50", "DenseNet121",
                     "ConvNeXtTiny", "Xception", "InceptionV3"):
        assert required in zoo.QUICK and required in zoo.ALL
    a = zoo.parse_args(["--models", "MobileNetV3Small@32", "--engines", "openvino",
                        "--reps", "3", "--docs", "--out", "/x"])
    assert a.models == [("MobileNetV3Small", 32)] and a.reps == 3 and a.docs and a.out == "/x"
    assert a.engines == ("tf-eigen", "openvino", "rstf-poly")  # the reference and rstf added
    assert zoo.parse_args(["--engines", "none"]).engines == ()
    a = zoo.parse_args(["--models", "breadth"])  # other model classes, each at its own size
    assert dict(a.models)["vit"] == 224 and dict(a.models)["gpt2"] == 128
    assert {"unet", "swin", "llama", "deberta"} <= set(dict(a.models))


@pytest.mark.parametrize("argv,says", [
    (["--engines", "tf-nope"], "unknown engine 'tf-nope'"),
    (["--reps", "0"], "--reps must be at least 1"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--models", "vit@96"], "vit is built at 224 only"),
])
def test_bad_arguments(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        zoo.parse_args(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.tfbuild
def test_zoo_speed_sweep_end_to_end(tmp_path):
    """One small model through the real sweep: build, optimize, bench on two engines.
    MobileNetV2, not MobileNetV3Small, which is ill-conditioned: at 96x96 TF Eigen with and
    without its own fusions differ by up to 5e-4 of the largest output, and at 32x32 rstf's
    default is 8.8e-4 from TF Eigen (docs/benchmarks/2026-11-27-fold-scales.md)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "zoo.py"), "--models",
         "MobileNetV2@32", "--engines", "rstf-poly,tf-eigen", "--reps", "2", "--rounds", "2",
         "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=1500,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = [json.loads(ln) for ln in (tmp_path / "zoo.jsonl").read_text().splitlines()]
    assert row["passed"] and "error" not in row
    assert set(row["engines"]) == {"rstf-poly", "tf-eigen"}
    assert row["rounds"] == 2  # the engines took turns
    for e in row["engines"].values():
        assert e["status"] == "ok" and e["q1_ms"] <= e["median_ms"] <= e["q3_ms"]
    assert row["best_other"]["engine"] == "tf-eigen"
    assert row["rstf_over_best"] == pytest.approx(
        row["engines"]["rstf-poly"]["median_ms"] / row["engines"]["tf-eigen"]["median_ms"])
    assert row["gflop"] > 0 and row["rstf_gflops"] > 0
    assert row["nodes_covered"] > 0 and row["max_rel_err"] <= 1e-4
    md = (tmp_path / "zoo.md").read_text()
    assert "| MobileNetV2 | 32 |" in md and "rstf / best other engine: geomean" in md
    assert (tmp_path / "zoo.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "MobileNetV2@32" / "model.pb").exists()  # not --keep


def test_a_stage_fails_in_its_own_process_with_one_line(tmp_path):
    """The build runs in a process of its own (its memory goes back when it ends); its
    error comes back as the stage's one line, and the worker's row names the stage."""
    with pytest.raises(zoo.StageFailed, match=r"^ValueError: unknown model .*NoSuchNet"):
        zoo.run_stage("build", {"name": "NoSuchNet", "size": 96, "dir": str(tmp_path)})
    assert not (tmp_path / "model.pb").exists()
    zoo.worker("NoSuchNet", 96, str(tmp_path), latency=False, rtol=1e-4)
    row = json.loads((tmp_path / "result.json").read_text())
    assert row["error"].startswith("build: ValueError: unknown model")
    assert (tmp_path / "stage").read_text() == "build"


def test_summary_says_where_tiles_came_from_a_tune_profile(tmp_path, capsys):
    """A row whose optimization took tiles from an `rstf tune` profile is counted in the
    summary (`--tuning auto` reads the machine's profile silently otherwise); rows with the
    analytic model's alone add nothing. A --tuning file that does not exist is refused."""
    rows = _rows()
    plain = zoo_report.summary(rows)
    rows[0]["tuning"] = {"profile": "/p.json", "kernels_from_profile": 3, "kernels": 9}
    rows[1]["tuning"] = {"profile": None, "kernels_from_profile": 0, "kernels": 9}
    assert zoo_report.summary(rows) == plain[:-1] + (
        "; tiles measured by rstf tune on 1/3 models (their 'tuning' field).")
    with pytest.raises(SystemExit) as e:
        zoo.parse_args(["--tuning", str(tmp_path / "none.json")])
    assert e.value.code == 2 and "no such profile" in capsys.readouterr().err
    assert zoo.parse_args(["--tuning", "off", "--models", "MobileNetV2"]).tuning == "off"
