"""The inputs `rstf compare` and `rstf bench` feed (images in [0, 1), ids inside the
embedding table, masks 0/1, `--input-range`, `--inputs` keys), and TensorFlow's own
oneDNN-vs-Eigen spread reported beside rstf's error."""
import json
import math
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import rstf
import rstf.evaluation.compare as compare_mod
from harness import load_graph_def, make_graph_def, save_graph_def, tf
from rstf.evaluation import bench as bench_mod
from rstf.cli import main
from rstf.errors import RstfError
from rstf.evaluation.inputs import draw_inputs, gather_rows, parse_input_range
from test_cli_inputs import assert_one_line_error, rstf as rstf_cli


def image_model():
    """A 4-D image input and a 1-D bias input; a conv and a matmul, where TF's oneDNN and
    Eigen kernels sum in different orders."""
    rng = np.random.RandomState(1)
    w = rng.standard_normal((3, 3, 3, 16)).astype(np.float32)
    m = rng.standard_normal((16, 4)).astype(np.float32)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="image")
        b = tf.compat.v1.placeholder(tf.float32, [4], name="bias")
        y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        tf.identity(tf.matmul(tf.reduce_mean(y, [1, 2]), m) + b, name="logits")
    return build


def gather_model():
    """int32 token ids (through an Identity) into a 2-row embedding table, and an int32
    mask cast to float: TensorFlow fails on an id >= 2."""
    table = np.arange(16, dtype=np.float32).reshape(2, 8)

    def build():
        ids = tf.compat.v1.placeholder(tf.int32, [1, 128], name="ids")
        mask = tf.compat.v1.placeholder(tf.int32, [1, 128], name="mask")
        e = tf.gather(tf.constant(table), tf.identity(ids), axis=0)
        e = e * tf.expand_dims(tf.cast(mask, tf.float32), -1)
        tf.nn.relu(tf.reshape(e, [1, 1024]) * 0.5, name="out")
    return build


def _optimized(tmp_path_factory, build, name):
    d = tmp_path_factory.mktemp(name)
    pb = save_graph_def(make_graph_def(build), str(d), f"{name}.pb")
    r = rstf_cli("optimize", pb, "-o", str(d / "out"), "-q")
    assert r.returncode == 0, r.stderr
    return pb, str(d / "out")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return _optimized(tmp_path_factory, image_model(), "image")


@pytest.fixture(scope="module")
def gather(tmp_path_factory):
    return _optimized(tmp_path_factory, gather_model(), "gather")


@pytest.fixture
def fed(monkeypatch):
    """The feeds `rstf compare` writes for its runs, as a list of dicts, one per run."""
    seen = []
    original = compare_mod.write_run_files

    def record(tmp, graph, feeds):
        seen.append({k: np.array(v) for k, v in feeds.items()})
        return original(tmp, graph, feeds)

    monkeypatch.setattr(compare_mod, "write_run_files", record)
    return seen


# --------------------------------------------------------------------------- no build


def test_input_range_parsing():
    assert parse_input_range("-1,1") == (-1.0, 1.0)
    assert parse_input_range((0, 255)) == (0.0, 255.0) and parse_input_range(None) is None
    for bad, why in [("1", "expected LO,HI"), ("0,1,2", "expected LO,HI"),
                     ("a,b", "expected LO,HI"), ("0,inf", "finite"), ("nan,1", "finite"),
                     ("1,1", "less than"), ("2,-2", "less than"), (5, "expected LO,HI"),
                     ("-1e308,1e308", "overflows")]:
        with pytest.raises(RstfError, match=why):
            parse_input_range(bad)


def test_bad_input_range_is_one_line(tmp_path):
    """Checked before the model is read: no optimized folder needed. A value that starts
    with '-' is the option's value, not an option."""
    for bad in ("2,-2", "-inf,0", "0..1"):
        assert_one_line_error(rstf_cli("compare", "m.pb", str(tmp_path), "--input-range",
                                       bad), "--input-range", bad)
    assert_one_line_error(rstf_cli("bench", "m.pb", "--input-range", "1"), "--input-range")


