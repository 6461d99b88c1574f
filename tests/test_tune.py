"""`rstf tune` (rstf/tune/): each contraction's candidate tiles measured into this
machine's profile, resumed rather than measured twice, and read back by `rstf optimize
--tuning`; a bad profile or budget is one line and a non-zero exit."""
import json
import os

import numpy as np
import pytest
from test_cli_inputs import assert_one_line_error, rstf

from harness import make_graph_def, save_graph_def, tf
from rstf import api
from rstf.poly.tiles import TileChoice, candidates
from rstf.tuner.profile import (FORMAT, MARGIN, Profile, default_path, needed, spread,
                                tuning_dir)
from rstf.tuner.search import parse_budget

rng = np.random.RandomState(11)


def two_contractions():
    """A 3x3 conv, a 1x1 conv and a dense layer: three contractions of different shapes."""
    w3 = rng.standard_normal((3, 3, 32, 48)).astype(np.float32) * 0.1
    w1 = rng.standard_normal((1, 1, 48, 64)).astype(np.float32) * 0.1
    m = rng.standard_normal((64, 40)).astype(np.float32) * 0.1

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 12, 12, 32], name="x")
        y = tf.nn.relu(tf.nn.conv2d(x, w3, 1, "SAME"))
        y = tf.nn.relu(tf.nn.conv2d(y, w1, 1, "SAME"))
        tf.matmul(tf.reduce_mean(y, [1, 2]), m, name="out")
    return build


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """(model path, profile path, first run's stdout) after `rstf tune --probes 2
    --max-probes 3`: two probes, their confirmation, then one more with the budget left."""
    d = tmp_path_factory.mktemp("tune")
    pb = save_graph_def(make_graph_def(two_contractions()), str(d))
    prof = str(d / "machine.json")
    r = rstf("tune", pb, "--profile", prof, "--probes", "2", "--max-probes", "3", "--reps", "3")
    assert r.returncode == 0, r.stderr
    return pb, prof, r.stdout


def test_tune_writes_a_profile_of_measured_candidates(tuned):
    _, path, out = tuned
    data = json.load(open(path))
    assert data["format"] == FORMAT and data["version"] == 1
    assert data["machine"]["target"] and data["machine"]["cpu"] and data["machine"]["threads"]
    entries = data["contractions"]
    assert len(entries) >= 2
    for key, e in entries.items():
        assert "rows=" in key and "threads=" in key
        assert e["ms"][e["model"]], e  # the model's own tile is always measured
        assert len(e["ms"]) >= 2, e  # and at least one other candidate
        assert all(ms > 0 for v in e["ms"].values() for ms in v)
        assert e["nodes"]
        # Every figure has its ratio to the model's tile timed beside it; the model's own
        # probe is 1.
        assert {k: len(v) for k, v in e["ms"].items()} == {
            k: len(v) for k, v in e["vs_model"].items()}
        assert e["vs_model"][e["model"]][0] == 1.0
        # The choice is the least median of the confirmed ratios (the probe that put a
        # candidate forward left out; of the candidates timed again where any was), where
        # it beats the model's by the margin or, on a noisy machine, by twice the standard
        # error the run's noise gives.
        others = {k: v for k, v in e["vs_model"].items() if k != e["model"]}
        most = max(map(len, others.values()))
        med = {k: float(np.median(v[1:] if len(v) > 1 else v))
               for k, v in others.items() if len(v) >= min(most, 2)}
        best = min(med, key=med.get)
        n = len(others[best])
        need = MARGIN if most == 1 else needed(e["noise"], n - 1)
        assert e["choice"] == (best if med[best] < 1 - need else e["model"])
        assert 0 <= e["noise"] < 1
    (run,) = data["runs"].values()
    assert run["done"] == [0, 1, 2] and sorted(run["keys"]) == sorted(entries)
    # The model's own probe times its tiles against themselves: a sample of the noise a
    # key, and more from later pairings that leave a key's tile as the model's.
    assert len(run["noise"]) >= len(entries)
    assert "noise: a timed ratio moved by" in out
    assert "3 probes (2 first, up to 3)" in out and path in out
    assert "2 probes of 3 runs a side (or 8 s a pairing)" in out
    assert "probe 3 (past the first 2)" in out


