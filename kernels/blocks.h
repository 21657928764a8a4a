/* Building blocks of the forward pass that its parts share (model.c defines them; layers.c and moe.c use them):
 * per-token steps over the pool, and matrix products cut into chunks of rows that the threads take. */
#ifndef LLK_BLOCKS_H
#define LLK_BLOCKS_H

#include "common.h"
#include "pool.h"

/* step(arg, t) for each token t < n_tok, over the pool for a batch of POOL_TOKENS or more (on the caller
 * alone for fewer); the steps of different tokens must touch different rows. */
typedef void (*token_step)(const void *arg, int t);
void each_token(llk_pool *pool, int n_tok, token_step step, const void *arg);

/* One weight matrix against n_tok activation rows: its rows are cut into chunks that the threads take in turn. */
typedef struct {
    const llk_tensor *w;
    const uint8_t *act;
    size_t act_row, w_row;
    int chunk, n_chunks, n_tok;
    float *out;
    int64_t out_stride;
    dot_fn dot;
    dot_cols_fn dot_cols;
    dot_rows_fn dot_rows2, dot_rows8;
    dot_group_fn dot_group; /* a repacked matrix: groups of GROUP_ROWS rows, chunks whole groups */
} matmul_part;

/* The part out[t * out_stride + r] = W[r] . act[t] for n_tok rows of activations (quantized for w's type,
 * act_row bytes apart), chunked for a pool of nth threads. */
matmul_part matmul_part_of(const llk_tensor *w, const void *act, int n_tok, float *out, int64_t out_stride, int nth);
/* The part's rows r0 .. r0 + chunk (a token's result does not depend on n_tok: see common.h's kernels). */
void matmul_chunk(const matmul_part *p, int64_t r0);
/* The n_parts products in one pool run, their chunks taken in turn by the threads; `then`: the matrix the
 * product after this one reads, read ahead in decode by threads left without a chunk (or NULL). */
void matmul_parts_run(llk_pool *pool, const matmul_part *parts, int n_parts, const llk_tensor *then);

#endif
