/* The blocks an architecture's layer is made of (layers.c), as llama.cpp's graph builders (build_norm,
 * build_attn, build_ffn, build_moe_ffn).  A layer's rows flow through the context's scratch: the residual
 * stream c->x, a block's input c->xn (a norm's output), its output c->o (added to c->x by residual_block).
 * Each block takes a token's row through the same operations whatever else is in the batch (model.c). */
#ifndef LLK_LAYERS_H
#define LLK_LAYERS_H

#include "forward.h"

/* c->xn = rmsnorm(c->x) * w for the T rows. */
void norm_block(llk_ctx *c, const llk_tensor *w, int T);
/* c->o = layer il's self-attention of c->xn: q, k and v (their biases, per-head norms and the rotary
 * embedding), written to the KV cache, attention over each token's sequence (the window on a sliding layer,
 * the sinks where the layer has them), its output matrix and bias.  0, or -1 out of memory. */
int attention_block(llk_ctx *c, int il, int T, const attn_opts *opts);
/* c->x += c->o (normed by post_norm where it has data: Gemma's sandwich norms); then c->xn = the next block's
 * norm of c->x where next_norm is not NULL. */
void residual_block(llk_ctx *c, const llk_tensor *post_norm, const llk_tensor *next_norm, int T);
/* c->o = layer il's gated FFN of c->xn: down(act(gate xn) * up xn). */
void dense_ffn_block(llk_ctx *c, int il, int T, enum ffn_act act);
/* c->o = layer il's mixture-of-experts FFN of c->xn (moe.h). */
void expert_ffn_block(llk_ctx *c, int il, int T, const expert_opts *opts);
/* The same into out (n_embd a row), the router reading router_x where it is not NULL (else c->xn). */
void expert_ffn_block_into(llk_ctx *c, int il, int T, const expert_opts *opts, const float *router_x, float *out);
/* c->o += layer il's shared expert of c->xn (a gated FFN n_ff_shexp wide) times the sigmoid of its gate logit
 * (ffn_gate_inp_shexp . xn), as Qwen 3.5's MoE adds it to the routed experts' sum. */
void shared_expert_block(llk_ctx *c, int il, int T);
/* c->o = layer il's Gated DeltaNet of c->xn (deltanet.h): its four input projections, the recurrence over each
 * token's sequence state (advanced in place), the output projection. */
void deltanet_block(llk_ctx *c, int il, int T);

/* The pre-norm decoder layer: attention, then the recipe's FFN (dense or experts), each normed first and
 * added to the residual stream (Gemma 3: normed after too). */
int pre_norm_layer(llk_ctx *c, int il, int T);

#endif