def test_tune_resumes_rather_than_measuring_again(tuned):
    pb, path, _ = tuned
    before = json.load(open(path))["contractions"]
    r = rstf("tune", pb, "--profile", path, "--probes", "2", "--max-probes", "3", "--reps", "3",
             "--json")
    assert r.returncode == 0, r.stderr
    assert json.load(open(path))["contractions"] == before
    summary = json.loads(r.stdout)
    assert summary["probes_done"] == 3 and len(summary["contractions"]) == len(before)


def test_optimize_takes_the_profiles_choice_and_matches_tf(tuned, tmp_path):
    """A profile that names another candidate for every contraction: optimize builds those
    tiles, says so in report.json, and the graph still matches TF."""
    pb, path, _ = tuned
    prof = Profile.load(path)
    for key, e in prof.contractions.items():
        model = TileChoice.parse(e["model"])
        e["choice"] = next(c for c in sorted(TileChoice.parse(x) for x in e["ms"])
                           if c != model).label
    forced = str(tmp_path / "forced.json")
    prof.path = forced
    prof.save()
    out = str(tmp_path / "out.rstf")
    res = api.optimize(pb, out, tuning=forced, jobs=1, verbosity=0)
    t = res.report["tuning"]
    assert t["profile"] == forced and t["kernels_from_profile"] >= len(prof.contractions)
    chosen = {x["key"]: x["choice"] for sg in res.report["subgraphs"]
              for x in sg["poly"]["tiled"] if x.get("chosen_by") == "profile"}
    assert chosen == {k: e["choice"] for k, e in prof.contractions.items()}
    check = api.compare(pb, out, reps=1)
    assert check["passed"], check["outputs"]
    # --tuning off: the model's tiles alone, and no key asked.
    res = api.optimize(pb, str(tmp_path / "off.rstf"), tuning="off", jobs=1, verbosity=0)
    assert res.report["tuning"] == {"profile": None, "kernels_from_profile": 0,
                                    "kernels": res.report["tuning"]["kernels"]}
    assert all("key" not in x for sg in res.report["subgraphs"] for x in sg["poly"]["tiled"])


def test_auto_finds_this_machines_profile(tuned, tmp_path, monkeypatch):
    pb, path, _ = tuned
    monkeypatch.setenv("RSTF_CACHE_DIR", str(tmp_path / "cache"))
    prof = Profile.load(path)
    target = prof.machine["target"]
    assert default_path(target).startswith(tuning_dir())
    res = api.optimize(pb, str(tmp_path / "a.rstf"), jobs=1, verbosity=0)
    assert res.report["tuning"]["profile"] is None  # none for this machine yet
    prof.path = default_path(target)
    prof.save()
    res = api.optimize(pb, str(tmp_path / "b.rstf"), jobs=1, verbosity=0)
    assert res.report["tuning"]["profile"] == prof.path


def test_candidates_the_tuner_probes_are_the_models_ranking(tuned):
    _, path, _ = tuned
    prof = Profile.load(path)
    for key, e in prof.contractions.items():
        assert set(e["ms"]) <= {c.label for c in _candidates_of(key, e, prof)}


def _candidates_of(key, e, prof):
    from rstf.poly.target import TARGETS
    from rstf.poly.tiles import Extents
    f = dict(x.split("=") for x in key.split() if "=" in x)
    loops = tuple(x for x in key.split() if "=" not in x)
    ext = Extents(int(f["rows"]), int(f["cols"]), int(f["outer"]), int(f["depth"]),
                  int(f["call"]), loops)
    target = TARGETS[prof.machine["target"]]
    return candidates(TileChoice.parse(e["model"]), ext, target, 3)


@pytest.mark.parametrize("text,secs", [("600", 600), ("90s", 90), ("10m", 600), ("1h", 3600),
                                        ("2.5m", 150)])
def test_budget_parses(text, secs):
    assert parse_budget(text) == secs


