"""Loading and bad input: every user mistake is one line on stderr and a non-zero exit."""
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import make_graph_def, save_graph_def, tf
from rstf.errors import RstfError
from rstf.graph import load_model, parse_input_shapes


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
    """int32 arithmetic and a v1 cond (Switch/Merge) stay in TF; the result still runs."""
    def build():
        x = tf.compat.v1.placeholder(tf.int32, [4], name="x")
        y = tf.compat.v1.cond(tf.reduce_sum(x) > 0, lambda: x * 2, lambda: x - 1)
        tf.identity(y * 3, name="y")  # Mul has a generator, but not for int32

    pb = save_graph_def(make_graph_def(build), str(tmp_path))
    out = tmp_path / "o"
    r = rstf("optimize", pb, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "warning: no subgraph" in r.stderr
    import json as _json

    rep = _json.loads((out / "report.json").read_text())
    assert rep["subgraphs"] == [] and rep["library"] is None
    assert "int32" in rep["unsupported"]["Mul"]["reason"]
    assert {"StatelessIf", "If", "Switch"} & set(rep["unsupported"])
    r = rstf("compare", pb, str(out), "--reps", "1")
    assert r.returncode == 0, r.stderr + r.stdout
