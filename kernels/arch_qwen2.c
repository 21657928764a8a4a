/* Qwen2: Llama's layer with biases on q, k and v, rotating a head's two halves (NeoX). */
#include "layers.h"

const llk_recipe recipe_qwen2 = {"qwen2", pre_norm_layer, .attn = {.rope_neox = 1}, .ffn_act = FFN_SILU};
