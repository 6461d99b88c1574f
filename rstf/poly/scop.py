"""The static control part: the arrays, op-function calls and statements of one subgraph
as isl sets and maps (`Scop`), what `raise_c.raise_subgraph` builds and every later stage
reads. Also `isl_name`, the C identifier as isl may spell it, and `NotRaisable`, the
diagnostic of C outside the raisable subset.
"""
from __future__ import annotations

import dataclasses
import math

import islpy as isl
from pycparser import c_ast


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
    # (k, kc, tail): a contraction whose reduction over iterator k is summed in slices of kc
    # steps (the last of them maybe shorter) and then in slices of the `tail` lengths, each
    # from zero, added to the output in turn (poly/kslices.py); only microkernels compute
    # it so, and it is never printed as textbook C. (): one chain.
    k_slice: tuple = ()

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

    def union_set(self, sets) -> isl.UnionSet:
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
        return self.union_set(s.domain for s in self.statements)

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


_ISL_KEYWORDS = {"exists", "and", "or", "implies", "not", "mod", "floor", "ceil", "min",
                 "max", "infty", "NaN", "true", "false", "rat", "floord", "ceild"}


def isl_name(name: str) -> str:
    return name + "_" if name in _ISL_KEYWORDS else name


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
