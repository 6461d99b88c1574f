"""Subgraph code generation: one C source per subgraph (rstream-tf.txt §II.C-D).

`generate_subgraph` calls every node's handler, deduplicates identical op functions, plans
the workspace for temporaries, and emits an entry function that calls the op functions in
topological order:

    void rstf_sg_<i>(const float *in0, ..., float *out0, ..., void *ws)

Inputs are the tensors the subgraph reads from outside (weights included: they stay Const
nodes in the graph), outputs the tensors read outside it or returned by the model.
"""
from __future__ import annotations

import dataclasses
import hashlib

from .. import __version__
from . import chelpers, memplan
from .cescape import c_comment
from .cformat import format_c
from ..frontend.graph import Graph, split_tensor
from ..opgen import get_handler
from ..opgen.base import C_TYPES, ArrayParam, numel, render
from ..opgen.shape import Copy
from ..frontend.padfold import absorb_pads


@dataclasses.dataclass
class Slot:
    """One tensor of the subgraph as the C code sees it."""

    tensor: str  # TF tensor name ('node:i'), or 'node/scratch:name' for op scratch
    cname: str  # in0 / out0 / t0
    kind: str  # input | output | temp
    shape: tuple[int, ...]
    dtype: object  # numpy dtype
    offset: int = 0  # byte offset in the workspace (temps only)
    batched: bool = False  # leads with the dynamic batch; `shape` is one sample's (batch.py)
    # A frozen weight (a constant input): the spliced op holds it as a tensor attribute,
    # read once when TensorFlow builds the kernel, instead of a Const input (splice.py).
    weight: bool = False

    @property
    def ctype(self) -> str:
        return C_TYPES[self.dtype][0]

    @property
    def nbytes(self) -> int:
        return numel(self.shape) * self.dtype.itemsize

    @property
    def comment(self) -> str:
        return c_comment(self.tensor)


@dataclasses.dataclass
class SubgraphCode:
    index: int
    nodes: list[str]
    entry: str
    source: str
    inputs: list[Slot]
    outputs: list[Slot]
    temps: list[Slot]
    workspace_bytes: int
    temp_bytes_unshared: int  # what the temporaries would take without reuse
    flops: int
    op_functions: int  # distinct op functions after deduplication
    dynamic_batch: bool = False  # entry takes (long N, long P, ...): see rstf/cgen/batch.py
    # constant inputs the C reads in panel layout: cname -> panel width (poly/prepack.py)
    prepacked: dict = dataclasses.field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def _array_decl(p: ArrayParam, const: bool) -> str:
    dims = list(p.shape) or [1]
    rest = "".join(f"[{d}]" for d in dims[1:])
    return f"{'const ' if const else ''}{p.ctype} {p.name}[restrict {dims[0]}]{rest}"


def _cast(p: ArrayParam, const: bool, ptr: str) -> str:
    """Pointer `ptr` cast to the type the op-function parameter `p` decays to."""
    dims = list(p.shape) or [1]
    q = "const " if const else ""
    if len(dims) == 1:
        return f"({q}{p.ctype} *){ptr}"
    return f"({q}{p.ctype} (*){''.join(f'[{d}]' for d in dims[1:])}){ptr}"


