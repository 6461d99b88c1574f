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
chain differs in 90% or more of them. A one-row product is Eigen's matrix-vector kernel
(not these slices, and not fused: `tf_matvec_blocks`).

Which blocking a product gets is Eigen's decision, made per call from its cost model
(TensorContractionThreadPool's `evalProductImpl`), and `tf_k_plan` follows it for MatMul
and 1x1 Conv2D:
- Eigen estimates the product's cost and the threads worth using (`numThreads`: 100000
  cycles of start-up and per thread). A small product (a 1x1 conv on a 3x3 map) runs on
  one thread, whose blocking caps k at the L1 bound `((l1 - 256) / 80) & ~7` instead of 320
  (400 for a 32 KiB L1), with Eigen's own adjustment of the last block, then TF's equal
  slices: k = 368 is one chain there, k = 500 two slices of 256.
- A product with few rows and columns but a long k is *sharded over k*
  (`shardByInnerDim`): k is cut into one block per thread (rounded up to 8, at least 96),
  each block a product of its own in its slices, and the blocks' sums are added in turn.
- Otherwise the slices above.
Each of Eigen's k blocks is one call of oneDNN's sgemm, which blocks k again: a call's k of
twice its block or more runs in whole blocks first, and a rest between one and two blocks
runs in two halves, the first `(rest + 1) / 2`. Each block sums its own chain and adds it
into the output, so it is one more slice of the same sum. The block is 384 on machines
with oneDNN's `avx512_core` kernels (`sgemm_nocopy_driver` and the copy-based
`gemm_driver` alike), where Eigen's multi-threaded blocks (320 at most) never reach it and
a one-thread block does where the L1 bound exceeds 384 (a 48 KiB L1 allows 608: k = 500
runs as 250 + 250, measured on a Xeon with a 48 KiB L1). It is 256 on the others (measured
on an AVX2 Zen 3): there an Eigen slice of 288 runs as 144 + 144, and 1280 as four slices
of 160 + 160.
These decisions read the machine: its thread count (TensorFlow's intra-op pool is one
thread per core), the L1 and L3 sizes Eigen finds, which `machine_caches` reads where
Linux reports them, and its ISA (`machine_sgemm_k_block`). The generated C therefore gives
the bits TensorFlow gives on the machine rstf builds on (the machine it serves on, for `-march=native`).
"""
from __future__ import annotations

import functools

# Eigen's cap on a multi-threaded contraction's k block (GeneralBlockPanelKernel.h).
EIGEN_K_CAP = 320
# Eigen's matrix-vector kernel (GeneralMatrixVector.h, column-major) sums k in blocks of
# these many columns: all of k below EIGEN_GEMV_WHOLE_K, else 16 while a column (n
# floats) is under EIGEN_GEMV_WIDE_BYTES, else 4.
EIGEN_GEMV_WHOLE_K = 128
EIGEN_GEMV_WIDE_BYTES = 32000
# TF rounds its equal slices up to a multiple of the packet size, at least 8.
SLICE_ROUND = 8


def tf_k_slices(k: int) -> list[tuple[int, int]]:
    """The [lo, hi) ranges TensorFlow's float contraction sums separately over a reduction
    of length `k` (module docstring), in the order it adds them; one range when k <= 320."""
    return _equal_slices(k, EIGEN_K_CAP)


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def _equal_slices(k: int, kc: int) -> list[tuple[int, int]]:
    """TF's refinement of Eigen's k block kc: ceil(k / kc) slices as equal as multiples of
    8 allow, the last one the rest; one when k <= kc (an empty k too)."""
    if k <= kc:
        return [(0, k)]
    n = -(-k // kc)
    step = _round_up(-(-k // n), SLICE_ROUND)
    return [(lo, min(k, lo + step)) for lo in range(0, k, step)]


# Eigen's gebp register tile for float in TF's wheel (AVX packets of 8, no FMA: 16 x 4) and
# the cost model's constants (TensorContractionThreadPool.h, TensorCostModel.h).
GEBP_MR, GEBP_NR, PACKET = 16, 4, 8
_LOAD = _STORE = 11 / 64  # cycles a byte, Eigen's L2 figure
_STARTUP = _PER_THREAD = 100000.0


@functools.lru_cache(maxsize=None)
def machine_caches() -> tuple[int, int]:
    """(L1 data, L3) bytes as Linux reports them (the sizes Eigen reads with cpuid), or
    Eigen's defaults, 32 KiB and 2 MiB, where it does not."""
    from ..poly.target import sysfs_cache_bytes
    return (sysfs_cache_bytes(1, ("Data",)) or 32 << 10,
            sysfs_cache_bytes(3, ("Unified", "Data")) or 2 << 20)


