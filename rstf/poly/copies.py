"""Copies read or written in place: a Transpose between two ops disappears.

BERT's attention splits the query and the value into heads with a Transpose:
`Z[h][t][d] = Y[t][64 h + d]`, a strided copy of the whole [seq, hidden] product, which
the next matmul then reads row by row. That matmul can read Y itself: its row-broadcast
operand (the query) and its column operand (the value) are still read at unit stride
along the kernel's reduction and columns, only their row strides change. So the copy
statement is dropped and every read of Z becomes the read of Y it stands for,
`Y[f(g^-1(e))]` (`_into_readers`). Where the readers cannot (the context, [heads, seq, d],
transposed back to [seq, heads x d] for the output projection, which reads a row of 512 as
one reduction: h = k / 64 is no affine index), the statements that make Y make Z instead,
`Z[g(f^-1(e))]` (`_into_writers`): the context's matmul stores its tiles 512 floats a row
apart in the projection's input.

A copy `C: Z[g(i)] = Y[f(i)]` folds when
- it is its call's only statement, its right-hand side the one array reference, Z a
  temporary that C alone writes, f and g injective;
- into the readers: no statement writes Y after C (the readers see the values C copied);
  into the writers: Y is a temporary that nothing after C uses and Z nothing before it;
- every rewritten access, composed in isl, is an affine function of its statement's
  iterators without integer divisions, defined wherever the old one was;
- and it costs no statement a unit stride: each iterator that stepped through the old
  array at stride 1 steps through the new one at stride 1 (attention's key, transposed so
  that the sequence is the scores' columns, stays a copy: read in place, its columns would
  be 64 floats apart).

The accesses change before the dependences are computed, so every later stage sees the
scop as if the ops had been written that way (`fold_copies` returns a new scop and leaves
its argument as it was). The entry says where each dropped copy went.
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
        if len(by_call[c.call]) != 1 or not _is_copy(c, scop):
            continue
        src, dst = c.accesses
        at = stmts.index(c)
        new = _into_readers(c, stmts[at + 1:], stmts)
        how = f"its readers read {src.array} in place"
        if new is None:
            new = _into_writers(c, stmts[:at], stmts, scop)
            how = f"{src.array}'s writers write {dst.array} in place"
        if new is None:
            continue
        stmts = [new.get(s.name, s) for s in stmts if s is not c]
        folded[c.call] = how
    if len(folded) == len(scop.folded):
        return scop
    return dataclasses.replace(scop, statements=stmts, folded=folded)


def _is_copy(c: Statement, scop: Scop) -> bool:
    """`Z[g(i)] = Y[f(i)]` between two temporaries (or from an input), each of g and f
    injective."""
    if c.ast.op != "=" or not isinstance(c.ast.rvalue, c_ast.ArrayRef) \
            or len(c.accesses) != 2 or c.domain.dim(isl.dim_type.param):
        return False
    src, dst = c.accesses
    return (src.array != dst.array and scop.buffers[dst.array].role == "temp"
            and dst.relation.is_injective() and src.relation.is_injective())


def _into_readers(c: Statement, after: list[Statement],
                  stmts: list[Statement]) -> dict[str, Statement] | None:
    """The readers of copy `c`'s output rewritten to read its source, or None."""
    src, dst = c.accesses
    y, z = src.array, dst.array
    if any(a.write and a.array == z for s in stmts if s is not c for a in s.accesses):
        return None
    if any(a.write and a.array == y for s in after for a in s.accesses):
        return None  # (Y changes after the copy: the readers would see other values)
    z_to_y = dst.relation.reverse().apply_range(src.relation)  # Z[e] -> Y[f(g^-1(e))]
    return _redirect([s for s in after if any(a.array == z for a in s.accesses)],
                     z, y, z_to_y)


def _into_writers(c: Statement, before: list[Statement], stmts: list[Statement],
                  scop: Scop) -> dict[str, Statement] | None:
    """The statements that make copy `c`'s source (attention's context, [heads, seq, d],
    before its Transpose to [seq, heads x d]) rewritten to make its output in place, or
    None. Y must be a temporary that nothing after the copy uses."""
    src, dst = c.accesses
    y, z = src.array, dst.array
    if scop.buffers[y].role != "temp":
        return None
    if any(a.array == y for s in stmts[stmts.index(c) + 1:] for a in s.accesses):
        return None
    if any(a.array == z for s in before for a in s.accesses):
        return None
    y_to_z = src.relation.reverse().apply_range(dst.relation)  # Y[f(i)] -> Z[g(i)]
    return _redirect([s for s in before if any(a.array == y for a in s.accesses)],
                     y, z, y_to_z)


def _redirect(stmts: list[Statement], old: str, new: str,
              to_new: isl.Map) -> dict[str, Statement] | None:
    """`stmts` with every access of array `old` rewritten as the access of `new` that
    `to_new` maps it to; None where one is not an affine function of its statement's
    iterators everywhere it was defined, or moves a unit stride (module doc)."""
    out = {}
    for s in stmts:
        accesses, moved = [], {}
        for a in s.accesses:
            if a.array != old:
                accesses.append(a)
                continue
            rel = a.relation.apply_range(to_new)
            index = _affine_index(rel)
            if index is None or not rel.domain().is_equal(a.relation.domain()) \
                    or not _unit_strides_kept(a.index, index):
                return None
            accesses.append(Access(new, a.param, rel, index, a.ref, a.write))
            moved[id(a.relation)] = rel
        reads = _relations(s.reads, moved, [a for a in accesses if not a.write])
        writes = _relations(s.writes, moved, [a for a in accesses if a.write])
        out[s.name] = dataclasses.replace(s, accesses=accesses, reads=reads, writes=writes)
    return out or None


def _relations(rels: list[isl.Map], moved: dict, accesses: list[Access]) -> list[isl.Map]:
    """A statement's distinct read (or write) relations after `moved` rewrote some: the
    rewritten ones by their new relation, each distinct relation once."""
    out = [r for r in rels if id(r) not in moved]
    for a in accesses:
        if not any(r.is_equal(a.relation) for r in out):
            out.append(a.relation)
    return out


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
