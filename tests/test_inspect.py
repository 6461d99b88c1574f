"""`rstf inspect`: op table, subgraphs and partitions, and the graphviz drawing."""
import json
import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from harness import make_graph_def, save_graph_def, tf
from rstf import cli
from rstf.evaluation import dot
from rstf.errors import RstfError
from rstf.frontend.graph import load_model
from rstf.evaluation.inspect_graph import inspect
from rstf.pipeline import select_parts, node_flops
from test_pipeline import small_cnn

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_graph_def(make_graph_def(small_cnn), str(tmp_path_factory.mktemp("insp")))


def tricky():
    """Names TensorFlow accepts that matter to DOT and XML: '>', '.', '-', '/'."""
    w = np.ones((2, 3), np.float32)
    x = tf.compat.v1.placeholder(tf.float32, [1, 2], name="in>put")
    y = tf.nn.relu(tf.matmul(x, w, name="a>b/mat.mul-1"), name="x.y-z/w>v")
    tf.math.sin(y, name="s>in")


def _nodes(svg_path):
    root = ET.parse(svg_path).getroot()  # well-formed XML, or this raises
    found = {}
    for g in root.iter(SVG + "g"):
        if g.get("class") == "node":
            texts = [t.text for t in g.iter(SVG + "text")]
            a = g.find(f".//{SVG}a")
            found[g.find(SVG + "title").text] = (texts, a.get(XLINK + "title") if a is not None
                                                 else None)
    return found


def test_table_counts_flops_and_partitions(model):
    r = inspect(model)
    ops = {row["op"]: row for row in r["ops"]}
    assert ops["Sin"]["unsupported"] == 1 and ops["Sin"]["supported"] == 0
    assert "Sin" in ops["Sin"]["reason"]
    assert ops["Conv2D"] == {"op": "Conv2D", "count": 1, "supported": 1, "unsupported": 0,
                             "flops": 2 * (6 * 6 * 8) * (3 * 3 * 3), "reason": None}
    assert ops["MatMul"]["flops"] == 2 * 10 * 16
    assert r["ops"][0]["op"] == "Conv2D"  # sorted by FLOPs
    assert r["nodes_computing"] == 9 and r["nodes_supported"] == 8
    assert r["flops_total"] == r["flops_in_partitions"] == 15552 + 320
    graph = load_model(model, fold=True)
    parts, reasons = select_parts(graph, 400, lambda m: None)  # what `optimize` would generate
    assert [p["node_names"] for p in r["partitions"]] == parts
    assert [p["name"] for p in r["partitions"]] == ["subgraph_0", "subgraph_1"]
    for p in r["partitions"]:
        assert p["flops"] == sum(node_flops(graph, n) for n in p["node_names"])
        assert sum(p["ops"].values()) == p["nodes"] == len(p["node_names"])
    assert [s["partitions"] for s in r["subgraphs"]] == [[0], [1]]
    assert r["svg"] is None


def test_metis_parts_under_their_subgraph(model):
    r = inspect(model, max_ops=2)
    assert len(r["subgraphs"]) == 2 and len(r["partitions"]) > 2
    assert all(p["nodes"] <= 2 for p in r["partitions"])
    for s in r["subgraphs"]:
        parts = [r["partitions"][i] for i in s["partitions"]]
        assert all(p["subgraph"] == s["index"] for p in parts)
        assert sum(p["nodes"] for p in parts) == s["nodes"]
    assert [p["index"] for p in r["partitions"]] == list(range(len(r["partitions"])))


def test_cli_table_and_json(model, capsys, monkeypatch):
    # The table wraps at the terminal's width, which COLUMNS sets (pytest-xdist's workers
    # have it): wide enough that no cell wraps.
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["inspect", model]) == 0
    out = capsys.readouterr().out
    assert "Op types" in out and "no code generator for Sin" in out
    assert "subgraph_0" in out and "subgraph_1" in out and "15.55 k" in out
    assert "supported: 8/9 computing nodes (88.9%)" in out
    assert cli.main(["inspect", model, "--json", "--max-ops", "3"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["max_ops"] == 3 and r["partitions"]


def test_svg_with_tricky_names(tmp_path, capsys):
    path = save_graph_def(make_graph_def(tricky), str(tmp_path))
    svg = tmp_path / "g.svg"
    assert cli.main(["inspect", path, "--svg", str(svg)]) == 0
    assert str(svg) in capsys.readouterr().out
    nodes = _nodes(svg)
    tips = {tip for _, tip in nodes.values()}
    for name, op in (("in>put", "Placeholder"), ("a>b/mat.mul-1", "MatMul"),
                     ("x.y-z/w>v", "Relu"), ("s>in", "Sin")):
        assert f"{name} ({op})" in tips
    assert sorted(os.listdir(tmp_path)) == ["g.svg", "model.pb"]  # no temp file left
    text = svg.read_text()
    assert "subgraph_0" in text and "legend" in text and dot.UNSUPPORTED in text


def test_dot_escapes_any_name(tmp_path):
    names = ['a"b\\c\n<>{}|', "q\\N\\l\\G\\", 'end\\', "ctl\x01\x7f\r", 'ünï "x" & <y>',
             "}; n9 [label=x]; {"]
    kinds = ["partition", "unsupported", "input", "supported", "partition", "unsupported"]
    nodes = [dot.DrawNode(n, "Op", k, 0 if k == "partition" else None)
             for n, k in zip(names, kinds)]
    edges = [(names[0], names[1], False), (names[1], names[4], True)]
    svg = tmp_path / "t.svg"
    dot.render_svg(dot.to_dot(nodes, edges, ['part "0" <&>'], 'title"\\'), str(svg))
    found = _nodes(svg)
    shown = {"ctl\x01\x7f\r": "ctl\\x01\\x7f\\x0d"}
    for i, name in enumerate(names):
        texts, tip = found[f"n{i}"]
        want = shown.get(name, name)
        assert texts == ["Op", *dot._short(want).split("\n")], (name, texts)
        assert tip.replace("\u29f5", "\\") == f"{want} (Op)"
    assert len([k for k in found if k.startswith("n")]) == len(names)  # no injected node
    assert ['part "0" <&>'] in [t for t, _ in found.values()]


def test_missing_dot_and_bad_paths(model, tmp_path, monkeypatch, capsys):
    assert cli.main(["inspect", model, "--svg", str(tmp_path / "no" / "g.svg")]) == 2
    assert "no such directory" in capsys.readouterr().err
    with pytest.raises(RstfError, match="is a folder"):
        inspect(model, svg=str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["inspect", model, "--svg", str(tmp_path / "g.svg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install graphviz" in err
    assert not os.path.exists(tmp_path / "g.svg")


def test_dynamic_batch_is_inspected_per_sample(tmp_path):
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.nn.relu(tf.matmul(x, np.ones((4, 3), np.float32)), name="out")

    r = inspect(save_graph_def(make_graph_def(build), str(tmp_path)))
    assert r["dynamic_batch"] == ["x"] and r["inputs"] == {"x": [None, 4]}
    assert [sorted(p["ops"]) for p in r["partitions"]] == [["MatMul", "Relu"]]
    assert r["flops_in_partitions"] == 2 * 3 * 4  # per sample
