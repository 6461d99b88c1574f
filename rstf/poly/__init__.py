"""The polyhedral pass, stage by stage, each a function tested alone:

    raise      raise_c.raise_subgraph: the subgraph's C as a `Scop` (statements, accesses)
    fold       kslices.fold_k_slices: contractions in TensorFlow's k slices as one statement
               each (run again unfolded where kernels would not compute one whole)
    depend     deps.compute_dependences: its exact dependences
    schedule   schedule.schedule_call (contractions tiled around microkernels),
               fuse (pointwise chains and epilogues), band (row bands of consecutive
               groups): the scheduled groups, each checked against the dependences
    plan       plan.make_plan: Winograd, panel layouts, prefetches and the workspace,
               decided once (`LoweringPlan`)
    lower      lower.lower: the plan's groups printed as C, with dependence-based
               `omp parallel for` / `omp simd`
    result     a `PassResult`: the new C and what was done

`optimize` runs them on one subgraph's C. Code outside the raisable subset, or a failure
of a later stage, leaves the subgraph's C as it was, with the diagnostic: never
mis-compiled.
"""
from .deps import Dependences, Violation, check_schedule_legal, compute_dependences, violated
from .kslices import UnslicedStatement, fold_k_slices
from .raise_c import raise_subgraph
from .result import PassResult
from .scop import Access, ArrayInfo, Call, NotRaisable, Scop, Statement

__all__ = ["Access", "ArrayInfo", "Call", "Dependences", "NotRaisable", "PassResult", "Scop",
           "Statement", "Violation", "check_schedule_legal", "compute_dependences", "optimize",
           "optimize_source", "raise_subgraph", "violated"]


def optimize(source: str, entry: str, tile: bool = True, fuse: bool = True,
             constants: frozenset[str] = frozenset(),
             winograd: bool = True, target=None) -> PassResult:
    """Run the polyhedral pass on one subgraph's C. Returns a `PassResult`.

    `target` (a `target.Target`, its name, or None: this machine's, `target.detect()`) is
    the vector ISA the C is shaped for: its vector width and register count pick the tiles
    and the types; its `tuning` holds the pass's thresholds.

    `constants` names the entry's input arrays whose values are fixed when the op is built
    (frozen weights). The new C may read some of them in the microkernels' panel layout:
    the result's `prepacked` maps each to its panel width (or a `winograd.spec`
    string, "winograd F(4x4,3x3)": a Winograd conv's weight, fed as its transformed U, of
    another shape), and the op must then be fed `prepack.pack(value, spec)` instead of the
    value (the splice does).

    The result's report (`PassResult.report()`): `optimizer` ('poly', or 'none' with a
    `diagnostic`), `target` (the vector ISA's name), `statements`,
    `calls`, `tiled` (contractions tiled around microkernels, with their tile sizes, the
    reduction loops one kernel call runs, whether it is a depthwise kernel and whether
    border rows run in kernels with fewer taps),
    `refused` (tilings the dependence check rejected), `fused` (pointwise chains run as one
    loop nest, with the temporaries contracted to scalars), `parallel_loops`, `simd_loops`,
    `kernel_calls`, `packed` (kernels that copy their weight panel contiguous per column
    tile), `prepacked` (constant inputs read in panel layout: input -> panel width),
    `workspace_bytes` (the re-planned workspace the new C needs: the caller must
    allocate that many bytes) and `seconds`. Each `fused` entry also says whether the
    group's epilogue runs in its kernels' registers (`epilogue_in_registers`). `bands`:
    consecutive groups fused row by row (`band.py`), with the tensor between them
    `contracted_to_row` and the number of outer time dimensions (`loops`) they share, or
    attention's three groups run block by block of `block_rows` query rows (`rowblock.py`);
    `recomputed_window`: a tensor its producer recomputes, for each band row, into a buffer
    of the rows that row reads (a halo band, `band.fuse_halo`), but the `carried` rows a
    thread's previous band row computed, which move to the buffer's top. `winograd`: the
    stride-1 convolutions `winograd.plan` accepts run as Winograd (not bit-identical to the
    textbook C; off: every conv keeps its direct kernels), listed in `winograd` (node,
    algorithm, tiles, channels, scratch bytes).
    """
    from .target import resolve

    return _optimize(source, entry, tile, fuse, constants, winograd, resolve(target))