def machine_pool() -> int:
    """The threads of TensorFlow's intra-op pool on this machine: one per core it may use."""
    from ..poly.target import machine_threads
    return machine_threads()


# oneDNN's sgemm k block on avx512_core (gemm_info's `bk` and the nocopy driver's `BK`),
# the ISA flags that make a machine avx512_core for oneDNN, and its block on the others
# (gemm_info's `bk_traditional`, 256 for every older ISA).
ONEDNN_AVX512_K_BLOCK = 384
ONEDNN_AVX512_CORE = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
ONEDNN_K_BLOCK = 256


def machine_sgemm_k_block() -> int:
    """oneDNN's sgemm k block on this machine: 384 where it runs its avx512_core kernels,
    256 elsewhere (measured on an AVX2 Zen 3: an Eigen slice of 288 or 320 runs as two
    halves there, one of 256 whole)."""
    from ..poly.target import cpu_flags
    return ONEDNN_AVX512_K_BLOCK if ONEDNN_AVX512_CORE <= cpu_flags() else ONEDNN_K_BLOCK


def _sgemm_blocks(lo: int, hi: int, bk: int) -> list[tuple[int, int]]:
    """The k blocks oneDNN's sgemm runs one call over [lo, hi) in (module docstring)."""
    out = []
    while bk and hi - lo > bk:
        size = bk if hi - lo >= 2 * bk else (hi - lo + 1) // 2
        out.append((lo, lo + size))
        lo += size
    return out + [(lo, hi)]


