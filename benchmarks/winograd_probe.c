/* Would Winograd F(2x2,3x3) pay for rstf's 3x3 stride-1 convolutions on this machine?

       gcc -O3 -std=c11 -fno-math-errno -fopenmp -march=native \
           benchmarks/winograd_probe.c -o /tmp/wp -lm
       /tmp/wp H W C K [reps]        e.g. /tmp/wp 28 28 128 128 40

   One NHWC 3x3 stride-1 convolution (batch 1, C input and K output channels, H x W output
   from a zero-bordered (H+2) x (W+2) input: SAME, or VALID on the larger input) followed by
   the epilogue rstf fuses after it (per-channel scale and bias, then ReLU), computed four
   ways on every core OpenMP gives the process, each timed as the median of `reps` runs
   interleaved in one process:

   direct     what rstf's poly pass emits today: per (output row, 64-channel panel), 6-pixel
              tiles of a 6x64 register-blocked kernel over the 9 taps and C channels,
              weights in panel layout ([panel][tap][c][64], prepack.py).
   wino       Winograd F(2x2,3x3) (Lavin & Gray 2016): V = B^T d B for each 4x4 input tile
              (16 values per channel), 16 independent contractions M_e = V_e U_e of
              [tiles x C] x [C x K] with the same 6x64 kernel, Y = A^T M A, then the
              epilogue. Each output needs 16*C/4 = 4C multiply-adds instead of 9C: 2.25x
              fewer. U is prepacked ([panel][e][c][64]), as a constant weight would be at
              optimize time. Two schedules (see wino()): a small image transforms its
              whole input first, then splits (tile row, panel) pairs over the threads; a
              large one transforms one tile row at a time per thread and runs every panel
              on it while it is in L2.
   wino+wt    the same, plus the weight transform U = G g G^T computed in the call (what a
              kernel without a prepacked U would pay: 16/9 of the weights written and read
              again).

   Errors are reported against `direct` relative to its largest output: F(2x2,3x3)'s
   transforms add no more than a few roundings per output (its points are 0, +-1), so the
   error stays near the direct sum's own.

   rstf's poly pass lowers these convolutions this way (rstf/poly/winograd.py, computing U
   in the call, like wino+wt); this probe is the measurement behind its choices (which
   image sizes, which schedule), to redo on another machine. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
#if defined(__AVX512F__)
#include <immintrin.h>
#define FMA(a, b, c) ((v16)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define RELU(v) ((v16)_mm512_max_ps((__m512)(v), _mm512_setzero_ps()))
#else /* portable, and slow: the figures above are for AVX-512 */
static inline v16 FMA(v16 a, v16 b, v16 c) {
    for (int i = 0; i < 16; ++i) c[i] = fmaf(a[i], b[i], c[i]);
    return c;
}
static inline v16 RELU(v16 v) {
    for (int i = 0; i < 16; ++i) v[i] = v[i] > 0 ? v[i] : 0;
    return v;
}
#endif
#define RB 6 /* rows (pixels or tiles) of one register tile: 6 x 4 accumulators */

