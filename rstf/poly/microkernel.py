"""Register-blocked microkernels for contractions (PolyScientist's split: a microkernel for
the innermost loops, polyhedral loops around it; PolyScientist, docs/design.md).

A kernel `rstf_mk_<RB>x<NV>` computes, for a tile of RB rows and VB = VLEN*NV contiguous
columns, `y[r][0:VB] += sum_k a[r, k] * b[k][0:VB]` over K reduction steps, keeping the
RB x NV accumulators in vector registers for the whole reduction (the textbook loop nest
reloads and stores them on every step). Rows and reduction steps are at arbitrary element
strides, so one kernel serves Conv2D (rows = output columns, k = input channels, any
stride or dilation) and MatMul alike. The accumulation order of every output element is
the same as the textbook nest's (k ascending, one fused multiply-add a step, or a product
then a sum where the statement is `y += a * b`: a depthwise convolution, rounded as
TensorFlow's kernel rounds it), so results are bit-identical to it.

Two variants share the code (`Shape`): a *depthwise* kernel (`vec_a`) reads its row operand
as vectors too, `y[r][0:VB] += a[r*sar + k*sak + 0:VB] * b[k*sbk + 0:VB]` (a depthwise
convolution: channels are both operands' columns, the weight vector of a tap is reused by
every row of the tile); a *two-level* kernel (`two`) runs a second reduction loop around k,
`for k2 < K2` with its own strides (a 3x3 convolution's kh, whose rows are not contiguous
with kw's), so a short reduction like the first conv's 27 or a depthwise conv's 9 taps
runs whole in one call; a *three-level* kernel (`three`) runs a third loop K3 around
k2 (a 3x3 conv over few channels: kh around kw around ic, its whole reduction in one
call). The depthwise kernel loads each row's input vector once per tap; a
sliding-window variant that loads each input column once and feeds the up to three rows
whose taps read it (0.61 loads per FMA instead of 1.125, bit-identical) gained nothing
(docs/tuning-constants.md, depthwise loads): these kernels are not bound by their loads,
so the simple form stays. What
does pay on the small maps is a *sliding row* (`Shape.slide`, contraction.sliding_row): one
call for a whole output row of at most 16, its border taps skipped inside, instead of a
chunk of rows plus a one-row kernel at each border.

GCC vector extensions rather than intrinsics: the code stays portable C (any -march
compiles it; AVX-512 makes one vector one register). The one exception is the step itself,
`rstf_fma<N>`: a vector fused multiply-add, the intrinsic where the target has one, because
the compiler's own contraction of `acc += a * b` is not guaranteed (with contraction off,
as in every rstf build, it never happens) and the textbook C rounds once a step (fmaf).
"""
from __future__ import annotations

import dataclasses

from . import abi
from .kloop import blocked_loop
from .target import Target


# Where the target has a fused multiply-add of a vector type's width, its intrinsic: the
# macro that says so, the intrinsic, its vector type.
_FMA_INTRINSICS = {16: ("__AVX512F__", "_mm512_fmadd_ps", "__m512"),
                   8: ("__FMA__", "_mm256_fmadd_ps", "__m256"),
                   4: ("__FMA__", "_mm_fmadd_ps", "__m128")}


def guarded(macro: str | None, intrinsic: list[str], portable: list[str]) -> list[str]:
    """C lines: the `intrinsic` definitions where the target defines `macro` (x86's
    <immintrin.h>), else the `portable` ones; `portable` alone when there is no macro."""
    if macro is None:
        return portable
    return [f"#if defined({macro})", "#include <immintrin.h>", *intrinsic, "#else",
            *portable, "#endif"]


