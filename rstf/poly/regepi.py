"""The fused epilogue in the microkernel's registers.

`fuse.fuse_epilogue` runs a contraction's pointwise chain (bias, batch norm, ReLU6, a
residual add) row by row: the microkernel adds its tile into a row buffer that was zeroed
first, and once the row is complete the chain reads it back and writes the group's output.
When one kernel call computes an output element's *whole* reduction (a 1x1 convolution;
a depthwise or first 3x3 convolution, whose short kh loop runs in the kernel and whose
border rows run in kernels with fewer taps: no reduction loop outside the kernel, and no
point left to the textbook loops), the row buffer is not needed at all: the kernel starts its accumulators at zero and, after its
last reduction step, runs the chain on them in registers and stores only the chain's results
(PolyScientist's fused epilogue). That removes the zeroing pass, the kernel's load and
store of the tile and the chain's reload: for MobileNet v2's 16-deep expansion conv, a
quarter of the group's time.

The chain is translated statement by statement into GCC vector code, one vector register
of output columns (or half of one) at a time: the conv's output element is the
accumulator, a scalar contracted between two statements is a vector variable, and every
other array reference must advance along the output columns at unit stride (a vector load
or store: a per-channel scale, another tensor of the output's shape) or not at all (a
broadcast scalar).
Arithmetic, negation, comparisons and `?:` are translated (a `?:` on vectors is a bitwise
select, which keeps NaN and signed-zero behaviour; its condition may be a TF bool tensor,
SelectV2's mask, loaded as bytes and widened to a lane mask); anything else (a math function call, a
cast) leaves the group to the row-buffer epilogue. That includes rstf's own vectorisable exp
(sigmoid, swish): run in the kernel beside its accumulators, its dozen temporaries spill
them, and the row-buffer loop, with the registers to itself, is faster (docs/benchmarks). A `?:` that picks one of its two compared
operands is the vector max or min instruction instead (`_select`): x86's MAXPS and MINPS are
defined as exactly such a select, `a > b ? a : b` and `a < b ? a : b`, NaN and signed zeros
included, so the result bits are the same. The templates' ReLU6, a clamp
`x < 0 ? 0 : (x > 6 ? 6 : x)`, becomes max(0, min(6, x)): two instructions where the select
took two compares and two blends, on a kernel whose depthwise reduction is only 9 steps
deep (MobileNet v2's kernels: 2.5% faster). Each statement keeps its own rounding:
the kernels are compiled without FMA contraction, like the code they replace, so results
stay bit-identical to the textbook C.
"""
from __future__ import annotations

import dataclasses

import islpy as isl
from pycparser import c_ast

from . import abi
from .microkernel import (guarded, kernel_text, lanes, splat, valid_lanes, vector_load,
                          vector_store, vectors)
from .cparse import c_text, is_zero
from .scop import Scop, Statement, isl_name
from .groups import CallSchedule, Kernel, extents, flat_addr, kernel_roles
from .target import Target

_ARITH = {"+", "-", "*", "/"}
_COMPARE = {"<", ">", "<=", ">=", "==", "!="}

# Where the target has a vector type's MAXPS / MINPS: the macro that says so, the
# intrinsics' prefix, their vector type.
_MAX_MIN = {16: ("__AVX512F__", "_mm512", "__m512"), 8: ("__AVX__", "_mm256", "__m256"),
            4: ("__SSE__", "_mm", "__m128")}


def prelude(t: Target) -> str:
    """Comparison masks, select, max and min for target `t`'s vector types (after
    `microkernel.prelude`)."""
    out = ["/* Epilogues in registers: comparison masks and select for the vector types. */"]
    for n in (t.vlen, t.half):
        out += [f"typedef int rstf_m{n} __attribute__((vector_size({4 * n})));",
                f"static inline rstf_v{n} rstf_sel{n}(rstf_m{n} m, rstf_v{n} a, rstf_v{n} b)",
                f"{{ return (rstf_v{n})((m & (rstf_m{n})a) | (~m & (rstf_m{n})b)); }}",
                f"typedef unsigned char rstf_b{n} __attribute__((vector_size({n})));",
                f"/* the lanes where n bools (TF's bytes) from p are true */",
                f"static inline rstf_m{n} rstf_bmask{n}(const unsigned char *p)",
                f"{{ rstf_b{n} b; __builtin_memcpy(&b, p, {n}); "
                f"return __builtin_convertvector(b, rstf_m{n}) != 0; }}"]
    out.append("/* a > b ? a : b and a < b ? a : b, lane by lane (b where either is NaN): one "
               "MAXPS or MINPS,\n   whose definition this is, where the target has it. */")
    for n in (t.vlen, t.half):
        sel = [f"static inline rstf_v{n} rstf_max{n}(rstf_v{n} a, rstf_v{n} b) "
               f"{{ return rstf_sel{n}(a > b, a, b); }}",
               f"static inline rstf_v{n} rstf_min{n}(rstf_v{n} a, rstf_v{n} b) "
               f"{{ return rstf_sel{n}(a < b, a, b); }}"]
        macro, pre, mt = _MAX_MIN.get(n, (None, "", ""))
        out += guarded(macro, [f"#define rstf_{f}{n}(a, b) ((rstf_v{n}){pre}_{f}_ps(({mt})(a), "
                               f"({mt})(b)))" for f in ("max", "min")], sel)
    return "\n".join(out) + "\n"


