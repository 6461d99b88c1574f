"""The C of a Winograd group (`winograd.Plan`, decided in `winograd.py`): the helpers
(`helpers`: the register-tiled GEMM copies and `PRELUDE`) and the group's function
(`source`): weight transform into U unless U is fed, input transform, the E contractions
per tile row and 64-channel panel, then the output transform and the fused chain on
registers. The transforms are unrolled from their matrices (`_separable`): zeros dropped,
+-1 as plain sums. (The generated C still names rstf/poly/winograd.py: it is kept
byte-identical.)
"""
from __future__ import annotations

from fractions import Fraction

from .cprint import dynamic_schedule
from .winograd import RB, Plan


PRELUDE = f"""\
/* Winograd convolutions (rstf/poly/winograd.py). */
#define RSTF_WG_RB {RB}
"""


def _gemm(width: int, n: int) -> str:
    """acc[r][0..nv) += sum_c a[r*sar + c] * b[c*width + 0..width) for r < m (m <= 6), in
    vectors of n floats."""
    nv = width // n
    loads = " ".join(f"const rstf_v{n} b{j} = *(const rstf_v{n} *)(b + c * {width} + {j * n});"
                     for j in range(nv))
    fmas = " ".join(f"acc[r][{j}] = rstf_fma{n}(s, b{j}, acc[r][{j}]);" for j in range(nv))
    # One copy per tile count: a constant trip count keeps the accumulators in registers
    # for a row's last, partial register tile too (a 9-tile row: 6 + 3).
    cases = "\n".join(f"""\
    case {m}:
        for (int c = 0; c < n; ++c) {{
            {loads}
            for (int r = 0; r < {m}; ++r) {{
                const rstf_v{n} s = rstf_splat{n}(a[r * sar + c]);
                {fmas}
            }}
        }}
        break;""" for m in range(RB, 0, -1))
    return f"""\
/* Tiles r < m (m <= 6) of one {width}-channel panel: acc[r] = sum over c < n of a[r * sar + c]
   * b[c][0..{width}), the m x {nv} accumulators in registers. */
static inline void rstf_wg_gemm{width}(int m, int n, const float *restrict a, long sar,
                                      const float *restrict b, rstf_v{n} acc[RSTF_WG_RB][{nv}])
{{
    for (int r = 0; r < RSTF_WG_RB; ++r)
        for (int j = 0; j < {nv}; ++j) acc[r][j] = rstf_splat{n}(0.0f);
    switch (m) {{
{cases}
    }}
}}
"""


def helpers(widths: set[int], vl: int) -> str:
    """The shared C: one contraction kernel per panel width in use, in vectors of `vl`
    floats."""
    return PRELUDE + "".join(_gemm(wd, vl) for wd in sorted(widths))


def _lit(f: Fraction) -> str:
    """A C float literal of f (exact for the transforms' dyadic fractions)."""
    v = float(f)
    return f"{v:.1f}f" if v == int(v) else f"{v:.9g}f"


def _combo(row, terms: list[str], n: int) -> str:
    """sum_k row[k] * terms[k] as C: zeros left out, +-1 as plain sums and differences
    (all zeros: a zero vector of n floats)."""
    out = ""
    for c, t in zip(row, terms):
        c = Fraction(c)
        if c == 0:
            continue
        mag = t if abs(c) == 1 else f"{_lit(abs(c))} * {t}"
        out += (f" - {mag}" if c < 0 else f" + {mag}") if out else (f"-{mag}" if c < 0 else mag)
    return out or f"rstf_splat{n}(0.0f)"


def _separable(rows, cols, src: str, tmp: str, dst, n: int) -> list[str]:
    """C statements for dst(i, j) = sum rows[i][a] * src[a][b] * cols[j][b]: the rows first,
    into tmp[i][b], then the columns. `dst(i, j)` is the lvalue's text; vectors of n
    floats."""
    nr, nc = len(rows[0]), len(cols[0])
    out = [f"{tmp}[{i}][{b}] = {_combo(rows[i], [f'{src}[{a}][{b}]' for a in range(nr)], n)};"
           for i in range(len(rows)) for b in range(nc)]
    out += [f"{dst(i, j)} = {_combo(cols[j], [f'{tmp}[{i}][{b}]' for b in range(nc)], n)};"
            for i in range(len(rows)) for j in range(len(cols))]
    return out