static inline v16 splat(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

static int H, W, C, K;

/* acc[r][0..3] (+)= sum_c a[r*sar + c] * b[c*64 + 0..63]: the 6x64 register tile. */
static inline void tile(int m, int n, const float *a, long sar, const float *b, v16 acc[RB][4]) {
    for (int c = 0; c < n; ++c) {
        v16 b0 = *(const v16 *)(b + c * 64), b1 = *(const v16 *)(b + c * 64 + 16);
        v16 b2 = *(const v16 *)(b + c * 64 + 32), b3 = *(const v16 *)(b + c * 64 + 48);
        for (int r = 0; r < m; ++r) {
            v16 s = splat(a[r * sar + c]);
            acc[r][0] = FMA(s, b0, acc[r][0]);
            acc[r][1] = FMA(s, b1, acc[r][1]);
            acc[r][2] = FMA(s, b2, acc[r][2]);
            acc[r][3] = FMA(s, b3, acc[r][3]);
        }
    }
}

/* The full 6-row tile with the row count a constant, so the compiler keeps it in registers. */
static inline void tile6(int n, const float *a, long sar, const float *b, v16 acc[RB][4]) {
    tile(RB, n, a, sar, b, acc);
}

static inline void zero(v16 acc[RB][4]) {
    for (int r = 0; r < RB; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j] = splat(0);
}

static inline v16 epilogue(v16 v, const float *sc, const float *bi, int k) {
    return RELU(v * *(const v16 *)(sc + k) + *(const v16 *)(bi + k));
}

static void direct(const float *x, const float *wp, const float *sc, const float *bi, float *y) {
    const int P = K / 64, WP = W + 2;
#pragma omp parallel for collapse(2)
    for (int oh = 0; oh < H; ++oh)
        for (int p = 0; p < P; ++p)
            for (int ow0 = 0; ow0 < W; ow0 += RB) {
                const int m = W - ow0 < RB ? W - ow0 : RB;
                v16 acc[RB][4];
                zero(acc);
                for (int t = 0; t < 9; ++t) {
                    const float *b = wp + ((size_t)p * 9 + t) * C * 64;
                    const float *a = x + ((size_t)(oh + t / 3) * WP + ow0 + t % 3) * C;
                    if (m == RB) tile6(C, a, C, b, acc); else tile(m, C, a, C, b, acc);
                }
                for (int r = 0; r < m; ++r)
                    for (int j = 0; j < 4; ++j)
                        *(v16 *)(y + ((size_t)oh * W + ow0 + r) * K + p * 64 + j * 16) =
                            epilogue(acc[r][j], sc, bi, p * 64 + j * 16);
            }
}

/* U[p][e][c][0..63] = (G g G^T)[e] of channel c, output channels p*64 .. p*64+63;
   G = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]]. w: [3][3][C][K]. */
static void weight_transform(const float *w, float *U) {
#pragma omp parallel for collapse(2)
    for (int c = 0; c < C; ++c)
        for (int kv = 0; kv < K / 16; ++kv) {
            v16 g[3][3], t[4][3];
            for (int i = 0; i < 3; ++i)
                for (int j = 0; j < 3; ++j)
                    g[i][j] = *(const v16 *)(w + ((size_t)(i * 3 + j) * C + c) * K + kv * 16);
            for (int j = 0; j < 3; ++j) {
                t[0][j] = g[0][j];
                t[1][j] = (g[0][j] + g[1][j] + g[2][j]) * 0.5f;
                t[2][j] = (g[0][j] - g[1][j] + g[2][j]) * 0.5f;
                t[3][j] = g[2][j];
            }
            const int p = kv / 4, col = (kv % 4) * 16;
            for (int i = 0; i < 4; ++i) {
                v16 u[4] = {t[i][0], (t[i][0] + t[i][1] + t[i][2]) * 0.5f,
                            (t[i][0] - t[i][1] + t[i][2]) * 0.5f, t[i][2]};
                for (int j = 0; j < 4; ++j)
                    *(v16 *)(U + (((size_t)p * 16 + i * 4 + j) * C + c) * 64 + col) = u[j];
            }
        }
}

/* V[th - t0][e][tw][c] = (B^T d B)[e] of the 4x4 input tile at (2 th, 2 tw), channel c,
   for tile rows t0 .. t1 - 1;
   B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]. Reads past the input's last row or
   column (an odd H or W) are zeros. */
static void input_transform(const float *x, float *V, int t0, int t1, int TW) {
    const int HP = H + 2, WP = W + 2;
#pragma omp parallel for collapse(2) if (t1 - t0 > 1)
    for (int th = t0; th < t1; ++th)
        for (int tw = 0; tw < TW; ++tw)
            for (int cv = 0; cv < C; cv += 16) {
                v16 d[4][4], t[4][4];
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 4; ++j) {
                        const int r = 2 * th + i, s = 2 * tw + j;
                        d[i][j] = r < HP && s < WP ? *(const v16 *)(x + ((size_t)r * WP + s) * C + cv)
                                                   : splat(0);
                    }
                for (int j = 0; j < 4; ++j) {
                    t[0][j] = d[0][j] - d[2][j];
                    t[1][j] = d[1][j] + d[2][j];
                    t[2][j] = d[2][j] - d[1][j];
                    t[3][j] = d[1][j] - d[3][j];
                }
                float *v = V + (size_t)(th - t0) * 16 * TW * C;
                for (int i = 0; i < 4; ++i) {
                    const v16 e[4] = {t[i][0] - t[i][2], t[i][1] + t[i][2], t[i][2] - t[i][1],
                                      t[i][1] - t[i][3]};
                    for (int j = 0; j < 4; ++j)
                        *(v16 *)(v + ((size_t)(i * 4 + j) * TW + tw) * C + cv) = e[j];
                }
            }
}

