"""Digest of the poly-optimized C rstf generates for some models: one sha256 per subgraph.

Usage::

    python scripts/c_digest.py MODEL.pb [MODEL.pb | FOLDER ...] [--target avx2 ...]
    python scripts/c_digest.py --write-cases FOLDER   # tests/poly_cases.py's CASES as .pb

Runs `rstf optimize`'s pipeline up to the generated C (load, select, partition, opgen,
`rstf.poly.optimize_source` with the arguments `rstf.pipeline._optimize` passes), for each
vector target named (default avx2 and avx512) and with Winograd off and on, without
building any TF op. Prints, per model, target and Winograd setting, one line per subgraph:
the sha256 of its new source and of its report entry (less `seconds`), then a total digest
over every line. A restructuring of the pass that keeps the generated C byte-identical
keeps every line and the total.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _models(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".pb"))
        else:
            out.append(p)
    return out


def digest_model(model: str, targets: list[str], max_ops: int = 400) -> list[str]:
    """The digest lines of one model: `target winograd subgraph source-sha info-sha`."""
    from rstf.cgen.codegen import generate_subgraph
    from rstf.pipeline import load_for_codegen, partition, select
    from rstf.poly import optimize_source

    graph, _dynamic, one, keep = load_for_codegen(model, None, None, False, lambda m: None)
    gen = one or graph
    parts = [p for split in partition(select(gen, keep), max_ops, lambda m: None)
             for p in split]
    codes = [generate_subgraph(gen, nodes, i) for i, nodes in enumerate(parts)]
    lines = []
    for target in targets:
        for winograd in (False, True):
            for sg in codes:
                constants = frozenset(s.cname for s in sg.inputs if gen.is_const(s.tensor))
                new, info = optimize_source(sg.source, sg.entry, True, True, constants,
                                            winograd, target)
                info = {k: v for k, v in info.items() if k != "seconds"}
                src = hashlib.sha256(new.encode()).hexdigest()[:16]
                rep = hashlib.sha256(json.dumps(info, sort_keys=True, default=str)
                                     .encode()).hexdigest()[:16]
                lines.append(f"{target:6} wino={int(winograd)} sg{sg.index:<3} {src} {rep}")
    return lines


def write_cases(folder: str) -> None:
    """tests/poly_cases.py's CASES, each a .pb in `folder` (output node `out`)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "tests"))
    import poly_cases as t
    from harness import make_graph_def, save_graph_def

    os.makedirs(folder, exist_ok=True)
    for name, (shape, body) in t.CASES.items():
        def build(shape=shape, body=body):
            x = t.tf.compat.v1.placeholder(t.tf.float32, shape, name="x")
            t.tf.identity(body(x), name="out")
        save_graph_def(make_graph_def(build), folder, f"case_{name}.pb")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help=".pb files or folders of them")
    ap.add_argument("--target", action="append", help="vector target (repeatable; "
                    "default avx2 and avx512)")
    ap.add_argument("--write-cases", metavar="FOLDER")
    args = ap.parse_args(argv)
    if args.write_cases:
        write_cases(args.write_cases)
        return 0
    total = hashlib.sha256()
    for model in _models(args.models):
        name = os.path.basename(model)
        for line in digest_model(model, args.target or ["avx2", "avx512"]):
            line = f"{name} {line}"
            print(line, flush=True)
            total.update(line.encode() + b"\n")
    print(f"TOTAL {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