def test_bad_budget_and_profiles_are_one_line_errors(tuned, tmp_path):
    pb, path, _ = tuned
    assert_one_line_error(rstf("tune", pb, "--budget", "soon"), "--budget")
    assert_one_line_error(rstf("tune", pb, "--budget=-1m"), "--budget")
    assert_one_line_error(rstf("tune", pb, "--pair-seconds=-1"), "--pair-seconds")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert_one_line_error(rstf("optimize", pb, "-o", str(tmp_path / "o1"), "--tuning",
                               str(junk)), "not readable JSON")
    assert_one_line_error(rstf("optimize", pb, "-o", str(tmp_path / "o2"), "--tuning",
                               str(tmp_path / "missing.json")), "no such file")
    other = json.load(open(path))
    other["machine"]["target"] = "sse" if other["machine"]["target"] != "sse" else "avx2"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(other))
    assert_one_line_error(rstf("optimize", pb, "-o", str(tmp_path / "o3"), "--tuning",
                               str(wrong)), "measured for vector target")
    bad = json.load(open(path))
    next(iter(bad["contractions"].values()))["choice"] = "lots"
    badf = tmp_path / "bad.json"
    badf.write_text(json.dumps(bad))
    assert_one_line_error(rstf("optimize", pb, "-o", str(tmp_path / "o4"), "--tuning",
                               str(badf)), "no valid 'choice'")
    # Nothing was written for the refused runs.
    assert not any(os.path.exists(tmp_path / f"o{i}") for i in range(1, 5))


def test_choice_is_made_on_the_most_repeated_ratios(tmp_path):
    prof = Profile(str(tmp_path / "p.json"), {"target": "avx512"})
    m, a, b = TileChoice(6, 4, False), TileChoice(5, 4, False), TileChoice(8, 3, False)
    prof.record("k", m, 1.0, 1.0, ["n"], model=m)
    prof.record("k", a, 0.90, 0.90, ["n"])
    prof.record("k", b, 0.95, 0.95, ["n"])
    assert prof.best("k") == a.label
    # Its confirmation finds a no faster than the model; b, timed once, does not take over.
    prof.record("k", a, 1.0, 1.0, ["n"])
    prof.record("k", a, 1.01, 1.01, ["n"])
    assert prof.best("k") == m.label
    # Within the margin: the model's.
    prof.record("k2", m, 1.0, 1.0, ["n"], model=m)
    prof.record("k2", a, 1.0, 1 - MARGIN / 2, ["n"])
    assert prof.best("k2") == m.label
    with pytest.raises(ValueError):
        prof.record("k3", a, 1.0, 1.0, ["n"])  # no model's choice for a new key
    # The probe that put a candidate forward is not part of its evidence: it won among
    # several noisy ratios. Confirmed 4% faster twice, it is taken on a quiet machine ...
    prof.record("k4", m, 1.0, 1.0, ["n"], model=m)
    for r in (0.80, 0.96, 0.96):
        prof.record("k4", a, r, r, ["n"])
    assert prof.evidence("k4", a.label) == [0.96, 0.96]
    assert prof.best("k4") == a.label
    # ... and not where a timed ratio moves by 5% with no change: two ratios' median then
    # has to beat the model's by 2 x 5% / sqrt(2), about 7%.
    prof.note_noise(["k4"], 0.05)
    assert prof.contractions["k4"]["noise"] == 0.05 and prof.best("k4") == m.label
    assert prof.contractions["k4"]["choice"] == m.label
    prof.record("k4", a, 0.90, 0.90, ["n"])
    prof.record("k4", a, 0.91, 0.91, ["n"])  # median of the four confirmed: 0.935
    assert prof.best("k4") == a.label
    prof.save()
    assert Profile.load(prof.path).contractions == prof.contractions


def test_noise_is_a_robust_spread_and_raises_what_a_choice_needs():
    # A standard deviation from the median absolute deviation: one burst does not move it.
    quiet = [0.01, -0.01, 0.0, 0.01, -0.01, 0.0, 0.005, -0.005]
    assert 0.005 < spread(quiet) < 0.02
    assert spread(quiet + [0.9]) < 0.02
    assert spread([0.3, -0.3]) == 0.0  # too few samples to say
    assert needed(0.0, 2) == MARGIN and needed(0.005, 2) == MARGIN
    assert needed(0.05, 2) == pytest.approx(2 * 0.05 / 2 ** 0.5)
    assert needed(0.05, 8) < needed(0.05, 2)  # more rounds, a smaller error


def test_a_spent_budget_stops_before_the_first_probe_and_says_so(tuned, tmp_path):
    import rstf
    pb, _, _ = tuned
    path = str(tmp_path / "p.json")
    r = rstf.tune(pb, profile=path, budget=0.001)
    assert r["stopped"] == "budget" and r["probes_done"] == 0 and r["contractions"] == []
    assert json.load(open(path))["contractions"] == {}


