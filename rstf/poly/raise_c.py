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
"""
from __future__ import annotations

import dataclasses
import math
import re

import islpy as isl
from pycparser import c_ast, c_generator, c_parser

from .. import chelpers


class NotRaisable(Exception):
    """The C leaves the raisable subset; the message says where and why."""


Affine = dict  # {iterator or parameter name, or 1 (constant term): integer coefficient}


@dataclasses.dataclass
class ArrayInfo:
    """One buffer of the entry function, as the statements access it."""
    name: str
    ctype: str
    shape: tuple  # access shape after view unification: ints, or text of a parametric extent
    role: str  # input | output | temp
    offset: int | None = None  # workspace byte offset of a temp (today's memory plan)
    views: tuple = ()  # the distinct shapes op functions declare for it, in order of use
    linearised: bool = False  # accessed flat because its views disagree

    @property
    def size(self):
        """Number of elements (an int when the shape is constant)."""
        return math.prod(self.shape) if all(isinstance(d, int) for d in self.shape) else None


Buffer = ArrayInfo  # older name, kept for callers of the first version


@dataclasses.dataclass
class Access:
    """One array reference of a statement, resolved to its buffer."""
    array: str  # the entry-function buffer (in0, t3, ...)
    param: str  # the op-function parameter it was written through
    relation: isl.Map  # statement instance -> buffer element (restricted to the domain)
    index: list  # one Affine per buffer dimension (after linearisation)
    ref: c_ast.ArrayRef  # the reference inside `Statement.ast`
    write: bool


@dataclasses.dataclass
class Call:
    """One op-function call of the entry function (inlined)."""
    index: int
    function: str
    node: str  # TF node name from the comment before the call ('' if none)
    op: str  # TF op type from that comment
    line: int
    binding: dict  # op-function parameter -> buffer name, or Affine (an int scalar argument)


@dataclasses.dataclass
class Statement:
    name: str  # S0, S1, ... in textual order
    iterators: list[str]  # C names of the enclosing loop iterators, outermost first
    domain: isl.Set  # { S[i...] : bounds and guards }
    schedule: isl.Map  # { S[i...] -> [2d+1 time vector] }, padded to the Scop's depth
    reads: list[isl.Map]  # distinct read relations (a `+=` reads its left-hand side)
    writes: list[isl.Map]
    ast: c_ast.Assignment  # for re-emission (shared by calls of one op function: copy it)
    node: str  # TF node name (from the call's comment)
    call: int  # index of the op-function call it comes from
    op: str = ""  # TF op type
    function: str = ""  # the op function it belongs to
    path: tuple = ()  # its 2d+1 time path: (pos, iterator, pos, iterator, ..., pos)
    loop_lines: tuple = ()  # source line of each enclosing 'for', outermost first
    line: int = 0  # source line of the assignment
    accesses: list[Access] = dataclasses.field(default_factory=list)  # reads then the write
    guards: list[str] = dataclasses.field(default_factory=list)  # isl constraints of its ifs

    @property
    def depth(self) -> int:
        return len(self.iterators)


@dataclasses.dataclass
class Scop:
    statements: list[Statement]
    buffers: dict[str, ArrayInfo]
    params: list[str] = dataclasses.field(default_factory=list)  # isl parameters (int args)
    context: isl.Set | None = None  # constraints on the parameters
    calls: list[Call] = dataclasses.field(default_factory=list)
    entry: str = ""
    ast: c_ast.FileAST | None = None  # the parsed source, for lowering

    @property
    def arrays(self) -> dict[str, ArrayInfo]:
        return self.buffers

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def _union_set(self, sets) -> isl.UnionSet:
        result = isl.UnionSet.empty(self._space())
        for s in sets:
            result = result.union(isl.UnionSet.from_set(s))
        return result

    def union_maps(self, maps) -> isl.UnionMap:
        result = isl.UnionMap.empty(self._space())
        for m in maps:
            result = result.union(isl.UnionMap.from_map(m))
        return result

    def _space(self) -> isl.Space:
        ctx = self.context if self.context is not None else isl.Set("{ : }")
        return ctx.get_space().params()

    # Union views of the whole program (properties and methods alike).
    @property
    def domain(self) -> isl.UnionSet:
        return self._union_set(s.domain for s in self.statements)

    @property
    def schedule(self) -> isl.UnionMap:
        return self.union_maps(s.schedule for s in self.statements)

    @property
    def reads(self) -> isl.UnionMap:
        return self.union_maps(m for s in self.statements for m in s.reads)

    @property
    def writes(self) -> isl.UnionMap:
        return self.union_maps(m for s in self.statements for m in s.writes)

    def union_domain(self) -> isl.UnionSet:
        return self.domain

    def union_schedule(self) -> isl.UnionMap:
        return self.schedule

    def union_reads(self) -> isl.UnionMap:
        return self.reads

    def union_writes(self) -> isl.UnionMap:
        return self.writes

    def schedule_tree(self, reverse: bool = False) -> isl.Schedule:
        """The original schedule as an isl schedule tree: a sequence node per block, a
        one-dimensional band per loop. `reverse` runs everything backwards (children of
        each sequence reversed, each band negated): the dependence analysis uses it to find
        the *next* access instead of the previous one."""
        return _schedule_tree(self, reverse)


# --------------------------------------------------------------------------- parsing

_ISL_KEYWORDS = {"exists", "and", "or", "implies", "not", "mod", "floor", "ceil", "min",
                 "max", "infty", "NaN", "true", "false", "rat", "floord", "ceild"}


def isl_name(name: str) -> str:
    return name + "_" if name in _ISL_KEYWORDS else name


def _parse(source: str) -> c_ast.FileAST:
    # pycparser wants preprocessed C: blank comments and preprocessor lines, keeping line
    # numbers (INFINITY/NAN stay identifiers; nothing needs a typedef).
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = "\n".join("" if ln.lstrip().startswith("#") else ln for ln in text.split("\n"))
    text = _blank_gnu_extensions(text)
    try:
        return c_parser.CParser().parse(text, filename="<subgraph>")
    except Exception as e:  # pycparser's ParseError
        raise NotRaisable(f"cannot parse the C: {e}") from None


def _blank_gnu_extensions(text: str) -> str:
    """`__attribute__((...))` (balanced parentheses) and `__thread` replaced by spaces, which
    pycparser does not know: they qualify declarations (the helpers' `simd` and `weak`
    ones, a thread-local error slot), never a statement's meaning."""
    out, i = [], 0
    for m in re.finditer(r"\b__attribute__\s*\(|\b__thread\b", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        end = m.end()
        if m.group(0) != "__thread":
            depth = 1
            while depth and end < len(text):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
        out.append(re.sub(r"[^\n]", " ", text[m.start():end]))
        i = end
    out.append(text[i:])
    return "".join(out)


def _comments_by_end_line(source: str) -> dict[int, str]:
    out, line, last = {}, 1, 0
    for m in re.finditer(r"/\*(.*?)\*/", source, flags=re.S):
        line += source.count("\n", last, m.end())
        last = m.end()
        out[line] = m.group(1).strip()
    return out


def _node_of(comment: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.*) \(([^()]*)\)", comment)
    return (m.group(1), m.group(2)) if m else (comment, "")


_GEN = c_generator.CGenerator(reduce_parentheses=True)


def c_text(node) -> str:
    return _GEN.visit(node)


def _line(node) -> str:
    return f"line {node.coord.line}" if getattr(node, "coord", None) else "line ?"


def _type_names(t) -> str:
    while not isinstance(t, c_ast.TypeDecl):
        t = t.type
    if not isinstance(t.type, c_ast.IdentifierType):
        raise NotRaisable(f"{_line(t)}: unsupported type")
    return " ".join(t.type.names)


# --------------------------------------------------------------------------- affine forms


class _AffineError(Exception):
    pass


def _affine(expr, env: dict[str, Affine]) -> Affine:
    """An affine form of a C expression; `env` maps each usable name (loop iterator,
    parameter, bound int argument) to its affine form."""
    if isinstance(expr, c_ast.Constant):
        if expr.type not in ("int", "long int", "unsigned int", "long long int",
                             "unsigned long int", "unsigned long long int"):
            raise _AffineError(f"{expr.type} constant")
        text = expr.value.rstrip("uUlL")
        base = 8 if re.fullmatch(r"0[0-7]+", text) else 0
        v = int(text, base)
        return {1: v} if v else {}
    if isinstance(expr, c_ast.ID):
        if expr.name not in env:
            raise _AffineError(f"'{expr.name}' is neither a loop iterator nor a parameter")
        return dict(env[expr.name])
    if isinstance(expr, c_ast.UnaryOp) and expr.op in ("-", "+"):
        a = _affine(expr.expr, env)
        return a if expr.op == "+" else {k: -v for k, v in a.items()}
    if isinstance(expr, c_ast.BinaryOp) and expr.op in ("+", "-"):
        a, b = _affine(expr.left, env), _affine(expr.right, env)
        sign = 1 if expr.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v}
    if isinstance(expr, c_ast.BinaryOp) and expr.op == "*":
        a, b = _affine(expr.left, env), _affine(expr.right, env)
        for c, other in ((a, b), (b, a)):
            if set(c) <= {1}:
                k = c.get(1, 0)
                return {v: k * coef for v, coef in other.items() if k * coef}
        raise _AffineError("product of two non-constant expressions")
    if (isinstance(expr, c_ast.Cast) and isinstance(expr.to_type.type, c_ast.TypeDecl)
            and _type_names(expr.to_type.type) in ("int", "long")):
        return _affine(expr.expr, env)
    kind = {c_ast.FuncCall: "function call", c_ast.TernaryOp: "conditional expression",
            c_ast.ArrayRef: "array element (data-dependent)"}.get(type(expr))
    if isinstance(expr, c_ast.BinaryOp):
        kind = f"operator '{expr.op}'"
    raise _AffineError(kind or type(expr).__name__)


