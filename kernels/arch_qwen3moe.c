/* Qwen3-MoE: Qwen3's attention, then experts: softmax over all of them, the top k's weights renormalised,
 * SwiGLU experts. */
#include "layers.h"

static const expert_opts experts = {MOE_SOFTMAX, 1, MOE_SILU};
const llk_recipe recipe_qwen3moe = {"qwen3moe", pre_norm_layer, .attn = {.rope_neox = 1}, .experts = &experts};
