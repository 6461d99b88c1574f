"""The zoo sweep's report (benchmarks/zoo.py): its markdown table, one-line summary, chart
and docs/benchmarks page, made from the sweep's rows (one dict per model, zoo.py's module
docstring names their fields). Nothing here runs a model: ``zoo.py --rows ZOO.jsonl`` writes
these again from an earlier run."""
from __future__ import annotations

import datetime
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from models.build import UNIT_RANGE  # noqa: E402  (no TF import)

RSTF = "rstf-poly"  # the engine the sweep is about; always benchmarked
# An engine whose error is within this many times TF's own oneDNN-vs-Eigen spread counts
# as matching (the sweep's fidelity bar, and which other engines' times count).
SPREAD_RATIO_COUNTS = 2.0


def _pct(a, b) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def _label(r: dict) -> str:
    """'Model@size': a model as the table and the chart name it."""
    return f"{r['model']}@{r['input_size']}"


def _engine_order(rows: list[dict]) -> list[str]:
    """Every engine that has a column, in the order the rows list them."""
    return list(dict.fromkeys(e for r in rows for e in r.get("engines", {})))


def _coverage_cells(r: dict) -> list[str]:
    """The coverage columns of a row (COVERAGE_HEAD), '' where the model did not get so
    far."""
    cov = (f"{r['nodes_covered']}/{r['nodes_total']} "
           f"({_pct(r['nodes_covered'], r['nodes_total'])})" if "nodes_total" in r else "")
    flops = _pct(r["flops_covered"], r["flops_total"]) if "flops_total" in r else ""
    left = (", ".join(f"{k} x{v}" for k, v in r["unsupported"].items()) or "-"
            if "unsupported" in r else "")
    err = f"{r['max_rel_err']:.2g}" if r.get("max_rel_err") is not None else ""
    if "error" in r:
        result = "error: " + r["error"].replace("|", "\\|")
    elif r.get("passed"):
        result = "pass"
    else:
        problem = r.get("rstf_problem", "").replace("|", "\\|")
        result = f"FAIL ({problem})" if problem else "FAIL"
    opt = f"{r['optimize_seconds']:.0f}" if "optimize_seconds" in r else ""
    pmax = f"{r['output_max']:.3f}" if "output_max" in r else ""
    return [cov, flops, left, err, result, opt, pmax]


COVERAGE_HEAD = ["nodes covered", "conv/matmul FLOPs covered", "left to TF (op x count)",
                 "max rel err", "result", "optimize s", "max prob"]


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _engine_cell(e: dict | None) -> str:
    """An engine's median ms; its status where it has no time or is not ok."""
    if e is None:
        return ""
    if e.get("median_ms") is None:
        return e["status"]
    ms = f"{e['median_ms']:.2f}"
    return ms if e["status"] == "ok" else f"{ms} ({e['status']})"


def _input_cell(r: dict) -> str:
    """The table's input cell: the size, and the input range where it is not [0, 1)."""
    lo, hi = r.get("input_range") or UNIT_RANGE
    return str(r["input_size"]) + ("" if (lo, hi) == UNIT_RANGE else f", [{lo:g}, {hi:g})")


def table(rows: list[dict]) -> str:
    """The markdown table, rows in the order given. Without engine results (--engines
    none): model, input and the coverage columns. With them, after the input: GFLOP, one
    median-ms column per engine, rstf / best (other engine), best engine, rstf GFLOP/s and
    rstf's error over TF's spread and over TF's own error against the float64 run, then the
    coverage columns."""
    from rstf.evaluation.bench import LABELS, _fmt
    from rstf.evaluation.compare import format_ratio

    engines = _engine_order(rows)
    if not engines:
        # With the timing on, the numbers-only rows carry TF's spread and the float64 run.
        spreads = any("tf_spread" in r for r in rows)
        fid = ["rstf err / TF spread", "rstf float64 err / TF's"] if spreads else []
        head = ["model", "input", *fid, *COVERAGE_HEAD]
        out = [_md_row(head), _md_row(["---"] * len(head))]
        return "\n".join([*out, *(_md_row([r["model"], _input_cell(r), *(
            [_spread_cell(r), _exact_cell(r)] if spreads else []), *_coverage_cells(r)])
            for r in rows)])
    head = ["model", "input", "GFLOP", *(f"{LABELS[e]} ms" for e in engines), "rstf / best",
            "best engine", "rstf GFLOP/s", "rstf err / TF spread", "rstf float64 err / TF's",
            *COVERAGE_HEAD]
    out = [_md_row(head), _md_row(["---"] * len(head))]
    for r in rows:
        eng = r.get("engines", {})
        best = r.get("best_other")
        ratio = r.get("rstf_over_best")
        out.append(_md_row([
            r["model"], _input_cell(r), _fmt(r.get("gflop"), ".3g"),
            *(_engine_cell(eng.get(e)) for e in engines),
            _fmt(ratio, ".2f"),
            LABELS[best["engine"]] if best else "-", _fmt(r.get("rstf_gflops"), ".1f"),
            _spread_cell(r), _exact_cell(r), *_coverage_cells(r)]))
    return "\n".join(out)