def source(p: Plan, fname: str, params: list[str]) -> str:
    """The group's scheduled function `fname`: `params` are its array parameters (the
    group's buffers as `lower` declares them) and `float *restrict rstf_wg` its scratch
    (p.scratch_bytes, 64-byte aligned)."""
    C, K, TH, TW, E = p.c, p.k, p.th, p.tw, p.e
    lines = [
        f"/* {p.node}: {p.kh}x{p.kw} stride-1 convolution as Winograd {p.name} (winograd.py): "
        f"{TH}x{TW} tiles of {p.rows.m}x{p.cols.m} outputs, {E} contractions of "
        f"[tiles x {C}] x [{C} x {K}]"
        + (", then the fused chain " + ", ".join(s.function for s in p.chain) if p.chain else "")
        + ". Not bit-identical to the textbook C: 1e-6 to 6e-6 of the largest output. */",
        '__attribute__((optimize("fp-contract=off")))',
        f"static void {fname}({', '.join(params + ['float *restrict rstf_wg'])})",
        "{",
        f"    const float *restrict x = (const float *){p.x};",
    ]
    if p.u_given:
        lines += [f"    const float *restrict U = {p.w};  /* U[panel][{E}][{C}][panel width], "
                  f"fed to the op (prepack spec \"{p.spec}\") */",
                  f"    float *restrict V = rstf_wg;  /* V[tile row][{E}][{TW}][{C}] */"]
    else:
        lines += [f"    const float *restrict w = (const float *){p.w};",
                  f"    float *restrict U = rstf_wg;  /* U[panel][{E}][{C}][panel width] */",
                  f"    float *restrict V = rstf_wg + {p.u_floats};  "
                  f"/* V[tile row][{E}][{TW}][{C}] */"]
        lines += _weight_transform(p)
    # A chunk: a row of tiles (input transform), a tile row's panels, a tile row.
    if p.whole_v:
        lines += [f"    #pragma omp parallel for collapse(2) {dynamic_schedule(TW)}",
                  f"    for (int th = 0; th < {TH}; ++th)",
                  f"        for (int tw = 0; tw < {TW}; ++tw)",
                  "            rstf_wg_in_%d(x, V + (long)th * %d, th, tw);" % (p.call, E * TW * C),
                  f"    #pragma omp parallel for collapse(2) {dynamic_schedule(len(p.panels))}",
                  f"    for (int th = 0; th < {TH}; ++th)",
                  f"        for (int p = 0; p < {len(p.panels)}; ++p)",
                  f"            rstf_wg_row_{p.call}(V + (long)th * {E * TW * C}, U, th, p"
                  f"{_operand_args(p)});"]
    else:
        lines += [f"    #pragma omp parallel for {dynamic_schedule(1)}",
                  f"    for (int th = 0; th < {TH}; ++th) {{",
                  f"        float *restrict v = V + (long)th * {E * TW * C};",
                  f"        for (int tw = 0; tw < {TW}; ++tw) rstf_wg_in_{p.call}(x, v, th, tw);",
                  f"        for (int p = 0; p < {len(p.panels)}; ++p)",
                  f"            rstf_wg_row_{p.call}(v, U, th, p{_operand_args(p)});",
                  "    }"]
    lines.append("}")
    return "\n".join(_input_transform(p) + [""] + _tile_row(p) + [""] + lines) + "\n"


def _operand_args(p: Plan) -> str:
    return "".join(f", (float *){o.array}" for o in p.operands) if p.chain \
        else f", (float *){p.y}"


def _operand_params(p: Plan) -> str:
    if not p.chain:
        return ", float *restrict y"
    return "".join(f", {'' if o.write else 'const '}float *restrict {o.array}"
                   for o in p.operands)