/* Contractions and output transform of tile row th, panel p, from V_row = V[th]. */
static void tile_row(const float *v, const float *sc, const float *bi, const float *U, float *y,
                     int th, int p, int TW) {
    for (int tw0 = 0; tw0 < TW; tw0 += RB) {
        const int m = TW - tw0 < RB ? TW - tw0 : RB;
        v16 M[16][RB][4];
        for (int e = 0; e < 16; ++e) {
            v16 acc[RB][4];
            zero(acc);
            const float *a = v + ((size_t)e * TW + tw0) * C;
            const float *b = U + ((size_t)p * 16 + e) * C * 64;
            if (m == RB) tile6(C, a, C, b, acc); else tile(m, C, a, C, b, acc);
            for (int r = 0; r < m; ++r)
                for (int j = 0; j < 4; ++j) M[e][r][j] = acc[r][j];
        }
        /* Y = A^T M A, A^T = [[1,1,1,0],[0,1,-1,-1]] */
        for (int r = 0; r < m; ++r)
            for (int j = 0; j < 4; ++j) {
                v16 s0[4], s1[4];
                for (int q = 0; q < 4; ++q) {
                    s0[q] = M[q][r][j] + M[4 + q][r][j] + M[8 + q][r][j];
                    s1[q] = M[4 + q][r][j] - M[8 + q][r][j] - M[12 + q][r][j];
                }
                const v16 o[2][2] = {{s0[0] + s0[1] + s0[2], s0[1] - s0[2] - s0[3]},
                                     {s1[0] + s1[1] + s1[2], s1[1] - s1[2] - s1[3]}};
                const int k = p * 64 + j * 16;
                for (int a = 0; a < 2; ++a)
                    for (int b = 0; b < 2; ++b) {
                        const int oh = 2 * th + a, ow = 2 * (tw0 + r) + b;
                        if (oh < H && ow < W)
                            *(v16 *)(y + ((size_t)oh * W + ow) * K + k) = epilogue(o[a][b], sc, bi, k);
                    }
            }
    }
}

/* Two schedules. A small image (all of V within 4 MB, L3 at worst) transforms its whole input first and
   then splits (tile row, panel) pairs over the threads: enough work items even for a
   7x7 image. A large one keeps V to one tile row per thread (in L2), transforms it and
   runs every panel on it: the whole V would be written out to memory and read back (Zen 4,
   2 cores: 147x147x32 0.85x of direct with the first schedule, 1.37-1.50x with the second;
   56x56x64 1.71x with the first, 1.52x with the second). */
