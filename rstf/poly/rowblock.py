"""Row-block bands: attention's three groups (the scores' contraction, the softmax, the
context's contraction) run block by block of query rows, so the scores and probabilities
of a block are read back from L2 instead of making a round trip through memory.

Attention per head computes scores = Q K^T (with its mask in the kernels' registers), the
row-wise softmax of the scores (its mask after it), and context = P V. Run as three groups,
each writes a [heads, tokens, keys] tensor whole before the next reads it: 7 MB apiece for
BERT-base at 384 tokens, far more than a core's L2. Every one of the three only ever
combines elements of one query row, so a block of rows can run all three before the next
block starts: then the block's scores and probabilities (keys x rows x 4 bytes each) are
still in the core's cache when the next group reads them.

The band here is over the row space of the context's row operand P, [.., S, keys]: its
rows (of the kernel's row stride) are numbered g in memory order, grouped by outer index
o = g div S (batch and head; S the extent of the kernel's row loop) and block
b = (g mod S) div B. A statement instance is
placed in the block of the elements it writes (every buffer written in the band is read
as rows of the same count: its elements divided into as many equal rows as P has), and
its new time is (pos, o, b, j, old time), j the part's place in the band. The block must
be a function of a prefix of the instance's old time, the shallowest one, so that a
kernel statement (whose time is its chunk's first instance's prefix) gets its block from
the same function: the kernels' row chunks must not straddle blocks, and B is the
smallest multiple of every kernel's row tile that is at least `Tuning.block_rows` (S
itself, a block a head, when no such B is below S). Loops finer than a block need not
align: the softmax's blocks of rows are cut where a band block ends. Each part keeps its
own schedule inside the block. The new times are checked against the exact dependences:
a placement that breaks one (a block that reads another block's results) is refused.
Every block reads the kernels' column operands again: the band is only for products of
two computed tensors (a head's keys and values), never for a weight (a dense layer's or a
convolution's, the same for every block, which the groups apart read once a column tile),
and only where what one block reads of them takes at most half a core's L2.

The temporaries only the band reads and writes, each access within its own block (the
scores, their exponentials, the row maxima and sums, the probabilities), are kept for
one block: a buffer of B rows on the stack of the iteration (so of its thread) whose
elements are addressed by their flat offset from the block's first row, not in the
workspace (`Group.blocked`). The context, read after the band, stays whole.
"""
from __future__ import annotations

import math

import islpy as isl

from .deps import Dependences
from .fuse import array_users
from .groups import CallSchedule, Group, extents, flat_addr, violations
from .scop import Scop
from .tuning import Tuning


def _coords(scop: Scop, array: str, rows: int, s: int, block: int) -> isl.Map | None:
    """Y[x..] -> [o, b]: the outer index and block of the row an element of `array` lies
    in, its elements cut into `rows` equal rows of S a group; None if they do not cut."""
    shape = scop.buffers[array].shape
    if not all(isinstance(d, int) for d in shape) or math.prod(shape) % rows:
        return None
    per = math.prod(shape) // rows
    xs = [f"x{i}" for i in range(len(shape))]
    flat, stride = [], 1
    for x, extent in reversed(list(zip(xs, shape))):
        flat.append(f"{stride} * {x}")
        stride *= extent
    g = f"floor(({' + '.join(flat)}) / {per})"
    text = (f"{{ {array}[{', '.join(xs)}] -> [o, b] : o = floor({g} / {s}) and "
            f"b = floor(({g} - {s} * floor({g} / {s})) / {block}) }}")
    return isl.Map(text)


def _placement(time: isl.Map, coords: isl.Map) -> isl.Map | None:
    """The coordinates as a function of the shallowest prefix of the time that fixes
    them, over the whole time space (trailing dimensions free); None if no prefix does."""
    by_time = time.reverse().apply_range(coords)
    n = by_time.dim(isl.dim_type.in_)
    if by_time.is_empty() or not by_time.domain().is_equal(time.range()):
        return None
    for d in range(1, n + 1):
        pm = by_time.project_out(isl.dim_type.in_, d, n - d)
        if pm.is_single_valued():
            return pm.insert_dims(isl.dim_type.in_, d, n - d)
    return None


