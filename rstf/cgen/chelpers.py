"""Math helpers that the generated C defines for itself: TensorFlow's own exp, sigmoid, tanh,
erf and rsqrt (rstf/cgen/tfmath.py), a vectorisable float select, the index-error channel, and the
declarations that let gcc vectorise libm's erfcf.
"""
from __future__ import annotations

import re

from . import tfmath

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
# 16-lane versions of erfcf (and of tanhf and erff, which TensorFlow computes otherwise:
# rstf/cgen/tfmath.py). Declared with gcc's `simd` attribute (what glibc's math.h does
# itself, but only under -ffast-math), a loop that calls them vectorises into calls of those
# versions: 10-15x faster than one scalar call an element. Measured against the result in
# double over every third float of |x| < 12 (docs/benchmarks/2026-11-27-vecmath.md): erfcf
# within 1.7 ulp, where glibc's scalar function is within 3.1. build.vector_math() says whether
# the compiler and C library have it (RSTF_LIBMVEC, and -lmvec at the link); without it,
# the scalar calls stay.
LIBMVEC_FUNCTIONS = ("erfcf",)
LIBMVEC = ("/* libm functions gcc may vectorise with glibc's libmvec (rstf/cgen/chelpers.py). */\n"
           "#if defined(RSTF_LIBMVEC) && defined(__GNUC__) && !defined(__clang__)\n"
           + "".join(f'__attribute__((__simd__("notinbranch"))) float {f}(float);\n'
                     for f in LIBMVEC_FUNCTIONS)
           + "#endif\n")
_LIBMVEC_CALL = re.compile(r"\b(%s)\(" % "|".join(LIBMVEC_FUNCTIONS))

# The helpers' names, which the polyhedral pass's raiser accepts as pure functions.
FUNCTIONS = frozenset({*tfmath.FUNCTIONS, "rstf_blendf", "rstf_selectf"})


def helpers_for(texts) -> str:
    """The helper definitions (and declarations) that C `texts` (function bodies) call, in
    one block: nothing when they call none, so a file defines only what it uses."""
    texts = list(texts)
    called = {f for f in tfmath.FUNCTIONS if any(f"{f}(" in t for t in texts)}
    parts = [tfmath.definitions(called),
             SELECTF if any("rstf_selectf(" in t for t in texts) else "",
             INDEX_ERROR if any("rstf_index_error(" in t for t in texts) else "",
             LIBMVEC if any(_LIBMVEC_CALL.search(t) for t in texts) else ""]
    return "\n".join(p for p in parts if p)
