"""Loading and bad input: every user mistake is one line on stderr and a non-zero exit."""
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import make_graph_def, save_graph_def, tf
from rstf.errors import RstfError
from rstf.frontend.graph import load_model, parse_input_shapes


def rstf(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "rstf", *args], capture_output=True,
                          text=True, cwd=cwd)


def assert_one_line_error(r, *needles):
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("rstf: error: "), lines[0]
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def tiny():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    tf.nn.relu(tf.matmul(x, np.ones((4, 3), np.float32)), name="y")


@pytest.fixture(scope="module")
def tiny_pb(tmp_path_factory):
    return save_graph_def(make_graph_def(tiny), str(tmp_path_factory.mktemp("tiny")))


def test_missing_file(tmp_path):
    assert_one_line_error(rstf("optimize", str(tmp_path / "nope.pb")), "no such file")


def test_not_a_protobuf(tmp_path):
    p = tmp_path / "junk.pb"
    p.write_bytes(b"\xff\xfe this is not a graph \x00\x01" * 10)
    assert_one_line_error(rstf("optimize", str(p)), "not a binary GraphDef")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.pb"
    p.write_bytes(b"")
    assert_one_line_error(rstf("optimize", str(p)), "empty")


def test_truncated_protobuf(tmp_path, tiny_pb):
    data = open(tiny_pb, "rb").read()
    p = tmp_path / "cut.pb"
    p.write_bytes(data[: len(data) // 2])
    assert_one_line_error(rstf("optimize", str(p)), str(p))


def test_output_folder_exists(tmp_path, tiny_pb):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(out)), "already exists")
    assert (out / "keep.txt").read_text() == "user data"  # nothing lost


def test_bad_input_shape_flag(tiny_pb):
    assert_one_line_error(rstf("optimize", tiny_pb, "--input-shape", "nosuch:1,4"), "nosuch")
    assert_one_line_error(rstf("optimize", tiny_pb, "--input-shape", "x:1,5"), "incompatible")
    assert_one_line_error(rstf("optimize", tiny_pb, "--input-shape", "x:a,b"), "integers")
    assert_one_line_error(rstf("optimize", tiny_pb, "--input-shape", "x:1,?"),
                          "only dimension 0")


def test_input_shape_keeps_the_batch_unknown_with_a_question_mark():
    assert parse_input_shapes(["x:?,4", "y:2,3"]) == {"x": (None, 4), "y": (2, 3)}
    with pytest.raises(RstfError, match="positive"):
        parse_input_shapes(["x:?,0"])


def test_march_must_be_an_architecture_name(tmp_path, tiny_pb):
    # It reaches gcc's argv and the serving BUILD file: a quote or a space is refused.
    out = tmp_path / "o"
    for bad in ('native", "-fplugin=x', "x86-64 -O0", "-O0"):
        assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(out), f"--march={bad}"),
                              "is not a gcc architecture name")
        assert not out.exists()


def test_compare_not_an_output_folder(tmp_path, tiny_pb):
    assert_one_line_error(rstf("compare", tiny_pb, str(tmp_path)), "report.json")


def test_pbtxt_and_pinning(tmp_path, tiny_pb):
    from google.protobuf import text_format

    gd = make_graph_def(tiny)
    p = tmp_path / "tiny.pbtxt"
    p.write_text(text_format.MessageToString(gd))
    g = load_model(str(p))
    assert g.nodes["y"].out_shapes == [(None, 3)]  # TF's own shape inference
    g = load_model(str(p), parse_input_shapes(["x:2,4"]))
    assert g.nodes["y"].out_shapes == [(2, 3)]
    assert g.nodes["y"].out_dtypes == [np.dtype(np.float32)]
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("node { name: 'a' op: ")
    with pytest.raises(RstfError, match="not a text GraphDef"):
        load_model(str(bad))


def test_saved_model(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="features")])
        def __call__(self, features):
            return {"scores": tf.nn.relu(tf.matmul(features, self.w))}

    m = M()
    d = str(tmp_path / "sm")
    tf.saved_model.save(m, d, signatures={"serving_default": m.__call__})
    g = load_model(d)
    assert [p.name for p in g.placeholders] == ["features"]
    assert len(g.outputs) == 1
    ops = {n.op for n in g.nodes.values()}
    assert "MatMul" in ops and "VarHandleOp" not in ops  # frozen
    assert g.is_const(g.nodes[[n for n in g.nodes if g.nodes[n].op == "MatMul"][0]].inputs[1])
    with pytest.raises(RstfError, match="not a SavedModel"):
        os.mkdir(tmp_path / "plain")
        load_model(str(tmp_path / "plain"))


