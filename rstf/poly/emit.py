"""One scheduled function's C: a group's (or a band's) isl AST printed as loops, pragmas,
statement instances and microkernel calls.

`CallLowering` builds the group's isl AST from its new time (`groups.CallSchedule.ast_time`)
and prints it. A statement instance is re-emitted from the original assignment (pycparser
AST) with every array reference rewritten from its affine access relation and the isl
AST's iterator expressions substituted; a kernel instance becomes a microkernel call on
the tile's first elements, with its prefetch, packing and register-epilogue arguments.
The outermost loop that carries no dependence and encloses at least `Tuning.min_work` instances
is `omp parallel for` in chunks (`cprint.chunk_size`) that rstf's OpenMP team balances
(`cprint.dynamic_schedule`); an innermost loop that carries none is `omp simd`. A halo
band's carried window slides down a buffer of `window_buffer_rows` rows. What it did is
counted in a `LoweringStats`.
"""
from __future__ import annotations

import dataclasses
import math
import re

import islpy as isl

from . import abi, regepi
from .cprint import (Emitter, affine_c, ast_c, chunk_size, dynamic_schedule, has_for,
                     instance_volume, loop_trips, ref_c, step_c, users_of)
from .deps import Dependences
from .groups import (CallSchedule, Kernel, call_dependences, extents, flat_addr,
                     parallel_dims)
from .microkernel import Shape, dispatch_name
from .prepack import PACK_DIM, Panels, operand_row, packing_of, panel_steps, plus_c
from .scop import Scop, Statement, isl_name
from .tuning import Tuning


@dataclasses.dataclass
class LoweringStats:
    parallel_loops: int = 0
    simd_loops: int = 0
    kernel_calls: int = 0  # kernel call sites in the C
    packed: int = 0  # kernels reading a packed copy of their column operand
    register_epilogues: list = dataclasses.field(default_factory=list)  # their groups' calls
    carried: dict = dataclasses.field(default_factory=dict)  # halo window -> buffer rows


