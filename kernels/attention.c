/* Attention over the paged KV cache: the cache's layout, the reference tile kernels, and the work
 * split over the thread pool.
 *
 * Work items are (tokens, KV head, segments): the tokens of one sequence in a batch (a prefill
 * chunk's, up to ATTN_QUERIES queries with the heads of a GQA group) meet each K and V tile once
 * for all their queries; a sequence with a few tokens (decode) is split by segment over the threads
 * instead.  Batch invariance: a query's arithmetic is fixed by its position alone.  Its segments
 * (ATTN_SEG positions, by position) each get a softmax of their own, over the same tiles, and are
 * merged in position order; cells outside the query's range, in tiles it shares with other queries,
 * add exact zeros (their weights are 0, their V rows written, finite positions of the sequence).
 */
#include "attention.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "ops.h"

#define ATTN_SEG 512         /* positions of a segment: its scores stay in the thread's cache */
#define ATTN_QUERIES 48      /* queries of a work item (its tokens times the group's heads) */
#define ATTN_SPLIT_TOKENS 4  /* a sequence with at most this many tokens is split over segments */
#define SEG_TILES (ATTN_SEG / ATTN_TILE)

/* ---- the cache's layout ----------------------------------------------------- */

static size_t k_head_bytes(int type, int head_dim, int block_size) {
    size_t cells = (size_t)head_dim * block_size;
    return type == LLK_Q8_0 ? cells + cells / 32 * sizeof(f16_t) : cells * sizeof(f16_t);
}

static size_t v_row_bytes(int type, int kv_dim) {
    return type == LLK_Q8_0 ? (size_t)kv_dim / 32 * sizeof(block_q8_0) : (size_t)kv_dim * sizeof(f16_t);
}

int kv_cache_init(kv_cache *kv, int type, int n_layer, int n_head_kv, int head_dim, int block_size, const char **why) {
    *why = NULL;
    if (type != LLK_F16 && type != LLK_Q8_0) *why = "the KV cache type must be f16 or q8_0";
    else if (type == LLK_Q8_0 && head_dim % 32) *why = "a q8_0 KV cache needs heads of a multiple of 32 dimensions";
    else if (block_size < ATTN_TILE || block_size % ATTN_TILE) *why = "KV blocks must hold a multiple of 16 cells";
    if (*why) return -1;
    *kv = (kv_cache){.type = type, .n_layer = n_layer, .n_head_kv = n_head_kv, .head_dim = head_dim,
                     .block_size = block_size};
    while ((1 << kv->block_shift) < block_size) kv->block_shift++;
    kv->k_head_bytes = k_head_bytes(type, head_dim, block_size);
    kv->v_row_bytes = v_row_bytes(type, n_head_kv * head_dim);
    kv->layer_bytes = (size_t)n_head_kv * kv->k_head_bytes + (size_t)block_size * kv->v_row_bytes;
    kv->block_bytes = (size_t)n_layer * kv->layer_bytes;
    return 0;
}

/* Where `layer` of the block holding `pos` of the sequence `table` starts. */
static inline uint8_t *kv_layer(const kv_cache *kv, const int32_t *table, int layer, int pos) {
    return kv->base + (size_t)table[pos >> kv->block_shift] * kv->block_bytes + kv->offset +
           (size_t)layer * kv->layer_bytes;
}

static inline int kv_cell(const kv_cache *kv, int pos) { return pos & (kv->block_size - 1); }

/* K of KV head `kvh` at the cell of `pos`: tile[0] its codes (or halves), tile[1] its Q8_0 scales. */
static inline void kv_k_tile(const kv_cache *kv, const int32_t *table, int layer, int kvh, int pos, const void **tile) {
    uint8_t *head = kv_layer(kv, table, layer, pos) + (size_t)kvh * kv->k_head_bytes;
    int cell = kv_cell(kv, pos);
    if (kv->type == LLK_Q8_0) {
        tile[0] = head + cell;
        tile[1] = (const f16_t *)(head + (size_t)kv->head_dim * kv->block_size) + cell;
    } else {
        tile[0] = (const f16_t *)head + cell;
        tile[1] = NULL;
    }
}

