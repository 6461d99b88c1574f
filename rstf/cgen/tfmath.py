"""TensorFlow's own float exp, sigmoid, tanh, erf, rsqrt and reciprocal, as C that the generated
code defines for itself: the same results, bit for bit, as the TensorFlow CPU kernels of Exp,
Sigmoid, Tanh, Erf, Rsqrt and Reciprocal (and Softmax's exp and reciprocal), so that a model's
activations match stock TensorFlow instead of differing from it by a few ulp at every element.

What TensorFlow computes: its kernels evaluate Eigen's vectorised functions (`pexp_float`,
`scalar_logistic_op<float>::packetOp`, `ptanh_float`, `generic_fast_erf<float>`, in
Eigen/src/Core/arch/Default/GenericPacketMathFunctions.h, functors/UnaryFunctors.h and
unsupported/Eigen/src/SpecialFunctions/SpecialFunctionsImpl.h under
`tf.sysconfig.get_include()`). The tensorflow-cpu 2.21 wheel compiles them for AVX without FMA,
so each of Eigen's multiply-adds is a multiply, rounded, then an add, rounded. The functions
below follow those algorithms step by step (constants, order of operations, clamps), with every
multiply-add written as two statements: the op library compiles as ISO C (`-std=c11`), where gcc
does not contract them into FMAs, and clang contracts only within one expression.

Checked: against TensorFlow's own ops on every one of the 2^32 float bit patterns, under the
flushed denormals TensorFlow runs with (`benchmarks/tfmath_exhaustive.py`): no difference for
any of them. The tests check a dense sweep and the special values through TensorFlow.
Where TensorFlow differs from itself: the last (size mod 8) elements of a tensor go through
Eigen's scalar path, which for exp and sigmoid calls the C library's `expf` instead (within a
few ulp of these), and for the reciprocal divides; tanh and erf use the same formula there.
rstf's elementwise ops compute those elements that way too (`LOGISTIC_TAILF`,
opgen.elementwise `_Elementwise.float_tail_expr`). Rsqrt and the reciprocal are the
processor's own estimates refined once (RSQRTF, RECIPF), so their bits are those TensorFlow
gives on the same machine.

Accuracy (Eigen's own figures; that is TensorFlow's accuracy, which these reproduce): sigmoid
within 4.5 ulp of the exact value, erf within 3 ulp for normal floats, tanh a few ulp, exp
within about 1 ulp, rsqrt about 1-2 ulp after its Newton step.

Why not `?:` for the clamps: a float ternary whose result later arithmetic reads stays a branch
in gcc (it specialises that arithmetic for the constant arm), and the loop then does not
vectorise. `rstf_blendf` selects by integer masks, which vectorises to a blend. For the same
reason `floor` is the 1.5 * 2^23 rounding sum stepped down where it rose (`floorf` is a libm call
unless -fno-trapping-math), and 2^m is built in the exponent bits.
"""
from __future__ import annotations

BLENDF = """\
/* c ? a : b on floats by integer masks, so that a loop over it vectorises
   (rstf/cgen/tfmath.py). */
static inline float rstf_blendf(int c, float a, float b)
{
    union { float f; int i; } x, y;
    const int m = -c;
    x.f = a;
    y.f = b;
    x.i = (x.i & m) | (y.i & ~m);
    return x.f;
}
"""

# m = floor(t) (t = x log2(e) + 1/2) and the bits of round(t) in `nb`; shared by exp and sigmoid.
_REDUCE = """\
    float t = x * 1.44269504088896341f;
    t = t + 0.5f;
    nb.f = t + 12582912.0f;
    const float n = nb.f - 12582912.0f;
    const int up = n > t;
    const float m = n - rstf_blendf(up, 1.0f, 0.0f);
    float r = m * -0.693359375f;
    r = r + x;
    const float u = m * 2.12194440e-4f;
    r = u + r;
    const float r2 = r * r;
"""

