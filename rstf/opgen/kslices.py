"""The k slices of TensorFlow's float contractions, so that rstf sums in the same order.

TensorFlow's CPU MatMul, BatchMatMul and Conv2D run Eigen's tensor contraction with
oneDNN's sgemm as its kernel (TF's `TensorContractionKernel`). Eigen cuts the reduction
dimension k into blocks of `kc`; each block is one sgemm call, which sums its products in
one fused multiply-add chain from zero and adds that sum into the output (beta = 1 after
the first block). A long dot product is therefore `((s0 + s1) + s2) + ...`, each `s` a
chain over one slice, and not one chain over all of k.

How TensorFlow picks `kc` (Eigen's `evaluateProductBlockingSizesHeuristic` for a
multi-threaded contraction, then TF's refinement for its oneDNN kernel):

- Eigen caps k at `(l1 - mr*nr*4) / (mr*4 + nr*4)` and at 320 ("once the latency is
  hidden there is no point in increasing k"). The tensorflow-cpu wheel builds Eigen for
  AVX packets of 8 floats without FMA, so `mr = 16`, `nr = 4`: the L1 bound is above 320
  for any L1 of 26 KiB or more, and the cap, 320, is the block on every x86 host.
- TF then splits k into `ceil(k / 320)` roughly equal slices, each rounded up to a
  multiple of 8: `kc = 8 * ceil(ceil(k / slices) / 8)`, the last slice the rest.

Measured against TF's MatMul on an AVX2 host (`benchmarks/tf_contraction_order.py`):
BERT's projections (128 x 768 x 768, 128 x 768 x 3072, 128 x 3072 x 768) and a 1x1
convolution's 196 x 480 x 80 give TF's bits in every output with these slices, and one
chain differs in 90% or more of them. Where it matters less: a product whose rows and
columns are both few is sharded over k between TF's threads, a decision of Eigen's cost
model that these slices do not follow; a one-row product is Eigen's matrix-vector kernel.
The rule depends on nothing of the machine rstf runs on, so that the generated C and its
results are the same wherever it is built.
"""
from __future__ import annotations

# Eigen's cap on a multi-threaded contraction's k block (GeneralBlockPanelKernel.h).
EIGEN_K_CAP = 320
# TF rounds its equal slices up to a multiple of the packet size, at least 8.
SLICE_ROUND = 8


def tf_k_slices(k: int) -> list[tuple[int, int]]:
    """The [lo, hi) ranges TensorFlow's float contraction sums separately over a reduction
    of length `k` (module docstring), in the order it adds them; one range when k <= 320."""
    if k <= EIGEN_K_CAP:
        return [(0, k)]
    n = -(-k // EIGEN_K_CAP)
    kc = -(-(-(-k // n)) // SLICE_ROUND) * SLICE_ROUND  # < k: n >= 2 slices
    return [(lo, min(k, lo + kc)) for lo in range(0, k, kc)]