def prelude(t: Target) -> str:
    """The microkernels' vector types, broadcasts and fused multiply-adds for target `t`:
    `rstf_v<N>` of one register's N floats and of N/2 (a tile's last half vector)."""
    out = [f"/* Microkernel vector types ({t.name}): {t.vlen} floats (one register) and "
           f"{t.half} (a tile's last\n   half vector); unaligned, may alias. */"]
    for n in (t.vlen, t.half):
        out.append(f"typedef float rstf_v{n} __attribute__((vector_size({4 * n}), aligned(4), "
                   "may_alias));")
    out.append("/* A float in every lane (spelled out: gcc makes one broadcast of it, not of "
               "a loop). */")
    for n in (t.vlen, t.half):
        out.append(f"static inline rstf_v{n} rstf_splat{n}(float x) "
                   f"{{ return (rstf_v{n}){{{', '.join(['x'] * n)}}}; }}")
    out.append("/* a * b + c rounded once in every lane: the templates' fmaf step, as vectors. "
               "The\n   intrinsics where the target has them; elsewhere lane by lane (exact, "
               "and slow). */")
    out.append("/* The first m lanes loaded (the rest zero) and stored: a remainder tile's last "
               "vector,\n   whose other lanes are past the columns. Masked lanes are never "
               "touched, so they\n   may lie past the array's end. */")
    for n in (t.vlen, t.half):
        out += _masked(n)
    for n in (t.vlen, t.half):
        lane = (f"static inline rstf_v{n} rstf_fma{n}(rstf_v{n} a, rstf_v{n} b, rstf_v{n} c)\n"
                f"{{ for (int i = 0; i < {n}; ++i) c[i] = __builtin_fmaf(a[i], b[i], c[i]); "
                "return c; }")
        macro, fn, mt = _FMA_INTRINSICS.get(n, (None, "", ""))
        out += guarded(macro, [f"#define rstf_fma{n}(a, b, c) ((rstf_v{n}){fn}(({mt})(a), "
                               f"({mt})(b), ({mt})(c)))"], [lane])
    return "\n".join(out) + "\n"


# Where the target has masked vector loads and stores of a width: the macros that say so, and
# the load and store of the first m lanes of p (intrinsics that never touch the others).
_MASKED = {
    16: ("defined(__AVX512F__)",
         "(rstf_v16)_mm512_maskz_loadu_ps((__mmask16)((1u << m) - 1), p)",
         "_mm512_mask_storeu_ps(p, (__mmask16)((1u << m) - 1), (__m512)v)"),
    8: ("defined(__AVX512F__) && defined(__AVX512VL__)",
        "(rstf_v8)_mm256_maskz_loadu_ps((__mmask8)((1u << m) - 1), p)",
        "_mm256_mask_storeu_ps(p, (__mmask8)((1u << m) - 1), (__m256)v)"),
}


def _masked(n: int) -> list[str]:
    """rstf_loadm<n>(p, m) and rstf_storem<n>(p, v, m): masked intrinsics where the target
    has them, else lane by lane."""
    sig_l = f"static inline rstf_v{n} rstf_loadm{n}(const float *p, int m)"
    sig_s = f"static inline void rstf_storem{n}(float *p, rstf_v{n} v, int m)"
    portable = [f"{sig_l}\n{{ rstf_v{n} v = {{0}}; for (int i = 0; i < m; ++i) v[i] = p[i]; "
                "return v; }",
                f"{sig_s}\n{{ for (int i = 0; i < m; ++i) p[i] = v[i]; }}"]
    if n not in _MASKED:
        return portable
    cond, load, store = _MASKED[n]
    return [f"#if {cond}", "#include <immintrin.h>", f"{sig_l} {{ return {load}; }}",
            f"{sig_s} {{ {store}; }}", "#else", *portable, "#endif"]


