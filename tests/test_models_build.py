"""Tests for models/build.py: determinism, runnability and CLI errors.

Uses mobilenet_v2 at a small input size so the whole file runs in well under a
minute on 2 CPU cores.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The models/ directory is not an installed package; import it from the repo.
if REPO not in sys.path:
    sys.path.insert(0, REPO)

tf = pytest.importorskip("tensorflow")
from models.build import build_graph_def  # noqa: E402

SIZE = 64  # small but valid for mobilenet_v2 (>= 32)


@pytest.fixture(scope="module")
def graph_def():
    return build_graph_def("mobilenet_v2", input_size=SIZE)


def test_build_is_deterministic_in_process(graph_def):
    # A second in-process build must not pick up different keras auto-names
    # or RNG state: the serialized bytes must match exactly.
    again = build_graph_def("mobilenet_v2", input_size=SIZE)
    assert graph_def.SerializeToString(deterministic=True) == again.SerializeToString(
        deterministic=True
    )


def test_seed_changes_weights(graph_def):
    other = build_graph_def("mobilenet_v2", input_size=SIZE, seed=1)
    assert graph_def.SerializeToString(deterministic=True) != other.SerializeToString(
        deterministic=True
    )


def test_graph_contract_and_runs(graph_def):
    nodes = {n.name: n for n in graph_def.node}
    assert nodes["input"].op == "Placeholder"
    assert graph_def.node[-1].name == "output" and graph_def.node[-1].op == "Identity"
    assert not any(n.op in ("VarHandleOp", "ReadVariableOp") for n in graph_def.node)

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    x_t = g.get_tensor_by_name("input:0")
    y_t = g.get_tensor_by_name("output:0")
    assert x_t.shape.as_list() == [1, SIZE, SIZE, 3]
    assert y_t.shape.as_list() == [1, 1000]

    x = np.random.RandomState(123).standard_normal((1, SIZE, SIZE, 3)).astype(np.float32)
    with tf.compat.v1.Session(graph=g) as sess:
        y = sess.run(y_t, {x_t: x})
    assert y.shape == (1, 1000)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-4)
    # Softmax neither one-hot nor exactly uniform.
    assert y.max() < 0.99
    assert y.max() > y.min()


def test_unknown_name_cli(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "models", "build.py"), "no_such_net",
         "-o", str(tmp_path / "x.pb")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no_such_net" in lines[0] and "mobilenet_v2" in lines[0]
    assert not (tmp_path / "x.pb").exists()


def test_unknown_name_function():
    with pytest.raises(ValueError, match="valid names"):
        build_graph_def("no_such_net")


def test_inception_v4_architecture():
    """Paper's Fig. 9: 149 conv layers (each Conv2D + BN + ReLU), 14 average pools (4 A,
    7 B, 3 C blocks), 4 max pools, one 1000-way dense layer; deterministic at 75x75."""
    import collections

    gd = build_graph_def("inception_v4", input_size=75)
    ops = collections.Counter(n.op for n in gd.node)
    assert ops["Conv2D"] == 149 and ops["AvgPool"] == 14 and ops["MaxPool"] == 4
    assert ops["MatMul"] == 1 and ops["Softmax"] == 1
    assert gd.SerializeToString(deterministic=True) == build_graph_def(
        "inception_v4", input_size=75).SerializeToString(deterministic=True)
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(gd, name="")
    assert g.get_tensor_by_name("output:0").shape.as_list() == [1, 1000]
