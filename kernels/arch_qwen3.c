/* Qwen3: Llama's layer with per-head RMS norms on q and k, rotating a head's two halves (NeoX). */
#include "layers.h"

const llk_recipe recipe_qwen3 = {"qwen3", pre_norm_layer, .attn = {.rope_neox = 1}, .ffn_act = FFN_SILU};
