#!/usr/bin/env python3
"""How well the learned tile model ranks the tiles of models it never saw.

    python benchmarks/tile_model.py --test MODEL.pb[,MODEL.pb] [--profile FILE] [--json]

FILE is an `rstf tune` profile (default: this machine's) holding the runs of several models.
The runs of the --test models are held out: the regressor (rstf/tuner/learned.py) is
trained on the contractions the other runs measured and ranks the candidates of the
held-out ones. Prints, for the learned and for the analytic model's ranking, the share of
held-out contractions whose best measured tile is ranked first (top-1) or in the first five
(top-5), whose first-ranked tile is within 5% of the measured best, and the median
Spearman correlation of rank and measured time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    from rstf.poly.target import TARGETS, detect
    from rstf.tuner.learned import evaluate
    from rstf.tuner.profile import Profile, default_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", required=True, help="comma-separated model paths to hold out")
    ap.add_argument("--profile", help="the profile (default: this machine's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    path = a.profile or default_path(detect().name)
    prof = Profile.load(path)
    target = TARGETS[prof.machine["target"]]
    test = [os.path.abspath(m) for m in a.test.split(",") if m]
    r = evaluate(prof, target, test)
    r["profile"], r["held_out"] = path, test
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"{path}: trained on {r['train_contractions']} contractions, tested on "
          f"{r['test_contractions']} of {', '.join(os.path.basename(t) for t in test)}; "
          f"switching margin {r['margin']:g} (chosen on the training runs)")
    print(f"{'ranking':10s} {'top-1':>6s} {'top-5':>6s} {'within 5%':>10s} {'Spearman':>9s}")
    for name in ("learned", "analytic"):
        s = r[name]
        print(f"{name:10s} {s['top1']:6.2f} {s['top5']:6.2f} {s['within_5pct']:10.2f} "
              f"{s['spearman'] if s['spearman'] is not None else float('nan'):9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
