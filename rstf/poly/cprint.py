"""isl AST pieces as C: expressions, array references, loop trip counts and chunk sizes.

The small printers `emit.CallLowering` and `lower.lower` share: an isl expression with
rstf's `rstf_min`/`rstf_max`/`rstf_floord` (`ast_c`, whose macros are `MACROS`), an affine
access as a C array reference (`ref_c`), an assignment re-printed with its references and
iterators substituted (`Emitter`), and the facts about an isl AST loop that the pragmas
are decided on (`loop_trips`, `chunk_size`, `users_of`, `has_for`, `instance_volume`).
"""
from __future__ import annotations

import math

import islpy as isl
from pycparser import c_generator

from .groups import extents
from .scop import Statement
from .tuning import Tuning


def dynamic_schedule(chunk: int) -> str:
    """The schedule clause of the pass's parallel loops (`MACROS`' RSTF_SCHEDULE): with
    rstf's OpenMP team (rstf/runtime/rstf_team.c), chunks of `chunk` iterations in any
    order, which the team runs as a static loop whose threads steal from each other's ends
    when one falls behind (a core slowed by its neighbours, or taken by another of
    TensorFlow's threads); with libgomp, static."""
    return f"schedule(RSTF_SCHEDULE({chunk}))"


MACROS = """\
/* The parallel loops' schedule. rstf's OpenMP team (RSTF_TEAM: the op library) runs a
   nonmonotonic dynamic loop as static shares that the threads steal from each other's
   ends; libgomp (the serving package) hands dynamic chunks out in order, which moves the
   rows from core to core from one loop to the next: static there. */
#ifdef RSTF_TEAM
#define RSTF_SCHEDULE(chunk) nonmonotonic: dynamic, chunk
#else
#define RSTF_SCHEDULE(chunk) static
#endif

/* isl AST expressions. */
#define rstf_floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define rstf_min(x, y) ((x) < (y) ? (x) : (y))
#define rstf_max(x, y) ((x) > (y) ? (x) : (y))

/* Columns [c0, c0+vb) of the rows x cols matrix b, contiguous in p (a kernel's panel). */
static inline void rstf_pack(float *restrict p, const float *restrict b, long rows, long cols,
                             long c0, long vb)
{
    for (long q = 0; q < rows; ++q)
        for (long j = 0; j < vb; ++j)
            p[q * vb + j] = b[q * cols + c0 + j];
}
"""


class Emitter(c_generator.CGenerator):
    """Prints an assignment with array references and iterators replaced."""

    def __init__(self, refs: dict[int, str], ids: dict[str, str]):
        super().__init__(reduce_parentheses=False)
        self.refs, self.ids = refs, ids

    def visit_ArrayRef(self, n):
        if id(n) in self.refs:
            return self.refs[id(n)]
        return super().visit_ArrayRef(n)

    def visit_ID(self, n):
        return self.ids.get(n.name, n.name)


def ast_c(e: isl.AstExpr) -> str:
    text = e.to_C_str()
    for f in ("floord", "min", "max"):
        text = text.replace(f"{f}(", f"rstf_{f}(")
    return text


def affine_c(aff: dict, env: dict[str, str]) -> str:
    terms = []
    for var, c in aff.items():
        if var == 1 or not c:
            continue
        val = env[var]
        terms.append(val if c == 1 else f"{c} * {val}" if c > 0 else f"-{-c} * {val}")
    const = aff.get(1, 0)
    if const or not terms:
        terms.append(str(const))
    return " + ".join(terms).replace("+ -", "- ")


def ref_c(access, env: dict[str, str]) -> str:
    return access.array + "".join(f"[{affine_c(i, env)}]" for i in access.index)


def loop_trips(node: isl.AstNode) -> int | None:
    """The iterations of an isl AST loop whose bounds and step are constants, else None."""
    init, cond, inc = node.for_get_init(), node.for_get_cond(), node.for_get_inc()
    if (init.get_type() != isl.ast_expr_type.int or inc.get_type() != isl.ast_expr_type.int
            or cond.get_type() != isl.ast_expr_type.op or cond.get_op_n_arg() != 2):
        return None
    bound = cond.get_op_arg(1)
    op = cond.get_op_type()
    if bound.get_type() != isl.ast_expr_type.int or op not in (isl.ast_expr_op_type.le,
                                                               isl.ast_expr_op_type.lt):
        return None
    lo, hi, step = (int(e.get_val().to_python()) for e in (init, bound, inc))
    hi += op == isl.ast_expr_op_type.le
    return max(0, -(-(hi - lo) // step))


def chunk_size(work: float, node: isl.AstNode, inner: isl.AstNode | None,
               tuning: Tuning) -> int:
    """Iterations per chunk of a parallel loop (with `inner`, the collapsed pair) that runs
    `work` statement instances: `tuning.chunk_work` of them, in at least `min_chunks` chunks (an
    instance may be a vector FMA's lane or a whole pointwise op), 1 where the trip count is
    not known."""
    trips = loop_trips(node)
    if trips is not None and inner is not None:
        t2 = loop_trips(inner)
        trips = trips * t2 if t2 is not None else None
    if not trips:
        return 1
    return max(1, min(int(tuning.chunk_work * trips // max(work, 1)),
                      trips // tuning.min_chunks))


def step_c(it: str, node: isl.AstNode) -> str:
    inc = ast_c(node.for_get_inc())
    return f"++{it}" if inc == "1" else f"{it} += {inc}"


def users_of(node: isl.AstNode) -> set[str]:
    out: set[str] = set()

    def visit(n):
        if n.get_type() == isl.ast_node_type.user:
            out.add(n.user_get_expr().get_op_arg(0).get_id().get_name())
        return True

    node.foreach_descendant_top_down(visit)
    return out


def has_for(node: isl.AstNode) -> bool:
    found = []

    def visit(n):
        if n.get_type() == isl.ast_node_type.for_:
            found.append(n)
        return True

    node.foreach_descendant_top_down(visit)
    return bool(found)


def instance_volume(s: Statement) -> int:
    """Instances of the statement (its bounding box); a parametric one counts as large."""
    if s.domain.dim(isl.dim_type.param):
        return 1 << 30
    return math.prod(hi - lo + 1 for lo, hi in extents(s))
