"""Differential fuzzing: random graphs of supported ops, optimized, compared with TF.

CI runs a bounded, derandomized campaign (RSTF_FUZZ_EXAMPLES, default 6: each example builds
an op library, ~20 s); `scripts/fuzz.py` runs longer ones in parallel and saves what fails
under tests/data/fuzz_regressions/ (a graph and a sidecar with its options), which
`test_fuzz_regressions` replays forever after.
"""
import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rstf.evaluation.fuzz import graphs, random_graph
from rstf.evaluation.fuzzcase import (Options, available_configs, check, check_kernels,
                                      load_regression, replay)

EXAMPLES = int(os.environ.get("RSTF_FUZZ_EXAMPLES", "6"))
QUICK_EXAMPLES = int(os.environ.get("RSTF_FUZZ_QUICK_EXAMPLES", "30"))  # ~1 s each
ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
REGRESSIONS = os.path.join(os.path.dirname(__file__), "data", "fuzz_regressions")
SCRIPT = os.path.join(ROOT, "scripts", "fuzz.py")


@pytest.mark.tfbuild
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(g=graphs(), max_ops=st.sampled_from([2, 3, 400]),
       config=st.sampled_from(available_configs()))
def test_random_graphs_match_tensorflow(tmp_path, g, max_ops, config):
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:  # one function-scoped tmp_path
        v = check(g.graph_def, g.feeds, Options.of(config, max_ops), d)
    assert v.passed, (g.recipe, v.why)


@settings(max_examples=QUICK_EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(g=graphs(), max_ops=st.sampled_from([2, 3, 400]),
       config=st.sampled_from(available_configs()))
def test_random_graphs_kernels_match_tensorflow(g, max_ops, config):
    """The campaign's quick check: every subgraph's C alone, on TF's intermediate tensors."""
    v = check_kernels(g.graph_def, g.feeds, Options.of(config, max_ops))
    assert v.passed, (g.recipe, v.why)


def _conv_relu_graph():
    from rstf.frontend.tfutil import tf

    rng = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 4], name="x")
        w = tf.constant(rng.standard_normal((3, 3, 4, 8)).astype(np.float32))
        tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"), name="out")
    return g.as_graph_def(), {"x": rng.random_sample((1, 8, 8, 4)).astype(np.float32)}


@pytest.mark.parametrize("config", ["poly", "none"])
def test_quick_check_finds_a_wrong_kernel(monkeypatch, config):
    from rstf.opgen import elementwise

    gd, feeds = _conv_relu_graph()
    assert check_kernels(gd, feeds, Options.of(config, 400)).passed
    monkeypatch.setattr(elementwise.Relu, "expr", "{0}")  # a Relu that forgets to clamp
    v = check_kernels(gd, feeds, Options.of(config, 400))
    assert not v.passed and "subgraph 0's out:0 differs from TensorFlow" in v.why, v.why
    assert v.max_rel_err > 0.1


@pytest.mark.tfbuild
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REGRESSIONS, "*.pbtxt"))))
def test_fuzz_regressions(tmp_path, path):
    v = replay(path, str(tmp_path))
    assert v.passed, v.why


@pytest.mark.parametrize("path", [p for p in sorted(glob.glob(os.path.join(REGRESSIONS,
                                                                       "*.pbtxt")))
                                  if load_regression(p)[1] is not None])
def test_fuzz_regressions_quick_check(path):
    """The same graphs through the quick check, which compiles each subgraph's C as
    `--optimizer none` ships it: #7497 (tests/data/fuzz_regressions/3ae49e197e5b-*) was
    wrong there, from gcc 12 at -O3 once it inlined the op functions' `restrict`
    parameters into an entry whose temporaries share workspace bytes."""
    gd, feeds, options = load_regression(path)
    v = check_kernels(gd, feeds, options)
    assert v.passed, v.why


def _planned_winograd(gd) -> list[str]:
    """The convs rstf's polyhedral pass runs as Winograd (report.json's poly.winograd),
    found without building an op library."""
    from rstf.cgen.codegen import generate_subgraph
    from rstf.pipeline import load_for_codegen, partition, select
    from rstf.poly import optimize_source

    quiet = lambda m: None  # noqa: E731
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "g.pb")
        with open(model, "wb") as f:
            f.write(gd.SerializeToString())
        graph, _, _, keep = load_for_codegen(model, None, None, True, quiet)
    parts = [p for split in partition(select(graph, keep), 400, quiet) for p in split]
    planned = []
    for i, nodes in enumerate(parts):
        sg = generate_subgraph(graph, nodes, i)
        consts = frozenset(s.cname for s in sg.inputs if graph.is_const(s.tensor))
        _, info = optimize_source(sg.source, sg.entry, constants=consts, winograd=True)
        planned += [f"{w['node']} {w['algorithm']}" for w in info.get("winograd", [])]
    return planned


