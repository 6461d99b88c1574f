"""The learned tile model (rstf/tuner/learned.py): trained on one set of tuning runs, it
ranks the candidates of contractions it never saw; `evaluate` scores it beside the
analytic model's own ranking."""
import math

import numpy as np
import pytest

from rstf.poly.target import AVX512
from rstf.poly.tiles import Extents, TileChoice, candidates
from rstf.tuner import learned
from rstf.tuner.profile import Profile

pytestmark = pytest.mark.skipif(not learned.available(), reason="scikit-learn (the tune extra)")


def synthetic(tmp_path, ratio_of=None, runs: int = 2) -> Profile:
    """A profile of `runs` runs whose measured ratios follow `ratio_of(candidate, i)` (i:
    the contraction's number); by default one rule the analytic model does not know: a
    tile 4 vectors wide is 12% faster than the model's, 3 wide 5%."""
    ratio_of = ratio_of or (lambda c, i: {4: 0.88, 3: 0.95}.get(c.nv, 1.04))
    prof = Profile(str(tmp_path / "p.json"), {"target": AVX512.name, "cpu": "x", "threads": 2})
    names = "abcdefgh"[:runs]
    keys_of = {r: [] for r in names}
    for i, (rows, cols, depth) in enumerate((r, c, d) for r in (14, 28, 49, 56, 128)
                                            for c in (64, 128, 256, 512)
                                            for d in (64, 256, 1024)):
        ext = Extents(rows, cols, 1, depth, depth)
        model = TileChoice(7, 2, False) if cols >= 32 else TileChoice(7, 1, False)
        key = ext.key(AVX512)
        for c in candidates(model, ext, AVX512, 6):
            ratio = 1.0 if c == model else ratio_of(c, i)
            prof.record(key, c, ratio, ratio, ["n"], model=model if c == model else None)
        keys_of[("a" if i % 4 else "b") if runs == 2 else names[i % runs]].append(key)
    prof.runs = {r: {"model": f"/m/{r}.pb", "keys": keys, "done": [0]}
                 for r, keys in keys_of.items()}
    return prof


def test_keys_parse_back_to_their_extents():
    ext = Extents(149, 32, 149, 27, 27, ("kin", "k2"))
    assert learned.parse_key(ext.key(AVX512)) == ext


def test_learned_model_ranks_unseen_contractions_better_than_the_analytic(tmp_path):
    prof = synthetic(tmp_path)
    got = learned.evaluate(prof, AVX512, ["/m/b.pb"])
    assert got["test_contractions"] == len(prof.runs["b"]["keys"])
    assert got["learned"]["top1"] >= 0.8 and got["learned"]["within_5pct"] >= 0.9
    assert got["learned"]["top1"] > got["analytic"]["top1"]
    assert got["learned"]["spearman"] > 0.5


def test_rank_puts_the_predicted_best_first(tmp_path):
    prof = synthetic(tmp_path)
    reg = learned.train(learned.samples(prof, AVX512))
    ext = Extents(100, 384, 1, 512, 512)
    model = TileChoice(7, 2, False)
    ranked = learned.rank(reg, ext, model, AVX512, 6)
    assert ranked[0][1].nv == 4 and ranked[0][0] < 0.95
    assert all(math.isfinite(p) for p, _ in ranked)
    # the model's own choice at its known ratio 1; a candidate before it only where its
    # predicted gain passes the switching margin, the others after it in predicted order
    at = [c for _, c in ranked].index(model)
    assert ranked[at][0] == 1.0
    assert all(p * (1 + learned.DEFAULT_MARGIN) < 1.0 for p, _ in ranked[:at])
    ahead, behind = [p for p, _ in ranked[:at]], [p for p, _ in ranked[at + 1:]]
    assert ahead == sorted(ahead) and behind == sorted(behind)
    # no margin: the predictions alone; an infinite one: the model's choice first
    assert [p for p, _ in learned.rank(reg, ext, model, AVX512, 6, margin=0.0)] == \
        sorted(p for p, _ in learned.rank(reg, ext, model, AVX512, 6, margin=0.0))
    assert learned.rank(reg, ext, model, AVX512, 6, margin=math.inf)[0][1] == model


