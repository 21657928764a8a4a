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
} layer_step;

/* Token t's q, k and v out of their matrices: biases, head norms, the rotary embedding; q scaled and
 * rounded to half precision. */
static void qkv_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const llk_model *m = &c->m;
    const llk_layer *L = s->L;
    const int hd = m->head_dim;
    float *q = c->q + (size_t)t * c->q_dim, *k = c->k + (size_t)t * c->kv_dim, *cs = c->cs + (size_t)t * m->rope_dim;
    add_bias(q, &L->bq, c->q_dim);
    add_bias(k, &L->bk, c->kv_dim);
    add_bias(c->v + (size_t)t * c->kv_dim, &L->bv, c->kv_dim);
    head_norm(q, &L->q_norm, m->n_head, hd, m->eps);
    head_norm(k, &L->k_norm, m->n_head_kv, hd, m->eps);
    if (c->yarn) llk_rope_angles_yarn(cs, c->rope_scale[s->il], m->rope_dim, (float)c->pos_of[t], &c->yarn[s->il]);
    else llk_rope_angles(cs, c->rope_scale[s->il], m->rope_dim, (float)c->pos_of[t], m->rope_freqs.data);
    llk_rope(q, m->n_head, hd, m->rope_dim, cs, s->opts->rope_neox);
    llk_rope(k, m->n_head_kv, hd, m->rope_dim, cs, s->opts->rope_neox);
    llk_kernels()->scale_round_f16(q, s->opts->scale_q ? m->attn_scale : 1.0f, c->q_dim);
}

/* A gated query's token t: wq's rows (each head's query, then its output gate) split, the queries to c->q (the
 * gates stay in c->qg for output_gate_step). */
static void split_query_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const int hd = c->m.head_dim;
    const float *qg = c->qg + (size_t)t * 2 * c->q_dim;
    float *q = c->q + (size_t)t * c->q_dim;
    for (int h = 0; h < c->m.n_head; h++) memcpy(q + (size_t)h * hd, qg + (size_t)h * 2 * hd, sizeof(float) * hd);
}

static void output_gate_step(const void *arg, int t) {
    const layer_step *s = arg;
    llk_ctx *c = s->c;
    const int hd = c->m.head_dim;
    const float *qg = c->qg + (size_t)t * 2 * c->q_dim;
    float *att = c->att + (size_t)t * c->q_dim;
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
    const layer_step step = {c, L, il, opts};
    const int kv_il = c->kv_layer[il];
    new_input(c);
    const llk_tensor *qkv[] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[] = {opts->output_gate ? c->qg : c->q, c->k, c->v};
    const int64_t qkv_stride[] = {opts->output_gate ? 2 * c->q_dim : c->q_dim, c->kv_dim, c->kv_dim};
    matmul_n(c, 3, qkv, c->xn, T, qkv_out, qkv_stride, &L->wo);
    if (opts->output_gate) each_token(c->pool, T, split_query_step, &step);
    each_token(c->pool, T, qkv_step, &step);
    for (int t = 0; t < T; t++) /* on one thread: two tokens of a (malformed) batch may name one cell */
        kv_store(&c->kv, c->table_of[t], kv_il, c->pos_of[t], c->k + (size_t)t * c->kv_dim, c->v + (size_t)t * c->kv_dim);
    if (attention_run(c->attn, c->pool, &c->kv, kv_il, T, c->pos_of, c->table_of, c->q,
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
    int ff;
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
    gated_ffn(c, &L->w_gate, &L->w_up, &L->w_down, c->m.n_ff, act, T, c->o, after_layer(c, il));
}

void expert_ffn_block(llk_ctx *c, int il, int T, const expert_opts *opts) {
    const llk_model *m = &c->m;
    const llk_layer *L = &c->layers[il];
    const moe_ffn experts = {&L->ffn_gate_inp, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                             m->n_expert, m->n_expert_used, opts->gating, opts->norm_topk, opts->act,
                             L->ffn_gate_inp_b.data, L->ffn_gate_exps_b.data, L->ffn_up_exps_b.data,
                             L->ffn_down_exps_b.data};
    moe_ffn_run(&experts, c->moe, c->pool, c->xn, T, c->o, m->n_embd, after_layer(c, il));
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
    }
    const deltanet_batch batch = {dn, L, T, c->pos_of, c->conv_of, c->ssm_of, c->mix, c->z, c->beta, c->decay, c->att,
                                  c->m.eps};
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