static inline uint8_t *kv_v_row(const kv_cache *kv, const int32_t *table, int layer, int pos) {
    return kv_layer(kv, table, layer, pos) + (size_t)kv->n_head_kv * kv->k_head_bytes +
           (size_t)kv_cell(kv, pos) * kv->v_row_bytes;
}

/* ggml's reference Q8_0: d = amax / 127 kept in half precision, codes x / d rounded away from zero. */
static float quantize_32(const float *x, int8_t *codes, size_t code_stride) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; i++) codes[i * code_stride] = (int8_t)roundf(x[i] * id);
    return d;
}

void kv_store(const kv_cache *kv, const int32_t *table, int layer, int pos, const float *k, const float *v) {
    const int hd = kv->head_dim, bs = kv->block_size, cell = kv_cell(kv, pos);
    uint8_t *at = kv_layer(kv, table, layer, pos), *row = kv_v_row(kv, table, layer, pos);
    for (int h = 0; h < kv->n_head_kv; h++) {
        uint8_t *head = at + (size_t)h * kv->k_head_bytes;
        const float *kh = k + (size_t)h * hd;
        if (kv->type == LLK_Q8_0) {
            f16_t *scales = (f16_t *)(head + (size_t)hd * bs);
            for (int b = 0; b < hd / 32; b++)
                scales[b * bs + cell] = llk_f32_to_f16(quantize_32(kh + 32 * b, (int8_t *)head + (size_t)32 * b * bs + cell, bs));
        } else { /* converted a run at a time by the vector kernel, then spread over the dimensions' rows */
            f16_t run[64];
            for (int d0 = 0; d0 < hd; d0 += 64) {
                const int len = hd - d0 < 64 ? hd - d0 : 64;
                llk_kernels()->f32_to_f16(kh + d0, run, len);
                for (int d = 0; d < len; d++) ((f16_t *)head)[(size_t)(d0 + d) * bs + cell] = run[d];
            }
        }
    }
    const int kv_dim = kv->n_head_kv * hd;
    if (kv->type == LLK_Q8_0) {
        block_q8_0 *blocks = (block_q8_0 *)row;
        for (int b = 0; b < kv_dim / 32; b++) blocks[b].d = llk_f32_to_f16(quantize_32(v + 32 * b, blocks[b].qs, 1));
    } else {
        llk_kernels()->f32_to_f16(v, (f16_t *)row, kv_dim);
    }
}

/* ---- reference tile kernels (the SIMD levels give the same bits) ------------ */

void llk_attn_scores_f16_ref(const float *q, int n_q, int hd, const void *const *tiles, int n_tiles, int stride,
                             float *s, int s_stride) {
    for (int t = 0; t < n_tiles; t++) {
        const f16_t *k = tiles[2 * t];
        for (int i = 0; i < n_q; i++)
            for (int c = 0; c < ATTN_TILE; c++) {
                float acc = 0.0f;
                for (int d = 0; d < hd; d++) acc = fmaf(q[(size_t)i * hd + d], f16_to_f32(k[(size_t)d * stride + c]), acc);
                s[(size_t)i * s_stride + t * ATTN_TILE + c] = acc;
            }
    }
}

void llk_attn_scores_q8_ref(const float *q, int n_q, int hd, const void *const *tiles, int n_tiles,
                                     int stride, float *s, int s_stride) {
    for (int t = 0; t < n_tiles; t++) {
        const int8_t *codes = tiles[2 * t];
        const f16_t *scales = tiles[2 * t + 1];
        for (int i = 0; i < n_q; i++)
            for (int c = 0; c < ATTN_TILE; c++) {
                float acc = 0.0f;
                for (int b = 0; b < hd / 32; b++) {
                    float part = 0.0f;
                    for (int d = 32 * b; d < 32 * b + 32; d++)
                        part = fmaf(q[(size_t)i * hd + d], (float)codes[(size_t)d * stride + c], part);
                    acc = fmaf(part, f16_to_f32(scales[(size_t)b * stride + c]), acc);
                }
                s[(size_t)i * s_stride + t * ATTN_TILE + c] = acc;
            }
    }
}

