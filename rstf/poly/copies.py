"""Copies read in place: a Transpose between two ops disappears into its readers.

BERT's attention splits the query and the value into heads with a Transpose:
`Z[h][t][d] = Y[t][64 h + d]`, a strided copy of the whole [seq, hidden] product, which
the next matmul then reads row by row. That matmul can read Y itself: its row-broadcast
operand (the query) and its column operand (the value) are still read at unit stride
along the kernel's reduction and columns, only their row strides change. Here such a copy
statement is dropped and every read of Z is rewritten as the read of Y it stands for
(`Y[f(g^-1(e))]`, composed in isl and kept only when it is affine).

A copy `C: Z[g(i)] = Y[f(i)]` folds when
- it is its call's only statement, and its right-hand side is the one array reference;
- Z is a temporary that C alone writes, each element once (g injective), and no
  statement writes Y after C (Y holds the same values wherever Z is read);
- every read of Z, composed with g^-1 and f, is an affine function of its reader's
  iterators, without integer divisions;
- and it costs no reader a unit stride: each iterator that stepped through Z at stride 1
  steps through Y at stride 1 (attention's key, transposed so that the sequence is the
  scores' columns, stays a copy: read in place, its columns would be 64 floats apart).

The readers' accesses change before the dependences are computed, so every later stage
sees the scop as if the op had been written to read Y (`fold_copies` returns a new scop
and leaves its argument as it was).
"""
from __future__ import annotations

import dataclasses

import islpy as isl
from pycparser import c_ast

from .scop import Access, Affine, Scop, Statement


def fold_copies(scop: Scop) -> Scop:
    """`scop` with every foldable copy (module doc) dropped and its readers reading its
    source; `scop` itself where there is none."""
    stmts = list(scop.statements)
    by_call: dict[int, list[Statement]] = {}
    for s in stmts:
        by_call.setdefault(s.call, []).append(s)
    folded = dict(scop.folded)
    for name in [s.name for s in stmts]:
        c = next(s for s in stmts if s.name == name)  # (a reader of an earlier copy: new)
        if len(by_call[c.call]) != 1:
            continue
        readers = _fold(c, stmts, scop)
        if readers is None:
            continue
        stmts = [readers.get(s.name, s) for s in stmts if s is not c]
        folded[c.call] = c.accesses[0].array
    if len(folded) == len(scop.folded):
        return scop
    return dataclasses.replace(scop, statements=stmts, folded=folded)


def _fold(c: Statement, stmts: list[Statement], scop: Scop) -> dict[str, Statement] | None:
    """The readers of copy `c`'s output rewritten to read its source, or None when `c`
    does not fold."""
    if c.ast.op != "=" or not isinstance(c.ast.rvalue, c_ast.ArrayRef) \
            or len(c.accesses) != 2 or c.domain.dim(isl.dim_type.param):
        return None
    src, dst = c.accesses
    y, z = src.array, dst.array
    if y == z or scop.buffers[z].role != "temp" or not dst.relation.is_injective():
        return None
    at = stmts.index(c)
    if any(a.write and a.array == z for s in stmts if s is not c for a in s.accesses):
        return None
    if any(a.write and a.array == y for s in stmts[at + 1:] for a in s.accesses):
        return None
    z_to_y = dst.relation.reverse().apply_range(src.relation)  # Z[e] -> Y[f(g^-1(e))]
    out = {}
    for s in stmts[at + 1:]:
        if not any(a.array == z for a in s.accesses):
            continue
        accesses = []
        for a in s.accesses:
            if a.array != z:
                accesses.append(a)
                continue
            rel = a.relation.apply_range(z_to_y)
            index = _affine_index(rel)
            if index is None or not _unit_strides_kept(a.index, index):
                return None
            accesses.append(Access(y, a.param, rel, index, a.ref, False))
        old = {id(a.relation) for a in s.accesses if a.array == z}
        reads = [r for r in s.reads if id(r) not in old]
        for a in accesses:
            if a.array == y and not a.write and not any(r.is_equal(a.relation) for r in reads):
                reads.append(a.relation)
        out[s.name] = dataclasses.replace(s, accesses=accesses, reads=reads)
    return out or None


def _affine_index(rel: isl.Map) -> list[Affine] | None:
    """One affine form per output dimension of a single-valued `rel` (keys: its input
    dimensions' names and 1), or None where it has pieces or integer divisions."""
    if not rel.is_single_valued():
        return None
    pma = isl.PwMultiAff.from_map(rel)
    if pma.n_piece() != 1:
        return None
    pieces = []
    pma.foreach_piece(lambda _set, ma: pieces.append(ma))
    ma = pieces[0]
    index = []
    for i in range(ma.dim(isl.dim_type.out)):
        aff = ma.get_aff(i)
        if aff.dim(isl.dim_type.div):
            return None
        form: Affine = {}
        for kind in (isl.dim_type.in_, isl.dim_type.param):
            for j in range(aff.dim(kind)):
                k = aff.get_coefficient_val(kind, j)
                if not k.is_zero():
                    if not k.is_int():
                        return None
                    form[aff.get_dim_name(kind, j)] = int(k.to_python())
        k = aff.get_constant_val()
        if not k.is_int():
            return None
        if not k.is_zero():
            form[1] = int(k.to_python())
        index.append(form)
    return index


def _unit_strides_kept(old: list[Affine], new: list[Affine]) -> bool:
    """Every iterator at stride 1 in the last dimension of `old` is at stride 1 in the last
    dimension of `new` and in no other."""
    unit = [v for v, k in old[-1].items() if v != 1 and k == 1
            and not any(v in f for f in old[:-1])]
    return all(new[-1].get(v) == 1 and not any(v in f for f in new[:-1]) for v in unit)
