"""The scheduled groups every stage after raising shares, and the helpers on them.

A `CallSchedule` is one group of statements given a new time (one call, or a fused chain
or epilogue), with the `Kernel`s that tile its contractions around microkernels
(`schedule.py` builds them, `fuse.py` and `band.py` combine them). A `Group` is what the
later stages (`plan`, `lower`) see: one `CallSchedule`, or a band of them.
Here too: the accesses' linear offsets (`flat_addr`), the statements' boxes (`extents`),
a kernel's iterator roles (`kernel_roles`), time maps padded to a common depth
(`pad_time`), and the dependence questions the schedulers ask of a group (`violations`,
`call_dependences`, `parallel_dims`). This module sits below the schedulers, which all
import it and not each other's helpers.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from .deps import Dependences, check_schedule_legal
from .microkernel import Shape
from .scop import Scop, Statement, isl_name


@dataclasses.dataclass
class Kernel:
    """A contraction statement's whole tiles, run by one microkernel call each."""
    name: str  # the kernel statement (K<S>)
    statement: str  # the original statement S
    r: str | None  # iterator names (C); r may be absent (a single row)
    k: str
    v: str
    rb: int
    nv: int
    vl: int  # floats in one vector register of the target: a whole tile is vl * nv wide
    k_lo: int
    k_hi: int
    a: object  # Access of the row-broadcast operand
    b: object  # Access of the column operand
    y: object  # Access of the written output
    # K's own dimensions (set by schedule_call): outer outputs, u, outer reductions (C
    # names), the K block `kb` (where `kb` is set), then the chunk's first and last rows s, e.
    dims: list[str] = dataclasses.field(default_factory=list)
    k2: str | None = None  # a reduction loop merged with k (see find_contraction)
    k2_lo: int = 0
    k2_hi: int = 0
    tile_outer: bool = False  # column tiles outside the outer output loops (choose_order)
    # A remainder kernel: the last, partial column tile `u_last`, its `cols` columns (all of
    # them), computed `pad` columns wider, to a multiple of half a vector, the last vector's
    # extra lanes masked off (never read or stored). 0 for the whole tiles' kernel.
    cols: int = 0
    u_last: int = 0
    pad: int = 0
    vec_a: bool = False  # a depthwise kernel: A is read as vectors along v too
    kin: str | None = None  # an outer reduction loop run inside the kernel (its K2 level)
    kin_lo: int = 0
    kin_hi: int = 0
    # The next reduction loop out, run inside the kernel too (its K3 level): the last outer
    # reduction, so that one call computes an output's whole reduction (a 3x3 conv over
    # few channels: kh around kw around ic). Set only with kin.
    kin3: str | None = None
    kin3_lo: int = 0
    kin3_hi: int = 0
    # The reduction loops whose range is the chunk's own (dims lo<i>, hi<i> of K): kin3,
    # kin, then k2 or k. Empty: every chunk runs the whole ranges.
    ranged: list[str] = dataclasses.field(default_factory=list)
    fused: bool = True  # the step is `y = fmaf(a, b, y)`, not `y += a * b`: one rounding
    # A sliding row (`sliding_row`): (KW, J, D) of `Shape.slide`; each call computes a
    # whole output row, k's taps outside the input skipped inside the kernel.
    slide: tuple = ()
    # The column tiles run inside each chunk of rows, not around the chunks (`tile_time`).
    chunk_outer: bool = False
    # Merged rows (`merge_rows`): the outer output loop `merged` (C name) and r run as one
    # row loop m = merged_n * merged + r over which the chunks are cut; merged_n is r's
    # extent (r runs 0 .. merged_n - 1).
    merged: str | None = None
    merged_n: int = 0
    # Lines of another group's weight (`prefetch_of`) that each call prefetches while it
    # computes (`prefetch.plan_prefetch`); 0: none.
    prefetch: int = 0
    prefetch_of: str | None = None
    prefetch_cap: int = 0  # the bytes of its share each thread prefetches at most
    # Each call prefetches its rows' share of the next column tile's weight panel
    # (`prefetch.plan_panel_prefetch`).
    panel_prefetch: bool = False
    # Who chose rb, nv and tile_outer (`tiles.TileTable.pick`): 'model', 'profile' or the
    # tuner's 'variant N'; and the contraction's profile key ('' where no table was asked:
    # depthwise kernels, whose tiles the model alone sets).
    chosen_by: str = "model"
    key: str = ""
    # Reduction steps a trip of the kernel's k loop (`Target.k_steps`; 1 for depthwise and
    # sliding-row kernels, whose loops are not a contraction's k loop), and the count a
    # measured choice set it to (`TileChoice.steps`; 0: the target's).
    steps: int = 1
    steps_chosen: int = 0
    # The outer reductions a call runs inside where a measured choice set them
    # (`TileChoice.inside`, `contraction.run_inside`); -1: the model's.
    inside_chosen: int = -1
    # The k slices of a k-sliced statement (`Statement.k_slice`): the kernel restarts its
    # accumulators every kc steps, then at each slice of kc_tail's lengths, and adds the
    # slices' sums in turn; 0: one chain.
    kc: int = 0
    kc_tail: tuple = ()
    # K blocks (`kblocks.choose_k_block`): each call runs kb steps of k (a multiple of kc,
    # the last block maybe shorter) and the block loop runs between the column tile and
    # the row chunks, as one more outer reduction (dimension `kb` of K); 0: each call runs
    # the whole of k.
    kb: int = 0

    @property
    def shape(self) -> Shape:
        return Shape(self.rb, self.width, self.vl, self.vec_a, self.kin is not None, self.fused,
                     self.slide, self.prefetch, self.panel_prefetch, self.pad, self.steps,
                     self.kc, self.kc_tail, self.kin3 is not None)

    @property
    def choice(self) -> "TileChoice":
        """The kernel's tile and order as `tiles.py` names them."""
        from .tiles import TileChoice
        return TileChoice(self.rb, self.nv, self.tile_outer, self.steps_chosen,
                          self.inside_chosen)

    @property
    def rows_text(self) -> str:
        """The kernel's row loop for the report: `r`, or `o x r` for merged rows."""
        return f"{self.merged} x {self.r}" if self.merged else str(self.r)

    @property
    def vb(self) -> int:
        """Columns of a whole tile."""
        return self.vl * self.nv

    @property
    def width(self) -> int:
        """Columns one call computes, in vectors (a remainder's masked lanes included)."""
        return self.cols + self.pad if self.cols else self.vb

    @property
    def span(self) -> int:
        """Columns one call writes: the tile's, or the remainder's `cols`."""
        return self.cols or self.vb

    @property
    def k_blocks(self) -> int:
        """The K blocks of a call's reduction (`kb`): 1 where each call runs the whole k."""
        return -(-(self.k_hi - self.k_lo + 1) // self.kb) if self.kb else 1

    @property
    def depth(self) -> int:
        """Reduction steps of one (whole-range) kernel call."""
        return ((self.k_hi - self.k_lo + 1) * (self.k2_hi - self.k2_lo + 1)
                * (self.kin_hi - self.kin_lo + 1) * (self.kin3_hi - self.kin3_lo + 1))


@dataclasses.dataclass
class CallSchedule:
    """The schedule of one call's statements."""
    call: int
    statements: list[Statement]
    time: dict[str, isl.Map]  # original statement -> time vector (all points)
    ast_time: dict[str, isl.Map]  # AST statements (S, restricted; K<S>) -> time vector
    kernels: list[Kernel] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)  # why a tiling was dropped
    chain: object = None  # fuse.Chain when this schedules a fused pointwise chain
    rows: dict = dataclasses.field(default_factory=dict)  # buffer -> leading dims contracted
    # The chain runs in the kernels' registers (`regepi.plan`, decided once when the group
    # is formed, by `fuse`): a `regepi.RegisterEpilogue`, or None.
    epilogue: object = None


