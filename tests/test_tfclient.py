"""The TensorFlow C-API client that times graphs for `rstf compare` and `rstf bench`."""
import json
import os
import time

import numpy as np
import pytest

from rstf.evaluation import runner
from rstf.errors import RstfError
from rstf.serving.tfclient import run_graph, run_graphs
from rstf.frontend.tfutil import tf


def _graph(path):
    """x (float32 [2,3]), k (int32 [3]) and a scalar c -> y = x * k * c (float32),
    s = sum(k) (int64), b = x > 0 (bool)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (2, 3), name="x")
        k = tf.compat.v1.placeholder(tf.int32, (3,), name="k")
        c = tf.compat.v1.placeholder(tf.float32, (), name="c")
        tf.multiply(x * c, tf.cast(k, tf.float32), name="y")
        tf.reduce_sum(tf.cast(k, tf.int64), name="s")
        tf.greater(x, 0.0, name="b")
        tf.identity(c, name="c_out")
    with open(path, "wb") as f:
        f.write(g.as_graph_def().SerializeToString())


def _feeds():
    return {"x:0": np.array([[1.5, -2, 3], [0, 4, -5]], np.float32),
            "k:0": np.array([2, 3, 7], np.int32), "c:0": np.float32(0.5)}


def test_client_runs_the_graph_and_times_every_call(tmp_path):
    pb = str(tmp_path / "g.pb")
    _graph(pb)
    feeds = _feeds()
    outs, times = run_graph(pb, [], feeds, ["y:0", "s:0", "b:0", "c_out:0", "k:0", "y:0"],
                            reps=4)
    x, k = feeds["x:0"], feeds["k:0"]
    np.testing.assert_array_equal(outs[0], x * 0.5 * k.astype(np.float32))
    assert outs[0].dtype == np.float32 and outs[0].shape == (2, 3)
    assert outs[1].dtype == np.int64 and outs[1].shape == () and outs[1] == 12
    np.testing.assert_array_equal(outs[2], x > 0)
    assert outs[3].shape == () and outs[3] == np.float32(0.5)
    np.testing.assert_array_equal(outs[4], k)  # fed and fetched: the fed value
    np.testing.assert_array_equal(outs[5], outs[0])  # fetched twice
    assert len(times) == 4 and all(t > 0 for t in times)


def test_client_times_several_graphs_interleaved(tmp_path):
    """`also` graphs: the same feeds and fetches, each graph called once a round; the first
    graph's outputs come back, and every graph's times. A graph without a fetched node is
    refused in one line."""
    a, b = str(tmp_path / "a.pb"), str(tmp_path / "b.pb")
    _graph(a)
    _graph(b)
    feeds = _feeds()
    outs, times = run_graphs([a, b, a], [], feeds, ["y:0", "s:0"], reps=5)
    np.testing.assert_array_equal(outs[0], feeds["x:0"] * 0.5 * feeds["k:0"].astype(np.float32))
    assert [len(t) for t in times] == [5, 5, 5] and all(x > 0 for t in times for x in t)
    _, times = run_graphs([a, b], [], feeds, ["y:0"], reps=4, block=3)  # 3 calls a round
    assert [len(t) for t in times] == [12, 12] and all(x > 0 for t in times for x in t)
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.placeholder(tf.float32, (2, 3), name="x")
    other = str(tmp_path / "other.pb")
    with open(other, "wb") as f:
        f.write(g.as_graph_def().SerializeToString())
    with pytest.raises(RstfError, match="no such node in the graph: k"):
        run_graphs([a, other], [], feeds, ["y:0"], reps=1)


def test_client_errors_are_one_line(tmp_path):
    pb = str(tmp_path / "g.pb")
    _graph(pb)
    with pytest.raises(RstfError, match="no such node in the graph: nope:0"):
        run_graph(pb, [], _feeds(), ["nope:0"], reps=1)
    with pytest.raises(RstfError, match="no such output of its node: y:3"):
        run_graph(pb, [], _feeds(), ["y:3"], reps=1)
    bad = {**_feeds(), "k:0": np.array([2.0, 3.0, 7.0], np.float32)}  # k is int32
    with pytest.raises(RstfError, match="running the graph: .*(int32|float)"):
        run_graph(pb, [], bad, ["y:0"], reps=1)
    with pytest.raises(RstfError, match="line break"):
        run_graph(pb, [], _feeds(), ["y:0\nlib /tmp/x.so"], reps=1)
    (tmp_path / "junk.pb").write_bytes(b"not a graph")
    with pytest.raises(RstfError, match="importing the graph"):
        run_graph(str(tmp_path / "junk.pb"), [], _feeds(), ["y:0"], reps=1)


def test_runner_clients_agree(tmp_path, capsys):
    """`python -m rstf.evaluation.runner` through the C client (the default) and through a Python
    Session save the same outputs; the JSON line says which client timed the calls."""
    pb = str(tmp_path / "g.pb")
    _graph(pb)
    inputs = str(tmp_path / "in.npz")
    np.savez(inputs, **_feeds())
    saved = {}
    for client in ("c", "python"):
        save = str(tmp_path / f"{client}.npz")
        argv = ["--graph", pb, "--inputs", inputs, "--fetch", "y:0", "--fetch", "s:0",
                "--reps", "3", "--save", save, "--client", client]
        assert runner.main(argv) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert len(result["times_ms"]) == 3 and result["latency_ms"] > 0
        assert result["client"] == {"c": "TF C API", "python": "Python Session"}[client]
        saved[client] = np.load(save)
    for key in ("out0", "out1"):
        np.testing.assert_array_equal(saved["c"][key], saved["python"][key])
        assert saved["c"][key].dtype == saved["python"][key].dtype
    assert os.path.exists(inputs)


def test_runner_falls_back_to_python_without_gcc(tmp_path, monkeypatch, capsys):
    """No client built and no gcc to build it: the Python Session times the graph, and the
    result says so instead of failing."""
    pb = str(tmp_path / "g.pb")
    _graph(pb)
    inputs = str(tmp_path / "in.npz")
    np.savez(inputs, **_feeds())
    monkeypatch.setenv("RSTF_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runner.main(["--graph", pb, "--inputs", inputs, "--fetch", "s:0", "--reps", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["client"] == "Python Session (no TF C API client: gcc is not installed)"


def test_client_warms_up_for_the_time_asked_before_timing(tmp_path):
    """`warmup_s`: untimed calls for that long after the first call, before the timed ones
    (none where nothing is timed). Seen from outside as the run's wall time: 3 s of
    warm-up against none, in one process each."""
    pb = str(tmp_path / "g.pb")
    _graph(pb)

    def wall(**kw):
        t0 = time.perf_counter()
        outs, times = run_graph(pb, [], _feeds(), ["s:0"], **kw)
        assert outs[0] == 12
        return time.perf_counter() - t0, times

    from rstf.serving.tfclient import client_path

    client_path()  # built (once, cached) before anything is timed
    cold, times = wall(reps=3)
    warm, warm_times = wall(reps=3, warmup_s=3.0)
    assert len(times) == len(warm_times) == 3
    assert warm - cold > 2.0, (warm, cold)  # (a second for the start-ups' own spread)
    untimed, none = wall(reps=0, warmup_s=3.0)
    assert none == [] and untimed < warm - 2.0, (untimed, warm)


def test_timed_warms_up_only_when_it_times(monkeypatch):
    """`timing.timed`: the first call's outputs are kept; then, with reps > 0, untimed
    calls for WARMUP_S seconds (at least one), then exactly `reps` timed calls."""
    from rstf.evaluation import timing

    monkeypatch.setattr(timing, "WARMUP_S", 0.05)
    calls = []

    def call():
        calls.append(len(calls))
        time.sleep(0.001)
        return [np.float32(len(calls))]

    t0 = time.perf_counter()
    res = timing.timed(call, 4, None)
    assert len(res["times_ms"]) == 4 and res["warmup_s"] == 0.05
    n = res["warmup_calls"]
    assert n >= 1 and len(calls) == 1 + n + 4
    assert 0.05 <= time.perf_counter() - t0 < 0.25
    calls.clear()
    res = timing.timed(call, 0, None)
    assert calls == [0] and res["times_ms"] == [] and "warmup_calls" not in res
