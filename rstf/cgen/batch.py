"""Dynamic batch: the batch dimension stays symbolic end to end (issue 5).

A Placeholder whose dimension 0 is unknown (and not pinned with --input-shape) keeps it
unknown in the optimized graph. rstf then:

1. loads the graph a second time with that dimension pinned to 1 (TensorFlow's own shape
   inference gives every per-sample shape);
2. keeps a supported node only if it computes each sample from that sample alone
   (`separable_nodes`: shape rules here, op rules in each handler's `check_batch`);
3. generates and optimizes each subgraph for one sample, exactly as for a static graph;
4. wraps it (`wrap`) in an entry `rstf_sg_<i>(long N, long P, ...)` that runs the N samples,
   with versioned placement (rstf/poly/versioning.py): the batch loop is a statement loop
   whose trip count N is an isl parameter, so the occupation test `N >= c*P` depends on the
   parameters and SPECIALIZE makes a second version for `N <= c*P - 1`, where the batch
   loop stays sequential and each sample's own parallel loops (placed by the static pass:
   their trip counts are constants) use the threads. The dispatch reads N from the input
   tensors and P, the thread count TensorFlow gives the op, at run time. Where the batch
   loop is parallel it runs whole rounds only (N - N % P samples, the same count on every
   thread); the last N % P samples run one after the other on all the threads, as in the
   second version. Otherwise N = 3 on 2 threads would take two rounds of one-thread
   samples, slower than three samples on both threads.

The inner loops' placement is not re-versioned on P: the per-sample code is compiled once,
and its parallel loops (rows of 8 to 150 in the reference models) occupy any thread count
up to their trip count; OpenMP leaves extra threads idle.
"""
from __future__ import annotations

import islpy as isl

from .codegen import SubgraphCode, entry_params
from ..frontend.graph import Graph
from ..frontend.names import input_node
from ..opgen import get_handler
from ..opgen.base import Unsupported, numel
from ..poly import versioning


def dynamic_inputs(graph: Graph) -> dict[str, tuple]:
    """Placeholders whose dimension 0 alone is unknown: {name: batch-1 shape}."""
    out = {}
    for p in graph.placeholders:
        s = p.shape(0)
        if s and s[0] is None and all(d is not None for d in s[1:]):
            out[p.name] = (1, *s[1:])
    return out


def is_batched(dyn: Graph, one: Graph, tensor: str) -> bool:
    """Does `tensor` lead with the dynamic batch: [?, rest] here, [1, rest] at batch 1?"""
    sd, s1 = dyn.tensor_shape(tensor), one.tensor_shape(tensor)
    return (sd is not None and s1 is not None and len(sd) == len(s1) >= 1
            and sd[0] is None and s1[0] == 1 and tuple(sd[1:]) == tuple(s1[1:]))


def separable_nodes(dyn: Graph, one: Graph, supported: set[str]) -> tuple[set[str], dict]:
    """The supported nodes (of the batch-1 graph `one`) that run per sample, and for the
    others the reason."""
    ok, reasons = set(), {}
    for name in supported:
        node = one.nodes[name]
        if name not in dyn.nodes:
            reasons[name] = "not in the dynamic-batch graph (folded there)"
            continue
        h = get_handler(node.op)
        try:
            batched_in = 0
            for t in h.data_inputs(node):
                if input_node(t) not in dyn.nodes:
                    # made by a rewrite that needs the static batch (a dense layer merged
                    # into a BatchMatMulV2, a pointwise op moved ahead of a Reshape)
                    raise Unsupported(f"input {t} is not in the dynamic-batch graph")
                if one.is_const(t):
                    if not dyn.is_const(t):
                        raise Unsupported(f"input {t} depends on the batch size")
                elif is_batched(dyn, one, t):
                    batched_in += 1
                else:
                    raise Unsupported(f"input {t} does not lead with the dynamic batch")
            if not batched_in:
                raise Unsupported("reads no tensor of the dynamic batch")
            for i in range(h.num_outputs(node)):
                if not is_batched(dyn, one, f"{name}:{i}"):
                    raise Unsupported(f"output {i} does not lead with the dynamic batch")
            h.check_batch(node, one)
        except Unsupported as e:
            reasons[name] = f"dynamic batch: {e}"
            continue
        ok.add(name)
    return ok, reasons