void llk_attn_accum_f16_ref(const float *p, int n_q, int p_stride, const void *const *tiles, int n_tiles,
                                     int last_cells, size_t row_bytes, int hd, float *acc) {
    for (int t = 0; t < n_tiles; t++)
        for (int c = 0; c < (t == n_tiles - 1 ? last_cells : ATTN_TILE); c++) {
            const f16_t *v = (const f16_t *)((const uint8_t *)tiles[2 * t] + c * row_bytes);
            for (int i = 0; i < n_q; i++) {
                const float w = p[(size_t)i * p_stride + t * ATTN_TILE + c];
                for (int d = 0; d < hd; d++) acc[(size_t)i * hd + d] = fmaf(w, f16_to_f32(v[d]), acc[(size_t)i * hd + d]);
            }
        }
}

void llk_attn_accum_q8_ref(const float *p, int n_q, int p_stride, const void *const *tiles, int n_tiles,
                                    int last_cells, size_t row_bytes, int hd, float *acc) {
    for (int t = 0; t < n_tiles; t++)
        for (int c = 0; c < (t == n_tiles - 1 ? last_cells : ATTN_TILE); c++) {
            const block_q8_0 *v = (const block_q8_0 *)((const uint8_t *)tiles[2 * t] + c * row_bytes);
            for (int i = 0; i < n_q; i++) {
                const float w = p[(size_t)i * p_stride + t * ATTN_TILE + c];
                for (int b = 0; b < hd / 32; b++) {
                    const float wd = w * f16_to_f32(v[b].d);
                    float *a = acc + (size_t)i * hd + 32 * b;
                    for (int d = 0; d < 32; d++) a[d] = fmaf(wd, (float)v[b].qs[d], a[d]);
                }
            }
        }
}

float llk_attn_softmax_ref(float *s, int n, int lo, int hi, float scale, float *max_out) {
    float max = -INFINITY, lanes[16] = {0};
    for (int i = lo; i <= hi; i++) max = fmaxf(max, s[i]);
    max *= scale; /* scale > 0: the largest product is the product of the largest */
    for (int i = 0; i < n; i++) {
        s[i] = i < lo || i > hi ? 0.0f : llk_expf(fmaf(s[i], scale, -max));
        lanes[i % 16] += s[i];
    }
    const float sum = llk_reduce16(lanes), inv = 1.0f / sum;
    for (int i = 0; i < n; i++) s[i] = round_f16(s[i] * inv);
    *max_out = max;
    return sum;
}

void llk_fill_attention_ref(kernel_table *t) {
    t->attn_scores[0] = llk_attn_scores_f16_ref;
    t->attn_scores[1] = llk_attn_scores_q8_ref;
    t->attn_accum[0] = llk_attn_accum_f16_ref;
    t->attn_accum[1] = llk_attn_accum_q8_ref;
    t->attn_softmax = llk_attn_softmax_ref;
}

/* ---- work items over the pool ----------------------------------------------- */

typedef struct {
    int t0, n, kvh;
    int seg; /* < 0: all the tokens' segments, merged here; else this one, stored for merging after */
} attn_item;

struct attention {
    int n_threads, n_head, n_head_kv, hd, group, max_queries, max_tokens, n_seg, n_batch;
    size_t per_thread; /* floats of scratch per thread */
    size_t held;       /* bytes of scratch, tiles and slot */
    float *scratch;
    const void **tiles; /* per thread: SEG_TILES K tiles, then SEG_TILES V tiles, two pointers each */
    attn_item *items;
    int *slot;          /* [token]: its row in parts (a split sequence's token), or -1 */
    float *parts;       /* [slot][head][segment]: max, sum, then head_dim sums */
    size_t cap_items, cap_parts;
};

typedef struct {
    attention *a;
    const kv_cache *kv;
    int layer, window, n_items;
    float scale;
    const int32_t *pos;
    const int32_t *const *tables;
    const float *q;
    const float *sinks; /* [head] or NULL */
    float *out;
} attn_job;

static size_t part_floats(const attention *a) { return 2 + (size_t)a->hd; }

