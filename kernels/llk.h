/* llk: localllm's CPU kernels and native forward pass (public C API).
 *
 * Type ids are ggml's (GGML_TYPE_*), so GGUF tensor headers map straight on.
 * Every function that takes weights takes them in their GGUF block layout,
 * used in place from the memory-mapped file.
 */
#ifndef LLK_H
#define LLK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum llk_type {
    LLK_F32 = 0, LLK_F16 = 1, LLK_Q4_0 = 2, LLK_Q4_1 = 3, LLK_Q5_0 = 6, LLK_Q5_1 = 7,
    LLK_Q8_0 = 8, LLK_Q2_K = 10, LLK_Q3_K = 11, LLK_Q4_K = 12, LLK_Q5_K = 13,
    LLK_Q6_K = 14, LLK_BF16 = 30, LLK_MXFP4 = 39,
    /* Repacked layouts (never in a file): 16 rows interleaved (see repack.c); 100 + the GGUF type's id. */
    LLK_Q4_0_R16 = 102, LLK_Q4_1_R16 = 103, LLK_Q5_0_R16 = 106, LLK_Q5_1_R16 = 107, LLK_Q8_0_R16 = 108,
    LLK_Q2_K_R16 = 110, LLK_Q3_K_R16 = 111, LLK_Q4_K_R16 = 112, LLK_Q5_K_R16 = 113, LLK_Q6_K_R16 = 114,
    LLK_MXFP4_R16 = 139,
};
#define LLK_TYPE_SLOTS 140 /* type ids below this */

/* Instruction-set levels the dispatcher can pick (the best the CPU has by default). */
enum llk_isa {
    LLK_ISA_SCALAR = 0, LLK_ISA_AVX2 = 1, LLK_ISA_AVXVNNI = 2, LLK_ISA_AVX512 = 3, LLK_ISA_NEON = 4, LLK_ISA_NEON_DOTPROD = 5
};

int llk_type_supported(int type);         /* a GGUF type the kernels read (repacked ones are not) */
int llk_block_size(int type);             /* elements per block, 0 if unsupported */
size_t llk_row_size(int type, int64_t n); /* bytes of a row of n elements (a repacked row's share of its group) */

/* Repacking at load: the layout a matrix of `type` with rows of ne0 elements and ne1 rows gets at the
 * selected ISA level (the type itself where none fits the shape or the level has no kernel for it),
 * the bytes of that copy (0: not repacked), and the copy itself (0 ok, -1 bad arguments). A repacked
 * matrix runs at every level (the scalar one too), with the same results bit for bit. */
int llk_repack_type(int type, int64_t ne0, int64_t ne1);
size_t llk_repack_size(int type, int64_t ne0, int64_t ne1);
int llk_repack(int type, const void *src, int64_t ne0, int64_t ne1, void *dst);
const char *llk_type_name(int type);

int llk_isa_best(void);                   /* what this CPU supports */
int llk_isa_get(void);
int llk_isa_set(int isa);                 /* force a level (tests); returns the level in effect */

/* Rows of n elements (n a multiple of the block size); 0 on success, -1 bad type/shape. */
int llk_dequantize(int type, const void *src, float *dst, int64_t n);

/* Activations as the dot kernels of weight type `wtype` want them. */
size_t llk_act_size(int wtype, int64_t n);
int llk_quantize_act(int wtype, const float *x, void *dst, int64_t n);
/* dot(weights row, quantized activations) with the selected ISA or the scalar reference. */
float llk_vec_dot(int wtype, const void *w, const void *act, int64_t n);
float llk_vec_dot_ref(int wtype, const void *w, const void *act, int64_t n);
/* count (2 or 8) weight rows w_row bytes apart against one activation row, through the path decode takes. */
int llk_vec_dot_rows(int wtype, int count, const void *w, size_t w_row, const void *act, int64_t n, float *out);
/* One weight row against n_cols activation rows act_row bytes apart, through the same path matmul
 * takes for batches (the multi-row kernel where the level has one); 0, or -1 for bad arguments. */
int llk_vec_dot_cols(int wtype, const void *w, const void *act, size_t act_row, int n_cols, int64_t n, float *out);

/* ---- native model ------------------------------------------------------ */

typedef struct llk_tensor {
    const void *data; /* NULL: absent */
    int32_t type;
    int64_t ne0, ne1; /* ne0: row length (input features); ne1: rows */
} llk_tensor;

