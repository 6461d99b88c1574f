"""Raise a generated subgraph's C into the polyhedral model (isl).

Contract: `raise_subgraph(source, entry)` parses the C with pycparser, inlines every op
function called by the entry, and returns a `Scop`: one `Statement` per assignment, with its
isl iteration domain (loop bounds and affine `if` guards), its original schedule (2d+1
textual order over the whole inlined program), and its read and write access relations on
the *buffers* of the entry function (in0, out0, t3, ...). Code outside the raisable subset
of docs/design.md raises `NotRaisable` naming the construct and its line; the caller then
leaves that subgraph unoptimized, never mis-compiled.

The subset: op functions whose parameters are arrays with constant (or parametric) extents,
`restrict`-qualified or not, and `int` scalars; bodies made of
`for (int v = LB; v < UB; ++v)` loops with affine bounds, `if` guards that are `&&` chains of
affine comparisons (no `else`), and assignments `A[...] = expr` / `A[...] op= expr` with
affine subscripts. Right-hand sides may hold anything side-effect free: ternaries,
comparisons, casts and pure math.h calls are data-dependent choices, i.e. reads of the
arrays they reference. The entry function declares its buffers as flat pointers
(`const float *in0`, `float *out0`, `void *ws`, `int N` for an unknown extent), the
temporaries as `float *t3 = (float *)((char *)ws + OFFSET);`, then calls op functions, each
after a `/* node (OpType) */` comment.

An op function's array parameter is a *view* of a buffer: Reshape copies view both sides
flat, Softmax views its operand as [rows][classes]. A buffer whose views all agree keeps
that shape; any other is linearised (row-major, still affine since inner extents are
constants). Temporaries are distinct buffers here even when the memory plan lets them share
bytes (their offsets are recorded): the plan is redone after scheduling.

An `int` parameter of the entry function becomes an isl parameter: domains and accesses are
then parametric, and `Scop.context` bounds the parameters (non-negative).

Affine forms are dicts {name or 1: integer coefficient}; names are iterators and isl
parameters (1 is the constant term).

This module owns the walk: the entry's buffers and their views, the inlining of op calls
and the statement builder (`_Builder`). The scop's types live in `scop.py`, the reading of
C text (parsing, affine expressions, guards, allowed right-hand sides) in `cparse.py`.
"""
from __future__ import annotations

import dataclasses
import math
import re

import islpy as isl
from pycparser import c_ast

from ..cgen import chelpers
from .cparse import (ASSIGN_OPS, PURE_FUNCTIONS, AffineError, affine_of, array_refs, c_text,
                     check_rhs, comment_node, comments_by_end_line, constraint_of, extent_of,
                     fmt_affine, guards_of, line_of, parse_c, shape_key, type_names)
from .scop import Access, Affine, ArrayInfo, Call, NotRaisable, Scop, Statement, isl_name


# --------------------------------------------------------------------------- parsing


# --------------------------------------------------------------------------- affine forms


# --------------------------------------------------------------------------- declarations


@dataclasses.dataclass
class _Param:
    name: str
    kind: str  # array | int
    shape: tuple = ()  # ints or Affine extents
    ctype: str = ""
    restrict: bool = False
    const: bool = False


def _op_params(fdef: c_ast.FuncDef, env: dict | None) -> list[_Param]:
    """The parameters of an op function; extents are evaluated in `env` (None: kinds and
    names only, before the int arguments are bound)."""
    out = []
    args = fdef.decl.type.args
    for d in (args.params if args else []):
        if isinstance(d, c_ast.Typename):  # `void`
            continue
        t = d.type
        if isinstance(t, c_ast.ArrayDecl):
            dims, restrict = [], "restrict" in (t.dim_quals or [])
            while isinstance(t, c_ast.ArrayDecl):
                dims.append(t.dim)
                t = t.type
            if not isinstance(t, c_ast.TypeDecl):
                raise NotRaisable(f"{line_of(d)}: parameter '{d.name}' is an array of pointers")
            shape = () if env is None else tuple(extent_of(x, env, d) for x in dims)
            out.append(_Param(d.name, "array", shape, type_names(t), restrict,
                              "const" in (t.quals or [])))
        elif isinstance(t, c_ast.TypeDecl) and type_names(t) in ("int", "long", "long int"):
            out.append(_Param(d.name, "int"))
        else:
            raise NotRaisable(f"{line_of(d)}: parameter '{d.name}' of {fdef.decl.name} is "
                              f"neither an array nor an int (pointer parameters are outside "
                              f"the subset)")
    return out