class Refused(Exception):
    """The chain has something the vector translation does not cover."""




@dataclasses.dataclass
class Operand:
    """An array the epilogue reads or writes (not the accumulator, not a contracted
    scalar): its element for row r, column c is `ptr[r * row + c * col]`, ptr being the
    element of the tile's first row and column."""
    array: str
    row: int  # element stride per output row
    col: int  # 1 (a vector) or 0 (one scalar per row)
    write: bool
    ctype: str = "float"  # or "unsigned char": a TF bool, read only as a select's condition


@dataclasses.dataclass
class RegisterEpilogue:
    """How one fused group runs its chain in its kernels' registers."""
    call: int  # the group's call (names its kernels)
    y: str  # the contraction's output, now never stored
    init: str  # its zeroing statement, now dropped
    head: str  # the chain's first statement, which stood for the chain in the AST
    kernels: dict[str, list[int]]  # kernel statement -> the chunk row counts it runs
    operands: list[Operand]  # pointer arguments after the kernel's own, in order
    statements: list[Statement]  # the chain
    contracted: set[str]
    # kernel statement -> the chain on its accumulator row r (epilogue_lines); a Winograd
    # group's: panel width -> the chain on one pixel's vectors (chain_lines)
    lines: dict = dataclasses.field(default_factory=dict)

    def name(self, k: Kernel, rows: int | None = None) -> str:
        """The kernel of `rows` rows, or (None) the dispatcher over the chunk sizes; named
        for its shape's tag too, as a tile's kernel and its masked remainder's may have the
        same rows and width."""
        if rows is None:
            return f"rstf_mkve{self.call}_{k.rb}x{k.width}{k.shape.tag}"
        return f"rstf_mke{self.call}_{rows}x{k.width}{k.shape.tag}"


def plan(scop: Scop, cs: CallSchedule) -> RegisterEpilogue | None:
    """The register epilogue of a fused group (`fuse.fuse_epilogue`'s), or None when it does
    not apply (see the module docstring)."""
    if not cs.kernels or cs.chain is None or len(cs.rows) != 1:
        return None
    kern = cs.kernels[0]
    upd = scop.statement(kern.statement)
    y = kern.y.array
    if cs.rows.get(y) is None or any(k.statement != upd.name for k in cs.kernels):
        return None
    _, reds, r, _, v = kernel_roles(upd, kern)
    box = dict(zip([isl_name(x) for x in upd.iterators], extents(upd)))
    if any(box[x][1] > box[x][0] for x in reds) or any(k.kb for k in cs.kernels) \
            or not cs.ast_time[upd.name].domain().is_empty():
        return None  # a reduction outside the kernel (K blocks too), or points left to the
        # textbook loops
    init = next((s for s in cs.statements if s.name != upd.name
                 and s.accesses[-1].array == y), None)
    if init is None or not is_zero(init.ast.rvalue):
        return None
    # Every element of Y is some kernel's: none is left at its initial zero.
    if not init.accesses[-1].relation.range().is_subset(kern.y.relation.range()):
        return None
    # Y's dimensions: the row iterator alone in one of them (or absent: a single row),
    # the column iterator alone in the last.
    yidx = kern.y.index
    if yidx[-1] != {v: 1} or any(v in i for i in yidx[:-1]):
        return None
    # (merged rows: o alone in one of Y's dimensions too)
    rdim, odim = (_alone_in(yidx, x) if x is not None else None
                  for x in (r, isl_name(kern.merged) if kern.merged else None))
    if (r is not None and rdim is None) or (kern.merged and odim is None):
        return None
    chain = cs.chain.statements
    written = {s.accesses[-1].array for s in chain}
    contracted = set(cs.chain.contracted)
    operands: dict[str, Operand] = {}
    for s in chain:
        iv = [isl_name(x) for x in s.iterators]
        if len(iv) != len(yidx) or scop.buffers[s.accesses[-1].array].ctype != "float":
            return None
        for a in s.accesses:
            if a.array == y or a.array in contracted:
                continue
            ctype = scop.buffers[a.array].ctype
            if ctype not in ("float", "unsigned char") or (a.write and ctype != "float"):
                return None
            addr = flat_addr(a, scop)
            if addr is None:
                return None
            col = addr.get(iv[-1], 0)
            row = addr.get(iv[rdim], 0) if rdim is not None else 0
            if col not in (0, 1) or (a.write and col != 1):
                return None
            if odim is not None and addr.get(iv[odim], 0) != kern.merged_n * row:
                return None  # the operand's rows do not follow each other as Y's do
            op = Operand(a.array, row, col, a.write, ctype)
            if not a.write and a.array in written:
                # A chain output read back (stored too: it is read outside the chain):
                # the vector just computed, if the read is at the written element.
                w = operands.get(a.array)
                if w is None or (w.row, w.col) != (row, col):
                    return None
                continue
            if a.array in operands and operands[a.array] != op:
                return None  # read and written, or read at two strides
            operands[a.array] = op
    epi = RegisterEpilogue(cs.call, y, init.name, chain[0].name,
                           {k.name: _row_counts(cs.ast_time[k.name].domain())
                            for k in cs.kernels},
                           list(operands.values()), chain, contracted)
    try:
        epi.lines = {k.name: epilogue_lines(epi, k) for k in cs.kernels}
    except Refused:
        return None
    return epi