def optimize_source(source: str, entry: str, tile: bool = True, fuse: bool = True,
                    constants: frozenset[str] = frozenset(),
                    winograd: bool = True, target=None) -> tuple[str, dict]:
    """`optimize`, as (new source, its JSON report)."""
    result = optimize(source, entry, tile, fuse, constants, winograd, target)
    return result.source, result.report()


def _optimize(source, entry, tile, fuse, constants, winograd, target) -> PassResult:
    import time

    import islpy as isl

    from ..cgen.cformat import format_c
    from .lower import lower
    from .plan import make_plan

    t0 = time.perf_counter()

    def declined(why: str) -> PassResult:
        return PassResult(source, "none", round(time.perf_counter() - t0, 3), why)

    try:
        raised = raise_subgraph(source, entry)
    except NotRaisable as e:
        return declined(str(e))
    try:
        # Contractions in TensorFlow's k slices as one statement each where kernels
        # compute them whole; where they do not, the textbook slices as they are.
        scop = fold_k_slices(raised)
        try:
            deps = compute_dependences(scop)
            schedules = _schedule(scop, deps, tile, fuse, target, frozenset(constants))
        except UnslicedStatement:
            scop = raised
            deps = compute_dependences(scop)
            schedules = _schedule(scop, deps, tile, fuse, target, frozenset(constants))
        plan = make_plan(scop, schedules, target, frozenset(constants), winograd)
        new, stats = lower(scop, deps, plan, source.split("#include", 1)[0], target)
    except NotRaisable as e:
        return declined(str(e))
    except (isl.Error, ValueError, KeyError) as e:
        # A scheduling or lowering failure must never cost the user the subgraph: keep the
        # textbook C, which is correct, and say why.
        return declined(f"polyhedral pass failed ({type(e).__name__}: {e})")
    return _result(scop, plan, stats, format_c(new), round(time.perf_counter() - t0, 3),
                   target.name)


def _schedule(scop: Scop, deps: Dependences, tile: bool, fuse: bool, target,
              constants: frozenset[str] = frozenset()) -> list:
    """The scheduled `Group`s, in program order: each call's (tiled) schedule, pointwise
    chains fused into their producers' epilogues, then consecutive groups fused into
    row bands."""
    import islpy as isl

    from .band import fuse_bands, fuse_halos
    from .rowblock import fuse_blocks
    from .fuse import (chain_time, find_chains, fuse_block_epilogue, fuse_epilogue,
                       fuse_reduction_epilogue)
    from .groups import CallSchedule, Group, pad_time
    from .schedule import schedule_call

    depth = max((s.schedule.dim(isl.dim_type.out) for s in scop.statements), default=1)
    by_call: dict[int, list] = {c.index: [] for c in scop.calls}
    for s in scop.statements:
        by_call[s.call].append(s)
    chains = find_chains(scop, deps, min_len=1) if fuse else []
    in_chain = {c: ch for ch in chains for c in ch.calls}
    schedules = []
    for c, stmts in by_call.items():
        if c in in_chain:
            ch = in_chain[c]
            if c != ch.calls[0]:
                continue
            prev = schedules[-1] if schedules else None
            if prev is not None and prev.call == c - 1:
                group = (fuse_epilogue if prev.kernels else fuse_reduction_epilogue)(
                    scop, deps, prev, ch, depth, target.tuning)
                if group is None and not prev.kernels:
                    group = fuse_block_epilogue(scop, deps, prev, ch, depth)
                if group is not None:
                    schedules[-1] = group
                    continue
            if len(ch.calls) > 1:
                times = {n: pad_time(m, depth) for n, m in chain_time(ch, depth).items()}
                head = ch.statements[0].name
                schedules.append(CallSchedule(c, ch.statements, times,
                                              {head: times[head]}, chain=ch))
                continue
        if stmts:
            schedules.append(schedule_call(scop, c, stmts, deps, depth, target, tile=tile))
    if fuse:
        schedules = fuse_halos(scop, deps, fuse_bands(scop, deps, schedules, target.tuning),
                               target.tuning)
        schedules = fuse_blocks(scop, deps, schedules, target.tuning, target.l2_bytes,
                                constants)
    return [Group.of(g) for g in schedules]


