/* The expert feed-forward (moe.h): route, group the batch's tokens by expert, one pool run for the chosen
 * experts' gate and up matrices, one for their down matrices, then each token's weighted sum. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "common.h"
#include "ops.h"

struct moe_scratch {
    int n_batch, n_used, n_expert;
    size_t act_router_row, act_in_row, act_hidden_row; /* the largest activation rows of x for the routers, for
                                                        * the experts' gate and up, and of the hidden states */
    float *logits;         /* [token][expert] */
    int32_t *chosen;       /* [token][rank]: the expert */
    float *weight;         /* [token][rank] */
    int32_t *pair;         /* [token][rank]: the row of (token, expert) in the grouped buffers below */
    int32_t *count, *first, *filled; /* [expert]: tokens that chose it, its first grouped row */
    uint8_t *act_router, *act_gate, *act_up; /* [token] (act_up: only where up takes other activations) */
    uint8_t *grouped_gate, *grouped_up;      /* [pair]: the token's activations, grouped by expert */
    float *g, *u;          /* [pair][n_ff]: gate and up products, then the hidden state in g */
    uint8_t *act_hidden;   /* [pair] */
    float *down;           /* [pair][n_embd] */
    llk_tensor *views;     /* [2 * n_expert]: expert e's matrices of the run under way */
    matmul_part *parts;    /* [2 * n_expert] */
    size_t held;           /* bytes of the buffers above */
};

/* One of s's buffers, counted in s->held. */
static void *take(moe_scratch *s, size_t n) {
    s->held += n;
    return malloc(n);
}

size_t moe_scratch_bytes(const moe_scratch *s) { return s ? s->held : 0; }

static size_t max_act(size_t have, const llk_tensor *t, int64_t n) {
    size_t need = t->data ? llk_act_size(t->type, n) : 0;
    return need > have ? need : have;
}

moe_scratch *moe_scratch_new(const llk_model *m, int n_batch) {
    moe_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t B = (size_t)n_batch, K = (size_t)m->n_expert_used, P = B * K, E = (size_t)m->n_embd;
    int64_t n_ff = 0;
    int separate_up = 0; /* some layer's up matrices take other activations than its gate matrices */
    for (int il = 0; il < m->n_layer; il++) {
        const llk_layer *L = &m->layers[il];
        if (L->ffn_gate_up_exps.data) { /* gate and up: the halves of one matrix, one kind of activations */
            s->act_in_row = max_act(s->act_in_row, &L->ffn_gate_up_exps, m->n_embd);
            if (L->ffn_gate_up_exps.ne1 / 2 > n_ff) n_ff = L->ffn_gate_up_exps.ne1 / 2;
        } else {
            separate_up |= llk_act_kind(L->ffn_gate_exps.type) != llk_act_kind(L->ffn_up_exps.type);
            s->act_in_row = max_act(s->act_in_row, &L->ffn_gate_exps, m->n_embd);
            s->act_in_row = max_act(s->act_in_row, &L->ffn_up_exps, m->n_embd);
            if (L->ffn_gate_exps.ne1 > n_ff) n_ff = L->ffn_gate_exps.ne1;
        }
        s->act_router_row = max_act(s->act_router_row, &L->ffn_gate_inp, m->n_embd);
    }
    for (int il = 0; il < m->n_layer; il++)
        s->act_hidden_row = max_act(s->act_hidden_row, &m->layers[il].ffn_down_exps, n_ff);
    s->n_batch = n_batch;
    s->n_used = m->n_expert_used;
    s->n_expert = m->n_expert;
    s->logits = take(s, B * (size_t)m->n_expert * sizeof(float));
    s->chosen = take(s, P * sizeof(int32_t));
    s->weight = take(s, P * sizeof(float));
    s->pair = take(s, P * sizeof(int32_t));
    s->count = take(s, (size_t)m->n_expert * sizeof(int32_t));
    s->first = take(s, (size_t)m->n_expert * sizeof(int32_t));
    s->filled = take(s, (size_t)m->n_expert * sizeof(int32_t));
    s->act_router = take(s, B * s->act_router_row + 64);
    s->act_gate = take(s, B * s->act_in_row + 64);
    s->act_up = separate_up ? take(s, B * s->act_in_row + 64) : NULL;
    s->grouped_gate = take(s, P * s->act_in_row + 64);
    s->grouped_up = separate_up ? take(s, P * s->act_in_row + 64) : NULL;
    s->g = take(s, P * (size_t)n_ff * sizeof(float));
    s->u = take(s, P * (size_t)n_ff * sizeof(float));
    s->act_hidden = take(s, P * s->act_hidden_row + 64);
    s->down = take(s, P * E * sizeof(float));
    s->views = take(s, 2 * (size_t)m->n_expert * sizeof(llk_tensor));
    s->parts = take(s, 2 * (size_t)m->n_expert * sizeof(matmul_part));
    if (!(s->logits && s->chosen && s->weight && s->pair && s->count && s->first && s->filled && s->act_router &&
          s->act_gate && (s->act_up || !separate_up) && s->grouped_gate && (s->grouped_up || !separate_up) && s->g && s->u && s->act_hidden && s->down &&
          s->views && s->parts)) {
        moe_scratch_free(s);
        return NULL;
    }
    return s;
}

