#!/usr/bin/env python3
"""A longer differential-fuzzing campaign than CI runs.

    python scripts/fuzz.py [--examples 200] [--seed 0] [--keep-going]

Draws random graphs (rstf.fuzz.graphs), optimizes each with a random --max-ops, compares it
with stock TensorFlow, and saves every failing graph as
tests/data/fuzz_regressions/<hash>-maxops<N>.pbtxt, which the test suite replays forever.
"""
import argparse
import hashlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

import hypothesis  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rstf.compare import compare  # noqa: E402
from rstf.errors import RstfError  # noqa: E402
from rstf.fuzz import graphs  # noqa: E402
from rstf.pipeline import optimize  # noqa: E402

REGRESSIONS = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "data",
                           "fuzz_regressions")


def check(g, max_ops: int) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "g.pb")
        with open(model, "wb") as f:
            f.write(g.graph_def.SerializeToString())
        try:
            optimize(model, os.path.join(d, "o"), max_ops=max_ops, log=lambda m: None)
            if compare(model, os.path.join(d, "o"), latency=False)["passed"]:
                return True, ""
            return False, "outputs differ from TensorFlow"
        except RstfError as e:
            return False, str(e)


def save(g, max_ops: int) -> str:
    from google.protobuf import text_format

    text = text_format.MessageToString(g.graph_def)
    name = hashlib.sha256(text.encode()).hexdigest()[:12]
    os.makedirs(REGRESSIONS, exist_ok=True)
    path = os.path.join(REGRESSIONS, f"{name}-maxops{max_ops}.pbtxt")
    with open(path, "w") as f:
        f.write(text)
    return path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--examples", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-going", action="store_true")
    a = p.parse_args()
    stats = {"n": 0, "failures": 0}

    @hypothesis.seed(a.seed)
    @hypothesis.settings(max_examples=a.examples, deadline=None, database=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(g=graphs(), max_ops=st.sampled_from([2, 3, 5, 400]))
    def campaign(g, max_ops):
        if stats["failures"] and not a.keep_going:
            return
        stats["n"] += 1
        ok, why = check(g, max_ops)
        print(f"[{stats['n']}/{a.examples}] {'ok  ' if ok else 'FAIL'} max_ops={max_ops} "
              f"{'; '.join(g.recipe)}" + ("" if ok else f"  <- {why}"), flush=True)
        if not ok:
            stats["failures"] += 1
            print(f"  saved {save(g, max_ops)}", flush=True)

    campaign()
    print(f"{stats['n']} graphs fuzzed, {stats['failures']} failures")
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