attention *attention_new(int n_threads, int n_head, int n_head_kv, int head_dim, int n_batch, int max_seq_len) {
    attention *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->n_threads = n_threads;
    a->n_head = n_head;
    a->n_head_kv = n_head_kv;
    a->hd = head_dim;
    a->group = n_head / n_head_kv;
    a->max_tokens = ATTN_QUERIES / a->group > 0 ? ATTN_QUERIES / a->group : 1;
    a->max_queries = a->max_tokens * a->group;
    a->n_seg = (max_seq_len + ATTN_SEG - 1) / ATTN_SEG;
    a->n_batch = n_batch;
    a->per_thread = (size_t)a->max_queries * (3 * head_dim + ATTN_SEG + 4);
    const size_t scratch = (size_t)n_threads * a->per_thread * sizeof(float);
    const size_t tiles = (size_t)n_threads * 4 * SEG_TILES * sizeof(void *), slot = (size_t)n_batch * sizeof(int);
    a->scratch = malloc(scratch);
    a->tiles = malloc(tiles);
    a->slot = malloc(slot);
    a->held = scratch + tiles + slot;
    if (!a->scratch || !a->tiles || !a->slot) {
        attention_free(a);
        return NULL;
    }
    return a;
}

size_t attention_bytes(const attention *a, int n_seq, int window) {
    /* plan() gives each split token a slot of parts, each (token run, KV head, segment it reaches) an item, and the
     * other runs' tiles of queries an item per KV head (a token at least); over a window a token's segments are a
     * few of its slot's, and the others never written */
    const size_t split = (size_t)n_seq * ATTN_SPLIT_TOKENS < (size_t)a->n_batch ? (size_t)n_seq * ATTN_SPLIT_TOKENS
                                                                                 : (size_t)a->n_batch;
    const int near = (window + ATTN_SPLIT_TOKENS - 1) / ATTN_SEG + 2, reach = window && near < a->n_seg ? near : a->n_seg;
    const size_t items = (split * reach + (size_t)a->n_batch) * a->n_head_kv;
    return a->held + items * sizeof(attn_item) + split * a->n_head * reach * part_floats(a) * sizeof(float);
}

void attention_free(attention *a) {
    if (!a) return;
    free(a->scratch);
    free(a->tiles);
    free(a->items);
    free(a->slot);
    free(a->parts);
    free(a);
}

static int first_pos(int pos, int window) { return window && pos >= window ? pos - window + 1 : 0; }

/* A query's (max, sum, output) so far merged with a segment's: the outputs weighed by their sums
 * rescaled to the larger max (the first segment's output is taken as it is). */
static void merge(float *max, float *sum, float *out, float seg_max, float seg_sum, const float *seg_out, int hd) {
    const float m = fmaxf(*max, seg_max), a = *sum * llk_expf(*max - m), b = seg_sum * llk_expf(seg_max - m);
    const float total = a + b, wa = a / total, wb = b / total;
    for (int d = 0; d < hd; d++) out[d] = out[d] * wa + seg_out[d] * wb;
    *max = m;
    *sum = total;
}

/* A head's output with its learned sink logit in the softmax (as ggml's soft_max with sinks): the sink enters
 * the max and the denominator, not the output, so the weighted values shrink by sum / (sum + e^sink). */
static void add_sink(float *out, float max, float sum, float sink, int hd) {
    const float m = fmaxf(max, sink), a = sum * llk_expf(max - m), b = llk_expf(sink - m);
    const float keep = a / (a + b);
    for (int d = 0; d < hd; d++) out[d] *= keep;
}

