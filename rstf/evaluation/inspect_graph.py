"""`rstf inspect`: what `rstf optimize` would do with a model, without generating anything.

`inspect(model, ...)` loads the model as `optimize --optimizer poly` does (constants folded,
and with `fold_scales`, `--fold-scales on`, batch norm's per-channel scales folded into
the weights: rstf/frontend/scalefold.py), so its node counts and partitions are those
`optimize` cuts.
It returns a dict (what `rstf inspect --json` prints):

* `ops`: per op type, its node count, how many rstf supports and how many stay in
  TensorFlow (with the first reason), and its conv/matmul FLOPs (`pipeline.node_flops`);
* `subgraphs`: the maximal convex clusters of supported nodes worth a custom op, each with
  its nodes, FLOPs, op mix and the indices of its `partitions`;
* `partitions`: the parts METIS cut the clusters into (at most `max_ops` nodes each): these
  are the custom ops `rstf optimize` generates, `subgraph_<index>`, in the same order;
* `skipped`: clusters of supported nodes that only move data and stay in TensorFlow.

With `svg`, the graph is drawn by graphviz (rstf/evaluation/dot.py): one colour per partition, each
partition boxed as a cluster, unsupported nodes grey, with a legend.
"""
from __future__ import annotations

import collections
import os

from ..errors import RstfError


def inspect(model: str, input_shapes=None, outputs=None, max_ops: int | None = None,
            svg: str | None = None, fold_scales: bool = False) -> dict:
    """Inspect `model` (module docstring); draw it into `svg` when given."""
    from . import dot
    from ..frontend.graph import split_tensor
    from ..pipeline import DEFAULT_MAX_OPS, load_for_codegen, node_flops, partition, select

    max_ops = DEFAULT_MAX_OPS if max_ops is None else max_ops
    if max_ops < 1:
        raise RstfError("--max-ops must be at least 1")
    if svg is not None:
        dot.check_output(svg)  # fail before the slow part: no `dot`, or nowhere to write
    graph, dynamic, one, keep = load_for_codegen(model, input_shapes, outputs, fold_scales,
                                                 lambda m: None)
    placeholders = graph.placeholders  # their shapes as given, dynamic batch included
    graph = one or graph  # a dynamic batch: what `optimize` generates code for, per sample
    sel = select(graph, keep)
    splits = partition(sel, max_ops, lambda msg: None)
    flops = {n: node_flops(graph, n) for n in graph.nodes}

    def mix(nodes) -> dict[str, int]:
        return dict(collections.Counter(graph.nodes[n].op for n in nodes).most_common())

    def group(nodes, **extra) -> dict:
        return {**extra, "nodes": len(nodes), "flops": sum(flops[n] for n in nodes),
                "ops": mix(nodes)}

    ops = {}
    for name, n in graph.nodes.items():
        if name not in sel.supported and name not in sel.reasons:
            continue  # an input, a constant or a read of one: nothing to compute
        row = ops.setdefault(n.op, {"op": n.op, "count": 0, "supported": 0, "unsupported": 0,
                                    "flops": 0, "reason": None})
        row["count"] += 1
        row["flops"] += flops[name]
        if name in sel.supported:
            row["supported"] += 1
        else:
            row["unsupported"] += 1
            row["reason"] = row["reason"] or sel.reasons[name]
    subgraphs, partitions = [], []
    for ci, (cluster, split) in enumerate(zip(sel.clusters, splits)):
        first = len(partitions)
        for part in split:
            i = len(partitions)
            partitions.append(group(part, index=i, name=f"subgraph_{i}", subgraph=ci,
                                    node_names=list(part)))
        subgraphs.append(group(cluster, index=ci,
                               partitions=list(range(first, len(partitions)))))
    result = {
        "model": os.path.abspath(model),
        "inputs": {p.name: None if p.shape(0) is None else list(p.shape(0))
                   for p in placeholders},
        "outputs": graph.outputs,
        "dynamic_batch": sorted(dynamic),
        "max_ops": max_ops,
        "nodes_graph": len(graph.nodes),
        "nodes_folded": len(graph.folded),
        "fold_scales": fold_scales,
        "tf_scales_folded": len(graph.tf_scales_folded),
        "scales_folded": len(graph.scales_folded),
        "tensordots_merged": len(graph.tensordots_merged),
        "einsums_lowered": len(graph.einsums_lowered),
        "nodes_computing": len(sel.supported) + len(sel.reasons),
        "nodes_supported": len(sel.supported),
        "nodes_in_partitions": sum(p["nodes"] for p in partitions),
        "flops_total": sum(flops.values()),
        "flops_supported": sum(flops[n] for n in sel.supported),
        "flops_in_partitions": sum(p["flops"] for p in partitions),
        "ops": sorted(ops.values(), key=lambda r: (-r["flops"], -r["count"], r["op"])),
        "subgraphs": subgraphs,
        "partitions": partitions,
        "skipped": [group(c) for c in sel.skipped],
        "svg": None,
    }
    if svg is not None:
        part_of = {n: p["index"] for p in partitions for n in p["node_names"]}
        drawn = {n for n in graph.nodes if n in sel.supported or n in sel.reasons}
        drawn.update(p.name for p in graph.placeholders)
        kinds = {}
        for n in drawn:
            kinds[n] = ("input" if graph.nodes[n].op == "Placeholder" else
                        "partition" if n in part_of else
                        "supported" if n in sel.supported else "unsupported")
        edges = set()
        for n in drawn:
            node = graph.nodes[n]
            for t in node.inputs:
                src = split_tensor(t)[0]
                if src in drawn:
                    edges.add((src, n, False))
            for c in node.control_inputs:
                if c in drawn:
                    edges.add((c, n, True))
        nodes = [dot.DrawNode(n, graph.nodes[n].op, kinds[n], part_of.get(n))
                 for n in graph.nodes if n in drawn]
        legend = [f"subgraph_{p['index']}: {p['nodes']} nodes, {_flops(p['flops'])} FLOPs"
                  for p in partitions]
        dot.render_svg(dot.to_dot(nodes, sorted(edges), legend, os.path.basename(model)), svg)
        result["svg"] = os.path.abspath(svg)
    return result


