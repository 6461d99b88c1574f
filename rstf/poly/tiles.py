"""Register tiles and loop orders measured on the machine that serves, and the candidates a
measurement chooses among.

The analytic model (`tilemodel.choose_tile`, `choose_order`, `single_vector_tile`) picks
one tile and one order for each contraction from constants; `rstf tune` measures the
model's choice against the next candidates the same model ranks, on this machine, and
keeps the fastest in a per-machine profile (`rstf.tuner.profile`). A `TileTable` carries
those measured choices into the pass (`Target.tiles`); `schedule._order` asks it once per
kernel, after the model has decided, and records on the kernel which of the two decided
(`Kernel.chosen_by`).

A contraction is identified across models and runs by its `key`: the extents the model's
decision reads (rows, columns, outer output points, reduction depth, the steps of one
call, which loops a call runs) and the threads it plans for. Two layers with the same key
get the same choice: the model cannot tell them apart either.

The candidates (`candidates`) are the model's own choice first, then that tile in the
other loop order (where there is an outer loop to put the column tiles around), then that
tile with half and with twice the target's reduction steps a trip of the kernel's k loop
(`Target.k_steps`, a constant measured on two machines), then that tile with more or fewer
of the outer reduction loops inside each kernel call (the reduction levels per call,
`TileChoice.inside`), then the other register tiles
that fit the registers, best first by the model's cost, round robin
over the vector widths NV so that every width is tried before a second row count of any:
PolyScientist's pruning by the analytic model (polyscientist.txt, section 4), not an
enumeration of every tile.
"""
from __future__ import annotations

import dataclasses
import functools

from .tilemodel import MAX_RB, fits_registers, tile_cost
from .target import Target


@dataclasses.dataclass(frozen=True, order=True)
class TileChoice:
    """A contraction's register tile (RB rows by NV vectors), loop order, the reduction
    steps a trip of its kernels' k loop runs (`steps`: 0 for the target's `k_steps`, the
    model's; `kloop.blocked_loop`), and how many of its outer reduction loops each call
    runs inside around k (`inside`: `contraction.run_inside`'s n; -1 for the model's)."""
    rb: int
    nv: int
    tile_outer: bool  # column tiles outside the outer output loops (`choose_order`)
    steps: int = 0
    inside: int = -1

    @property
    def label(self) -> str:
        """'6x4 rows' / '8x3 tiles' / '8x3 rows k4' / '9x2 rows in2': RB x NV, which loop
        runs outermost, the steps a trip where they are not the target's, and the outer
        reductions a call runs where they are not the model's."""
        steps = f" k{self.steps}" if self.steps else ""
        inside = f" in{self.inside}" if self.inside >= 0 else ""
        return f"{self.rb}x{self.nv} {'tiles' if self.tile_outer else 'rows'}{steps}{inside}"

    @classmethod
    def parse(cls, label: str) -> "TileChoice":
        """The inverse of `label`; ValueError for anything else."""
        tile, order, *rest = label.split()
        rb, nv = tile.split("x")
        steps = [x for x in rest if x[:1] == "k"]
        inside = [x for x in rest if x[:2] == "in"]
        k = int(steps[0][1:]) if steps else 0
        n = int(inside[0][2:]) if inside else -1
        if (order not in ("rows", "tiles") or int(rb) < 1 or int(nv) < 1
                or rest != steps + inside or len(steps) > 1 or len(inside) > 1
                or (steps and not trip_count(k)) or (inside and not 0 <= n <= 2)):
            raise ValueError(label)
        return cls(int(rb), int(nv), order == "tiles", k, n)


def trip_count(steps: int) -> bool:
    """Whether `steps` can be a kernel's steps a trip: even and at least 2
    (`kloop.blocked_loop` prefetches by pairs)."""
    return steps >= 2 and steps % 2 == 0


@dataclasses.dataclass(frozen=True)
class Extents:
    """What the tile decision of one contraction kernel reads: `rows` x `cols` outputs per
    outer point, `outer` outer output points, `depth` reduction steps in all, `call` of
    them in one kernel call, and the loops a call runs beside k (`loops`: 'kin', 'kin3',
    'k2', 'merged', empty for a plain GEMM row)."""
    rows: int
    cols: int
    outer: int
    depth: int
    call: int
    loops: tuple[str, ...] = ()

    @property
    def inside(self) -> int:
        """The outer reduction loops a call runs inside (`contraction.run_inside`'s n)."""
        return ("kin" in self.loops) + ("kin3" in self.loops)

    def key(self, t: Target) -> str:
        """The profile's key: these extents and the threads planned for."""
        extra = "".join(f" {x}" for x in self.loops)
        return (f"rows={self.rows} cols={self.cols} outer={self.outer} depth={self.depth} "
                f"call={self.call}{extra} threads={t.threads}")


def tile_cost_of(c: TileChoice, ext: Extents, t: Target) -> float:
    """The analytic model's cost per output of choice `c` (its tile; the order aside)."""
    return tile_cost(c.rb, c.nv, ext.rows, ext.cols, t)