def vectors(width: int, vl: int) -> list[tuple[str, int]]:
    """The (vector type, first column) of each vector of a tile `width` columns wide, on a
    target of `vl` floats a register: whole registers, then maybe a half one (tile widths
    are multiples of the half)."""
    half = vl // 2
    assert width % half == 0 and width > 0, width
    out = [(f"rstf_v{vl}", vl * i) for i in range(width // vl)]
    return out + ([(f"rstf_v{half}", width - half)] if width % vl else [])


@dataclasses.dataclass(frozen=True, order=True)
class Shape:
    """One microkernel family: RB rows of `width` columns; `vec_a`: the row operand is read
    as vectors (depthwise); `two`: a second reduction loop K2 around k; `fused`: each step
    is one fused multiply-add (the templates' fmaf), else a product then a sum (`+=`)."""
    rb: int
    width: int
    vl: int  # floats in one vector register of the target
    vec_a: bool = False
    two: bool = False
    fused: bool = True
    # A sliding row (depthwise, stride 1): (KW, J, D), the taps, the input columns read and
    # the offset: output o, tap t reads input column j = o + t - D of `a`, skipped unless
    # 0 <= j < J. Empty: the rows' own windows, every tap in range.
    slide: tuple = ()
    # Lines of another group's weight each call prefetches, two a reduction step, from the
    # pointer `pf` its caller passes (`prefetch.plan_prefetch`); 0: none.
    pf: int = 0
    # The next column tile's weight panel prefetched while this one's computes: `npp`
    # lines from the pointer `pp` its caller passes, spread over the reduction steps
    # (`prefetch.plan_panel_prefetch`).
    pp: bool = False
    # The last vector's lanes past the tile's columns (a remainder's, `Kernel.pad`): its
    # loads of b and y and its stores of y are masked to the other lanes.
    pad: int = 0
    # Reduction steps a trip of the k loop runs (`Target.k_steps`), unrolled, before a
    # rolled loop over the rest: 1, one step a trip.
    steps: int = 1
    # k in slices of kc steps (`Kernel.kc`), then in slices of the kc_tail lengths: the
    # accumulators restart from zero at every slice and the slices' sums are added in turn,
    # the last in registers; 0: one chain.
    kc: int = 0
    kc_tail: tuple = ()
    # A third reduction loop K3 around k2 (`two` too), with its own strides: a 3x3 conv's
    # kh around kw x ic, so that one call runs an output's whole reduction.
    three: bool = False

    @property
    def tag(self) -> str:
        slide = "s{}j{}o{}".format(*self.slide) if self.slide else ""
        return ("d" if self.vec_a else "") + ("3" if self.three else "2" if self.two else "") + \
            ("" if self.fused else "u") + slide + (f"p{self.pf}" if self.pf else "") + \
            ("q" if self.pp else "") + (f"m{self.pad}" if self.pad else "") + \
            (f"k{self.steps}" if self.steps > 1 else "") + (f"c{self.kc}" if self.kc else "") + \
            "".join(f"t{n}" for n in self.kc_tail)

    def rows(self, rb: int) -> "Shape":
        return dataclasses.replace(self, rb=rb)


def lanes(vt: str) -> int:
    """The floats of vector type `vt` (`rstf_v<N>`)."""
    return int(vt.removeprefix("rstf_v"))


def splat(vt: str) -> str:
    """The broadcast of a float to vector type `vt` (`prelude`)."""
    return f"rstf_splat{lanes(vt)}"


def _fma(vt: str) -> str:
    return f"rstf_fma{lanes(vt)}"


def kernel_name(shape: Shape) -> str:
    return f"rstf_mk{shape.tag}_{shape.rb}x{shape.width}"


def valid_lanes(width: int, vl: int, pad: int, v: int) -> int:
    """The lanes of vector v of a tile `width` columns wide that hold columns, where some
    do not (a remainder's last vector, `pad` lanes past its columns); 0: all of them."""
    vecs = vectors(width, vl)
    return lanes(vecs[v][0]) - pad if pad and v == len(vecs) - 1 else 0


def vector_load(t: str, ptr: str, valid: int = 0) -> str:
    """A vector of type t from ptr: its first `valid` lanes only (masked), or all (0)."""
    return f"rstf_loadm{lanes(t)}({ptr}, {valid})" if valid else f"*(const {t} *)({ptr})"


def vector_store(t: str, ptr: str, value: str, valid: int = 0) -> str:
    """`vector_load`'s store, a C statement."""
    return (f"rstf_storem{lanes(t)}({ptr}, {value}, {valid});" if valid
            else f"*({t} *)({ptr}) = {value};")


def _load(shape: Shape, v: int, t: str, ptr: str) -> str:
    return vector_load(t, ptr, valid_lanes(shape.width, shape.vl, shape.pad, v))


def _store(shape: Shape, v: int, t: str, ptr: str, value: str) -> str:
    return vector_store(t, ptr, value, valid_lanes(shape.width, shape.vl, shape.pad, v))


def kernel_source(shape: Shape) -> str:
    """The C of one microkernel (needs PRELUDE; `_linkage` says whether inline): RB rows
    of `width` columns, unrolled over its vectors (a half vector when the width is not a
    whole number of them)."""
    rb, width = shape.rb, shape.width
    vecs = vectors(width, shape.vl)
    store = [_store(shape, v, t, f"y + r * syr + {c}", f"acc{v}[r]")
             for v, (t, c) in enumerate(vecs)]
    a = f"a[r*sar + k*sak + 0:{width}]" if shape.vec_a else "a[r*sar + k*sak]"
    k2 = "sum over k2 < K2 (a += sak2, b += sbk2) of " if shape.two else ""
    if shape.three:
        k2 = "sum over k3 < K3 (a += sak3, b += sbk3) of " + k2
    return kernel_text(
        kernel_name(shape), shape, abi.store_kernel(shape), store,
        f"y[r][0:{width}] += {k2}sum over k of {a} * b[k*sbk + 0:{width}], r < {rb}:\n"
        f"   {rb}x{len(vecs)} accumulators stay in vector registers for the whole reduction.")


def kernel_text(name: str, shape: Shape, params: abi.Abi, finish: list[str], comment: str,
                zero: bool = False, contract_off: bool = False) -> str:
    """A microkernel's C: the RB x NV accumulators loaded from y (or, `zero`, set to zero),
    the reduction over k (and k2), then the `finish` lines for each row r (the stores;
    `params`: the kernel's whole parameter list, `abi.reduction` and what they use).
    `contract_off`: no FMA contraction in the kernel (its `finish` lines are other ops,
    each keeping its own rounding)."""
    rb, width = shape.rb, shape.width
    vecs = vectors(width, shape.vl)
    decl = "\n".join(f"    {t} acc{v}[{rb}];" for v, (t, _) in enumerate(vecs))
    assert not (shape.pad and (shape.vec_a or shape.slide)), shape
    init = "\n".join(f"        acc{v}[r] = ({t}){{0}};" if zero else
                      f"        acc{v}[r] = {_load(shape, v, t, f'y + r * syr + {c}')};"
                      for v, (t, c) in enumerate(vecs))
    def bload(kv: str) -> str:
        return "\n".join(f"        const {t} b{v} = {_load(shape, v, t, f'b + {kv} * sbk + {c}')};"
                         for v, (t, c) in enumerate(vecs))
    def fma(v: int, t: str, av: str) -> str:
        if not shape.fused:
            return f"            acc{v}[r] += {av} * b{v};"
        return f"            acc{v}[r] = {_fma(t)}({av}, b{v}, acc{v}[r]);"
    def step(kv: str) -> str:
        """One reduction step at k = kv: the loads of b, then each row's FMAs."""
        if shape.vec_a:  # each row's own vector of a: one load per accumulator
            fmas = "\n".join(fma(v, t, f"*(const {t} *)(a + r * sar + {kv} * sak + {c})")
                             for v, (t, c) in enumerate(vecs))
            aload = ""
        else:
            fmas = "\n".join(fma(v, t, f"{splat(t)}(av)" if shape.fused else "av")
                             for v, (t, _) in enumerate(vecs))
            aload = f"            const float av = a[r * sar + {kv} * sak];\n"
        return f"{bload(kv)}\n        for (int r = 0; r < {rb}; ++r) {{\n{aload}{fmas}\n        }}"
    body = "\n".join(f"        {ln}" for ln in finish)
    if shape.slide:
        loop = _slide_loop(shape)
    else:
        # A contraction's k loop stays rolled: where ipa-cp makes K a small constant (the
        # first conv's 9 = 3x3 channels), gcc unrolls it whole and hoists the loads of all
        # its steps, spilling accumulators (Conv1's 6x16 kernel: 30 stack accesses a k2
        # step). A depthwise kernel's few taps do gain from the unrolling
        # (docs/tuning-constants.md, rolled k loops).
        roll = "" if shape.vec_a else "    #pragma GCC unroll 1\n"
        # Two lines of the prefetched weight a step, spread over the FMAs: a burst of them
        # between calls waits for the miss buffers instead (measured: no gain).
        pf = (f"        if (k < {(shape.pf + 1) // 2}) {{\n"
              "            __builtin_prefetch(pf + 128L * k, 0, 2);\n"
              "            __builtin_prefetch(pf + 128L * k + 64, 0, 2);\n"
              "        }\n") if shape.pf else ""
        # The call's share of the next panel spread evenly over its K steps, at most a
        # line a step (line k * npp / K at step k; a step repeats its line where the
        # share is shorter than K): the lines ask DRAM at the pace of the FMAs instead of
        # in a burst that holds the miss buffers the panel being read needs. A share of
        # more lines than steps (a panel that few calls read: one 9-row call for a 3x3
        # map's 9 pixels) takes `pps` lines a step. Measured in
        # docs/benchmarks/2026-12-05-panel-prefetch-spread.md.
        pre = ""
        if shape.pp:
            pre = ("    const int pps = npp <= K ? 0 : (npp + K - 1) / K;\n"
                   "    const long pstep = K ? ((long)npp << 32) / K + 1 : 0;\n")
            pf += ("        if (!pps) {\n"
                   "            __builtin_prefetch(pp + 64L * ((k * pstep) >> 32), 0, 2);\n"
                   "        } else {\n"
                   "            for (int q = k * pps; q < (k + 1) * pps && q < npp; ++q)\n"
                   "                __builtin_prefetch(pp + 64L * q, 0, 2);\n"
                   "        }\n")
        loop = f"""\
{pre}{roll}    for (int k = 0; k < K; ++k) {{
{pf}{step("k")}
    }}"""
        if shape.steps > 1:
            loop = pre + blocked_loop(shape, step)
    if shape.two:
        loop = ("    for (int k2 = 0; k2 < K2; ++k2, a += sak2, b += sbk2) {\n"
                + "\n".join("    " + ln for ln in loop.splitlines()) + "\n    }")
    if shape.three:  # k2 restarts from each k3's pointers
        loop = ("    const float *const a3 = a, *const b3 = b;\n"
                "    for (int k3 = 0; k3 < K3; ++k3) {\n"
                "        a = a3 + k3 * sak3;\n        b = b3 + k3 * sbk3;\n"
                + "\n".join("    " + ln for ln in loop.splitlines()) + "\n    }")
    if shape.kc:
        loop = _sliced_loop(shape, loop, loaded=not zero)
    # A sliding row indexes its accumulators by constants only, so they can live in
    # registers once the row loops are unrolled; left rolled, gcc zeroes them with a memset
    # of a stack array (measured: in 2 of MobileNet v2's 9 such kernels).
    unroll = f"    #pragma GCC unroll {rb}\n" if shape.slide else ""
    # No predictive commoning in a contraction kernel: where a tile's rows overlap in `a`
    # (the first conv's rows start 6 floats apart and read 21), gcc keeps the values one
    # row loads for the next rows' later steps live across trips, in the registers the
    # accumulators need, and spills those every step.
    # No loop splitting where the k loop prefetches another group's weight in its first
    # steps (`k < N`, N a constant): gcc splits the loop there, and the allocation of
    # the copy after the split, the one that runs, can leave accumulators on the stack
    # (a k-sliced 8x48 kernel stored 18 of them every step, at half its speed).
    opts = (["fp-contract=off"] if contract_off else []) + \
        ([] if shape.vec_a else ["no-predictive-commoning"]) + \
        (["no-split-loops"] if shape.pf else [])
    quoted = ", ".join(f'"{o}"' for o in opts)
    attr = f"__attribute__((optimize({quoted})))\n" if opts else ""
    return f"""\
/* {comment} */
{attr}{_linkage(shape)} void {name}({params.signature()})
{{
{decl}
{unroll}    for (int r = 0; r < {rb}; ++r) {{
{init}
    }}
{loop}
{unroll}    for (int r = 0; r < {rb}; ++r) {{
{body}
    }}
}}
"""


def _sliced_loop(shape: Shape, loop: str, loaded: bool = False) -> str:
    """`loop` (a reduction over K steps of `a` and `b`) run in slices of `shape.kc` steps,
    then in slices of the `shape.kc_tail` lengths (the kernel's K is the whole reduction),
    as TensorFlow sums a long contraction (poly/kslices.py): each slice starts its
    accumulators from zero, and the slices' sums are added in turn, `((s0 + s1) + s2) +
    ...`, in a stack copy of the tile (the registers hold the slice being summed), the
    last addition back into the accumulators for the kernel's stores or epilogue.

    Where the accumulators start at zero (a register epilogue's kernel) the first slice
    simply continues them. Where they are `loaded` from y, y holds the sum so far: zero
    (the statement's zeroing), or the slices of earlier K blocks (`Kernel.kb`: a call per
    block of whole slices); the first slice then restarts too and is added to it, so a
    call continues the running sum exactly as one call over all of k would. (For y zero
    that is the same bits: a chain started at +0 never ends at -0, and 0 + s = s.)"""
    assert not (shape.two or shape.three or shape.vec_a or shape.slide), shape
    vecs = vectors(shape.width, shape.vl)

    def each_row(stmt) -> str:
        body = "\n".join(f"            {stmt(v, t)}" for v, (t, _) in enumerate(vecs))
        return f"        for (int r = 0; r < {shape.rb}; ++r) {{\n{body}\n        }}"

    decl = "\n".join(f"    {t} sum{v}[{shape.rb}];" for v, (t, _) in enumerate(vecs))
    if loaded:  # the running sum: y as loaded
        decl += "\n" + "\n".join(ln[4:] for ln in each_row(
            lambda v, t: f"sum{v}[r] = acc{v}[r];").splitlines())
    inner = "\n".join("    " + ln for ln in loop.splitlines())
    zero = each_row(lambda v, t: f"acc{v}[r] = ({t}){{0}};")
    first = each_row(lambda v, t: f"sum{v}[r] = acc{v}[r];")
    more = each_row(lambda v, t: f"sum{v}[r] = sum{v}[r] + acc{v}[r];")
    last = each_row(lambda v, t: f"acc{v}[r] = sum{v}[r] + acc{v}[r];")
    # The next panel's lines (`Shape.pp`) spread over the whole of K: each slice
    # prefetches its share.
    pp_all = "    const char *const pp_all = pp;\n    const int npp_all = npp;\n" if shape.pp else ""
    pp = ("        const int q0 = (int)(((long)npp_all * ks + K_all - 1) / K_all);\n"
          "        const int npp = (int)(((long)npp_all * (ks + K) + K_all - 1) / K_all) - q0;\n"
          "        const char *pp = pp_all + 64L * q0;\n") if shape.pp else ""
    if shape.kc_tail:
        # the tail's slices after the uniform ones: kn, the slice's length, from a table
        tail = ", ".join(map(str, shape.kc_tail))
        head = (f"    static const int kt[{len(shape.kc_tail)}] = {{{tail}}};\n"
                f"    const int K_uni = K_all - {sum(shape.kc_tail)};\n"
                f"{pp_all}    for (int ks = 0, kn = 0, jt = 0; ks < K_all; ks += kn) {{\n"
                f"        /* k slice [ks, ks + kn): its own chain from zero, then added in turn */\n"
                f"        kn = ks < K_uni ? (K_uni - ks < {shape.kc} ? K_uni - ks : {shape.kc})"
                f" : kt[jt++];\n"
                f"        const int K = kn;\n")
        more_ahead = "ks + kn < K_all"
    else:
        head = (f"{pp_all}    for (int ks = 0; ks < K_all; ks += {shape.kc}) {{\n"
                f"        /* k slice [ks, ks + {shape.kc}): its own chain from zero, then added in turn */\n"
                f"        const int K = K_all - ks < {shape.kc} ? K_all - ks : {shape.kc};\n")
        more_ahead = f"ks + {shape.kc} < K_all"
    if loaded:  # every slice from zero, added to the running sum
        deeper = lambda text: "\n".join("    " + ln for ln in text.splitlines())
        ends = f"""{zero}
{inner}
        if ({more_ahead}) {{
{deeper(more)}
        }} else {{
{deeper(last)}
        }}"""
    else:  # the first slice continues the accumulators (zero)
        ends = f"""        if (ks) {{
{zero}
        }}
{inner}
        if ({more_ahead}) {{
            if (!ks) {{
{first}
            }} else {{
{more}
            }}
        }} else if (ks) {{
{last}
        }}"""
    return f"""\
{decl}
    const int K_all = K;
    const float *const a_all = a, *const b_all = b;
{head}        const float *restrict a = a_all + ks * sak;
        const float *restrict b = b_all + ks * sbk;
{pp}{ends}
    }}"""


def _linkage(shape: Shape) -> str:
    """How a kernel is declared: a contraction's kernel (not `vec_a`) out of line, a
    depthwise one inline.

    A contraction kernel needs nearly every vector register for its RB x NV accumulators
    (`tilemodel.fits_registers`). Inlined into a fused group's tile loop beside other statements'
    code, gcc keeps their hoisted invariants live across it and spills accumulators inside
    the reduction: MobileNet v2's 12x8 1x1-conv kernels reloaded 2-4 of them from the
    stack each step in five band groups. Out of line it has the register file to itself,
    and -O3's ipa-cp still clones it with the call sites' constant strides. A call runs a
    whole reduction (K of 16 and more), so the call costs little. Depthwise kernels run 9
    taps a call, so a call would cost more there, and they are not that tight
    (docs/tuning-constants.md, kernels out of line)."""
    return "static inline" if shape.vec_a else "__attribute__((noinline)) static"


def _slide_loop(shape: Shape) -> str:
    """The reduction of a sliding-row kernel (`Shape.slide`), unrolled: each input column
    j is loaded once and feeds every output whose window holds it, tap t of output
    o = j + D - t (taps outside the input are never visited). An output's taps run in
    ascending order (its j grows with t), as in the textbook nest, so the result is the
    same bit for bit."""
    (kw, cols, off), rb = shape.slide, shape.rb
    (vt, _), = vectors(shape.width, shape.vl)
    lines = [f"        const {vt} w{t} = *(const {vt} *)(b + {t} * sbk);" for t in range(kw)]
    for j in range(cols):
        outs = [(j + off - t, t) for t in range(kw) if 0 <= j + off - t < rb]
        if not outs:
            continue
        lines.append(f"        {{ const {vt} x = *(const {vt} *)(a + {j} * sak);")
        lines += [f"          acc0[{o}] = {_fma(vt)}(x, w{t}, acc0[{o}]);"
                  if shape.fused else f"          acc0[{o}] += x * w{t};" for o, t in outs]
        lines.append("        }")
    body = "\n".join(lines)
    return f"""\
    {{  /* K taps of row stride sar: the kernel's own KW = {kw}, J = {cols}, D = {off} */
        (void)K; (void)sar;
{body}
    }}"""


def dispatch_name(shape: Shape) -> str:
    return f"rstf_mkv{shape.tag}_{shape.rb}x{shape.width}"


def dispatch_source(shapes: list[Shape]) -> str:
    """Every kernel the tilings need: for each shape, kernels of 1..RB rows (a chunk at
    a padding border or a row remainder is shorter) and `rstf_mkv<tag>_<RB>x<width>(rows,
    ...)`, which calls the one for `rows` (a switch: full chunks take the first case)."""
    # (A sliding row always runs its whole row.)
    fewer = {sh: [] if sh.slide else range(sh.rb - 1, 0, -1) for sh in shapes}
    needed = sorted({sh.rows(r) for sh in shapes for r in (sh.rb, *fewer[sh])})
    out = [kernel_source(sh) for sh in needed]
    for sh in sorted(set(shapes)):
        args = abi.store_kernel(sh).forward()
        cases = "".join(f"    case {r}: {kernel_name(sh.rows(r))}({args}); break;\n"
                        for r in fewer[sh])
        out.append(f"""\
/* {sh.rb} rows of {sh.width} columns, or fewer at a border or a remainder. */
static void {dispatch_name(sh)}({abi.store_dispatcher(sh).signature("y", 26)})
{{
    switch (rows) {{
    case {sh.rb}: {kernel_name(sh)}({args}); break;
{cases}    }}
}}
""")
    return "\n".join(out) + "\n"
