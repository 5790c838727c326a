/* gdn_chunked_shape.h - the shape of the chunked GDN form, shared by the
 * CUDA kernels (kernels/cuda/gdn_chunked.cu, the dispatch in gdn.cu) and the
 * CPU backend's mirror of them (kernels/cpu/gdn_chunked.c, dispatched by
 * kernels/cpu/gdn.c), so that both backends take the chunked form for the
 * same sequences and cut them into the same chunks.
 *
 * A sequence with at least GDN_CHUNKED_MIN_TOKENS tokens in a step takes the
 * chunked form on both backends (the others the token-by-token scan). Its
 * tokens of the step are cut into chunks of GDNC_C tokens aligned to its
 * first token of the step (the last chunk may be partial). The GPU runs the
 * batch in windows of GDNC_WIN batch tokens; a window owns the chunks that
 * start inside it, so windows change which launch computes a chunk, never
 * the arithmetic of one. */
#ifndef CS_KERNELS_GDN_CHUNKED_SHAPE_H
#define CS_KERNELS_GDN_CHUNKED_SHAPE_H

#define GDN_CHUNKED_MIN_TOKENS 512   /* tokens of a sequence in one step */
#define GDNC_C 64                    /* tokens per chunk */
#define GDNC_D 128                   /* key and value dim */
#define GDNC_WIN 2048                /* batch tokens per GPU window */

#endif
