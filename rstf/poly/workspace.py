"""The workspace of the new C: which buffers a scheduled group keeps local, the re-planned
workspace offsets (`replan`, through `memplan`), and the entry function that calls the
scheduled functions on them (`entry_source`), with the header's tensor table rewritten for
the inputs fed in another layout (`retable_header`).
"""
from __future__ import annotations

import re

from pycparser import c_ast

from .groups import Group
from .cparse import c_text
from .scop import Scop


def local_buffers(cs: Group) -> set[str]:
    """The buffers a scheduled group keeps off the workspace: contracted to scalars, to
    registers or to one row (a band's, or one of its parts'), or to one block of rows."""
    out = set(cs.rows) | set(cs.blocked)
    for p in cs.parts:
        out |= set(p.rows) | set(p.chain.contracted if p.chain else ())
    return out


def group_buffers(cs: Group) -> tuple[list[str], set[str]]:
    """(the arrays a scheduled group's function takes, in order of first access; those it
    writes): every array its statements access, but those it keeps off the workspace."""
    buffers, written = [], set()
    local = local_buffers(cs)
    for s in cs.statements:
        for a in s.accesses:
            if a.array not in buffers and a.array not in local:
                buffers.append(a.array)
            if a.write:
                written.add(a.array)
    return buffers, written


def retable_header(header: str, given: dict) -> str:
    """The generated file's tensor table with each weight fed as Winograd's U at its new
    shape (whoever runs the C allocates the inputs from this table: benchmarks/)."""
    for w, wp in given.items():
        header = re.sub(rf"^(\s*\*\s+{w}: input float)\([\d, ]*\)(.*)$",
                        lambda m, wp=wp: f"{m.group(1)}({wp.e}, {wp.c}, {wp.k}){m.group(2)} "
                        f"[fed as Winograd's U: {wp.spec}]", header, flags=re.M)
    return header


def scratch_name(call: int) -> str:
    """The workspace name of a Winograd group's scratch (U and V)."""
    return f"rstf_wg{call}"


def workspace_param(scop: Scop) -> str:
    """The entry function's workspace parameter (its last)."""
    fdef = next(f for f in scop.ast.ext
                if isinstance(f, c_ast.FuncDef) and f.decl.name == scop.entry)
    return fdef.decl.type.args.params[-1].name


def scalar_statement_names(schedules: list[Group]) -> set[str]:
    """Original statements with instances outside any kernel: in some group's AST
    (a kernel's leftover rows or columns, a chain's head, an untiled statement)."""
    out = set()
    for cs in schedules:
        for p in cs.parts:
            at = cs.ast_time[p.call]
            kernels = {k.name for k in p.kernels}
            out |= {n for n, m in at.items() if n not in kernels and not m.is_empty()}
    return out


def replan(scop: Scop, schedules: list[Group],
           scratch: dict[str, int] | None = None) -> tuple[dict[str, int], int]:
    """The workspace plan of the scheduled program: ({temporary: byte offset}, bytes).

    The generated C's plan shares bytes between temporaries whose lifetimes, op by op, do
    not overlap; fusion runs several ops as one step, so the plan is redone with one step
    per scheduled group (buffers of one group never share bytes). Temporaries contracted
    to scalars or to a row buffer need no workspace at all. `scratch`: {name: bytes} of
    buffers a group's own code needs while it runs (`scratch_name(call)`), beside its arrays."""
    from ..cgen.memplan import Buffer, plan

    local = set().union(*map(local_buffers, schedules))
    live: dict[str, list[int]] = {}
    for step, cs in enumerate(schedules):
        for s in cs.statements:
            for a in s.accesses:
                if scop.buffers[a.array].role == "temp" and a.array not in local:
                    live.setdefault(a.array, [step, step])[1] = step
    steps = {scratch_name(cs.call): step for step, cs in enumerate(schedules)}
    buffers = [Buffer(name, size, steps[name], steps[name])
               for name, size in (scratch or {}).items()]
    for name, (start, end) in live.items():
        b = scop.buffers[name]
        if b.size is None:
            raise ValueError(f"temporary {name} has a parametric size")
        buffers.append(Buffer(name, b.size * SIZEOF.get(b.ctype, 8), start, end))
    return plan(buffers)


SIZEOF = {"float": 4, "double": 8, "int": 4, "long": 8, "short": 2, "char": 1,
           "signed char": 1, "unsigned char": 1, "long long": 8}


def entry_source(scop: Scop, calls_text: dict[int, str], offsets: dict[str, int]) -> str:
    fdef = next(f for f in scop.ast.ext
                if isinstance(f, c_ast.FuncDef) and f.decl.name == scop.entry)
    lines = [c_text(fdef.decl), "{"]
    for item in fdef.body.block_items or []:
        if isinstance(item, c_ast.Decl) and item.name in offsets:
            b = scop.buffers[item.name]
            ws = item.init  # (T *)((char *)ws + OFFSET): keep its workspace name
            base = c_text(ws).split("(char *)")[1].split(")")[0].strip(" ()")
            lines.append(f"{b.ctype} *{item.name} = ({b.ctype} *)((char *){base} + "
                         f"{offsets[item.name]});")
    for call in scop.calls:
        lines.append(f"/* {call.node} ({call.op}) */" if call.op else f"/* {call.node} */")
        lines.append(calls_text.get(call.index, "/* no statements */"))
    lines.append("}")
    return "\n".join(lines) + "\n"