class CallLowering:
    """One scheduled function: the AST of one group, or of a band of groups
    (a band `groups.Group`), each part with its own chain and register epilogue."""

    def __init__(self, scop: Scop, parts: list[CallSchedule], time: dict[str, isl.Map],
                 ast_time: dict[str, isl.Map], band_rows: dict[str, int],
                 deps: Dependences, stats: LoweringStats, band_m: int = 0,
                 halo: dict[str, tuple[int, int, int]] | None = None,
                 panels: dict[str, Panels] | None = None, *, tuning: Tuning,
                 part_shift: int = 0, blocked: dict[str, int] | None = None,
                 block: tuple[int, int] = (0, 0)):
        self.scop, self.stats, self.tuning = scop, stats, tuning
        self.panels = panels or {}  # constant column operands read in panel layout
        self.time, self.ast_time = time, ast_time
        stmts = [s for p in parts for s in p.statements]
        self.valid = call_dependences(deps, stmts).validity
        self._parallel: dict[tuple, bool] = {}
        self.stmts = {s.name: s for s in stmts}
        self.kernels = {k.name: k for p in parts for k in p.kernels}
        # a fused chain's head stands for the chain in the AST
        self.chains = {p.chain.statements[0].name: p.chain for p in parts if p.chain}
        self.epi_of = {k.name: p.epilogue for p in parts if p.epilogue for k in p.kernels}
        self.contracted = {c for p in parts if p.chain for c in p.chain.contracted}
        # buffer -> leading dimensions dropped (one row kept); none for a register
        # epilogue. A group's row spans its m rows and the column tile around them
        # (declared in the deepest of time dimensions 1..m+1, after the part_shift ones a
        # row-block band puts before its parts' own), a band's its m rows only.
        self.rows, self.row_span = {}, {}
        for p in parts:
            if not p.epilogue:
                for name, m in p.rows.items():
                    self.rows[name], self.row_span[name] = m, m + 1 + part_shift
        for name, m in band_rows.items():
            self.rows[name], self.row_span[name] = m, m
        # A halo band's window buffers (band.fuse_halo): declared in the band's row loop
        # (time dimension band_m, iterator c<band_m>), their first kept dimension indexed
        # from the window's first row. The producer's rows are recomputed per iteration
        # into the iteration's own buffer, so its dependences do not cross band rows.
        self.halo, self.band_m = dict(halo or {}), band_m
        for name in self.halo:
            self.row_span[name] = band_m
        # Consecutive windows share their last kh - s rows (s: the band's stride). A thread
        # that ran band row h - 1 just before h moves them to the window's top instead of
        # recomputing them (`_carry_*`); the producer's AST names say which row loop to trim.
        self.producer = ({s.name for s in parts[0].statements}
                         | {k.name for k in parts[0].kernels}) if self.halo else set()
        self.carrying: str | None = None  # C: the first row still to compute, when carrying
        self.window_rows: dict[str, int] = {}  # a carried window's buffer rows (_carry_start)
        self.valid_band = self.valid
        if self.halo:
            first = scop.union_set(s.domain for s in parts[0].statements)
            self.valid_band = self.valid.subtract_domain(first)
        self.row_dim: dict[str, int | None] = {}
        # A row-block band's block buffers (rowblock.py): buffer -> elements a row, kept for
        # the block of rows of time dimensions 1 (outer index) and 2 (block), `block` = (S,
        # B) its rows an outer index and a block; declared in the deeper of those loops.
        self.blocked, self.block = dict(blocked or {}), block
        self.block_dim: int | None = None
        self.block_iters = ("0", "0")
        self.work = {s.name: instance_volume(s) for s in stmts}
        self.lines: list[str] = []
        self.kernel_shapes: set[Shape] = set()
        self.packs = {k.name: pk for k in self.kernels.values()
                      if k.b.array not in self.panels and (pk := packing_of(scop, k)) is not None}
        stats.packed += len(self.packs)

    def write(self, root: isl.AstNode) -> None:
        """Print the group's AST into `lines`: the row buffers' declarations, then the
        loops."""
        self.plan_rows(root)
        self._row_decls(None)
        self.emit(root)

    # ---------------------------------------------------------------- the AST walk
    def emit(self, node: isl.AstNode, in_parallel: bool = False) -> None:
        t = node.get_type()
        if t == isl.ast_node_type.block:
            children = node.block_get_children()
            for i in range(children.n_ast_node()):
                self.emit(children.get_at(i), in_parallel)
        elif t == isl.ast_node_type.for_:
            self._for(node, in_parallel)
        elif t == isl.ast_node_type.if_:
            self.lines.append(f"if ({ast_c(node.if_get_cond())}) {{")
            self.emit(node.if_get_then_node(), in_parallel)
            if node.if_has_else_node():
                self.lines.append("} else {")
                self.emit(node.if_get_else_node(), in_parallel)
            self.lines.append("}")
        elif t == isl.ast_node_type.user:
            self._user(node.user_get_expr())
        elif t == isl.ast_node_type.mark:
            self.emit(node.mark_get_node(), in_parallel)
        else:
            raise ValueError(f"unexpected isl AST node {t}")

    def _for(self, node: isl.AstNode, in_parallel: bool, bare: bool = False) -> None:
        """One loop. `bare`: the second loop of a `collapse(2)`, which takes no pragma."""
        it = node.for_get_iterator().to_C_str()
        init = ast_c(node.for_get_init())
        body = node.for_get_body()
        if node.for_is_degenerate():
            self.lines.append(f"{{ const int {it} = {init};")
            self._row_decls(int(it[1:]))
            self._pack_tiles(int(it[1:]), it)
            self.emit(body, in_parallel)
            self.lines.append("}")
            return
        p = int(it[1:])  # isl names iterators c<time dimension>
        names = users_of(body)
        if self.carrying and p == self.band_m + 2 and names <= self.producer:
            init = f"(rstf_carry ? rstf_max({init}, {self.carrying}) : {init})"
        originals = self._originals(names)
        innermost = not has_for(body)
        work = None if in_parallel else self._work_per_entry(names, originals, p)
        want_par = work is not None and work >= self.tuning.min_work
        want_simd = innermost and not (names & set(self.kernels))
        parallel = not bare and (want_par or want_simd) and self._is_parallel(originals, p)
        pragma = []
        par = parallel and want_par
        packing = p == PACK_DIM and bool(self.packs)
        # The packed panels belong to one column tile: its loop runs alone, not collapsed.
        inner = self._collapsible(node, it) if par and not packing else None
        if packing:  # each thread packs into its own buffers, allocated once per region
            self.lines.extend(["#pragma omp parallel", "{"] if par else ["{"])
            for name, pk in self.packs.items():
                self.lines.append(f"float *{name}_pack = (float *)aligned_alloc(64, "
                                  f"{pk.bytes});")
        if par:
            pragma.append("for" if packing else
                          "parallel for collapse(2)" if inner else "parallel for")
            self.stats.parallel_loops += 1
        if parallel and want_simd:
            pragma.append("simd")
            self.stats.simd_loops += 1
        if par:
            pragma.append(dynamic_schedule(chunk_size(work, node, inner, self.tuning)))
        carry = self._carry_start(p, par, inner is not None, packing)
        if carry and par:  # the region's threads each keep their window across rows
            pragma[0] = "for"
        if pragma:
            self.lines.append(f"#pragma omp {' '.join(pragma)}")
        self.lines.append(f"for (int {it} = {init}; {ast_c(node.for_get_cond())}; "
                          f"{step_c(it, node)}) {{")
        self._row_decls(p, skip=self.halo if carry else ())
        self._pack_tiles(p, it)
        if carry:
            self._carry_rows(it)
        if inner is not None:
            self._for(inner, True, bare=True)
        else:
            self.emit(body, in_parallel or par)
        self.lines.append("}")
        if carry:
            self.carrying = None
            self.lines.append("}")
        if packing:
            self.lines.extend(f"free({name}_pack);" for name in self.packs)
            self.lines.append("}")

    def _carry_start(self, p: int, par: bool, collapsed: bool, packing: bool) -> bool:
        """Open the block of a halo band's row loop whose window rows are carried from one
        band row to the next: the window, declared once per thread, and the row it holds.
        Only for one window overlapping the next (kh > s) and a loop not collapsed."""
        if p != self.band_m or len(self.halo) != 1 or collapsed or packing:
            return False
        name, (st, lo, kh) = next(iter(self.halo.items()))
        if kh <= st or self.row_dim.get(name) != p:
            return False
        self.lines.extend(["#pragma omp parallel", "{"] if par else ["{"])
        row_bytes = 4 * math.prod(self.scop.buffers[name].shape[self.rows[name] + 1:])
        self.window_rows[name] = window_buffer_rows(st, kh, row_bytes, self.tuning)
        self._row_decls(p, only=self.halo)
        self.lines.append("int rstf_held = 0, rstf_has = 0;  /* the band row it holds */")
        self.lines.append("int rstf_base = 0;  /* the buffer row its window starts at */")
        self.carrying = window_start(st, lo + kh - st, p)
        self.stats.carried[name] = self.window_rows[name]
        return True

    def _carry_rows(self, it: str) -> None:
        """At the top of a carrying band row: when this thread's previous band row was the
        one before, the window's last kh - s rows are this row's first ones. The window
        then slides s rows down its buffer (`rstf_base`), and only when it would run off
        the buffer's end are those rows moved to the top; the producer's row loop starts
        after them (`self.carrying`). Why slide: moving them every band row is a copy of a
        whole row (MobileNet v2's block 1: 43 KB) a band row, a share of the band's time
        (docs/tuning-constants.md, halo bands)."""
        name, (st, lo, kh) = next(iter(self.halo.items()))
        buf, rows = f"{name}_row", self.window_rows[name]
        self.lines.append(f"const int rstf_carry = rstf_has && rstf_held == {it} - 1;")
        self.lines.append("if (!rstf_carry) rstf_base = 0;")
        self.lines.append(f"else if (rstf_base + {st + kh} <= {rows}) rstf_base += {st};")
        self.lines.append(f"else {{ memmove(&{buf}[0], &{buf}[rstf_base + {st}], "
                          f"{kh - st} * sizeof {buf}[0]); rstf_base = 0; }}")
        self.lines.append(f"rstf_held = {it}, rstf_has = 1;")

    def _pack_tiles(self, p: int, it: str) -> None:
        """At the top of the column-tile loop: copy each packed kernel's panel (every row
        of its column operand, the tile's VB columns) into the thread's buffer, contiguous,
        so that the rows of the tile stream it from L2 instead of the operand's strided
        (power-of-two, set-conflicting) columns. A partial last tile is not packed: the
        residual loops read the operand itself."""
        if p != PACK_DIM:
            return
        for name, pk in self.packs.items():
            self.lines.append(
                f"if ({name}_pack && {pk.vb} * {it} + {pk.vb} <= {pk.cols}) "
                f"rstf_pack({name}_pack, (const float *){pk.array}, {pk.rows}, {pk.cols}, "
                f"{pk.vb} * {it}, {pk.vb});")

    def _originals(self, names: set[str]) -> set[str]:
        """The original statements behind AST statements (a kernel runs its contraction's
        points; a fused chain's head stands for the whole chain)."""
        out = {self.kernels[n].statement if n in self.kernels else n for n in names}
        for head in out & set(self.chains):
            out |= {s.name for s in self.chains[head].statements}
        for n in names:
            if (epi := self.epi_of.get(n)) is not None:  # it runs the init and the chain
                out |= {epi.init, *(s.name for s in epi.statements)}
        return out

    def _collapsible(self, node: isl.AstNode, it: str) -> isl.AstNode | None:
        """The loop directly inside `node` when both can share one `collapse(2)`: perfectly
        nested, the inner bounds independent of the outer iterator, and no dependence
        carried by the inner loop either (two output dimensions: rows x column tiles give
        the threads more, evener pieces)."""
        body = node.for_get_body()
        if body.get_type() != isl.ast_node_type.for_ or body.for_is_degenerate():
            return None
        if int(it[1:]) in self.row_dim.values() or int(it[1:]) == self.block_dim:
            return None  # (a row buffer declared between them: not perfectly nested)
        bounds = ast_c(body.for_get_init()) + " " + ast_c(body.for_get_cond())
        if re.search(rf"\b{it}\b", bounds):
            return None
        inner = int(body.for_get_iterator().to_C_str()[1:])
        names = users_of(body)
        # An innermost pointwise loop is the `simd` one: collapsed, it would not vectorise
        # (a libmvec call, a long chain), so the outer loop alone is shared when it has
        # rows enough for the threads.
        if (not has_for(body.for_get_body()) and not (names & set(self.kernels))
                and (loop_trips(node) or 0) >= self.tuning.min_parallel_rows):
            return None
        return body if self._is_parallel(self._originals(names), inner) else None

    def _work_per_entry(self, names: set[str], originals: set[str], p: int) -> float:
        """Statement instances run by one execution of the loop at time dimension p: the
        statements' whole work over the number of times the loop starts (the points of the
        enclosing time dimensions 0..p-1, from their bounding box, so an overestimate).
        A parallel region costs a fork and a barrier each time it starts; one inside a
        long sequential loop (a reduction's remainder columns) must not be entered
        thousands of times for a few dozen iterations each."""
        starts = 1
        for n in names:
            t = self.ast_time[n].range()
            if t.dim(isl.dim_type.param):
                continue
            prefix = t.project_out(isl.dim_type.set, p, t.dim(isl.dim_type.set) - p)
            starts = max(starts, math.prod(
                int(prefix.dim_max_val(d).to_python()) - int(prefix.dim_min_val(d).to_python())
                + 1 for d in range(p)))
        return sum(self.work[n] for n in originals) / starts

    def _is_parallel(self, names: set[str], p: int) -> bool:
        key = (frozenset(names), p)
        if key not in self._parallel:
            valid = self.valid_band if p == self.band_m else self.valid
            self._parallel[key] = parallel_dims(valid, self.time, names, [p])[p]
        return self._parallel[key]

    def _user(self, e: isl.AstExpr) -> None:
        name = e.get_op_arg(0).get_id().get_name()
        args = [ast_c(e.get_op_arg(i)) for i in range(1, e.get_op_n_arg())]
        args = [a if a.isidentifier() or a.lstrip("-").isdigit() else f"({a})" for a in args]
        if name in self.kernels:
            self.lines.append(self._kernel_call(self.kernels[name], args))
            return
        if name in self.chains:
            for s in self.chains[name].statements:  # the fused chain: every one, in order
                self._statement(s, args)
            return
        self._statement(self.stmts[name], args)

    def _statement(self, s: Statement, args: list[str]) -> None:
        if s.k_slice:  # its C says one chain; only its kernels sum the slices (kslices.py)
            raise ValueError(f"{s.name} ({s.node}), summed in k slices, reached the "
                             "textbook loops")
        env = dict(zip(map(isl_name, s.iterators), args))
        refs = {id(a.ref): (f"{a.array}_c" if a.array in self.contracted else self._ref(a, env))
                for a in s.accesses}
        emit = Emitter(refs, dict(zip(s.iterators, args)))
        out = s.accesses[-1].array
        if out in self.contracted:  # a contracted temporary: a scalar of this iteration
            ctype = self.scop.buffers[out].ctype
            self.lines.append(f"const {ctype} {out}_c = {emit.visit(s.ast.rvalue)};")
        else:
            self.lines.append(emit.visit(s.ast) + ";")

    def _kernel_call(self, k: Kernel, args: list[str]) -> str:
        s = self.stmts[k.statement]
        vals = dict(zip(k.dims, args))
        # Each reduction loop in the kernel: its first value and trip count in this call
        # (a ranged loop's from the chunk's lo<i>, hi<i>).
        first, trip = {}, {}
        for c, lo, hi in ((k.k, k.k_lo, k.k_hi), (k.k2, k.k2_lo, k.k2_hi),
                          (k.kin, k.kin_lo, k.kin_hi), (k.kin3, k.kin3_lo, k.kin3_hi)):
            if c in k.ranged:
                i = k.ranged.index(c)
                first[c] = vals[f"lo{i}"]
                trip[c] = f"({vals[f'hi{i}']} - {first[c]} + 1)"
            elif c and c == k.k and k.kb:  # block kb of k: kb steps, the last maybe fewer
                n, kb = hi - lo + 1, vals["kb"]
                first[c] = f"{lo} + {k.kb} * {kb}" if lo else f"{k.kb} * {kb}"
                trip[c] = str(k.kb) if n % k.kb == 0 else f"rstf_min({k.kb}, {n} - {k.kb} * {kb})"
            elif c:
                first[c], trip[c] = str(lo), str(hi - lo + 1)
        env = {}
        for c in s.iterators:
            if c == k.r and k.merged:  # the chunk's first row m: o = m / n, r = m % n
                env[isl_name(c)] = f"({vals['s']} % {k.merged_n})"
            elif c == k.merged:
                env[isl_name(c)] = f"({vals['s']} / {k.merged_n})"
            elif c == k.r:
                env[isl_name(c)] = vals["s"]
            elif c == k.v:
                env[isl_name(c)] = f"{k.vb} * {vals['u']}"
            elif c in first:
                env[isl_name(c)] = first[c]
            else:
                env[isl_name(c)] = vals[c]
        ri, ki = isl_name(k.r) if k.r else None, isl_name(k.k)
        aa, ab, ay = (flat_addr(x, self.scop) for x in (k.a, k.b, k.y))
        depth = str(k.depth) if not (k.ranged or k.kb) else \
            " * ".join(trip[c] for c in (k.k2, k.k) if c and trip[c] != "1") or "1"
        epi = self.epi_of.get(k.name)
        if not epi:
            self.kernel_shapes.add(k.shape)
        self.stats.kernel_calls += 1
        rows = "1" if not k.r else f"{vals['e']} - {vals['s']} + 1"
        b, sbk = f"&{self._ref(k.b, env)}", str(ab.get(ki, 0))
        kin = isl_name(k.kin) if k.kin else None
        kin3 = isl_name(k.kin3) if k.kin3 else None
        sbin, sbin3 = str(ab.get(kin, 0)), str(ab.get(kin3, 0))
        pk, pn = self.packs.get(k.name), self.panels.get(k.b.array)
        if pk is not None:  # the packed panel: row q of the operand is row q of the panel
            row = operand_row(ab, env, k, pk.cols)
            b = f"({k.name}_pack ? {plus_c(f'{k.name}_pack', pk.vb, row)} : {b})"
            sbk = f"({k.name}_pack ? {pk.vb * ab.get(ki, 0) // pk.cols} : {sbk})"
        elif pn is not None:  # the weight in panel layout: the tile's panel, in place
            w = pn.width(k)
            groups = [f"{n} * {env[x]}" if n != 1 else env[x]
                      for x, n in panel_steps(k).items()]
            tile = f"({' + '.join([vals['u'], *groups])})" if groups else vals["u"]
            b = plus_c(f"(const float *){pn.array} + {pn.rows * pn.vb} * {tile}", w,
                      operand_row(ab, env, k, pn.cols))
            sbk, sbin, sbin3 = (str(w * ab.get(x, 0) // pn.cols) for x in (ki, kin, kin3))
        aenv = env
        if k.slide:  # a sliding row's input pointer: its first column in bounds (D taps on)
            aenv = dict(env, **{ki: str(k.k_lo + k.slide[2])})
        args = {"rows": rows, "K": depth, "a": f"&{self._ref(k.a, aenv)}",
                "sar": str(aa.get(ri, 0) if ri else 0), "sak": str(aa.get(ki, 0)),
                "b": b, "sbk": sbk}
        if k.kin:  # the second reduction level: its trip count and strides
            args.update(K2=trip[k.kin], sak2=str(aa.get(kin, 0)), sbk2=sbin)
        if k.kin3:  # the third
            args.update(K3=trip[k.kin3], sak3=str(aa.get(kin3, 0)), sbk3=sbin3)
        if k.prefetch:  # this call's lines of the weight another group reads next
            total = math.prod(self.scop.buffers[k.prefetch_of].shape) * 4
            args["pf"] = (f"rstf_pf_take((const char *){k.prefetch_of}, {total}L, "
                          f"{k.prefetch_cap}L, {k.prefetch * 64}L)")
        if k.panel_prefetch:  # this call's rows' share of the next tile's panel
            args["pp"], args["npp"] = self._panel_prefetch_args(k, vals, pn)
        if epi:  # the chain's arrays at the tile's first row and column
            args.update(self._epilogue_args(epi, k, env))
            return abi.epilogue_dispatcher(k.shape, epi.operands).call(epi.name(k), args) + ";"
        args.update(y=f"&{self._ref(k.y, env)}", syr=str(ay.get(ri, 0) if ri else 0))
        return abi.store_dispatcher(k.shape).call(dispatch_name(k.shape), args) + ";"

    def _panel_prefetch_args(self, k: Kernel, vals: dict[str, str], pn) -> tuple[str, str]:
        """`pp, npp` of a call (`plan_panel_prefetch`): of the next column tile's panel
        (the last tile's own, already read), the lines in proportion to this call's place
        among the tile's calls: its outer point, its outer reduction step and its output
        rows [s, e], in loop order, so that the tile's calls prefetch the next panel once
        between them. (Outer points above the column tile, rows outermost, each run all
        the tiles: each point's calls prefetch the whole next panel.) Of the next panel,
        only the rows the statement reads of its own (`_panel_rows`): one of TensorFlow's
        k slices left as a statement of its own reads a slice of each panel, and
        prefetching whole panels for each slice read the weight from DRAM that many times
        over.

        In K blocks (`Kernel.kb`), of the next *block* instead, among the block's calls:
        the next block of this tile's panel, or after its last block the next panel's
        first (`kblocks.py`: L2 then holds two blocks beside A, not two panels)."""
        s = self.stmts[k.statement]
        box = dict(zip(s.iterators, extents(s)))
        row0, nrows = _panel_rows(k, s, self.scop, pn)
        u = k.dims.index("u")
        if k.merged:  # m runs over merged x r
            rows, r_lo = (box[k.merged][1] - box[k.merged][0] + 1) * k.merged_n, 0
        else:
            rows, r_lo = box[k.r][1] - box[k.r][0] + 1, box[k.r][0]

        def minus(v: str, lo: int) -> str:  # v - lo, readable
            return f"({v} - {lo})" if lo > 0 else f"({v} + {-lo})" if lo < 0 else f"({v})"

        index, n = [], 1  # the linear index of the call's first row, r innermost
        # (k.dims lists the outer outputs before u; they run inside the column tile only
        # when it is outermost)
        inner = (k.dims[:u] if k.tile_outer else []) + k.dims[u + 1:-2]
        if k.kb:
            inner.remove("kb")
        for c in reversed(inner):
            lo, hi = box[c]
            if hi > lo:
                index.append(f"{n * rows}L * {minus(vals[c], lo)}")
                n *= hi - lo + 1
        g0 = " + ".join(index + [minus(vals["s"], r_lo)])
        g1 = " + ".join(index + [minus(vals["e"], r_lo - 1)])  # past the last row
        tiles = -(-pn.cols // pn.vb)
        nxt = f"rstf_min({vals['u']} + 1, {tiles - 1})"
        panel = plus_c(f"(const float *){pn.array} + {pn.rows * pn.vb}L * {nxt}", pn.vb,
                       str(row0))
        size, total = nrows * pn.vb * 4, n * rows
        if k.kb:
            kb, last = vals["kb"], k.k_blocks - 1
            own = plus_c(f"(const float *){pn.array} + {pn.rows * pn.vb}L * {vals['u']}",
                         pn.vb, f"{row0} + {k.kb} * ({kb} + 1)" if row0 else
                         f"{k.kb} * ({kb} + 1)")
            panel, size = f"({kb} < {last} ? {own} : {panel})", min(k.kb, nrows) * pn.vb * 4
        return (f"rstf_pp_at({panel}, {size}L, {g0}, {total}L)",
                f"rstf_pp_lines({size}L, {g0}, {g1}, {total}L)")

    def _epilogue_args(self, epi: regepi.RegisterEpilogue, k: Kernel,
                       env: dict[str, str]) -> dict[str, str]:
        """A register epilogue's pointer arguments: each operand's element at the tile's
        first row and column (the chain's iterators are the output's indices)."""
        out = {}
        for o in epi.operands:
            s, a = next((s, a) for s in epi.statements for a in s.accesses
                        if a.array == o.array)
            chain_env = {isl_name(c): f"({affine_c(i, env)})"
                         for c, i in zip(s.iterators, k.y.index)}
            out[f"{o.array}_p"] = f"&{self._ref(a, chain_env)}"
        return out

    def _ref(self, access, env: dict[str, str]) -> str:
        """An array reference; a buffer contracted to one row drops its leading indices."""
        if access.array in self.blocked:  # its flat offset from the block's first row
            per, (seq, rows) = self.blocked[access.array], self.block
            o, b = self.block_iters
            flat = affine_c(flat_addr(access, self.scop), env)
            return (f"{access.array}_blk[{flat} - {per * seq} * {o} - {per * rows} * {b}]")
        m = self.rows.get(access.array)
        if m is None:
            return ref_c(access, env)
        idx = [f"[{affine_c(i, env)}]" for i in access.index[m:]]
        if access.array in self.halo:  # the row within the window of band row c<band_m>
            s, lo, _ = self.halo[access.array]
            base = " + rstf_base" if access.array in self.window_rows else ""
            idx[0] = f"[{idx[0][1:-1]} - ({window_start(s, lo, self.band_m)}){base}]"
        return f"{access.array}_row" + "".join(idx)

    def plan_rows(self, root: isl.AstNode) -> None:
        """Where each row buffer is declared: in the deepest loop of the AST among the
        time dimensions 1..m+1 (the contracted rows and the column tile around them), so
        each of their iterations, and each thread, has its own. Loops isl did not emit
        (one iteration) do not count; with none, the buffer goes at the function's top,
        and a parallel loop, if any, is then inside one row and column tile."""
        present: set[int] = set()

        def visit(n):
            if n.get_type() == isl.ast_node_type.for_:
                present.add(int(n.for_get_iterator().to_C_str()[1:]))
            return True

        root.foreach_descendant_top_down(visit)
        self.row_dim = {}
        for name in self.rows:
            dims = [d for d in present if 1 <= d <= self.row_span[name]]
            self.row_dim[name] = max(dims) if dims else None
        # a band loop isl did not emit has one iteration: 0
        self.block_iters = tuple(f"c{d}" if d in present else "0" for d in (1, 2))
        self.block_dim = max((d for d in (1, 2) if d in present), default=None)

    def _row_decls(self, p: int | None, skip=(), only=None) -> None:
        """Declare the row buffers that belong at the top of the loop over dimension p
        (None: the function's top), but those in `skip`, or only those in `only`."""
        for name in self.rows:
            if self.row_dim.get(name) == p and name not in skip and (only is None
                                                                     or name in only):
                m = self.rows[name]
                b = self.scop.buffers[name]
                shape = list(b.shape[m:])
                if name in self.halo:  # the window's rows (a carried one's buffer)
                    shape[0] = self.window_rows.get(name, self.halo[name][2])
                dims = "".join(f"[{d}]" for d in shape)
                self.lines.append(f"{b.ctype} {name}_row{dims} __attribute__((aligned(64)));")
        if self.blocked and p == self.block_dim and only is None:
            for name, per in self.blocked.items():
                b = self.scop.buffers[name]
                self.lines.append(f"{b.ctype} {name}_blk[{per * self.block[1]}] "
                                  "__attribute__((aligned(64)));")


def window_buffer_rows(s: int, kh: int, row_bytes: int, tuning: Tuning) -> int:
    """Rows of a carried window's buffer: kh + s * (n - 1) for the largest n (band rows
    per move, at most `tuning.window_slides`) within `tuning.window_buffer_bytes`, at least
    the window's own kh rows."""
    n = max(1, min(tuning.window_slides,
                   (tuning.window_buffer_bytes // max(1, row_bytes) - kh) // s + 1))
    return kh + s * (n - 1)


def window_start(s: int, lo: int, m: int) -> str:
    """A halo window's first row at band row c<m>: s * c<m> + lo, as C."""
    return f"{s} * c{m}" + (f" + {lo}" if lo > 0 else f" - {-lo}" if lo < 0 else "")


def _panel_rows(k: Kernel, s: Statement, scop: Scop, pn: Panels) -> tuple[int, int]:
    """(first row, rows) of the weight's rows (`pn.rows`, each a panel row) that statement
    `s` reads through the kernel's column operand over its whole domain: every row, but
    a statement over part of the reduction reads those rows alone."""
    ab = flat_addr(k.b, scop)
    if ab is None:
        return 0, pn.rows
    box = {isl_name(x): e for x, e in zip(s.iterators, extents(s))}
    lo = hi = ab.get(1, 0)
    for x, c in ab.items():
        if x != 1:
            lo += c * (box[x][0] if c > 0 else box[x][1])
            hi += c * (box[x][1] if c > 0 else box[x][0])
    first, last = max(lo // pn.cols, 0), min(hi // pn.cols, pn.rows - 1)
    return (first, last - first + 1) if last >= first else (0, pn.rows)
