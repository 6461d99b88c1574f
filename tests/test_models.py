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
@pytest.mark.parametrize("name,size", [
    ("inception_v3", 75),
    ("inception_v4", 75),
    ("resnet50", 64),
    ("mobilenet_v2", 64),
])
def test_model_optimizes_and_matches(tmp_path, name, size):
    path = tmp_path / f"{name}.pb"
    path.write_bytes(build_graph_def(name, input_size=size).SerializeToString())
    out = str(tmp_path / "out")
    report = optimize(str(path), out, log=lambda m: None)
    assert report["flops_covered"] == report["flops_total"] > 0  # all conv/matmul FLOPs
    assert report["nodes_covered"] >= 0.95 * report["nodes_total"]
    assert report["subgraphs"]
    result = compare(str(path), out, reps=1)
    assert result["passed"], result["outputs"]
    assert result["outputs"][0]["max_rel_err"] <= 1e-4
