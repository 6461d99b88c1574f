"""Raise a generated subgraph's C into the polyhedral model (isl).

Contract: `raise_subgraph(source, entry)` parses the C with pycparser, inlines every op
function called by the entry, and returns a `Scop`: one `Statement` per assignment, with its
isl iteration domain (loop bounds and affine `if` guards), its original schedule (2d+1
textual order over the whole inlined program), and its read and write access relations on
the *buffers* of the entry function (in0, out0, t3, ...). Code outside the raisable subset
of shared/DESIGN.md raises `NotRaisable` naming the construct and its line; the caller then
leaves that subgraph unoptimized, never mis-compiled.

An op function's array parameter is a *view* of a buffer: Reshape copies view both sides
flat, Softmax views its operand as [rows][classes]. A buffer whose views all agree keeps
that shape; any other is linearised (row-major, still affine since extents are constants).
Temporaries are distinct buffers here even when the memory plan lets them share bytes: the
plan is redone after scheduling.
"""
from __future__ import annotations

import dataclasses
import math
import re

import islpy as isl
from pycparser import c_ast, c_parser


class NotRaisable(Exception):
    """The C leaves the raisable subset; the message says where and why."""


Affine = dict  # {iterator name or 1: integer coefficient}


@dataclasses.dataclass
class Statement:
    name: str
    iterators: list[str]
    domain: isl.Set
    schedule: isl.Map
    reads: list[isl.Map]
    writes: list[isl.Map]
    ast: c_ast.Node  # the assignment, for re-emission with substituted iterators
    node: str  # the TF node (from the call's comment), for reports
    call: int  # index of the op-function call it comes from
    function: str = ""  # the op function it belongs to
    path: tuple = ()  # its 2d+1 time path: (call, position, iterator, position, ...)
    loop_lines: tuple = ()  # source line of each enclosing 'for', outermost first


@dataclasses.dataclass
class Buffer:
    name: str
    ctype: str
    shape: tuple[int, ...]  # the access shape after view unification
    role: str  # input | output | temp
    offset: int | None = None  # workspace byte offset of a temp (the memory plan)


@dataclasses.dataclass
class Scop:
    statements: list[Statement]
    buffers: dict[str, Buffer]

    def _union(self, maps) -> isl.UnionMap:
        result = None
        for m in maps:
            u = isl.UnionMap.from_map(m)
            result = u if result is None else result.union(u)
        return result if result is not None else isl.UnionMap("{ }")

    @property
    def domain(self) -> isl.UnionSet:
        result = isl.UnionSet("{ }")
        for s in self.statements:
            result = result.union(isl.UnionSet.from_set(s.domain))
        return result

    @property
    def schedule(self) -> isl.UnionMap:
        return self._union(s.schedule for s in self.statements)

    @property
    def reads(self) -> isl.UnionMap:
        return self._union(m for s in self.statements for m in s.reads)

    @property
    def writes(self) -> isl.UnionMap:
        return self._union(m for s in self.statements for m in s.writes)


# --------------------------------------------------------------------------- parsing


def _parse(source: str) -> c_ast.FileAST:
    # pycparser wants preprocessed C: drop includes and comments (keeping line numbers);
    # INFINITY/NAN stay identifiers.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    text = "\n".join("" if ln.lstrip().startswith("#") else ln for ln in text.splitlines())
    try:
        return c_parser.CParser().parse(text, filename="<subgraph>")
    except Exception as e:  # pycparser's ParseError
        raise NotRaisable(f"cannot parse the C: {e}") from None


def _line(node) -> str:
    return f"line {node.coord.line}" if getattr(node, "coord", None) else "?"


def _array_decl(decl: c_ast.Decl) -> tuple[str, str, tuple[int, ...]]:
    """(name, C type, shape) of an array parameter `float x[restrict 1][9][3]`."""
    dims, t = [], decl.type
    while isinstance(t, c_ast.ArrayDecl):
        if not isinstance(t.dim, c_ast.Constant):
            raise NotRaisable(f"{_line(decl)}: array '{decl.name}' has a non-constant extent")
        dims.append(int(t.dim.value))
        t = t.type
    if isinstance(t, c_ast.PtrDecl):
        raise NotRaisable(f"{_line(decl)}: pointer parameter '{decl.name}' in an op function")
    return decl.name, " ".join(t.type.names), tuple(dims)


