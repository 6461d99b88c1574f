"""Fusion of pointwise op chains, and array contraction of the temporaries between them.

A *pointwise* call is one statement `B[i0]..[ik] = f(...)` whose loops run over exactly
B's index space (a box) and which writes B at the identity index: BiasAdd, the batch-norm
Mul/AddV2 pair, Relu, Relu6, and every other elementwise op with broadcasting. Consecutive
pointwise calls form a chain when each reads the output of an earlier one (not only the
one before it: GELU's x feeds three of its ops), every such read at the identity index,
over the same index space. The chain becomes one loop nest running all its
statements in order at each point (time `[pos, i0, .., ik, j]` for the j-th statement),
which the exact dependences must allow (`check_schedule_legal`, on every dependence between
the chain's statements).

A temporary written and read only inside the chain (written by one statement, read at the
same point by later statements of the chain and by nothing else in the subgraph) then lives
for one iteration: it is *contracted* to a scalar, so it is neither stored nor loaded, and
needs no workspace bytes.

Fusion widens lifetimes: the generated C's memory plan may have given a group's output the
bytes of a temporary the group reads (their lifetimes were disjoint op by op), which the
polyhedral model cannot see (its buffers are distinct). The lowering therefore redoes the
plan with one step per scheduled group (`workspace.replan`): the buffers of one group never
share bytes.
"""
from __future__ import annotations

import dataclasses
import math

import islpy as isl

from . import regepi
from .deps import Dependences
from .cparse import is_accumulation
from .scop import Scop, Statement, isl_name
from .groups import (CallSchedule, extents, group_iter, is_pointwise, kernel_roles, pad_time,
                     parallel_dims, row_major_access, violations)
from .schedule import tile_order
from .tuning import Tuning


@dataclasses.dataclass
class Chain:
    calls: list[int]  # consecutive call indexes
    statements: list[Statement]  # one per call, in order
    contracted: list[str]  # temporaries turned into scalars


def _identity_reads(s: Statement, scop: Scop, array: str) -> bool:
    reads = [a for a in s.accesses if not a.write and a.array == array]
    return bool(reads) and all(row_major_access(s, scop, a) for a in reads)


def array_users(scop: Scop) -> dict[str, set[str]]:
    """Buffer -> the statements that read or write it."""
    users: dict[str, set[str]] = {}
    for s in scop.statements:
        for a in s.accesses:
            users.setdefault(a.array, set()).add(s.name)
    return users


def find_chains(scop: Scop, deps: Dependences, min_len: int = 2) -> list[Chain]:
    """Maximal chains of `min_len` or more consecutive pointwise calls (see the module
    doc)."""
    by_call: dict[int, list[Statement]] = {}
    for s in scop.statements:
        by_call.setdefault(s.call, []).append(s)
    users = array_users(scop)
    chains, current = [], []
    for call in scop.calls:
        stmts = by_call.get(call.index, [])
        s = stmts[0] if len(stmts) == 1 else None
        ok = s is not None and is_pointwise(s, scop)
        if ok and current:
            # It joins when it reads an earlier member's output, each such read at the
            # identity index: GELU reads x three times (x**3, 0.5 * x, x + 0.044715 * ..).
            outs = {p.accesses[-1].array for p in current}
            read = {a.array for a in s.accesses[:-1]} & outs
            same = extents(current[0]) == extents(s)
            if not (same and read and all(_identity_reads(s, scop, b) for b in read)):
                chains.append(current)
                current = []
        if not ok:
            chains.append(current)
            current = []
            continue
        current.append(s)
    chains.append(current)
    out = []
    for stmts in chains:
        if len(stmts) < min_len:
            continue
        contracted = []
        for k, a in enumerate(stmts[:-1]):
            # Read by later statements of the chain alone, each at the point being written
            # (swish reads x twice: sigmoid(x), then x * that).
            buf = a.accesses[-1].array
            readers = [b for b in stmts[k + 1:] if b.name in users[buf]]
            if (scop.buffers[buf].role == "temp" and readers
                    and users[buf] == {a.name} | {b.name for b in readers}
                    and all(_identity_reads(b, scop, buf) for b in readers)):
                contracted.append(buf)
        chain = Chain([s.call for s in stmts], stmts, contracted)
        if not legal(chain, deps):
            continue
        out.append(chain)
    return out