typedef struct llk_layer {
    llk_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, post_attn_norm;
    llk_tensor ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    /* A mixture-of-experts layer's feed-forward (w_gate/w_up/w_down then absent; moe.h): the router
     * (ne1 = n_expert rows) and the experts' matrices, one expert's shape each (ne0, ne1), expert e's
     * rows following expert e-1's (ne1 a multiple of 16 where they are repacked). */
    llk_tensor ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps;
    /* gpt-oss (absent elsewhere): attention's output bias, one learned sink logit per head (F32 [n_head]: it
     * enters each head's softmax max and denominator, never the output), the router's bias and the experts'
     * biases (F32, [n_expert][width], expert e's row after expert e-1's) */
    llk_tensor bo, attn_sinks, ffn_gate_inp_b, ffn_gate_exps_b, ffn_up_exps_b, ffn_down_exps_b;
    /* A Gated DeltaNet layer (qwen35, qwen35moe; ssm_qkv present, and wq..wo, q_norm, k_norm absent): the mixed
     * q/k/v projection (ne1 = 2 * ssm_n_group * ssm_d_state + ssm_dt_rank * ssm_d_state channels, q's then k's
     * then v's), the output gate z (ne1 = ssm_dt_rank * ssm_d_state), beta's and alpha's projections (ne1 =
     * ssm_dt_rank), the depthwise causal convolution (F32, ne0 = ssm_d_conv taps, ne1 = channels, the newest
     * input's tap last), dt's bias and a = -exp(A_log) (F32 [ssm_dt_rank]), the output's RMS norm (F32
     * [ssm_d_state], shared by the heads) and the output projection. */
    llk_tensor ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_conv, ssm_dt, ssm_a, ssm_norm, ssm_out;
    /* qwen35moe's shared expert beside the routed ones: its gate logit's row (F32 [n_embd], ne1 = 1; the
     * expert's output is scaled by its sigmoid) and its gated FFN (n_ff_shexp wide) */
    llk_tensor ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
    int32_t sliding;      /* 1: sliding-window attention layer */
    float rope_base;
    /* Gemma 4 (absent or 0 elsewhere). Attention of its own geometry (0: the model's head_dim, n_head_kv and
     * rope_dim), rotated with its own frequency factors (F32 [rope_dim / 2], or absent: the model's); a layer
     * at or past llk_model.n_layer_kv has no KV of its own and attends over layer kv_source's. */
    int32_t head_dim, n_head_kv, rope_dim, kv_source;
    llk_tensor rope_freqs;
    /* the output scaled by out_scale (F32 [1]); a per-layer embedding's gate (n_embd -> n_embd_per_layer),
     * projection back and its norm; a mixture-of-experts layer's dense FFN beside the experts (w_gate, w_up,
     * w_down) with the norms around both (post_ffn_norm_1 after the dense one, ffn_pre_norm_2 before and
     * ffn_post_norm_2 after the experts), the router's input scale (F32 [n_embd]) and each expert's output
     * scale (F32 [n_expert]); the experts' gate and up matrices as one (each expert's gate rows, then its up
     * rows), ffn_gate_exps and ffn_up_exps then absent */
    llk_tensor out_scale, per_layer_inp_gate, per_layer_proj, per_layer_post_norm;
    llk_tensor ffn_post_norm_1, ffn_pre_norm_2, ffn_post_norm_2, ffn_gate_inp_s, ffn_down_exps_s, ffn_gate_up_exps;
} llk_layer;

typedef struct llk_model {
    int32_t arch; /* the architecture's recipe: llk_arch_id of its name */
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int32_t rope_dim, sliding_window;
    int32_t n_expert, n_expert_used; /* 0 0: a dense model; else each layer routes a token to n_expert_used */
    float eps, attn_scale, embd_scale;
    llk_tensor tok_embd, output_norm, output;
    llk_layer *layers; /* n_layer entries; copied by llk_ctx_new */
    llk_tensor rope_freqs; /* F32 [rope_dim / 2]: each rotary angle divided by its factor (Llama 3); or absent */
    /* YaRN (ggml's rope_yarn; rope_freq_scale 0: none, the fields below unread): angles scaled by
     * rope_freq_scale, blended back towards the unscaled ones on the dimensions below the correction range
     * that yarn_orig_ctx and the betas give, cos and sin times yarn_attn_factor * (1 + 0.1 ln(1/freq_scale)) */
    float rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    int32_t yarn_orig_ctx;
    /* Gemma 4 (0 elsewhere): layers with KV of their own (0: all), the final logits' soft cap (cap *
     * tanh(logit / cap); 0: none), and the per-layer embeddings: n_embd_per_layer of each layer for each token
     * (per_layer_tok_embd [n_vocab] rows of n_layer * n_embd_per_layer) plus a projection of the embedding
     * (per_layer_model_proj, n_embd -> n_layer * n_embd_per_layer, each layer's part normed by
     * per_layer_proj_norm) */
    int32_t n_layer_kv, n_embd_per_layer;
    float final_logit_softcap;
    llk_tensor per_layer_tok_embd, per_layer_model_proj, per_layer_proj_norm;
    /* Gated DeltaNet (0 where no layer has one): taps of the convolution, the state size S (each K and V head's
     * width; a V head's state is S x S), K heads (ssm_n_group) and V heads (ssm_dt_rank, a multiple of the K
     * heads: V head h reads K head h % ssm_n_group, as llama.cpp tiles them) */
    int32_t ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank;
    int32_t n_ff_shexp; /* the shared expert's width (0: none) */
} llk_model;

