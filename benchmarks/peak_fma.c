/* fp32 peak of this machine: 12 independent chains of fused multiply-adds of the widest
   vectors the target has (AVX-512: 16 floats; AVX2 with FMA: 8; else 4, with FMA where
   there is one) per thread, enough to cover the FMA latency on two pipes; best of 5 runs.
   gcc -O3 -march=native -fopenmp peak_fma.c -o peak_fma && OMP_NUM_THREADS=N ./peak_fma */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#elif defined(__AVX__)
#define LANES 8
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#if defined(__FMA__)
#define FMA _mm256_fmadd_ps
#else
#define FMA(a, b, c) _mm256_add_ps(_mm256_mul_ps(a, b), c)
#endif
#else
#define LANES 4
typedef __m128 vec;
#define SET1 _mm_set1_ps
#if defined(__FMA__)
#define FMA _mm_fmadd_ps
#else
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#endif
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  int nt = omp_get_max_threads();
  long iters = 200000000;
  double best=0;
  for (int rep=0;rep<5;rep++){
  double t0=now();
  float sink=0;
  #pragma omp parallel reduction(+:sink)
  {
    vec a[12]; vec b=SET1(1.0000001f), c=SET1(1e-7f);
    for(int i=0;i<12;i++) a[i]=SET1(i);
    for(long k=0;k<iters/ nt/ 10;k++){
      #pragma GCC unroll 12
      for(int i=0;i<12;i++) a[i]=FMA(a[i],b,c);
    }
    for(int i=0;i<12;i++) sink+=a[i][0];
  }
  double t=now()-t0;
  double fl = (double)(iters/nt/10)*nt*12*LANES*2;
  if (fl/t>best) best=fl/t;
  if(sink==1234.5f)printf("x");
  }
  printf("threads %d peak %.1f GFLOP/s (%d-float vectors)\n", nt, best/1e9, LANES);
}