def _matrix(name: str, m) -> str:
    return f"{name} = [" + ", ".join("[" + ",".join(str(Fraction(x)) for x in row) + "]"
                                     for row in m) + "]"


def _weight_transform(p: Plan) -> list[str]:
    """U = G_h g G_w^T for every (input channel, output vector), into the panel layout."""
    C, K, E, ah, aw, n, P = p.c, p.k, p.e, p.rows.alpha, p.cols.alpha, p.vl, p.panel
    body = _separable(p.rows.G, p.cols.G, "g", "t", lambda i, j: f"e[{i * aw + j}]", n)
    return [
        f"    /* U = G g G^T, {_matrix('G_h', p.rows.G)}, {_matrix('G_w', p.cols.G)} */",
        "    #pragma omp parallel for collapse(2)",
        f"    for (int c = 0; c < {C}; ++c)",
        f"        for (int kv = 0; kv < {K // n}; ++kv) {{",
        f"            rstf_v{n} g[{p.kh}][{p.kw}], t[{ah}][{p.kw}], e[{E}];",
        f"            for (int i = 0; i < {p.kh}; ++i)",
        f"                for (int j = 0; j < {p.kw}; ++j)",
        f"                    g[i][j] = *(const rstf_v{n} *)(w + ((long)(i * {p.kw} + j) * {C} + c)"
        f" * {K} + kv * {n});",
    ] + ["            " + s for s in body] + [
        f"            const int p0 = kv * {n} / {P} * {P};  /* the panel's first channel */",
        f"            const int pw = rstf_min({P}, {K} - p0), col = kv * {n} - p0;",
        f"            float *restrict u = U + (long)p0 * {E} * {C};",
        f"            for (int q = 0; q < {E}; ++q)",
        f"                *(rstf_v{n} *)(u + ((long)q * {C} + c) * pw + col) = e[q];",
        "        }",
    ]


def _input_transform(p: Plan) -> list[str]:
    """rstf_wg_in_<call>(x, v, th, tw): V[e][tw][0..C) of the alpha_h x alpha_w input tile
    of output tile (th, tw): B_h^T d B_w. Padding is zeros."""
    C, TW, ah, aw, n = p.c, p.tw, p.rows.alpha, p.cols.alpha, p.vl
    body = _separable(p.rows.BT, p.cols.BT, "d", "t",
                      lambda i, j: f"*(rstf_v{n} *)(v + ((long){i * aw + j} * {TW} + tw) * {C}"
                                   " + cv)", n)
    return [
        f"/* {p.node}: V = B^T d B of the {ah}x{aw} input tile of output tile (th, tw), every "
        f"channel; {_matrix('B_h^T', p.rows.BT)}, {_matrix('B_w^T', p.cols.BT)}. */",
        f"static inline void rstf_wg_in_{p.call}(const float *restrict x, float *restrict v, "
        "int th, int tw)",
        "{",
        f"    const int r0 = {p.rows.m} * th - {p.ph}, s0 = {p.cols.m} * tw - {p.pw};",
        f"    for (int cv = 0; cv < {C}; cv += {n}) {{",
        f"        rstf_v{n} d[{ah}][{aw}], t[{ah}][{aw}];",
        f"        for (int i = 0; i < {ah}; ++i)",
        f"            for (int j = 0; j < {aw}; ++j) {{",
        "                const int r = r0 + i, s = s0 + j;",
        f"                d[i][j] = (r >= 0 && r < {p.ih} && s >= 0 && s < {p.iw})",
        f"                    ? *(const rstf_v{n} *)(x + ((long)r * {p.iw} + s) * {C} + cv)",
        f"                    : rstf_splat{n}(0.0f);",
        "            }",
    ] + ["        " + s for s in body] + [
        "    }",
        "}",
    ]