# --------------------------------------------------------------------------- raising


def raise_subgraph(source: str, entry: str) -> Scop:
    """Raise the subgraph function `entry` of `source` (generated C) into a `Scop`."""
    ast = parse_c(source)
    funcs = {f.decl.name: f for f in ast.ext if isinstance(f, c_ast.FuncDef)}
    if entry not in funcs:
        raise NotRaisable(f"no entry function {entry!r}")
    entry_def = funcs[entry]
    comments = comments_by_end_line(source)
    buffers: dict[str, ArrayInfo] = {}
    params: list[str] = []
    workspace = "ws"
    args = entry_def.decl.type.args
    for p in (args.params if args else []):
        if isinstance(p, c_ast.Typename):
            continue
        t = p.type
        if isinstance(t, c_ast.PtrDecl) and type_names(t) == "void":
            workspace = p.name
            continue
        if isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.TypeDecl):
            role = "input" if "const" in (t.type.quals or []) else "output"
            buffers[p.name] = ArrayInfo(p.name, type_names(t), (), role)
        elif isinstance(t, c_ast.TypeDecl) and type_names(t) in ("int", "long", "long int"):
            params.append(p.name)
        else:
            raise NotRaisable(f"{line_of(p)}: entry parameter '{p.name}' is neither a buffer "
                              f"pointer nor an int")
    isl_params = [isl_name(p) for p in params]
    penv = {p: {q: 1} for p, q in zip(params, isl_params)}

    calls: list[tuple[Call, c_ast.FuncDef, dict]] = []  # (call, def, {param: _Param})
    for item in entry_def.body.block_items or []:
        if isinstance(item, c_ast.Decl) and isinstance(item.type, c_ast.PtrDecl):
            # float *t3 = (float *)((char *)ws + OFFSET);
            init = re.sub(r"[\s()]", "", c_text(item.init)) if item.init is not None else ""
            off = re.fullmatch(rf"\w+\*(?:char\*)?{workspace}(?:\+(\d+))?", init)
            if not off:
                raise NotRaisable(f"{line_of(item)}: temporary '{item.name}' is not a workspace "
                                  f"slice '(T *)((char *)ws + OFFSET)'")
            buffers[item.name] = ArrayInfo(item.name, type_names(item.type), (), "temp",
                                           int(off.group(1) or 0))
        elif (isinstance(item, c_ast.FuncCall) and isinstance(item.name, c_ast.ID)
              and item.name.name in funcs):
            fdef = funcs[item.name.name]
            if fdef is entry_def:
                raise NotRaisable(f"{line_of(item)}: recursive call of the entry function")
            fparams = _op_params(fdef, None)
            actual = item.args.exprs if item.args else []
            if len(actual) != len(fparams):
                raise NotRaisable(f"{line_of(item)}: {fdef.decl.name} called with "
                                  f"{len(actual)} arguments, declared with {len(fparams)}")
            binding = {}
            for fp, arg in zip(fparams, actual):
                if fp.kind == "array":
                    binding[fp.name] = _buffer_arg(arg, buffers)
                else:
                    try:
                        binding[fp.name] = affine_of(arg, penv)
                    except AffineError:
                        raise NotRaisable(f"{line_of(arg)}: int argument '{c_text(arg)}' is not "
                                          f"an affine expression of the parameters") from None
            line = item.coord.line
            node, op = comment_node(comments.get(line - 1, ""))
            calls.append((Call(len(calls), fdef.decl.name, node, op, line, binding), fdef,
                          {}))
        else:
            what = (f"call of '{c_text(item.name)}' (not an op function of this file)"
                    if isinstance(item, c_ast.FuncCall) else type(item).__name__)
            raise NotRaisable(f"{line_of(item)}: {what} in the entry function (only temporaries "
                              f"and op-function calls)")

    # Extents may use the int arguments: evaluate them per call.
    for call, fdef, decl in calls:
        env = dict(penv)
        env.update({k: v for k, v in call.binding.items() if isinstance(v, dict)})
        for fp in _op_params(fdef, env):
            decl[fp.name] = fp
    _unify_views(calls, buffers)

    builder = _Builder(buffers, isl_params)
    counter = [0]
    for call, fdef, decl in calls:
        env = dict(penv)
        env.update({k: v for k, v in call.binding.items() if isinstance(v, dict)})
        builder.call, builder.decl = call, decl
        builder.walk(fdef.body, [], [], env, (), counter)
    statements = builder.statements
    depth = max((len(s.path) for s in statements), default=1)
    for s in statements:
        s.schedule = _schedule_map(s, depth, builder.prefix)
    context = isl.Set(f"{builder.prefix}{{ : {' and '.join(f'{p} >= 0' for p in isl_params)}}}"
                      if isl_params else "{ : }")
    return Scop(statements, buffers, params, context, [c for c, _, _ in calls], entry, ast)