void moe_scratch_free(moe_scratch *s) {
    if (!s) return;
    void *bufs[] = {s->logits, s->chosen, s->weight, s->pair, s->count, s->first, s->filled, s->act_router,
                    s->act_gate, s->act_up, s->grouped_gate, s->grouped_up, s->g, s->u, s->act_hidden, s->down,
                    s->views, s->parts};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(s);
}

/* One run of the expert FFN: what the per-token steps read. */
typedef struct {
    const moe_ffn *f;
    moe_scratch *s;
    const float *x;
    float *out;
    int64_t out_stride;
    int n_embd, n_ff;
    int gate_up_share; /* gate and up take the same activations */
} moe_run;

static void quantize_in_step(const void *arg, int t) {
    const moe_run *r = arg;
    const moe_ffn *f = r->f;
    moe_scratch *s = r->s;
    const float *x = r->x + (size_t)t * r->n_embd;
    const float *router_x = f->router_x ? f->router_x + (size_t)t * r->n_embd : x;
    llk_quantize_act(f->router->type, router_x, s->act_router + (size_t)t * s->act_router_row, r->n_embd);
    llk_quantize_act(f->gate->type, x, s->act_gate + (size_t)t * s->act_in_row, r->n_embd);
    if (!r->gate_up_share) llk_quantize_act(f->up->type, x, s->act_up + (size_t)t * s->act_in_row, r->n_embd);
}

/* softmax of p[0..n) in place, as ggml's soft_max: exp as ggml's, the sum in double, scaled by its inverse. */
static void softmax(float *p, int n) {
    float max = -INFINITY;
    for (int e = 0; e < n; e++) max = p[e] > max ? p[e] : max;
    double sum = 0.0;
    for (int e = 0; e < n; e++) {
        p[e] = llk_expf(p[e] - max);
        sum += (double)p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n; e++) p[e] *= inv;
}

/* Token t's experts and their weights from its router logits (plus the router's bias), as ggml computes them.
 * MOE_SOFTMAX: softmax over all experts, the k most probable, renormalised by their sum where norm_topk (in
 * double, at least half precision's smallest normal). MOE_TOPK_SOFTMAX: the k largest logits, softmax over
 * them. The k ranked by score (ties: the lower index): the order of the weighted sum. */