def test_generator_draws_winograd_convolutions():
    """A fair share of the graphs hold a conv winograd.plan accepts, of each filter shape;
    a seed gives the same graph and inputs every time, the inputs in [0, 1)."""
    planned = {seed: _planned_winograd(random_graph(seed).graph_def) for seed in range(40)}
    assert sum(bool(p) for p in planned.values()) >= 8, planned  # about 30% (200 seeds)
    kernels = {w.split("F(")[1].split(",")[1].rstrip(")") for p in planned.values() for w in p}
    assert kernels == {"3x3", "5x5", "1x7", "7x1"}, kernels
    a, b = random_graph(7), random_graph(7)
    assert a.graph_def.SerializeToString(deterministic=True) == \
        b.graph_def.SerializeToString(deterministic=True)
    assert a.recipe == b.recipe and a.feeds.keys() == b.feeds.keys() == {"input"}
    assert np.array_equal(a.feeds["input"], b.feeds["input"])
    assert 0 <= a.feeds["input"].min() and a.feeds["input"].max() < 1


def test_rstf_imports_without_hypothesis():
    code = ("import sys; sys.modules['hypothesis'] = None\n"  # import hypothesis now fails
            "import rstf.evaluation.fuzz, rstf.evaluation.fuzzcase\n"
            "print(rstf.evaluation.fuzz.random_graph(1).recipe[0])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0 and proc.stdout.startswith("input ["), proc.stderr


def _campaign(*args):
    return subprocess.run([sys.executable, SCRIPT, "--cache-dir", os.environ["RSTF_CACHE_DIR"],
                           *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.tfbuild
def test_campaign_runs_in_parallel_and_saves_nothing_when_all_pass(tmp_path):
    save = tmp_path / "regressions"
    proc = _campaign("--examples", "2", "--jobs", "2", "--save-dir", str(save))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("fuzz: 2 examples, 0 failures,"), proc.stdout
    # Example 0 runs end to end (--full-every 50), example 1 the quick check, each under
    # the config the campaign's seed draws for it (seed 0: poly-nowinograd, then none).
    import re
    per_config = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(
        r"([a-z-]+) (\d+) \((\d+) end to end, 0 failed", summary)}
    assert "examples/min" in summary and set(per_config) == set(available_configs()), summary
    assert sum(n for n, _ in per_config.values()) == 2, summary
    assert sum(e for _, e in per_config.values()) == 1, summary
    assert not save.exists()


@pytest.mark.tfbuild
def test_campaign_saves_a_failure_with_its_options_and_the_replay_honours_them(tmp_path):
    # A negative tolerance fails every comparison: the failure path, on a real example.
    save = tmp_path / "regressions"
    proc = _campaign("--examples", "1", "--jobs", "1", "--rtol", "-1", "--seed", "5",
                     "--optimizers", "poly-nowinograd", "--save-dir", str(save))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "fuzz: 1 examples, 1 failures," in proc.stdout
    (path,) = glob.glob(str(save / "*.pbtxt"))
    meta = json.load(open(path.removesuffix(".pbtxt") + ".json"))
    assert (meta["optimizer"], meta["winograd"], meta["rtol"]) == ("poly", False, -1)
    assert path.endswith(f"-maxops{meta['max_ops']}.pbtxt") and meta["recipe"]
    gd, feeds, options = load_regression(path)
    assert options == Options(meta["max_ops"], "poly", False, -1.0)
    assert 0 <= feeds["input"].min() and feeds["input"].max() < 1
    v = replay(path, str(tmp_path))
    assert not v.passed
    assert {k: v.report["options"][k] for k in ("optimizer", "winograd", "max_ops")} == \
        {"optimizer": "poly", "winograd": False, "max_ops": meta["max_ops"]}
    # At compare's tolerance the same graph, inputs and options pass (the library is cached).
    assert check(gd, feeds, dataclasses.replace(options, rtol=1e-4), str(tmp_path)).passed


@pytest.mark.parametrize("seed, config, max_ops", [(1271985881, "poly-nowinograd", 2),
                                                    (1368311239, "none", 400)])
def test_a_graph_stock_tensorflow_cannot_run_is_no_rstf_failure(seed, config, max_ops):
    """Both graph seeds draw conv -> BiasAdd -> add of a [1, H, 1, 1] row: a valid graph
    (TF with Grappler off runs it) on which TF 2.21's Grappler fails. The quick check says
    TensorFlowFails, which a campaign counts as skipped, not as rstf's failure. The second
    (#6401 of campaign seed 12) has a Sin after it, which leaves the loaded graph's run,
    fetching every subgraph's inputs, failing first: the check used to report that as
    rstf's failure, before it ran the model itself."""
    from rstf.evaluation.fuzzcase import TensorFlowFails

    g = random_graph(seed)
    with pytest.raises(TensorFlowFails, match="biases"):
        check_kernels(g.graph_def, g.feeds, Options.of(config, max_ops))