def test_a_candidate_whose_c_does_not_compile_is_skipped_not_fatal(tuned, tmp_path,
                                                                    monkeypatch):
    """A probe's candidate tiles that the C compiler refuses cost that probe's measurement
    of the subgraph, logged, not the tuning run: the model's own tiles stay measured."""
    import rstf
    from rstf.errors import RstfError
    from rstf.evaluation import pairbench

    pb, _, _ = tuned
    real, built = pairbench.compile_unit, []

    def only_the_models(*args):
        built.append(args)
        if len(built) > 1:  # the first build is the model's own tiles
            raise RstfError("compiling p.c failed: p.c:1:1: error: 'KS3_pack' undeclared")
        return real(*args)

    monkeypatch.setattr(pairbench, "compile_unit", only_the_models)
    said = []
    path = str(tmp_path / "p.json")
    r = rstf.tune(pb, profile=path, probes=2, max_probes=2, reps=2, confirm=0,
                  log=said.append)
    assert r["stopped"] is None and r["probes_done"] == 2, r
    assert any("not measured in this probe" in s and "KS3_pack" in s for s in said), said
    entries = json.load(open(path))["contractions"]
    assert entries and all(list(e["ms"]) == [e["model"]] and e["choice"] == e["model"]
                           for e in entries.values())


def test_a_learned_probe_order_is_recorded_and_kept_on_resume(tuned, tmp_path, monkeypatch):
    """With a learned order the probes run its ranking's first candidates, the run records
    the order and the runs it was trained on, and a resumed run (`--probe-order auto`)
    asks for the same runs again; `learned` without one is a one-line error."""
    import rstf
    from rstf.errors import RstfError
    from rstf.poly.target import TARGETS
    from rstf.poly.tiles import Extents, TileTable
    from rstf.tuner import learned
    if not learned.available():
        pytest.skip("scikit-learn (the tune extra)")
    from test_tuner_learned import synthetic

    trained = learned.probe_order(synthetic(tmp_path / "syn"), TARGETS["avx512"], exclude="b")
    asked = []

    def fake(prof, t, exclude=None, runs=None):
        asked.append(runs)
        return learned.ProbeOrder(trained.reg, ["other"], 42)

    monkeypatch.setattr(learned, "probe_order", fake)
    pb, _, _ = tuned
    path = str(tmp_path / "p.json")
    r = rstf.tune(pb, profile=path, probes=2, max_probes=2, reps=2, confirm=0,
                  probe_order="learned")
    assert r["probe_order"] == "learned" and r["probes_done"] == 2, r
    prof = Profile.load(path)
    (run,) = prof.runs.values()
    assert run["order"] == "learned" and run["order_runs"] == ["other"]
    target = TARGETS[prof.machine["target"]]
    for key, e in prof.contractions.items():
        f = dict(x.split("=") for x in key.split() if "=" in x)
        ext = Extents(int(f["rows"]), int(f["cols"]), int(f["outer"]), int(f["depth"]),
                      int(f["call"]), tuple(x for x in key.split() if "=" not in x))
        probes = TileTable(limit=2, order=learned.ProbeOrder(trained.reg, [], 0)).probes(
            TileChoice.parse(e["model"]), ext, target)
        assert set(e["ms"]) <= {c.label for c in probes}
    r = rstf.tune(pb, profile=path, probes=2, max_probes=2, reps=2, confirm=0)  # resumed
    assert r["probe_order"] == "learned" and asked == [None, ["other"]]
    monkeypatch.setattr(learned, "probe_order", lambda *a, **k: None)
    with pytest.raises(RstfError, match="--probe-order learned needs"):
        rstf.tune(pb, profile=str(tmp_path / "q.json"), probes=2, reps=2,
                  probe_order="learned")
    assert rstf.tune(pb, profile=str(tmp_path / "q.json"), budget=0.001)["probe_order"] == \
        "analytic"