def _extend(pm: isl.Map, pos: int, j: int) -> isl.Map:
    """t -> (pos, o, b, j, t..) for the placement pm: t -> [o, b]."""
    space = pm.get_space().domain()
    ident = isl.Map.identity(space.map_from_set())
    m = pm.range_product(ident).flatten_range()
    out = isl.dim_type.out
    m = m.insert_dims(out, 0, 1).fix_val(out, 0, pos)
    return m.insert_dims(out, 3, 1).fix_val(out, 3, j)


def _retime(m: isl.Map, ext: isl.Map) -> isl.Map | None:
    """The time map m moved to the band by ext; None where ext misses some of its times."""
    new = m.apply_range(ext.reset_tuple_id(isl.dim_type.in_))
    return new if new.domain().is_equal(m.domain()) else None


def _row_space(scop: Scop, k) -> tuple[int, int] | None:
    """(rows, S) of the kernel's row operand: its elements as rows of the kernel's row
    stride, S of them (the row loop's extent) to an outer index; None where they are not."""
    flat = flat_addr(k.a, scop)
    size = scop.buffers[k.a.array].size
    if k.r is None or flat is None or size is None:
        return None
    stride = flat.get(k.r, 0)
    s = scop.statement(k.statement)
    lo, hi = extents(s)[s.iterators.index(k.r)]
    if stride <= 0 or size % stride or (size // stride) % (hi - lo + 1):
        return None
    return size // stride, hi - lo + 1


def _kernel_rows(parts: list[CallSchedule]) -> int:
    return math.lcm(*(k.rb for p in parts for k in p.kernels))


def block_band(scop: Scop, deps: Dependences, parts: list[CallSchedule],
               users: dict[str, set[str]], tuning: Tuning, l2: int,
               constants: frozenset[str] = frozenset()) -> Group | None:
    """The row-block band of parts (a contraction, the row-wise groups after it, a
    contraction whose row operand the last of them writes), or None (see the module doc).
    `constants`: the entry's frozen inputs (weights)."""
    if len(parts) < 3 or not (parts[0].kernels and parts[-1].kernels) \
            or any(p.kernels for p in parts[1:-1]):
        return None
    if any(k.tile_outer or k.merged or k.b.array in constants
           for p in parts for k in p.kernels):
        return None  # a packed column tile, merged rows or a weight are not one block's
    last = parts[-1].kernels[0]
    a_op = last.a.array
    if not any(acc.write and acc.array == a_op for s in parts[-2].statements
               for acc in s.accesses):
        return None
    space = _row_space(scop, last)
    if space is None:
        return None
    rows, s_rows = space
    if rows // s_rows < 2 and s_rows < 2 * tuning.block_rows:
        return None  # one block: nothing to interleave
    step = _kernel_rows(parts)
    sizes = [b for b in range(step, s_rows, step) if b >= tuning.block_rows] + [s_rows]
    pos = int(parts[0].time[parts[0].statements[0].name].range().dim_min_val(0).to_python())
    stmts = [s for p in parts for s in p.statements]
    for block in sizes:
        memo: dict[str, isl.Map | None] = {}

        def coords_of(y: str) -> isl.Map | None:
            if y not in memo:
                memo[y] = _coords(scop, y, rows, s_rows, block)
            return memo[y]

        placed = _place(parts, coords_of, pos)
        if placed is None:
            continue
        time, ast_time = placed
        if 2 * _panel_bytes(parts, time) > l2 or violations(stmts, deps, time):
            return None
        blocked = _blocked(scop, parts, time, rows, block, coords_of, users, tuning)
        return Group(list(parts), 2, time, ast_time, {}, block_rows=block, block_seq=s_rows,
                     blocked=blocked)
    return None


def _panel_bytes(parts: list[CallSchedule], time: dict[str, isl.Map]) -> float:
    """The bytes of the kernels' column operands one block reads (their bounding boxes):
    every block reads them again, so they must stay in L2 (a head's keys and values),
    not stream from memory (a dense layer's weights, the same for every block)."""
    total = 0
    for p in parts:
        for k in p.kernels:
            t = time[k.statement]
            n = t.dim(isl.dim_type.out)
            first = isl.Set(f"{{ [{', '.join(f't{i}' for i in range(n))}] : t1 = 0 and t2 = 0 }}")
            inst = t.intersect_range(first.align_params(t.get_space().range())).domain()
            fp = k.b.relation.intersect_domain(inst).range()
            if fp.is_empty():
                continue
            box = 1
            for d in range(fp.dim(isl.dim_type.set)):
                lo, hi = fp.dim_min_val(d), fp.dim_max_val(d)
                if not (lo.is_int() and hi.is_int()):
                    return math.inf  # a parametric extent: not known to fit
                box *= hi.to_python() - lo.to_python() + 1
            total += 4 * box
    return total


def _blocked(scop: Scop, parts: list[CallSchedule], time: dict[str, isl.Map], rows: int,
             block: int, coords_of, users: dict[str, set[str]],
             tuning: Tuning) -> dict[str, int]:
    """The temporaries the band keeps for one block only (buffer -> elements a row): read
    and written by its statements alone, each access within the block of its time (dims 1
    and 2), the block's rows within `Tuning.row_bytes`. `coords_of(y)`: `_coords` of y."""
    names = {s.name for p in parts for s in p.statements}
    local = {y for p in parts for y in (*p.rows, *(p.chain.contracted if p.chain else ()))}
    out = {}
    for y, buf in scop.buffers.items():
        if buf.role != "temp" or y in local or not users.get(y) or not users[y] <= names:
            continue
        cy, per = coords_of(y), buf.size // rows
        if cy is None or 4 * block * per > tuning.row_bytes:
            continue
        if all(_in_block(time[s.name], acc.relation, cy)
               for p in parts for s in p.statements for acc in s.accesses if acc.array == y):
            out[y] = per
    return out


def _in_block(time: isl.Map, rel: isl.Map, coords: isl.Map) -> bool:
    """Every instance touches elements of the block its time (pos, o, b, ..) is in."""
    tb = time.reverse().apply_range(rel).apply_range(coords)
    n = tb.dim(isl.dim_type.in_)
    t = ", ".join(f"t{i}" for i in range(n))
    want = isl.Map(f"{{ [{t}] -> [o, b] : o = t1 and b = t2 }}").align_params(tb.get_space())
    return tb.reset_tuple_id(isl.dim_type.in_).is_subset(want)


def _place(parts: list[CallSchedule], coords_of, pos: int):
    """(time, ast_time) of the parts in the band whose blocks `coords_of(y)` gives (`_coords`
    of buffer y), or None where some statement's block is not a function of a prefix of
    its time."""
    time, ast_time = {}, {}
    for j, p in enumerate(parts):
        ext = {}
        for s in p.statements:
            coords = None
            for acc in s.accesses:
                if not acc.write:
                    continue
                c = coords_of(acc.array)
                if c is None:
                    return None
                w = acc.relation.apply_range(c)
                coords = w if coords is None else coords.union(w)
            if coords is None:
                return None
            pm = _placement(p.time[s.name], coords)
            if pm is None:
                return None
            ext[s.name] = _extend(pm, pos, j)
            time[s.name] = _retime(p.time[s.name], ext[s.name])
            if time[s.name] is None:
                return None
        for k in p.kernels:
            ext[k.name] = ext[k.statement]
        ast_time[p.call] = {}
        for name, m in p.ast_time.items():
            new = _retime(m, ext[name]) if name in ext else None
            if new is None:
                return None
            ast_time[p.call][name] = new
    return time, ast_time


def fuse_blocks(scop: Scop, deps: Dependences, schedules: list, tuning: Tuning,
                l2: int, constants: frozenset[str] = frozenset()) -> list:
    """The schedules with each run that `block_band` fuses (consecutive groups from a
    contraction to the next one) replaced by its band."""
    users = array_users(scop)
    out, i = [], 0
    while i < len(schedules):
        run = [schedules[i]]
        for cs in schedules[i + 1:]:
            run.append(cs)
            if not isinstance(cs, CallSchedule) or cs.kernels:
                break
        if len(run) >= 3 and all(isinstance(p, CallSchedule) for p in run):
            band = block_band(scop, deps, run, users, tuning, l2, constants)
            if band is not None:
                out.append(band)
                i += len(run)
                continue
        out.append(schedules[i])
        i += 1
    return out
