/* gpt-oss: attention with biases on q, k, v and the output, a learned sink per head, the sliding window on
 * every other layer, YaRN; experts chosen on the biased router logits, softmax over the k chosen, the clamped
 * SwiGLU with biases. */
#include "layers.h"

static const expert_opts experts = {MOE_TOPK_SOFTMAX, 0, MOE_SWIGLU_OAI};
const llk_recipe recipe_gptoss = {"gpt-oss", pre_norm_layer, .attn = {.rope_neox = 1}, .experts = &experts};