typedef struct llk_ctx llk_ctx;

/* The number of the architecture GGUF files name `name` (general.architecture) for llk_model.arch; -1: the
 * native forward has no recipe for it. */
int llk_arch_id(const char *name);

/* Map a file read-only; returns its base and size, NULL on error (errno set). */
const void *llk_map_file(const char *path, int64_t *size);
void llk_unmap_file(const void *base, int64_t size);

/* A context over a pool of n_blocks KV blocks of block_size cells (a power of two, at least 16) in
 * kv_type (LLK_F16, or LLK_Q8_0 for heads of a multiple of 32 dimensions) for n_seq sequences (rows of the
 * block tables) of at most max_seq_len positions; NULL on bad arguments, a model the cache cannot hold or no
 * memory, with the reason in why (LLK_ERROR_LEN bytes, or NULL).  Only the layers with attention hold KV in
 * the blocks; a model with Gated DeltaNet layers also keeps each sequence's recurrent state (see
 * llk_state_bytes).  With window_kv, sliding-window layers keep only their window: their KV is in a ring of
 * blocks for each sequence (the blocks of its last sliding_window + n_batch positions, and one more), not in
 * the pool, and the ring's window is part of the sequence's state (llk_state_bytes > 0), so the sequence
 * continues its positions in order as a recurrent one does; it is off where the ring would not be shorter
 * than max_seq_len or every attention layer slides. */
#define LLK_ERROR_LEN 256
llk_ctx *llk_ctx_new(const llk_model *model, int n_blocks, int block_size, int max_seq_len, int n_batch,
                     int n_threads, int kv_type, int n_seq, int window_kv, char *why);
void llk_ctx_free(llk_ctx *ctx);

/* The bytes a context holds, by part: what llk_ctx_new allocated, for the memory planner. */
typedef struct llk_memory {
    size_t kv;          /* the pool: n_blocks blocks of llk_kv_block_bytes */
    size_t rings;       /* window_kv: every sequence's ring (llk_kv_ring_blocks blocks of llk_kv_ring_block_bytes) */
    size_t states;      /* every sequence's state beside its ring (Gated DeltaNet layers, position counts) */
    size_t scratch;     /* the rest: the forward's buffers for a batch of n_batch tokens, the rings' tables, and
                         * attention's, with the most its split (decode) tokens' partial results fill over n_seq
                         * sequences of max_seq_len */
    size_t experts;     /* the expert FFN's buffers for a batch (0 without experts; not in scratch) */
    size_t state_bytes; /* one sequence's state as llk_state_read copies it (llk_state_bytes) */
    int32_t ring_blocks; /* llk_kv_ring_blocks */
} llk_memory;
void llk_ctx_memory(const llk_ctx *ctx, llk_memory *out);
/* What llk_ctx_new with these arguments would hold (the same steps: the parts cannot differ), without holding it:
 * its pool, rings and states are address space only, and no thread starts.  The model's tensors are read for
 * their presence, types and shapes only (data need not point at weights, only be NULL where a tensor is absent).
 * 0, or -1 where llk_ctx_new would refuse, with the reason in why. */
int llk_ctx_plan(const llk_model *model, int n_blocks, int block_size, int max_seq_len, int n_batch, int n_threads,
                 int kv_type, int n_seq, int window_kv, llk_memory *out, char *why);
/* Fault in len bytes of the KV pool from offset (the memory the planner counted, so that it is held before
 * blocks are first used), leaving what pages hold alone; a range past the pool is nothing to do. */
void llk_kv_populate(llk_ctx *ctx, size_t offset, size_t len);
const char *llk_ctx_error(const llk_ctx *ctx);

/* One forward step over n tokens (any mix of sequences).  seq_ids is llama_batch's int32** (first id
 * used): row seq_ids[i][0] of `tables` ([n_tables][table_len] block ids) is token i's sequence, and
 * pos[i] is its position there, the cell it writes; it attends to positions 0..pos[i] of that
 * sequence, which must already be written (or be in this batch).  want[i] != 0 asks for token i's
 * logits, written to logits_out in the order of the asked rows.  0 ok, <0 bad input.
 *
 * A context with a state (llk_state_bytes > 0: Gated DeltaNet layers, or window_kv's rings) also needs each
 * sequence's tokens to continue its state: a token at position 0, the sequence's first in the batch, starts it
 * afresh (its state zeroed first), and any other token of a sequence must be at the position after the last one
 * its state holds (the tokens of one sequence in a batch in position order).  A batch with a token that does not
 * is refused whole (-7, nothing written):
 * the state cannot be cut back to an earlier position, so to go back, write a state saved there
 * (llk_state_write) or start again from position 0. */
