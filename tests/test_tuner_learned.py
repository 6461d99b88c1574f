"""The learned tile model (rstf/tuner/learned.py): trained on one set of tuning runs, it
ranks the candidates of contractions it never saw; `evaluate` scores it beside the
analytic model's own ranking."""
import math

import pytest

from rstf.poly.target import AVX512
from rstf.poly.tiles import Extents, TileChoice, candidates
from rstf.tuner import learned
from rstf.tuner.profile import Profile

pytestmark = pytest.mark.skipif(not learned.available(), reason="scikit-learn (the tune extra)")


def synthetic(tmp_path) -> Profile:
    """A profile of two runs whose measured ratios follow one rule the analytic model does
    not know: a tile 4 vectors wide is 12% faster than the model's, 3 wide 5%."""
    prof = Profile(str(tmp_path / "p.json"), {"target": AVX512.name, "cpu": "x", "threads": 2})
    runs = {"a": [], "b": []}
    for i, (rows, cols, depth) in enumerate((r, c, d) for r in (14, 28, 49, 56, 128)
                                            for c in (64, 128, 256, 512)
                                            for d in (64, 256, 1024)):
        ext = Extents(rows, cols, 1, depth, depth)
        model = TileChoice(7, 2, False) if cols >= 32 else TileChoice(7, 1, False)
        key = ext.key(AVX512)
        for c in candidates(model, ext, AVX512, 6):
            ratio = 1.0 if c == model else {4: 0.88, 3: 0.95}.get(c.nv, 1.04)
            prof.record(key, c, ratio, ratio, ["n"], model=model if c == model else None)
        runs["a" if i % 4 else "b"].append(key)
    prof.runs = {r: {"model": f"/m/{r}.pb", "keys": keys, "done": [0]}
                 for r, keys in runs.items()}
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
    ranked = learned.rank(reg, ext, TileChoice(7, 2, False), AVX512, 6)
    assert ranked[0][1].nv == 4 and ranked[0][0] < 0.95
    assert [p for p, _ in ranked] == sorted(p for p, _ in ranked)
    assert all(math.isfinite(p) for p, _ in ranked)


def test_evaluate_needs_both_sides(tmp_path):
    prof = synthetic(tmp_path)
    with pytest.raises(ValueError):
        learned.evaluate(prof, AVX512, ["/m/a.pb", "/m/b.pb"])
