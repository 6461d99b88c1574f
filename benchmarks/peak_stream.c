/* Read bandwidth of this machine from DRAM: the bound of a layer that streams its weights
   (a batch-1 dense layer or 1x1 convolution over a few pixels: each weight element serves
   as many multiply-adds as the layer has rows). Each thread sums its own share of a 1 GiB
   array (first touched by that thread, so its pages sit on its node) with 4 independent
   vector accumulators; best of 5 passes, GB/s = 1e9 bytes.
   gcc -O3 -march=native -fopenmp peak_stream.c -o peak_stream && OMP_NUM_THREADS=N ./peak_stream */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
#define LOAD _mm512_load_ps
#define ADD _mm512_add_ps
#define ZERO _mm512_setzero_ps
#define STORE _mm512_store_ps
#elif defined(__AVX__)
#define LANES 8
typedef __m256 vec;
#define LOAD _mm256_load_ps
#define ADD _mm256_add_ps
#define ZERO _mm256_setzero_ps
#define STORE _mm256_store_ps
#else
#define LANES 4
typedef __m128 vec;
#define LOAD _mm_load_ps
#define ADD _mm_add_ps
#define ZERO _mm_setzero_ps
#define STORE _mm_store_ps
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  const long n = (1L << 30) / sizeof(float);  /* 1 GiB: far past any cache */
  float *a = aligned_alloc(64, n * sizeof(float));
  if (!a) { fprintf(stderr, "peak_stream: cannot allocate 1 GiB\n"); return 1; }
  const long step = 4 * LANES;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) a[i] = (float)(i & 1023);
  double best = 0, sink = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
#pragma omp parallel reduction(+:sink)
    {
      vec s0 = ZERO(), s1 = ZERO(), s2 = ZERO(), s3 = ZERO();
#pragma omp for schedule(static)
      for (long i = 0; i < n; i += step) {
        s0 = ADD(s0, LOAD(a + i));
        s1 = ADD(s1, LOAD(a + i + LANES));
        s2 = ADD(s2, LOAD(a + i + 2 * LANES));
        s3 = ADD(s3, LOAD(a + i + 3 * LANES));
      }
      float out[LANES] __attribute__((aligned(64)));
      STORE(out, ADD(ADD(s0, s1), ADD(s2, s3)));
      for (int l = 0; l < LANES; l++) sink += out[l];
    }
    double dt = now() - t0, gbs = n * sizeof(float) / dt / 1e9;
    if (gbs > best) best = gbs;
  }
  printf("threads %d  lanes %d  read %.1f GB/s (best of 5 passes over 1 GiB; checksum %g)\n",
         omp_get_max_threads(), LANES, best, sink);
  free(a);
  return 0;
}
