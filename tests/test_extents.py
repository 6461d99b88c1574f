"""Tensors too large for the generated C's 32-bit indices stay in TensorFlow, with the reason
in report.json, and the compilers' index-range warnings are errors (build.INDEX_RANGE_ERRORS):
an `int` loop counting to 3.2 billion would never end, under the team's lock."""
import json
import subprocess
import sys

import pytest

from rstf.build.compiler import compile_c_shared, c_toolchain
from rstf.cgen.codegen import generate_subgraph
from rstf.errors import RstfError
from rstf.frontend.graph import load_model
from rstf.opgen.base import MAX_ELEMENTS
from rstf.pipeline import supported_nodes
from rstf.frontend.tfutil import tf

BIG = 3221225472  # 3.2 billion elements: 12.9 GB of float32, never allocated here


def _graph_pb(tmp_path, n):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [n], name="x")
        tf.sigmoid(tf.nn.relu(x), name="y")
        tf.reduce_sum(x, name="s")
    p = tmp_path / f"g{n}.pb"
    p.write_bytes(g.as_graph_def().SerializeToString())
    return str(p)


@pytest.mark.parametrize("optimizer", ["poly", "none"])
def test_a_graph_of_3_2_billion_elements_is_refused_with_a_reason(tmp_path, optimizer):
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, "-m", "rstf", "optimize", _graph_pb(tmp_path, BIG),
                        "-o", str(out), "--optimizer", optimizer], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["subgraphs"] == [] and report["library"] is None
    for op in ("Relu", "Sigmoid", "Sum"):
        reason = report["unsupported"][op]["reason"]
        assert "3,221,225,472 elements" in reason and "32-bit" in reason, reason


def test_the_bound_is_exact(tmp_path):
    ok, reasons = supported_nodes(load_model(_graph_pb(tmp_path, MAX_ELEMENTS)))
    assert {"Relu", "y", "s"} <= ok, reasons
    ok, reasons = supported_nodes(load_model(_graph_pb(tmp_path, MAX_ELEMENTS + 1)))
    assert not ok and "32-bit" in reasons["Relu"]


@pytest.mark.parametrize("poly", [False, True])
def test_index_range_warnings_are_errors(tmp_path, poly):
    """The C rstf would emit for such a graph, were it not refused, does not build: the
    compilers' warning that an `int` index cannot reach its bound is an error."""
    g = load_model(_graph_pb(tmp_path, BIG))
    sg = generate_subgraph(g, ["Relu", "y"] if not poly else ["s"], 0)
    source = sg.source
    if poly:
        from rstf.poly import optimize_source

        source, info = optimize_source(source, sg.entry)
    assert f"< {BIG}" in source or f"<= {BIG - 1}" in source
    with pytest.raises(RstfError, match="type-limits"):
        compile_c_shared(source, str(tmp_path / "big.so"))
    # The same C without those flags builds: it is they that stop it.
    lax = c_toolchain("poly")
    lax = type(lax)(lax.optimizer, lax.cc, tuple(f for f in lax.flags if "type-limits" not in f))
    compile_c_shared(source, str(tmp_path / "big.so"), toolchain=lax)