static void route_step(const void *arg, int t) {
    const moe_run *r = arg;
    moe_scratch *s = r->s;
    const int n = r->f->n_expert, k = r->f->n_used;
    float *p = s->logits + (size_t)t * n;
    if (r->f->router_b)
        for (int e = 0; e < n; e++) p[e] += r->f->router_b[e];
    if (r->f->gating == MOE_SOFTMAX) softmax(p, n);
    int32_t *chosen = s->chosen + (size_t)t * k;
    float *weight = s->weight + (size_t)t * k;
    for (int i = 0; i < k; i++) { /* k passes (k is a handful), each taking the best expert left */
        int best = 0;
        for (int e = 1; e < n; e++) best = p[e] > p[best] ? e : best;
        chosen[i] = best;
        weight[i] = p[best];
        p[best] = -INFINITY; /* taken (the scores are not read again) */
    }
    if (r->f->gating == MOE_TOPK_SOFTMAX) softmax(weight, k);
    if (r->f->norm_topk) {
        double wsum = 0.0;
        for (int i = 0; i < k; i++) wsum += (double)weight[i];
        float total = (float)wsum;
        if (total < 6.103515625e-5f) total = 6.103515625e-5f;
        for (int i = 0; i < k; i++) weight[i] /= total;
    }
}

/* Token t's activations copied to its rows of the grouped buffers. */
static void gather_step(const void *arg, int t) {
    const moe_run *r = arg;
    moe_scratch *s = r->s;
    const size_t row = s->act_in_row, rg = llk_act_size(r->f->gate->type, r->n_embd),
                 ru = llk_act_size(r->f->up->type, r->n_embd);
    for (int i = 0; i < r->f->n_used; i++) {
        const size_t p = (size_t)s->pair[(size_t)t * r->f->n_used + i];
        memcpy(s->grouped_gate + p * row, s->act_gate + (size_t)t * row, rg);
        if (!r->gate_up_share) memcpy(s->grouped_up + p * row, s->act_up + (size_t)t * row, ru);
    }
}

static void add_row(float *x, const float *bias, int e, int n) {
    if (!bias) return;
    bias += (size_t)e * n;
    for (int j = 0; j < n; j++) x[j] += bias[j];
}

/* gpt-oss's clamped SwiGLU, as ggml's swiglu_oai (alpha 1.702, limit 7): g = x * sigmoid(alpha x) * (y + 1). */
static void swiglu_oai(float *g, const float *u, int n) {
    for (int j = 0; j < n; j++) {
        const float x = fminf(g[j], 7.0f), y = fmaxf(fminf(u[j], 7.0f), -7.0f);
        g[j] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
    }
}

/* Token t's hidden states of its k experts: the activation of gate and up (their biases added), quantized for
 * the down matrices. */
static void hidden_step(const void *arg, int t) {
    const moe_run *r = arg;
    moe_scratch *s = r->s;
    const moe_ffn *f = r->f;
    for (int i = 0; i < f->n_used; i++) {
        const size_t p = (size_t)s->pair[(size_t)t * f->n_used + i];
        const int e = s->chosen[(size_t)t * f->n_used + i];
        float *g = s->g + p * r->n_ff, *u = s->u + p * r->n_ff;
        add_row(g, f->gate_b, e, r->n_ff);
        add_row(u, f->up_b, e, r->n_ff);
        if (f->act == MOE_SWIGLU_OAI) swiglu_oai(g, u, r->n_ff);
        else if (f->act == MOE_GELU) llk_kernels()->gelu_mul(g, u, r->n_ff);
        else llk_kernels()->silu_mul(g, u, r->n_ff);
        llk_quantize_act(r->f->down->type, g, s->act_hidden + p * s->act_hidden_row, r->n_ff);
    }
}

/* Token t's output: its experts' outputs (their down biases added) times their weights, added in rank order
 * (as ggml's chain of adds). */
static void sum_step(const void *arg, int t) {
    const moe_run *r = arg;
    const moe_scratch *s = r->s;
    const int k = r->f->n_used, E = r->n_embd;
    float *out = r->out + (size_t)t * r->out_stride;
    for (int i = 0; i < k; i++) {
        const float w = s->weight[(size_t)t * k + i];
        float *d = s->down + (size_t)s->pair[(size_t)t * k + i] * E;
        if (r->f->down_scale) { /* as ggml: the product times the expert's scale, then its bias and weight */
            const float scale = r->f->down_scale[s->chosen[(size_t)t * k + i]];
            for (int j = 0; j < E; j++) d[j] *= scale;
        }
        add_row(d, r->f->down_b, s->chosen[(size_t)t * k + i], E);
        if (i == 0)
            for (int j = 0; j < E; j++) out[j] = d[j] * w;
        else
            for (int j = 0; j < E; j++) {
                const float weighted = d[j] * w;
                out[j] += weighted;
            }
    }
}