def chain_time(chain: Chain, depth: int) -> dict[str, isl.Map]:
    """Each statement's time in the fused nest: [pos of the first, i0, .., ik, j, 0..]."""
    pos = chain.statements[0].path[0]
    out = {}
    for j, s in enumerate(chain.statements):
        iv = [isl_name(v) for v in s.iterators]
        time = [str(pos), *iv, str(j)] + ["0"] * (depth - len(iv) - 2)
        m = isl.Map(f"{{ {s.name}[{', '.join(iv)}] -> [{', '.join(time)}] }}")
        out[s.name] = m.intersect_domain(s.domain)
    return out


def legal(chain: Chain, deps: Dependences) -> bool:
    """The fused schedule runs every dependence between the chain's statements forwards."""
    depth = max(len(s.iterators) for s in chain.statements) + 2
    return not violations(chain.statements, deps, chain_time(chain, depth))


# Far after every column tile of a row: the epilogue runs once a row is complete.
_AFTER_ROW = 1 << 20


def fuse_epilogue(scop: Scop, deps: Dependences, cs: CallSchedule, chain: Chain,
                  depth: int, tuning: Tuning) -> CallSchedule | None:
    """Fuse a tiled contraction with the pointwise chain that consumes its output, row by
    row (PolyScientist-style epilogue fusion), or None when the pieces do not fit.

    The contraction's output Y[o0..om-1][...][c] has its outer output loops (`o`: batch and
    output row of a Conv2D) as its leading indices, and its column loop (c) last. In the
    fused schedule, each row `o` and column tile `u` (c = VB*u .. VB*u+VB-1) runs: Y's
    initialisation (time `[pos, o, u, -1, ...]`), every kernel chunk and residual point of
    the tile (`[pos, o, u, reds >= 0, ...]`), then the chain on the tile
    (`[pos, o, u, AFTER, ..., j]`), while it is still in cache; rows and tiles both stay
    parallel (collapse(2)). Checked against every dependence between the group's
    statements. When only the group reads Y, Y is contracted to one row (`rows`), a
    buffer local to each iteration of the loops around the tile.

    A grouped convolution has one more outer output loop, its group g, which indexes Y's
    channels as G*g + v (`groups.group_iter`): where G is one column tile, the chain's
    point c runs after row `o` of group floor(c / G).
    """
    if len({k.statement for k in cs.kernels}) != 1 or cs.chain is not None:
        return None
    kern = cs.kernels[0]  # the whole tiles' kernel (a remainder kernel follows it)
    upd = scop.statement(kern.statement)
    y = kern.y.array
    others = [s for s in cs.statements if s.name != upd.name]
    if len(others) != 1 or not is_pointwise(others[0], scop):
        return None
    init, first = others[0], chain.statements[0]
    if init.accesses[-1].array != y or not _identity_reads(first, scop, y):
        return None
    if extents(first) != extents(init) or len(kern.y.index) != len(init.iterators):
        return None
    outs, _, _, _, v = kernel_roles(upd, kern)
    groups = [o for o in outs if group_iter(kern, o, v) is not None]
    lead = [o for o in outs if o not in groups]
    m = len(lead)
    if m == 0 or [kern.y.index[i] for i in range(m)] != [{o: 1} for o in lead]:
        return None
    if groups and (len(groups) > 1 or group_iter(kern, groups[0], v) != kern.vb
                   or dict(zip(map(isl_name, upd.iterators), extents(upd)))[v]
                   != (0, kern.vb - 1)):
        return None  # (a group of several column tiles, whose chain waits for them all)
    pos = upd.path[0]

    vb = kern.vb

    def row_time(s: Statement, mid: int, last: int) -> isl.Map:
        # (Tiles below the chunks, `kern.chunk_outer`: the epilogue runs after the row's
        # every tile, its tile below `mid`.)
        iv = [isl_name(v) for v in s.iterators]
        u = f"floor(({iv[-1]})/{vb})"
        at = dict(zip(lead, iv))
        if groups:  # the group of channel c, its one column tile
            at[groups[0]], u = u, "0"
        o = [at[x] for x in outs]
        t = [str(pos), *tile_order(kern, o, u, []), str(mid),
             *([u] if kern.chunk_outer else []), *iv[m:], str(last)]
        return pad_time(isl.Map(f"{{ {s.name}[{', '.join(iv)}] -> [{', '.join(t)}] }}")
                    .intersect_domain(s.domain), depth)

    group = _row_group(scop, deps, cs, chain, init, upd, y, m, row_time, {}, tuning)
    if group is None or group.epilogue is not None or kern.chunk_outer or kern.merged \
            or not kern.r:
        return group
    lo, hi = dict(zip(map(isl_name, upd.iterators), extents(upd)))[isl_name(kern.r)]
    if 4 * (hi - lo + 1) * vb <= tuning.chunk_epilogue_bytes:
        return group  # (the row is still in L1 when the chain reads it)
    n = 2 + len(tile_order(kern, outs, "u", []))  # pos, the tile's loops, the chunk
    return _per_chunk(deps, group, init, upd, y, n, m, depth) or group