static void wino(const float *x, const float *w, const float *sc, const float *bi, float *y,
                 float *U, float *V, int with_weights) {
    const int P = K / 64, TH = (H + 1) / 2, TW = (W + 1) / 2;
    const size_t row = (size_t)16 * TW * C;  /* floats of one tile row of V */
    if (with_weights) weight_transform(w, U);
    if (row * TH * 4 <= (4 << 20)) {
        input_transform(x, V, 0, TH, TW);
#pragma omp parallel for collapse(2)
        for (int th = 0; th < TH; ++th)
            for (int p = 0; p < P; ++p) tile_row(V + th * row, sc, bi, U, y, th, p, TW);
    } else {
#pragma omp parallel for
        for (int th = 0; th < TH; ++th) {
            float *v = V + omp_get_thread_num() * row;
            input_transform(x, v, th, th + 1, TW);
            for (int p = 0; p < P; ++p) tile_row(v, sc, bi, U, y, th, p, TW);
        }
    }
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double rel_err(const float *ref, const float *got, size_t n) {
    double e = 0, mx = 0;
    for (size_t i = 0; i < n; ++i) {
        e = fmax(e, fabs((double)ref[i] - got[i]));
        mx = fmax(mx, fabs(ref[i]));
    }
    return e / mx;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s H W C K [reps]  (C a multiple of 16, K of 64)\n", argv[0]);
        return 2;
    }
    H = atoi(argv[1]); W = atoi(argv[2]); C = atoi(argv[3]); K = atoi(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : 30;
    if (H < 1 || W < 1 || C < 16 || C % 16 || K < 64 || K % 64 || reps < 1) {
        fprintf(stderr, "%s: need H, W >= 1, C a multiple of 16, K of 64, reps >= 1\n", argv[0]);
        return 2;
    }
    const int HP = H + 2, WP = W + 2, P = K / 64, TH = (H + 1) / 2, TW = (W + 1) / 2;
    const size_t nx = (size_t)HP * WP * C, nw = (size_t)9 * C * K, ny = (size_t)H * W * K;
    float *x = aligned_alloc(64, nx * 4), *w = aligned_alloc(64, nw * 4);
    float *wp = aligned_alloc(64, nw * 4), *sc = aligned_alloc(64, K * 4);
    float *bi = aligned_alloc(64, K * 4), *U = aligned_alloc(64, (size_t)16 * C * K * 4);
    float *V = aligned_alloc(64, (size_t)(TH > omp_get_max_threads() ? TH : omp_get_max_threads()) * 16 * TW * C * 4);
    float *y[3];
    for (int i = 0; i < 3; ++i) y[i] = aligned_alloc(64, ny * 4);
    srand(1);
    for (int i = 0; i < HP; ++i)
        for (int j = 0; j < WP; ++j)
            for (int c = 0; c < C; ++c)
                x[((size_t)i * WP + j) * C + c] =
                    (i == 0 || j == 0 || i == HP - 1 || j == WP - 1) ? 0.0f
                                                                     : (float)rand() / RAND_MAX - 0.3f;
    for (size_t i = 0; i < nw; ++i) w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
    for (int k = 0; k < K; ++k) { sc[k] = 0.5f + (float)rand() / RAND_MAX; bi[k] = 0.1f; }
    for (int p = 0; p < P; ++p)
        for (int t = 0; t < 9; ++t)
            for (int c = 0; c < C; ++c)
                for (int j = 0; j < 64; ++j)
                    wp[(((size_t)p * 9 + t) * C + c) * 64 + j] = w[((size_t)t * C + c) * K + p * 64 + j];
    double *t[3];
    for (int i = 0; i < 3; ++i) t[i] = malloc(reps * sizeof(double));
    weight_transform(w, U);  /* the prepacked U that `wino` reads */
    for (int r = -2; r < reps; ++r) {  /* two warm-up runs, then interleaved timings */
        const double t0 = omp_get_wtime();
        direct(x, wp, sc, bi, y[0]);
        const double t1 = omp_get_wtime();
        wino(x, w, sc, bi, y[1], U, V, 0);
        const double t2 = omp_get_wtime();
        wino(x, w, sc, bi, y[2], U, V, 1);
        const double t3 = omp_get_wtime();
        if (r >= 0) { t[0][r] = t1 - t0; t[1][r] = t2 - t1; t[2][r] = t3 - t2; }
    }
    const double flops = 2.0 * H * W * C * K * 9;
    const char *name[3] = {"direct", "wino", "wino+wt"};
    printf("H=%d W=%d C=%d K=%d, %d threads, median of %d:", H, W, C, K, omp_get_max_threads(), reps);
    double med[3];
    for (int i = 0; i < 3; ++i) {
        qsort(t[i], reps, sizeof(double), cmpd);
        med[i] = t[i][reps / 2];
        printf("  %s %.3f ms (%.0f GFLOP/s direct-equivalent)", name[i], med[i] * 1e3, flops / med[i] / 1e9);
    }
    printf("\n  speed-up over direct: wino %.2fx, wino+wt %.2fx; max error relative to the "
           "largest output: %.1e, %.1e\n", med[0] / med[1], med[0] / med[2],
           rel_err(y[0], y[1], ny), rel_err(y[0], y[2], ny));
    return 0;
}