def test_default_distributions_and_range():
    g = load_graph_def(make_graph_def(image_model()), outputs=["logits"])
    feeds, sources = draw_inputs(g, 0)
    x, b = feeds["image:0"], feeds["bias:0"]
    assert x.dtype == np.float32 and 0 <= x.min() and x.max() < 1 and x.std() > 0.2
    assert b.min() < 0 < b.max()  # not an image: standard normal
    assert sources == {"image": "uniform [0, 1)", "bias": "standard normal"}
    feeds, sources = draw_inputs(g, 0, input_range=(-1, 1))
    for v in feeds.values():
        assert -1 <= v.min() < 0 < v.max() < 1
    assert set(sources.values()) == {"uniform [-1, 1)"}
    # Rounding to float32 never lands on HI, even when HI is not a float32.
    feeds, _ = draw_inputs(g, 0, input_range=(0.1, 0.1 + 1e-8))
    assert (feeds["image:0"] < 0.1 + 1e-8).all() and (feeds["image:0"] >= 0.1).all()


def test_ids_reach_the_table_through_shape_ops():
    g = load_graph_def(make_graph_def(gather_model()), outputs=["out"])
    assert gather_rows(g, "ids") == 2 and gather_rows(g, "mask") is None
    feeds, sources = draw_inputs(g, 3)
    assert set(np.unique(feeds["ids:0"])) == {0, 1} and feeds["ids:0"].dtype == np.int32
    assert set(np.unique(feeds["mask:0"])) == {0, 1}
    assert "[0, 2)" in sources["ids"] and sources["mask"] == "0 or 1"

    def two_tables():
        ids = tf.compat.v1.placeholder(tf.int64, [4, 3], name="ids")
        flat = tf.reshape(tf.cast(ids, tf.int32), [12])
        a = tf.gather(tf.zeros([5, 7]), flat)  # axis 0: 5 rows
        b = tf.gather(tf.zeros([2, 3, 9]), tf.expand_dims(flat, 0), axis=-1)  # 9 along -1
        tf.identity(tf.reduce_sum(a) + tf.reduce_sum(b), name="out")

    g = load_graph_def(make_graph_def(two_tables), outputs=["out"])
    assert gather_rows(g, "ids") == 5
    feeds, _ = draw_inputs(g, 0)
    assert feeds["ids:0"].max() <= 4 and feeds["ids:0"].dtype == np.int64


def test_ids_reach_the_table_through_negative_id_wrapping():
    """keras' embedding lookup (keras-hub's BERT) wraps negative ids first:
    where(ids < 0, ids + rows, ids); the ids still index the table."""
    def wrapped():
        ids = tf.compat.v1.placeholder(tf.int32, [1, 6], name="ids")
        fixed = tf.where(ids < 0, ids + 30, ids)
        tf.identity(tf.gather(tf.zeros([30, 4]), fixed), name="out")

    g = load_graph_def(make_graph_def(wrapped), outputs=["out"])
    assert gather_rows(g, "ids") == 30
    feeds, sources = draw_inputs(g, 0)
    assert feeds["ids:0"].max() > 1 and "[0, 30)" in sources["ids"]


def test_spread_ratio_of_zero_spread():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division warning either
        assert compare_mod.spread_ratio(1e-7, 0.0) is None
        assert compare_mod.spread_ratio(0.0, 0.0) is None
        assert compare_mod.spread_ratio(math.inf, 1e-7) is None
        assert compare_mod.spread_ratio(1e-7, None) is None
        assert compare_mod.spread_ratio(3e-7, 2e-7) == pytest.approx(1.5)
    assert compare_mod.format_ratio(None) == "n/a"
    assert compare_mod.format_ratio(1.23) == "1.2x" and compare_mod.format_ratio(140.4) == "140x"


