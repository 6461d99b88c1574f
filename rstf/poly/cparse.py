"""The C side of raising: parsing the generated C (pycparser, GNU extensions blanked), its
text and line of a node, node comments, affine expressions and guards read from C
expressions, the right-hand sides the subset allows, and the multiply-add form of a
contraction (`multiply_add`, `is_accumulation`). `raise_c` builds the scop from these.
"""
from __future__ import annotations

import re

from pycparser import c_ast, c_generator, c_parser

from .scop import Affine, NotRaisable


def parse_c(source: str) -> c_ast.FileAST:
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


def comments_by_end_line(source: str) -> dict[int, str]:
    out, line, last = {}, 1, 0
    for m in re.finditer(r"/\*(.*?)\*/", source, flags=re.S):
        line += source.count("\n", last, m.end())
        last = m.end()
        out[line] = m.group(1).strip()
    return out


def comment_node(comment: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.*) \(([^()]*)\)", comment)
    return (m.group(1), m.group(2)) if m else (comment, "")


_GEN = c_generator.CGenerator(reduce_parentheses=True)


def c_text(node) -> str:
    return _GEN.visit(node)


def line_of(node) -> str:
    return f"line {node.coord.line}" if getattr(node, "coord", None) else "line ?"


def type_names(t) -> str:
    while not isinstance(t, c_ast.TypeDecl):
        t = t.type
    if not isinstance(t.type, c_ast.IdentifierType):
        raise NotRaisable(f"{line_of(t)}: unsupported type")
    return " ".join(t.type.names)


class AffineError(Exception):
    pass


def affine_of(expr, env: dict[str, Affine]) -> Affine:
    """An affine form of a C expression; `env` maps each usable name (loop iterator,
    parameter, bound int argument) to its affine form."""
    if isinstance(expr, c_ast.Constant):
        if expr.type not in ("int", "long int", "unsigned int", "long long int",
                             "unsigned long int", "unsigned long long int"):
            raise AffineError(f"{expr.type} constant")
        text = expr.value.rstrip("uUlL")
        base = 8 if re.fullmatch(r"0[0-7]+", text) else 0
        v = int(text, base)
        return {1: v} if v else {}
    if isinstance(expr, c_ast.ID):
        if expr.name not in env:
            raise AffineError(f"'{expr.name}' is neither a loop iterator nor a parameter")
        return dict(env[expr.name])
    if isinstance(expr, c_ast.UnaryOp) and expr.op in ("-", "+"):
        a = affine_of(expr.expr, env)
        return a if expr.op == "+" else {k: -v for k, v in a.items()}
    if isinstance(expr, c_ast.BinaryOp) and expr.op in ("+", "-"):
        a, b = affine_of(expr.left, env), affine_of(expr.right, env)
        sign = 1 if expr.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v}
    if isinstance(expr, c_ast.BinaryOp) and expr.op == "*":
        a, b = affine_of(expr.left, env), affine_of(expr.right, env)
        for c, other in ((a, b), (b, a)):
            if set(c) <= {1}:
                k = c.get(1, 0)
                return {v: k * coef for v, coef in other.items() if k * coef}
        raise AffineError("product of two non-constant expressions")
    if (isinstance(expr, c_ast.Cast) and isinstance(expr.to_type.type, c_ast.TypeDecl)
            and type_names(expr.to_type.type) in ("int", "long")):
        return affine_of(expr.expr, env)
    kind = {c_ast.FuncCall: "function call", c_ast.TernaryOp: "conditional expression",
            c_ast.ArrayRef: "array element (data-dependent)"}.get(type(expr))
    if isinstance(expr, c_ast.BinaryOp):
        kind = f"operator '{expr.op}'"
    raise AffineError(kind or type(expr).__name__)


def fmt_affine(aff: Affine) -> str:
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


def constraint_of(lhs: Affine, op: str, rhs: Affine) -> tuple[Affine, str]:
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