def kernel_times(scop: Scop, cs: CallSchedule, time: dict[str, isl.Map]) -> dict[str, isl.Map]:
    """Where the kernels of `cs` (a group with a register epilogue) really run the
    statements the epilogue absorbs: the zeroing of an element of Y at the first kernel
    instance that accumulates into it, the chain on it at the last one (`time` holds the
    kernel statement's). The group's own times keep them where a row-buffer epilogue
    would run, before and after the whole row of tiles: read as they are, every row chunk
    of a contraction whose rows are all in one kernel row (a [1, M, K] batch matmul) would
    seem to depend on the others, and a single column tile would leave it one thread's."""
    epi, kern = cs.epilogue, cs.kernels[0]
    init = scop.statement(epi.init)
    # init instance -> the kernel instances accumulating into its element -> their times
    runs = (init.accesses[-1].relation.apply_range(kern.y.relation.reverse())
            .apply_range(time[kern.statement]))
    out = {init.name: runs.lexmin()}
    last = runs.lexmax()
    for s in epi.statements:  # over init's box, point for point (`fuse.fuse_epilogue`)
        iv = ", ".join(isl_name(x) for x in s.iterators)
        same = isl.Map(f"{{ {s.name}[{iv}] -> {init.name}[{iv}] }}")
        out[s.name] = same.intersect_domain(s.domain).apply_range(last)
    return out


def _alone_in(index: list[dict], x: str) -> int | None:
    """The one dimension of `index` that iterator x indexes, when it is x alone; else None."""
    dims = [d for d, i in enumerate(index) if x in i]
    return dims[0] if len(dims) == 1 and index[dims[0]] == {x: 1} else None


def _row_counts(kdom: isl.Set) -> list[int]:
    """The distinct chunk sizes e - s + 1 of a kernel's instances (its last two dims)."""
    n = kdom.dim(isl.dim_type.set)
    size = isl.Map.from_domain_and_range(kdom, isl.Set("{ [x] }"))
    size = size.add_constraint(isl.Constraint.equality_alloc(size.get_space())
                               .set_coefficient_val(isl.dim_type.in_, n - 1, 1)
                               .set_coefficient_val(isl.dim_type.in_, n - 2, -1)
                               .set_coefficient_val(isl.dim_type.out, 0, -1)
                               .set_constant_val(1))
    counts: list[int] = []
    size.range().foreach_point(lambda p: counts.append(
        int(p.get_coordinate_val(isl.dim_type.set, 0).to_python())))
    return sorted(counts, reverse=True)


# --------------------------------------------------------------------------- C text


def epilogue_lines(epi: RegisterEpilogue, k: Kernel) -> list[str]:
    """The chain on accumulator row r, one vector at a time (the body of `for r`)."""
    return chain_lines(epi, k.width, k.vl, k.pad)


