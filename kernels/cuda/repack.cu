/* repack.cu - weight upload: copies a ggml-layout tensor from host memory to
 * the device and rewrites it in the layout the matmul kernels read
 * (matmul.h "Device layouts"). Q8_0 is repacked on the GPU through a bounded
 * staging buffer (34-byte blocks are only 2-byte aligned; the kernels want
 * 16-byte loads coalesced over 32 rows); BF16 is widened to fp32 the same
 * way; F16 and F32 are copied as they are. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "../../common/gguf.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "matmul.h"

#define REPACK_STAGING_BYTES ((size_t)64 << 20)
#define REPACK_THREADS 256

/* One thread per (row, block) of the raw chunk: rows [row0, row0 + n_rows). */
static __global__ void repack_q8_0_kernel(uint8_t *q, __half *d, const uint16_t *raw, int64_t row0,
                                          int64_t n_rows, int64_t nb)
{
    int64_t i = (int64_t)blockIdx.x * REPACK_THREADS + threadIdx.x;
    if (i >= n_rows * nb)
        return;
    int64_t r = i / nb, b = i % nb;
    const uint16_t *src = raw + i * 17;   /* 34 bytes = 17 halfwords */
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        w[k] = (uint32_t)src[1 + 2 * k] | ((uint32_t)src[2 + 2 * k] << 16);
    int64_t row = row0 + r, g = row >> 5;
    int lane = (int)(row & 31);
    uint4 *dst = (uint4 *)(q + (g * nb + b) * 1024);
    dst[lane] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[32 + lane] = make_uint4(w[4], w[5], w[6], w[7]);
    d[(g * nb + b) * 32 + lane] = __ushort_as_half(src[0]);
}

static __global__ void widen_bf16_kernel(float *out, const uint16_t *in, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * REPACK_THREADS + threadIdx.x;
    if (i < n)
        out[i] = __uint_as_float((uint32_t)in[i] << 16);
}

/* Host bytes read so far: the copies below read pageable host memory before
 * they return, so the count is what the loader has consumed. */
struct upload_report {
    void (*fn)(void *ctx, uint64_t bytes_read);
    void *ctx;
};

static void report(const struct upload_report *r, uint64_t bytes_read)
{
    if (r && r->fn)
        r->fn(r->ctx, bytes_read);
}

static int upload_q8_0(struct cs_weight *w, int64_t n_in, int64_t n_out, const uint8_t *host,
                       cudaStream_t s, const struct upload_report *rep)
{
    int64_t nb = n_in / 32, groups = (n_out + 31) / 32;
    size_t qbytes = (size_t)groups * nb * 1024, dbytes = (size_t)groups * nb * 64;
    size_t row_raw = (size_t)nb * 34;
    int64_t chunk_rows = (int64_t)(REPACK_STAGING_BYTES / row_raw);
    if (chunk_rows < 1)
        chunk_rows = 1;
    if (chunk_rows > n_out)
        chunk_rows = n_out;
    void *mem = NULL, *staging = NULL;
    if (cudaMalloc(&mem, qbytes + dbytes) != cudaSuccess) {
        cudaGetLastError();
        LOG_ERROR("matmul", "no device memory for a Q8_0 weight bytes=%zu", qbytes + dbytes);
        return CS_ENOMEM;
    }
    if (cudaMalloc(&staging, (size_t)chunk_rows * row_raw) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(mem);
        LOG_ERROR("matmul", "no device memory for the upload staging buffer");
        return CS_ENOMEM;
    }
    w->data = mem;
    w->aux = (uint8_t *)mem + qbytes;
    w->bytes = qbytes + dbytes;
    int rc = CS_OK;
    if (cudaMemsetAsync(mem, 0, qbytes + dbytes, s) != cudaSuccess)
        rc = CS_ECUDA;
    for (int64_t r0 = 0; rc == CS_OK && r0 < n_out; r0 += chunk_rows) {
        int64_t nr = n_out - r0 < chunk_rows ? n_out - r0 : chunk_rows;
        if (cudaMemcpyAsync(staging, host + (size_t)r0 * row_raw, (size_t)nr * row_raw,
                            cudaMemcpyHostToDevice, s) != cudaSuccess) {
            rc = CS_ECUDA;
            break;
        }
        unsigned grid = cs_div_up((size_t)(nr * nb), REPACK_THREADS);
        repack_q8_0_kernel<<<grid, REPACK_THREADS, 0, s>>>((uint8_t *)w->data, (__half *)w->aux,
                                                           (const uint16_t *)staging, r0, nr, nb);
        if (cudaGetLastError() != cudaSuccess)
            rc = CS_ECUDA;
        report(rep, (uint64_t)(r0 + nr) * row_raw);
    }
    if (rc == CS_OK && cudaStreamSynchronize(s) != cudaSuccess)
        rc = CS_ECUDA;
    cudaFree(staging);
    if (rc != CS_OK)
        LOG_ERROR("matmul", "Q8_0 upload failed: %s", cudaGetErrorString(cudaGetLastError()));
    return rc;
}