/* Expert e's matrix of `all`, whose experts start `rows` rows apart. */
static llk_tensor expert_view(const llk_tensor *all, int e, int64_t rows) {
    const size_t bytes = llk_row_size(all->type, all->ne0) * (size_t)rows;
    return (llk_tensor){(const uint8_t *)all->data + (size_t)e * bytes, all->type, all->ne0, all->ne1};
}

/* The parts of one run over the experts that tokens chose: expert e's matrix of each of `mats` (their experts
 * `rows` rows apart) against its group's activations (acts[i] + first[e] rows of act_row[i]), into outs[i] +
 * first[e] rows of width. */
static int expert_parts(moe_scratch *s, int n_mats, const llk_tensor *const *mats, int64_t rows, uint8_t *const *acts,
                        const size_t *act_row, float *const *outs, int64_t width, int nth) {
    int n = 0;
    for (int e = 0; e < s->n_expert; e++) {
        if (!s->count[e]) continue;
        for (int i = 0; i < n_mats; i++) {
            s->views[n] = expert_view(mats[i], e, rows);
            s->parts[n] = matmul_part_of(&s->views[n], acts[i] + (size_t)s->first[e] * act_row[i], s->count[e],
                                         outs[i] + (size_t)s->first[e] * width, width, nth);
            s->parts[n].act_row = act_row[i];
            n++;
        }
    }
    return n;
}

void moe_ffn_run(const moe_ffn *f, moe_scratch *s, llk_pool *pool, const float *x, int T, float *out,
                 int64_t out_stride, const llk_tensor *then) {
    const int k = f->n_used, nth = llk_pool_size(pool);
    moe_run r = {f, s, x, out, out_stride, (int)f->router->ne0, (int)f->gate->ne1,
                 llk_act_kind(f->gate->type) == llk_act_kind(f->up->type)};
    each_token(pool, T, quantize_in_step, &r);
    matmul_part router = matmul_part_of(f->router, s->act_router, T, s->logits, f->n_expert, nth);
    router.act_row = s->act_router_row;
    matmul_parts_run(pool, &router, 1, NULL);
    each_token(pool, T, route_step, &r);

    /* rows grouped by expert, each group's tokens in batch order */
    memset(s->count, 0, (size_t)f->n_expert * sizeof(int32_t));
    for (int i = 0; i < T * k; i++) s->count[s->chosen[i]]++;
    for (int e = 0, at = 0; e < f->n_expert; at += s->count[e++]) s->first[e] = at;
    memset(s->filled, 0, (size_t)f->n_expert * sizeof(int32_t));
    for (int i = 0; i < T * k; i++) s->pair[i] = s->first[s->chosen[i]] + s->filled[s->chosen[i]]++;
    each_token(pool, T, gather_step, &r);

    const int decode = T < 2; /* read ahead only where one token's products leave threads idle */
    const llk_tensor first_down = expert_view(f->down, s->chosen[0], f->down->ne1);
    const llk_tensor *gate_up[] = {f->gate, f->up};
    uint8_t *gate_up_act[] = {s->grouped_gate, r.gate_up_share ? s->grouped_gate : s->grouped_up};
    const size_t in_rows[] = {s->act_in_row, s->act_in_row};
    float *gate_up_out[] = {s->g, s->u};
    int n = expert_parts(s, 2, gate_up, f->expert_rows ? f->expert_rows : f->gate->ne1, gate_up_act, in_rows,
                         gate_up_out, r.n_ff, nth);
    matmul_parts_run(pool, s->parts, n, decode ? &first_down : NULL);
    each_token(pool, T, hidden_step, &r);
    n = expert_parts(s, 1, &f->down, f->down->ne1, &s->act_hidden, &s->act_hidden_row, &s->down, r.n_embd, nth);
    matmul_parts_run(pool, s->parts, n, decode ? then : NULL);
    each_token(pool, T, sum_step, &r);
}