def test_bench_reports_the_tf_spread(tmp_path):
    """TF engines only (nothing to build): the model's TF spread is tf-onednn's error, and
    each row's ratio is its error over it."""
    model = save_graph_def(make_graph_def(image_model()), str(tmp_path), "img.pb")
    r = bench_mod.bench([model], ["tf-onednn", "tf-xla"], reps=1, log=lambda m: None,
                        input_range="-2,2")
    assert r["input_range"] == [-2.0, 2.0]
    (m,) = r["models"]
    assert m["input_values"] == {"image": "uniform [-2, 2)", "bias": "uniform [-2, 2)"}
    rows = {row["engine"]: row for row in m["engines"]}
    assert m["tf_spread"] == rows["tf-onednn"]["max_rel_err"]
    for row in rows.values():
        if m["tf_spread"] > 0 and row["max_rel_err"] is not None:
            assert row["spread_ratio"] == pytest.approx(row["max_rel_err"] / m["tf_spread"])
        else:
            assert row["spread_ratio"] is None
    # The float64 run: every engine's error against it, over TF's worse one.
    assert m["exact_unavailable"] is None
    assert m["tf_exact_err"] == max(rows["tf-eigen"]["exact_err"], rows["tf-onednn"]["exact_err"])
    assert 0 < m["tf_exact_err"] < 1e-5
    for row in rows.values():
        if row["exact_err"] is not None:
            assert row["exact_ratio"] == pytest.approx(row["exact_err"] / m["tf_exact_err"])
    text = bench_mod.table(r)
    assert "err/TF spread" in text and "TF spread (oneDNN vs Eigen)" in text
    assert "f64 err/TF" in text and "TF's error against float64" in text
    assert "image 1x8x8x3 uniform [-2, 2)" in text
    assert "err / TF spread | float64 err / TF's" in bench_mod.markdown_table(r)


# --------------------------------------------------------------------------- CLI, built


@pytest.mark.tfbuild
def test_compare_feeds_images_in_unit_range(image, fed, capsys):
    pb, out = image
    assert main(["compare", pb, out, "--reps", "1", "--json"]) == 0
    (feeds,) = fed
    x, b = feeds["image:0"], feeds["bias:0"]
    assert 0 <= x.min() and x.max() < 1
    assert b.min() < 0  # the other input keeps standard normal values
    r = json.loads(capsys.readouterr().out)
    assert r["input_values"] == {"image": "uniform [0, 1)", "bias": "standard normal"}
    assert r["inputs"] == {"image": [1, 8, 8, 3], "bias": [4]}
    (o,) = r["outputs"]
    assert o["tf_spread"] is not None and o["tf_spread"] >= 0
    assert o["tf_spread"] == max(o["tf_spread_of"].values())
    assert set(o["tf_spread_of"]) == {"onednn", "grappler_off"}
    if o["tf_spread"] > 0:  # oneDNN and Eigen sum the conv in different orders
        assert o["spread_ratio"] == pytest.approx(o["max_rel_err"] / o["tf_spread"])
    else:
        assert o["spread_ratio"] is None
    # The float64 run: TF's two paths and rstf against it.
    assert r["exact_unavailable"] is None
    of = o["exact_err_of"]
    assert set(of) == {"rstf", "tf_eigen", "tf_onednn"}
    tf_worse = max(of["tf_eigen"], of["tf_onednn"])
    assert 0 < tf_worse < 1e-5  # float32 rounds, and no engine is far off
    assert o["exact_ratio"] == pytest.approx(of["rstf"] / tf_worse)

    fed.clear()
    assert main(["compare", pb, out, "--reps", "1", "--input-range", "-1,1"]) == 0
    for v in fed[0].values():
        assert -1 <= v.min() < 0 < v.max() < 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "inputs: image 1x8x8x3 uniform [-1, 1); bias 4 uniform [-1, 1)"
    m = re.fullmatch(r"logits:0: max_abs_err (\S+)  max_rel_err (\S+)  TF spread (\S+) "
                     r"\(oneDNN vs Eigen (\S+), Eigen without Grappler (\S+)\)  ratio (\S+)  ok",
                     lines[1])
    assert m, lines[1]
    err, spread = float(m[2]), float(m[3])
    # The spread is the larger of TF's two measures (both printed to 2 digits).
    assert spread == max(float(m[4]), float(m[5]))
    m = [None, m[1], m[2], m[3], m[6]]
    assert m[4] == "n/a" if spread == 0 else m[4].endswith("x")
    if spread > 0:  # both printed to 2 digits: the ratio agrees to about 10%
        assert float(m[4][:-1]) == pytest.approx(err / spread, rel=0.15)
    assert re.fullmatch(r"  against the float64 run: rstf \S+, TF Eigen \S+, TF oneDNN \S+  "
                        r"rstf / TF's worse \S+x", lines[2]), lines[2]
    assert lines[-1] == "PASSED"