def test_margin_is_learned_from_the_training_runs(tmp_path):
    """Where the measured gains follow a rule, the held-out runs pick a margin that lets
    the regressor switch; where they are noise around the model's time (candidates 3%
    faster to 8% slower at random: nothing to learn, and the model's choice always within
    5% of the best), the margin keeps the model's own choice, and the learned ranking is
    as good as the analytic one."""
    rule = synthetic(tmp_path / "rule", runs=4)
    runs = {r: info["keys"] for r, info in rule.runs.items()}
    assert math.isfinite(learned.choose_margin(rule, AVX512, runs))
    got = learned.evaluate(rule, AVX512, ["/m/d.pb"])
    assert got["learned"]["top1"] >= 0.8 and got["learned"]["top1"] > got["analytic"]["top1"]
    rng = np.random.RandomState(0)
    noise = {}
    def noisy(c, i):
        return noise.setdefault((c, i), float(rng.uniform(0.97, 1.08)))
    flat = synthetic(tmp_path / "flat", noisy, runs=4)
    runs = {r: info["keys"] for r, info in flat.runs.items()}
    assert learned.choose_margin(flat, AVX512, runs) >= 0.05
    got = learned.evaluate(flat, AVX512, ["/m/d.pb"])
    assert got["learned"]["within_5pct"] == got["analytic"]["within_5pct"] == 1.0
    assert learned.choose_margin(flat, AVX512, {"a": runs["a"]}) == learned.DEFAULT_MARGIN


def test_evaluate_needs_both_sides(tmp_path):
    prof = synthetic(tmp_path)
    with pytest.raises(ValueError):
        learned.evaluate(prof, AVX512, ["/m/a.pb", "/m/b.pb"])


def test_probe_order_puts_the_predicted_fastest_after_the_models_own(tmp_path):
    """The tuner's learned probe order: the model's tile first, then the regressor's
    fastest predicted (the 4-vector tiles the synthetic rule makes fastest) and the
    analytic model's next candidate in turn; trained on the other runs only, and nothing
    where they measured too few contractions."""
    from rstf.poly.tiles import ORDER_POOL, TileTable
    prof = synthetic(tmp_path)
    order = learned.probe_order(prof, AVX512, exclude="b")
    assert order.runs == ["a"] and order.contractions == len(prof.runs["a"]["keys"])
    ext, model = Extents(100, 384, 1, 512, 512), TileChoice(7, 2, False)
    table = TileTable(variant=1, limit=4, order=order)
    probes = table.probes(model, ext, AVX512)
    pool = candidates(model, ext, AVX512, ORDER_POOL)
    assert probes[0] == model and len(probes) == 4 and set(probes) <= set(pool)
    assert probes[1].nv == 4
    assert probes[2] == next(c for c in pool[1:] if c != probes[1])
    assert probes[3].nv == 4
    assert order(ext, model, pool, AVX512)[:4] == probes and \
        sorted(map(str, order(ext, model, pool, AVX512))) == sorted(map(str, pool))
    assert table.pick(model, ext, AVX512) == (probes[1], "variant 1")
    # the analytic order where there is no learned one
    assert TileTable(variant=1, limit=4).probes(model, ext, AVX512) == \
        candidates(model, ext, AVX512, 4)
    few = synthetic(tmp_path / "few")
    few.runs["a"]["keys"] = few.runs["a"]["keys"][:learned.MIN_KEYS - 1]
    assert learned.probe_order(few, AVX512, exclude="b") is None
    assert learned.probe_order(prof, AVX512, runs=["a", "gone"]).runs == ["a"]