def test_a_runner_up_is_confirmed_where_the_winner_fails(tmp_path, monkeypatch):
    """After the probes' winner of a contraction loses its confirmation rounds, the
    budget left times the runner-up of its probes the same way (`Profile.contender`),
    which is then taken on its own confirmation; a candidate within the margin in its
    probe is never put forward."""
    from rstf.poly.target import TARGETS
    from rstf.tuner import search
    prof = Profile(str(tmp_path / "p.json"), {"target": "avx512"})
    m, a, b, c = (TileChoice(6, 4, False), TileChoice(5, 4, False), TileChoice(8, 3, False),
                  TileChoice(4, 4, False))
    prof.record("k", m, 1.0, 1.0, ["n"], model=m)
    for choice, probe in ((a, 0.90), (b, 0.95), (c, 0.99)):
        prof.record("k", choice, probe, probe, ["n"])
    # a is the choice, put forward by its probe alone: the first to be timed again
    assert prof.best("k") == a.label and prof.contender("k") == a.label
    confirmed = {a.label: 1.01, b.label: 0.95}
    tables = []

    def build(codes, consts, probe, jobs, work, log=None):
        tables.append(dict(probe.tiles.measured))
        return probe.tiles

    def paired(base, cand, threads, reps, work):
        return {("k", ch, False): (confirmed[ch.label] * 1e-3, confirmed[ch.label], ["n"])
                for _, ch in cand.measured}

    monkeypatch.setattr(search, "_build", build)
    monkeypatch.setattr(search, "_paired", paired)
    run = {"keys": ["k"]}
    said = []
    assert search._confirm(prof, run, [], [], TARGETS["avx512"], "the model's", 1, 1, 1,
                           str(tmp_path), 2, 100.0, said.append) is None
    assert tables == [{"k": a}, {"k": b}]
    assert prof.evidence("k", b.label) == [0.95, 0.95] and prof.best("k") == b.label
    assert prof.contender("k") is None and len(prof.contractions["k"]["vs_model"][c.label]) == 1
    assert run["confirmed"] == 2 and any("runners-up" in s for s in said), said


def test_a_runner_up_that_cannot_be_timed_is_not_tried_again(tmp_path, monkeypatch):
    """A contender whose stage measured nothing (its C did not compile) stays a contender
    in the profile; `_confirm` puts it forward once, then stops, not until the budget."""
    from rstf.poly.target import TARGETS
    from rstf.tuner import search
    prof = Profile(str(tmp_path / "p.json"), {"target": "avx512"})
    m, a, b = TileChoice(6, 4, False), TileChoice(5, 4, False), TileChoice(8, 3, False)
    prof.record("k", m, 1.0, 1.0, ["n"], model=m)
    for r in (0.90, 1.01, 1.01):
        prof.record("k", a, r, r, ["n"])
    prof.record("k", b, 0.95, 0.95, ["n"])
    assert prof.best("k") == m.label and prof.contender("k") == b.label
    tables = []
    monkeypatch.setattr(search, "_build", lambda codes, consts, probe, jobs, work, log=None:
                        tables.append(dict(probe.tiles.measured)) or [None])
    monkeypatch.setattr(search, "_paired", lambda *a: {})
    assert search._confirm(prof, {"keys": ["k"]}, [], [], TARGETS["avx512"], "the model's",
                           1, 1, 1, str(tmp_path), 2, 3600.0, lambda _m: None) is None
    assert tables == [{"k": b}]


