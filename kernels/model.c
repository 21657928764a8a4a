/* The native forward pass over a paged KV cache: the embedding, each layer by its architecture's recipe
 * (recipe.h: arch_*.c over the blocks of layers.c; a mixture-of-experts feed-forward in moe.c, over the
 * products this file shares through blocks.h and forward.h), the output norm and head.
 *
 * One llk_decode call evaluates a whole batch (tokens of several sequences at
 * their positions) through every layer; Python is not involved per layer.
 * Weights are read in place from the mapped GGUF, or from the copies repacked at
 * load (repack.c).
 *
 * The KV cache is a pool of fixed-size blocks, in half floats or Q8_0.  A
 * sequence is a block table: the token at position p lives in cell
 * p % block_size of block table[p / block_size].  Blocks are owned by the
 * caller (reference counts, prefix sharing, eviction live in Python); this
 * file only writes the cells the tables name, and attention (attention.c,
 * which alone knows the blocks' layout) reads them.  A token attends to positions
 * 0..p of its own table (causal, and the sliding window on the layers that
 * have one), so the tokens of one batch are written to the cache before any
 * of them attends.
 *
 * Batch invariance: every step reduces in an order fixed by the token's own
 * position, never by the batch.  Matrix rows are dotted one at a time (the
 * multi-row and multi-column kernels give each row its single-row result, and
 * a repacked group's kernel takes each token through the same operations),
 * and attention reduces a token's cells in segments and tiles fixed by
 * position (attention.h), whatever block each cell sits in, however the prompt
 * was chunked and whatever else is in the batch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "forward.h"

/* ---- mapping ------------------------------------------------------------ */

const void *llk_map_file(const char *path, int64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    *size = st.st_size;
    return p;
}

void llk_unmap_file(const void *base, int64_t size) {
    if (base) munmap((void *)base, (size_t)size);
}

/* ---- context ------------------------------------------------------------ */

static void *zalloc(size_t n) {
    /* zeroed pages, faulted in as blocks are first written and by llk_kv_populate while the engine is idle,
     * not all at load by MAP_POPULATE; in huge pages where the kernel has them for the asking: a restarted
     * runner copying its prompt's blocks back from disk took a 4 KiB page fault per 4 KiB (2/3 of its
     * restore time), and attention reads the pool with fewer TLB misses */
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n ? n : 1, MADV_HUGEPAGE); /* advice only: without it (THP off) the pool works as before */
#endif
    return p;
}

