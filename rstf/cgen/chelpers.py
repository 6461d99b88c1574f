"""Math helpers that the generated C defines for itself: functions the C library has, in a
form gcc can vectorise; and the declarations that let gcc vectorise some of libm's own.

`rstf_expf(x)` is exp(x) in float. glibc's `expf` is one scalar call an element (about
3.2 us for Softmax's 1000 logits on the Zen 4 host); gcc vectorises a call to it only under
-ffast-math, which rstf does not use (it would change NaN and rounding behaviour against
TensorFlow). This one is plain arithmetic, so an `omp simd` loop that calls it (Softmax's
exp of the shifted logits) runs 16 lanes at a time: 0.38 us for the 1000.

How: exp(x) = 2^n exp(r), n = rint(x log2 e), r = x - n ln 2 with ln 2 in two parts
(Cody-Waite), exp(r) on |r| <= ln2 / 2 by Cephes' degree-6 polynomial (the one Eigen's
vectorised exp, and so TensorFlow's Softmax, uses), and 2^n built in the exponent bits as
two factors, so that a result in the subnormal range or past FLT_MAX rounds to it, to 0 or
to inf by the final multiplications. n is read from the bits of the rounding sum
c log2 e + 1.5 * 2^23 (whose last mantissa bits hold it), not converted from float: a
float-to-int conversion of a value that may be NaN kept gcc from vectorising the loop on
AVX2 ("control flow in loop"; only AVX-512's masked conversions took it), so Softmax's
exp and every sigmoid ran scalar there. The integer arithmetic is unsigned, so a NaN's
bits give a NaN result without undefined behaviour. Measured against exp in double, rounded to float, over
every normal result (tests/test_chelpers.py): within 1.001 ulp (1.0006). exp(NaN) is NaN,
exp(inf) inf, exp(-inf) 0.

Every multiply-add is an explicit fmaf, and there is no other a*b+c: the op library's
functions compile with fp-contract on or off (the microkernels turn it off), and gcc would
otherwise fuse a different set of operations in each, so `none` and `poly` (and any two
places that inline this) would differ in the last bit.
"""
from __future__ import annotations

import re

EXPF = """\
/* exp(x) in float, vectorisable (rstf/cgen/chelpers.py: Cody-Waite reduction, Cephes' polynomial,
   2^n in two factors; within 1.001 ulp of exp). */
static inline float rstf_expf(float x)
{
    union { float f; unsigned u; } t, s1, s2;
    float c = x < -104.0f ? -104.0f : x;
    c = c > 89.0f ? 89.0f : c;
    t.f = fmaf(c, 1.44269504088896341f, 12582912.0f);
    const float n = t.f - 12582912.0f;
    float r = fmaf(n, -0.693359375f, c);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    const float r2 = r * r;
    const float y = fmaf(p, r2, r) + 1.0f;
    const unsigned k = t.u - 0x4B400000u;
    const unsigned a = (unsigned)((int)k >> 1);
    s1.u = (a + 127u) << 23;
    s2.u = (k - a + 127u) << 23;
    return y * s1.f * s2.f;
}
"""

# SelectV2 on float values: `c ? a : b` in C reads `a` only where c holds and `b` only where it
# does not, so gcc vectorises it as masked loads, which it cannot build from a mask of bytes
# (a TF bool) for floats: the loop stays scalar (attention's mask after its softmax was slower
# than the softmax). As a function's arguments both are read every time, and the select of two
# values vectorises into a blend. Both reads are in bounds: the operands are whole tensors.
SELECTF = """\
/* SelectV2 on floats: both operands read, then one kept, so the loop vectorises
   (rstf/cgen/chelpers.py). */
static inline float rstf_selectf(unsigned char c, float a, float b)
{
    return c ? a : b;
}
"""

# The error channel of the generated C (a gather's out-of-range index): the first error of a
# call is kept in a thread-local record that the op wrapper clears before the call and reads
# after it, on the thread that ran it, turning it into TensorFlow's InvalidArgument
# (templates/wrapper.cc.j2). Weak, so that every subgraph's C defines it and one .so holds
# one; thread-local, so that two ops running at once on two threads keep their own.
INDEX_ERROR = """\
/* Index errors, reported by the op wrapper after the call (rstf/cgen/chelpers.py). */
__attribute__((weak)) __thread long long rstf_index_error_state[3];
static void rstf_index_error(long long value, long long limit)
{
    if (!rstf_index_error_state[0]) {
        rstf_index_error_state[0] = 1;
        rstf_index_error_state[1] = value;
        rstf_index_error_state[2] = limit;
    }
}
"""
INDEX_ERROR_SYMBOL = "rstf_index_error_state"

# glibc's vector math library, libmvec (glibc 2.35 and later on x86-64), has 4-, 8- and
# 16-lane versions of these. Declared with gcc's `simd` attribute (what glibc's math.h does
# itself, but only under -ffast-math), a loop that calls them vectorises into calls of those
# versions: 10-15x faster than one scalar call an element. Measured against the result in
# double over every third float of |x| < 12 (docs/benchmarks/2026-11-27-vecmath.md): within
# 1.4 ulp (tanhf), 4 ulp (erff, 16 lanes; 1.9 at 4 and 8) and 1.7 ulp (erfcf), where
# glibc's scalar functions are within 2.2, 1.0 and 3.1. build.vector_math() says whether
# the compiler and C library have it (RSTF_LIBMVEC, and -lmvec at the link); without it,
# the scalar calls stay.
LIBMVEC_FUNCTIONS = ("tanhf", "erff", "erfcf")
LIBMVEC = ("/* libm functions gcc may vectorise with glibc's libmvec (rstf/cgen/chelpers.py). */\n"
           "#if defined(RSTF_LIBMVEC) && defined(__GNUC__) && !defined(__clang__)\n"
           + "".join(f'__attribute__((__simd__("notinbranch"))) float {f}(float);\n'
                     for f in LIBMVEC_FUNCTIONS)
           + "#endif\n")
_LIBMVEC_CALL = re.compile(r"\b(%s)\(" % "|".join(LIBMVEC_FUNCTIONS))

# The helpers' names, which the polyhedral pass's raiser accepts as pure functions.
FUNCTIONS = frozenset({"rstf_expf", "rstf_selectf"})


def helpers_for(texts) -> str:
    """The helper definitions (and declarations) that C `texts` (function bodies) call, in
    one block: nothing when they call none, so a file defines only what it uses."""
    texts = list(texts)
    parts = [EXPF if any("rstf_expf(" in t for t in texts) else "",
             SELECTF if any("rstf_selectf(" in t for t in texts) else "",
             INDEX_ERROR if any("rstf_index_error(" in t for t in texts) else "",
             LIBMVEC if any(_LIBMVEC_CALL.search(t) for t in texts) else ""]
    return "\n".join(p for p in parts if p)
