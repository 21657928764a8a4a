/* Llama (and SmolLM2, Mistral...): pre-norm attention rotating adjacent pairs (Llama 3's rope_freqs where the
 * file has them), a SwiGLU FFN. */
#include "layers.h"

const llk_recipe recipe_llama = {"llama", pre_norm_layer, .attn = {.rope_neox = 0}, .ffn_act = FFN_SILU};