static void zfree(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

/* A buffer of c's, counted in its part of c->held (llk_ctx_memory): from malloc, or zeroed pages (ztake: the
 * pool, the rings and the states), of which a planning context (llk_ctx_plan) takes only the address space. */
static void *take(llk_ctx *c, int part, size_t n) {
    c->held[part] += n;
    return malloc(n);
}

static void *ztake(llk_ctx *c, int part, size_t n) {
    c->held[part] += n;
    if (!c->planning) return zalloc(n);
    void *p = mmap(NULL, n ? n : 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t kv_bytes(const llk_ctx *c) { return (size_t)c->n_blocks * c->kv.block_bytes; }

void llk_kv_populate(llk_ctx *c, size_t offset, size_t len) {
    size_t n = kv_bytes(c);
    if (offset >= n) return;
    if (len > n - offset) len = n - offset;
    uint8_t *p = (uint8_t *)c->kv.base + offset;
#ifdef MADV_POPULATE_WRITE
    /* Faults in pages that are not there yet and leaves present ones (and what they hold) alone. */
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return;
#endif
    /* A kernel without it (before 5.14, or a sandbox's): a write to every page does the same. An atomic
     * or of zero changes no byte, even one that a block copy on another thread writes at that moment. */
    for (size_t at = 0; at < len; at += 4096) __atomic_fetch_or(p + at, (uint8_t)0, __ATOMIC_RELAXED);
}

void llk_ctx_free(llk_ctx *c) {
    if (!c) return;
    llk_pool_free(c->pool);
    zfree(c->kv.base, kv_bytes(c));
    attention_free(c->attn);
    attention_free(c->attn_alt);
    attention_free(c->attn_win);
    if (c->kv_win.base) zfree(c->kv_win.base, (size_t)c->n_seq * c->ring_len * c->kv_win.block_bytes);
    free(c->ring_tables);
    free(c->ring_table_of);
    free(c->kv_slot);
    free(c->kv_of);
    moe_scratch_free(c->moe);
    free(c->layers);
    free(c->state_layer);
    if (c->state) zfree(c->state, c->state_bytes * (size_t)c->n_seq);
    free(c->next_pos);
    free(c->conv_of);
    free(c->ssm_of);
    free(c->capture_of);
    free(c->snap_of);
    free(c->rope_scale);
    free(c->yarn);
    float *bufs[] = {c->x, c->xn, c->q, c->k, c->v, c->att, c->o, c->g, c->u, c->cs, c->ple, c->ple_gate,
                     c->router_in, c->experts_out, c->mix, c->z, c->beta, c->decay, c->qg, c->sh, c->sh_gate};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(c->pos_of);
    free(c->seq_of);
    free(c->table_of);
    for (int i = 0; i < 3; i++) free(c->act[i]);
    free(c);
}

const char *llk_ctx_error(const llk_ctx *c) { return c ? c->error : "out of memory"; }

static int fail(llk_ctx *c, int code, const char *fmt, long a, long b) {
    snprintf(c->error, sizeof c->error, fmt, a, b);
    return code;
}

static int max_i(int a, int b) { return a > b ? a : b; }

/* Each layer's geometry where the model leaves it to the model's (llk_layer: 0), and where its KV lives (c->kv_of):
 * the layers with KV of their own numbered in their cache, a shared layer reading its kv_source's, a recurrent
 * layer (Gated DeltaNet) none (kv_slot -1).  The pool's blocks hold the layers of the first pooled layer's head
 * geometry (kv), then those of the one other (kv_alt) if any; with window_kv the sliding layers' KV is in the
 * sequences' rings instead (kv_win, one geometry).  0, or -1 with c->error saying why the model does not fit. */
static int place_kv(llk_ctx *c) {
    const llk_model *m = &c->m;
    const int n_kv = m->n_layer_kv ? m->n_layer_kv : m->n_layer;
    int count[3] = {0, 0, 0}, first = -1;
    if (n_kv < 1 || n_kv > m->n_layer) return fail(c, -1, "%ld layers with KV of their own, of %ld", n_kv, m->n_layer);
    for (int il = 0; il < m->n_layer; il++) {
        llk_layer *L = &c->layers[il];
        if (!L->head_dim) L->head_dim = m->head_dim;
        if (!L->n_head_kv) L->n_head_kv = m->n_head_kv;
        if (!L->rope_dim) L->rope_dim = m->rope_dim;
        if (L->n_head_kv < 1 || m->n_head % L->n_head_kv)
            return fail(c, -1, "layer %ld: %ld KV heads do not divide the query heads", il, L->n_head_kv);
        if (L->rope_dim > L->head_dim) return fail(c, -1, "layer %ld: rotary dimensions past its head of %ld", il, L->head_dim);
        if (first < 0 && !L->ssm_qkv.data && !(c->window_kv && L->sliding)) first = il;
    }
    if (first < 0) { /* every attention layer slides (nothing would be left in the pool: they stay there), or none */
        c->window_kv = 0;
        for (first = 0; first < m->n_layer - 1 && c->layers[first].ssm_qkv.data;) first++;
    }
    const llk_layer *F = &c->layers[first];
    kv_cache *cache[3] = {&c->kv, &c->kv_alt, &c->kv_win};
    for (int il = 0; il < m->n_layer; il++) {
        llk_layer *L = &c->layers[il];
        if (L->ssm_qkv.data) { /* its state is per sequence (c->state), not in the blocks */
            c->kv_of[il] = KV_POOL;
            c->kv_slot[il] = -1;
            continue;
        }
        const int where = c->window_kv && L->sliding ? KV_WIN
                          : L->head_dim != F->head_dim || L->n_head_kv != F->n_head_kv ? KV_ALT : KV_POOL;
        kv_cache *kv = cache[where];
        if (where != KV_POOL && count[where] && (L->head_dim != kv->head_dim || L->n_head_kv != kv->n_head_kv))
            return fail(c, -1, where == KV_WIN ? "layer %ld: sliding layers of two head geometries (%ld dimensions)"
                                               : "layer %ld: a third head geometry (%ld dimensions); at most two fit",
                        il, L->head_dim);
        if (il < n_kv) {
            c->kv_of[il] = (int8_t)where;
            c->kv_slot[il] = count[where]++;
            kv->head_dim = L->head_dim, kv->n_head_kv = L->n_head_kv;
            continue;
        }
        const int src = L->kv_source;
        if (src < 0 || src >= n_kv || c->kv_slot[src] < 0 || c->kv_of[src] != where)
            return fail(c, -1, "layer %ld shares the KV of layer %ld, which has none of its kind", il, src);
        c->kv_of[il] = (int8_t)where;
        c->kv_slot[il] = c->kv_slot[src];
    }
    const char *why = NULL;
    for (int w = KV_POOL; w <= KV_WIN && !why; w++)
        if (w == KV_POOL || count[w])
            kv_cache_init(cache[w], c->kv_type, count[w], w == KV_POOL ? F->n_head_kv : cache[w]->n_head_kv,
                          w == KV_POOL ? F->head_dim : cache[w]->head_dim, c->block_size, &why);
    if (why) {
        snprintf(c->error, sizeof c->error, "%s", why);
        return -1;
    }
    if (count[KV_ALT]) { /* one block: the first layout's layers, then the other's */
        c->kv_alt.offset = c->kv.block_bytes;
        c->kv.block_bytes = c->kv_alt.block_bytes = c->kv.block_bytes + c->kv_alt.block_bytes;
    }
    if (!count[KV_WIN]) c->window_kv = 0;
    return 0;
}

/* Blocks of a sequence's ring: those of a batch's positions and the window before its first, which may start
 * inside a block. */
static int ring_blocks(int n_batch, int window, int block_size) { return (n_batch + window - 2) / block_size + 2; }

/* The sliding layers' rings (window_kv): sequence s keeps block b of its positions in block s * ring_len + b %
 * ring_len of kv_win.  A batch of n_batch tokens from position a reads and writes the blocks of positions
 * a - window + 1 .. a + n_batch - 1, which ring_len keeps apart; a state snapshot holds the snap_blocks blocks
 * ending at its last position, all that the next token's window reaches.  0, or -1 for no memory. */
static int make_rings(llk_ctx *c) {
    const int bs = c->block_size, window = c->m.sliding_window;
    c->ring_len = ring_blocks(c->n_batch, window, bs);
    c->snap_blocks = (window + bs - 1) / bs + 1;
    if (c->snap_blocks > c->ring_len) c->snap_blocks = c->ring_len;
    c->ring_table_len = (c->max_seq_len + bs - 1) / bs;
    c->kv_win.base = ztake(c, MEM_RINGS, (size_t)c->n_seq * c->ring_len * c->kv_win.block_bytes);
    c->ring_tables = take(c, MEM_SCRATCH, sizeof(int32_t) * (size_t)c->n_seq * c->ring_table_len);
    c->ring_table_of = take(c, MEM_SCRATCH, sizeof(int32_t *) * (size_t)c->n_batch);
    if (!c->kv_win.base || !c->ring_tables || !c->ring_table_of) return -1;
    for (int s = 0; s < c->n_seq; s++)
        for (int b = 0; b < c->ring_table_len; b++)
            c->ring_tables[(size_t)s * c->ring_table_len + b] = s * c->ring_len + b % c->ring_len;
    return 0;
}

/* Whether keeping the sliding layers' window only saves memory: a ring shorter than a sequence's blocks. */
static int window_pays(const llk_model *m, int block_size, int max_seq_len, int n_batch) {
    if (m->sliding_window < 1) return 0;
    return (int64_t)ring_blocks(n_batch, m->sliding_window, block_size) * block_size < max_seq_len;
}

/* NULL for llk_ctx_new, with why (if given) saying why: c->error where a step set it, else `reason`. */
static llk_ctx *refuse(llk_ctx *c, char *why, const char *reason) {
    if (why) snprintf(why, LLK_ERROR_LEN, "%s", c && c->error[0] ? c->error : reason);
    llk_ctx_free(c);
    return NULL;
}

/* llk_ctx_new, or with `planning` llk_ctx_plan's context: the same allocations, the pool's, the rings' and the
 * states' as address space only, and no threads. */
static llk_ctx *ctx_new(const llk_model *model, int n_blocks, int block_size, int max_seq_len, int n_batch,
                        int n_threads, int kv_type, int n_seq, int window_kv, int planning, char *why) {
    if (n_blocks < 1 || block_size < 1 || (block_size & (block_size - 1)) || max_seq_len < 1 || n_batch < 1 ||
        n_seq < 1)
        return refuse(NULL, why, "bad arguments: block counts, sizes, lengths and sequences must be positive "
                                 "(the block size a power of two)");
    int n_state_layers = 0;
    for (int l = 0; l < model->n_layer; l++) n_state_layers += model->layers[l].ssm_qkv.data != NULL;
    llk_ctx *c = calloc(1, sizeof *c);
    if (!c) return refuse(NULL, why, "out of memory");
    c->m = *model;
    c->planning = planning;
    c->recipe = llk_recipe_of(model->arch);
    const llk_model *m = &c->m;
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    c->kv_type = kv_type;
    while ((1 << c->block_shift) < block_size) c->block_shift++;
    c->max_seq_len = max_seq_len;
    c->n_batch = n_batch;
    c->n_seq = n_seq;
    c->window_kv = window_kv && window_pays(model, block_size, max_seq_len, n_batch);
    c->layers = take(c, MEM_SCRATCH, sizeof(llk_layer) * (size_t)m->n_layer);
    c->kv_slot = take(c, MEM_SCRATCH, sizeof(int32_t) * (size_t)m->n_layer);
    c->kv_of = take(c, MEM_SCRATCH, (size_t)m->n_layer);
    c->state_layer = take(c, MEM_SCRATCH, sizeof(int) * (size_t)m->n_layer);
    if (!c->layers || !c->kv_slot || !c->kv_of || !c->state_layer) return refuse(c, why, "out of memory");
    memcpy(c->layers, model->layers, sizeof(llk_layer) * (size_t)m->n_layer);
    c->m.layers = c->layers;
    if (!c->recipe) return refuse(c, why, "the native forward has no recipe for this architecture");
    if (place_kv(c)) return refuse(c, why, "the model's layers do not fit the KV cache");
    if (c->window_kv && make_rings(c)) return refuse(c, why, "out of memory for the sliding layers' rings");
    int rope_dim = 0, router_own_input = 0; /* the widest of the layers' */
    c->q_dim = c->kv_dim = 0;
    for (int il = 0, state_at = 0; il < m->n_layer; il++) {
        const llk_layer *L = &c->layers[il];
        c->state_layer[il] = L->ssm_qkv.data ? state_at++ : -1;
        c->q_dim = max_i(c->q_dim, m->n_head * L->head_dim);
        c->kv_dim = max_i(c->kv_dim, L->n_head_kv * L->head_dim);
        rope_dim = max_i(rope_dim, L->rope_dim);
        router_own_input |= L->ffn_gate_inp_s.data != NULL;
    }
    c->pool = planning ? NULL : llk_pool_new(n_threads);
    c->kv.base = ztake(c, MEM_KV, kv_bytes(c));
    c->kv_alt.base = c->kv.base;
    const int nth = c->pool ? llk_pool_size(c->pool) : max_i(n_threads, 1); /* planning: as many as it would get */
    c->attn = attention_new(nth, m->n_head, c->kv.n_head_kv, c->kv.head_dim, n_batch, max_seq_len);
    if (c->kv_alt.n_layer)
        c->attn_alt = attention_new(nth, m->n_head, c->kv_alt.n_head_kv, c->kv_alt.head_dim, n_batch, max_seq_len);
    if (c->window_kv)
        c->attn_win = attention_new(nth, m->n_head, c->kv_win.n_head_kv, c->kv_win.head_dim, n_batch, max_seq_len);
    c->rope_scale = take(c, MEM_SCRATCH, (size_t)m->n_layer * sizeof(float));
    if (m->n_expert) c->moe = moe_scratch_new(m, n_batch);
    if (m->rope_freq_scale != 0.0f) c->yarn = take(c, MEM_SCRATCH, (size_t)m->n_layer * sizeof(rope_yarn));
    size_t B = (size_t)n_batch;
    const int ff = max_i(m->n_ff, m->n_ff_shexp);
    if (n_state_layers) {
        c->dn = deltanet_shape_of(m);
        c->state_layer_floats = c->dn.conv_floats + c->dn.ssm_floats;
    }
    if (n_state_layers || c->window_kv) { /* a state a sequence: its position count, its DeltaNet layers' (the
                                           * sliding layers' window is in the rings, copied with it) */
        c->state_bytes = STATE_HEADER + (size_t)n_state_layers * c->state_layer_floats * sizeof(float);
        c->state = ztake(c, MEM_STATES, c->state_bytes * (size_t)n_seq);
        c->next_pos = take(c, MEM_SCRATCH, sizeof(int32_t) * (size_t)n_seq);
        c->capture_of = take(c, MEM_SCRATCH, B * sizeof(uint8_t *));
    }
    if (n_state_layers) {
        c->conv_of = take(c, MEM_SCRATCH, B * sizeof(float *));
        c->ssm_of = take(c, MEM_SCRATCH, B * sizeof(float *));
        c->snap_of = take(c, MEM_SCRATCH, B * sizeof(float *));
        c->mix = take(c, MEM_SCRATCH, B * (size_t)c->dn.channels * sizeof(float));
        c->z = take(c, MEM_SCRATCH, B * (size_t)c->dn.inner * sizeof(float));
        c->beta = take(c, MEM_SCRATCH, B * (size_t)c->dn.n_v * sizeof(float));
        c->decay = take(c, MEM_SCRATCH, B * (size_t)c->dn.n_v * sizeof(float));
    }
    const int output_gate = c->recipe && c->recipe->attn.output_gate;
    if (output_gate) c->qg = take(c, MEM_SCRATCH, B * 2 * (size_t)c->q_dim * sizeof(float));
    if (m->n_ff_shexp) {
        c->sh = take(c, MEM_SCRATCH, B * (size_t)m->n_embd * sizeof(float));
        c->sh_gate = take(c, MEM_SCRATCH, B * sizeof(float));
    }
    int wide = max_i(max_i(m->n_embd, c->q_dim), max_i(ff, c->dn.inner));
    c->x = take(c, MEM_SCRATCH, B * m->n_embd * sizeof(float));
    c->xn = take(c, MEM_SCRATCH, B * wide * sizeof(float));
    c->q = take(c, MEM_SCRATCH, B * c->q_dim * sizeof(float));
    c->k = take(c, MEM_SCRATCH, B * c->kv_dim * sizeof(float));
    c->v = take(c, MEM_SCRATCH, B * c->kv_dim * sizeof(float));
    c->att = take(c, MEM_SCRATCH, B * max_i(c->q_dim, c->dn.inner) * sizeof(float));
    c->o = take(c, MEM_SCRATCH, B * m->n_embd * sizeof(float));
    c->g = take(c, MEM_SCRATCH, B * ff * sizeof(float));
    c->u = take(c, MEM_SCRATCH, B * ff * sizeof(float));
    c->cs = take(c, MEM_SCRATCH, B * (size_t)rope_dim * sizeof(float));
    if (m->n_embd_per_layer) {
        c->ple = take(c, MEM_SCRATCH, B * (size_t)m->n_layer * m->n_embd_per_layer * sizeof(float));
        c->ple_gate = take(c, MEM_SCRATCH, B * (size_t)m->n_embd_per_layer * sizeof(float));
    }
    if (router_own_input) {
        c->router_in = take(c, MEM_SCRATCH, B * m->n_embd * sizeof(float));
        c->experts_out = take(c, MEM_SCRATCH, B * m->n_embd * sizeof(float));
    }
    c->pos_of = take(c, MEM_SCRATCH, B * sizeof(int32_t));
    c->seq_of = take(c, MEM_SCRATCH, B * sizeof(int32_t));
    c->table_of = take(c, MEM_SCRATCH, B * sizeof(int32_t *));
    for (int i = 0; i < 3; i++) c->act[i] = take(c, MEM_SCRATCH, B * (size_t)wide * sizeof(float) + 64);
    c->held[MEM_EXPERTS] = moe_scratch_bytes(c->moe);
    c->held[MEM_SCRATCH] += attention_bytes(c->attn, n_seq, 0) +
                            (c->attn_alt ? attention_bytes(c->attn_alt, n_seq, 0) : 0) +
                            (c->attn_win ? attention_bytes(c->attn_win, n_seq, m->sliding_window) : 0);
    int ok = (c->pool || planning) && c->kv.base && c->attn && (!c->kv_alt.n_layer || c->attn_alt) && c->rope_scale &&
             c->x && c->xn && c->q && c->k && c->v && c->att && c->o && c->g && c->u && c->cs && c->pos_of &&
             c->seq_of && c->table_of && c->act[0] && c->act[1] && c->act[2] && (!m->n_expert || c->moe) &&
             (m->rope_freq_scale == 0.0f || c->yarn) && (!m->n_embd_per_layer || (c->ple && c->ple_gate)) &&
             (!router_own_input || (c->router_in && c->experts_out)) &&
             (!n_state_layers || (c->dn.channels && c->state && c->next_pos && c->conv_of && c->ssm_of && c->snap_of &&
                                  c->mix &&
                                  c->z && c->beta && c->decay)) &&
             (!output_gate || c->qg) && (!m->n_ff_shexp || (c->sh && c->sh_gate)) &&
             (!c->state || c->capture_of) && (!c->window_kv || (c->attn_win && c->state && c->next_pos));
    if (!ok) return refuse(c, why, "out of memory");
    for (int l = 0; l < m->n_layer; l++)
        c->rope_scale[l] = powf(c->layers[l].rope_base, -2.0f / (float)c->layers[l].rope_dim);
    for (int l = 0; c->yarn && l < m->n_layer; l++) {
        c->yarn[l] = (rope_yarn){m->rope_freq_scale, m->yarn_ext_factor, m->yarn_attn_factor, {0, 0}};
        llk_rope_yarn_corr(&c->yarn[l], c->layers[l].rope_dim, m->yarn_orig_ctx, c->layers[l].rope_base,
                           m->yarn_beta_fast, m->yarn_beta_slow);
    }
    return c;
}

llk_ctx *llk_ctx_new(const llk_model *model, int n_blocks, int block_size, int max_seq_len, int n_batch,
                     int n_threads, int kv_type, int n_seq, int window_kv, char *why) {
    return ctx_new(model, n_blocks, block_size, max_seq_len, n_batch, n_threads, kv_type, n_seq, window_kv, 0, why);
}

void llk_ctx_memory(const llk_ctx *c, llk_memory *out) {
    *out = (llk_memory){c->held[MEM_KV], c->held[MEM_RINGS], c->held[MEM_STATES], c->held[MEM_SCRATCH],
                        c->held[MEM_EXPERTS], llk_state_bytes(c), llk_kv_ring_blocks(c)};
}

int llk_ctx_plan(const llk_model *model, int n_blocks, int block_size, int max_seq_len, int n_batch, int n_threads,
                 int kv_type, int n_seq, int window_kv, llk_memory *out, char *why) {
    llk_ctx *c =
        ctx_new(model, n_blocks, block_size, max_seq_len, n_batch, n_threads, kv_type, n_seq, window_kv, 1, why);
    if (!c) return -1;
    llk_ctx_memory(c, out);
    llk_ctx_free(c);
    return 0;
}

/* ---- per-token steps over the pool ------------------------------------------ */

/* A batch of at least this many tokens takes its steps between the matrix products (norms, rotary
 * embeddings, gates, quantizing activations) over the pool; a smaller one (decode) on the caller alone,
 * where a hand-over between threads would cost more than the step. A token's arithmetic is the same
 * either way, on whichever thread. */
#define POOL_TOKENS 16

typedef struct {
    token_step step;
    const void *arg;
    int n_tok, per_item;
} token_job;

static void token_task(void *arg, int item, int ith) {
    (void)ith;
    const token_job *j = arg;
    const int t1 = (item + 1) * j->per_item < j->n_tok ? (item + 1) * j->per_item : j->n_tok;
    for (int t = item * j->per_item; t < t1; t++) j->step(j->arg, t);
}

void each_token(llk_pool *pool, int n_tok, token_step step, const void *arg) {
    if (n_tok < POOL_TOKENS) {
        for (int t = 0; t < n_tok; t++) step(arg, t);
        return;
    }
    const int items = 4 * llk_pool_size(pool), per_item = (n_tok + items - 1) / items;
    token_job j = {step, arg, n_tok, per_item};
    llk_pool_run(pool, token_task, &j, (n_tok + per_item - 1) / per_item);
}

/* ---- matrix products over the pool --------------------------------------- */

/* Decode's weights are read once a step, and the caller takes the steps between products alone (see
 * each_token): meanwhile the workers read the start of the matrix the next product streams. */
#define READ_AHEAD_BYTES ((size_t)1 << 20)

#ifndef MIN_CHUNK_BYTES
#define MIN_CHUNK_BYTES (32 << 10)
#endif
#ifndef GROUP_TILE_BYTES
#define GROUP_TILE_BYTES ((size_t)128 << 10) /* activations a token tile of matmul_chunk holds: a share of L2 */
#endif
#define MAX_PARTS 4 /* q, k and v (gate and up; DeltaNet's four) share one pool run: fewer hand-overs per token */

matmul_part matmul_part_of(const llk_tensor *w, const void *act, int n_tok, float *out, int64_t out_stride, int nth) {
    const kernel_table *k = llk_kernels();
    /* a few chunks a thread, so that threads the scheduler delays leave theirs to the others; in decode
     * none under MIN_CHUNK_BYTES of weights (each chunk a hand-over between threads) */
    const size_t w_row = llk_row_size(w->type, w->ne0);
    int64_t chunk = w->ne1 / (nth * (n_tok > 1 ? 4 : 8));
    if (n_tok == 1 && (size_t)chunk * w_row < MIN_CHUNK_BYTES) chunk = (int64_t)(MIN_CHUNK_BYTES / w_row);
    chunk = chunk < 16 ? 16 : (chunk + 15) / 16 * 16; /* whole groups: eight rows for dot_rows8, sixteen repacked */
    return (matmul_part){
        .w = w,
        .act = act,
        .act_row = llk_act_size(w->type, w->ne0),
        .w_row = w_row,
        .chunk = (int)chunk,
        .n_chunks = (int)((w->ne1 + chunk - 1) / chunk),
        .n_tok = n_tok,
        .out = out,
        .out_stride = out_stride,
        .dot = k->dot[w->type],
        .dot_cols = k->dot_cols[w->type],
        .dot_rows2 = k->dot_rows2[w->type],
        .dot_rows8 = k->dot_rows8[w->type],
        .dot_group = k->dot_group[w->type],
    };
}

void matmul_chunk(const matmul_part *p, int64_t r0) {
    const int n_tok = p->n_tok;
    const int64_t rows = p->w->ne1;
    const uint8_t *w = p->w->data;
    int64_t r1 = r0 + p->chunk < rows ? r0 + p->chunk : rows;
    if (p->dot_group) { /* the group's codes unpacked once for up to GROUP_MAX_TOK tokens */
        /* the tokens in tiles whose activations stay in the cache while the chunk's groups pass over them (the
         * same calls as one pass over all tokens, in another order: the same bits) */
        int tile = (int)(GROUP_TILE_BYTES / p->act_row) / GROUP_MAX_TOK * GROUP_MAX_TOK;
        if (tile < GROUP_MAX_TOK) tile = GROUP_MAX_TOK;
        for (int t0 = 0; t0 < n_tok; t0 += tile) {
            const int t1 = n_tok - t0 < tile ? n_tok : t0 + tile;
            for (int64_t r = r0; r < r1; r += GROUP_ROWS)
                for (int t = t0; t < t1; t += GROUP_MAX_TOK)
                    p->dot_group(w + (size_t)r * p->w_row, p->act + (size_t)t * p->act_row, p->act_row,
                                 t1 - t < GROUP_MAX_TOK ? t1 - t : GROUP_MAX_TOK, p->w->ne0,
                                 p->out + t * p->out_stride + r, (size_t)p->out_stride);
        }
        return;
    }
    for (int t = 0; t < n_tok;) {
        const void *a = p->act + (size_t)t * p->act_row;
        int n = n_tok - t < DOT_MAX_COLS ? n_tok - t : DOT_MAX_COLS;
        if (n > 1 && p->dot_cols) {  /* each weight row unpacked once for n tokens */
            float res[DOT_MAX_COLS];
            for (int64_t r = r0; r < r1; r++) {
                p->dot_cols(w + (size_t)r * p->w_row, a, p->act_row, n, p->w->ne0, res);
                for (int i = 0; i < n; i++) p->out[(t + i) * p->out_stride + r] = res[i];
            }
        } else {
            n = 1;
            float *out = p->out + t * p->out_stride;
            int64_t r = r0;
            if (p->dot_rows8)
                for (; r + 7 < r1; r += 8) p->dot_rows8(w + (size_t)r * p->w_row, p->w_row, a, p->w->ne0, out + r);
            if (p->dot_rows2)
                for (; r + 1 < r1; r += 2) p->dot_rows2(w + (size_t)r * p->w_row, p->w_row, a, p->w->ne0, out + r);
            for (; r < r1; r++) out[r] = p->dot(w + (size_t)r * p->w_row, a, p->w->ne0);
        }
        t += n;
    }
}

/* A run of consecutive chunks and the next one to take, a cache line of its own. */
typedef struct {
    _Alignas(64) _Atomic int next;
    int first, end;
} matmul_run;

typedef struct {
    const matmul_part *parts;
    int n_parts, n_runs;
    matmul_run *runs;
} matmul_job;

/* Job item r: the chunks of run r in order, then those left in the others'. The chunks are dealt as one run
 * of consecutive chunks a thread: a thread's next chunk follows the one it finished, so its reads ahead
 * (PREFETCH_AHEAD) already hold its start, and a chunk is taken by an add on a counter no other thread
 * touches until it runs out of its own. (Which thread takes a chunk never changes its bits.) */
static void matmul_task(void *arg, int item, int ith) {
    (void)ith;
    const matmul_job *j = arg;
    for (int k = 0; k < j->n_runs; k++) {
        matmul_run *run = &j->runs[(item + k) % j->n_runs];
        for (int c; (c = run->first + atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed)) < run->end;) {
            int part = 0;
            while (c >= j->parts[part].n_chunks) c -= j->parts[part++].n_chunks;
            matmul_chunk(&j->parts[part], (int64_t)c * j->parts[part].chunk);
        }
    }
}

void matmul_parts_run(llk_pool *pool, const matmul_part *parts, int n_parts, const llk_tensor *then) {
    int n_chunks = 0;
    for (int i = 0; i < n_parts; i++) n_chunks += parts[i].n_chunks;
    size_t ahead = 0;
    if (then && then->data && n_parts && parts[0].n_tok < POOL_TOKENS) {
        ahead = llk_row_size(then->type, then->ne0) * (size_t)then->ne1;
        if (ahead > READ_AHEAD_BYTES) ahead = READ_AHEAD_BYTES;
    }
    const int n_runs = llk_pool_size(pool) < n_chunks ? llk_pool_size(pool) : n_chunks;
    matmul_run runs[n_runs > 0 ? n_runs : 1];
    for (int r = 0, at = 0; r < n_runs; r++) {
        const int len = n_chunks / n_runs + (r < n_chunks % n_runs);
        runs[r].first = at;
        runs[r].end = at += len;
        atomic_init(&runs[r].next, 0);
    }
    matmul_job j = {parts, n_parts, n_runs, runs};
    llk_pool_run_ahead(pool, matmul_task, &j, n_runs, ahead ? then->data : NULL, ahead);
}

/* The activations x[n_tok][ne0] quantized for weights of `type`, a token's row at a time. */
typedef struct {
    const float *x;
    int64_t ne0;
    int type;
    uint8_t *out;
    size_t row;
} quantize_rows;

static void quantize_step(const void *arg, int t) {
    const quantize_rows *q = arg;
    llk_quantize_act(q->type, q->x + (size_t)t * q->ne0, q->out + (size_t)t * q->row, q->ne0);
}

/* The activations x[n_tok][ne0] quantized for weights of `type` (cached until invalidated). */
static const void *activations(llk_ctx *c, const float *x, int n_tok, int64_t ne0, int type) {
    int kind = llk_act_kind(type);
    if (!c->act_valid[kind]) {
        const quantize_rows q = {x, ne0, type, c->act[kind], llk_act_size(type, ne0)};
        each_token(c->pool, n_tok, quantize_step, &q);
        c->act_valid[kind] = 1;
    }
    return c->act[kind];
}

void new_input(llk_ctx *c) { c->act_valid[0] = c->act_valid[1] = c->act_valid[2] = 0; }

void matmul_n(llk_ctx *c, int n, const llk_tensor *const *w, const float *x, int n_tok, float *const *out,
              const int64_t *out_stride, const llk_tensor *then) {
    matmul_part parts[MAX_PARTS];
    const int nth = llk_pool_size(c->pool);
    for (int i = 0; i < n; i++)
        parts[i] = matmul_part_of(w[i], activations(c, x, n_tok, w[i]->ne0, w[i]->type), n_tok, out[i],
                                  out_stride[i], nth);
    matmul_parts_run(c->pool, parts, n, then);
}

void matmul(llk_ctx *c, const llk_tensor *w, const float *x, int n_tok, float *out, int64_t out_stride,
            const llk_tensor *then) {
    matmul_n(c, 1, &w, x, n_tok, &out, &out_stride, then);
}

const llk_tensor *output_head(const llk_ctx *c) { return c->m.output.data ? &c->m.output : &c->m.tok_embd; }

/* A sequence's state header: word 0 the count of positions it holds; word 1 (window_kv, without DeltaNet layers)
 * the first position of the last batch that advanced it, the furthest llk_state_rewind may take it back. */
static uint64_t state_word(const llk_ctx *c, int seq, int k) {
    uint64_t v;
    memcpy(&v, c->state + (size_t)seq * c->state_bytes + k * sizeof v, sizeof v);
    return v;
}

static void set_state_word(llk_ctx *c, int seq, int k, uint64_t v) {
    memcpy(c->state + (size_t)seq * c->state_bytes + k * sizeof v, &v, sizeof v);
}

static uint64_t state_positions(const llk_ctx *c, int seq) { return state_word(c, seq, 0); }

/* Whether each token continues its sequence's state (llk_decode): at the position after the last one the state holds,
 * or at 0 as the sequence's first token in the batch (a restart later in the batch would overwrite the cells its
 * earlier tokens read there: every token's KV is written before any attends).  If all do, word 0 of each state is
 * advanced past the batch (the layers then bring the states there) and word 1 set to the sequence's first position
 * in the batch.  0, or -7 with c->error set. */
static int check_state_positions(llk_ctx *c, int n, const int32_t *pos, int32_t *const *seq_ids) {
    for (int i = 0; i < n; i++) { /* -1 - held: the sequence has no token earlier in the batch */
        const int s = seq_ids[i][0];
        if (s >= c->n_seq) return fail(c, -7, "sequence id %ld out of range [0, %ld) of the recurrent states", s, c->n_seq);
        c->next_pos[s] = -1 - (int32_t)state_positions(c, s);
    }
    for (int i = 0; i < n; i++) {
        const int s = seq_ids[i][0], in_batch = c->next_pos[s] >= 0;
        const int32_t held = in_batch ? c->next_pos[s] : -1 - c->next_pos[s];
        if (pos[i] == 0 && in_batch) {
            snprintf(c->error, sizeof c->error,
                     "position 0 of sequence %d after its position %d in the same batch: a sequence starts again "
                     "only with its first token of a batch", s, held - 1);
            return -7;
        }
        if (pos[i] != 0 && pos[i] != held) {
            snprintf(c->error, sizeof c->error,
                     "position %d of sequence %d does not continue its recurrent state, which holds %d positions "
                     "(it cannot go back: start again at position 0 or restore a saved state)",
                     pos[i], s, held);
            return -7;
        }
        c->next_pos[s] = pos[i] + 1;
    }
    for (int i = 0; i < n; i++) set_state_word(c, seq_ids[i][0], 0, (uint64_t)c->next_pos[seq_ids[i][0]]);
    for (int i = n - 1; i >= 0; i--) set_state_word(c, seq_ids[i][0], 1, (uint64_t)pos[i]); /* the first one stays */
    return 0;
}

/* Where block k of seq's window in a snapshot of its first n positions lives in its ring (the window ends with the
 * block of position n - 1): NULL for a block before position 0. */
static uint8_t *window_block_at(const llk_ctx *c, int seq, int n, int k) {
    const int b = n ? ((n - 1) >> c->block_shift) - (c->snap_blocks - 1) + k : -1;
    return b < 0 ? NULL : c->kv_win.base + ((size_t)seq * c->ring_len + b % c->ring_len) * c->kv_win.block_bytes;
}

static uint8_t *window_block(const llk_ctx *c, int seq, int k) {
    return window_block_at(c, seq, (int)state_positions(c, seq), k);
}

/* The window of each token's capture (place_captures), copied once the batch is through every layer: the ring
 * holds a batch and the window before its first token, so a window ending inside the batch is still there. */
static void capture_windows(llk_ctx *c, int n, const int32_t *pos, int32_t *const *seq_ids) {
    for (int i = 0; i < n; i++) {
        if (!c->capture_of[i]) continue;
        for (int k = 0; k < c->snap_blocks; k++) {
            uint8_t *to = c->capture_of[i] + c->state_bytes + (size_t)k * c->kv_win.block_bytes;
            const uint8_t *from = window_block_at(c, seq_ids[i][0], pos[i] + 1, k);
            if (from) memcpy(to, from, c->kv_win.block_bytes);
            else memset(to, 0, c->kv_win.block_bytes);
        }
    }
}

/* Point each token of the batch at the llk_state_capture copy asked after it (or NULL), headed with the positions
 * it then holds; the requests are used up. */
static void place_captures(llk_ctx *c, int n_captures, int n, const int32_t *pos, int32_t *const *seq_ids) {
    for (int i = 0; i < n; i++) {
        c->capture_of[i] = NULL;
        for (int k = 0; k < n_captures; k++)
            if (c->captures[k].seq == seq_ids[i][0] && c->captures[k].pos == pos[i]) {
                uint8_t *dst = c->captures[k].dst;
                const uint64_t held = (uint64_t)pos[i] + 1;
                memset(dst, 0, STATE_HEADER);
                memcpy(dst, &held, sizeof held);
                c->capture_of[i] = dst;
            }
    }
}

/* The batch through every layer; the output-normed hidden states of the wanted rows, in their order, are
 * then c->xn [n_out][n_embd].  n_out, or <0 on bad input. */
static int forward(llk_ctx *c, int n, const int32_t *tokens, const int32_t *pos, int32_t *const *seq_ids,
                   const int8_t *want, const int32_t *tables, int n_tables, int table_len) {
    const llk_model *m = &c->m;
    const int n_captures = c->n_captures;
    c->n_captures = 0; /* used up by this batch, whatever happens to it */
    if (n <= 0 || n > c->n_batch) return fail(c, -1, "batch of %ld tokens, capacity is %ld", n, c->n_batch);
    if (table_len < 1 || (int64_t)table_len * c->block_size < c->max_seq_len)
        return fail(c, -1, "block tables of %ld entries cannot hold %ld positions", table_len, c->max_seq_len);
    for (int i = 0; i < n; i++) {
        int s = seq_ids[i][0];
        if (s < 0 || s >= n_tables) return fail(c, -2, "sequence id %ld out of range [0, %ld)", s, n_tables);
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return fail(c, -3, "token id %ld out of range [0, %ld)", tokens[i], m->n_vocab);
        if (pos[i] < 0 || pos[i] >= c->max_seq_len)
            return fail(c, -4, "position %ld outside [0, %ld)", pos[i], c->max_seq_len);
        const int32_t *table = tables + (size_t)s * table_len;
        for (int b = 0; b <= pos[i] >> c->block_shift; b++) /* every block the token writes or reads */
            if (table[b] < 0 || table[b] >= c->n_blocks)
                return fail(c, -5, "block table entry %ld names no block (pool of %ld)", table[b], c->n_blocks);
    }
    if (c->state && check_state_positions(c, n, pos, seq_ids)) return -7;
    if (c->state) place_captures(c, n_captures, n, pos, seq_ids);
    const int E = m->n_embd;
    const size_t emb_row = llk_row_size(m->tok_embd.type, E);
    for (int i = 0; i < n; i++) {
        c->pos_of[i] = pos[i];
        c->seq_of[i] = seq_ids[i][0];
        c->table_of[i] = tables + (size_t)seq_ids[i][0] * table_len;
        if (c->window_kv) c->ring_table_of[i] = c->ring_tables + (size_t)seq_ids[i][0] * c->ring_table_len;
        float *x = c->x + (size_t)i * E;
        llk_dequantize(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tokens[i] * emb_row, x, E);
        if (m->embd_scale != 1.0f)
            for (int e = 0; e < E; e++) x[e] *= m->embd_scale;
    }
    if (c->recipe->inputs) c->recipe->inputs(c, tokens, n);
    for (int il = 0; il < m->n_layer; il++)
        if (c->recipe->layer(c, il, n)) return fail(c, -6, "out of memory for attention over %ld tokens (layer %ld)", n, il);
    if (c->window_kv) capture_windows(c, n, pos, seq_ids);
    int n_out = 0;
    for (int i = 0; i < n; i++)
        if (want[i]) llk_rmsnorm(c->x + (size_t)i * E, m->output_norm.data, c->xn + (size_t)n_out++ * E, E, m->eps);
    return n_out;
}

/* The final logits soft-capped (scaled by the inverse, tanh, scaled back) in slices over the pool: a 262,144-word
 * vocabulary is a few hundred thousand tanh a token. Each logit's arithmetic is the same on whichever thread. */
#define SOFTCAP_SLICE 4096

typedef struct {
    float *logits;
    size_t n;
    float cap;
} softcap_job;

static void softcap_task(void *arg, int item, int ith) {
    (void)ith;
    const softcap_job *j = arg;
    const size_t start = (size_t)item * SOFTCAP_SLICE;
    const size_t end = start + SOFTCAP_SLICE < j->n ? start + SOFTCAP_SLICE : j->n;
    llk_kernels()->softcap(j->logits + start, j->cap, (int)(end - start));
}

int llk_decode(llk_ctx *c, int n, const int32_t *tokens, const int32_t *pos, int32_t *const *seq_ids,
               const int8_t *want, float *logits_out, const int32_t *tables, int n_tables, int table_len) {
    int n_out = forward(c, n, tokens, pos, seq_ids, want, tables, n_tables, table_len);
    if (n_out > 0) {
        new_input(c);
        matmul(c, output_head(c), c->xn, n_out, logits_out, c->m.n_vocab, NULL);
        if (c->m.final_logit_softcap != 0.0f) {
            softcap_job j = {logits_out, (size_t)n_out * c->m.n_vocab, c->m.final_logit_softcap};
            llk_pool_run(c->pool, softcap_task, &j, (int)((j.n + SOFTCAP_SLICE - 1) / SOFTCAP_SLICE));
        }
    }
    return n_out < 0 ? n_out : 0;
}

int llk_decode_hidden(llk_ctx *c, int n, const int32_t *tokens, const int32_t *pos, int32_t *const *seq_ids,
                      const int8_t *want, float *hidden_out, const int32_t *tables, int n_tables, int table_len) {
    int n_out = forward(c, n, tokens, pos, seq_ids, want, tables, n_tables, table_len);
    if (n_out > 0) memcpy(hidden_out, c->xn, (size_t)n_out * c->m.n_embd * sizeof(float));
    return n_out < 0 ? n_out : 0;
}

/* ---- blocks ------------------------------------------------------------------ */

size_t llk_kv_block_bytes(const llk_ctx *c) { return c->kv.block_bytes; }

static uint8_t *block_at(const llk_ctx *c, int block) { return c->kv.base + (size_t)block * c->kv.block_bytes; }

int llk_kv_block_copy(llk_ctx *c, int dst, int src) {
    if (dst < 0 || dst >= c->n_blocks || src < 0 || src >= c->n_blocks) return -1;
    if (dst != src) memcpy(block_at(c, dst), block_at(c, src), llk_kv_block_bytes(c));
    return 0;
}

int llk_kv_block_read(const llk_ctx *c, int block, void *dst) {
    if (block < 0 || block >= c->n_blocks) return -1;
    memcpy(dst, block_at(c, block), llk_kv_block_bytes(c));
    return 0;
}

int llk_kv_block_write(llk_ctx *c, int block, const void *src) {
    if (block < 0 || block >= c->n_blocks) return -1;
    memcpy(block_at(c, block), src, llk_kv_block_bytes(c));
    return 0;
}

/* One cache's part of llk_kv_layout: the model layers whose KV it holds, then a block's cells as attention.h lays
 * them out. */
static size_t describe_cache(const llk_ctx *c, const kv_cache *kv, int where, char *buf, size_t len) {
    size_t at = 0;
#define PUT(...) at += (size_t)snprintf(buf + (at < len ? at : len), at < len ? len - at : 0, __VA_ARGS__)
    const int n_kv = c->m.n_layer_kv ? c->m.n_layer_kv : c->m.n_layer; /* the layers after it share others' */
    PUT("layers [");
    for (int il = 0, n = 0; il < n_kv; il++)
        if (c->kv_of[il] == where && c->kv_slot[il] >= 0) PUT("%s%d", n++ ? " " : "", il);
    PUT("]: [layer %d][K [head %d][dim %d][cell %d], V [cell %d][%d]] %s", kv->n_layer, kv->n_head_kv, kv->head_dim,
        kv->block_size, kv->block_size, kv->n_head_kv * kv->head_dim, kv->type == LLK_Q8_0 ? "q8_0" : "f16");
#undef PUT
    return at;
}

int llk_kv_layout(const llk_ctx *c, char *buf, size_t len) {
    const kv_cache *kv[3] = {&c->kv, &c->kv_alt, &c->kv_win};
    size_t at = 0;
    for (int w = KV_POOL; w <= KV_WIN; w++) {
        if (!kv[w]->n_layer) continue;
        const char *what = w == KV_POOL ? "block: " : w == KV_ALT ? "; then " : "; sliding window (%d positions): ";
        at += (size_t)snprintf(buf + (at < len ? at : len), at < len ? len - at : 0, what, c->m.sliding_window);
        at += describe_cache(c, kv[w], w, buf + (at < len ? at : len), at < len ? len - at : 0);
        if (w == KV_WIN)
            at += (size_t)snprintf(buf + (at < len ? at : len), at < len ? len - at : 0,
                                   ", the last %d blocks in a state", c->snap_blocks);
    }
    return (int)at;
}

int llk_kv_ring_blocks(const llk_ctx *c) { return c->window_kv ? c->ring_len : 0; }

size_t llk_kv_ring_block_bytes(const llk_ctx *c) { return c->window_kv ? c->kv_win.block_bytes : 0; }

/* ---- recurrent state ------------------------------------------------------------ */

float *recurrent_state(const llk_ctx *c, int seq, int state_il) {
    return (float *)(c->state + (size_t)seq * c->state_bytes + STATE_HEADER) + (size_t)state_il * c->state_layer_floats;
}

/* Bytes of a sequence's window in a snapshot: its last snap_blocks blocks of the ring. */
static size_t window_bytes(const llk_ctx *c) { return c->window_kv ? (size_t)c->snap_blocks * c->kv_win.block_bytes : 0; }

size_t llk_state_bytes(const llk_ctx *c) { return c->state ? c->state_bytes + window_bytes(c) : 0; }


int llk_state_read(const llk_ctx *c, int seq, void *dst) {
    if (!c->state || seq < 0 || seq >= c->n_seq) return -1;
    memcpy(dst, c->state + (size_t)seq * c->state_bytes, c->state_bytes);
    memset((uint8_t *)dst + sizeof(uint64_t), 0, sizeof(uint64_t)); /* no rewind floor: a snapshot is its position's */
    for (int k = 0; c->window_kv && k < c->snap_blocks; k++) {
        uint8_t *to = (uint8_t *)dst + c->state_bytes + (size_t)k * c->kv_win.block_bytes, *from = window_block(c, seq, k);
        if (from) memcpy(to, from, c->kv_win.block_bytes);
        else memset(to, 0, c->kv_win.block_bytes);
    }
    return 0;
}

int llk_state_write(llk_ctx *c, int seq, const void *src) {
    uint64_t n;
    if (!c->state || seq < 0 || seq >= c->n_seq) return -1;
    memcpy(&n, src, sizeof n);
    if (n > (uint64_t)c->max_seq_len) return -1;
    memcpy(c->state + (size_t)seq * c->state_bytes, src, c->state_bytes);
    set_state_word(c, seq, 1, n); /* the ring holds the window before n only: no going back past it */
    for (int k = 0; c->window_kv && k < c->snap_blocks; k++) {
        uint8_t *to = window_block(c, seq, k);
        if (to) memcpy(to, (const uint8_t *)src + c->state_bytes + (size_t)k * c->kv_win.block_bytes, c->kv_win.block_bytes);
    }
    return 0;
}

int llk_state_rewind(llk_ctx *c, int seq, int n) {
    if (!c->state || seq < 0 || seq >= c->n_seq || !c->window_kv || c->dn.channels) return -1;
    if (n < 0 || (uint64_t)n < state_word(c, seq, 1) || (uint64_t)n > state_positions(c, seq)) return -1;
    set_state_word(c, seq, 0, (uint64_t)n);
    return 0;
}

int llk_state_capture(llk_ctx *c, int seq, int pos, void *dst) {
    if (!c->state || seq < 0 || seq >= c->n_seq || !dst || c->n_captures == LLK_STATE_CAPTURES) return -1;
    c->captures[c->n_captures].seq = seq;
    c->captures[c->n_captures].pos = pos;
    c->captures[c->n_captures].dst = dst;
    c->n_captures++;
    return 0;
}

int llk_state_reset(llk_ctx *c, int seq) {
    if (!c->state || seq < 0 || seq >= c->n_seq) return -1;
    memset(c->state + (size_t)seq * c->state_bytes, 0, c->state_bytes); /* the ring's cells wait to be written */
    return 0;
}

/* ---- benchmarking helpers -------------------------------------------------- */

int llk_matvec(llk_ctx *c, const llk_tensor *w, const float *x, float *y) {
    const int bs = llk_block_size(w->type);
    if (!bs || w->ne0 % bs || (!llk_type_supported(w->type) && w->ne1 % GROUP_ROWS)) return -1;
    new_input(c);
    matmul(c, w, x, 1, y, 0, NULL);
    new_input(c);
    return 0;
}

int llk_gemm(const llk_tensor *w, const float *x, int n_tok, float *y) {
    const int type = w->type, bs = llk_block_size(type);
    const int repacked = !llk_type_supported(type);
    if (!bs || n_tok < 1 || w->ne0 % bs || (repacked && w->ne1 % GROUP_ROWS)) return -1;
    const size_t act_row = llk_act_size(type, w->ne0);
    uint8_t *act = malloc(act_row * (size_t)n_tok + 64);
    if (!act) return -1;
    for (int t = 0; t < n_tok; t++) llk_quantize_act(type, x + (size_t)t * w->ne0, act + t * act_row, w->ne0);
    matmul_part part = matmul_part_of(w, act, n_tok, y, w->ne1, 1);
    part.chunk = (int)w->ne1;
    matmul_chunk(&part, 0);
    free(act);
    return 0;
}

/* One reader of llk_read_bandwidth: its share of the buffer, read once every reader is running. */
typedef struct {
    const uint8_t *p;
    int64_t bytes;
    _Atomic int *arrived;
    int n_readers;
    struct timespec start, end;
    uint64_t sum;
} reader;

static void *read_share(void *arg) {
    reader *r = arg;
    atomic_fetch_add(r->arrived, 1);
    while (atomic_load(r->arrived) < r->n_readers) {
    }
    clock_gettime(CLOCK_MONOTONIC, &r->start);
    r->sum = llk_kernels()->stream_sum(r->p, r->bytes);
    clock_gettime(CLOCK_MONOTONIC, &r->end);
    return NULL;
}

static double seconds(struct timespec t) { return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }

/* Threads of its own, not the pool's: the items of a pool job can all go to the caller (a worker the scheduler
 * has not run yet leaves them), and this measures n_threads cores reading at once, from when all of them run,
 * each its contiguous share as decode's threads stream their chunks, with the kernels' loads and prefetches. */
double llk_read_bandwidth(const void *buf, int64_t nbytes, int n_threads) {
    enum { MAX_READERS = 64 };
    const int n = n_threads < 1 ? 1 : n_threads > MAX_READERS ? MAX_READERS : n_threads;
    const int64_t per = nbytes / n / STREAM_BYTES * STREAM_BYTES;
    reader readers[MAX_READERS];
    pthread_t threads[MAX_READERS];
    _Atomic int arrived = 0;
    int created = 0;
    for (int i = 0; i < n; i++)
        readers[i] = (reader){.p = (const uint8_t *)buf + per * i, .bytes = per, .arrived = &arrived, .n_readers = n};
    while (created < n && pthread_create(&threads[created], NULL, read_share, &readers[created]) == 0) created++;
    if (created < n) atomic_fetch_add(&arrived, n); /* releases the readers we got; no figure */
    for (int i = 0; i < created; i++) pthread_join(threads[i], NULL);
    if (created < n || per == 0) return 0.0;
    double first = seconds(readers[0].start), last = seconds(readers[0].end);
    for (int i = 1; i < n; i++) {
        first = fmin(first, seconds(readers[i].start));
        last = fmax(last, seconds(readers[i].end));
    }
    return last > first ? (double)(per * n) / (last - first) : 0.0;
}
