"""A learned tile model: the thesis's idea (tile-size-selection-nn.txt) on `rstf tune`'s own
measurements, as a gradient-boosted regressor (scikit-learn) rather than a hand-written
trainer.

Every measured (contraction, candidate) pair of a profile is one sample: its features are
the contraction's extents and the candidate's tile (`features`), its target the log of the
candidate's median time over the analytic model's choice timed beside it (`vs_model`). The
regressor then predicts that ratio for the candidates of a contraction no probe measured,
and `rank` orders them by it. `evaluate` trains on some tuning runs (models) and tests on
the contractions of the others, as the thesis tests on layers of networks it never saw:
Spearman's rank correlation of predicted and measured ratios, top-1 and top-5 hit rates,
and how often the predicted best is within 5% of the measured best; the same for the
analytic model's own ranking (`tiles.candidates` order) as the baseline.

The regressor corrects the analytic model rather than replacing it: a candidate is ranked
before the model's own choice only where its predicted time is shorter by more than a
switching margin (`order`). A few dozen contractions leave the regressor's errors as large
as the gains it looks for (a few percent), and ranked on its predictions alone it picked a
worse tile than the analytic model's more often than a better one. The margin is learned
too, never set by hand for a host: `choose_margin` holds out each training run in turn,
trains on the others, and keeps the margin under which the held-out runs' first choices
were most often within 5% of their measured best (`MARGINS`; with a single training run
there is nothing to hold out, and `DEFAULT_MARGIN` stands).

`rstf tune` uses it to choose what to probe (`ProbeOrder`, `probe_order`): trained on the
profile's other runs, it ranks a larger pool of the analytic model's candidates, and after
the model's own choice (always the first probe) the probes take its best and the analytic
order's next in turn.

scikit-learn is the `tune` extra (`pip install rstf[tune]`); without it `available()` is
False and nothing here is used.
"""
from __future__ import annotations

import math
import statistics

from ..poly.target import Target
from ..poly.tiles import Extents, TileChoice, candidates, tile_cost_of
from .profile import Profile

MIN_KEYS = 12  # contractions a profile must hold before a model is trained on it
NEAR = 0.05  # "within 5% of the measured best"
# The switching margins `choose_margin` tries (a predicted gain over the analytic choice a
# candidate needs to be ranked before it; inf: never), and the one used without a choice.
MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, math.inf)
DEFAULT_MARGIN = 0.03


def available() -> bool:
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


def parse_key(key: str) -> Extents:
    """The extents a profile key (`Extents.key`) was made from."""
    fields = dict(x.split("=", 1) for x in key.split() if "=" in x)
    loops = tuple(x for x in key.split() if "=" not in x)
    return Extents(int(fields["rows"]), int(fields["cols"]), int(fields["outer"]),
                   int(fields["depth"]), int(fields["call"]), loops)


def features(ext: Extents, c: TileChoice, model: TileChoice, t: Target) -> list[float]:
    """A (contraction, candidate) pair as numbers: the extents (log2), the loops a call
    runs, the tile, the remainders it leaves, the analytic model's cost of the
    candidate over its cost of its own choice, its steps a trip of the k loop over the
    target's (log2), and the outer reductions a call runs inside over the model's
    (`TileChoice.inside`)."""
    vb = t.vlen * c.nv
    lg = lambda x: math.log2(max(x, 1))  # noqa: E731
    return [lg(ext.rows), lg(ext.cols), lg(ext.outer), lg(ext.depth), lg(ext.call),
            float("kin" in ext.loops), float("k2" in ext.loops), float("merged" in ext.loops),
            c.rb, c.nv, float(c.tile_outer), c.rb * c.nv,
            (ext.rows % c.rb) / c.rb, (ext.cols % vb) / ext.cols,
            tile_cost_of(c, ext, t) / tile_cost_of(model, ext, t),
            float(c.tile_outer != model.tile_outer), float(c == model),
            math.log2((c.steps or t.k_steps) / t.k_steps),
            float(c.inside - ext.inside if c.inside >= 0 else 0)]