def guards_of(cond, env) -> list[tuple[Affine, str, str]]:
    """An `&&` chain of affine comparisons: [(form, 'ge' | 'eq', isl text)]."""
    if isinstance(cond, c_ast.BinaryOp) and cond.op == "&&":
        return guards_of(cond.left, env) + guards_of(cond.right, env)
    if isinstance(cond, c_ast.BinaryOp) and cond.op in _CMP:
        try:
            lhs, rhs = affine_of(cond.left, env), affine_of(cond.right, env)
        except AffineError as e:
            raise NotRaisable(f"{line_of(cond)}: condition '{c_text(cond)}' is not affine ({e}; "
                              f"a data-dependent 'if' is outside the subset)") from None
        return [(*constraint_of(lhs, cond.op, rhs),
                 f"{fmt_affine(lhs)} {_CMP[cond.op]} {fmt_affine(rhs)}")]
    raise NotRaisable(f"{line_of(cond)}: condition '{c_text(cond)}' is not a conjunction (&&) "
                      f"of affine comparisons")


def extent_of(dim, env, decl) -> int | Affine:
    if dim is None:
        raise NotRaisable(f"{line_of(decl)}: array parameter '{decl.name}' has no extent")
    try:
        a = affine_of(dim, env)
    except AffineError:
        raise NotRaisable(f"{line_of(decl)}: extent '{c_text(dim)}' of '{decl.name}' is not an "
                          f"affine expression of the parameters") from None
    return a.get(1, 0) if set(a) <= {1} else a


def shape_key(shape) -> tuple:
    return tuple(d if isinstance(d, int) else fmt_affine(d) for d in shape)


PURE_FUNCTIONS = {
    f + suffix
    for f in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "pow",
              "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
              "asinh", "acosh", "atanh", "erf", "erfc", "tgamma", "lgamma", "fabs", "fmin",
              "fmax", "floor", "ceil", "round", "trunc", "rint", "nearbyint", "fmod",
              "remainder", "copysign", "hypot", "fma", "fdim")
    for suffix in ("", "f")} | {"abs", "isnan", "isinf", "isfinite", "signbit"}


ASSIGN_OPS = {"=", "+=", "-=", "*=", "/="}


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


def is_zero(e) -> bool:
    """A literal zero (`0.0f`, `0`): where an accumulation starts."""
    if not (isinstance(e, c_ast.Constant) and e.type in ("float", "double", "int")):
        return False
    try:
        return float(e.value.rstrip("fFlLuU")) == 0.0
    except ValueError:  # a hex float or an octal spelling: not worth parsing
        return False


def is_accumulation(node) -> bool:
    """`y += ...`, or `y = fmaf(a, b, y)`: a step of a reduction into y."""
    return (isinstance(node, c_ast.Assignment) and node.op == "+=") or \
        multiply_add(node) is not None


def array_refs(expr, out: list):
    """Every outermost array reference in an expression (subscripts are checked affine
    later, so they hold no array reference)."""
    if isinstance(expr, c_ast.ArrayRef):
        out.append(expr)
        return
    for _, child in expr.children():
        array_refs(child, out)


def check_rhs(expr, decl):
    """A right-hand side is side-effect free and uses arrays only through subscripts."""
    def walk(n, parent):
        if isinstance(n, c_ast.FuncCall):
            fn = n.name.name if isinstance(n.name, c_ast.ID) else None
            if fn not in PURE_FUNCTIONS:
                raise NotRaisable(f"{line_of(n)}: call to '{c_text(n.name)}' in a right-hand "
                                  f"side (only pure math.h functions)")
            for a in (n.args.exprs if n.args else []):
                walk(a, n)
            return
        if isinstance(n, c_ast.Assignment):
            raise NotRaisable(f"{line_of(n)}: nested assignment '{c_text(n)}'")
        if isinstance(n, c_ast.UnaryOp) and n.op in ("++", "--", "p++", "p--", "&", "*"):
            raise NotRaisable(f"{line_of(n)}: '{c_text(n)}' (side effect or pointer use) in a "
                              f"right-hand side")
        if isinstance(n, (c_ast.StructRef, c_ast.ExprList, c_ast.CompoundLiteral)):
            raise NotRaisable(f"{line_of(n)}: '{c_text(n)}' is outside the subset")
        if isinstance(n, c_ast.ID) and n.name in decl and decl[n.name].kind == "array" \
                and not (isinstance(parent, c_ast.ArrayRef) and parent.name is n):
            raise NotRaisable(f"{line_of(n)}: array '{n.name}' used as a pointer (pointer "
                              f"arithmetic is outside the subset)")
        for _, child in n.children():
            walk(child, n)
    walk(expr, None)