def generate_subgraph(graph: Graph, nodes: list[str], index: int,
                      expose_all: bool = False) -> SubgraphCode:
    """C source for one subgraph; `nodes` must be in topological order.

    With `expose_all`, every tensor a node produces is an output (no temporaries): the
    per-node debugging build behind `rstf compare --per-subgraph`.
    """
    members = set(nodes)
    step_of = {n: s for s, n in enumerate(nodes)}
    # Zero Pads read only by this subgraph's convolutions become the convolutions' own
    # (guarded) padding: no padded copy (rstf/frontend/padfold.py).
    absorbed, rewritten = absorb_pads(graph, nodes)
    emitted = []
    for name in nodes:
        if name in absorbed:
            continue
        node = rewritten.get(name, graph.nodes[name])
        handler = get_handler(node.op)
        emitted.append((node, handler.data_inputs(node), handler.emit(node, graph)))

    # Classify tensors: external inputs, outputs (read outside or returned), temporaries.
    inputs: dict[str, Slot] = {}
    for node, data_inputs, _ in emitted:
        for t in data_inputs:
            if split_tensor(t)[0] not in members and t not in inputs:
                inputs[t] = Slot(t, f"in{len(inputs)}", "input", graph.tensor_shape(t),
                                 graph.tensor_dtype(t))
    read_outside = set()
    for name in nodes:
        for consumer in graph.consumers[name]:
            if consumer not in members:
                for t in graph.nodes[consumer].inputs:
                    if split_tensor(t)[0] == name:
                        read_outside.add(t)
    outputs: dict[str, Slot] = {}
    temps: dict[str, Slot] = {}
    views = {} if expose_all else view_aliases(emitted, read_outside, set(graph.outputs))

    def root(t: str) -> str:
        while t in views:
            t = views[t]
        return t

    last_use: dict[str, int] = {}
    for node, data_inputs, _ in emitted:
        for t in data_inputs:
            last_use[root(t)] = step_of[node.name]
    buffers = []
    for node, _, fn in emitted:
        if f"{node.name}:0" in views:
            continue
        s = step_of[node.name]
        for i in range(get_handler(node.op).num_outputs(node)):
            t = f"{node.name}:{i}"
            shape, dtype = node.out_shapes[i], node.out_dtypes[i]
            if expose_all or t in read_outside or node.name in graph.outputs:
                outputs[t] = Slot(t, f"out{len(outputs)}", "output", shape, dtype)
            else:
                temps[t] = Slot(t, f"t{len(temps)}", "temp", shape, dtype)
                buffers.append(memplan.Buffer(t, temps[t].nbytes, s, last_use.get(t, s)))
        for p in fn.scratch:
            t = f"{node.name}/scratch:{p.name}"
            temps[t] = Slot(t, f"t{len(temps)}", "temp", p.shape, _dtype_of(p.ctype))
            buffers.append(memplan.Buffer(t, temps[t].nbytes, s, s))
    offsets, workspace = memplan.plan(buffers)
    for t, slot in temps.items():
        slot.offset = offsets[t]

    # Op functions, deduplicated by text: identical specialisations share one function.
    functions: dict[str, str] = {}
    calls = []
    flops = 0
    slots = {**inputs, **outputs, **temps}
    slots.update({t: slots[root(t)] for t in views})
    for node, data_inputs, fn in emitted:
        flops += get_handler(node.op).flops(node, graph)
        comment = f"{c_comment(node.name)} ({c_comment(node.op)})"
        if f"{node.name}:0" in views:
            calls.append({"fname": None, "args": [], "comment": f"{comment}: a view of "
                          f"{slots[data_inputs[0]].cname}, no copy"})
            continue
        key = _function_text(fn, "@NAME@")
        fname = functions.setdefault(key, f"op_{len(functions)}")
        args = [_cast(p, True, slots[t].cname) for p, t in zip(fn.inputs, data_inputs)]
        args += [_cast(p, False, slots[f"{node.name}:{i}"].cname) for i, p in enumerate(fn.outputs)]
        args += [_cast(p, False, slots[f"{node.name}/scratch:{p.name}"].cname) for p in fn.scratch]
        calls.append({"fname": fname, "args": args, "comment": comment})

    entry = f"rstf_sg_{index}"
    params = entry_params(inputs.values(), outputs.values())
    texts = [k.replace("@NAME@", v) for k, v in functions.items()]
    source = render("subgraph.c.j2", version=__version__, index=index, nodes=nodes, flops=flops,
                    tensors=[*inputs.values(), *outputs.values(), *temps.values()],
                    helpers=chelpers.helpers_for(texts), functions=texts,
                    entry=entry, params=params, temps=list(temps.values()), calls=calls,
                    workspace=workspace)
    return SubgraphCode(index, list(nodes), entry, format_c(source), list(inputs.values()),
                        list(outputs.values()), list(temps.values()), workspace,
                        sum(s.nbytes for s in temps.values()), flops, len(functions))


def view_aliases(emitted, read_outside: set, graph_outputs: set) -> dict[str, str]:
    """{tensor: the tensor whose buffer it is}: the output of each flat copy (Reshape,
    ExpandDims, Squeeze, Identity: `shape.Copy`) that stays inside the subgraph is its
    input's bytes under another shape, so it gets no buffer and no call. Its readers
    declare their own shapes for the shared buffer (the raiser linearises a buffer seen
    through several shapes), and the memory plan keeps the shared buffer live until the
    last reader of either. A copy the subgraph returns is kept: an output is its own
    buffer."""
    out = {}
    for node, data_inputs, _ in emitted:
        t = f"{node.name}:0"
        if (isinstance(get_handler(node.op), Copy) and t not in read_outside
                and node.name not in graph_outputs and len(data_inputs) == 1):
            out[t] = data_inputs[0]
    return out


def entry_params(inputs, outputs) -> list[str]:
    """The entry function's parameters: inputs, outputs, then the workspace."""
    return ([f"const {s.ctype} *{s.cname}" for s in inputs]
            + [f"{s.ctype} *{s.cname}" for s in outputs] + ["void *ws"])


def _function_text(fn, name: str) -> str:
    params = ([_array_decl(p, True) for p in fn.inputs]
              + [_array_decl(p, False) for p in fn.outputs + fn.scratch])
    return render("op_function.c.j2", summary=c_comment(fn.summary), name=name, params=params,
                  body=fn.body)


def _dtype_of(ctype: str):
    return next(dt for dt, (c, _, _) in C_TYPES.items() if c == ctype)