def samples(prof: Profile, t: Target, keys=None) -> list[tuple[str, TileChoice, list, float]]:
    """(key, candidate, features, log median ratio) for every measured pair of `prof`
    (of `keys` only, when given; the ratios `Profile.evidence` names)."""
    out = []
    for key, e in prof.contractions.items():
        if keys is not None and key not in keys:
            continue
        ext, model = parse_key(key), TileChoice.parse(e["model"])
        for label in e.get("vs_model", {}):
            # (a winner's confirmed ratios: the probe that made it one is biased low)
            ratios = prof.evidence(key, label)
            if ratios:
                c = TileChoice.parse(label)
                out.append((key, c, features(ext, c, model, t),
                            math.log(statistics.median(ratios))))
    return out


def train(rows: list):
    """A regressor fitted on `samples` rows (fixed seed: the same data, the same model)."""
    from sklearn.ensemble import GradientBoostingRegressor

    reg = GradientBoostingRegressor(n_estimators=200, max_depth=3, learning_rate=0.05,
                                    subsample=0.8, random_state=0)
    reg.fit([r[2] for r in rows], [r[3] for r in rows])
    return reg


def order(pred: dict, model: TileChoice, margin: float, tie: list) -> list[TileChoice]:
    """The choices of `pred` (choice -> predicted log ratio to the model's time), best
    first: the analytic `model` at its known ratio 1 (log 0), every other at its
    prediction plus the switching `margin` (see the module docstring); ties in `tie`'s
    order."""
    pad = math.log1p(margin) if math.isfinite(margin) else math.inf
    return sorted(pred, key=lambda c: (0.0 if c == model else pred[c] + pad, tie.index(c)
                                       if c in tie else len(tie)))


def rank(reg, ext: Extents, model: TileChoice, t: Target, limit: int,
         margin: float = DEFAULT_MARGIN) -> list[tuple[float, TileChoice]]:
    """The candidates of a contraction, (predicted ratio to the model's, choice), in the
    order `order` gives them (the model's own choice at ratio 1)."""
    cands = candidates(model, ext, t, limit)
    pred = dict(zip(cands, reg.predict([features(ext, c, model, t) for c in cands])))
    pred[model] = 0.0
    return [(math.exp(pred[c]), c) for c in order(pred, model, margin, cands)]


class ProbeOrder:
    """The tuner's probe order from a regressor (`tiles.TileTable.order`): of a kernel's
    pool of candidates (in the analytic model's order), the model's own choice first,
    then the regressor's fastest predicted and the analytic model's next candidate in turn,
    each the best of its ranking not yet taken. Half the probes on each ranking: a
    regressor trained on a few runs finds tiles the analytic order ranks late (ResNet-50's
    49-pixel 1x1 conv in 10x2 tiles, 0.866 of the model's time) and misses some it ranks
    early (the other loop order of a 14-row conv, 0.812; docs/benchmarks). Picklable, for
    the pass's worker processes."""

    def __init__(self, reg, runs: list[str], contractions: int):
        self.reg, self.runs, self.contractions = reg, runs, contractions

    def __call__(self, ext: Extents, model: TileChoice, pool: list, t: Target) -> list:
        others = [c for c in pool if c != model]
        if not others:
            return [model]
        pred = self.reg.predict([features(ext, c, model, t) for c in others])
        rankings = ([c for _, _, c in sorted(zip(pred, range(len(others)), others))], others)
        out, taken = [model], {model}
        while len(out) < len(pool):
            for ranking in rankings:
                c = next((c for c in ranking if c not in taken), None)
                if c is not None:
                    out.append(c)
                    taken.add(c)
        return out


def probe_order(prof: Profile, t: Target, exclude: str | None = None,
                runs: list[str] | None = None) -> ProbeOrder | None:
    """A `ProbeOrder` trained on the runs of `prof` named in `runs` (default: every run but
    `exclude`, the run being tuned; never that run's own contractions), or None where
    scikit-learn is missing or those runs measured fewer than `MIN_KEYS` contractions."""
    if not available():
        return None
    runs = sorted(r for r in (prof.runs if runs is None else runs)
                  if r != exclude and r in prof.runs)
    mine = set(prof.runs.get(exclude, {}).get("keys", [])) if exclude else set()
    keys = {k for r in runs for k in prof.runs[r].get("keys", [])} - mine
    rows = samples(prof, t, keys)
    measured = len({r[0] for r in rows})
    if measured < MIN_KEYS:
        return None
    return ProbeOrder(train(rows), runs, measured)