@dataclasses.dataclass
class Group:
    """What the lowering prints as one function: one part (a `CallSchedule`: one call's
    schedule, maybe with its fused chain), or a band of consecutive parts fused over their
    m outer time dimensions (`band.py`). Every stage after scheduling sees groups only."""
    parts: list[CallSchedule]
    m: int  # time dimensions 1..m shared (the band's loops); 0 for one part
    time: dict[str, isl.Map]  # every original statement's new time
    ast_time: dict[int, dict[str, isl.Map]]  # part's call -> its AST statements' new times
    rows: dict[str, int]  # band-contracted buffer -> its leading dimensions dropped (m)
    # halo band: buffer -> (s, lo, kh); band row h keeps its rows s*h+lo .. s*h+lo+kh-1
    # (dimension m-1, the ones before it dropped), computed by parts[0] in each iteration
    halo: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    # A row-block band (rowblock.py): its parts run block by block of this many rows, each
    # part's own time after the band's 4 dimensions (pos, outer index, block, part).
    block_rows: int = 0
    block_seq: int = 0  # the rows a block's outer index covers (S of rowblock.py)
    # buffer -> elements a row: kept for the band's block only, per iteration (rowblock.py)
    blocked: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def part_shift(self) -> int:
        """Time dimensions the band puts before each part's own (0 for a row band)."""
        return 4 if self.block_rows else 0

    @classmethod
    def of(cls, entry) -> "Group":
        """A scheduled entry as a group: a band already is one; a part is a group alone."""
        if isinstance(entry, Group):
            return entry
        return cls([entry], 0, entry.time, {entry.call: entry.ast_time}, {})

    @property
    def is_band(self) -> bool:
        return len(self.parts) > 1

    @property
    def call(self) -> int:
        return self.parts[0].call

    @property
    def statements(self):
        return [s for p in self.parts for s in p.statements]

    @property
    def kernels(self):
        return [k for p in self.parts for k in p.kernels]

    @property
    def refused(self):
        return [r for p in self.parts for r in p.refused]


