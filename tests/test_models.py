"""Model-level runs: a reference model is built, optimized and compared with stock TF.

These are the slow tests (about a minute each on 2 cores), so the models are built at reduced
input sizes; the architecture, and so the op mix, is the same as at full size.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from models.build import build_graph_def  # noqa: E402
from rstf.compare import compare  # noqa: E402
from rstf.pipeline import optimize  # noqa: E402


@pytest.mark.model
@pytest.mark.parametrize("name,size,min_nodes", [
    ("inception_v3", 75, 0.90),
    ("resnet50", 64, 0.90),
    ("mobilenet_v2", 64, 0.0),  # Relu6, DepthwiseConv2dNative, Pad stay in TF for now
])
def test_model_optimizes_and_matches(tmp_path, name, size, min_nodes):
    path = tmp_path / f"{name}.pb"
    path.write_bytes(build_graph_def(name, input_size=size).SerializeToString())
    out = str(tmp_path / "out")
    report = optimize(str(path), out, log=lambda m: None)
    if name != "mobilenet_v2":
        assert report["flops_covered"] >= 0.99 * report["flops_total"]
    assert report["nodes_covered"] >= min_nodes * report["nodes_total"]
    assert report["subgraphs"]
    result = compare(str(path), out, reps=1)
    assert result["passed"], result["outputs"]
    assert result["outputs"][0]["max_rel_err"] <= 1e-4