def candidates(model: TileChoice, ext: Extents, t: Target, limit: int) -> list[TileChoice]:
    """At most `limit` choices for a kernel of extents `ext` on `t`: the model's first (see
    the module docstring). Every one fits the registers and the columns."""
    out = [model]
    if ext.outer > 1:
        out.append(dataclasses.replace(model, tile_outer=not model.tile_outer))
    # The model's tile at half and twice the target's steps a trip: `k_steps` was
    # measured on two machines only (docs/tuning-constants.md), here it is measured on
    # this one, per contraction.
    out += [dataclasses.replace(model, steps=s) for s in step_variants(t)]
    # The model's tile with other outer reductions inside each call: more (a call then
    # runs more of the reduction, or all of it, its epilogue in registers, but its border
    # chunks run fewer taps) or fewer (`contraction.run_inside`); which pays depends on
    # the shape (Inception's 35x35x192 3x3 conv slower with kh and kw inside, ResNet's
    # 56x56x64 one faster), so it is measured.
    out += [dataclasses.replace(model, inside=n) for n in inside_variants(ext)]
    per_nv = {}
    for nv in range(4, 0, -1):
        if ext.cols < t.vlen * nv:
            continue
        tiles = [(tile_cost_of(TileChoice(rb, nv, False), ext, t), rb)
                 for rb in range(1, min(ext.rows, MAX_RB) + 1) if fits_registers(rb, nv, t)]
        per_nv[nv] = sorted(tiles)
    level = 0
    while len(out) < limit and any(len(v) > level for v in per_nv.values()):
        row = sorted((v[level][0], v[level][1], nv) for nv, v in per_nv.items()
                     if len(v) > level)
        for _, rb, nv in row:
            c = TileChoice(rb, nv, model.tile_outer)
            if c not in out:
                out.append(c)
        level += 1
    return out[:limit]


# The candidates a learned probe order (`TileTable.order`) chooses its `limit` from.
ORDER_POOL = 24


@dataclasses.dataclass(frozen=True)
class TileTable:
    """Measured choices for the pass: key -> `TileChoice` (`measured`, from a profile), or
    `variant`: the tuner's probe, which runs every kernel in its candidate number
    `variant` (its model's choice where it has fewer), `limit` candidates a kernel.
    `order`: how the tuner ranks the candidates it probes: None, the analytic model's
    order (`candidates`); or a callable `(ext, model, pool, t) -> pool` that reorders a
    pool of `ORDER_POOL` candidates, the model's own choice kept first
    (`tuner.learned.ProbeOrder`), of which the first `limit` are probed."""
    measured: tuple[tuple[str, TileChoice], ...] = ()
    variant: int | None = None
    limit: int = 8
    order: object = None

    @functools.cached_property
    def _by_key(self) -> dict[str, TileChoice]:
        return dict(self.measured)

    def probes(self, model: TileChoice, ext: Extents, t: Target) -> list[TileChoice]:
        """The candidates the tuner's probes run for a kernel, in probe order."""
        if self.order is None:
            return candidates(model, ext, t, self.limit)
        pool = candidates(model, ext, t, max(self.limit, ORDER_POOL))
        ranked = self.order(ext, model, pool, t)
        assert ranked[0] == model and len(ranked) == len(pool) and set(ranked) == set(pool)
        return ranked[:self.limit]

    def pick(self, model: TileChoice, ext: Extents, t: Target) -> tuple[TileChoice, str]:
        """(the choice for a kernel whose model chose `model`, who chose it: 'model',
        'profile' or 'variant N')."""
        if self.variant is not None:
            cands = self.probes(model, ext, t)
            if self.variant < len(cands) and self.variant:
                return cands[self.variant], f"variant {self.variant}"
            return model, "model"
        got = self._by_key.get(ext.key(t))
        if got is None or got == model or not valid(got, ext, t):
            return model, "model"
        return got, "profile"


def step_variants(t: Target) -> tuple[int, ...]:
    """The steps a trip the tuner tries beside the target's `k_steps`: half and twice it,
    where they are `trip_count`s."""
    return tuple(s for s in (t.k_steps // 2, 2 * t.k_steps) if trip_count(s)
                 and s != t.k_steps)


def inside_variants(ext: Extents) -> tuple[int, ...]:
    """The outer reductions a call could run inside beside the model's count (the loops
    in `ext.loops`): all of them (at most 2) where some run outside (the call's steps are
    fewer than the reduction's), and each fewer count. None for merged rows."""
    if "merged" in ext.loops:
        return ()
    now = ext.inside
    more = (2,) if ext.call < ext.depth and now < 2 else ()
    return more + tuple(range(now - 1, -1, -1))


def valid(c: TileChoice, ext: Extents, t: Target) -> bool:
    """Whether choice `c` can tile a kernel of extents `ext` on `t` (a profile from another
    build may hold a tile these registers or columns cannot take)."""
    return (fits_registers(c.rb, c.nv, t) and c.rb <= max(1, min(ext.rows, MAX_RB))
            and ext.cols >= t.vlen * c.nv and (ext.outer > 1 or not c.tile_outer)
            and (c.steps == 0 or trip_count(c.steps))
            and (c.inside < 0 or c.inside in inside_variants(ext)))
