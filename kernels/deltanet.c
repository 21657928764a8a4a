/* Gated DeltaNet's recurrence (see deltanet.h). */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "deltanet.h"
#include "floats.h"
#include "ops.h"

deltanet_shape deltanet_shape_of(const llk_model *m) {
    deltanet_shape s = {0};
    if (m->ssm_d_state <= 0 || m->ssm_n_group <= 0 || m->ssm_dt_rank <= 0 || m->ssm_d_conv <= 0) return s;
    s.d_conv = m->ssm_d_conv;
    s.S = m->ssm_d_state;
    s.n_k = m->ssm_n_group;
    s.n_v = m->ssm_dt_rank;
    s.inner = s.n_v * s.S;
    s.channels = 2 * s.n_k * s.S + s.inner;
    s.conv_floats = (size_t)s.channels * (size_t)(s.d_conv - 1);
    s.ssm_floats = (size_t)s.n_v * s.S * s.S;
    return s;
}

static float sigmoid(float x) { return 1.0f / (1.0f + llk_expf(-x)); }
static float silu(float x) { return x / (1.0f + llk_expf(-x)); }
static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); } /* ggml's op_softplus */

/* ---- per-token steps ---------------------------------------------------- */

static void gates_step(const void *arg, int t) {
    const deltanet_batch *b = arg;
    const int n_v = b->shape->n_v;
    const float *dt = b->L->ssm_dt.data, *a = b->L->ssm_a.data;
    float *beta = b->beta + (size_t)t * n_v, *g = b->g + (size_t)t * n_v;
    for (int h = 0; h < n_v; h++) {
        beta[h] = sigmoid(beta[h]);
        g[h] = softplus(g[h] + dt[h]) * a[h];
    }
}

/* q's and k's heads L2-normalised as llama.cpp's build_gdn_l2_norm: rms_norm with eps / S, times 1 / sqrt(S). */
static void qk_norm_step(const void *arg, int t) {
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    float *x = b->mix + (size_t)t * s->channels;
    const float unit = 1.0f / sqrtf((float)s->S);
    for (int h = 0; h < 2 * s->n_k; h++, x += s->S) {
        llk_rmsnorm(x, NULL, x, s->S, b->eps / (float)s->S);
        for (int i = 0; i < s->S; i++) x[i] *= unit;
    }
}

/* o's heads RMS-normed by ssm_norm, times silu(z). */
static void out_step(const void *arg, int t) {
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    float *o = b->out + (size_t)t * s->inner;
    const float *z = b->z + (size_t)t * s->inner;
    for (int h = 0; h < s->n_v; h++) llk_rmsnorm(o + (size_t)h * s->S, b->L->ssm_norm.data, o + (size_t)h * s->S, s->S, b->eps);
    for (int i = 0; i < s->inner; i++) o[i] *= silu(z[i]);
}

/* ---- the convolution, by channels ------------------------------------------ */

#define CONV_CHANNELS 64 /* channels of a pool item */

WITH_FMA static void conv_task(void *arg, int item, int ith) {
    (void)ith;
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    const int K = s->d_conv, c0 = item * CONV_CHANNELS;
    const int c1 = c0 + CONV_CHANNELS < s->channels ? c0 + CONV_CHANNELS : s->channels;
    const float *w = b->L->ssm_conv.data;
    for (int t = 0; t < b->T; t++) {
        float *x = b->mix + (size_t)t * s->channels;
        float *window = b->conv[t];
        if (b->pos[t] == 0) memset(window + (size_t)c0 * (K - 1), 0, sizeof(float) * (size_t)(c1 - c0) * (K - 1));
        for (int c = c0; c < c1; c++) {
            float *win = window + (size_t)c * (K - 1);
            const float *wc = w + (size_t)c * K;
            float sum = 0.0f;
            for (int i = 0; i < K - 1; i++) sum = fmaf(win[i], wc[i], sum);
            sum = fmaf(x[c], wc[K - 1], sum);
            for (int i = 0; i + 1 < K - 1; i++) win[i] = win[i + 1];
            if (K > 1) win[K - 2] = x[c];
            x[c] = silu(sum);
        }
    }
}

/* ---- the delta rule, by V head ------------------------------------------------ */

#define LANES 32

/* dot(x, y) over n: 32 lanes of fused multiply-adds, summed by halves; the tail one chain after them. */
static inline float dot_lanes(const float *x, const float *y, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    float sum = acc[0];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

WITH_FMA static void delta_task(void *arg, int h, int ith) {
    (void)ith;
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    const int S = s->S, kh = h % s->n_k;
    const float scale = 1.0f / sqrtf((float)S);
    for (int t = 0; t < b->T; t++) {
        const float *mix = b->mix + (size_t)t * s->channels;
        const float *q = mix + (size_t)kh * S, *k = mix + (size_t)(s->n_k + kh) * S;
        const float *v = mix + (size_t)2 * s->n_k * S + (size_t)h * S;
        float *M = b->ssm[t] + (size_t)h * S * S, *o = b->out + (size_t)t * s->inner + (size_t)h * S;
        if (b->pos[t] == 0) memset(M, 0, sizeof(float) * (size_t)S * S);
        const float decay = expf(b->g[(size_t)t * s->n_v + h]), beta = b->beta[(size_t)t * s->n_v + h];
        float delta[S];
        for (int j = 0; j < S; j++) { /* M *= exp(g), then each row's delta */
            float *row = M + (size_t)j * S;
            for (int i = 0; i < S; i++) row[i] *= decay;
            delta[j] = (v[j] - dot_lanes(row, k, S)) * beta;
        }
        for (int j = 0; j < S; j++) { /* M_j += delta_j k, then o_j */
            float *row = M + (size_t)j * S;
            for (int i = 0; i < S; i++) row[i] = fmaf(k[i], delta[j], row[i]);
            o[j] = dot_lanes(row, q, S) * scale;
        }
    }
}

void deltanet_run(llk_pool *pool, const deltanet_batch *b) {
    const deltanet_shape *s = b->shape;
    each_token(pool, b->T, gates_step, b);
    llk_pool_run(pool, conv_task, (void *)b, (s->channels + CONV_CHANNELS - 1) / CONV_CHANNELS);
    each_token(pool, b->T, qk_norm_step, b);
    llk_pool_run(pool, delta_task, (void *)b, s->n_v);
    each_token(pool, b->T, out_step, b);
}