def test_unknown_dims_stay_in_tensorflow(tiny_pb):
    """Without --input-shape the batch is unknown: nothing is generated, with a warning."""
    from rstf.pipeline import supported_nodes

    g = load_model(tiny_pb)
    ok, reasons = supported_nodes(g)
    assert not ok and "non-static" in reasons["y"]
    g = load_model(tiny_pb, {"x": (1, 4)})
    assert supported_nodes(g)[0] == {"MatMul", "y"}


def test_output_path_is_a_file(tmp_path, tiny_pb):
    f = tmp_path / "afile"
    f.write_text("precious")
    assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(f), "--force"), "is a file")
    assert f.read_text() == "precious"


def test_output_parent_missing_or_a_file(tmp_path, tiny_pb):
    assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(tmp_path / "no" / "out")),
                          "no such directory")
    f = tmp_path / "plainfile"
    f.write_text("x")
    assert_one_line_error(rstf("optimize", tiny_pb, "-o", str(f / "out")), "no such directory")
    assert f.read_text() == "x"


def test_empty_graph(tmp_path):
    p = tmp_path / "empty_graph.pb"
    gd = tf.compat.v1.GraphDef()
    gd.versions.producer = 1  # a valid, non-empty protobuf without a single node
    p.write_bytes(gd.SerializeToString())
    assert_one_line_error(rstf("optimize", str(p)), "no nodes")


def test_names_tf_rejects_are_one_line(tmp_path):
    """Quotes, newlines and '*/' cannot even be TF node names: a clean one-line refusal."""
    gd = make_graph_def(tiny)
    gd.node[0].name = 'x"\n*/ é'
    p = tmp_path / "weird.pb"
    p.write_bytes(gd.SerializeToString())
    assert_one_line_error(rstf("optimize", str(p)), "cannot import")


def test_only_unsupported_ops_gives_the_original_graph(tmp_path):
    """float64 arithmetic and a v1 cond (Switch/Merge) stay in TF; the result still runs."""
    def build():
        x = tf.compat.v1.placeholder(tf.float64, [4], name="x")
        y = tf.compat.v1.cond(tf.reduce_sum(x) > 0, lambda: x * 2, lambda: x - 1)
        tf.identity(y * 3, name="y")  # Mul has a generator, but not for float64

    pb = save_graph_def(make_graph_def(build), str(tmp_path))
    out = tmp_path / "o"
    r = rstf("optimize", pb, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "warning: no subgraph" in r.stderr
    import json as _json

    rep = _json.loads((out / "report.json").read_text())
    assert rep["subgraphs"] == [] and rep["library"] is None
    assert "float64" in rep["unsupported"]["Mul"]["reason"]
    assert {"StatelessIf", "If", "Switch"} & set(rep["unsupported"])
    r = rstf("compare", pb, str(out), "--reps", "1")
    assert r.returncode == 0, r.stderr + r.stdout


def test_nan_and_inf_constants_propagate(tmp_path):
    """NaN and Inf in weights flow through the generated code exactly as through TF."""
    from harness import run_generated, run_tf

    w = np.ones((1, 1, 2, 3), np.float32)
    w[0, 0, 0, 0], w[0, 0, 1, 1] = np.nan, np.inf

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 2, 2, 2], name="x")
        y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID"))
        tf.identity(tf.reduce_max(y, [1, 2]) + tf.constant([0.0, 0.0, -np.inf]), name="out")

    from harness import load_graph_def

    gd = make_graph_def(build)
    g = load_graph_def(gd, outputs=["out"])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    x = np.abs(np.random.RandomState(0).standard_normal((1, 2, 2, 2))).astype(np.float32)
    got = run_generated(g, nodes, {"x": x})[0]["out:0"]
    ref = run_tf(gd, {"x": x}, ["out:0"])[0]
    np.testing.assert_array_equal(got, ref)  # NaN, inf and -inf in the same places
    assert np.isnan(ref).any() and np.isinf(ref).any()