def flat_addr(access, scop: Scop) -> dict:
    """Coefficients of the access's linear element offset in each iterator and constant."""
    shape = scop.buffers[access.array].shape
    if not all(isinstance(d, int) for d in shape):
        return None
    out: dict = {}
    stride = 1
    for idx, extent in reversed(list(zip(access.index, shape))):
        for var, c in idx.items():
            out[var] = out.get(var, 0) + c * stride
        stride *= extent
    return out


def extents(s: Statement) -> list[tuple[int, int]]:
    """(lowest, highest) value of each iterator over the statement's (parameter-free)
    domain: its bounding box."""
    return [(int(s.domain.dim_min_val(d).to_python()), int(s.domain.dim_max_val(d).to_python()))
            for d in range(len(s.iterators))]


def kernel_roles(s: Statement, kern: Kernel) -> tuple[list[str], list[str], str | None, str, str]:
    """(outer output iterators, outer reduction iterators, r, k, v), isl names."""
    iv = [isl_name(v) for v in s.iterators]
    c2i = dict(zip(s.iterators, iv))
    r, k, v = c2i.get(kern.r), c2i[kern.k], c2i[kern.v]
    inner = (r, k, v, c2i.get(kern.k2), c2i.get(kern.kin), c2i.get(kern.kin3),
             c2i.get(kern.merged))
    outs = [x for x in iv if x not in inner and is_output_iter(kern, x)]
    reds = [x for x in iv if x not in inner and x not in outs]
    return outs, reds, r, k, v


def group_iter(kern: Kernel, x: str, v: str) -> int | None:
    """G where the output loop x is a grouped convolution's group loop: it indexes only Y's
    last dimension, as G*x + v with v the kernel's column loop; None otherwise."""
    *lead, last = kern.y.index
    if any(x in idx for idx in lead) or set(last) != {x, v} or last[v] != 1:
        return None
    return last[x]


def is_output_iter(kern: Kernel, x: str) -> bool:
    return any(x in idx for idx in kern.y.index)


def pad_time(m: isl.Map, depth: int) -> isl.Map:
    m = m.reset_tuple_id(isl.dim_type.out)
    k = m.dim(isl.dim_type.out)
    if k < depth:
        m = m.add_dims(isl.dim_type.out, depth - k)
        for i in range(k, depth):
            m = m.fix_val(isl.dim_type.out, i, 0)
    return m


