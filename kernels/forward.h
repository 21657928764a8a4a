/* What the forward pass (model.c), its layer blocks (layers.c) and the architectures' recipes (arch_*.c) share:
 * the context a batch runs through and the products over its pool (internal to the library). */
#ifndef LLK_FORWARD_H
#define LLK_FORWARD_H

#include "attention.h"
#include "blocks.h"
#include "common.h"
#include "deltanet.h"
#include "moe.h"
#include "ops.h"
#include "pool.h"
#include "recipe.h"

enum { KV_POOL, KV_ALT, KV_WIN };
/* Bytes before a sequence's layers in its state, padded to a cache line: word 0 (uint64) the count of positions it
 * holds, word 1 the first position of the last batch that advanced it (how far llk_state_rewind may go back). */
#define STATE_HEADER 64
/* What a context's allocations are counted in (llk_memory's parts). */
enum { MEM_KV, MEM_RINGS, MEM_STATES, MEM_SCRATCH, MEM_EXPERTS, MEM_PARTS };

struct llk_ctx {
    llk_model m;
    const llk_recipe *recipe;   /* m.arch's */
    llk_layer *layers;
    int n_blocks, block_size, block_shift, max_seq_len, n_batch, kv_type;
    int kv_dim, q_dim;          /* the widest layer's: the strides of the scratch rows q, k, v and att */
    llk_pool *pool;
    kv_cache kv, kv_alt;        /* the blocks, laid out as attention.h says: the layers of layer 0's head geometry,
                                 * then (kv_alt, its block_bytes the same) those of the other one, if any */
    kv_cache kv_win;            /* window_kv: the sliding layers' KV, in each sequence's ring of ring_len blocks */
    attention *attn, *attn_alt, *attn_win; /* over kv, kv_alt and kv_win */
    int32_t *kv_slot;           /* [layer]: the layer whose KV it reads (itself, or a shared layer's kv_source)
                                 * as numbered in its layout */
    int8_t *kv_of;              /* [layer]: where its KV is: KV_POOL (kv), KV_ALT (kv_alt) or KV_WIN (kv_win) */
    int window_kv;              /* the sliding layers keep only their window (kv_win), not every position */
    int ring_len, snap_blocks;  /* window_kv: blocks of a sequence's ring; of them, those a state snapshot holds */
    int ring_table_len;         /* entries of a ring table: the blocks of max_seq_len positions */
    int32_t *ring_tables;       /* [n_seq][ring_table_len]: the block of kv_win holding each block of positions */
    const int32_t **ring_table_of; /* [token]: its sequence's ring table */
    moe_scratch *moe;           /* a mixture-of-experts model's expert FFN scratch, else NULL */
    int n_seq;                  /* rows of the block tables (sequences) */
    int *state_layer;           /* [layer]: its index among the Gated DeltaNet layers, or -1 */
    deltanet_shape dn;          /* the Gated DeltaNet's dimensions (dn.channels 0: none) */
    uint8_t *state;             /* [n_seq][state_bytes]: each sequence's state (STATE_HEADER, then per DeltaNet
                                 * layer its convolution window and its S states; with window_kv its sliding layers'
                                 * window is in its ring, and llk_state_read copies it after these), or NULL */
    size_t state_bytes, state_layer_floats;
    int32_t *next_pos;          /* [n_seq] scratch: where each sequence's state stands while a batch is checked */
    float **conv_of, **ssm_of;  /* [token]: its sequence's DeltaNet state in the layer at hand */
    uint8_t **capture_of;       /* [token]: where its sequence's state after it is copied (llk_state_capture), or NULL */
    float **snap_of;            /* [token]: that copy's part for the layer at hand, or NULL */
    struct { int seq, pos; uint8_t *dst; } captures[LLK_STATE_CAPTURES]; /* asked for the next batch */
    int n_captures;
    float *mix, *z, *beta, *decay, *qg, *sh, *sh_gate; /* DeltaNet, gated-query and shared-expert scratch */
    float *rope_scale;          /* [layer]: base^(-2/rope_dim), the ratio of successive rotary angles */
    rope_yarn *yarn;            /* [layer]: YaRN's scaling of the angles (a model with rope_freq_scale), else NULL */
    /* scratch for n_batch rows */
    float *x, *xn, *q, *k, *v, *att, *o, *g, *u, *cs;
    float *ple;                 /* Gemma 4's per-layer embeddings: [token][layer][n_embd_per_layer], else NULL */
    float *ple_gate;            /* [token][n_embd_per_layer] */
    float *router_in, *experts_out; /* [token][n_embd]: a router input and expert output of their own (Gemma 4) */
    int32_t *pos_of;            /* [token]: its position, the index of its cell in its sequence */
    int32_t *seq_of;            /* [token]: its sequence (row of the block tables) */
    const int32_t **table_of;   /* [token]: its sequence's block table */
    void *act[3];               /* quantized activations per act_kind */
    int act_valid[3];
    size_t held[MEM_PARTS];     /* bytes of the allocations above, by part (llk_ctx_memory) */
    int planning;               /* llk_ctx_plan's context: the large buffers are address space only, no threads */
    char error[LLK_ERROR_LEN];
};

/* The rows a product reads are new: quantize them again at the next product (see matmul_n). */
void new_input(llk_ctx *c);
/* out_i[t][r] = W_i[r] . x[t] for the n_tok rows of x and each of the n (at most 4) weight matrices, in one
 * pool run (x quantized once per kind; call new_input when it changes); `then`: the matrix of the product
 * after this one, read ahead in decode (or NULL). */
void matmul_n(llk_ctx *c, int n, const llk_tensor *const *w, const float *x, int n_tok, float *const *out,
              const int64_t *out_stride, const llk_tensor *then);
void matmul(llk_ctx *c, const llk_tensor *w, const float *x, int n_tok, float *out, int64_t out_stride,
            const llk_tensor *then);
/* The matrix the logits are read from: the output head, or the token embedding where they are tied. */
const llk_tensor *output_head(const llk_ctx *c);
/* Sequence seq's recurrent state in Gated DeltaNet layer number state_il: its convolution window ([channels]
 * [d_conv - 1]), then its S states ([n_v][S][S]). */
float *recurrent_state(const llk_ctx *c, int seq, int state_il);

#endif