def test_the_budget_left_probes_further_candidates_until_they_are_spent(tuned, tmp_path,
                                                                        monkeypatch):
    """After the first `probes` and their confirmation, probe v = probes, probes + 1, ..
    runs each kernel's candidate v of the same ranking (limit v + 1), a winner there is
    confirmed as a runner-up is and taken, and the probes stop where no kernel has a
    candidate v (recorded, so that a resumed run does not look again)."""
    import rstf
    from rstf.errors import RstfError
    from rstf.tuner import search
    pb, _, _ = tuned
    cands = [TileChoice(6, 4, False), TileChoice(5, 4, False), TileChoice(8, 3, False),
             TileChoice(4, 4, False)]
    probe_ratio = {0: 1.0, 1: 1.03, 2: 1.05, 3: 0.90}
    built = []

    def build(codes, consts, probe, jobs, work, log=None, candidates_only=False):
        t = probe.tiles
        if t.variant is None:
            built.append(("table", dict(t.measured)))
            return ("table", dict(t.measured))
        built.append(("probe", t.variant, t.limit))
        if candidates_only and t.variant >= len(cands):
            return None
        return ("probe", t.variant)

    def paired(base, cand, threads, reps, work):
        assert list(base) == ["probe", 0]  # the model's units, built once
        if cand[0] == "table":
            choice, ratio = cand[1]["k"], 0.92
        else:
            choice, ratio = cands[cand[1]], probe_ratio[cand[1]]
        return {("k", choice, choice == cands[0]): (ratio * 1e-3, ratio, ["n"])}

    monkeypatch.setattr(search, "_build", build)
    monkeypatch.setattr(search, "_paired", paired)
    said, path = [], str(tmp_path / "p.json")
    r = rstf.tune(pb, profile=path, probes=2, reps=2, confirm=2, probe_order="analytic",
                  log=said.append)
    assert r["stopped"] is None and r["probes_done"] == 4 and r["max_probes"] == 24, r
    probes = [b[1:] for b in built if b[0] == "probe"]
    # the model's (built once), the first probes with limit 2, then each with limit v + 1
    assert probes == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)], probes
    # the winner of probe 3 was confirmed (two rounds), nothing else was put forward
    assert [b[1] for b in built if b[0] == "table"] == [{"k": cands[3]}]
    prof = Profile.load(path)
    assert prof.contractions["k"]["choice"] == cands[3].label
    assert prof.evidence("k", cands[3].label) == [0.92, 0.92]
    (run,) = prof.runs.values()
    assert run["done"] == [0, 1, 2, 3] and run["spent"] == 4
    assert any("past the first 2" in s for s in said) and \
        any("no kernel has another candidate" in s for s in said), said
    built.clear()
    rstf.tune(pb, profile=path, probes=2, reps=2, confirm=2, probe_order="analytic")
    assert built == [], built  # nothing probed or put forward again
    assert prof.runs == Profile.load(path).runs
    for bad in (1, 25):
        with pytest.raises(RstfError, match="--max-probes must be between"):
            rstf.tune(pb, profile=path, probes=2, max_probes=bad)


def test_a_later_probe_challenges_a_confirmed_choice(tmp_path, monkeypatch):
    """A choice confirmed in the first stage is challenged by a later probe's candidate
    that beat its confirmed median by the margin in its probe: that one is timed again the
    same way, and the faster of the two on their confirmations is kept. A candidate whose
    probe did not beat the standing choice by the margin is not put forward."""
    from rstf.poly.target import TARGETS
    from rstf.tuner import search
    prof = Profile(str(tmp_path / "p.json"), {"target": "avx512"})
    m, a, b, c = (TileChoice(6, 4, False), TileChoice(5, 4, False), TileChoice(8, 3, False),
                  TileChoice(4, 4, False))
    prof.record("k", m, 1.0, 1.0, ["n"], model=m)
    for r in (0.90, 0.93, 0.93):  # a: put forward by its probe, confirmed at 0.93
        prof.record("k", a, r, r, ["n"])
    assert prof.best("k") == a.label and prof.contender("k") is None
    prof.record("k", c, 0.92, 0.92, ["n"])  # a later probe: not 2% under 0.93
    assert prof.contender("k") is None and prof.best("k") == a.label
    prof.record("k", b, 0.85, 0.85, ["n"])  # and another: 0.85 < 0.93 x 0.98
    assert prof.best("k") == a.label and prof.contender("k") == b.label
    tables = []
    monkeypatch.setattr(search, "_build", lambda codes, consts, probe, jobs, work, log=None:
                        tables.append(dict(probe.tiles.measured)) or probe.tiles)
    monkeypatch.setattr(search, "_paired", lambda base, cand, threads, reps, work: {
        ("k", ch, False): (0.88e-3, 0.88, ["n"]) for _, ch in cand.measured})
    run = {"keys": ["k"], "confirmed": 2}
    assert search._confirm(prof, run, [], [], TARGETS["avx512"], "the model's", 1, 1, 1,
                           str(tmp_path), 2, 100.0, lambda _m: None,
                           runners_only=True) is None
    assert tables == [{"k": b}]  # (one build, timed twice)
    assert prof.evidence("k", b.label) == [0.88, 0.88] and prof.best("k") == b.label
    assert prof.contender("k") is None
    # Confirmed slower than the standing choice, a challenger does not take it.
    prof.record("k2", m, 1.0, 1.0, ["n"], model=m)
    for r in (0.90, 0.93, 0.93):
        prof.record("k2", a, r, r, ["n"])
    for r in (0.85, 0.96, 0.97):
        prof.record("k2", b, r, r, ["n"])
    assert prof.best("k2") == a.label and prof.contender("k2") is None