def _buffer_arg(arg, buffers) -> str:
    """The buffer an op-function argument names: `t3`, `(const float (*)[5])t3`."""
    e = arg
    while isinstance(e, c_ast.Cast):
        e = e.expr
    if isinstance(e, c_ast.ID) and e.name in buffers:
        return e.name
    raise NotRaisable(f"{line_of(arg)}: argument '{c_text(arg)}' is not a (cast) buffer of the "
                      f"entry function (pointer arithmetic is outside the subset)")


def _unify_views(calls, buffers) -> None:
    """Give each buffer its access shape: its single view, or flat when views disagree."""
    views: dict[str, list] = {}
    for call, _, decl in calls:
        for p, buf in call.binding.items():
            if isinstance(buf, str):
                key = shape_key(decl[p].shape)
                if key not in [shape_key(v) for v in views.setdefault(buf, [])]:
                    views[buf].append(decl[p].shape)
    for name, shapes in views.items():
        b = buffers[name]
        b.views = tuple(shape_key(s) for s in shapes)
        if len(shapes) == 1:
            b.shape = shape_key(shapes[0])
            continue
        sizes = set()
        for s in shapes:
            if not all(isinstance(d, int) for d in s[1:]):
                raise NotRaisable(f"buffer {name} is viewed with shapes {list(b.views)}: an "
                                  f"inner extent is parametric, so it cannot be linearised "
                                  f"affinely")
            inner = math.prod(s[1:])
            size = s[0] * inner if isinstance(s[0], int) else {k: v * inner
                                                                 for k, v in s[0].items()}
            sizes.add(size if isinstance(size, int) else fmt_affine(size))
        if len(sizes) > 1 and not all(isinstance(x, int) for x in sizes):
            raise NotRaisable(f"buffer {name} is viewed with shapes {list(b.views)} of "
                              f"different parametric sizes")
        b.linearised = True
        b.shape = (max(sizes),)


PURE_FUNCTIONS |= chelpers.FUNCTIONS  # rstf's own, defined by the C that calls them