def chain_lines(epi: RegisterEpilogue, width: int, vl: int, pad: int = 0) -> list[str]:
    """The chain on accumulators acc<v>[r] of `width` columns, one vector of `vl` floats
    (or a half one) at a time; each
    operand `a` through its pointer `a_p` (its element at row r, column 0 is
    `a_p[r * row]`). `pad`: the last vector's lanes past the columns (a remainder tile),
    which its operands' loads and stores leave alone. Raises Refused for what the
    translation does not cover."""
    out = []
    for vi, (vt, c0) in enumerate(vectors(width, vl)):
        valid = valid_lanes(width, vl, pad, vi)
        out.append("{")
        for s in epi.statements:
            text, is_vec = _Vector(epi, vt, vi, c0, s, valid).expr(s.ast.rvalue)
            val = text if is_vec else f"{splat(vt)}({text})"
            dst = s.accesses[-1].array
            out.append(f"    const {vt} {dst}_c = {val};")
            if dst not in epi.contracted:
                out.append("    " + vector_store(vt, f"{dst}_p{_offset(_op(epi, dst).row, c0)}",
                                                f"{dst}_c", valid))
        out.append("}")
    return out


def _offset(row: int, c0: int) -> str:
    """' + r * row + c0' without the zero terms."""
    return (f" + r * {row}" if row else "") + (f" + {c0}" if c0 else "")


def _op(epi: RegisterEpilogue, array: str) -> Operand:
    return next(o for o in epi.operands if o.array == array)


class _Vector:
    """One chain statement's right-hand side as vector C: (text, is it a vector)."""

    def __init__(self, epi: RegisterEpilogue, vt: str, vi: int, c0: int, s: Statement,
                 valid: int = 0):
        self.epi, self.vt, self.vi, self.c0 = epi, vt, vi, c0
        self.valid = valid  # a remainder's last vector: its lanes past this are masked
        self.refs = {id(a.ref): a for a in s.accesses}
        # Outputs of the statements before s: read back from their vector variables.
        before = epi.statements[:epi.statements.index(s)]
        self.written = {t.accesses[-1].array for t in before}

    def expr(self, n) -> tuple[str, bool]:
        if isinstance(n, c_ast.Constant):
            if n.type not in ("float", "double", "int"):
                raise Refused(n.type)
            return n.value, False
        if isinstance(n, c_ast.ArrayRef):
            return self._ref(self.refs[id(n)])
        if isinstance(n, c_ast.UnaryOp) and n.op in ("-", "+"):
            t, v = self.expr(n.expr)
            return f"({n.op}{t})", v
        if isinstance(n, c_ast.BinaryOp) and n.op in _ARITH:
            (a, va), (b, vb) = self.expr(n.left), self.expr(n.right)
            return f"({a} {n.op} {b})", va or vb
        if isinstance(n, c_ast.TernaryOp):
            return self._select(n)
        if isinstance(n, c_ast.FuncCall) and c_text(n.name) == "rstf_selectf":
            return self._select(c_ast.TernaryOp(*n.args.exprs))  # SelectV2: c ? a : b
        raise Refused(type(n).__name__)

    def _ref(self, a) -> tuple[str, bool]:
        if a.array == self.epi.y:
            return f"acc{self.vi}[r]", True
        if a.array in self.epi.contracted or a.array in self.written:
            return f"{a.array}_c", True
        op = _op(self.epi, a.array)
        if op.ctype != "float":
            raise Refused(f"{op.ctype} value")  # (a mask is read by _select alone)
        if op.col:
            ptr = f"{a.array}_p{_offset(op.row, self.c0)}"
            return f"({vector_load(self.vt, ptr, self.valid)})", True
        return f"{a.array}_p[{_offset(op.row, 0)[3:] or '0'}]", False

    def _select(self, n: c_ast.TernaryOp) -> tuple[str, bool]:
        (a, va), (b, vb) = self.expr(n.iftrue), self.expr(n.iffalse)
        c = n.cond
        width = str(lanes(self.vt))
        mask = self.refs.get(id(c)) if isinstance(c, c_ast.ArrayRef) else None
        if mask is not None and mask.array not in self.written \
                and _op(self.epi, mask.array).ctype == "unsigned char":
            # A TF bool (SelectV2's condition, attention's mask): lanes where it is nonzero
            op = _op(self.epi, mask.array)
            p = f"{mask.array}_p{_offset(op.row, self.c0 if op.col else 0)}"
            if not op.col:  # one per row: C's own ?: between whole vectors
                return f"(*({p}) ? {self._vec(a, va)} : {self._vec(b, vb)})", True
            if self.valid:
                raise Refused("a mask of bools past a remainder's columns")
            return (f"rstf_sel{width}(rstf_bmask{width}({p}), {self._vec(a, va)}, "
                    f"{self._vec(b, vb)})"), True
        if not (isinstance(c, c_ast.BinaryOp) and c.op in _COMPARE):
            raise Refused("condition")
        (x, vx), (y, vy) = self.expr(c.left), self.expr(c.right)
        if not (vx or vy):  # a scalar condition: C's own ?:
            if not (va or vb):
                return f"(({x} {c.op} {y}) ? ({a}) : ({b}))", False
            return f"(({x} {c.op} {y}) ? {self._vec(a, va)} : {self._vec(b, vb)})", True
        x, y = self._vec(x, vx), self._vec(y, vy)
        a, b = self._vec(a, va), self._vec(b, vb)
        # A select of one compared operand or the other: exactly MAXPS(p, q) = p > q ? p : q
        # or MINPS(p, q) = p < q ? p : q, with the operands in the order that keeps which
        # one a NaN (false comparison) or an equal pair (x < y false) picks.
        if c.op in ("<", ">") and {a, b} == {x, y}:
            # x < y ? y : x = y > x ? y : x = max(y, x); x < y ? x : y = min(x, y); and
            # symmetrically for >.
            fn = "max" if (c.op == "<") == (a == y) else "min"
            return f"rstf_{fn}{width}({a}, {b})", True
        if c.op == "<" and a == y and self._clamps(n, x, b, width):
            return f"rstf_max{width}({y}, {b})", True
        return f"rstf_sel{width}(({x} {c.op} {y}), {a}, {b})", True

    def _clamps(self, n: c_ast.TernaryOp, x: str, b: str, width: str) -> bool:
        """Whether `x < lo ? lo : b` (n, ReLU6's outer select) is max(lo, b): true when lo
        and hi are constants, lo <= hi, and b is min(hi, x), which is what the inner
        `x > hi ? hi : x` became. Equal bits: min(hi, x) is below lo exactly when x is (a
        NaN x stays NaN through both), and max(lo, m) = lo > m ? lo : m."""
        lo, inner = n.cond.right, n.iffalse
        if not (isinstance(lo, c_ast.Constant) and isinstance(inner, c_ast.TernaryOp)
                and isinstance(inner.cond, c_ast.BinaryOp)
                and isinstance(inner.cond.right, c_ast.Constant)):
            return False
        hi = inner.cond.right
        return (b == f"rstf_min{width}({self._vec(*self.expr(hi))}, {x})"
                and _number(lo.value) <= _number(hi.value))

    def _vec(self, text: str, is_vec: bool) -> str:
        return text if is_vec else f"{splat(self.vt)}({text})"