def _per_chunk(deps: Dependences, group: CallSchedule, init: Statement, upd: Statement,
               y: str, n: int, m: int, depth: int) -> CallSchedule | None:
    """`group` (a row-buffer epilogue) with Y's zeroing and the chain moved from around a
    row's whole tile to around each kernel call: each chunk of rows is zeroed, computed
    and run through the chain while it is in L1. A row of BERT's feed-forward layer is the
    whole sequence (384 x 64 floats: 96 KB, more than L1), which the GELU otherwise reads
    back from L2. The time of a point of Y is the first n dimensions of the time of the
    kernel chunk (or residual point) that writes it (pos, the tile's loops, the chunk's
    first row), then -1 (the zeroing) or AFTER (the chain). None when that is not one time
    for each point, or breaks a dependence."""
    writes = _written_at([upd], group.time, n)
    head = group.chain.statements[0]
    read = next((a for a in head.accesses[:-1] if a.array == y), None)
    if read is None:
        return None
    time = dict(group.time)
    for s, to_y, mid, last in ([(init, init.accesses[-1].relation, -1, 0)]
                               + [(c, read.relation, _AFTER_ROW, j)
                                  for j, c in enumerate(group.chain.statements)]):
        at = to_y.apply_range(writes).set_tuple_name(isl.dim_type.in_, s.name)
        at = at.intersect_domain(s.domain)
        if not at.is_single_valued() or not at.domain().is_equal(s.domain):
            return None
        iv = [isl_name(v) for v in s.iterators]
        if n + len(iv) - m + 2 > depth:
            return None
        rest = isl.Map(f"{{ {s.name}[{', '.join(iv)}] -> "
                       f"[{', '.join([str(mid), *iv[m:], str(last)])}] }}")
        time[s.name] = pad_time(at.flat_range_product(rest), depth)
    if violations(group.statements, deps, time):
        return None
    ast_time = {**group.ast_time, init.name: time[init.name], head.name: time[head.name]}
    return dataclasses.replace(group, time=time, ast_time=ast_time)


def fuse_reduction_epilogue(scop: Scop, deps: Dependences, cs: CallSchedule, chain: Chain,
                            depth: int, tuning: Tuning) -> CallSchedule | None:
    """The same row-by-row epilogue fusion for an untiled reduction (a depthwise
    convolution, a pooling sum): `Y = 0` then `Y[o][..] += ...` whose m leading loops `o`
    (batch, output row and column) index Y's leading dimensions and enclose every
    reduction loop. Each point o runs the initialisation, the whole reduction and then the
    chain on Y[o] (time `[pos, o, -1 | 0 | AFTER, ...]`): one parallel region instead of
    three, and Y contracted to one row (its trailing dimensions, the channels) when only
    the group reads it. None when the pieces do not fit; checked against every dependence
    between the group's statements."""
    if cs.kernels or cs.chain is not None or len(cs.statements) != 2:
        return None
    init, upd = cs.statements
    if not (is_pointwise(init, scop) and is_accumulation(upd.ast) and upd.iterators
            and not upd.domain.dim(isl.dim_type.param)):
        return None
    y = upd.accesses[-1]
    first = chain.statements[0]
    if init.accesses[-1].array != y.array or not _identity_reads(first, scop, y.array):
        return None
    if extents(first) != extents(init) or len(y.index) != len(init.iterators):
        return None
    iv = [isl_name(v) for v in upd.iterators]
    m = 0
    while m < min(len(iv), len(y.index)) and y.index[m] == {iv[m]: 1}:
        m += 1
    reds = [v for v in iv if not any(v in idx for idx in y.index)]
    if m == 0 or not reds or any(iv.index(r) < m for r in reds):
        return None
    pos = upd.path[0]

    def time_of(s: Statement, mid: int, last: int) -> isl.Map:
        v = [isl_name(x) for x in s.iterators]
        t = [str(pos), *v[:m], str(mid), *v[m:], str(last)]
        return pad_time(isl.Map(f"{{ {s.name}[{', '.join(v)}] -> [{', '.join(t)}] }}")
                    .intersect_domain(s.domain), depth)

    return _row_group(scop, deps, cs, chain, init, upd, y.array, m, time_of,
                      {upd.name: time_of(upd, 0, 0)}, tuning)