class _Builder:
    """Walks inlined op-function bodies, making one Statement per assignment."""

    def __init__(self, buffers, isl_params):
        self.buffers = buffers
        self.prefix = f"[{', '.join(isl_params)}] -> " if isl_params else ""
        self.params = list(isl_params)
        self.statements: list[Statement] = []
        self.call: Call | None = None
        self.decl: dict[str, _Param] = {}

    def walk(self, node, loops, guards, env, path, counter):
        """`loops`: [(C name, isl name, lb, ub, line)]; `path`: the time path so far
        (positions and iterators); `counter`: the next position in the current block. An
        `if` and a bare block are transparent: their statements take positions in the
        enclosing block, so the path alternates strictly (2d+1)."""
        if isinstance(node, c_ast.Compound):
            for item in node.block_items or []:
                self.walk(item, loops, guards, env, path, counter)
        elif isinstance(node, c_ast.For):
            var, lb, ub = self._for_header(node, env, loops)
            pos = counter[0]
            counter[0] += 1
            ivar = isl_name(var)
            inner = dict(env)
            inner[var] = {ivar: 1}
            self.walk(node.stmt, loops + [(var, ivar, lb, ub, node.coord.line)], guards, inner,
                      path + (pos, var), [0])
        elif isinstance(node, c_ast.If):
            if node.iffalse is not None:
                raise NotRaisable(f"{line_of(node)}: 'if' with an 'else' branch (only affine "
                                  f"guards are in the subset)")
            self.walk(node.iftrue, loops, guards + guards_of(node.cond, env), env, path, counter)
        elif isinstance(node, c_ast.Assignment):
            pos = counter[0]
            counter[0] += 1
            self.statements.append(self._statement(node, loops, guards, env, path + (pos,)))
        elif isinstance(node, c_ast.EmptyStatement):
            pass
        else:
            what = {c_ast.While: "'while' loop", c_ast.DoWhile: "'do' loop",
                    c_ast.Goto: "'goto'", c_ast.Label: "label", c_ast.Switch: "'switch'",
                    c_ast.Decl: "local declaration", c_ast.Return: "'return'",
                    c_ast.Break: "'break'", c_ast.Continue: "'continue'",
                    c_ast.FuncCall: "call statement",
                    c_ast.UnaryOp: "increment statement"}.get(type(node), type(node).__name__)
            raise NotRaisable(f"{line_of(node)}: {what} in {self.call.function} is outside the "
                              f"raisable subset")

    def _for_header(self, node: c_ast.For, env, loops):
        init = node.init
        decl = (init.decls[0] if isinstance(init, c_ast.DeclList) and len(init.decls) == 1
                else None)
        if decl is None or decl.init is None or type_names(decl.type) not in ("int", "long"):
            raise NotRaisable(f"{line_of(node)}: 'for' must declare one int iterator "
                              f"('for (int v = lb; v < ub; ++v)')")
        var = decl.name
        cond, nxt = node.cond, node.next
        ok_next = (isinstance(nxt, c_ast.UnaryOp) and nxt.op in ("++", "p++")
                   and isinstance(nxt.expr, c_ast.ID) and nxt.expr.name == var)
        ok_cond = (isinstance(cond, c_ast.BinaryOp) and cond.op == "<"
                   and isinstance(cond.left, c_ast.ID) and cond.left.name == var)
        if not ok_next:
            raise NotRaisable(f"{line_of(node)}: 'for' step '{c_text(nxt) if nxt else ''}' of "
                              f"'{var}' is not '++{var}' (unit steps only)")
        if not ok_cond:
            raise NotRaisable(f"{line_of(node)}: 'for' condition '{c_text(cond) if cond else ''}'"
                              f" is not '{var} < upper bound'")
        if var in {v for v, *_ in loops} or var in self.decl:
            raise NotRaisable(f"{line_of(node)}: iterator '{var}' shadows an outer name")
        try:
            lb = affine_of(decl.init, env)
        except AffineError as e:
            raise NotRaisable(f"{line_of(node)}: lower bound '{c_text(decl.init)}' of '{var}' is "
                              f"not affine ({e})") from None
        try:
            ub = affine_of(cond.right, env)
        except AffineError as e:
            raise NotRaisable(f"{line_of(node)}: upper bound '{c_text(cond.right)}' of '{var}' is "
                              f"not affine ({e})") from None
        return var, lb, ub

    def _statement(self, node: c_ast.Assignment, loops, guards, env, path) -> Statement:
        if node.op not in ASSIGN_OPS:
            raise NotRaisable(f"{line_of(node)}: assignment operator '{node.op}' is outside the "
                              f"subset")
        if not isinstance(node.lvalue, c_ast.ArrayRef):
            raise NotRaisable(f"{line_of(node)}: assignment to '{c_text(node.lvalue)}', not to "
                              f"an array element")
        check_rhs(node.rvalue, self.decl)
        name = f"S{len(self.statements)}"
        ivars = [iv for _, iv, *_ in loops]
        cons = []
        for _, iv, lb, ub, _ in loops:
            cons.append(constraint_of({iv: 1}, ">=", lb))
            cons.append(constraint_of({iv: 1}, "<", ub))
        cons += [(f, k) for f, k, _ in guards]
        domain = _set(name, ivars, self.params, cons)
        tup = f"{self.prefix}{{ {name}[{', '.join(ivars)}] -> "

        accesses, reads, seen = [], [], {}
        refs = []
        array_refs(node.rvalue, refs)
        if node.op != "=":
            refs.append(node.lvalue)
        for ref in refs:
            acc = self._access(ref, tup, domain, env, write=False)
            accesses.append(acc)
            key = (acc.array, shape_key(acc.index))
            if key not in seen:
                seen[key] = acc.relation
                reads.append(acc.relation)
        wacc = self._access(node.lvalue, tup, domain, env, write=True)
        accesses.append(wacc)
        call = self.call
        return Statement(name, [v for v, *_ in loops], domain, None, reads, [wacc.relation],
                         node, call.node, call.index, call.op, call.function, path,
                         tuple(ln for *_, ln in loops), node.coord.line, accesses,
                         [t for _, _, t in guards])

    def _access(self, ref: c_ast.ArrayRef, tup, domain, env, write) -> Access:
        subs, base = [], ref
        while isinstance(base, c_ast.ArrayRef):
            subs.insert(0, base.subscript)
            base = base.name
        if not isinstance(base, c_ast.ID):
            raise NotRaisable(f"{line_of(ref)}: array reference '{c_text(ref)}' has no array "
                              f"name as its base")
        param = self.decl.get(base.name)
        if param is None or param.kind != "array":
            raise NotRaisable(f"{line_of(ref)}: '{base.name}' in '{c_text(ref)}' is not an array "
                              f"parameter of {self.call.function}")
        if len(subs) != len(param.shape):
            raise NotRaisable(f"{line_of(ref)}: '{c_text(ref)}' has {len(subs)} subscripts, "
                              f"'{base.name}' {len(param.shape)} dimensions")
        if write and param.const:
            raise NotRaisable(f"{line_of(ref)}: write to const parameter '{base.name}'")
        affs = []
        for s in subs:
            try:
                affs.append(affine_of(s, env))
            except AffineError as e:
                raise NotRaisable(f"{line_of(ref)}: subscript '{c_text(ref)}' is not affine "
                                  f"({e})") from None
        buf = self.buffers[self.call.binding[base.name]]
        if buf.linearised:
            flat: Affine = {}
            stride = 1
            for a, extent in reversed(list(zip(affs, param.shape))):
                for var, c in a.items():
                    flat[var] = flat.get(var, 0) + c * stride
                stride *= extent if isinstance(extent, int) else 1  # outermost may be symbolic
            affs = [{k: v for k, v in flat.items() if v}]
        target = f"{buf.name}[{', '.join(fmt_affine(a) for a in affs)}]"
        rel = isl.Map.from_multi_aff(isl.MultiAff(f"{tup}{target} }}")).intersect_domain(domain)
        return Access(buf.name, base.name, rel, affs, ref, write)