def _number(text: str) -> float:
    """The value of a C decimal constant (`6.0f`, `0.0`, `6`); NaN for any other spelling,
    which no comparison accepts."""
    try:
        return float(text.rstrip("fFlLuU"))
    except ValueError:
        return float("nan")


def kernel_sources(epi: RegisterEpilogue, kernels: list[Kernel]) -> str:
    """The group's kernels: for each, one function per chunk row count it runs, and a
    dispatcher `rstf_mkve<call>_<RB>x<width>(rows, ...)`."""
    out = []
    for k in kernels:
        counts = epi.kernels[k.name]
        for rows in counts:
            out.append(_kernel(epi, k, rows))
        forward = abi.epilogue_kernel(k.shape, epi.operands).forward()
        cases = "".join(f"    case {n}: {epi.name(k, n)}({forward}); break;\n" for n in counts)
        out.append(f"""\
/* {k.rb} rows of {k.width} columns (or the fewer a chunk has), the epilogue fused. */
static void {epi.name(k)}({abi.epilogue_dispatcher(k.shape, epi.operands).signature()})
{{
    switch (rows) {{
{cases}    }}
}}
""")
    return "\n".join(out) + "\n"


def _kernel(epi: RegisterEpilogue, k: Kernel, rb: int) -> str:
    fns = ", ".join(s.function for s in epi.statements)
    return kernel_text(
        epi.name(k, rb), k.shape.rows(rb), abi.epilogue_kernel(k.shape, epi.operands),
        epi.lines[k.name],
        f"{rb} rows of {k.width} columns: the whole reduction from zero, in "
        f"{rb}x{len(vectors(k.width, k.vl))} registers,\n   then the chain ({fns}) on them; "
        f"only its results are stored.", zero=True, contract_off=True)
