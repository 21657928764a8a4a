/* The expert feed-forward of a mixture-of-experts layer, as llama.cpp's build_moe_ffn computes it.
 *
 * A router scores the experts for each token; the token goes through its top n_used experts (each a gated
 * FFN: down(act(gate x) * up x)), and their outputs are summed, weighted by the router. What differs
 * between architectures is a recipe (moe_ffn): which probabilities the router gives and how the chosen
 * weights are normalised, the activation, and (later) biases and a shared expert beside the routed ones.
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
    MOE_SOFTMAX = 0, /* softmax over all experts, then the top k (qwen3moe, with norm_topk) */
};

/* One layer's expert FFN: the router (F32 or quantized, n_expert rows) and the experts' matrices, one
 * expert's shape each, expert e's rows following expert e-1's (see llk_layer). */
typedef struct {
    const llk_tensor *router, *gate, *up, *down;
    int n_expert, n_used;
    enum moe_gating gating;
    int norm_topk; /* the k weights divided by their sum (qwen3moe's norm_topk_prob) */
} moe_ffn;

typedef struct moe_scratch moe_scratch;

/* Scratch for batches of up to n_batch tokens through the expert FFNs of `model`'s layers; NULL when out of
 * memory. */
moe_scratch *moe_scratch_new(const llk_model *model, int n_batch);
void moe_scratch_free(moe_scratch *s);

/* out[t * out_stride ...] = the expert FFN of the T rows of x (n_embd each); `then`: the matrix the forward
 * reads next, read ahead in decode. */
void moe_ffn_run(const moe_ffn *f, moe_scratch *s, llk_pool *pool, const float *x, int T, float *out,
                 int64_t out_stride, const llk_tensor *then);

#endif