EXPF = """\
/* exp(x) in float as TensorFlow computes it: Eigen's pexp_float without FMA (rstf/cgen/tfmath.py):
   x = m ln2 + r, m = floor(x log2(e) + 1/2), Cephes' polynomial, 2^m in two factors. */
static inline float rstf_expf(float x0)
{
    union { float f; unsigned u; } nb, s1, s2;
    const float x = rstf_blendf(x0 > 88.723f, 88.723f, x0);
%s    float pe = r2 * 1.37449637986719608306884765625e-3f;
    pe = pe + 4.166965186595916748046875e-2f;
    float po = r2 * 8.36894474923610687255859375e-3f;
    po = po + 0.16666518151760101318359375f;
    pe = r2 * pe;
    pe = pe + 0.49999988079071044921875f;
    const float pl = r + 1.0f;
    float y = r * po;
    y = y + pe;
    y = r2 * y;
    y = y + pl;
    const unsigned k = nb.u - 0x4B400000u - (unsigned)up;
    const unsigned a = (unsigned)((int)k >> 1);
    s1.u = (a + 127u) << 23;
    s2.u = (k - a + 127u) << 23;
    float e = y * s1.f * s2.f;
    e = x0 > e ? x0 : e;
    return x0 < -104.0f ? 0.0f : e;
}
""" % _REDUCE

LOGISTICF = """\
/* 1 / (1 + exp(-x)) in float as TensorFlow computes it: Eigen's scalar_logistic_op<float> without
   FMA (rstf/cgen/tfmath.py): e = exp(x/2)^2 by a degree-5 polynomial, then e / (1 + e). */
static inline float rstf_logisticf(float x0)
{
    union { float f; unsigned u; } nb, s;
    float x = rstf_blendf(x0 > 16.6355324f, 16.6355324f, x0);
    x = x * 0.5f;
%s    float pe = r2 * 4.1898667812347412109375e-2f;
    pe = pe + 0.49999141693115234375f;
    float po = r2 * 8.33471305668354034423828125e-3f;
    po = po + 0.16666877269744873046875f;
    const float pl = r + 1.0f;
    float p = r * po;
    p = p + pe;
    p = r2 * p;
    p = p + pl;
    s.u = (nb.u - 0x4B400000u - (unsigned)up + 127u) << 23;
    float e = p * s.f;
    e = e * e;
    const float q = e / (1.0f + e);
    return rstf_blendf(x0 < -104.0f, 0.0f, q);
}
""" % _REDUCE


def _horner(var: str, x: str, coeffs: list[str]) -> str:
    """Eigen's ppolevl without FMA: `var` = ((c0 x + c1) x + c2) ..., one rounding a step."""
    lines = [f"    float {var} = {coeffs[0]} * {x};", f"    {var} = {var} + {coeffs[1]};"]
    for c in coeffs[2:]:
        lines += [f"    {var} = {var} * {x};", f"    {var} = {var} + {c};"]
    return "\n".join(lines) + "\n"


TANHF = """\
/* tanh(x) in float as TensorFlow computes it: Eigen's ptanh_float without FMA
   (rstf/cgen/tfmath.py): a [9/8] rational function of x on [-7.907, 7.907], clamped outside. */
static inline float rstf_tanhf(float x0)
{
    float x = rstf_blendf(x0 > 7.90738964080810547f, 7.90738964080810547f, x0);
    x = rstf_blendf(x < -7.90738964080810547f, -7.90738964080810547f, x);
    const float x2 = x * x;
    const float x3 = x2 * x;
%s%s    p = x3 * p;
    p = p + x;
    return p / q;
}
""" % (_horner("p", "x2", ["1.394553628e-8f", "2.102733560e-5f", "3.520756727e-3f",
                           "1.340216100e-1f"]),
       _horner("q", "x2", ["8.015776984e-7f", "3.326951409e-4f", "2.597254514e-2f",
                           "4.673548340e-1f", "1.0f"]))

ERFF = """\
/* erf(x) in float as TensorFlow computes it: Eigen's generic_fast_erf<float> without FMA
   (rstf/cgen/tfmath.py): an [11/10] rational function of x, x^2 clamped at 16, the result
   at +-1. */
static inline float rstf_erff(float x)
{
    float x2 = x * x;
    x2 = rstf_blendf(x2 < 16.0f, x2, 16.0f);
%s    p = x * p;
%s    float r = p / q;
    r = 1.0f < r ? 1.0f : r;
    return r < -1.0f ? -1.0f : r;
}
""" % (_horner("p", "x2", ["2.123732201653183437883853912353515625e-06f",
                           "2.861979592125862836837768554687500000e-04f",
                           "3.658048342913389205932617187500000000e-03f",
                           "5.243302136659622192382812500000000000e-02f",
                           "1.874160766601562500000000000000000000e-01f",
                           "1.128379106521606445312500000000000000e+00f"]),
       _horner("q", "x2", ["3.89185734093189239501953125000e-05f",
                           "1.14329601638019084930419921875e-03f",
                           "1.47520881146192550659179687500e-02f",
                           "1.12945675849914550781250000000e-01f",
                           "4.99425798654556274414062500000e-01f", "1.0f"]))