def _single_thread_kc(k: int, m: int, n: int, l1: int) -> int:
    """Eigen's k block for a product on one thread (evaluateProductBlockingSizesHeuristic)."""
    if max(k, m, n) < 48:
        return k
    max_kc = max(((l1 - GEBP_MR * GEBP_NR * 4) // (GEBP_MR * 4 + GEBP_NR * 4)) & ~7, 1)
    if k <= max_kc:
        return k
    if k % max_kc == 0:
        return max_kc
    return max_kc - 8 * ((max_kc - 1 - k % max_kc) // (8 * (k // max_kc + 1)))


def _bandwidth(by_col: bool, bm: int, bn: int, bk: int) -> float:
    bw = 4.0 if bk == 1 else (2.0 if ((bn if by_col else bm) < GEBP_NR
                                       or (bm if by_col else bn) < GEBP_MR) else 0.5)
    return 1.0 if bw == 0.5 else bw  # without FMA a multiply and an add are two operations


def _shard_by_col(m: int, n: int, t: int) -> bool:
    nr = GEBP_NR
    if m // t >= nr and (n // t < nr or (n // t < 4 * nr and n % (t * nr) != 0
                                          and (m % (t * nr) == 0 or m // n >= 6))):
        return False
    return not (n // t < 16 * nr and m > n * 32)


def _threads(m: int, n: int, k: int, pool: int) -> int:
    """Eigen's numThreads for an m x n output (its first blocking: 2 threads)."""
    by_col = _shard_by_col(m, n, 2)
    bk = tf_k_slices(k)[0][1]
    bm, bn = min(m, 48), min(n, 24)  # TF's blocks: unrolled by 48 and 24, or the whole dim
    compute = bk * _bandwidth(by_col, bm, bn, bk) / PACKET
    loaded = 4 * bk / (m if by_col else n)  # the operand not dropped from the memory cost
    cost = m * n * (loaded * _LOAD + 4 * _STORE + compute)
    return min(pool, max(1, int((cost - _STARTUP) / _PER_THREAD + 0.9)))


def _threads_by_k(m: int, n: int, k: int, pool: int) -> int:
    """Eigen's numThreadsInnerDim."""
    inner = 4 * n * _LOAD + 4 * _STORE + _bandwidth(True, m, n, k) * m * n / PACKET
    parallel = k * inner
    reduction = m * n * (2 * _LOAD + _STORE + 1 / PACKET)
    best, best_cost = 1, parallel
    for nt in range(2, pool + 1, 2):
        c = parallel / nt + 100000 + nt * (reduction + 3000)
        if c < best_cost:
            best, best_cost = nt, c
    return best


def _shard_by_k(m: int, n: int, k: int, nt: int, ntk: int, l3: int) -> bool:
    nr = GEBP_NR
    if (n == 1 or ntk < 2 or ntk < nt or m * n * 4 > l3 / ntk or k // ntk < 2 * nr):
        return False
    return max(m, n) // nt < nr or (k // ntk > 8 * nr and (min(m, n) < 2 * nr or ntk > nt))


def tf_conv_k_slices(k: int, sgemm_k_block: int | None = None) -> list[tuple[int, int]]:
    """The [lo, hi) ranges TensorFlow's spatial convolution sums separately over its image
    patches' k = kh * kw * ic, in the order it adds them (a multi-threaded product's too):
    Eigen's multi-threaded slices, each cut by oneDNN's sgemm blocks (`sgemm_k_block`:
    another machine's, 0 for none)."""
    bk = machine_sgemm_k_block() if sgemm_k_block is None else sgemm_k_block
    return [b for s in tf_k_slices(k) for b in _sgemm_blocks(*s, bk)]


def tf_matvec_blocks(k: int, n: int) -> list[list[tuple[int, int]]]:
    """How TensorFlow sums a one-row float product [1, k] x [k, n] (its B row-major, as a
    Dense layer's or a 1x1 convolution's weight): Eigen's matrix-vector kernel, whatever the
    machine. Each block of k is a chain of products from zero, each product rounded and then
    added (the wheel builds Eigen's own kernels without FMA), and the blocks' sums are added
    in turn; as `tf_k_plan`'s plans, blocks of one slice each."""
    if k < EIGEN_GEMV_WHOLE_K:
        return [[(0, k)]]
    size = 16 if 4 * n < EIGEN_GEMV_WIDE_BYTES else 4
    return [[(lo, min(k, lo + size))] for lo in range(0, k, size)]


def tf_k_plan(rows: int, k: int, cols: int, pool: int | None = None,
              caches: tuple[int, int] | None = None, sgemm_k_block: int | None = None
              ) -> list[list[tuple[int, int]]] | None:
    """How TensorFlow sums a float product [rows, k] x [k, cols] on this machine (module
    docstring): blocks of k slices, each block's slices summed in turn, then the blocks'
    sums in turn. None where its order is none of these (more than three blocks of k
    sharded over many threads, summed as a tree). `pool`, `caches` and `sgemm_k_block`
    name another machine's threads, (L1, L3) bytes and oneDNN k block (0: none)."""
    bk = machine_sgemm_k_block() if sgemm_k_block is None else sgemm_k_block
    plan = _eigen_k_plan(rows, k, cols, machine_pool() if pool is None else pool,
                         caches or machine_caches())
    if plan is None:
        return None
    blocks = [[b for s in blk for b in _sgemm_blocks(*s, bk)] for blk in plan]
    if all(len(blk) == 1 for blk in plan):  # slices summed in turn: keep one a block
        return [[s] for blk in blocks for s in blk]
    return blocks


def _eigen_k_plan(rows: int, k: int, cols: int, pool: int,
                  caches: tuple[int, int]) -> list[list[tuple[int, int]]] | None:
    """Eigen's blocks of k slices (tf_k_plan without oneDNN's own blocks)."""
    l1, l3 = caches
    m, n = cols, rows  # Eigen's column-major view of TF's row-major product
    nt = _threads(m, n, k, pool) if pool > 1 else 1
    ntk = _threads_by_k(m, n, k, pool) if pool > 1 else 1
    if _shard_by_k(m, n, k, nt, ntk, l3):
        size = min(k, max(12 * PACKET, _round_up(-(-k // ntk), SLICE_ROUND)))
        blocks = [(lo, min(k, lo + size)) for lo in range(0, k, size)]
        if len(blocks) > 3:
            return None
        if len(blocks) == 1:  # one block: a product on one thread
            return [[s] for s in _equal_slices(k, _single_thread_kc(k, m, n, l1))]
        return [[(lo + a, lo + b) for a, b in tf_k_slices(hi - lo)] for lo, hi in blocks]
    if nt == 1:
        return [[s] for s in _equal_slices(k, _single_thread_kc(k, m, n, l1))]
    return [[s] for s in tf_k_slices(k)]