def test_debug_flag_shows_traceback(tmp_path, monkeypatch):
    """An internal error is one line, unless --debug asks for the traceback."""
    p = tmp_path / "m.pbtxt"
    p.write_text("node { name: 'a' op: 'Const' attr { key: 'dtype' value { type: DT_FLOAT } } "
                 "attr { key: 'value' value { tensor { dtype: DT_FLOAT tensor_shape {} "
                 "float_val: 1 } } } }")
    import rstf.cli as cli

    def boom(a):
        raise ZeroDivisionError("simulated bug")

    # Recorded now, restored at teardown: --debug sets RSTF_DEBUG, which must not leak
    # into later tests (it turns TensorFlow's start-up banners back on).
    monkeypatch.setenv("RSTF_DEBUG", "")
    monkeypatch.setattr(cli, "_optimize", boom)
    assert cli.main(["optimize", str(p)]) == 3
    with pytest.raises(ZeroDivisionError):
        cli.main(["--debug", "optimize", str(p)])


def test_concurrent_optimize_share_the_cache(tmp_path, tiny_pb):
    """Two processes building the same library at once: one builds, one waits and hits;
    both outputs are complete and the cache entry verifies."""
    env = {**os.environ, "RSTF_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-m", "rstf", "optimize", tiny_pb, "-o",
                               str(tmp_path / f"o{i}"), "--input-shape", "x:2,4"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), results
    assert sum("cached" in out for out, _, _ in results) >= 1
    from rstf.build.compiler import _verified

    libs = [os.path.join(tmp_path / "cache", d, f) for d in os.listdir(tmp_path / "cache")
            if not d.startswith(".") for f in os.listdir(tmp_path / "cache" / d)
            if f.endswith(".so")]
    assert len(libs) == 1 and _verified(libs[0])
    for i in range(2):
        assert (tmp_path / f"o{i}" / "optimized.pb").exists()


def test_unknown_dims_message_names_input_and_option(tmp_path):
    """An unknown dimension other than the batch stays in TF, and the warning says how to
    pin it; an unknown batch alone becomes a dynamic batch (tests/test_dynamic_batch.py)."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2, None], name="x")
        tf.nn.relu(x * 2.0, name="y")

    pb = save_graph_def(make_graph_def(build), str(tmp_path))
    r = rstf("optimize", pb, "-o", str(tmp_path / "o"))
    assert r.returncode == 0
    warning = [ln for ln in r.stderr.splitlines() if "unknown" in ln or "[2,?" in ln]
    assert warning and "'x'" in warning[0] and "--input-shape x:" in warning[0]


@pytest.mark.tfbuild
def test_unknown_batch_is_dynamic(tiny_pb, tmp_path):
    r = rstf("optimize", tiny_pb, "-o", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "dynamic batch: 'x'" in r.stderr


def test_hostile_but_valid_node_names_are_escaped(tmp_path):
    """TF accepts '>', '.', '-', '_' and '/' in node names (and a leading digit or dot;
    quotes, backslashes, newlines and '*/' it rejects, see above): names reach the generated
    C and C++ only inside escaped comments and string literals, and the library builds."""
    from rstf.pipeline import optimize

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4], name="9.in>put")
        y = tf.nn.relu(tf.matmul(x, np.ones((4, 3), np.float32)), name=".a>b/c.d-e_")
        tf.identity(y * 2.0, name="out>x.y-z")

    pb = save_graph_def(make_graph_def(build), str(tmp_path))
    out = tmp_path / "o"
    report = optimize(pb, str(out), log=lambda m: None)
    assert report["subgraphs"]
    for f in (out / "src").iterdir():
        text = f.read_text()
        if f.suffix == ".c":
            assert "\\" not in text  # no backslash at all: no line splicing, no escapes
            assert ".a>b/c.d-e_" in text  # the names are there, in comments
        elif f.suffix == ".cc":
            assert "9.in\\076put:0" in text  # in string literals, '>' is an octal escape
    r = rstf("compare", pb, str(out), "--reps", "1")
    assert r.returncode == 0, r.stderr + r.stdout


def test_graph_over_the_protobuf_limit(tmp_path):
    """A GraphDef of 2 GiB or more cannot be parsed; say so, and what to do instead. (A
    sparse file: no disk is used.)"""
    p = tmp_path / "huge.pb"
    with open(p, "wb") as f:
        f.truncate(2**31 + 10)
    assert_one_line_error(rstf("optimize", str(p)), "2 GiB limit")
