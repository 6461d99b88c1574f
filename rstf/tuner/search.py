"""`rstf tune`: measure each contraction's candidate tiles on this machine, keep the fastest
in its profile.

The model's subgraphs are cut and generated as `rstf optimize` cuts them. Then, once per
*probe* v = 0, 1, .., V-1, the polyhedral pass runs every subgraph with every tunable kernel
in its candidate number v (`tiles.TileTable(variant=v)`: the analytic model's choice is
candidate 0, the rest ranked by the same model, `tiles.candidates`), and each subgraph's C
is timed group by group beside the model's own C, run by run in one program
(`evaluation.pairbench`: the op library's flags and thread team, 2 MB pages, every group
after the groups before it, the two variants in turn so that the machine's load at any
moment falls on both). A kernel with fewer candidates than v runs the model's choice
again, which only adds samples of it. A group's time is credited to each contraction key
it runs, summed over the groups with that key, and the key's time against the model's,
the median over runs of the ratio of two runs made moments apart, is recorded in the
profile (`profile.Profile.record`) after each probe, so a run stopped by its budget or by
Ctrl-C keeps what it measured and the next run resumes at the next probe. A pairing
runs `reps` runs a side, or fewer (an even count, at least `pairbench.MIN_RUNS`) once its
runs have taken `pair_seconds`: a large model's subgraph (bert_base at batch 8, a third of
a second a run) is then timed for about as long as a small one's, and a probe costs what
its builds cost.

After the first `probes` and their confirmation (`_confirm`), the budget left goes on down
the same ranking: probe v = probes, probes + 1, .. up to `max_probes` (limit v + 1, which
the ranking's prefix makes candidate v of every longer list), each probe's winners
confirmed right after it, until no kernel has a candidate v or the budget is spent.

Which candidates the probes run (`probe_order`): by default, where scikit-learn is
installed and the profile's other runs measured enough contractions, the learned model
(`learned.ProbeOrder`, trained on those runs) ranks a pool of the analytic model's
candidates, and the probes after the model's own choice (always probe 0) take its
ranking's best and the analytic order's next in turn;
otherwise, or with `analytic`, the analytic model's own order. A run records its order and
the runs it was trained on, and a resumed run keeps both (if those runs were tuned again
in between, their new measurements can reorder its later probes).

The search is per contraction, not joint: probe v changes every kernel at once, and a
group's time is charged to its own kernels' choices only. A band that fuses two
contractions charges both with their sum.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from typing import NamedTuple

from ..errors import RstfError
from ..poly.tiles import ORDER_POOL, TileChoice, TileTable
from .profile import Profile, cpu_model, default_path, spread


class Timing(NamedTuple):
    """How each pairing is timed (`_paired`): at most `reps` runs a side, and no more once
    they have taken `seconds` (0: no limit)."""
    reps: int
    seconds: float = 0.0


def parse_budget(text: str) -> float:
    """Seconds from '600', '90s', '10m' or '1h'; RstfError otherwise."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t[-1:] in units else float(t)
    except (ValueError, IndexError):
        raise RstfError(f"--budget {text!r}: give seconds, or a number and s, m or h "
                        f"(10m)") from None
    if not value > 0:
        raise RstfError(f"--budget {text!r}: must be positive")
    return value


def kernel_choices(report: dict) -> dict[str, tuple[str, TileChoice, bool]]:
    """{TF node: (key, choice, whether the model chose it)} of the tunable kernels in a
    pass report (the whole-tile kernel of each; a remainder kernel shares its choice)."""
    out = {}
    for t in report.get("tiled", []):
        if "key" in t and t["node"] not in out:
            out[t["node"]] = (t["key"], TileChoice.parse(t["choice"]),
                              t["chosen_by"] == "model")
    return out


def _names(call: dict) -> frozenset[str]:
    """The TF node names a timed call runs (its nodes are "Type name")."""
    return frozenset(n.split(" ", 1)[1] for n in call["nodes"] if " " in n)