def _cast_view(expr) -> tuple[str, tuple[int, ...] | None]:
    """The buffer an argument names and the inner extents its cast gives it."""
    if isinstance(expr, c_ast.ID):
        return expr.name, None
    if isinstance(expr, c_ast.Cast) and isinstance(expr.expr, c_ast.ID):
        return expr.expr.name, None
    raise NotRaisable(f"{_line(expr)}: an op-function argument is not a (cast) buffer")


class _AffineError(Exception):
    pass


def _affine(expr, iterators: set[str]) -> Affine:
    """An affine form of a C expression over loop iterators, or _AffineError."""
    if isinstance(expr, c_ast.Constant) and expr.type == "int":
        return {1: int(expr.value.rstrip("uUlL"), 0)}
    if isinstance(expr, c_ast.ID) and expr.name in iterators:
        return {expr.name: 1}
    if isinstance(expr, c_ast.UnaryOp) and expr.op == "-":
        return {k: -v for k, v in _affine(expr.expr, iterators).items()}
    if isinstance(expr, c_ast.BinaryOp) and expr.op in "+-":
        a, b = _affine(expr.left, iterators), _affine(expr.right, iterators)
        sign = 1 if expr.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if isinstance(expr, c_ast.BinaryOp) and expr.op == "*":
        a, b = _affine(expr.left, iterators), _affine(expr.right, iterators)
        for c, other in ((a, b), (b, a)):
            if set(c) <= {1}:
                k = c.get(1, 0)
                return {v: k * coef for v, coef in other.items()}
        raise _AffineError("product of two iterator expressions")
    raise _AffineError(type(expr).__name__)


def _fmt(aff: Affine) -> str:
    terms = [f"{c}*{v}" for v, c in aff.items() if v != 1 and c]
    const = aff.get(1, 0)
    return " + ".join(terms + [str(const)]) if terms else str(const)


_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "="}


def _guards(cond, iterators: set[str]) -> list[str]:
    """An `&&` chain of affine comparisons as isl constraints."""
    if isinstance(cond, c_ast.BinaryOp) and cond.op == "&&":
        return _guards(cond.left, iterators) + _guards(cond.right, iterators)
    if isinstance(cond, c_ast.BinaryOp) and cond.op in _CMP:
        try:
            lhs, rhs = _affine(cond.left, iterators), _affine(cond.right, iterators)
        except _AffineError:
            raise NotRaisable(f"{_line(cond)}: 'if' condition is not affine in the loop "
                              f"iterators (a data-dependent branch?)") from None
        return [f"{_fmt(lhs)} {_CMP[cond.op]} {_fmt(rhs)}"]
    raise NotRaisable(f"{_line(cond)}: 'if' condition is not a conjunction of affine "
                      f"comparisons")


# --------------------------------------------------------------------------- raising


@dataclasses.dataclass
class _Access:
    param: str
    subs: list[Affine]
    write: bool


def _array_refs(expr, out: list):
    """Every array reference in an expression: (base name, [subscript expressions])."""
    if isinstance(expr, c_ast.ArrayRef):
        subs, base = [], expr
        while isinstance(base, c_ast.ArrayRef):
            subs.insert(0, base.subscript)
            base = base.name
        if not isinstance(base, c_ast.ID):
            raise NotRaisable(f"{_line(expr)}: array base is not a name")
        out.append((base.name, subs, expr))
        for s in subs:
            _array_refs(s, out)
        return
    for _, child in expr.children():
        _array_refs(child, out)