static void run_item(const attn_job *j, const attn_item *it, float *scratch, const void **tiles) {
    const attention *a = j->a;
    const kv_cache *kv = j->kv;
    const kernel_table *k = llk_kernels();
    const int hd = a->hd, group = a->group, nq = it->n * group, q8 = kv->type == LLK_Q8_0;
    const int32_t *table = j->tables[it->t0];
    float *q = scratch, *s = q + (size_t)a->max_queries * hd, *acc = s + (size_t)a->max_queries * ATTN_SEG;
    float *total = acc + (size_t)a->max_queries * hd, *max = total + (size_t)a->max_queries * hd;
    float *sum = max + a->max_queries, *total_max = sum + a->max_queries, *total_sum = total_max + a->max_queries;
    const void **v_tiles = tiles + 2 * SEG_TILES;
    int lo = INT_MAX, hi = -1;
    for (int i = 0; i < it->n; i++) {
        const int t = it->t0 + i, p = j->pos[t];
        lo = first_pos(p, j->window) < lo ? first_pos(p, j->window) : lo;
        hi = p > hi ? p : hi;
        memcpy(q + (size_t)i * group * hd, j->q + ((size_t)t * a->n_head + (size_t)it->kvh * group) * hd,
               (size_t)group * hd * sizeof(float));
    }
    const int seg_first = it->seg < 0 ? lo / ATTN_SEG : it->seg, seg_last = it->seg < 0 ? hi / ATTN_SEG : it->seg;
    for (int i = 0; i < nq; i++) {
        total_max[i] = -INFINITY;
        total_sum[i] = 0.0f;
    }
    memset(total, 0, (size_t)nq * hd * sizeof(float));
    for (int seg = seg_first; seg <= seg_last; seg++) {
        const int seg_lo = seg * ATTN_SEG, seg_hi = seg_lo + ATTN_SEG - 1;
        const int c0 = lo > seg_lo ? lo : seg_lo, c1 = hi < seg_hi ? hi : seg_hi;
        const int tile0 = c0 / ATTN_TILE, n_tiles = c1 / ATTN_TILE - tile0 + 1, base = tile0 * ATTN_TILE;
        for (int t = 0; t < n_tiles; t++) {
            kv_k_tile(kv, table, j->layer, it->kvh, base + t * ATTN_TILE, tiles + 2 * t);
            v_tiles[2 * t] = kv_v_row(kv, table, j->layer, base + t * ATTN_TILE) + (size_t)it->kvh * (kv->v_row_bytes / kv->n_head_kv);
        }
        k->attn_scores[q8](q, nq, hd, tiles, n_tiles, kv->block_size, s, ATTN_SEG);
        for (int i = 0; i < nq; i++) {
            const int p = j->pos[it->t0 + i / group], first = first_pos(p, j->window);
            const int from = first > seg_lo ? first : seg_lo, to = p < seg_hi ? p : seg_hi;
            float *row = s + (size_t)i * ATTN_SEG;
            if (from > to) { /* none of its positions here: it takes no part */
                memset(row, 0, (size_t)n_tiles * ATTN_TILE * sizeof(float));
                max[i] = -INFINITY;
                sum[i] = 0.0f;
            } else {
                sum[i] = k->attn_softmax(row, n_tiles * ATTN_TILE, from - base, to - base, j->scale, &max[i]);
            }
        }
        memset(acc, 0, (size_t)nq * hd * sizeof(float));
        k->attn_accum[q8](s, nq, ATTN_SEG, v_tiles, n_tiles, c1 - (base + (n_tiles - 1) * ATTN_TILE) + 1,
                          kv->v_row_bytes, hd, acc);
        for (int i = 0; i < nq; i++) {
            if (it->seg >= 0) {
                const int t = it->t0 + i / group, h = it->kvh * group + i % group;
                float *part = a->parts + (((size_t)a->slot[t] * a->n_head + h) * a->n_seg + seg) * part_floats(a);
                part[0] = max[i];
                part[1] = sum[i];
                memcpy(part + 2, acc + (size_t)i * hd, (size_t)hd * sizeof(float));
            } else if (max[i] > -INFINITY) {
                merge(&total_max[i], &total_sum[i], total + (size_t)i * hd, max[i], sum[i], acc + (size_t)i * hd, hd);
            }
        }
    }
    if (it->seg >= 0) return;
    for (int i = 0; i < nq; i++) {
        const int t = it->t0 + i / group, h = it->kvh * group + i % group;
        if (j->sinks) add_sink(total + (size_t)i * hd, total_max[i], total_sum[i], j->sinks[h], hd);
        memcpy(j->out + ((size_t)t * a->n_head + h) * hd, total + (size_t)i * hd, (size_t)hd * sizeof(float));
    }
}

static void attn_task(void *arg, int item, int ith) {
    attn_job *j = arg;
    float *scratch = j->a->scratch + (size_t)ith * j->a->per_thread;
    const void **tiles = j->a->tiles + (size_t)ith * 4 * SEG_TILES;
    run_item(j, &j->a->items[item], scratch, tiles);
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    void *q = realloc(*p, need * size);
    if (!q) return -1;
    *p = q;
    *cap = need;
    return 0;
}

/* Tokens of an item for a run of n tokens whose items each cover `spans` (segments, or 1) per KV head:
 * at most max_tokens, and few enough that the run gives every thread two items where it can (a verified
 * draft is one sequence's few tokens; Gemma 3 has one KV head). */
