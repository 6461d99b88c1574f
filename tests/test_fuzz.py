"""Differential fuzzing: random graphs of supported ops, optimized, compared with TF.

CI runs a bounded, derandomized campaign (RSTF_FUZZ_EXAMPLES, default 6: each example builds
an op library, ~20 s); `scripts/fuzz.py` runs longer ones and saves what fails under
tests/data/fuzz_regressions/, which `test_fuzz_regressions` replays forever after.
"""
import glob
import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness import save_graph_def
from rstf.compare import compare
from rstf.fuzz import graphs
from rstf.pipeline import optimize

EXAMPLES = int(os.environ.get("RSTF_FUZZ_EXAMPLES", "6"))
REGRESSIONS = os.path.join(os.path.dirname(__file__), "data", "fuzz_regressions")


def optimize_and_compare(gd, tmp_dir, max_ops, optimizer="poly"):
    model = save_graph_def(gd, tmp_dir, "fuzz.pb")
    out = os.path.join(tmp_dir, "fuzz.rstf")
    report = optimize(model, out, max_ops=max_ops, force=True, log=lambda m: None,
                      optimizer=optimizer)
    result = compare(model, out, latency=False)
    return report, result


@pytest.mark.tfbuild
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(g=graphs(), max_ops=st.sampled_from([2, 3, 400]),
       optimizer=st.sampled_from(["none", "poly"]))
def test_random_graphs_match_tensorflow(tmp_path, g, max_ops, optimizer):
    report, result = optimize_and_compare(g.graph_def, str(tmp_path), max_ops, optimizer)
    assert result["passed"], (g.recipe, result["outputs"])
    for sg in report["subgraphs"]:
        assert len(sg["nodes"]) <= max_ops


@pytest.mark.tfbuild
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REGRESSIONS, "*.pbtxt"))))
def test_fuzz_regressions(tmp_path, path):
    from google.protobuf import text_format

    from harness import tf

    gd = text_format.Parse(open(path).read(), tf.compat.v1.GraphDef())
    max_ops = int(os.path.basename(path).split("-maxops")[1].split(".")[0])
    _, result = optimize_and_compare(gd, str(tmp_path), max_ops)
    assert result["passed"], result["outputs"]