@pytest.mark.tfbuild
def test_per_subgraph_reports_the_tf_spread(image):
    pb, out = image
    r = rstf.compare(pb, out, per_subgraph=True, input_range=(-1, 1))
    assert r["passed"] and r["input_values"]["image"] == "uniform [-1, 1)"
    for sg in r["subgraphs"]:
        assert sg["tf_spread"] == max(o["tf_spread"] for o in sg["outputs"])
        for item in (sg, *sg["outputs"]):
            if item["tf_spread"] > 0:
                assert item["spread_ratio"] == pytest.approx(item["max_rel_err"] /
                                                             item["tf_spread"])
            else:
                assert item["spread_ratio"] is None


@pytest.mark.tfbuild
def test_inputs_file_keys(image, tmp_path):
    pb, out = image
    bad = tmp_path / "bad.npz"
    np.savez(bad, imgae=np.zeros((1, 8, 8, 3), np.float32))  # a typo: no such input
    assert_one_line_error(rstf_cli("compare", pb, out, "--inputs", str(bad)), "'imgae'",
                          "image (float32, 1x8x8x3)", "bias (float32, 4)")
    half = tmp_path / "half.npz"
    np.savez(half, **{"image:0": np.full((1, 8, 8, 3), 0.5, np.float32)})  # no bias
    r = rstf_cli("compare", pb, out, "--inputs", str(half), "--reps", "1")
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(warned) == 1 and warned[0].startswith("rstf: warning: ")
    assert "'bias'" in warned[0] and "standard normal" in warned[0]
    assert f"image 1x8x8x3 from {half}; bias 4 standard normal" in r.stdout
    assert r.stdout.rstrip().endswith("PASSED")


@pytest.mark.tfbuild
def test_token_ids_stay_inside_the_table(gather, fed, capsys):
    """GatherV2 is generated (rstf/opgen/gather.py), and like TensorFlow's CPU kernel it
    refuses an id past the table; compare's ids are drawn inside it."""
    pb, out = gather
    assert "GatherV2" not in json.load(open(f"{out}/report.json"))["unsupported"]
    assert main(["compare", pb, out, "--reps", "1"]) == 0, capsys.readouterr().err
    (feeds,) = fed
    assert feeds["ids:0"].max() < 2 and feeds["ids:0"].min() >= 0
    assert set(np.unique(feeds["mask:0"])) <= {0, 1}
    assert capsys.readouterr().out.rstrip().endswith("PASSED")


def test_a_crashed_runner_is_reported_by_how_it_ended_not_by_tensorflow_chatter():
    """A runner that dies before printing its result (an engine that aborts the process)
    used to be reported by the last 500 characters of its stderr: TensorFlow's start-up
    log lines, with the cause cut off."""
    import subprocess
    import sys

    from rstf.evaluation.compare import runner_failure

    script = ("import os, sys\n"
              "print('the converter cannot handle Erfc', file=sys.stderr)\n"
              "for i in range(20):\n"
              "    print(f'I0000 00:00:17 {i} port.cc:153] oneDNN custom operations are on.',"
              " file=sys.stderr)\n"
              "print('WARNING: All log messages before absl::InitializeLog() is called are "
              "written to STDERR', file=sys.stderr)\n"
              "sys.stderr.flush(); os.abort()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    why = runner_failure(proc)
    assert why == "killed by SIGABRT: the converter cannot handle Erfc", why
    proc = subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], capture_output=True,
                          text=True)
    assert runner_failure(proc) == "exit status 3"
    proc = subprocess.run([sys.executable, "-c", "import os, signal; "
                           "os.kill(os.getpid(), signal.SIGKILL)"], capture_output=True, text=True)
    assert runner_failure(proc) == "killed by SIGKILL (as the system does when memory runs out)"


def test_output_errors_of_non_finite_outputs():
    """The same infinity (or NaN) in both outputs is no error; an infinity on one side
    only, or of the other sign, is; the scale is the largest finite magnitude."""
    ref = np.array([1.0, 2.0, np.inf, -np.inf, np.nan], np.float32)
    assert compare_mod.output_errors(ref, ref.copy()) == (0.0, 0.0)
    got = ref.copy()
    got[1] = 2.5
    assert compare_mod.output_errors(ref, got) == (0.5, 0.25)
    for i, v in ((2, -np.inf), (2, 3.0), (4, 1.0), (0, np.inf)):
        bad = ref.copy()
        bad[i] = v
        assert compare_mod.output_errors(ref, bad) == (math.inf, math.inf), (i, v)