def _spread_cell(r: dict) -> str:
    """rstf's error over TF's oneDNN-vs-Eigen spread, '' without a measure."""
    from rstf.evaluation.compare import format_ratio

    return format_ratio(r.get("spread_ratio")) if r.get("max_rel_err") is not None else ""


def _exact_cell(r: dict) -> str:
    """rstf's error against the float64 run over TF's, 'n/a' where TF is exact to the
    float, 'no float64' where the graph cannot run in float64, '' without a measure."""
    from rstf.evaluation.compare import format_ratio

    if r.get("exact_unavailable"):
        return "no float64"
    return format_ratio(r.get("exact_ratio")) if r.get("max_rel_err") is not None else ""


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def slower_than(rows: list[dict], engine: str) -> list[str]:
    """'Model@size (1.23x)' for every row where rstf-poly's median is above `engine`'s
    (any status with a time: a stock TF engine's time stands even where its error is above
    rtol)."""
    out = []
    for r in rows:
        eng = r.get("engines", {})
        mine, theirs = (eng.get(RSTF, {}).get("median_ms"), eng.get(engine, {}).get("median_ms"))
        if mine and theirs and mine > theirs:
            out.append(f"{_label(r)} ({mine / theirs:.2f}x)")
    return out


def summary(rows: list[dict]) -> str:
    """One line under the table: geomean of rstf / best other engine over the models where
    both ran, how many of them rstf is fastest on, and the models where rstf is slower than
    stock TF Eigen or TF oneDNN. '' when no engine ran (--engines none)."""
    if not _engine_order(rows):
        return ""
    ratios = [r["rstf_over_best"] for r in rows if r.get("rstf_over_best") is not None]
    missing = len(rows) - len(ratios)
    if not ratios:
        return f"rstf / best other engine: no model measured ({missing} without a ratio)."
    parts = [f"rstf / best other engine: geomean {geomean(ratios):.2f}x over {len(ratios)} "
             f"model{'s' if len(ratios) > 1 else ''}"
             + (f" ({missing} without a ratio)" if missing else ""),
             f"rstf fastest on {sum(x < 1 for x in ratios)}/{len(ratios)}"]
    for engine, label in (("tf-eigen", "TF Eigen"), ("tf-onednn", "TF oneDNN")):
        if any(engine in r.get("engines", {}) for r in rows):
            parts.append(f"slower than {label} on: "
                         f"{', '.join(slower_than(rows, engine)) or 'none'}")
    return "; ".join(parts + fidelity_counts(rows) + tuning_counts(rows)) + "."


def tuning_counts(rows: list[dict]) -> list[str]:
    """The summary's part on where rstf's tiles came from: nothing where every row has the
    analytic model's alone; else on how many models an `rstf tune` profile chose some."""
    tuned = [r for r in rows if ((r.get("tuning") or {}).get("kernels_from_profile") or 0) > 0]
    if not tuned:
        return []
    return [f"tiles measured by rstf tune on {len(tuned)}/{len(rows)} models (their "
            f"'tuning' field)"]


def fidelity_counts(rows: list[dict]) -> list[str]:
    """The summary's fidelity parts: on how many models rstf's error is within
    SPREAD_RATIO_COUNTS x TF's spread, and on how many it is no further from the float64
    result than TF's own (exact_ratio <= 1), each over the models with that measure."""
    parts = []
    for key, what in (("spread_ratio", f"error within {SPREAD_RATIO_COUNTS:g}x TF's spread"),
                      ("exact_ratio", "no further from float64 than TF")):
        bound = SPREAD_RATIO_COUNTS if key == "spread_ratio" else 1.0
        xs = [r[key] for r in rows if r.get(key) is not None]
        if xs:
            parts.append(f"rstf {what} on {sum(x <= bound for x in xs)}/{len(xs)}")
    return parts


