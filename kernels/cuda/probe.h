/* probe.h - measured ceilings of the current CUDA device: linear read
 * bandwidth, DP4A int8 rate, fp32 FMA and HFMA2 rates. tools/bench.c reports
 * every speed as a ratio to these, measured in the same run. */
#ifndef CS_CUDA_PROBE_H
#define CS_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_probe {
    char name[96];          /* device name */
    int cc;                 /* compute capability, major*10+minor */
    int sm_count;
    double clock_mhz;       /* reported SM clock */
    double read_gbps;       /* best of several full reads of a large buffer, GB/s (1e9) */
    double dp4a_tops;       /* int8 ops (8 per dp4a: 4 multiplies, 4 adds), 1e12/s */
    double fma_tflops;      /* fp32, 2 flops per FMA */
    double hfma2_tflops;    /* fp16, 4 flops per HFMA2 */
    size_t read_bytes;      /* buffer size the read probe used */
};

/* Measure the current device. read_bytes: buffer for the read probe (0: 4 GiB,
 * capped at half the free memory). Takes about a second. Returns CS_OK or
 * CS_ECUDA / CS_ENOMEM (logged). */
int cuda_probe_run(struct cuda_probe *p, size_t read_bytes);

#ifdef __cplusplus
}
#endif
#endif
