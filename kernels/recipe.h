/* Architecture recipes: what one architecture's decoder layer is, over the shared blocks of layers.h.
 *
 * As llama.cpp's src/models/<arch>.cpp: each architecture is one short file, kernels/arch_<name>.c, defining
 * its llk_recipe (the blocks its layer runs and their options), registered by name in archs.c; its loader
 * half (metadata keys, tensors, what it sets in llk_model and llk_layer) is
 * localllm/backends/native/archs/<name>.py.
 *
 * To add an architecture:
 *  - write kernels/arch_<name>.c: `const llk_recipe recipe_<name> = {"<general.architecture>", layer, ...};`
 *    where layer is pre_norm_layer (attention then FFN, each pre-normed with a residual, options from the
 *    recipe) or a function of the file's own over layers.h's blocks (a layer of another kind: branch on
 *    the layer's fields, e.g. a per-layer kind the loader sets);
 *  - add it to archs.c's table;
 *  - what the others do not have goes in new fields (a new llk_layer tensor, an option here, state in
 *    llk_ctx made by ctx_new when the recipe asks for it), absent or zero for the others, so that no other
 *    architecture's file changes.
 */
#ifndef LLK_RECIPE_H
#define LLK_RECIPE_H

#include "llk.h"
#include "moe.h"

/* What differs between the architectures' self-attention (attention_block); the rest follows the layer's
 * tensors: q/k/v biases, per-head q/k norms, the output bias and per-head sinks where the layer has them,
 * the sliding window where it slides. */
typedef struct {
    int rope_neox; /* rotate the two halves of a head (NeoX), not adjacent pairs */
    /* Q scaled by attn_scale before it meets the half-precision K cache (Gemma 3, Phi-3), not the scores
     * after the dot product (llama), as llama.cpp does each */
    int scale_q;
    int v_norm; /* V RMS-normed per head without a weight (Gemma 4) */
    /* wq's rows are each head's query, then its output gate: the attention's output is multiplied by the
     * gate's sigmoid before the output matrix (Qwen 3.5) */
    int output_gate;
} attn_opts;

/* The dense FFN's activation of gate g and up u. */
enum ffn_act {
    FFN_SILU = 0, /* silu(g) * u (SwiGLU) */
    FFN_GELU = 1, /* gelu_tanh(g) * u (GeGLU) */
};

/* A mixture-of-experts FFN's router and experts (moe.h). */
typedef struct {
    enum moe_gating gating;
    int norm_topk;
    enum moe_act act;
} expert_opts;

typedef struct llk_recipe {
    const char *name;                          /* general.architecture */
    int (*layer)(llk_ctx *c, int il, int T);   /* layer il over the batch's T rows of c->x; 0, or -1 out of memory */
    attn_opts attn;
    enum ffn_act ffn_act;
    const expert_opts *experts;                /* the FFN of every layer is experts; NULL: dense */
    /* Inputs of the batch's T tokens beside the embedding in c->x (Gemma 4's per-layer embeddings), before the
     * first layer; NULL: none */
    void (*inputs)(llk_ctx *c, const int32_t *tokens, int T);
} llk_recipe;

/* The recipe registered as number `arch` (llk_arch_id), or NULL. */
const llk_recipe *llk_recipe_of(int arch);

#endif