def chart(rows: list[dict], path: str, title: str = "") -> None:
    """zoo.png: one horizontal bar per model (as run, top to bottom) of rstf-poly's time over
    the best other engine's, a line at 1.0 (left of it rstf is the fastest), each bar named
    'Model@size' and labelled with the ratio and that engine; a model without a ratio (it
    failed, or no engine but rstf ran) gets a red cross and the reason."""
    import matplotlib

    matplotlib.use("Agg")  # headless: the sweep runs on servers and in CI
    import matplotlib.pyplot as plt

    from rstf.evaluation.bench import LABELS, save_png

    ratios = [r.get("rstf_over_best") for r in rows]
    top = max([x for x in ratios if x is not None] + [1.0]) * 1.35
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.38 * max(len(rows), 1)), dpi=100)
    for i, (r, x) in enumerate(zip(rows, ratios)):
        if x is None:
            ax.plot([0.02 * top], [i], marker="x", color="#cb181d", markersize=9, mew=2)
            ax.text(0.05 * top, i, _why_no_ratio(r)[:70], va="center", fontsize=8,
                    color="#cb181d")
            continue
        ax.barh(i, x, 0.7, color="#08519c" if x <= 1 else "#de2d26", edgecolor="#333333",
                linewidth=0.5)
        ax.text(x + 0.01 * top, i, f"{x:.2f}x vs {LABELS[r['best_other']['engine']]}",
                va="center", fontsize=8)
    ax.axvline(1.0, color="#222222", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_label(r) for r in rows], fontsize=9)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first model run at the top
    ax.set_xlim(0, top)
    ax.set_xlabel("rstf-poly time / best other engine's time (lower is better; "
                  "< 1: rstf fastest)")
    ax.set_title(title or "keras.applications zoo, batch 1", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    save_png(fig, path, "zoo chart")


def _why_no_ratio(r: dict) -> str:
    if "error" in r:
        return f"failed: {r['error']}"
    if r.get("rstf_problem"):
        return f"rstf-poly {r['rstf_problem']}"
    return "no other engine ran"


def git_commit() -> str:
    """`git rev-parse --short HEAD` of the repository, '-dirty' added when the work tree
    has changes; 'unknown' outside git."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no")
                       else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def docs_markdown(md: str, summary_line: str, png_name: str, command: str, date: str,
                  engines: tuple[str, ...], reps: int, rounds: int = 1) -> str:
    """docs/benchmarks/DATE-zoo.md: the machine (CPU model, cores), date, commit and command
    line, then the table, the summary and the chart."""
    from rstf.evaluation.bench import cpu_name

    turns = (f" in {rounds} rounds, the engines taking turns (each engine's process started "
             "again every round)") if rounds > 1 else ", each engine in its own process in turn"
    measure = (f"engines {', '.join(engines)}; median of {reps} timed calls after a "
               f"warm-up{turns}, "
               "inputs uniform in [0, 1) (in [0, 255) where the input column says so: "
               "a model that rescales raw pixels itself); errors vs TF Eigen" if engines
               else "rstf compared with TF (no engines timed)")
    lines = ["# keras.applications zoo: rstf against every engine", "",
             f"- machine: {cpu_name()}, {os.cpu_count()} cores",
             f"- date: {date}", f"- commit: {git_commit()}", f"- command: `{command}`",
             f"- measured: batch 1, {measure}", "", md, ""]
    if summary_line:
        lines += [summary_line, ""]
    if png_name:
        lines += [f"![rstf-poly time / best other engine's time]({png_name})", ""]
    return "\n".join(lines)


def write_outputs(rows: list[dict], out_dir: str, docs: bool, command: str,
                  engines: tuple[str, ...], reps: int, rounds: int = 1) -> str:
    """zoo.md (table + summary) and, when engines ran, zoo.png in `out_dir`; with `docs`
    also docs/benchmarks/DATE-zoo.md (+ .png beside it). Returns the table and summary."""
    md, line = table(rows), summary(rows)
    text = md + (f"\n\n{line}" if line else "")
    with open(os.path.join(out_dir, "zoo.md"), "w") as f:
        f.write(text + "\n")
    png = os.path.join(out_dir, "zoo.png") if engines else ""
    from rstf.evaluation.bench import LABELS

    others = ", ".join(LABELS[e] for e in engines if not e.startswith("rstf-"))
    title = (f"keras.applications zoo, batch 1, median of {reps}: rstf-poly / best of "
             f"{others}")
    if png:
        chart(rows, png, title)
    if docs:
        date = datetime.date.today().isoformat()
        base = os.path.join(ROOT, "docs", "benchmarks", f"{date}-zoo")
        os.makedirs(os.path.dirname(base), exist_ok=True)
        if png:
            shutil.copyfile(png, base + ".png")
        with open(base + ".md", "w") as f:
            f.write(docs_markdown(md, line, os.path.basename(base) + ".png" if png else "",
                                  command, date, engines, reps, rounds))
        print(f"zoo: wrote {base}.md", file=sys.stderr)
    return text