def regions(programs: list[list[dict]], choices: list[dict]) -> dict[str, frozenset[str]]:
    """{key: the TF nodes whose calls are charged to it}: the nodes of its kernels, grown
    by every call of any of `programs` that runs one of them, until no call adds more.
    A tile choice can change which groups fuse (a band refuses column tiles outermost):
    one program may run a contraction and its neighbour in one call and another in two,
    and each must then be charged both."""
    calls = [_names(c) for prog in programs for c in prog]
    out = {}
    for key in {kc[0] for ch in choices for kc in ch.values()}:
        nodes = {n for ch in choices for n, kc in ch.items() if kc[0] == key}
        grown = True
        while grown:
            grown = False
            for names in calls:
                if names & nodes and not names <= nodes:
                    nodes |= names
                    grown = True
        out[key] = frozenset(nodes)
    return out


def charge(calls: list[dict], region: frozenset[str]) -> float:
    """Seconds of the timed calls that run any node of `region`."""
    return sum(c["seconds"] for c in calls if _names(c) & region)


def run_id(model: str, input_shapes, outputs) -> str:
    """The profile's name for a tuning run over this model and these shapes."""
    text = json.dumps([os.path.abspath(model), sorted((input_shapes or {}).items()),
                       outputs], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tune(model: str, input_shapes=None, outputs=None, *, profile: str | None = None,
         budget: float = 600.0, probes: int = 8, reps: int = 30, march: str = "native",
         threads: int = 0, max_ops: int | None = None, fold_scales: bool = False,
         fresh: bool = False, jobs: int | None = None, confirm: int = 2,
         probe_order: str = "auto", max_probes: int = ORDER_POOL, pair_seconds: float = 8.0,
         log=print) -> dict:
    """Tune `model`'s contractions on this machine into `profile` (default: this machine's,
    `profile.default_path`). Returns a summary: the profile's path, the probes run, and per
    contraction key its model's and its chosen tile with their milliseconds. `confirm`:
    rounds that time the choices again, all together, after the probes (`_confirm`).
    `probe_order`: `auto`, `learned` or `analytic` (the module docstring). `max_probes`:
    how far the budget left after the first `probes` and their confirmation may probe
    further down each kernel's candidates (at most `tiles.ORDER_POOL`, the learned
    order's pool, so that probe v runs the same candidate whatever the limit).
    `pair_seconds`: the time after which a pairing stops short of `reps` runs a side (0:
    never)."""
    from . import learned
    from ..build.compiler import c_toolchain
    from ..cgen.codegen import generate_subgraph
    from ..pipeline import DEFAULT_MAX_OPS, default_jobs, load_for_codegen, partition, select
    from ..poly.target import detect, machine_threads

    if probes < 1 or reps < 1 or confirm < 0 or not pair_seconds >= 0:
        raise RstfError("--probes and --reps must be at least 1, --confirm and "
                        "--pair-seconds at least 0")
    if not probes <= max_probes <= ORDER_POOL:
        raise RstfError(f"--max-probes must be between --probes ({probes}) and {ORDER_POOL}")
    if probe_order not in ("auto", "learned", "analytic"):
        raise RstfError(f"--probe-order must be auto, learned or analytic, not {probe_order!r}")
    t0 = time.monotonic()
    jobs = jobs or default_jobs()
    target = detect(march, c_toolchain("poly", march, threads).cc)
    machine = {"cpu": cpu_model(), "target": target.name,
               "threads": threads or machine_threads()}
    path = profile or default_path(target.name, machine["cpu"])
    prof = Profile.open(path, machine)
    rid = run_id(model, input_shapes, outputs)
    run = prof.runs.get(rid)
    if fresh:
        run = None
    # A resumed run keeps the order its probes were numbered in (runs from before the
    # learned order: the analytic one).
    kind = probe_order
    if kind == "auto":
        kind = run.get("order", "analytic") if run else "learned"
    order = None
    if kind == "learned":
        trained = run.get("order_runs") if run and run.get("order") == "learned" else None
        order = learned.probe_order(prof, target, rid, trained)
        if order is None:
            if probe_order == "learned":
                raise RstfError(
                    "--probe-order learned needs scikit-learn (pip install rstf[tune]) and "
                    f"at least {learned.MIN_KEYS} contractions tuned from other models in "
                    f"{path}")
            kind = "analytic"
    if run is None or run.get("probes") != probes or run.get("reps") != reps or \
            run.get("order", "analytic") != kind:
        run = {"model": os.path.abspath(model), "probes": probes, "reps": reps, "done": [],
               "keys": []}
    run["order"] = kind
    if order is not None:
        run["order_runs"] = order.runs
    prof.runs[rid] = run

    quiet = lambda _msg: None  # noqa: E731 (the loader's own messages: optimize prints them)
    graph, _, one, keep = load_for_codegen(model, input_shapes, outputs, fold_scales, quiet)
    gen = one or graph
    sel = select(gen, keep)
    parts = [p for split in partition(sel, max_ops or DEFAULT_MAX_OPS, quiet) for p in split]
    codes = [generate_subgraph(gen, nodes, i) for i, nodes in enumerate(parts)]
    if not codes:
        raise RstfError(f"{model}: no subgraph rstf can generate code for, nothing to tune")
    consts = [frozenset(s.cname for s in sg.inputs if gen.is_const(s.tensor)) for sg in codes]
    timing = Timing(reps, pair_seconds)
    log(f"tuning {model}: {len(codes)} subgraphs, {probes} probes of {reps} runs a side"
        + (f" (or {pair_seconds:g} s a pairing)" if pair_seconds else "") + ", "
        f"budget {budget:.0f} s, profile {path}")
    log(f"  probe order: {kind}" + (f" (trained on {order.contractions} contractions of "
                                     f"{len(order.runs)} other runs)" if order else ""))
    stopped = None
    with tempfile.TemporaryDirectory(prefix="rstf-tune-") as work:
        # The model's own tiles, built once: every probe is timed against them.
        base = []
        probe = functools.partial(_probe, prof, run, codes, consts, target, order, base,
                                  jobs, timing, threads, work, log)
        for v in range(probes):
            if v in run["done"]:
                continue
            if time.monotonic() - t0 > budget:
                stopped = "budget"
                break
            if (stopped := probe(v, probes, t0)) is not None:
                break
        if stopped is None:
            stopped = _confirm(prof, run, codes, consts, target, base, jobs, timing, threads,
                               work, confirm, budget - (time.monotonic() - t0), log)
        # The budget left: the candidates past the first `probes`, one probe each, their
        # winners confirmed as runners-up are, until every kernel's candidates are spent.
        for v in range(probes, max_probes):
            if stopped is not None or v >= run.get("spent", max_probes):
                break
            if v in run["done"]:
                continue
            if time.monotonic() - t0 > budget:
                stopped = "budget"
                break
            stopped = probe(v, v + 1, t0)
            if stopped is None and v in run["done"]:
                stopped = _confirm(prof, run, codes, consts, target, base, jobs, timing,
                                   threads, work, confirm, budget - (time.monotonic() - t0),
                                   log, runners_only=True)
    prof.save()
    summary = summarize(prof, run.get("keys", []), path, run.get("noise", []))
    summary.update(probes_done=len(run["done"]), probes=probes, max_probes=max_probes,
                   probe_order=kind,
                   stopped=stopped,
                   seconds=round(time.monotonic() - t0, 1))
    return summary


def _confirm(prof: Profile, run: dict, codes, consts, target, base, jobs: int, timing: Timing,
             threads: int, work: str, rounds: int, left: float, log,
             runners_only: bool = False) -> str | None:
    """Time the profile's choices for this run's keys beside the model's `rounds` more
    times, all at once, and record them: a choice that won one probe among several by
    chance (the least of several noisy ratios is biased low) meets its median here.
    Then, while the budget lasts, the same for each key whose choice fell back to the
    model's, with its next `Profile.contender` (the runner-up of its probes), or whose
    choice a later probe put forward, stage by stage until no key has one.
    `runners_only`: those stages alone (after a probe past the first ones). A candidate
    is put forward once (`run["put_forward"]`, kept across resumed runs): one whose C did
    not compile, or that its kernel cannot take, stays a contender in the profile.
    Returns why it stopped early, or None."""
    t0 = time.monotonic()
    keys = sorted(run.get("keys", []))
    first = not runners_only
    while rounds:
        tried = {tuple(x) for x in run.get("put_forward", [])}
        contenders = {k: c for k in keys if (c := prof.contender(k)) is not None
                      and (k, c) not in tried}
        run["put_forward"] = sorted(tried | set(contenders.items()))
        if not first and not contenders:
            return None
        chosen = {k: c for k, c in prof.table().measured if k in keys}
        table = TileTable(tuple(sorted({**chosen, **{k: TileChoice.parse(c) for k, c in
                                                     contenders.items()}}.items())))
        done = run.get("confirmed", 0) if first else 0
        cand = None
        for r in range(done, rounds if table.measured else 0):
            if time.monotonic() - t0 > left:
                return "budget"
            try:
                _model(base, codes, consts, target, jobs, work)
                cand = cand or _build(codes, consts, dataclasses.replace(target, tiles=table),
                                      jobs, work, log)
                measured = _paired(base, cand, threads, timing, work)
            except KeyboardInterrupt:
                return "interrupted"
            for (key, choice, is_model), (secs, ratio, nodes) in measured.items():
                if not is_model:
                    prof.record(key, choice, secs * 1e3, ratio, nodes)
            _note(prof, run, measured)
            if first:
                run["confirmed"] = r + 1
            prof.save()
            log(f"  confirmation {r + 1}/{rounds}: {len(table.measured)} measured choices "
                f"timed again beside the model's" + ("" if first else
                f" ({len(contenders)} runners-up)"))
        if first:
            run["confirmed"] = rounds  # (also where there was nothing to time again)
        first = False
    return None


def _probe(prof: Profile, run: dict, codes, consts, target, order, base: list, jobs: int,
           timing: Timing, threads: int, work: str, log, v: int, limit: int,
           t0: float) -> str | None:
    """Probe `v`: every kernel in its candidate number `v` of the first `limit` (probe
    0: the model's own tiles against a copy of themselves), timed beside the model's
    (`_paired`), recorded in the profile and saved. Where no kernel has a candidate `v`,
    nothing is timed and `run["spent"]` says so. Returns "interrupted" or None."""
    try:
        model = _model(base, codes, consts, target, jobs, work)
        cand = model if v == 0 else _build(codes, consts, _probe_target(
            target, v, limit, order), jobs, work, log, candidates_only=True)
        if cand is None:
            run["spent"] = v
            prof.save()
            log(f"  probe {v + 1}: no kernel has another candidate")
            return None
        measured = _paired(model, cand, threads, timing, work)
    except KeyboardInterrupt:
        return "interrupted"
    for (key, choice, is_model), (secs, ratio, nodes) in sorted(
            measured.items(), key=lambda kv: not kv[0][2]):
        # (the model's own probe: the reference, 1 by definition; its ratio is noise)
        prof.record(key, choice, secs * 1e3, 1.0 if v == 0 else ratio, nodes,
                    model=choice if is_model else None)
    run["keys"] = sorted(set(run.get("keys", [])) | {kc[0] for kc in measured})
    _note(prof, run, measured)
    run["done"] = sorted(set(run["done"]) | {v})
    prof.save()
    first = run["probes"]
    log(f"  probe {v + 1}" + (f"/{first}" if v < first else f" (past the first {first})")
        + f": {len(measured)} contraction tiles timed ({time.monotonic() - t0:.0f} s)")
    return None


def _model(base: list, codes, consts, target, jobs: int, work: str) -> list:
    """The model's own tiles' units (`_build`), built into `base` on first use."""
    if not base:
        base.extend(_build(codes, consts, _probe_target(target, 0, 1), jobs, work))
    return base


def _probe_target(target, variant: int, limit: int, order=None):
    return dataclasses.replace(target, tiles=TileTable(variant=variant, limit=limit,
                                                       order=order))


def _build(codes, consts, probe, jobs: int, work: str, log=None,
           candidates_only: bool = False) -> list | None:
    """Per subgraph, (its timing unit, `pairbench.compile_unit`, and `kernel_choices`)
    with every subgraph through the pass on target `probe`; None for a subgraph with no
    tunable kernel. With `log` (a candidate probe's build), a subgraph whose C does not
    compile is logged and None: the probe measures the others; without it (the model's
    own tiles, which `rstf optimize` builds too) that is the error. `candidates_only`:
    None, before anything compiles, where every kernel ran its model's choice (a probe
    past every kernel's candidates)."""
    from ..evaluation.pairbench import compile_unit
    from ..parallel import run_ordered
    from ..poly import optimize as poly_optimize

    results = run_ordered(poly_optimize, [(sg.source, sg.entry, True, True, c, False, probe)
                                          for sg, c in zip(codes, consts)],
                          jobs, weights=[len(sg.source) for sg in codes])
    chosen = [kernel_choices(res.report()) if res.optimized else {} for res in results]
    if candidates_only and all(kc[2] for ch in chosen for kc in ch.values()):
        return None
    out = []
    for i, (sg, res, choices) in enumerate(zip(codes, results, chosen)):
        ws = sg.workspace_bytes if res.workspace_bytes is None else res.workspace_bytes
        unit = None
        try:
            unit = compile_unit(res.source, sg.entry, ws, work) if choices else None
        except RstfError as e:
            if log is None:
                raise
            log(f"  subgraph {i}: not measured in this probe: {e}")
        out.append((unit, choices) if unit else None)
    return out


def _paired(base: list, cand: list, threads: int, timing: Timing, work: str) -> dict:
    """{(key, choice, the model's): (seconds, seconds over the model's, nodes)} of the
    candidate units `cand`, each timed beside the model's (`base`) in one program, `timing`'s
    runs of each, in turn (`pairbench.pair_timer`). Per subgraph, a key's ratio is the
    median over runs of its seconds (the calls of its `regions`) over the model's in the
    run beside it, and its seconds the median of its own; over the subgraphs, the seconds
    are summed and the ratios weighted by the model's. Where `cand` is `base` (the model's
    own probe) two copies of the model's code run side by side: every key's ratio is then
    the model's tile against itself, what this machine's ratios move by with no change
    (`_note`)."""
    import statistics
    from ..evaluation.pairbench import pair_timer
    acc: dict = {}
    for b, c in zip(base, cand):
        if b is None or c is None:
            continue
        ms, cs = pair_timer([b[0], c[0]], timing.reps, work, timing.seconds).run(threads)
        by_key = {kc[0]: kc for kc in c[1].values()}
        for key, region in regions([ms[0], cs[0]], [b[1], c[1]]).items():
            if key not in by_key:
                continue
            m = [charge(r, region) for r in ms]
            k = [charge(r, region) for r in cs]
            ratio = statistics.median(x / y for x, y in zip(k, m) if y > 0) if any(m) else 1.0
            model = statistics.median(m)
            nodes = sorted(n for n, kc in c[1].items() if kc[0] == key)
            s0, m0, w0, n0 = acc.get(by_key[key], (0.0, 0.0, 0.0, []))
            acc[by_key[key]] = (s0 + statistics.median(k), m0 + model, w0 + ratio * model,
                                n0 + nodes)
    return {kc: (secs, weighted / model if model else 1.0, nodes)
            for kc, (secs, model, weighted, nodes) in acc.items()}


def _note(prof: Profile, run: dict, measured: dict) -> None:
    """Keep a pairing's samples of the noise in `run` (the log ratio of each key that ran
    the model's tile on both sides: the same figure a candidate is judged by, with no
    change to judge) and choose the run's keys again with the noise they give
    (`profile.spread`, `Profile.note_noise`)."""
    run["noise"] = run.get("noise", []) + [round(math.log(m[1]), 4)
                                           for kc, m in measured.items() if kc[2] and m[1] > 0]
    prof.note_noise(run.get("keys", []), spread(run["noise"]))


def summarize(prof: Profile, keys, path: str, noise: list[float] = ()) -> dict:
    """Per contraction: the model's and the chosen tile, with their median ms and the
    median of the ratios the choice was made on (`Profile.evidence`); and the noise of a
    timed ratio the run measured (`profile.spread` of its samples)."""
    import statistics
    rows = []
    for key in sorted(keys):
        e = prof.contractions[key]
        med = {lab: statistics.median(v) for lab, v in e["ms"].items() if v}
        ratio = prof.evidence(key, e["choice"]) if e["choice"] != e["model"] else None
        rows.append({"key": key, "model": e["model"], "model_ms": med.get(e["model"]),
                     "choice": e["choice"], "choice_ms": med.get(e["choice"]),
                     "vs_model": statistics.median(ratio) if ratio else 1.0,
                     "candidates": len(med), "nodes": e["nodes"][:3]})
    return {"profile": path, "contractions": rows, "noise": round(spread(list(noise)), 4)}
