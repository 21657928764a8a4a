/* The expert feed-forward of a mixture-of-experts layer, as llama.cpp's build_moe_ffn computes it.
 *
 * A router scores the experts for each token; the token goes through its top n_used experts (each a gated
 * FFN: down(act(gate x) * up x)), and their outputs are summed, weighted by the router. What differs
 * between architectures is a recipe (moe_ffn): which probabilities the router gives and how the chosen
 * weights are normalised, the activation, biases (gpt-oss), and (later) a shared expert beside the routed ones.
 *
 * Batch invariance: a token's experts, the weights and the order in which their outputs are summed (by
 * rank in its top-k) depend on its own router scores only. The experts' matrices are read once per batch
 * for all the tokens that chose them (decode: only the chosen experts' rows), and each token's product
 * through the kernels is bit for bit what it would be alone (common.h).
 */
#ifndef LLK_MOE_H
#define LLK_MOE_H

#include "llk.h"
#include "pool.h"

/* How the router's logits become the chosen experts' weights. */
enum moe_gating {
    MOE_SOFTMAX = 0,      /* softmax over all experts, then the top k (qwen3moe, with norm_topk) */
    MOE_TOPK_SOFTMAX = 1, /* the top k of the logits, then softmax over those k (gpt-oss: SOFTMAX_WEIGHT) */
};

/* The experts' activation of gate g and up u. */
enum moe_act {
    MOE_SILU = 0,       /* silu(g) * u */
    MOE_SWIGLU_OAI = 1, /* gpt-oss: x = min(g, 7), y = clamp(u, -7, 7), x * sigmoid(1.702 x) * (y + 1) */
    MOE_GELU = 2,       /* gelu_tanh(g) * u (Gemma 4) */
};

/* One layer's expert FFN: the router (F32 or quantized, n_expert rows) and the experts' matrices, one
 * expert's shape each, expert e's rows following expert e-1's (see llk_layer). */
typedef struct {
    const llk_tensor *router, *gate, *up, *down;
    int n_expert, n_used;
    enum moe_gating gating;
    int norm_topk; /* the k weights divided by their sum (qwen3moe's norm_topk_prob) */
    enum moe_act act;
    /* F32 biases or NULL: the router's [n_expert], and each expert's row of the gate's, up's and down's
     * ([n_expert][n_ff] and [n_expert][n_embd]) added to its products */
    const float *router_b, *gate_b, *up_b, *down_b;
    /* The router's own input rows (n_embd each), or NULL: x (Gemma 4 routes a scaled norm of the residual) */
    const float *router_x;
    /* F32 [n_expert] or NULL: each expert's output scaled by its entry before it is weighted (Gemma 4) */
    const float *down_scale;
    /* rows from one expert's gate (and up) matrix to the next: their ne1, or more where each expert's gate and
     * up rows are one matrix (Gemma 4's ffn_gate_up_exps: gate and up are views of its halves) */
    int64_t expert_rows;
} moe_ffn;

typedef struct moe_scratch moe_scratch;

/* Scratch for batches of up to n_batch tokens through the expert FFNs of `model`'s layers; NULL when out of
 * memory. */
moe_scratch *moe_scratch_new(const llk_model *model, int n_batch);
void moe_scratch_free(moe_scratch *s);
size_t moe_scratch_bytes(const moe_scratch *s); /* the bytes s holds (0 for NULL) */

/* out[t * out_stride ...] = the expert FFN of the T rows of x (n_embd each); `then`: the matrix the forward
 * reads next, read ahead in decode. */
void moe_ffn_run(const moe_ffn *f, moe_scratch *s, llk_pool *pool, const float *x, int T, float *out,
                 int64_t out_stride, const llk_tensor *then);

#endif