def raise_subgraph(source: str, entry: str) -> Scop:
    ast = _parse(source)
    funcs = {f.decl.name: f for f in ast.ext if isinstance(f, c_ast.FuncDef)}
    if entry not in funcs:
        raise NotRaisable(f"no entry function {entry!r}")
    entry_def = funcs[entry]
    buffers: dict[str, Buffer] = {}
    for p in entry_def.decl.type.args.params:
        if p.name == "ws":
            continue
        role = "input" if "const" in (p.type.type.quals or []) else "output"
        ctype = " ".join(p.type.type.type.names)
        buffers[p.name] = Buffer(p.name, ctype, (), role)
    comments = re.findall(r"/\* (.*?) \*/\s*\n\s*(op_\d+)\(", source)
    call_nodes = [c[0] for c in comments]

    calls = []  # (function def, {param: buffer}, {param: view shape})
    for item in entry_def.body.block_items or []:
        if isinstance(item, c_ast.Decl):  # float *t3 = (float *)((char *)ws + OFFSET);
            off = re.search(r"\+\s*(\d+)\)", _text(item.init)) if item.init else None
            ctype = " ".join(item.type.type.type.names)
            buffers[item.name] = Buffer(item.name, ctype, (), "temp",
                                        int(off.group(1)) if off else None)
        elif isinstance(item, c_ast.FuncCall) and item.name.name in funcs:
            fdef = funcs[item.name.name]
            params = [_array_decl(d) for d in fdef.decl.type.args.params]
            binding, views = {}, {}
            for (pname, _, shape), arg in zip(params, item.args.exprs):
                buf, _ = _cast_view(arg)
                if buf not in buffers:
                    raise NotRaisable(f"{_line(arg)}: unknown buffer {buf!r}")
                binding[pname] = buf
                views[pname] = shape
            calls.append((fdef, binding, views))
        else:
            raise NotRaisable(f"{_line(item)}: unexpected statement in the entry function")

    # Unify views: a buffer seen with one shape keeps it, otherwise it is linearised.
    seen: dict[str, set] = {}
    for _, binding, views in calls:
        for p, buf in binding.items():
            seen.setdefault(buf, set()).add(views[p])
    for name, shapes in seen.items():
        sizes = {math.prod(s) for s in shapes}
        if len(sizes) != 1:
            raise NotRaisable(f"buffer {name} is viewed with different sizes {sorted(shapes)}")
        buffers[name].shape = next(iter(shapes)) if len(shapes) == 1 else (sizes.pop(),)

    statements: list[Statement] = []
    depth = [0]

    def visit(node, loops, guards, call_idx, binding, views, path):
        names = {v for v, _, _, _ in loops}
        if isinstance(node, c_ast.Compound):
            for k, item in enumerate(node.block_items or []):
                visit(item, loops, guards, call_idx, binding, views, path + [k])
        elif isinstance(node, c_ast.For):
            var, lb, ub = _for_header(node, names)
            visit(node.stmt, loops + [(var, lb, ub, node.coord.line)], guards, call_idx,
                  binding, views, path + [var])
        elif isinstance(node, c_ast.If):
            if node.iffalse is not None:
                raise NotRaisable(f"{_line(node)}: 'else' branch (only affine guards allowed)")
            visit(node.iftrue, loops, guards + _guards(node.cond, names), call_idx, binding,
                  views, path)
        elif isinstance(node, c_ast.Assignment) and node.op in ("=", "+="):
            st = _statement(node, loops, guards, call_idx, binding, views, buffers, path,
                            len(statements),
                            call_nodes[call_idx] if call_idx < len(call_nodes) else "")
            st.function = calls[call_idx][0].decl.name
            st.path = tuple(path)
            st.loop_lines = tuple(line for _, _, _, line in loops)
            statements.append(st)
            depth[0] = max(depth[0], len(path))
        else:
            raise NotRaisable(f"{_line(node)}: {type(node).__name__} is outside the "
                              f"raisable subset")

    for i, (fdef, binding, views) in enumerate(calls):
        visit(fdef.body, [], [], i, binding, views, [i])
    # Pad every schedule to one dimension so they live in one space.
    for s in statements:
        s.schedule = _pad_schedule(s.schedule, depth[0])
    return Scop(statements, buffers)


def _text(node) -> str:
    from pycparser import c_generator

    return c_generator.CGenerator().visit(node)


