/* The paged KV cache's layout and attention over it (internal to the library).
 *
 * A block holds block_size cells (a multiple of ATTN_TILE) of every layer: per layer first K, one
 * part per KV head laid out [dimension][cell] (a tile's cells of one dimension are adjacent, so the
 * scores of a tile are one vector per query), then V, [cell][kv_dim] as the rows come.  In Q8_0 a
 * K part is the codes [dimension][cell] then the scales [dimension / 32][cell] (each cell's row
 * quantized by 32 dimensions, as ggml's Q8_0), and a V row is ggml's Q8_0 blocks.
 */
#ifndef LLK_ATTENTION_H
#define LLK_ATTENTION_H

#include "common.h"
#include "pool.h"

typedef struct {
    uint8_t *base;
    int type; /* LLK_F16 or LLK_Q8_0 */
    int n_layer, n_head_kv, head_dim, block_size, block_shift;
    size_t k_head_bytes; /* one block's K of one KV head in one layer */
    size_t v_row_bytes;  /* one cell's V (all KV heads) */
    size_t layer_bytes, block_bytes;
    /* where this layout's layers start in a block: a model whose layers have two head geometries (Gemma 4's
     * sliding and global layers) keeps two layouts in one block, the second's after the first's layers */
    size_t offset;
} kv_cache;

/* The layout for these dimensions; 0, or -1 (with *why set) for a type or shape it cannot hold. */
int kv_cache_init(kv_cache *kv, int type, int n_layer, int n_head_kv, int head_dim, int block_size, const char **why);
/* Write the K and V rows (kv_dim floats each) of the token at `pos` of the sequence `table` in `layer`. */
void kv_store(const kv_cache *kv, const int32_t *table, int layer, int pos, const float *k, const float *v);

typedef struct attention attention;

attention *attention_new(int n_threads, int n_head, int n_head_kv, int head_dim, int n_batch, int max_seq_len);
void attention_free(attention *a);
/* The bytes a holds, and the most the partial results of its split tokens (ATTN_SPLIT_TOKENS at most of a
 * sequence: decode, a short draft) fill over batches of n_seq sequences, each a run of consecutive positions, on
 * layers of that window (0: none; the parts past a window are allocated, never written, so never resident). */
size_t attention_bytes(const attention *a, int n_seq, int window);

/* out[t] = attention of the n_tok queries q[t] ([n_head][head_dim], q_dim apart) over the positions
 * first..pos[t] of their sequences (first = pos - window + 1 on a sliding layer), scores times
 * `scale`, with each head's sink logit (sinks[head], unscaled) in its softmax where sinks is not NULL.  Each token's result depends only on its own position and sequence: the cache is read
 * in segments of ATTN_SEG positions fixed by position, each a softmax of its own, the segments
 * merged in position order, whether a token is alone, one of a prefill chunk's tiles, or split
 * over threads.  0, or -1 out of memory. */
int attention_run(attention *a, llk_pool *pool, const kv_cache *kv, int layer, int n_tok, const int32_t *pos,
                  const int32_t *const *tables, const float *q, int window, float scale, const float *sinks, float *out);

#endif