static int tokens_per_item(const attention *a, int n, int spans) {
    const int per_token = spans * a->n_head_kv, wanted = 2 * a->n_threads;
    const int runs = (wanted + per_token - 1) / per_token, per = (n + runs - 1) / runs;
    return per < a->max_tokens ? per : a->max_tokens;
}

/* The items of a batch: each sequence's tokens (consecutive positions of one table) as tiles of
 * queries over all segments, or, a few tokens, one item per segment (that its tokens reach) with a row
 * of parts each; a run of few tokens is cut into smaller tiles where its items would leave a thread idle. */
static int plan(attention *a, int n_tok, const int32_t *pos, const int32_t *const *tables, int window, int *n_items,
                int *n_slots) {
    size_t count = 0, slots = 0;
    for (int pass = 0; pass < 2; pass++) {
        count = slots = 0;
        for (int i = 0, end; i < n_tok; i = end) {
            for (end = i + 1; end < n_tok && tables[end] == tables[i] && pos[end] == pos[end - 1] + 1;) end++;
            const int n = end - i;
            if (n > ATTN_SPLIT_TOKENS) {
                const int per = tokens_per_item(a, n, 1);
                for (int t0 = i; t0 < end; t0 += per)
                    for (int h = 0; h < a->n_head_kv; h++, count++)
                        if (pass) a->items[count] = (attn_item){t0, end - t0 < per ? end - t0 : per, h, -1};
                for (int t = i; t < end && pass; t++) a->slot[t] = -1;
                continue;
            }
            const int per = tokens_per_item(a, n, pos[end - 1] / ATTN_SEG - first_pos(pos[i], window) / ATTN_SEG + 1);
            for (int t0 = i, m; t0 < end; t0 += m) {
                m = end - t0 < per ? end - t0 : per; /* the segments its tokens reach: */
                for (int seg = first_pos(pos[t0], window) / ATTN_SEG; seg <= pos[t0 + m - 1] / ATTN_SEG; seg++)
                    for (int h = 0; h < a->n_head_kv; h++, count++)
                        if (pass) a->items[count] = (attn_item){t0, m, h, seg};
            }
            for (int t = i; t < end; t++, slots++)
                if (pass) a->slot[t] = (int)slots;
        }
        if (!pass && (grow((void **)&a->items, &a->cap_items, count, sizeof(attn_item)) ||
                      grow((void **)&a->parts, &a->cap_parts, slots * a->n_head * a->n_seg * part_floats(a), sizeof(float))))
            return -1;
    }
    *n_items = (int)count;
    *n_slots = (int)slots;
    return 0;
}

int attention_run(attention *a, llk_pool *pool, const kv_cache *kv, int layer, int n_tok, const int32_t *pos,
                  const int32_t *const *tables, const float *q, int window, float scale, const float *sinks, float *out) {
    attn_job j = {.a = a, .kv = kv, .layer = layer, .window = window, .scale = scale, .pos = pos, .tables = tables,
                  .q = q, .sinks = sinks, .out = out};
    int n_slots;
    if (plan(a, n_tok, pos, tables, window, &j.n_items, &n_slots)) return -1;
    llk_pool_run(pool, attn_task, &j, j.n_items);
    if (!n_slots) return 0;
    for (int t = 0; t < n_tok; t++) { /* the split tokens: their segments merged in order */
        if (a->slot[t] < 0) continue;
        for (int h = 0; h < a->n_head; h++) {
            const float *parts = a->parts + ((size_t)a->slot[t] * a->n_head + h) * a->n_seg * part_floats(a);
            float max = -INFINITY, sum = 0.0f, *o = out + ((size_t)t * a->n_head + h) * a->hd;
            memset(o, 0, (size_t)a->hd * sizeof(float));
            for (int seg = first_pos(pos[t], window) / ATTN_SEG; seg <= pos[t] / ATTN_SEG; seg++) {
                const float *part = parts + (size_t)seg * part_floats(a);
                if (part[0] > -INFINITY) merge(&max, &sum, o, part[0], part[1], part + 2, a->hd);
            }
            if (sinks) add_sink(o, max, sum, sinks[h], a->hd);
        }
    }
    return 0;
}