def _for_header(node: c_ast.For, outer: set[str]):
    """`for (int v = LB; v < UB; ++v)` with affine LB, UB over the outer iterators."""
    init = node.init
    decl = init.decls[0] if isinstance(init, c_ast.DeclList) and len(init.decls) == 1 else None
    if decl is None or decl.init is None:
        raise NotRaisable(f"{_line(node)}: 'for' must declare one iterator")
    var = decl.name
    cond, nxt = node.cond, node.next
    ok_next = (isinstance(nxt, c_ast.UnaryOp) and nxt.op in ("++", "p++")
               and isinstance(nxt.expr, c_ast.ID) and nxt.expr.name == var)
    ok_cond = (isinstance(cond, c_ast.BinaryOp) and cond.op == "<"
               and isinstance(cond.left, c_ast.ID) and cond.left.name == var)
    if not (ok_next and ok_cond):
        raise NotRaisable(f"{_line(node)}: 'for' must be 'v = lb; v < ub; ++v'")
    try:
        return var, _affine(decl.init, outer), _affine(cond.right, outer)
    except _AffineError:
        raise NotRaisable(f"{_line(node)}: loop bound of '{var}' is not affine") from None


def _statement(node, loops, guards, call_idx, binding, views, buffers, path, k, tf_node):
    iters = [v for v, _, _, _ in loops]
    names = set(iters)
    cons = [f"{_fmt(lb)} <= {v} < {_fmt(ub)}" for v, lb, ub, _ in loops] + guards
    name = f"S{k}"
    tup = f"{name}[{', '.join(iters)}]"
    domain = isl.Set(f"{{ {tup} : {' and '.join(cons) or 'true'} }}")
    time = []
    for p in path:
        time.append(p if isinstance(p, str) else str(p))
    schedule = isl.Map(f"{{ {tup} -> [{', '.join(time)}] }}")

    def access(base, subs, ref):
        if base not in binding:
            raise NotRaisable(f"{_line(ref)}: '{base}' is not an array parameter")
        try:
            affs = [_affine(s, names) for s in subs]
        except _AffineError as e:
            raise NotRaisable(f"{_line(ref)}: subscript of '{base}' is not affine ({e})") \
                from None
        buf = buffers[binding[base]]
        view = views[base]
        if len(view) != len(affs):
            raise NotRaisable(f"{_line(ref)}: '{base}' subscripted with {len(affs)} indices, "
                              f"declared with {len(view)}")
        if tuple(view) == tuple(buf.shape):
            target = [_fmt(a) for a in affs]
        else:  # linearise the view onto the flat buffer
            flat: Affine = {}
            stride = 1
            for a, extent in reversed(list(zip(affs, view))):
                for var, c in a.items():
                    flat[var] = flat.get(var, 0) + c * stride
                stride *= extent
            target = [_fmt(flat)]
        return isl.Map(f"{{ {tup} -> {buf.name}[{', '.join(target)}] : "
                       f"{' and '.join(cons) or 'true'} }}")

    refs = []
    _array_refs(node.rvalue, refs)
    reads = [access(b, s, r) for b, s, r in refs]
    lrefs = []
    _array_refs(node.lvalue, lrefs)
    if len(lrefs) < 1 or not isinstance(node.lvalue, c_ast.ArrayRef):
        raise NotRaisable(f"{_line(node)}: assignment to a non-array")
    b, s, r = lrefs[0]
    write = access(b, s, r)
    if node.op == "+=":
        reads.append(write)
    for fn in _calls(node.rvalue):
        if fn not in _PURE_FUNCTIONS:
            raise NotRaisable(f"{_line(node)}: call to '{fn}' (only pure math functions)")
    return Statement(name, iters, domain, schedule, reads, [write], node, tf_node, call_idx)


_PURE_FUNCTIONS = {"expf", "exp", "sqrtf", "sqrt", "tanhf", "tanh", "fabsf", "fabs"}


def _calls(expr) -> list[str]:
    found = []

    def walk(n):
        if isinstance(n, c_ast.FuncCall):
            found.append(n.name.name if isinstance(n.name, c_ast.ID) else "?")
        for _, c in n.children():
            walk(c)

    walk(expr)
    return found


def _pad_schedule(m: isl.Map, depth: int) -> isl.Map:
    """Append zero time dimensions up to `depth` (statements nest to different depths)."""
    n = m.dim(isl.dim_type.out)
    m = m.add_dims(isl.dim_type.out, depth - n)
    for i in range(n, depth):
        m = m.fix_val(isl.dim_type.out, i, isl.Val.zero(m.get_ctx()))
    return m