def call_dependences(deps: Dependences, stmts: list[Statement]) -> Dependences:
    """The validity dependences between instances of these statements only."""
    dom = isl.UnionSet.empty(stmts[0].domain.get_space().params())
    for s in stmts:
        dom = dom.union(isl.UnionSet.from_set(s.domain))
    cut = [u.intersect_domain(dom).intersect_range(dom) for u in (deps.raw, deps.war, deps.waw)]
    return Dependences(*cut)


def violations(stmts, deps: Dependences, time: dict[str, isl.Map]) -> list:
    """The dependences between these statements that their new `time` breaks. Only
    theirs: the others, between statements scheduled elsewhere, are not this schedule's
    to keep (and check_schedule_legal requires every statement they name)."""
    return check_schedule_legal(None, call_dependences(deps, stmts),
                                union_maps(time[s.name] for s in stmts))


def union_maps(maps) -> isl.UnionMap:
    u = None
    for m in maps:
        u = isl.UnionMap.from_map(m) if u is None else u.union(isl.UnionMap.from_map(m))
    return u


def parallel_dims(valid: isl.UnionMap, time: dict[str, isl.Map], names: set[str],
                  dims: list[int]) -> dict[int, bool]:
    """For each time dimension p in `dims`: True when no validity dependence (`valid`)
    between instances of the statements `names` is carried at p (instances in the same
    iteration of every outer time dimension agree on p)."""
    if not names:
        return {p: True for p in dims}
    sched = union_maps(time[n] for n in names)
    dom = sched.domain()
    d = valid.intersect_domain(dom).intersect_range(dom)
    if d.is_empty():
        return {p: True for p in dims}
    pairs = d.apply_domain(sched).apply_range(sched)
    n_time = next(iter(time[n] for n in names)).dim(isl.dim_type.out)
    return {p: pairs.intersect(isl.UnionMap.from_map(eq_prefix(n_time, p))).is_subset(
                isl.UnionMap.from_map(eq_prefix(n_time, p + 1))) for p in dims}


_EQ_PREFIX: dict[tuple[int, int], isl.Map] = {}


def eq_prefix(n: int, p: int) -> isl.Map:
    """{ [a] -> [b] : a_i = b_i for i < p } on n-dimensional time vectors."""
    if (n, p) not in _EQ_PREFIX:
        a = [f"a{i}" for i in range(n)]
        b = [f"b{i}" for i in range(n)]
        cons = " and ".join(f"a{i} = b{i}" for i in range(p)) or "true"
        _EQ_PREFIX[(n, p)] = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {cons} }}")
    return _EQ_PREFIX[(n, p)]


def row_major_access(s: Statement, scop: Scop, access) -> bool:
    """The access touches element `i0*(n1*..*nk) + .. + ik` of its buffer (row-major over
    the statement's box), whatever view the buffer has (linearised buffers included)."""
    addr = flat_addr(access, scop)
    if addr is None or addr.get(1, 0):
        return False
    iv = [isl_name(v) for v in s.iterators]
    ext = extents(s)
    stride, want = 1, {}
    for v, (lo, hi) in reversed(list(zip(iv, ext))):
        want[v] = stride
        stride *= hi - lo + 1
    if any(k not in want for k, c in addr.items() if k != 1 and c):
        return False
    # An iterator with one iteration is always 0: its coefficient does not matter.
    return stride == buffer_numel(scop, access) and all(
        addr.get(v, 0) == want[v] for v, (lo, hi) in zip(iv, ext) if hi > lo)


def buffer_numel(scop: Scop, access) -> int:
    return scop.buffers[access.array].size or -1


def is_pointwise(s: Statement, scop: Scop) -> bool:
    """One assignment over a box, writing every element of its buffer once, in row-major
    order of its loops."""
    if s.ast.op != "=" or not s.iterators or s.domain.dim(isl.dim_type.param):
        return False
    if any(lo != 0 for lo, _ in extents(s)):
        return False
    iv = [isl_name(v) for v in s.iterators]
    box = isl.Set(f"{{ {s.name}[{', '.join(iv)}] : "
                  + " and ".join(f"0 <= {v} <= {hi}" for v, (_, hi) in zip(iv, extents(s)))
                  + " }")
    return s.domain.is_equal(box) and row_major_access(s, scop, s.accesses[-1])