def _result(scop: Scop, plan, stats, source: str, seconds: float, target: str) -> PassResult:
    """The pass's result for the lowered program: what was tiled, fused and planned."""
    schedules = plan.groups
    kernels = [k for cs in schedules for k in cs.kernels]
    bands = [g for g in schedules if g.is_band]
    groups = [p for cs in schedules for p in cs.parts]
    return PassResult(
        source, "poly", seconds, target=target, workspace_bytes=plan.workspace_bytes,
        prepacked=plan.prepacked, statements=len(scop.statements), calls=len(scop.calls),
        tiled=tuple({"statement": k.statement, "node": scop.statement(k.statement).node,
                     "tile": [k.rb, k.width], "loops": [k.rows_text, k.v],
                     "reduction": [x for x in (k.kin3, k.kin, k.k2, k.k) if x],
                     "depthwise": k.vec_a, "border_chunks": bool(k.ranged),
                     "sliding_row": bool(k.slide), "chosen_by": k.chosen_by,
                     **({"k_block": k.kb} if k.kb else {}),
                     **({"key": k.key, "choice": k.choice.label} if k.key else {}),
                     "order": "column tiles outermost" if k.tile_outer else
                     "column tiles inside row chunks" if k.chunk_outer else "rows outermost"}
                    for k in kernels),
        refused=tuple(r for cs in schedules for r in cs.refused),
        fused=tuple({"nodes": [scop.calls[c].node for c in sorted({cs.call, *cs.chain.calls})],
                     "contracted": cs.chain.contracted + sorted(cs.rows),
                     "epilogue_in_registers": cs.call in stats.register_epilogues}
                    for cs in groups if cs.chain),
        bands=tuple({"nodes": [scop.calls[p.call].node for p in g.parts],
                     "contracted_to_row": sorted(set(g.rows) - set(g.halo)), "loops": g.m,
                     **({"block_rows": g.block_rows, "contracted_to_block": sorted(g.blocked)}
                        if g.block_rows else {}),
                     "recomputed_window": {y: {"stride": s, "first": lo, "rows": kh,
                                               "carried": kh - s if y in stats.carried else 0,
                                               "buffer_rows": stats.carried.get(y, kh)}
                                           for y, (s, lo, kh) in g.halo.items()}}
                    for g in bands),
        parallel_loops=stats.parallel_loops, simd_loops=stats.simd_loops,
        kernel_calls=stats.kernel_calls, packed=stats.packed,
        prefetched=tuple({"node": scop.statement(k.statement).node, "weight": k.prefetch_of,
                          "lines_per_call": k.prefetch} for k in kernels if k.prefetch),
        panel_prefetched=tuple(scop.statement(k.statement).node for k in kernels
                               if k.panel_prefetch),
        winograd=tuple({"node": wp.node, "algorithm": wp.name,
                        "output": [wp.oh, wp.ow], "channels": [wp.c, wp.k],
                        "tiles": [wp.th, wp.tw], "scratch_bytes": wp.scratch_bytes,
                        "weights": "fed transformed" if wp.u_given else "transformed per call",
                        "fused_chain": [s.node for s in wp.chain]}
                       for wp in plan.winograd.values()))
