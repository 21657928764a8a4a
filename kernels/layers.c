/* The blocks of a decoder layer (layers.h): their steps between matrix products run a token's row at a time
 * (each_token), the products over the pool (matmul_n, moe_ffn_run). */
#include "layers.h"

static void add_bias(float *x, const llk_tensor *b, int n) {
    if (!b->data) return;
    const float *bias = b->data;
    for (int i = 0; i < n; i++) x[i] += bias[i];
}

static void head_norm(float *x, const llk_tensor *w, int n_heads, int hd, float eps) {
    if (!w->data) return;
    for (int h = 0; h < n_heads; h++) llk_rmsnorm(x + (size_t)h * hd, w->data, x + (size_t)h * hd, hd, eps);
}

/* ---- norms and the residual stream ------------------------------------------- */

typedef struct {
    llk_ctx *c;
    const llk_tensor *post, *next; /* norm_block: next only */
} norm_args;

static void norm_step(const void *arg, int t) {
    const norm_args *a = arg;
    const size_t E = (size_t)a->c->m.n_embd;
    llk_rmsnorm(a->c->x + t * E, a->next->data, a->c->xn + t * E, (int)E, a->c->m.eps);
}

void norm_block(llk_ctx *c, const llk_tensor *w, int T) {
    const norm_args a = {c, NULL, w};
    each_token(c->pool, T, norm_step, &a);
}

static void residual_step(const void *arg, int t) {
    const norm_args *a = arg;
    llk_ctx *c = a->c;
    const size_t E = (size_t)c->m.n_embd;
    float *o = c->o + t * E, *x = c->x + t * E;
    if (a->post->data) llk_rmsnorm(o, a->post->data, o, (int)E, c->m.eps);
    for (size_t i = 0; i < E; i++) x[i] += o[i];
    if (a->next) norm_step(arg, t);
}

void residual_block(llk_ctx *c, const llk_tensor *post_norm, const llk_tensor *next_norm, int T) {
    const norm_args a = {c, post_norm, next_norm};
    each_token(c->pool, T, residual_step, &a);
}

/* ---- attention ----------------------------------------------------------------- */

typedef struct {
    llk_ctx *c;
    const llk_layer *L;
    int il;
    const attn_opts *opts;
    int own_kv; /* the layer writes KV of its own (else it reads its kv_source's) */
} layer_step;

/* Token t's q, k and v out of their matrices (the layer's own widths, rows packed at them): biases, head norms
 * (V's without a weight where the recipe norms it; V is K before its norm where the layer has no V matrix),
 * the rotary embedding; q scaled and rounded to half precision. A layer that reads another's KV makes q only. */
static void qkv_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const llk_model *m = &c->m;
    const llk_layer *L = s->L;
    const int hd = L->head_dim, q_dim = m->n_head * hd, kv_dim = L->n_head_kv * hd;
    float *q = c->q + (size_t)t * q_dim, *k = c->k + (size_t)t * kv_dim, *v = c->v + (size_t)t * kv_dim;
    float *cs = c->cs + (size_t)t * L->rope_dim;
    const float *freq_factors = L->rope_freqs.data ? L->rope_freqs.data : m->rope_freqs.data;
    add_bias(q, &L->bq, q_dim);
    head_norm(q, &L->q_norm, m->n_head, hd, m->eps);
    if (c->yarn) llk_rope_angles_yarn(cs, c->rope_scale[s->il], L->rope_dim, (float)c->pos_of[t], &c->yarn[s->il]);
    else llk_rope_angles(cs, c->rope_scale[s->il], L->rope_dim, (float)c->pos_of[t], freq_factors);
    llk_rope(q, m->n_head, hd, L->rope_dim, cs, s->opts->rope_neox);
    llk_kernels()->scale_round_f16(q, s->opts->scale_q ? m->attn_scale : 1.0f, q_dim);
    if (!s->own_kv) return;
    if (!L->wv.data) memcpy(v, k, (size_t)kv_dim * sizeof(float));
    add_bias(k, &L->bk, kv_dim);
    add_bias(v, &L->bv, kv_dim);
    head_norm(k, &L->k_norm, L->n_head_kv, hd, m->eps);
    if (s->opts->v_norm)
        for (int h = 0; h < L->n_head_kv; h++) llk_rmsnorm(v + (size_t)h * hd, NULL, v + (size_t)h * hd, hd, m->eps);
    llk_rope(k, L->n_head_kv, hd, L->rope_dim, cs, s->opts->rope_neox);
}

/* A gated query's token t: wq's rows (each head's query, then its output gate) split, the queries to c->q (the
 * gates stay in c->qg for output_gate_step). */
static void split_query_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const int hd = s->L->head_dim;
    const size_t q_dim = (size_t)c->m.n_head * hd;
    const float *qg = c->qg + t * 2 * q_dim;
    float *q = c->q + t * q_dim;
    for (int h = 0; h < c->m.n_head; h++) memcpy(q + (size_t)h * hd, qg + (size_t)h * 2 * hd, sizeof(float) * hd);
}

