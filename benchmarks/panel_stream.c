/* A dense layer Y[M][N] = A[M][K] x W[K][N] computed as the polyhedral pass computes a
   batch-1 transformer's or a late CNN stage's contraction: W prepacked in column panels of
   VB = 48 columns (each panel K x 48, contiguous), the panels dealt out to the threads in
   static shares, each panel reused by every 8-row block of A through an 8 x 48 register
   tile (rstf's microkernel: 24 accumulators, a broadcast of A, three loads of W a step).
   What it measures is how the weights arrive, not the kernel:

   - weights cold (COPIES > 1: each run reads another copy of W, so W comes from DRAM, as a
     model's hundreds of MB of weights do) or warm (COPIES = 1: W stays in the caches);
   - the prefetch of the next panel that each call makes (PF): 0 none, 1 a line every second
     step from the call's start (rstf before 2026-12-05), 2 the call's share spread over
     all its steps (rstf since);
   - K blocks (KB > 0): each panel in blocks of KB reduction steps, every row block run
     over one block before the next, so that the rows of A one block reads (M x KB) and two
     blocks of panel fit in L2 where M x K and two whole panels do not. The next block is
     what a call prefetches. (Not bit-identical to rstf's k slices: a timing model only.)

   gcc -O3 -march=native -fopenmp -ffp-contract=off panel_stream.c -o panel_stream
   COPIES=12 PF=2 KB=0 OMP_NUM_THREADS=2 ./panel_stream M K N [runs]
   prints the best of `runs` (default 48) in ms and GFLOP/s. AVX-512 only (one vector is
   16 floats). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RB 8
#define NV 3
#define VB (16 * NV)

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int env(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v ? atoi(v) : fallback;
}

/* y[r][0:VB] += sum over k < K of a[r*sar + k] * b[k*VB + 0:VB], r < RB; meanwhile the npp
   lines from pp prefetched as scheme pf says. */
__attribute__((noinline)) static void tile(int K, const float *restrict a, long sar,
                                           const float *restrict b, float *restrict y, long syr,
                                           const char *pp, int npp, int pf)
{
    v16 acc[NV][RB];
    for (int r = 0; r < RB; ++r)
        for (int j = 0; j < NV; ++j)
            acc[j][r] = *(const v16 *)(y + r * syr + 16 * j);
    const long pstep = K ? ((long)npp << 32) / K + 1 : 0;
    #pragma GCC unroll 1
    for (int k = 0; k < K; ++k) {
        if (pf == 1 && !(k & 1) && (k >> 1) < npp)
            __builtin_prefetch(pp + 64L * (k >> 1), 0, 2);
        else if (pf == 2)
            __builtin_prefetch(pp + 64L * ((k * pstep) >> 32), 0, 2);
        v16 bv[NV];
        for (int j = 0; j < NV; ++j)
            bv[j] = *(const v16 *)(b + (long)k * VB + 16 * j);
        for (int r = 0; r < RB; ++r) {
            const __m512 av = _mm512_set1_ps(a[r * sar + k]);
            for (int j = 0; j < NV; ++j)
                acc[j][r] = (v16)_mm512_fmadd_ps(av, (__m512)bv[j], (__m512)acc[j][r]);
        }
    }
    for (int r = 0; r < RB; ++r)
        for (int j = 0; j < NV; ++j)
            *(v16 *)(y + r * syr + 16 * j) = acc[j][r];
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: [COPIES=n PF=0|1|2 KB=k] %s M K N [runs]\n", argv[0]);
        return 2;
    }
    const int M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
    const int runs = argc > 4 ? atoi(argv[4]) : 48;
    const int copies = env("COPIES", 12), pf = env("PF", 2);
    const int kb = env("KB", 0) > 0 && env("KB", 0) < K ? env("KB", 0) : K;
    if (M % RB || N % VB || K % kb) {
        fprintf(stderr, "M must be a multiple of %d, N of %d, K of KB\n", RB, VB);
        return 2;
    }
    const int tiles = N / VB, blocks = M / RB;
    const long panel = (long)K * VB, block = 4L * kb * VB;  /* floats, bytes */
    float *A = aligned_alloc(64, 4L * M * K), *Y = aligned_alloc(64, 4L * M * N);
    float *W = aligned_alloc(1 << 21, 4L * K * N * copies + block);
    for (long i = 0; i < (long)M * K; ++i)
        A[i] = (i % 13) * 0.01f;
    for (long i = 0; i < (long)K * N * copies + block / 4; ++i)
        W[i] = (i % 7) * 0.01f;
    double best = 1e30;
    for (int run = 0; run < runs; ++run) {
        const float *w = W + (long)(run % copies) * K * N;
        memset(Y, 0, 4L * M * N);
        const double t0 = now();
        #pragma omp parallel for schedule(static)
        for (int u = 0; u < tiles; ++u)
            for (int k0 = 0; k0 < K; k0 += kb)
                for (int r = 0; r < blocks; ++r) {
                    /* the next block of this panel or, after its last, the next panel's
                       first: contiguous either way. This call's share: its rows'. */
                    const char *next = (const char *)(w + u * panel + (long)k0 * VB) + block;
                    const long g0 = (long)r * RB, g1 = g0 + RB;
                    const char *pp = next + block * g0 / M / 64 * 64;
                    const int npp = (int)((block * g1 / M - block * g0 / M / 64 * 64 + 63) / 64);
                    tile(kb, A + g0 * K + k0, K, w + u * panel + (long)k0 * VB,
                         Y + g0 * N + u * VB, N, pp, npp, pf);
                }
        const double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    printf("M=%d K=%d N=%d threads=%d copies=%d PF=%d KB=%d: %.3f ms, %.1f GFLOP/s\n", M, K, N,
           omp_get_max_threads(), copies, pf, kb, best * 1e3, 2.0 * M * K * N / best * 1e-9);
    free(A);
    free(Y);
    free(W);
    return 0;
}
