"""The Python API: rstf.optimize / rstf.compare / rstf.inspect / OptimizeResult."""
import os
import subprocess
import sys

import numpy as np
import pytest

import rstf
from harness import make_graph_def, run_tf, save_graph_def
from rstf.errors import RstfError
from test_pipeline import small_cnn


@pytest.fixture(scope="module")
def graph_def():
    return make_graph_def(small_cnn)


def test_import_does_not_load_tensorflow():
    code = ("import sys, rstf; rstf.__getattr__; import rstf.api; "
            "assert 'tensorflow' not in sys.modules, 'tf imported'; "
            "assert callable(rstf.optimize) and callable(rstf.inspect); "
            "assert 'tensorflow' not in sys.modules; print(sorted(rstf.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "OptimizeResult" in out.stdout


@pytest.mark.tfbuild
def test_optimize_graph_def_load_and_compare(graph_def, tmp_path):
    result = rstf.optimize(graph_def, jobs=2, log=lambda m: None)
    assert isinstance(result, rstf.OptimizeResult)
    assert os.path.isfile(os.path.join(result.output_dir, "report.json"))
    assert result.output_dir.endswith("model.rstf")
    assert len(result.subgraphs) == 2 and result["nodes_total"] == 9
    assert result.report["nodes_covered"] == 8
    assert os.path.isfile(result.library)
    text = repr(result)
    assert text.startswith(f"OptimizeResult({result.output_dir}: 2 subgraphs")
    assert "nodes covered 8/9" in text

    x = np.random.RandomState(0).standard_normal((1, 12, 12, 3)).astype(np.float32)
    got = result.load()(input=x)["probs"]
    ref = run_tf(graph_def, {"input": x}, ["probs:0"])[0]
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-6)

    check = rstf.compare(graph_def, result, reps=1)
    assert check["passed"] and check["outputs"][0]["name"] == "probs:0"
    per = rstf.compare(graph_def, result.output_dir, per_subgraph=True)
    assert per["passed"] and len(per["subgraphs"]) == 2


@pytest.mark.tfbuild
def test_optimize_path_with_options(graph_def, tmp_path):
    path = save_graph_def(graph_def, str(tmp_path))
    out = tmp_path / "o.rstf"
    result = rstf.optimize(path, out, max_ops=2, optimizer="none", jobs=1, verbosity=0,
                           model_name="small", input_shapes={"input": [1, 12, 12, 3]})
    assert result.output_dir == str(out)
    assert len(result.subgraphs) > 2 and all(s["optimizer"] == "none"
                                             for s in result.subgraphs)
    assert result.report["options"]["max_ops"] == 2
    assert os.path.isdir(out / "serving" / "small" / "1")
    assert result.report["pinned_shapes"] == {"input": [1, 12, 12, 3]}


def test_inspect_graph_def(graph_def):
    r = rstf.inspect(graph_def, max_ops=2)
    assert r["nodes_supported"] == 8 and len(r["partitions"]) > 2


def test_errors(graph_def, tmp_path):
    with pytest.raises(RstfError, match="expected a path or a tf.compat.v1.GraphDef"):
        rstf.optimize(42)
    with pytest.raises(RstfError, match="no such file"):
        rstf.optimize(str(tmp_path / "missing.pb"), str(tmp_path / "o"))
    with pytest.raises(RstfError, match="--jobs must be at least 1"):
        rstf.optimize(graph_def, str(tmp_path / "o"), jobs=0)
    with pytest.raises(RstfError, match="not an rstf output folder"):
        rstf.compare(graph_def, str(tmp_path))
    with pytest.raises(RstfError, match="--reps"):
        rstf.compare(graph_def, str(tmp_path), reps=0)
    assert not os.path.exists(tmp_path / "o")