def _tile_row(p: Plan) -> list[str]:
    """rstf_wg_row_<call>(v, U, th, panel, operands...): the E contractions of tile row th
    for one panel, 6 tiles at a time, then Y = A_h^T M A_w and the chain (or the store) for
    each output pixel."""
    C, TW, E, mh, mw = p.c, p.tw, p.e, p.rows.m, p.cols.m
    ah, aw = p.rows.alpha, p.cols.alpha
    out = [f"/* {p.node}: tile row th, output-channel panel `panel`: contractions, output "
           f"transform ({_matrix('A_h^T', p.rows.AT)}, {_matrix('A_w^T', p.cols.AT)}), "
           "epilogue. */",
           '__attribute__((optimize("fp-contract=off")))',
           f"static void rstf_wg_row_{p.call}(const float *restrict v, const float *restrict U, "
           f"int th, int panel{_operand_params(p)})",
           "{",
           "    switch (panel) {"]
    body = _separable(p.rows.AT, p.cols.AT, "mt", "s", lambda i, j: f"o[{i * mw + j}][j]",
                      p.vl)
    for i, (p0, wd) in enumerate(p.panels):
        n = p.vl
        nv = wd // n
        out += [f"    case {i}:",
                f"        for (int tw0 = 0; tw0 < {TW}; tw0 += RSTF_WG_RB) {{",
                f"            const int m = rstf_min(RSTF_WG_RB, {TW} - tw0);",
                f"            rstf_v{n} M[{E}][RSTF_WG_RB][{nv}];",
                f"            for (int e = 0; e < {E}; ++e)",
                f"                rstf_wg_gemm{wd}(m, {C}, v + ((long)e * {TW} + tw0) * {C}, {C}, "
                f"U + (long){p0 * E * C} + (long)e * {C * wd}, M[e]);",
                "            for (int r = 0; r < m; ++r) {",
                f"                rstf_v{n} o[{mh * mw}][{nv}];",
                f"                for (int j = 0; j < {nv}; ++j) {{",
                f"                    rstf_v{n} s[{mh}][{aw}];",
                f"                    rstf_v{n} mt[{ah}][{aw}];  /* this tile's M, vector j */",
                f"                    for (int a = 0; a < {ah}; ++a)",
                f"                        for (int b = 0; b < {aw}; ++b) "
                f"mt[a][b] = M[a * {aw} + b][r][j];",
                ]
        out += ["                    " + s for s in body]
        out += ["                }",
                f"                for (int q = 0; q < {mh * mw}; ++q) {{",
                f"                    const int oh = {mh} * th + q / {mw}, "
                f"ow = {mw} * (tw0 + r) + q % {mw};",
                f"                    if (oh >= {p.oh} || ow >= {p.ow}) continue;",
                ]
        out += ["                    " + ln for ln in _pixel(p, p0, wd)]
        out += ["                }",
                "            }",
                "        }",
                "        break;"]
    out += ["    }", "}"]
    return out


def _pixel(p: Plan, p0: int, wd: int) -> list[str]:
    """Output pixel (oh, ow), channels p0 .. p0 + wd, from o[q][*]: the chain, or the store."""
    n = p.vl
    nv = wd // n
    if not p.chain:
        return ["{",
                f"    float *restrict y_p = y + ((long)oh * {p.ow} + ow) * {p.k} + {p0};"]\
            + [f"    *(rstf_v{n} *)(y_p + {j * n}) = o[q][{j}];" for j in range(nv)] + ["}"]
    out = ["{", "    const int r = 0;  /* the epilogue's row: this pixel's pointers */"]
    out += [f"    rstf_v{n} acc{j}[1] = {{o[q][{j}]}};" for j in range(nv)]
    for o in p.operands:
        off = " + ".join(t for t in (f"{o.h} * oh" if o.h else "", f"{o.w} * ow" if o.w else "",
                                       f"{p0 * o.ch + o.const}") if t)
        out.append(f"    {'' if o.write else 'const '}float *restrict {o.array}_p = "
                   f"{o.array} + (long)({off});")
    out += ["    " + ln for ln in p.epi.lines[wd]]
    out += ["    (void)r;", "}"]
    return out