def _set(name: str, ivars: list[str], params: list[str], cons) -> isl.Set:
    """{ name[ivars] : every (form, 'ge' | 'eq') in cons } (built through the constraint API:
    several times faster than parsing text)."""
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=ivars, params=params)
    space = space.set_tuple_name(isl.dim_type.set, name)
    pos = {v: (isl.dim_type.set, i) for i, v in enumerate(ivars)}
    pos.update({p: (isl.dim_type.param, i) for i, p in enumerate(params)})
    bset = isl.BasicSet.universe(space)
    for form, kind in cons:
        c = (isl.Constraint.alloc_inequality(space) if kind == "ge"
             else isl.Constraint.alloc_equality(space))
        for v, k in form.items():
            c = c.set_constant_val(k) if v == 1 else c.set_coefficient_val(*pos[v], k)
        bset = bset.add_constraint(c)
    return isl.Set.from_basic_set(bset)


# --------------------------------------------------------------------------- schedules


def _schedule_map(s: Statement, depth: int, prefix: str) -> isl.Map:
    """{ S[i] -> [2d+1 path, zero-padded to depth] }."""
    ivars = [isl_name(v) for v in s.iterators]
    time = [isl_name(p) if isinstance(p, str) else str(p) for p in s.path]
    time += ["0"] * (depth - len(time))
    return isl.Map(f"{prefix}{{ {s.name}[{', '.join(ivars)}] -> [{', '.join(time)}] }}")