int llk_decode(llk_ctx *ctx, int n, const int32_t *tokens, const int32_t *pos, int32_t *const *seq_ids,
               const int8_t *want, float *logits_out, const int32_t *tables, int n_tables, int table_len);
/* llk_decode without the output head, for embeddings: the final-normed hidden states of the wanted
 * rows ([n_asked][n_embd], in their order) to hidden_out.  0 ok, <0 bad input. */
int llk_decode_hidden(llk_ctx *ctx, int n, const int32_t *tokens, const int32_t *pos, int32_t *const *seq_ids,
                      const int8_t *want, float *hidden_out, const int32_t *tables, int n_tables, int table_len);

/* Whole KV blocks: their size, copy on write, and spilling to (and restoring from) host memory. */
size_t llk_kv_block_bytes(const llk_ctx *ctx);
int llk_kv_block_copy(llk_ctx *ctx, int dst, int src);
int llk_kv_block_read(const llk_ctx *ctx, int block, void *dst);
int llk_kv_block_write(llk_ctx *ctx, int block, const void *src);
/* What a pool block and a state's window hold, layer by layer, as text (for the disk tier's headers: files of
 * another layout are never read as this one's): its length (without the NUL), written to buf when len is more
 * than that (else cut to len - 1 characters; buf may be NULL with len 0 to ask for the length). */
int llk_kv_layout(const llk_ctx *ctx, char *buf, size_t len);
/* window_kv: the blocks of each sequence's ring and the bytes of one of them (both 0 when off). */
int llk_kv_ring_blocks(const llk_ctx *ctx);
size_t llk_kv_ring_block_bytes(const llk_ctx *ctx);

/* A sequence's state (how many positions it holds; the convolution window and the S x S state of each V head of
 * every Gated DeltaNet layer; with window_kv, its sliding layers' window: the last blocks of its ring), as bytes:
 * their size (the same for every sequence; 0 for a context without state), a copy of sequence seq's to dst, seq's
 * set from src (as read from any sequence of a context of the same model; seq then continues at the position it
 * held), and seq's emptied (as at position 0).  0 ok, -1 no such sequence, a context without state, or src's
 * position count past the context's max_seq_len. */
size_t llk_state_bytes(const llk_ctx *ctx);
int llk_state_read(const llk_ctx *ctx, int seq, void *dst);
int llk_state_write(llk_ctx *ctx, int seq, const void *src);
int llk_state_reset(llk_ctx *ctx, int seq);
/* Take seq back to n positions, dropping the later ones (a speculative draft's rejected tokens), where its state is
 * only the sliding layers' window (window_kv, no Gated DeltaNet layers) and n is at least the first position of the
 * last batch that advanced it: the window before n is still in the ring then (a batch never overwrites what it or
 * the next batch reads).  0 ok, -1 otherwise (restore a saved state instead). */
int llk_state_rewind(llk_ctx *ctx, int seq, int n);
/* Have the next llk_decode / llk_decode_hidden also copy sequence seq's state right after its token at position
 * pos in that batch to dst (llk_state_bytes; what llk_state_read would give had the batch ended there), so that
 * a state inside a batch is kept without cutting the batch there; dst must stay valid until that call, which
 * then forgets every request (one a batch token and at most LLK_STATE_CAPTURES; a position not in the batch
 * leaves dst as it was).  0 ok, -1 no such sequence, a model without state, or too many requests. */
#define LLK_STATE_CAPTURES 64
int llk_state_capture(llk_ctx *ctx, int seq, int pos, void *dst);

/* Thread pool on its own, for benchmarks: parallel matvec y[rows] = W x. */
int llk_matvec(llk_ctx *ctx, const llk_tensor *w, const float *x, float *y);
/* y[t][rows] = W x[t] for n_tok rows of x on the calling thread, through the path the forward pass takes
 * (repacked or not): for tests and single-thread benchmarks. 0, or -1 for a bad tensor or no memory. */
int llk_gemm(const llk_tensor *w, const float *x, int n_tok, float *y);
/* bytes/s of one pass over buf by n_threads threads, each reading its contiguous share with the loads and
 * prefetches of the repacked kernels (the machine's read bandwidth for that many cores, as decode reads) */
double llk_read_bandwidth(const void *buf, int64_t nbytes, int n_threads);

#ifdef __cplusplus
}
#endif
#endif