def mark_batched(sg: SubgraphCode, dyn: Graph, one: Graph) -> None:
    """Flag the subgraph's slots that lead with the batch (the others are weights)."""
    for s in sg.inputs + sg.outputs:
        s.batched = is_batched(dyn, one, s.tensor)
    if not all(s.batched for s in sg.outputs) or not any(s.batched for s in sg.inputs):
        raise ValueError(f"subgraph {sg.index}: outputs must all lead with the batch")
    sg.dynamic_batch = True


def versions_for(sg: SubgraphCode, occupancy=1) -> list[versioning.Version]:
    """Placement of the batch loop of every node of the subgraph, versioned on N and P."""
    stmts = [versioning.PlacedStatement(f"S{k}", isl.Set(
        f"[N, P] -> {{ S{k}[n] : 0 <= n < N }}"), [0]) for k in range(len(sg.nodes))]
    return versioning.place(stmts, isl.Set("[N, P] -> { : N >= 1 and P >= 1 }"), occupancy)


def wrap(sg: SubgraphCode, occupancy=1) -> list[dict]:
    """Turn the one-sample C of `sg` into the N-sample entry with its versions, in place.

    Returns report.json's `versions` list. The workspace becomes one slice per thread."""
    versions = versions_for(sg, occupancy)
    sample = f"{sg.entry}_sample"
    head = f"void {sg.entry}("
    if sg.source.count(head) != 1:
        raise ValueError(f"cannot find the definition of {sg.entry}")
    source = sg.source.replace(head, f"static void {sample}(")
    params = ["long N", "long P"] + entry_params(sg.inputs, sg.outputs)
    # Slices start 64-byte aligned, as TensorFlow aligns the whole workspace.
    ws = -(-max(sg.workspace_bytes, 0) // 64) * 64
    sg.workspace_bytes = ws

    def args(ws_expr: str) -> str:
        a = [f"{s.cname} + n * {numel(s.shape)}" if s.batched else s.cname
             for s in sg.inputs + sg.outputs]
        return ", ".join(a + [ws_expr])

    lines = [source.rstrip(), "",
             "/* Dynamic batch (rstf/cgen/batch.py): the function above computes one sample; the",
             "   entry below runs N of them with versioned placement (rstf/poly/versioning.py).",
             f"   The workspace holds one slice of {ws} bytes per thread. */",
             "int omp_get_thread_num(void);", ""]
    names = []
    for i, v in enumerate(versions):
        name = f"{sg.entry}_v{i}"
        names.append(name)
        placed = v.placement["S0"] == 0
        ctx = versioning.context_c(v.context)
        lines.append(f"/* Version {i}, context {ctx}: "
                     + ("the batch loop is distributed over the P threads in whole rounds, "
                        "each sample sequential; the last N % P samples use the threads of "
                        "their own parallel loops. */" if placed else
                        "the batch loop is sequential, each sample uses the threads of its "
                        "own parallel loops. */"))
        lines.append(f"static void {name}({', '.join(params)})")
        lines.append("{")
        if placed:
            lines.append("    const long rounds = N - N % P;")
            lines.append("    #pragma omp parallel for num_threads(P) schedule(static)")
            lines.append("    for (long n = 0; n < rounds; ++n)")
            lines.append(f"        {sample}({args(f'(char *)ws + (size_t)omp_get_thread_num() * {ws}')});")
            lines.append("    for (long n = rounds; n < N; ++n)")
            lines.append(f"        {sample}({args('ws')});")
        else:
            lines.append("    (void)P;")
            lines.append("    for (long n = 0; n < N; ++n)")
            lines.append(f"        {sample}({args('ws')});")
        lines.append("}")
        lines.append("")
    call_args = ", ".join(["N", "P"] + [s.cname for s in sg.inputs + sg.outputs] + ["ws"])
    lines.append(f"void {sg.entry}({', '.join(params)})")
    lines.append("{")
    lines.append(versioning.dispatch_c([v.context for v in versions],
                                       lambda i: f"{names[i]}({call_args});").rstrip("\n"))
    lines.append("}")
    sg.source = "\n".join(lines) + "\n"
    return versioning.describe(versions)
