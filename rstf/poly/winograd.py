"""Winograd convolutions F(m x n, r x s) for the stride-1 3x3, 5x5, 1x7 and 7x1 convolutions
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).

A KH x KW convolution computes each output from KH KW taps of C channels. F(mh x mw, KH x KW)
computes an mh x mw block of outputs from the alpha_h x alpha_w input tile d that covers it
(alpha = m + r - 1 in each dimension):

    Y = A_h^T [ (G_h g G_w^T) . (B_h^T d B_w) ] A_w        (. : elementwise, per channel pair)

where g is the filter of one (input, output) channel pair. The elementwise products, summed
over the input channels, are E = alpha_h alpha_w independent contractions M_e = V_e U_e of
[tiles x C] by [C x K]: E C multiply-adds per tile instead of mh mw KH KW C. F(2x2,3x3): 16
for 36 (2.25x fewer); F(4x4,3x3): 36 for 144 (4x); F(4x4,5x5): 64 for 400 (6.25x);
F(1x4,1x7): 10 for 28 (2.8x). A 1-D filter (1x7) is the product of F(4,7) along its row and
the identity F(1,1) along the other dimension.

The matrices (`transform`): F(2,3) is Lavin & Gray's; the others are Cook-Toom's from the
interpolation points 0, 1, -1, 2, -2, 1/2, -1/2, 3/2, -3/2 (and infinity), the first
alpha - 1 of them: A^T and G from the points, B^T solved from the identity, which `_check`
verifies in exact rational arithmetic. The error grows with the transforms' constants
(B^T's largest entry: 1 for F(2,3), 5 for F(4,3), 17 for F(4,7)): measured in float32
against a float64 sum of 192 channels, F(2,7) 1.0e-6 of the largest output, F(4,5) and
F(4,3) 0.95e-6, F(4,7) 6.2e-6 (with 4 and -4 as its last points: 1.4e-5, so not those);
the direct sum 1.2e-7. Inception v3 end to end: 5.5e-6 from TF, against TF's 1e-4. The
results are not bit-identical to the textbook C, so `--winograd off` keeps the direct
kernels for a user who wants that.

Which tile (`choose`, per layer): a larger tile does fewer multiply-adds per output but has
a larger U (E C K floats, streamed from memory once per call in a whole model) and wastes the
part of its last tile past the image's edge, and a row's last register tile is short. The
cost model counts the contractions' register tiles and U's bytes
(`Tuning.winograd_tile_overhead`, `winograd_u_tiles`).
It takes the 4-output tiles but on 14x14 images, where F(2x2,3x3)'s U (16/9 the weight) wins
over F(4x4,3x3)'s (4x the weight); docs/tuning-constants.md (Winograd tiles) keeps the
whole-model measurements.

Measured with `benchmarks/winograd_probe.c` (F(2x2,3x3), U precomputed and hot): the
contractions run at the direct kernel's rate; 7x7 and 8x8 images gain only 1.1-1.3x, and
with U fed from memory lose (Inception v3's 8x8x448->384 layers: 1.055x slower). So the
pass takes layers of at least `Tuning.winograd_min_pixels` (14x14) outputs. Where the
weight is a frozen constant read by this conv alone (every model's case), U is computed
once at optimize time (`transform_weights`) and the op is fed it instead of the weight
(`prepack`, the spec "winograd F(4x4,3x3)"); else it is computed in each call into the workspace.

Lowering (`winograd_c.source`): the group's function replaces the whole scheduled group (conv, its
zeroing and its fused pointwise chain): the weight transform into U unless U is fed, then
either (small V) the whole input transform and then (tile row, 64-channel panel) pairs in
parallel, or (large V) one tile row per parallel iteration, transformed and run through
every panel while it is in L2. Per 6 tiles and one panel, the E contractions run in a
6x64 register tile each (a copy of the kernel per tile count, so a row's short last one
keeps its accumulators in registers too) and the output transform and the fused chain
(`regepi`'s vector translation, one output pixel at a time) run on their results: the
conv's output is never stored, like a register epilogue. The transforms are unrolled from
their matrices (`_separable`): zeros dropped, +-1 as plain sums.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from fractions import Fraction

import islpy as isl
import numpy as np

from . import regepi
from .cparse import is_zero
from .tilemodel import fits_registers
from .scop import Scop, Statement, isl_name
from .target import Target
from .tuning import Tuning
from .groups import CallSchedule, extents, flat_addr

RB = 6  # tiles of one register tile

# filter (KH, KW) -> the outputs of one tile (mh, mw) it may use, F(mh x mw, KH x KW);
# `choose` picks one per layer.
ALGORITHMS = {(3, 3): ((2, 2), (4, 4)), (5, 5): ((2, 2), (4, 4)),
              (1, 7): ((1, 2), (1, 4)), (7, 1): ((2, 1), (4, 1))}
# Cook-Toom interpolation points, the first alpha - 1 of them (and infinity): the small ones
# first, so the transforms' constants stay small (their size is the error's, docstring).
POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2), Fraction(3, 2), Fraction(-3, 2))


@dataclasses.dataclass(frozen=True)
class Transform:
    """F(m, r) in one dimension: y = AT [(G g) . (BT d)] for r taps g and the alpha = m + r - 1
    inputs d of m outputs y (correlation: y_i = sum_k g_k d_(i+k)). Entries as Fractions."""
    m: int
    r: int
    AT: tuple  # m x alpha
    G: tuple  # alpha x r
    BT: tuple  # alpha x alpha

    @property
    def alpha(self) -> int:
        return self.m + self.r - 1


@functools.lru_cache(maxsize=None)
def transform(m: int, r: int) -> Transform:
    """The F(m, r) transform: Lavin & Gray's matrices for F(2,3); the identity for F(1,1);
    else Cook-Toom's (`POINTS`), with BT solved from the identity `_check` verifies exactly."""
    one = Fraction(1)
    if (m, r) == (1, 1):
        return Transform(1, 1, ((one,),), ((one,),), ((one,),))
    if (m, r) == (2, 3):
        h = Fraction(1, 2)
        t = Transform(2, 3, ((1, 1, 1, 0), (0, 1, -1, -1)),
                      ((1, 0, 0), (h, h, h), (h, -h, h), (0, 0, 1)),
                      ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)))
        return _check(t)
    a = m + r - 1
    pts = [Fraction(p) for p in POINTS[:a - 1]]
    if len(pts) != a - 1:
        raise ValueError(f"F({m},{r}) needs {a - 1} points; POINTS has {len(POINTS)}")
    AT = tuple(tuple([p ** i for p in pts] + [one if i == m - 1 else 0]) for i in range(m))
    f = [math.prod(p - q for q in pts if q != p) for p in pts]
    G = tuple(tuple(p ** k / fp for k in range(r)) for p, fp in zip(pts, f)) \
        + (tuple(one if k == r - 1 else 0 for k in range(r)),)
    # BT: sum_e AT[i][e] G[e][k] BT[e][j] = [j == i + k], solved column by column in float64
    # and read back as the small dyadic fractions it is made of.
    K = np.array([[float(AT[i][e] * G[e][k]) for e in range(a)]
                  for i in range(m) for k in range(r)])
    cols = [np.linalg.lstsq(K, np.array([float(j == i + k) for i in range(m)
                                         for k in range(r)]), rcond=None)[0]
            for j in range(a)]
    BT = tuple(tuple(Fraction(float(cols[j][e])).limit_denominator(1 << 10) for j in range(a))
               for e in range(a))
    return _check(Transform(m, r, AT, G, BT))


