"""A contraction summed in k slices, as one statement a microkernel computes.

The op templates spell a float MatMul or BatchMatMul in TensorFlow's k slices
(`rstf.opgen.kslices`, the `_loops.j2` macro `k_sliced`): the output Y is zeroed and takes
the first slice's fused multiply-add chain itself, then for each later slice a scratch T is
zeroed, takes that slice's chain, and is added to Y:

    Y = 0;  Y = fmaf(A, B, Y) for k in [0, kc)
    T = 0;  T = fmaf(A, B, T) for k in [kc, 2 kc);  Y = Y + T
    ...

That is exact textbook C, but it leaves the polyhedral pass a zeroing pass, a stored and
reloaded scratch and an addition pass per slice, and no register epilogue. `fold_k_slices`
turns such a sequence back into the first contraction statement over all of k, marked
`Statement.k_slice = (k, kc, tail)`: its microkernels (`Shape.kc`, `Shape.kc_tail`) restart
their accumulators at every kc steps of k, then at each of the tail's slices (oneDNN's
halves of Eigen's last slice can be longer than its halves of the others), and add each
slice's sum to the running one, the same additions in the same order, so the result is the
textbook C's bit for bit.

A statement so marked means more than its own C says, so it must never be printed as
textbook C: `schedule.schedule_call` raises `UnslicedStatement` where a marked statement
is not computed whole by kernels (a refused tiling, points left to the residual loops), and
the pass then runs again on the unfolded C (`poly._optimize`).
"""
from __future__ import annotations

import dataclasses

import islpy as isl
from pycparser import c_ast

from .cparse import is_zero, multiply_add
from .groups import extents, flat_addr
from .scop import Scop, Statement


# The most slices after the uniform ones a kernel takes: oneDNN's blocks of Eigen's last
# slice make one or two.
MAX_TAIL = 3


class UnslicedStatement(ValueError):
    """A k-sliced statement (`fold_k_slices`) that microkernels do not compute whole."""


def fold_k_slices(scop: Scop) -> Scop:
    """`scop` with each k-sliced contraction (module docstring) as one statement marked
    `k_slice`; the scop itself where there is none."""
    stmts = scop.statements
    drop: set[str] = set()
    folded: dict[str, Statement] = {}
    for i, s in enumerate(stmts):
        if s.name in drop or multiply_add(s.ast) is None or s.domain.dim(isl.dim_type.param):
            continue
        parts, j = [s], i + 1
        while _slice_at(stmts[j:j + 3], s, scop):
            parts.append(stmts[j + 1])
            j += 3
        if len(parts) < 2:
            continue
        names = {x.name for x in stmts[i + 1:j]}
        scratch = {x.accesses[-1].array for x in parts[1:]}
        if any(a.array in scratch for x in stmts if x.name not in names for a in x.accesses):
            continue  # the scratch is read or written elsewhere: not only a slice's sum
        merged = _merge(s, parts[1:])
        if merged is not None:
            folded[s.name] = merged
            drop |= names
    if not folded:
        return scop
    return dataclasses.replace(scop, statements=[folded.get(x.name, x) for x in stmts
                                                 if x.name not in drop])


def _slice_at(three: list[Statement], first: Statement, scop: Scop) -> bool:
    """Whether `three` is one later slice of `first`'s contraction: T = 0, the same step
    into T, Y = Y + T, every one over the same output points and in the same call."""
    if len(three) < 3:
        return False
    zero, step, add = three
    y, t = first.accesses[-1], step.accesses[-1]
    if any(x.call != first.call for x in three) or t.array == y.array \
            or scop.buffers[t.array].role != "temp":
        return False

    def at(a) -> tuple:  # an access as (array, write, linear offset): views may differ
        return a.array, a.write, sorted(flat_addr(a, scop).items(), key=str)

    yat = at(y)[2]
    if not (isinstance(zero.ast, c_ast.Assignment) and zero.ast.op == "="
            and is_zero(zero.ast.rvalue) and len(zero.accesses) == 1
            and at(zero.accesses[0]) == (t.array, True, yat)):
        return False
    if multiply_add(step.ast) is None or step.iterators != first.iterators \
            or len(step.accesses) != len(first.accesses):
        return False
    for a, b in zip(step.accesses, first.accesses):  # the same step, T for Y
        if a.array == y.array or ((y.array if a.array == t.array else a.array),) + at(a)[1:] \
                != at(b):
            return False
    ra = add.ast.rvalue if isinstance(add.ast, c_ast.Assignment) else None
    if not (add.ast.op == "=" and isinstance(ra, c_ast.BinaryOp) and ra.op == "+"):
        return False
    reads = sorted((at(a) for a in add.accesses if not a.write), key=str)
    return at(add.accesses[-1]) == (y.array, True, yat) and reads == sorted(
        [(y.array, False, yat), (t.array, False, yat)], key=str) and zero.domain.is_equal(
        add.domain.set_tuple_name(zero.domain.get_tuple_name()))


def _merge(first: Statement, later: list[Statement]) -> Statement | None:
    """`first` over the union of its and the `later` slices' k ranges, marked with the
    slice length and the tail's; None unless the slices are one iterator's consecutive
    ranges from 0 over the same other points: slices of one length (the last one shorter
    or equal), then at most `MAX_TAIL` of any length."""
    boxes = [extents(x) for x in [first, *later]]
    diff = [d for d in range(len(first.iterators)) if len({b[d] for b in boxes}) > 1]
    if len(diff) != 1:
        return None
    d = diff[0]
    ranges = [b[d] for b in boxes]
    if ranges[0][0] != 0 or any(a[1] + 1 != b[0] for a, b in zip(ranges, ranges[1:])):
        return None
    sizes = [hi - lo + 1 for lo, hi in ranges]
    kc = sizes[0]
    run = next((n for n, size in enumerate(sizes) if size != kc), len(sizes))
    if run == len(sizes) - 1 and sizes[-1] < kc:
        run += 1  # a shorter last slice is the uniform run's own
    tail = tuple(sizes[run:])
    if len(tail) > MAX_TAIL:
        return None
    name = first.domain.get_tuple_name()
    domain = first.domain
    for x in later:
        domain = domain.union(x.domain.set_tuple_name(name))
    domain = domain.coalesce()
    if domain.n_basic_set() != 1:
        return None

    def widened(m: isl.Map) -> isl.Map:
        """An access relation of `first` (affine, restricted to its domain) over `domain`."""
        out = m.gist_domain(first.domain).intersect_domain(domain)
        if not out.intersect_domain(first.domain).is_equal(m):
            raise ValueError(f"{first.name}: an access is not one affine map")
        return out

    try:
        accesses = [dataclasses.replace(a, relation=widened(a.relation))
                    for a in first.accesses]
        reads, writes = [widened(r) for r in first.reads], [widened(w) for w in first.writes]
    except ValueError:
        return None
    return dataclasses.replace(first, domain=domain, reads=reads, writes=writes,
                               accesses=accesses, k_slice=(first.iterators[d], kc, tail))