static void output_gate_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const int hd = s->L->head_dim;
    const size_t q_dim = (size_t)c->m.n_head * hd;
    const float *qg = c->qg + t * 2 * q_dim;
    float *att = c->att + t * q_dim;
    for (int h = 0; h < c->m.n_head; h++)
        for (int d = 0; d < hd; d++) att[h * hd + d] *= 1.0f / (1.0f + llk_expf(-qg[(size_t)h * 2 * hd + hd + d]));
}

static void out_bias_step(const void *arg, int t) {
    const layer_step *s = arg;
    const size_t E = (size_t)s->c->m.n_embd;
    add_bias(s->c->o + t * E, &s->L->bo, (int)E);
}

/* The matrix layer il's FFN reads first (read ahead while attention's output matrix is read). */
static const llk_tensor *ffn_first(const llk_layer *L) { return L->ffn_gate_inp.data ? &L->ffn_gate_inp : &L->w_gate; }

int attention_block(llk_ctx *c, int il, int T, const attn_opts *opts) {
    const llk_model *m = &c->m;
    const llk_layer *L = &c->layers[il];
    const layer_step step = {c, L, il, opts, il < (m->n_layer_kv ? m->n_layer_kv : m->n_layer)};
    const int q_dim = m->n_head * L->head_dim, kv_dim = L->n_head_kv * L->head_dim;
    const int where = c->kv_of[il], slot = c->kv_slot[il];
    const kv_cache *kv = where == KV_WIN ? &c->kv_win : where == KV_ALT ? &c->kv_alt : &c->kv;
    attention *attn = where == KV_WIN ? c->attn_win : where == KV_ALT ? c->attn_alt : c->attn;
    const int32_t **tables = where == KV_WIN ? c->ring_table_of : c->table_of;
    new_input(c);
    /* K and V where the layer has KV of its own (V where it has a V matrix) */
    const llk_tensor *qkv[] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[] = {opts->output_gate ? c->qg : c->q, c->k, c->v};
    const int64_t qkv_stride[] = {opts->output_gate ? 2 * q_dim : q_dim, kv_dim, kv_dim};
    matmul_n(c, !step.own_kv ? 1 : !L->wv.data ? 2 : 3, qkv, c->xn, T, qkv_out, qkv_stride, &L->wo);
    if (opts->output_gate) each_token(c->pool, T, split_query_step, &step);
    each_token(c->pool, T, qkv_step, &step);
    for (int t = 0; step.own_kv && t < T; t++) /* on one thread: two tokens of a (malformed) batch may name one cell */
        kv_store(kv, tables[t], slot, c->pos_of[t], c->k + (size_t)t * kv_dim, c->v + (size_t)t * kv_dim);
    if (attention_run(attn, c->pool, kv, slot, T, c->pos_of, tables, c->q,
                      L->sliding ? m->sliding_window : 0, opts->scale_q ? 1.0f : m->attn_scale, L->attn_sinks.data,
                      c->att))
        return -1;
    if (opts->output_gate) each_token(c->pool, T, output_gate_step, &step);
    new_input(c);
    matmul(c, &L->wo, c->att, T, c->o, m->n_embd, ffn_first(L));
    if (L->bo.data) each_token(c->pool, T, out_bias_step, &step);
    return 0;
}

/* ---- feed-forward ----------------------------------------------------------------- */

/* The matrix read after layer il: the next layer's first, or the output head's. */
static const llk_tensor *after_layer(const llk_ctx *c, int il) {
    if (il + 1 == c->m.n_layer) return output_head(c);
    const llk_layer *next = &c->layers[il + 1];
    return next->ssm_qkv.data ? &next->ssm_qkv : &next->wq;
}

typedef struct {
    llk_ctx *c;
    enum ffn_act act;
    int ff; /* the FFN's width */
} gate_args;

static void gate_step(const void *arg, int t) {
    const gate_args *a = arg;
    const size_t ff = (size_t)a->ff;
    float *g = a->c->g + t * ff, *u = a->c->u + t * ff;
    if (a->act == FFN_GELU) llk_kernels()->gelu_mul(g, u, (int)ff);
    else llk_kernels()->silu_mul(g, u, (int)ff);
}

/* out = down(act(gate xn) * up xn) for the T rows of c->xn, an FFN ff wide; `then` read ahead after down. */
static void gated_ffn(llk_ctx *c, const llk_tensor *gate, const llk_tensor *up, const llk_tensor *down, int ff,
                      enum ffn_act act, int T, float *out, const llk_tensor *then) {
    const gate_args args = {c, act, ff};
    new_input(c);
    const llk_tensor *gate_up[] = {gate, up};
    float *gate_up_out[] = {c->g, c->u};
    const int64_t ff_stride[] = {ff, ff};
    matmul_n(c, 2, gate_up, c->xn, T, gate_up_out, ff_stride, down);
    each_token(c->pool, T, gate_step, &args);
    new_input(c);
    matmul(c, down, c->g, T, out, c->m.n_embd, then);
}

