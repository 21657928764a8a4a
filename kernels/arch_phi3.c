/* Phi-3: Llama's layer rotating a head's two halves (NeoX), Q scaled before the dot product; its fused
 * attn_qkv and gate+up matrices are split into row ranges at load. */
#include "layers.h"

const llk_recipe recipe_phi3 = {"phi3", pre_norm_layer, .attn = {.rope_neox = 1, .scale_q = 1}, .ffn_act = FFN_SILU};
