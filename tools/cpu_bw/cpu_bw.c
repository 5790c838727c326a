/* cpu_bw.c - the CPU read-bandwidth probe behind docs/PERF.md "CPU baseline": two threads
 * sum a 2 GiB array of uint64 three times and print the best GB/s.
 * Build and run: cc -O2 -pthread tools/cpu_bw/cpu_bw.c -o cpu_bw && ./cpu_bw */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <pthread.h>
#define N (1ull<<28) /* 2 GiB of uint64 */
static uint64_t *a; static uint64_t sums[2];
static void *rd(void *p){ long t=(long)p; uint64_t s=0; for(size_t i=t*(N/2);i<(t+1)*(N/2);i+=8) s+=a[i]+a[i+1]+a[i+2]+a[i+3]+a[i+4]+a[i+5]+a[i+6]+a[i+7]; sums[t]=s; return 0;}
int main(){ a=malloc(N*8); for(size_t i=0;i<N;i++)a[i]=i; double best=0; for(int r=0;r<3;r++){struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0); pthread_t th[2]; for(long t=0;t<2;t++)pthread_create(&th[t],0,rd,(void*)t); for(int t=0;t<2;t++)pthread_join(th[t],0); clock_gettime(CLOCK_MONOTONIC,&t1); double s=(t1.tv_sec-t0.tv_sec)+(t1.tv_nsec-t0.tv_nsec)*1e-9; double gbs=N*8/s/1e9; if(gbs>best)best=gbs;} printf("read bandwidth 2 threads: %.1f GB/s (%llu)\n",best,(unsigned long long)(sums[0]+sums[1])); }
