"""Weights laid out as the microkernels read them, once, at optimize time.

A tiled contraction's kernel reads its column operand B (a convolution's or a MatMul's
weight, seen as `rows` rows of `cols` columns) one column tile at a time: VB consecutive
columns of every row, rows `cols` floats apart. Read in place, that is a strided walk
(power-of-two strides conflict in the cache's sets), and a weight-heavy layer (MobileNet's
7x7 Conv_1, 1.6 MB; its classifier, 5.1 MB) pays for it on every call; the lowering's
per-call packing (`Packing`, planned by `packing_of`) copies each panel into a contiguous
buffer first, which costs a read, a write and a serial phase before each tile's arithmetic.

When B is a constant input of the custom op (a frozen weight), the copy can be made once
instead: the splice gives the op a Const holding B's *panel layout*, and the kernels read
each panel in place, contiguous. The panel layout of a rows x cols matrix with tile width
VB: tile t (columns t*VB .. t*VB + w_t - 1, w_t = min(VB, cols - t*VB)) is stored at
offset t * rows * VB, row-major with rows w_t floats apart. The tensor keeps its shape and
its element count; only the order of its elements changes.

`plan` decides which constant inputs may take the layout: every access to the array in
the subgraph must be the column operand of a (non-depthwise) kernel of one tile width,
with the kernel's columns as the array's whole last dimension, every other iterator and
the constant stepping over whole rows, and a column-remainder kernel exactly covering the
last partial tile. Any other reader (a leftover scalar instance, a second operand, a
depthwise kernel) keeps the array as it is. `pack_panels` computes the layout (numpy),
for the splice and for anything else that feeds the op its original weight.

The per-call packing's own plan lives here too: `Packing` (a column-tile-outer kernel's
operand, copied one panel at a time), and the C offsets of a kernel call's operand row
(`operand_row`, `plus_c`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .scop import Scop, isl_name
from .groups import Kernel, flat_addr


@dataclasses.dataclass(frozen=True)
class Panels:
    """A constant column operand stored in panel layout (module docstring)."""
    array: str
    rows: int
    cols: int
    vb: int  # the tile width: columns of every whole panel

    def width(self, k: Kernel) -> int:
        """Columns of the panel kernel `k` reads (its row stride in the layout)."""
        return k.cols or self.vb


def panel_steps(k: Kernel) -> dict[str, int] | None:
    """{x: panels a step of x moves} for the iterators other than the kernel's columns in
    B's last index: a grouped convolution's group loop g, whose weight column is G*g + v,
    steps over G / VB whole panels ({} for an ordinary weight). None where a term is not
    whole panels (or v's is not 1), so the layout cannot serve the kernel."""
    v = isl_name(k.v)
    last = dict(k.b.index[-1])
    if last.pop(v, None) != 1 or any(c % k.vb for c in last.values()):
        return None
    if 1 in last:  # a constant column offset
        return None
    return {x: c // k.vb for x, c in last.items() if c}


def column_operand(k: Kernel, scop: Scop) -> tuple[int, int] | None:
    """(rows, cols) of B as the kernel walks it, when it may be read as panels: the
    kernel's columns are B's whole last dimension, less whole panels a group loop steps
    over (`panel_steps`), and every other iterator (and the constant) steps over whole
    rows."""
    b = scop.buffers[k.b.array]
    addr = flat_addr(k.b, scop)
    if addr is None or b.ctype != "float" or not b.shape or b.size is None:
        return None
    cols = b.shape[-1]
    v = isl_name(k.v)
    steps = panel_steps(k)
    if steps is None or addr.get(v) != 1 \
            or any(c % cols for x, c in addr.items() if x != v and x not in steps):
        return None
    return b.size // cols, cols


def plan(scop: Scop, kernels: list[Kernel], scalar_statements: set[str],
         constants: set[str]) -> dict[str, Panels]:
    """{array: Panels} for the arrays of `constants` (constant inputs of the op) that
    every reader reads as a kernel's column operand (module docstring). `kernels`: every
    kernel of the subgraph's schedule; `scalar_statements`: the original statements that
    still run instances outside kernels (their leftovers)."""
    by_array: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_array.setdefault(k.b.array, []).append(k)
    out = {}
    for name in sorted(constants & set(by_array)):
        ks = by_array[name]
        operands = {column_operand(k, scop) for k in ks}
        widths = {k.vb for k in ks}
        if None in operands or len(operands) != 1 or len(widths) != 1:
            continue
        (rows, cols), = operands
        vb, = widths
        if any(k.vec_a for k in ks) or vb > cols:
            continue
        # A remainder kernel must read exactly the last, partial panel.
        if any(k.cols and (k.u_last * vb + k.cols != cols or k.u_last != cols // vb)
               for k in ks):
            continue
        statements = {k.statement for k in ks}
        readers = [(s, a) for s in scop.statements for a in s.accesses if a.array == name]
        if any(s.name not in statements or s.name in scalar_statements or a.write
               for s, a in readers):
            continue
        if any(sum(a.array == name for a in s.accesses) != 1 for s, _ in readers):
            continue  # B read twice by one statement: only one read is the kernel's
        out[name] = Panels(name, rows, cols, vb)
    return out


def pack(value: np.ndarray, spec) -> np.ndarray:
    """`value` as the op reads it under `spec` (a `prepacked` entry of the pass's report):
    a panel width (`pack_panels`), or "winograd F(mh x mw,KH x KW)[ panel P]": a
    [KH][KW][C][K] weight as that algorithm's transformed weights ([E][C][K] floats in
    panels of P output channels, 64 unless said; `winograd.transform_weights`)."""
    from .winograd import parse_spec, transform_weights
    if (tile := parse_spec(spec)) is not None:
        return transform_weights(value, *tile)
    return pack_panels(value, spec)


def packed_shape(shape: tuple, spec) -> tuple:
    """The shape of `pack(value, spec)` for a value of `shape`: the same but for Winograd."""
    from .winograd import fed_shape, parse_spec
    if (tile := parse_spec(spec)) is not None:
        return fed_shape(tuple(shape), *tile[:2])
    return tuple(shape)


def as_fed(slots: list, specs: dict) -> list:
    """The op's input slots (codegen.Slot) as the op is fed them: each one `specs` (a
    report's `prepacked`) names gets `packed_shape`; the others unchanged."""
    return [dataclasses.replace(s, shape=packed_shape(s.shape, specs[s.cname]))
            if s.cname in specs else s for s in slots]


def pack_panels(value: np.ndarray, vb: int) -> np.ndarray:
    """`value` (any shape, its last dimension the columns) in panel layout with tile width
    `vb`, same shape and dtype (module docstring)."""
    cols = value.shape[-1]
    m = np.ascontiguousarray(value).reshape(-1, cols)
    panels = [m[:, t:t + vb].reshape(-1) for t in range(0, cols, vb)]
    return np.concatenate(panels).reshape(value.shape).astype(value.dtype, copy=False)


PACK_DIM = 1  # the time dimension of a column-tile-outer kernel's tile loop (after pos)


@dataclasses.dataclass(frozen=True)
class Packing:
    """A kernel's column operand, seen as `rows` rows of `cols` columns, packed one column
    tile (`vb` columns) at a time."""
    array: str
    rows: int
    cols: int
    vb: int

    @property
    def bytes(self) -> int:
        return -(-4 * self.rows * self.vb // 64) * 64


def packing_of(scop: Scop, k: Kernel) -> Packing | None:
    """How to pack the kernel's column operand B, or None: only column-tile-outer kernels
    (each panel is then reused by every row of the tile) whose B is a float array with the
    kernel's columns as its whole last dimension, every other iterator (and the constant)
    stepping over whole rows of it. Not where one tile is B's whole width: its rows are
    that panel already, and the tile loop, of one iteration, is no loop to pack in."""
    if not k.tile_outer or k.cols or k.kin:  # (a partial tile is not packed)
        return None
    operand = column_operand(k, scop)
    if operand is None or operand[1] <= k.vb:
        return None
    return Packing(k.b.array, *operand, k.vb)


def operand_row(ab: dict, env: dict[str, str], k: Kernel, cols: int) -> str:
    """The row of the column operand (seen as rows of `cols` columns) that the kernel
    call's first element lies in, as C: every term of its offset but the column's."""
    steps = panel_steps(k) or {}
    terms = [f"{c // cols} * {env[x]}" if c != cols else env[x]
             for x, c in ab.items()
             if x not in (1, isl_name(k.v)) and x not in steps and c and env[x] != "0"]
    if ab.get(1, 0):
        terms.append(str(ab[1] // cols))
    return " + ".join(terms) or "0"


def plus_c(base: str, scale: int, row: str) -> str:
    """`base + scale * (row)` as C, without a term that adds nothing (row "0")."""
    return base if row == "0" else f"{base} + {scale} * ({row})"