def _predicted(reg, prof: Profile, t: Target, keys) -> list[tuple]:
    """Per contraction of `keys` that measured two or more candidates: (its measured
    ratios, the regressor's predicted log ratios with the model's own at 0, the model's
    choice, the analytic order of its candidates)."""
    out = []
    for key in sorted(keys):
        e = prof.contractions.get(key)
        rows = samples(prof, t, {key})
        if e is None or len(rows) < 2:
            continue
        model = TileChoice.parse(e["model"])
        pred = dict(zip([r[1] for r in rows], reg.predict([r[2] for r in rows])))
        if model in pred:
            pred[model] = 0.0
        out.append(({r[1]: math.exp(r[3]) for r in rows}, pred, model,
                    candidates(model, parse_key(key), t, 64)))
    return out


def _held_out(predicted: list[tuple], margin: float) -> tuple[list, list]:
    """The learned ranking's scores under `margin` and the analytic ranking's, per
    contraction of `_predicted`."""
    learned, analytic = [], []
    for measured, pred, model, tie in predicted:
        by_pred = order(pred, model, margin, tie)
        by_model = sorted(measured, key=lambda c: tie.index(c) if c in tie else 99)
        learned.append(_scores(measured, by_pred, {c: i for i, c in enumerate(by_pred)}))
        analytic.append(_scores(measured, by_model, {c: i for i, c in enumerate(by_model)}))
    return learned, analytic


def choose_margin(prof: Profile, t: Target, runs: dict) -> float:
    """The switching margin for a model trained on `runs` (run id -> its contraction
    keys): each run held out in turn, the regressor trained on the others, the margin
    whose first choices were within 5% of the measured best most often over all of them
    (then the larger, the safer); `DEFAULT_MARGIN` where fewer than two runs."""
    runs = {r: set(keys) for r, keys in runs.items() if keys}
    if len(runs) < 2:
        return DEFAULT_MARGIN
    hits = {m: 0 for m in MARGINS}
    for held, keys in runs.items():
        rest = set().union(*(k for r, k in runs.items() if r != held)) - keys
        if not rest:
            continue
        predicted = _predicted(train(samples(prof, t, rest)), prof, t, keys)
        for m in MARGINS:
            hits[m] += sum(s["near"] for s in _held_out(predicted, m)[0])
    return max(MARGINS, key=lambda m: (hits[m], m))


def evaluate(prof: Profile, t: Target, test_runs: list[str]) -> dict:
    """Train on the contractions of the profile's other runs, test on those only
    `test_runs` measured (run ids, or model paths as the runs record them). The
    switching margin is chosen on the training runs alone (`choose_margin`)."""
    runs = prof.runs
    chosen = {r for r, info in runs.items() if r in test_runs or info.get("model") in test_runs}
    test_keys = {k for r in chosen for k in runs[r].get("keys", [])}
    train_runs = {r: set(info.get("keys", [])) - test_keys for r, info in runs.items()
                  if r not in chosen}
    train_keys = set().union(*train_runs.values()) if train_runs else set()
    if not test_keys or not train_keys:
        raise ValueError("the profile needs contractions measured in both the training "
                         "and the test runs")
    margin = choose_margin(prof, t, train_runs)
    reg = train(samples(prof, t, train_keys))
    learned, analytic = _held_out(_predicted(reg, prof, t, test_keys), margin)
    return {"train_contractions": len(train_keys), "test_contractions": len(learned),
            "margin": margin, "learned": _summary(learned), "analytic": _summary(analytic)}


def _scores(measured: dict, ranking: list, score: dict) -> dict:
    from scipy.stats import spearmanr

    best = min(measured, key=measured.get)
    top5 = ranking[:5]
    rho = spearmanr([score[c] for c in measured], list(measured.values())).statistic \
        if len(measured) > 2 else float("nan")
    return {"top1": ranking[0] == best, "top5": best in top5,
            "near": measured[ranking[0]] <= measured[best] * (1 + NEAR), "rho": rho}


def _summary(scores: list[dict]) -> dict:
    n = len(scores)
    rhos = [s["rho"] for s in scores if not math.isnan(s["rho"])]
    return {"top1": sum(s["top1"] for s in scores) / n if n else None,
            "top5": sum(s["top5"] for s in scores) / n if n else None,
            "within_5pct": sum(s["near"] for s in scores) / n if n else None,
            "spearman": statistics.median(rhos) if rhos else None}