static int upload_bf16(struct cs_weight *w, size_t n, const uint16_t *host, cudaStream_t s,
                       const struct upload_report *rep)
{
    size_t chunk = REPACK_STAGING_BYTES / 2;
    void *mem = NULL, *staging = NULL;
    if (cudaMalloc(&mem, n * 4) != cudaSuccess || cudaMalloc(&staging, chunk * 2) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(mem);
        LOG_ERROR("matmul", "no device memory for a BF16 weight bytes=%zu", n * 4);
        return CS_ENOMEM;
    }
    w->data = mem;
    w->bytes = n * 4;
    int rc = CS_OK;
    for (size_t i = 0; rc == CS_OK && i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        if (cudaMemcpyAsync(staging, host + i, m * 2, cudaMemcpyHostToDevice, s) != cudaSuccess)
            rc = CS_ECUDA;
        widen_bf16_kernel<<<cs_div_up(m, REPACK_THREADS), REPACK_THREADS, 0, s>>>(
            (float *)mem + i, (const uint16_t *)staging, (int64_t)m);
        if (cudaGetLastError() != cudaSuccess)
            rc = CS_ECUDA;
        report(rep, (uint64_t)(i + m) * 2);
    }
    if (rc == CS_OK && cudaStreamSynchronize(s) != cudaSuccess)
        rc = CS_ECUDA;
    cudaFree(staging);
    if (rc != CS_OK)
        LOG_ERROR("matmul", "BF16 upload failed");
    return rc;
}

static int upload_plain(struct cs_weight *w, size_t bytes, const void *host, cudaStream_t s,
                        const struct upload_report *rep)
{
    void *mem = NULL;
    if (cudaMalloc(&mem, bytes) != cudaSuccess) {
        cudaGetLastError();
        LOG_ERROR("matmul", "no device memory for a weight bytes=%zu", bytes);
        return CS_ENOMEM;
    }
    w->data = mem;
    w->bytes = bytes;
    for (size_t at = 0; at < bytes; at += REPACK_STAGING_BYTES) {
        size_t n = bytes - at < REPACK_STAGING_BYTES ? bytes - at : REPACK_STAGING_BYTES;
        CS_CUDA_CHECK(cudaMemcpyAsync((char *)mem + at, (const char *)host + at, n,
                                      cudaMemcpyHostToDevice, s));
        report(rep, at + n);
    }
    CS_CUDA_CHECK(cudaStreamSynchronize(s));
    return CS_OK;
}

extern "C" int cuda_weight_upload(struct cs_weight *w, uint32_t type, int64_t n_in, int64_t n_out,
                                  const void *host_data, struct CUstream_st *stream)
{
    return cuda_weight_upload_progress(w, type, n_in, n_out, host_data, stream, NULL, NULL);
}

extern "C" int cuda_weight_upload_progress(struct cs_weight *w, uint32_t type, int64_t n_in,
                                           int64_t n_out, const void *host_data,
                                           struct CUstream_st *stream,
                                           void (*progress)(void *ctx, uint64_t bytes_read),
                                           void *progress_ctx)
{
    cuda_pdl_barrier();   /* launch.cuh: copies and plain launches follow */
    struct upload_report rep = {progress, progress_ctx};
    if (!w)
        return CS_EINVAL;
    memset(w, 0, sizeof *w);
    if (!host_data || n_in <= 0 || n_out <= 0 || n_in > ((int64_t)1 << 30) || n_out > ((int64_t)1 << 30)) {
        LOG_ERROR("matmul", "bad weight shape n_in=%lld n_out=%lld", (long long)n_in, (long long)n_out);
        return CS_EINVAL;
    }
    int rc;
    size_t n = (size_t)n_in * (size_t)n_out;
    switch (type) {
    case CS_DTYPE_Q8_0:
        if (n_in % 32 != 0) {
            LOG_ERROR("matmul", "Q8_0 weight with n_in=%lld not a multiple of 32", (long long)n_in);
            return CS_EINVAL;
        }
        rc = upload_q8_0(w, n_in, n_out, (const uint8_t *)host_data, stream, &rep);
        break;
    case CS_DTYPE_F16:
        rc = upload_plain(w, n * 2, host_data, stream, &rep);
        break;
    case CS_DTYPE_F32:
        rc = upload_plain(w, n * 4, host_data, stream, &rep);
        break;
    case CS_DTYPE_BF16:
        rc = upload_bf16(w, n, (const uint16_t *)host_data, stream, &rep);
        type = CS_DTYPE_F32;
        break;
    default:
        LOG_ERROR("matmul", "weight type %u is not supported", (unsigned)type);
        return CS_EUNSUPPORTED;
    }
    if (rc != CS_OK) {
        cuda_weight_free(w);
        return rc;
    }
    w->type = type;
    w->n_in = n_in;
    w->n_out = n_out;
    return CS_OK;
}

extern "C" void cuda_weight_free(struct cs_weight *w)
{
    if (!w)
        return;
    if (w->data)
        cudaFree(w->data);
    memset(w, 0, sizeof *w);
}
