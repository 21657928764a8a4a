/* Qwen 3.5 and 3.6 (qwen35, and qwen35moe with routed experts beside a sigmoid-gated shared one): three Gated
 * DeltaNet layers (deltanet.h) before every attention layer, whose query carries an output gate per head and
 * whose q and k are normed per head; partial NeoX rope (the multi-section rope of a text token, every section
 * at its position).  The residual of the FFN is taken before its norm (post_attention_norm, loaded as ffn_norm). */
#include "layers.h"

static int hybrid_layer(llk_ctx *c, int il, int T) {
    const llk_recipe *r = c->recipe;
    const llk_layer *L = &c->layers[il];
    norm_block(c, &L->attn_norm, T);
    if (L->ssm_qkv.data) deltanet_block(c, il, T);
    else if (attention_block(c, il, T, &r->attn)) return -1;
    residual_block(c, &L->post_attn_norm, &L->ffn_norm, T);
    if (r->experts) {
        expert_ffn_block(c, il, T, r->experts);
        shared_expert_block(c, il, T);
    } else {
        dense_ffn_block(c, il, T, r->ffn_act);
    }
    residual_block(c, &L->post_ffn_norm, NULL, T);
    return 0;
}

static const expert_opts experts = {MOE_SOFTMAX, 1, MOE_SILU};
const llk_recipe recipe_qwen35 = {"qwen35", hybrid_layer, .attn = {.rope_neox = 1, .output_gate = 1}};
const llk_recipe recipe_qwen35moe = {"qwen35moe", hybrid_layer, .attn = {.rope_neox = 1, .output_gate = 1},
                                     .experts = &experts};