def _check(t: Transform) -> Transform:
    """`t`, after verifying its identity exactly (in Fractions)."""
    for i in range(t.m):
        for k in range(t.r):
            for j in range(t.alpha):
                v = sum(Fraction(t.AT[i][e]) * t.G[e][k] * t.BT[e][j] for e in range(t.alpha))
                if v != (j == i + k):
                    raise ValueError(f"F({t.m},{t.r}): not a Winograd identity at {i, k, j}")
    return t


def choose(kh: int, kw: int, oh: int, ow: int, tuning: Tuning) -> tuple[int, int]:
    """The tile (mh, mw) of `ALGORITHMS[kh, kw]` with the least modelled cost for an oh x ow
    output: E (alpha_h * alpha_w) contractions over the tile rows' register tiles, plus U's
    bytes. Larger tiles do fewer multiply-adds per output but have a larger U and waste the
    part of the last tile past the image's edge (14x14 outputs: F(2x2,3x3), U of 16/9 the
    weight's size, against F(4x4,3x3)'s 4: a tie the smaller U wins)."""
    def cost(mh, mw):
        th, tw = transform(mh, kh), transform(mw, kw)
        e = th.alpha * tw.alpha
        rows, cols = -(-oh // mh), -(-ow // mw)
        per_row = sum(min(RB, cols - t) + tuning.winograd_tile_overhead
                      for t in range(0, cols, RB))
        return e * (rows * per_row + tuning.winograd_u_tiles), e
    return min(ALGORITHMS[kh, kw], key=lambda m: cost(*m))


def panel_width(t: Target) -> int:
    """Output channels of one panel: the vectors of the widest RB-row register tile whose
    accumulators, a row of loaded vectors and the broadcast fit the target's registers
    (AVX-512: 4 vectors, 64 channels; AVX2: 2 vectors, 16 channels)."""
    return max(n for n in range(1, 9) if fits_registers(RB, n, t)) * t.vlen


def spec(mh: int, mw: int, kh: int, kw: int, panel: int = 64) -> str:
    """The `prepack` spec of a weight fed as the U of F(mh x mw, KH x KW) in panels of
    `panel` output channels (said when it is not 64)."""
    return f"winograd F({mh}x{mw},{kh}x{kw})" + (f" panel {panel}" if panel != 64 else "")


def parse_spec(text) -> tuple[int, int, int] | None:
    """(mh, mw, panel) of a `spec` string; None for anything else (a panel width)."""
    m = re.fullmatch(r"winograd F\((\d+)x(\d+),(\d+)x(\d+)\)(?: panel (\d+))?", text) \
        if isinstance(text, str) else None
    return (int(m[1]), int(m[2]), int(m[5] or 64)) if m else None


def fed_shape(shape: tuple, mh: int, mw: int) -> tuple:
    """The shape of U for a [KH][KW][C][K] weight: (alpha_h * alpha_w, C, K)."""
    return ((mh + shape[0] - 1) * (mw + shape[1] - 1), shape[2], shape[3])


@dataclasses.dataclass
class Operand:
    """An array the chain reads or writes: element (oh, ow, channel c) at
    `h * oh + w * ow + c * ch + const` (ch: 1, a vector, or 0, one scalar per pixel)."""
    array: str
    h: int
    w: int
    ch: int
    const: int
    write: bool


@dataclasses.dataclass
class Plan:
    """One stride-1 conv group run as Winograd F(mh x mw, KH x KW) (`ALGORITHMS`)."""
    call: int
    node: str
    x: str  # input [1][IH][IW][C]
    w: str  # weight [KH][KW][C][K]
    y: str  # the conv's output (never stored when a chain follows)
    ih: int
    iw: int
    oh: int
    ow: int
    c: int
    k: int
    ph: int  # input row of output row 0's first tap is -ph (SAME 3x3: 1, VALID: 0)
    pw: int
    kh: int  # the filter's rows and columns
    kw: int
    mh: int  # the outputs of one tile (`choose`)
    mw: int
    chain: list[Statement]  # the fused pointwise chain after the conv (may be empty)
    epi: regepi.RegisterEpilogue | None
    operands: list[Operand]
    vl: int  # floats in one vector register of the target
    # The weight is a frozen constant only this conv reads: the op is fed U itself
    # (`transform_weights`, the prepack spec `spec`) instead of computing it in every call.
    u_given: bool = False
    panel: int = 64  # output channels of one panel (`panel_width`)
    whole_v_bytes: int = 0  # V up to this size is transformed whole first

    @property
    def rows(self) -> Transform:
        """The transform along the rows: F(mh, KH)."""
        return transform(self.mh, self.kh)

    @property
    def cols(self) -> Transform:
        """The transform along the columns: F(mw, KW)."""
        return transform(self.mw, self.kw)

    @property
    def name(self) -> str:
        return f"F({self.mh}x{self.mw},{self.kh}x{self.kw})"

    @property
    def spec(self) -> str:
        """The `prepack` spec of the weight when it is fed as U."""
        return spec(self.mh, self.mw, self.kh, self.kw, self.panel)

    @property
    def e(self) -> int:
        """The contractions: one per element of the alpha_h x alpha_w transformed tile."""
        return self.rows.alpha * self.cols.alpha

    @property
    def th(self) -> int:
        return -(-self.oh // self.rows.m)

    @property
    def tw(self) -> int:
        return -(-self.ow // self.cols.m)

    @property
    def panels(self) -> list[tuple[int, int]]:
        """(first channel, width) of each output-channel panel."""
        return _panels(self.k, self.panel)

    @property
    def widths(self) -> set[int]:
        return {wd for _, wd in self.panels}

    @property
    def u_floats(self) -> int:
        return self.e * self.c * self.k

    @property
    def v_floats(self) -> int:
        return self.th * self.e * self.tw * self.c

    @property
    def scratch_bytes(self) -> int:
        return 4 * ((0 if self.u_given else self.u_floats) + self.v_floats)

    @property
    def whole_v(self) -> bool:
        return 4 * self.v_floats <= self.whole_v_bytes


def plan(scop: Scop, cs: CallSchedule, t: Target,
         constants: frozenset[str] = frozenset()) -> Plan | None:
    """The Winograd plan of a scheduled group, or None when the group is not a batch-1
    stride-1 convolution with a filter of `ALGORITHMS`, C and K multiples of VLEN and at
    least `Tuning.winograd_min_pixels` outputs, zeroed first, then accumulated, maybe
    followed by a pointwise chain `regepi` can translate, reading the output at the same
    element. When its weight is one of `constants` (the op's frozen inputs) and nothing
    else reads it, the op is fed U."""
    if not cs.kernels:
        return None
    upd = scop.statement(cs.kernels[0].statement)
    if upd.op != "Conv2D" or any(k.statement != upd.name for k in cs.kernels):
        return None
    if upd.domain.dim(isl.dim_type.param) or len(upd.iterators) != 7:
        return None
    n, h, w, kh, kw, ic, oc = iv = [isl_name(v) for v in upd.iterators]
    ya = upd.accesses[-1]
    reads = [a for a in upd.accesses if not a.write and a.array != ya.array]
    if not ya.write or len(reads) != 2:
        return None
    wa = next((a for a in reads if a.index == [{kh: 1}, {kw: 1}, {ic: 1}, {oc: 1}]), None)
    xa = next((a for a in reads if a is not wa), None)
    if wa is None or len(xa.index) != 4:
        return None
    ph, pw = -xa.index[1].get(1, 0), -xa.index[2].get(1, 0)
    if xa.index[0] != {n: 1} or xa.index[3] != {ic: 1} \
            or {k: v for k, v in xa.index[1].items() if k != 1} != {h: 1, kh: 1} \
            or {k: v for k, v in xa.index[2].items() if k != 1} != {w: 1, kw: 1}:
        return None  # not stride 1, dilation 1
    bufs = scop.buffers
    xs, ws_ = bufs[xa.array].shape, bufs[wa.array].shape
    if any(bufs[a].ctype != "float" for a in (xa.array, wa.array, ya.array)):
        return None
    if len(xs) != 4 or len(ws_) != 4 or xs[0] != 1 or tuple(ws_[:2]) not in ALGORITHMS:
        return None
    _, ih, iwid, c = xs
    fh, fw = ws_[:2]
    k = ws_[3]
    oh, ow = (hi + 1 for _, hi in extents(upd)[1:3])
    # The output, in any view (an op after the conv may read it flat): NHWC, batch 1.
    ay = flat_addr(ya, scop)
    if ay is None or {v: cf for v, cf in ay.items() if v != n} != {h: ow * k, w: k, oc: 1} \
            or bufs[ya.array].size != oh * ow * k:
        return None
    u_given = wa.array in constants and all(
        s is upd for s in scop.statements for a in s.accesses if a.array == wa.array)
    if ws_[2] != c or c % t.vlen or k % t.vlen or oh * ow < t.tuning.winograd_min_pixels:
        return None
    # The domain: the whole box, less the taps that fall in the zero padding, which the
    # input transform reads as zeros.
    box = dict(zip(iv, extents(upd)))
    if box != {n: (0, 0), h: (0, oh - 1), w: (0, ow - 1), kh: (0, fh - 1), kw: (0, fw - 1),
               ic: (0, c - 1), oc: (0, k - 1)}:
        return None
    space = upd.domain.get_space()
    want = isl.Set.universe(space)
    for d, (lo, hi) in enumerate(box[x] for x in iv):
        want = want.lower_bound_val(isl.dim_type.set, d, lo).upper_bound_val(
            isl.dim_type.set, d, hi)
    names = ", ".join(iv)
    want = want.intersect(isl.Set(
        f"{{ {upd.domain.get_tuple_name()}[{names}] : 0 <= {h} + {kh} - {ph} < {ih} and "
        f"0 <= {w} + {kw} - {pw} < {iwid} }}"))
    if not want.is_equal(upd.domain):
        return None
    # The conv's output starts at zero everywhere (its zeroing statement).
    init = [s for s in cs.statements if s is not upd and s.accesses[-1].array == ya.array]
    if len(init) != 1 or not is_zero(init[0].ast.rvalue) \
            or not init[0].accesses[-1].relation.range().is_equal(ya.relation.range()):
        return None
    others = {s.name for s in cs.statements} - {upd.name, init[0].name}
    chain = list(cs.chain.statements) if cs.chain else []
    if others != {s.name for s in chain}:
        return None
    contracted = set(cs.chain.contracted) if cs.chain else set()
    if chain and ya.array not in cs.rows and ya.array not in contracted:
        return None  # the output is read after the group: keep the kernels that store it
    if set(cs.rows) - {ya.array}:
        return None  # another row buffer: the chain's arrays must all be stored or scalars
    operands = _operands(scop, chain, ya.array, contracted, (oh, ow, k)) if chain else []
    if operands is None:
        return None
    epi = None
    if chain:
        epi = regepi.RegisterEpilogue(
            cs.call, ya.array, init[0].name, chain[0].name, {},
            [regepi.Operand(o.array, 0, o.ch, o.write) for o in operands], chain, contracted)
        try:
            # per panel width (the kernel name regepi keys them by)
            epi.lines = {wd: regepi.chain_lines(epi, wd, t.vlen)
                         for _, wd in _panels(k, panel_width(t))}
        except regepi.Refused:
            return None
    return Plan(cs.call, upd.node, xa.array, wa.array, ya.array, ih, iwid, oh, ow, c, k,
                ph, pw, fh, fw, *choose(fh, fw, oh, ow, t.tuning), chain, epi, operands, t.vlen,
                u_given, panel_width(t), t.tuning.winograd_whole_v_bytes)


def transform_weights(w: np.ndarray, mh: int, mw: int, panel: int = 64) -> np.ndarray:
    """U = G_h g G_w^T of a [KH][KW][C][K] float32 weight, as the Winograd code reads it:
    for each `panel`-channel panel (the last maybe narrower), [E][C][panel width], panel after
    panel; shape `fed_shape` = (E, C, K), E = alpha_h * alpha_w, for F(mh x mw, KH x KW).
    Computed in float64 and rounded once."""
    g = np.asarray(w, dtype=np.float64)
    if g.ndim != 4 or (mh, mw) not in ALGORITHMS.get(g.shape[:2], ()):
        raise ValueError(f"no Winograd algorithm F({mh}x{mw},KHxKW) for a weight of shape "
                         f"{g.shape} (filters: {sorted(ALGORITHMS)})")
    Gh, Gw = (np.array(transform(m, r).G, dtype=np.float64)
              for m, r in ((mh, g.shape[0]), (mw, g.shape[1])))
    u = np.einsum("ai,ijck,bj->abck", Gh, g, Gw).reshape(fed_shape(g.shape, mh, mw))
    blocks = [u[:, :, p:p + panel].reshape(-1) for p in range(0, g.shape[3], panel)]
    return np.concatenate(blocks).reshape(u.shape).astype(np.float32)


def _panels(k: int, panel: int) -> list[tuple[int, int]]:
    """(first channel, width) of each panel of k output channels."""
    return [(p, min(panel, k - p)) for p in range(0, k, panel)]


def _operands(scop: Scop, chain: list[Statement], y: str, contracted: set[str],
              shape: tuple[int, int, int]) -> list[Operand] | None:
    """The chain's arrays other than y and its contracted scalars, as Operands; None when a
    statement does not run over y's whole index space at the identity index, or an array is
    read or written other than along the channels (unit stride) or per pixel (a scalar)."""
    oh, ow, k = shape
    written = {s.accesses[-1].array for s in chain}
    out: dict[str, Operand] = {}
    for s in chain:
        iv = [isl_name(x) for x in s.iterators]
        if len(iv) != 4 or extents(s) != [(0, 0), (0, oh - 1), (0, ow - 1), (0, k - 1)] \
                or s.domain.n_basic_set() != 1 or s.domain.dim(isl.dim_type.param):
            return None
        ident = [{v: 1} for v in iv]
        for a in s.accesses:
            if scop.buffers[a.array].ctype != "float":
                return None
            if a.array == y or a.array in contracted:
                if a.index != ident:
                    return None
                continue
            addr = flat_addr(a, scop)
            if addr is None or set(addr) - set(iv) - {1}:
                return None  # (n, iv[0], is 0: its coefficient does not matter)
            op = Operand(a.array, addr.get(iv[1], 0), addr.get(iv[2], 0),
                         addr.get(iv[3], 0), addr.get(1, 0), a.write)
            if op.ch not in (0, 1) or (a.write and op.ch != 1):
                return None
            if not a.write and a.array in written:
                # A chain output read back: the vector just computed, at the written element.
                if a.array not in out or dataclasses.replace(out[a.array], write=False) != op:
                    return None
                continue
            if a.array in out and out[a.array] != op:
                return None
            out[a.array] = op
    return list(out.values())