def _fmt(aff: Affine) -> str:
    """An affine form as isl (and C) text: `2*oh + kh - 1`."""
    terms = [v if c == 1 else f"-{v}" if c == -1 else f"{c}*{v}"
             for v, c in aff.items() if v != 1 and c]
    const = aff.get(1, 0)
    if const or not terms:
        terms.append(str(const))
    return " + ".join(terms).replace("+ -", "- ")


_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "="}


def _sub(a: Affine, b: Affine, const: int = 0) -> Affine:
    """a - b + const."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    if const:
        out[1] = out.get(1, 0) + const
    return {k: v for k, v in out.items() if v}


def _constraint(lhs: Affine, op: str, rhs: Affine) -> tuple[Affine, str]:
    """`lhs op rhs` as (form, 'ge' | 'eq'): form >= 0 or form = 0."""
    if op == "<":
        return _sub(rhs, lhs, -1), "ge"
    if op == "<=":
        return _sub(rhs, lhs), "ge"
    if op == ">":
        return _sub(lhs, rhs, -1), "ge"
    if op == ">=":
        return _sub(lhs, rhs), "ge"
    return _sub(lhs, rhs), "eq"


def _guards(cond, env) -> list[tuple[Affine, str, str]]:
    """An `&&` chain of affine comparisons: [(form, 'ge' | 'eq', isl text)]."""
    if isinstance(cond, c_ast.BinaryOp) and cond.op == "&&":
        return _guards(cond.left, env) + _guards(cond.right, env)
    if isinstance(cond, c_ast.BinaryOp) and cond.op in _CMP:
        try:
            lhs, rhs = _affine(cond.left, env), _affine(cond.right, env)
        except _AffineError as e:
            raise NotRaisable(f"{_line(cond)}: condition '{c_text(cond)}' is not affine ({e}; "
                              f"a data-dependent 'if' is outside the subset)") from None
        return [(*_constraint(lhs, cond.op, rhs), f"{_fmt(lhs)} {_CMP[cond.op]} {_fmt(rhs)}")]
    raise NotRaisable(f"{_line(cond)}: condition '{c_text(cond)}' is not a conjunction (&&) "
                      f"of affine comparisons")


# --------------------------------------------------------------------------- declarations


def _extent(dim, env, decl) -> int | Affine:
    if dim is None:
        raise NotRaisable(f"{_line(decl)}: array parameter '{decl.name}' has no extent")
    try:
        a = _affine(dim, env)
    except _AffineError:
        raise NotRaisable(f"{_line(decl)}: extent '{c_text(dim)}' of '{decl.name}' is not an "
                          f"affine expression of the parameters") from None
    return a.get(1, 0) if set(a) <= {1} else a


def _shape_key(shape) -> tuple:
    return tuple(d if isinstance(d, int) else _fmt(d) for d in shape)


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
                raise NotRaisable(f"{_line(d)}: parameter '{d.name}' is an array of pointers")
            shape = () if env is None else tuple(_extent(x, env, d) for x in dims)
            out.append(_Param(d.name, "array", shape, _type_names(t), restrict,
                              "const" in (t.quals or [])))
        elif isinstance(t, c_ast.TypeDecl) and _type_names(t) in ("int", "long", "long int"):
            out.append(_Param(d.name, "int"))
        else:
            raise NotRaisable(f"{_line(d)}: parameter '{d.name}' of {fdef.decl.name} is "
                              f"neither an array nor an int (pointer parameters are outside "
                              f"the subset)")
    return out


# --------------------------------------------------------------------------- raising


def raise_subgraph(source: str, entry: str) -> Scop:
    """Raise the subgraph function `entry` of `source` (generated C) into a `Scop`."""
    ast = _parse(source)
    funcs = {f.decl.name: f for f in ast.ext if isinstance(f, c_ast.FuncDef)}
    if entry not in funcs:
        raise NotRaisable(f"no entry function {entry!r}")
    entry_def = funcs[entry]
    comments = _comments_by_end_line(source)
    buffers: dict[str, ArrayInfo] = {}
    params: list[str] = []
    workspace = "ws"
    args = entry_def.decl.type.args
    for p in (args.params if args else []):
        if isinstance(p, c_ast.Typename):
            continue
        t = p.type
        if isinstance(t, c_ast.PtrDecl) and _type_names(t) == "void":
            workspace = p.name
            continue
        if isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.TypeDecl):
            role = "input" if "const" in (t.type.quals or []) else "output"
            buffers[p.name] = ArrayInfo(p.name, _type_names(t), (), role)
        elif isinstance(t, c_ast.TypeDecl) and _type_names(t) in ("int", "long", "long int"):
            params.append(p.name)
        else:
            raise NotRaisable(f"{_line(p)}: entry parameter '{p.name}' is neither a buffer "
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
                raise NotRaisable(f"{_line(item)}: temporary '{item.name}' is not a workspace "
                                  f"slice '(T *)((char *)ws + OFFSET)'")
            buffers[item.name] = ArrayInfo(item.name, _type_names(item.type), (), "temp",
                                           int(off.group(1) or 0))
        elif (isinstance(item, c_ast.FuncCall) and isinstance(item.name, c_ast.ID)
              and item.name.name in funcs):
            fdef = funcs[item.name.name]
            if fdef is entry_def:
                raise NotRaisable(f"{_line(item)}: recursive call of the entry function")
            fparams = _op_params(fdef, None)
            actual = item.args.exprs if item.args else []
            if len(actual) != len(fparams):
                raise NotRaisable(f"{_line(item)}: {fdef.decl.name} called with "
                                  f"{len(actual)} arguments, declared with {len(fparams)}")
            binding = {}
            for fp, arg in zip(fparams, actual):
                if fp.kind == "array":
                    binding[fp.name] = _buffer_arg(arg, buffers)
                else:
                    try:
                        binding[fp.name] = _affine(arg, penv)
                    except _AffineError:
                        raise NotRaisable(f"{_line(arg)}: int argument '{c_text(arg)}' is not "
                                          f"an affine expression of the parameters") from None
            line = item.coord.line
            node, op = _node_of(comments.get(line - 1, ""))
            calls.append((Call(len(calls), fdef.decl.name, node, op, line, binding), fdef,
                          {}))
        else:
            what = (f"call of '{c_text(item.name)}' (not an op function of this file)"
                    if isinstance(item, c_ast.FuncCall) else type(item).__name__)
            raise NotRaisable(f"{_line(item)}: {what} in the entry function (only temporaries "
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
    raise NotRaisable(f"{_line(arg)}: argument '{c_text(arg)}' is not a (cast) buffer of the "
                      f"entry function (pointer arithmetic is outside the subset)")


def _unify_views(calls, buffers) -> None:
    """Give each buffer its access shape: its single view, or flat when views disagree."""
    views: dict[str, list] = {}
    for call, _, decl in calls:
        for p, buf in call.binding.items():
            if isinstance(buf, str):
                key = _shape_key(decl[p].shape)
                if key not in [_shape_key(v) for v in views.setdefault(buf, [])]:
                    views[buf].append(decl[p].shape)
    for name, shapes in views.items():
        b = buffers[name]
        b.views = tuple(_shape_key(s) for s in shapes)
        if len(shapes) == 1:
            b.shape = _shape_key(shapes[0])
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
            sizes.add(size if isinstance(size, int) else _fmt(size))
        if len(sizes) > 1 and not all(isinstance(x, int) for x in sizes):
            raise NotRaisable(f"buffer {name} is viewed with shapes {list(b.views)} of "
                              f"different parametric sizes")
        b.linearised = True
        b.shape = (max(sizes),)


_PURE_FUNCTIONS = {
    f + suffix
    for f in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "pow",
              "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
              "asinh", "acosh", "atanh", "erf", "erfc", "tgamma", "lgamma", "fabs", "fmin",
              "fmax", "floor", "ceil", "round", "trunc", "rint", "nearbyint", "fmod",
              "remainder", "copysign", "hypot", "fma", "fdim")
    for suffix in ("", "f")} | {"abs", "isnan", "isinf", "isfinite", "signbit"}
_PURE_FUNCTIONS |= chelpers.FUNCTIONS  # rstf's own, defined by the C that calls them

_ASSIGN_OPS = {"=", "+=", "-=", "*=", "/="}


def multiply_add(node) -> tuple[c_ast.Node, c_ast.Node] | None:
    """The two factors of an accumulation step, `y += a * b` or `y = fmaf(a, b, y)` (`fma`
    too), else None. The op templates spell convolution and matrix-product steps as fmaf:
    one rounding a step, as TF's own kernels do, and the same in the textbook C and in the
    microkernels that replace its loops, so both stay bit-identical."""
    if not isinstance(node, c_ast.Assignment):
        return None
    if node.op == "+=":
        r = node.rvalue
        if isinstance(r, c_ast.BinaryOp) and r.op == "*":
            return r.left, r.right
        return None
    r = node.rvalue
    if (node.op == "=" and isinstance(r, c_ast.FuncCall) and isinstance(r.name, c_ast.ID)
            and r.name.name in ("fmaf", "fma") and r.args and len(r.args.exprs) == 3
            and c_text(r.args.exprs[2]) == c_text(node.lvalue)):
        return r.args.exprs[0], r.args.exprs[1]
    return None


def is_accumulation(node) -> bool:
    """`y += ...`, or `y = fmaf(a, b, y)`: a step of a reduction into y."""
    return (isinstance(node, c_ast.Assignment) and node.op == "+=") or \
        multiply_add(node) is not None


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
                raise NotRaisable(f"{_line(node)}: 'if' with an 'else' branch (only affine "
                                  f"guards are in the subset)")
            self.walk(node.iftrue, loops, guards + _guards(node.cond, env), env, path, counter)
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
            raise NotRaisable(f"{_line(node)}: {what} in {self.call.function} is outside the "
                              f"raisable subset")

    def _for_header(self, node: c_ast.For, env, loops):
        init = node.init
        decl = (init.decls[0] if isinstance(init, c_ast.DeclList) and len(init.decls) == 1
                else None)
        if decl is None or decl.init is None or _type_names(decl.type) not in ("int", "long"):
            raise NotRaisable(f"{_line(node)}: 'for' must declare one int iterator "
                              f"('for (int v = lb; v < ub; ++v)')")
        var = decl.name
        cond, nxt = node.cond, node.next
        ok_next = (isinstance(nxt, c_ast.UnaryOp) and nxt.op in ("++", "p++")
                   and isinstance(nxt.expr, c_ast.ID) and nxt.expr.name == var)
        ok_cond = (isinstance(cond, c_ast.BinaryOp) and cond.op == "<"
                   and isinstance(cond.left, c_ast.ID) and cond.left.name == var)
        if not ok_next:
            raise NotRaisable(f"{_line(node)}: 'for' step '{c_text(nxt) if nxt else ''}' of "
                              f"'{var}' is not '++{var}' (unit steps only)")
        if not ok_cond:
            raise NotRaisable(f"{_line(node)}: 'for' condition '{c_text(cond) if cond else ''}'"
                              f" is not '{var} < upper bound'")
        if var in {v for v, *_ in loops} or var in self.decl:
            raise NotRaisable(f"{_line(node)}: iterator '{var}' shadows an outer name")
        try:
            lb = _affine(decl.init, env)
        except _AffineError as e:
            raise NotRaisable(f"{_line(node)}: lower bound '{c_text(decl.init)}' of '{var}' is "
                              f"not affine ({e})") from None
        try:
            ub = _affine(cond.right, env)
        except _AffineError as e:
            raise NotRaisable(f"{_line(node)}: upper bound '{c_text(cond.right)}' of '{var}' is "
                              f"not affine ({e})") from None
        return var, lb, ub

    def _statement(self, node: c_ast.Assignment, loops, guards, env, path) -> Statement:
        if node.op not in _ASSIGN_OPS:
            raise NotRaisable(f"{_line(node)}: assignment operator '{node.op}' is outside the "
                              f"subset")
        if not isinstance(node.lvalue, c_ast.ArrayRef):
            raise NotRaisable(f"{_line(node)}: assignment to '{c_text(node.lvalue)}', not to "
                              f"an array element")
        _check_rhs(node.rvalue, self.decl)
        name = f"S{len(self.statements)}"
        ivars = [iv for _, iv, *_ in loops]
        cons = []
        for _, iv, lb, ub, _ in loops:
            cons.append(_constraint({iv: 1}, ">=", lb))
            cons.append(_constraint({iv: 1}, "<", ub))
        cons += [(f, k) for f, k, _ in guards]
        domain = _set(name, ivars, self.params, cons)
        tup = f"{self.prefix}{{ {name}[{', '.join(ivars)}] -> "

        accesses, reads, seen = [], [], {}
        refs = []
        _array_refs(node.rvalue, refs)
        if node.op != "=":
            refs.append(node.lvalue)
        for ref in refs:
            acc = self._access(ref, tup, domain, env, write=False)
            accesses.append(acc)
            key = (acc.array, _shape_key(acc.index))
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
            raise NotRaisable(f"{_line(ref)}: array reference '{c_text(ref)}' has no array "
                              f"name as its base")
        param = self.decl.get(base.name)
        if param is None or param.kind != "array":
            raise NotRaisable(f"{_line(ref)}: '{base.name}' in '{c_text(ref)}' is not an array "
                              f"parameter of {self.call.function}")
        if len(subs) != len(param.shape):
            raise NotRaisable(f"{_line(ref)}: '{c_text(ref)}' has {len(subs)} subscripts, "
                              f"'{base.name}' {len(param.shape)} dimensions")
        if write and param.const:
            raise NotRaisable(f"{_line(ref)}: write to const parameter '{base.name}'")
        affs = []
        for s in subs:
            try:
                affs.append(_affine(s, env))
            except _AffineError as e:
                raise NotRaisable(f"{_line(ref)}: subscript '{c_text(ref)}' is not affine "
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
        target = f"{buf.name}[{', '.join(_fmt(a) for a in affs)}]"
        rel = isl.Map.from_multi_aff(isl.MultiAff(f"{tup}{target} }}")).intersect_domain(domain)
        return Access(buf.name, base.name, rel, affs, ref, write)


def _array_refs(expr, out: list):
    """Every outermost array reference in an expression (subscripts are checked affine
    later, so they hold no array reference)."""
    if isinstance(expr, c_ast.ArrayRef):
        out.append(expr)
        return
    for _, child in expr.children():
        _array_refs(child, out)


def _check_rhs(expr, decl):
    """A right-hand side is side-effect free and uses arrays only through subscripts."""
    def walk(n, parent):
        if isinstance(n, c_ast.FuncCall):
            fn = n.name.name if isinstance(n.name, c_ast.ID) else None
            if fn not in _PURE_FUNCTIONS:
                raise NotRaisable(f"{_line(n)}: call to '{c_text(n.name)}' in a right-hand "
                                  f"side (only pure math.h functions)")
            for a in (n.args.exprs if n.args else []):
                walk(a, n)
            return
        if isinstance(n, c_ast.Assignment):
            raise NotRaisable(f"{_line(n)}: nested assignment '{c_text(n)}'")
        if isinstance(n, c_ast.UnaryOp) and n.op in ("++", "--", "p++", "p--", "&", "*"):
            raise NotRaisable(f"{_line(n)}: '{c_text(n)}' (side effect or pointer use) in a "
                              f"right-hand side")
        if isinstance(n, (c_ast.StructRef, c_ast.ExprList, c_ast.CompoundLiteral)):
            raise NotRaisable(f"{_line(n)}: '{c_text(n)}' is outside the subset")
        if isinstance(n, c_ast.ID) and n.name in decl and decl[n.name].kind == "array" \
                and not (isinstance(parent, c_ast.ArrayRef) and parent.name is n):
            raise NotRaisable(f"{_line(n)}: array '{n.name}' used as a pointer (pointer "
                              f"arithmetic is outside the subset)")
        for _, child in n.children():
            walk(child, n)
    walk(expr, None)


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


def _schedule_tree(scop: Scop, reverse: bool) -> isl.Schedule:
    def build(stmts, level):
        groups: dict[int, list[Statement]] = {}
        for s in stmts:
            groups.setdefault(s.path[level], []).append(s)
        parts = []
        for pos in sorted(groups, reverse=reverse):
            g = groups[pos]
            if len(g[0].path) == level + 1:  # an assignment
                parts.append(isl.Schedule.from_domain(isl.UnionSet.from_set(g[0].domain)))
                continue
            d = level // 2  # the loop's iterator index
            sign = "-" if reverse else ""
            pieces = "; ".join(
                f"{s.name}[{', '.join(map(isl_name, s.iterators))}] -> "
                f"[({sign}{isl_name(s.iterators[d])})]" for s in g)
            prefix = f"[{', '.join(map(isl_name, scop.params))}] -> " if scop.params else ""
            band = isl.MultiUnionPwAff(f"{prefix}[{{ {pieces} }}]")
            parts.append(build(g, level + 2).insert_partial_schedule(band))
        out = parts[0]
        for p in parts[1:]:
            out = out.sequence(p)
        return out

    if not scop.statements:
        return isl.Schedule.from_domain(scop.domain)
    return build(scop.statements, 0)
