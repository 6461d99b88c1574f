/* fp32 peak of this machine: 12 independent chains of AVX-512 fused multiply-adds per
   thread (enough to cover the FMA latency on two pipes), best of 5 runs.
   gcc -O3 -march=native -fopenmp peak_fma.c -o peak_fma && OMP_NUM_THREADS=N ./peak_fma */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
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
    __m512 a[12]; __m512 b=_mm512_set1_ps(1.0000001f), c=_mm512_set1_ps(1e-7f);
    for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i);
    for(long k=0;k<iters/ nt/ 10;k++){
      #pragma GCC unroll 12
      for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],b,c);
    }
    for(int i=0;i<12;i++) sink+=a[i][0];
  }
  double t=now()-t0;
  double fl = (double)(iters/nt/10)*nt*12*16*2;
  if (fl/t>best) best=fl/t;
  if(sink==1234.5f)printf("x");
  }
  printf("threads %d peak %.1f GFLOP/s\n", nt, best/1e9);
}
