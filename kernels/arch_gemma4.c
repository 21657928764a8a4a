/* Gemma 4, as llama.cpp's src/models/gemma4.cpp: Gemma 3's sandwich norms and GeGLU, with per-layer geometry
 * (sliding layers and global layers of other head sizes and KV heads, the global ones rotating part of each head
 * by frequency factors), the last layers reading earlier layers' KV (llk_model.n_layer_kv), V RMS-normed (and
 * K's rows where a layer has no V matrix), attention scores unscaled (attn_scale 1), each layer's output times
 * its scale, and the final logits soft-capped (model.c). E2B/E4B add per-layer embeddings; 26B-A4B's layers run
 * a dense FFN beside experts routed on a scaled norm of the residual, each expert's output scaled. */
#include <math.h>

#include "layers.h"

static const expert_opts experts = {MOE_SOFTMAX, 1, MOE_GELU};

/* ---- per-layer embeddings ------------------------------------------------------ */

/* Token t's inputs of every layer: (norm(projection of its scaled embedding / sqrt(n_embd)) + its row of
 * per_layer_tok_embd * sqrt(n_embd_per_layer)) / sqrt(2), each op rounded as ggml's. */
typedef struct {
    llk_ctx *c;
    const int32_t *tokens;
} ple_args;

static void ple_step(const void *arg, int t) {
    const ple_args *a = arg;
    llk_ctx *c = a->c;
    const llk_model *m = &c->m;
    const int P = m->n_embd_per_layer;
    const size_t row = llk_row_size(m->per_layer_tok_embd.type, m->per_layer_tok_embd.ne0);
    const uint8_t *tok = (const uint8_t *)m->per_layer_tok_embd.data + (size_t)a->tokens[t] * row;
    const float proj_scale = 1.0f / sqrtf((float)m->n_embd), tok_scale = sqrtf((float)P), mix = 1.0f / sqrtf(2.0f);
    float *e = c->xn + (size_t)t * m->n_embd; /* a layer's part of the token's row (P <= n_embd: the loader checks) */
    for (int il = 0; il < m->n_layer; il++) {
        float *p = c->ple + ((size_t)t * m->n_layer + il) * P;
        for (int i = 0; i < P; i++) p[i] *= proj_scale;
        llk_rmsnorm(p, m->per_layer_proj_norm.data, p, P, m->eps);
        llk_dequantize(m->per_layer_tok_embd.type, tok + llk_row_size(m->per_layer_tok_embd.type, (int64_t)il * P), e, P);
        for (int i = 0; i < P; i++) p[i] = (p[i] + e[i] * tok_scale) * mix;
    }
}

static void per_layer_inputs(llk_ctx *c, const int32_t *tokens, int T) {
    const llk_model *m = &c->m;
    if (!m->n_embd_per_layer) return;
    new_input(c);
    matmul(c, &m->per_layer_model_proj, c->x, T, c->ple, (int64_t)m->n_layer * m->n_embd_per_layer, NULL);
    const ple_args a = {c, tokens};
    each_token(c->pool, T, ple_step, &a);
}

/* ---- a layer ------------------------------------------------------------------------ */

typedef struct {
    llk_ctx *c;
    const llk_layer *L;
    int il;
} step_args;

/* Before the experts: the dense FFN's output normed, the experts' input normed, the router's input (the residual
 * RMS-normed, over sqrt(n_embd), times the router's scale). */
static void experts_in_step(const void *arg, int t) {
    const step_args *a = arg;
    llk_ctx *c = a->c;
    const int E = c->m.n_embd;
    const float *x = c->x + (size_t)t * E, *scale = a->L->ffn_gate_inp_s.data, inv = 1.0f / sqrtf((float)E);
    float *o = c->o + (size_t)t * E, *r = c->router_in + (size_t)t * E;
    llk_rmsnorm(o, a->L->ffn_post_norm_1.data, o, E, c->m.eps);
    llk_rmsnorm(x, a->L->ffn_pre_norm_2.data, c->xn + (size_t)t * E, E, c->m.eps);
    llk_rmsnorm(x, NULL, r, E, c->m.eps);
    for (int i = 0; i < E; i++) r[i] = r[i] * inv * scale[i];
}

/* After them: their output normed and added to the dense FFN's. */
static void experts_out_step(const void *arg, int t) {
    const step_args *a = arg;
    llk_ctx *c = a->c;
    const int E = c->m.n_embd;
    float *o = c->o + (size_t)t * E, *e = c->experts_out + (size_t)t * E;
    llk_rmsnorm(e, a->L->ffn_post_norm_2.data, e, E, c->m.eps);
    for (int i = 0; i < E; i++) o[i] += e[i];
}

static void ple_gate_step(const void *arg, int t) {
    const step_args *a = arg;
    llk_ctx *c = a->c;
    const int P = c->m.n_embd_per_layer;
    llk_kernels()->gelu_mul(c->ple_gate + (size_t)t * P, c->ple + ((size_t)t * c->m.n_layer + a->il) * P, P);
}

static void out_scale_step(const void *arg, int t) {
    const step_args *a = arg;
    const int E = a->c->m.n_embd;
    const float scale = *(const float *)a->L->out_scale.data;
    float *x = a->c->x + (size_t)t * E;
    for (int i = 0; i < E; i++) x[i] *= scale;
}

static int gemma4_layer(llk_ctx *c, int il, int T) {
    const llk_model *m = &c->m;
    const llk_layer *L = &c->layers[il];
    const step_args a = {c, L, il};
    norm_block(c, &L->attn_norm, T);
    if (attention_block(c, il, T, &c->recipe->attn)) return -1;
    residual_block(c, &L->post_attn_norm, &L->ffn_norm, T);
    dense_ffn_block(c, il, T, FFN_GELU);
    if (L->ffn_gate_inp.data) {
        each_token(c->pool, T, experts_in_step, &a);
        expert_ffn_block_into(c, il, T, &experts, c->router_in, c->experts_out);
        each_token(c->pool, T, experts_out_step, &a);
    }
    residual_block(c, &L->post_ffn_norm, NULL, T);
    if (m->n_embd_per_layer) { /* the layer's embedding, gated by its output, projected back and added */
        new_input(c);
        matmul(c, &L->per_layer_inp_gate, c->x, T, c->ple_gate, m->n_embd_per_layer, &L->per_layer_proj);
        each_token(c->pool, T, ple_gate_step, &a);
        new_input(c);
        matmul(c, &L->per_layer_proj, c->ple_gate, T, c->o, m->n_embd, NULL);
        residual_block(c, &L->per_layer_post_norm, NULL, T);
    }
    if (L->out_scale.data) each_token(c->pool, T, out_scale_step, &a);
    return 0;
}

const llk_recipe recipe_gemma4 = {"gemma4", gemma4_layer, .attn = {.rope_neox = 1, .v_norm = 1}, .ffn_act = FFN_GELU,
                                  .inputs = per_layer_inputs};