void dense_ffn_block(llk_ctx *c, int il, int T, enum ffn_act act) {
    const llk_layer *L = &c->layers[il];
    gated_ffn(c, &L->w_gate, &L->w_up, &L->w_down, (int)L->w_gate.ne1, act, T, c->o, after_layer(c, il));
}

void expert_ffn_block_into(llk_ctx *c, int il, int T, const expert_opts *opts, const float *router_x, float *out) {
    const llk_model *m = &c->m;
    const llk_layer *L = &c->layers[il];
    llk_tensor gate = L->ffn_gate_exps, up = L->ffn_up_exps;
    int64_t expert_rows = 0;
    if (L->ffn_gate_up_exps.data) { /* each expert's gate rows, then its up rows */
        const llk_tensor *gu = &L->ffn_gate_up_exps;
        expert_rows = gu->ne1;
        gate = (llk_tensor){gu->data, gu->type, gu->ne0, gu->ne1 / 2};
        up = (llk_tensor){(const uint8_t *)gu->data + llk_row_size(gu->type, gu->ne0) * (size_t)(gu->ne1 / 2), gu->type,
                          gu->ne0, gu->ne1 / 2};
    }
    const moe_ffn experts = {&L->ffn_gate_inp, &gate, &up, &L->ffn_down_exps, m->n_expert, m->n_expert_used,
                             opts->gating, opts->norm_topk, opts->act, L->ffn_gate_inp_b.data,
                             L->ffn_gate_exps_b.data, L->ffn_up_exps_b.data, L->ffn_down_exps_b.data, router_x,
                             L->ffn_down_exps_s.data, expert_rows};
    moe_ffn_run(&experts, c->moe, c->pool, c->xn, T, out, m->n_embd, after_layer(c, il));
}

void expert_ffn_block(llk_ctx *c, int il, int T, const expert_opts *opts) {
    expert_ffn_block_into(c, il, T, opts, NULL, c->o);
}

static void shared_expert_step(const void *arg, int t) {
    const llk_ctx *c = arg;
    const size_t E = (size_t)c->m.n_embd;
    const float gate = 1.0f / (1.0f + llk_expf(-c->sh_gate[t]));
    float *o = c->o + t * E;
    const float *sh = c->sh + t * E;
    for (size_t i = 0; i < E; i++) o[i] += sh[i] * gate;
}

void shared_expert_block(llk_ctx *c, int il, int T) {
    const llk_layer *L = &c->layers[il];
    gated_ffn(c, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, c->m.n_ff_shexp, FFN_SILU, T, c->sh,
              &L->ffn_gate_inp_shexp);
    new_input(c);
    matmul(c, &L->ffn_gate_inp_shexp, c->xn, T, c->sh_gate, 1, after_layer(c, il));
    each_token(c->pool, T, shared_expert_step, c);
}

/* ---- Gated DeltaNet ------------------------------------------------------------------ */

void deltanet_block(llk_ctx *c, int il, int T) {
    const llk_layer *L = &c->layers[il];
    const deltanet_shape *dn = &c->dn;
    new_input(c);
    const llk_tensor *in[] = {&L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha};
    float *in_out[] = {c->mix, c->z, c->beta, c->decay};
    const int64_t in_stride[] = {dn->channels, dn->inner, dn->n_v, dn->n_v};
    matmul_n(c, 4, in, c->xn, T, in_out, in_stride, &L->ssm_out);
    for (int t = 0; t < T; t++) {
        c->conv_of[t] = recurrent_state(c, c->seq_of[t], c->state_layer[il]);
        c->ssm_of[t] = c->conv_of[t] + dn->conv_floats;
        c->snap_of[t] = c->capture_of[t] ? (float *)(c->capture_of[t] + STATE_HEADER) +
                                               (size_t)c->state_layer[il] * c->state_layer_floats
                                         : NULL;
    }
    const deltanet_batch batch = {dn, L, T, c->pos_of, c->conv_of, c->ssm_of, c->snap_of, c->mix, c->z, c->beta,
                                  c->decay, c->att, c->m.eps};
    deltanet_run(c->pool, &batch);
    new_input(c);
    matmul(c, &L->ssm_out, c->att, T, c->o, c->m.n_embd, ffn_first(L));
}

/* ---- layers ----------------------------------------------------------------------- */

int pre_norm_layer(llk_ctx *c, int il, int T) {
    const llk_recipe *r = c->recipe;
    const llk_layer *L = &c->layers[il];
    norm_block(c, &L->attn_norm, T);
    if (attention_block(c, il, T, &r->attn)) return -1;
    residual_block(c, &L->post_attn_norm, &L->ffn_norm, T);
    if (r->experts) expert_ffn_block(c, il, T, r->experts);
    else dense_ffn_block(c, il, T, r->ffn_act);
    residual_block(c, &L->post_ffn_norm, NULL, T);
    return 0;
}