# TensorFlow's Rsqrt is the processor's estimate (vrsqrtps) refined by one Newton step (Eigen's
# prsqrt with generic_rsqrt_newton_step, no FMA): the estimate differs between processors, so
# this uses the same instruction, and gives the bits TensorFlow gives on the machine it runs
# on. 1 / sqrtf differed from it on 35% of 2 million inputs. The intrinsic is scalar, so a
# loop over it does not vectorise: a layer norm's Rsqrt runs once a row. Without SSE (not
# x86), 1 / sqrtf.
RSQRTF = """\
/* 1 / sqrt(x) in float as TensorFlow computes it on x86: the processor's estimate and one
   Newton step without FMA, Eigen's prsqrt (rstf/cgen/tfmath.py). */
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
static inline float rstf_rsqrtf(float x)
{
#if defined(__SSE__)
    const float e = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x)));
    const float r2 = x * e;
    const float half = e * -0.5f;
    float h = r2 * e;
    h = h + -1.0f;
    float s = half * h;
    s = s + e;
    return s != s ? e : s;
#else
    return 1.0f / sqrtf(x);
#endif
}
"""

# TensorFlow's float reciprocal on its vector path (Reciprocal, and Softmax's 1 / row sum): the
# processor's estimate (vrcpps) and one Newton step without FMA, Eigen's preciprocal with
# generic_reciprocal_newton_step, x + x (1 - a x), the estimate itself where 1 - a x is NaN
# (a zero or infinite). Exact division differed from TensorFlow's Reciprocal on 35% of 2
# million random floats, this on none. Like RSQRTF: the same instruction, scalar; 1 / x
# without SSE. TensorFlow's scalar path (the last size mod 8 elements) divides exactly.
RECIPF = """\
/* 1 / x in float as TensorFlow's vector path computes it on x86: the processor's estimate
   and one Newton step without FMA, Eigen's preciprocal (rstf/cgen/tfmath.py). */
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
static inline float rstf_recipf(float x)
{
#if defined(__SSE__)
    const float e = _mm_cvtss_f32(_mm_rcp_ss(_mm_set_ss(x)));
    float t = x * e;
    t = 1.0f - t;
    float s = e * t;
    s = s + e;
    return t != t ? e : s;
#else
    return 1.0f / x;
#endif
}
"""

# TensorFlow's scalar path of the sigmoid (Eigen's scalar_logistic_op<float>::operator()),
# which a tensor's last (size mod 8) elements take: the C library's expf, then e / (1 + e).
# rstf's elementwise ops call it there (opgen.elementwise `_Elementwise.float_tail_expr`);
# Exp's scalar path is expf itself and Reciprocal's an exact division.
LOGISTIC_TAILF = """\
/* 1 / (1 + exp(-x)) in float as TensorFlow computes a tensor's last (size mod 8) elements:
   Eigen's scalar path, expf of x capped at 16.6355324, then e / (1 + e) (rstf/cgen/tfmath.py). */
static inline float rstf_logistic_tailf(float x)
{
    const float e = expf(16.6355324f < x ? 16.6355324f : x);
    return e / (1.0f + e);
}
"""

# Each function's definition, in the order a file defines them.
FUNCTIONS = {"rstf_expf": EXPF, "rstf_logisticf": LOGISTICF, "rstf_tanhf": TANHF,
             "rstf_erff": ERFF, "rstf_rsqrtf": RSQRTF, "rstf_recipf": RECIPF,
             "rstf_logistic_tailf": LOGISTIC_TAILF}


def definitions(called) -> str:
    """The C definitions of the functions of `called` (names), with rstf_blendf before them
    when one of them calls it; nothing when none is called."""
    texts = [FUNCTIONS[f] for f in FUNCTIONS if f in called]
    blend = [BLENDF] if any("rstf_blendf(" in t for t in texts) else []
    return "\n".join([*blend, *texts])
