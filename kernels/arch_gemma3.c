/* Gemma 3: sandwich norms (attention's and the FFN's outputs normed before the residual), per-head q/k norms,
 * Q scaled before the dot product, NeoX rotation (another base on the sliding layers), a GeGLU FFN; the
 * embedding scaled by sqrt(n_embd) (llk_model.embd_scale). */
#include "layers.h"

const llk_recipe recipe_gemma3 = {"gemma3", pre_norm_layer, .attn = {.rope_neox = 1, .scale_q = 1},
                                  .ffn_act = FFN_GELU};
