/* launch.h - the host-side switches of kernels/cuda/launch.cuh (programmatic
 * dependent launch), callable from C. */
#ifndef CS_CUDA_LAUNCH_H
#define CS_CUDA_LAUNCH_H

#include <stdbool.h>

struct CUstream_st;

#ifdef __cplusplus
extern "C" {
#endif

/* On (the default) or off for the process: off, every launch is plain
 * (configuration key cuda_pdl). */
void cuda_pdl_set_enabled(bool on);
bool cuda_pdl_enabled(void);
/* Whether a launch on s now may be a programmatic dependent: enabled, the
 * current device runs sm_90+ code, and s's previous op was a cuda_launch. */
bool cuda_pdl_allowed(struct CUstream_st *s);
/* __CUDA_ARCH__ of the kernels loaded for the current device (or device dev,
 * probed once with a one-thread launch): 900 for sm_90 code, 750 when a
 * build for sm_75 runs as PTX on a newer card; 1 when the probe failed. The
 * host enables sm_80/sm_90 paths (cp.async kernels, clusters, PDL) by this,
 * not by the device's compute capability. */
int cuda_code_arch_probe(int dev);
int cuda_code_arch(void);
/* s's latest op was a cuda_launch. */
void cuda_pdl_note_launch(struct CUstream_st *s);
/* A non-kernel op is being queued (on any stream): the next launch is plain. */
void cuda_pdl_barrier(void);

#ifdef __cplusplus
}
#endif

#endif