def fuse_block_epilogue(scop: Scop, deps: Dependences, cs: CallSchedule, chain: Chain,
                        depth: int) -> CallSchedule | None:
    """A pointwise chain after a *row-blocked* reduction group (a softmax or a layer norm's
    moments, which the templates write as one parallel loop over blocks of rows, every
    step of a block before the next): each point of the chain runs in the block that
    writes what it reads, after that block's last statement (time `[pos, b(p), AFTER,
    p.., j]`), while the block's rows are still in L1. Attention's SelectV2 after its
    softmax then reads the probabilities where the softmax left them instead of in a
    second pass over the [heads, seq, seq] scores.

    b(p) is derived, not assumed: the group's writes of every group-written array the
    chain's head reads, at the group's time dimension 1. It must be one block for each of
    the head's points (the others share the head's index space), dimension 1 must stay
    parallel, and the new times must keep every dependence between the statements. None
    when any of that fails."""
    if cs.kernels or cs.chain is not None or len(cs.statements) < 2:
        return None
    if not any(a.array == s.accesses[-1].array for s in cs.statements
               for a in s.accesses[:-1]):
        return None  # (no statement reads what it writes: no reduction)
    head = chain.statements[0]
    if 4 + len(head.iterators) > depth:
        return None
    written: dict[str, list[Statement]] = {}
    for s in cs.statements:
        written.setdefault(s.accesses[-1].array, []).append(s)
    block = None
    for a in head.accesses[:-1]:
        if a.array in written:
            at = a.relation.apply_range(_written_at(written[a.array], cs.time, 2))
            block = at if block is None else block.union(at)
    if block is None or not block.is_single_valued() \
            or not block.domain().is_equal(head.domain):
        return None
    iv = ", ".join(isl_name(v) for v in head.iterators)
    time = dict(cs.time)
    for j, s in enumerate(chain.statements):
        rest = isl.Map(f"{{ {head.name}[{iv}] -> [{_AFTER_ROW}, {iv}, {j}] }}")
        t = block.flat_range_product(rest).set_tuple_name(isl.dim_type.in_, s.name)
        time[s.name] = pad_time(t.intersect_domain(s.domain), depth)
    stmts = cs.statements + chain.statements
    names = {s.name for s in stmts}
    if violations(stmts, deps, time) \
            or not parallel_dims(deps.validity, time, names, [1])[1]:
        return None
    return CallSchedule(cs.call, stmts, time, {**cs.ast_time, head.name: time[head.name]},
                        [], list(cs.refused), chain=chain)


def _written_at(writers: list[Statement], time: dict[str, isl.Map], n: int) -> isl.Map:
    """{ element -> the first n dimensions of each time one of `writers` writes it } (all
    writers write the same array)."""
    out = None
    for w in writers:
        at = w.accesses[-1].relation.reverse().apply_range(time[w.name])
        at = at.project_out(isl.dim_type.out, n, at.dim(isl.dim_type.out) - n)
        out = at if out is None else out.union(at)
    return out


def _row_group(scop: Scop, deps: Dependences, cs: CallSchedule, chain: Chain,
               init: Statement, upd: Statement, y: str, m: int, time_of, own: dict,
               tuning: Tuning):
    """The fused group of both epilogue fusions: `init` at `time_of(init, -1, 0)`, the
    chain's j-th statement at `time_of(s, AFTER, j)`, the reduction's own new times `own`;
    Y contracted to its trailing dimensions after the m leading ones when only the group
    uses it. None when the new times break a dependence between the group's statements."""
    first = chain.statements[0]
    users = {s.name for s in scop.statements if any(a.array == y for a in s.accesses)}
    rows = ({y: m} if scop.buffers[y].role == "temp"
            and users == {init.name, upd.name, first.name} else {})
    time = {**cs.time, **own, init.name: time_of(init, -1, 0)}
    for j, s in enumerate(chain.statements):
        time[s.name] = time_of(s, _AFTER_ROW, j)
    stmts = cs.statements + chain.statements
    if violations(stmts, deps, time):
        return None
    ast_time = {**cs.ast_time, **own, init.name: time[init.name], first.name: time[first.name]}
    group = CallSchedule(cs.call, stmts, time, ast_time, list(cs.kernels), list(cs.refused),
                         chain=chain, rows=rows)
    # A row is a stack buffer, unless the register epilogue keeps it in the kernel's
    # registers: a large one (merged rows: a whole 14x14x576 map) stays in the workspace.
    group.epilogue = regepi.plan(scop, group)
    if rows and 4 * math.prod(scop.buffers[y].shape[m:]) > tuning.row_bytes \
            and group.epilogue is None:
        group.rows = {}
    return group