def _flops(f: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if f >= scale:
            return f"{f / scale:.2f} {unit}"
    return str(f)


def _mix(ops: dict[str, int], top: int = 5) -> str:
    items = list(ops.items())
    text = ", ".join(f"{op} x{k}" for op, k in items[:top])
    return text + (f", +{len(items) - top} more" if len(items) > top else "")


def print_inspection(r: dict, console=None) -> None:
    """The tables `rstf inspect` prints (rich)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if console is None:
        import sys

        wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        console = Console(highlight=False, width=120 if wide else None)
    pct = lambda x, y: f"{100.0 * x / y:.1f}%" if y else "n/a"  # noqa: E731
    shapes = ", ".join(f"{k} {v if v is None else 'x'.join(map(str, v))}"
                       for k, v in r["inputs"].items())
    console.print(f"{r['model']}: {r['nodes_graph']} nodes ({r['nodes_folded']} folded "
                  f"constants, {r['tf_scales_folded'] + r['scales_folded']} scales folded into "
                  f"weights), "
                  f"inputs: {shapes or 'none'}", markup=False, soft_wrap=True)
    console.print(f"supported: {r['nodes_supported']}/{r['nodes_computing']} computing nodes "
                  f"({pct(r['nodes_supported'], r['nodes_computing'])}); in partitions: "
                  f"{r['nodes_in_partitions']} nodes, "
                  f"{pct(r['flops_in_partitions'], r['flops_total'])} of "
                  f"{_flops(r['flops_total'])} conv/matmul FLOPs", markup=False, soft_wrap=True)

    t = Table(title="Op types", title_justify="left")
    for col, just in (("op", "left"), ("nodes", "right"), ("supported", "right"),
                      ("left to TF", "right"), ("FLOPs", "right"), ("why left to TF", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for row in r["ops"]:
        cells = (row["op"], str(row["count"]), str(row["supported"]), str(row["unsupported"]),
                 _flops(row["flops"]) if row["flops"] else "", row["reason"] or "")
        t.add_row(*map(Text, cells), style="yellow" if row["unsupported"] else None)
    console.print(t)

    t = Table(title=f"Subgraphs and their partitions (custom ops, at most {r['max_ops']} "
              "nodes each)", title_justify="left")
    for col, just in (("subgraph", "left"), ("custom op", "left"), ("nodes", "right"),
                      ("FLOPs", "right"), ("% FLOPs", "right"), ("op mix", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for s in r["subgraphs"]:
        parts = [r["partitions"][i] for i in s["partitions"]]
        if len(parts) > 1:
            t.add_row(*map(Text, (f"S{s['index']}", f"{len(parts)} parts", str(s["nodes"]),
                                  _flops(s["flops"]), pct(s["flops"], r["flops_total"]),
                                  _mix(s["ops"]))), style="bold")
        for p in parts:
            t.add_row(*map(Text, ("" if len(parts) > 1 else f"S{s['index']}", p["name"],
                                  str(p["nodes"]), _flops(p["flops"]),
                                  pct(p["flops"], r["flops_total"]), _mix(p["ops"]))))
    console.print(t)
    if r["skipped"]:
        console.print(f"{len(r['skipped'])} supported cluster(s) only move data and stay in "
                      f"TensorFlow: " + "; ".join(_mix(s["ops"], 3) for s in r["skipped"]),
                      markup=False)
    if r["svg"]:
        # A path to copy: never wrapped at the terminal's width.
        console.print(f"drawing: {r['svg']}", markup=False, soft_wrap=True)
