/* kernel_trace.c - a CUPTI injection library: every kernel's and copy's GPU
 * start and end in an unmodified program, CUDA graph nodes included, with
 * the kernels overlapping as they do in the run (ncu serializes them, and
 * the device machines have no nsys). It answers what ncu cannot: how much
 * of a decode step each kernel holds on the critical path inside the graph,
 * under PDL (tests/gpu/kernel_trace_report.py; docs/PERF.md, twenty-second
 * session).
 *
 * Use (a diagnostic, not part of the product; CUDA loads the library itself):
 *   CUDA_INJECTION64_PATH=build/lib/libcs_kernel_trace.so \
 *   CS_KERNEL_TRACE=trace.csv cmpserve bench --model 9b.gguf --prompt-lens 64 --gen 32
 *   python3 tests/gpu/kernel_trace_report.py trace.csv
 * The CSV: start_ns,end_ns,graph_node,stream,blocks,name (mangled kernel
 * names; "[memcpy]" and "[memset]" rows for copies and fills). Timestamps
 * are CUPTI's GPU clock; rows come in buffer order, not sorted.
 * What tracing costs (H100, 9B decode): 3.4% of the step at depth 0, 7% at
 * 32K, nearly all of it a gap of ~0.14-0.28 ms before each graph's first
 * node (the report charges it to that kernel, k_rmsnorm in a decode step);
 * the kernels inside the graph run as they do untraced. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUF_BYTES ((size_t)8 << 20)

static FILE *trace_out;

static void CUPTIAPI trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, TRACE_BUF_BYTES);
    *size = *buffer ? TRACE_BUF_BYTES : 0;
    *max_records = 0;   /* as many as fit */
}

static void CUPTIAPI trace_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                            size_t size, size_t valid)
{
    (void)ctx;
    (void)stream_id;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (trace_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(trace_out, "%llu,%llu,%llu,%u,%lld,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, (unsigned long long)k->graphNodeId, k->streamId,
                    (long long)k->gridX * k->gridY * k->gridZ, k->name ? k->name : "?");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(trace_out, "%llu,%llu,%llu,%u,0,[memcpy]\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, (unsigned long long)m->graphNodeId, m->streamId);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(trace_out, "%llu,%llu,%llu,%u,0,[memset]\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, (unsigned long long)m->graphNodeId, m->streamId);
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
    free(buffer);
}

static void trace_finish(void)
{
    cuptiActivityFlushAll(1);
    if (trace_out) {
        fclose(trace_out);
        trace_out = NULL;
    }
}

/* Called by the CUDA driver at initialization when CUDA_INJECTION64_PATH
 * names this library. Returns 1 when tracing is on. */
int InitializeInjection(void)
{
    const char *path = getenv("CS_KERNEL_TRACE");
    trace_out = fopen(path && *path ? path : "kernel_trace.csv", "w");
    if (!trace_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
        return 0;
    }
    fprintf(trace_out, "start_ns,end_ns,graph_node,stream,blocks,name\n");
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) !=
            CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI activity tracing unavailable\n");
        fclose(trace_out);
        trace_out = NULL;
        return 0;
    }
    atexit(trace_finish);   /* registered after the runtime's own: runs before its teardown */
    return 1;
}
