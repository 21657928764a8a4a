/* Gated DeltaNet's recurrence (see deltanet.h). */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "common.h"
#include "deltanet.h"
#include "floats.h"
#include "ops.h"

deltanet_shape deltanet_shape_of(const llk_model *m) {
    deltanet_shape s = {0};
    if (m->ssm_d_state <= 0 || m->ssm_n_group <= 0 || m->ssm_dt_rank <= 0 || m->ssm_d_conv <= 0 ||
        m->ssm_d_conv > DELTANET_MAX_CONV)
        return s;
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

/* o's heads RMS-normed by ssm_norm, times silu(z) (the gate's kernel: silu(z) * o, into z's row, then o's). */
static void out_step(const void *arg, int t) {
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    float *o = b->out + (size_t)t * s->inner, *z = b->z + (size_t)t * s->inner;
    for (int h = 0; h < s->n_v; h++) llk_rmsnorm(o + (size_t)h * s->S, b->L->ssm_norm.data, o + (size_t)h * s->S, s->S, b->eps);
    llk_kernels()->silu_mul(z, o, s->inner);
    memcpy(o, z, sizeof(float) * (size_t)s->inner);
}

/* ---- the convolution, by channels ------------------------------------------ */

#define CONV_CHANNELS 64 /* channels of a pool item */

static const float ones[CONV_CHANNELS] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* The item's channels of a window ([channel][d_conv - 1], the state's layout) to or from its copy by tap. */
static void window_to_taps(const float *window, int K, int n, float taps[][CONV_CHANNELS]) {
    for (int c = 0; c < n; c++)
        for (int i = 0; i < K - 1; i++) taps[i][c] = window[(size_t)c * (K - 1) + i];
}

static void taps_to_window(float taps[][CONV_CHANNELS], int K, int n, float *window) {
    for (int c = 0; c < n; c++)
        for (int i = 0; i < K - 1; i++) window[(size_t)c * (K - 1) + i] = taps[i][c];
}

/* Channels c0 .. c0 + CONV_CHANNELS of every token: sum = w_0 x_{t-K+1} + ... + w_{K-1} x_t, one fused
 * multiply-add chain a channel (the window's oldest input first, from 0), then SiLU. The window of the sequence
 * in hand is kept by tap ([tap][channel]: a tap's channels side by side, so the chains of all channels run
 * together), read from its state when a token of another sequence comes and written back when it leaves. */
WITH_FMA static void conv_task(void *arg, int item, int ith) {
    (void)ith;
    const deltanet_batch *b = arg;
    const deltanet_shape *s = b->shape;
    const int K = s->d_conv, c0 = item * CONV_CHANNELS;
    const int n = c0 + CONV_CHANNELS < s->channels ? CONV_CHANNELS : s->channels - c0;
    const float *w = b->L->ssm_conv.data;
    float wt[DELTANET_MAX_CONV][CONV_CHANNELS], taps[DELTANET_MAX_CONV - 1][CONV_CHANNELS], sum[CONV_CHANNELS];
    for (int c = 0; c < n; c++)
        for (int i = 0; i < K; i++) wt[i][c] = w[(size_t)(c0 + c) * K + i];
    float *held = NULL; /* the window whose channels taps holds */
    for (int t = 0; t < b->T; t++) {
        float *x = b->mix + (size_t)t * s->channels + c0;
        float *window = b->conv[t] + (size_t)c0 * (K - 1);
        if (window != held) {
            if (held) taps_to_window(taps, K, n, held);
            held = window;
            window_to_taps(window, K, n, taps);
        }
        if (b->pos[t] == 0)
            for (int i = 0; i < K - 1; i++) memset(taps[i], 0, sizeof(float) * (size_t)n);
        for (int c = 0; c < n; c++) sum[c] = 0.0f;
        for (int i = 0; i < K - 1; i++)
            for (int c = 0; c < n; c++) sum[c] = fmaf(taps[i][c], wt[i][c], sum[c]);
        for (int c = 0; c < n; c++) sum[c] = fmaf(x[c], wt[K - 1][c], sum[c]);
        for (int i = 0; i + 1 < K - 1; i++) memcpy(taps[i], taps[i + 1], sizeof(float) * (size_t)n);
        if (K > 1) memcpy(taps[K - 2], x, sizeof(float) * (size_t)n);
        memcpy(x, sum, sizeof(float) * (size_t)n);
        if (b->snap[t]) taps_to_window(taps, K, n, b->snap[t] + (size_t)c0 * (K - 1));
        llk_kernels()->silu_mul(x, ones, n); /* silu(sum) * 1, exactly silu(sum) */
    }
    if (held) taps_to_window(taps, K, n, held);
}

/* ---- the delta rule, by V head ------------------------------------------------ */

#define LANES 32

/* The two passes of the rule over row j of M (S floats), each a dot product summed in 32 lanes of fused
 * multiply-adds (lane l takes the elements l mod 32), the lanes added by halves (l + 16, then l + 8, l + 4, l + 2,
 * l + 1), then the tail past the last 32 one chain on; the AVX2 forms below give the same bits.
 *   row_k: (row * decay) . k, the row not yet written back;
 *   row_q: row = k * d + row * decay written back, then row . q. */
static inline float sum_lanes(float *acc) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

static inline float row_k_ref(const float *row, float decay, const float *k, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = fmaf(row[i + l] * decay, k[i + l], acc[l]);
    float sum = sum_lanes(acc);
    for (; i < n; i++) sum = fmaf(row[i] * decay, k[i], sum);
    return sum;
}

static inline float row_q_ref(float *row, float decay, const float *k, float d, const float *q, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            row[i + l] = fmaf(k[i + l], d, row[i + l] * decay);
            acc[l] = fmaf(row[i + l], q[i + l], acc[l]);
        }
    float sum = sum_lanes(acc);
    for (; i < n; i++) {
        row[i] = fmaf(k[i], d, row[i] * decay);
        sum = fmaf(row[i], q[i], sum);
    }
    return sum;
}

/* Rows j and j + 1 (n apart): sums[] out, each row's row_k; row_q2: d[] in, each row's delta, out, its row_q. */
static inline void row_k2_ref(const float *row, float decay, const float *k, int n, float *sums) {
    sums[0] = row_k_ref(row, decay, k, n);
    sums[1] = row_k_ref(row + n, decay, k, n);
}

static inline void row_q2_ref(float *row, float decay, const float *k, float *d, const float *q, int n) {
    d[0] = row_q_ref(row, decay, k, d[0], q, n);
    d[1] = row_q_ref(row + n, decay, k, d[1], q, n);
}

/* V head h's rule for the batch's tokens in order (M *= exp(g) is folded into the two passes over each row).
 * Row j of a state meets only its own delta_j, so the rows run apart: DELTA_TOKENS tokens at a time, each pair
 * of rows taken through them in order while it stays in the L1 cache with their q and k (the state read and
 * written once for them, not twice a token; the two rows' chains of sums overlapping). Each row's operations
 * are the same, in the same order, as token by token; a token's state is zeroed at position 0, and copied to
 * its snapshot, a pair of rows at a time. */
#define DELTA_TOKENS 16
#define DELTA_HEAD(row_k, row_q, row_k2, row_q2)                                                                \
    do {                                                                                                        \
        const deltanet_shape *s = b->shape;                                                                     \
        const int S = s->S, kh = h % s->n_k;                                                                    \
        const float scale = 1.0f / sqrtf((float)S);                                                             \
        const float *q[DELTA_TOKENS], *k[DELTA_TOKENS], *v[DELTA_TOKENS];                                       \
        float decay[DELTA_TOKENS], beta[DELTA_TOKENS], *M[DELTA_TOKENS], *o[DELTA_TOKENS], *snap[DELTA_TOKENS]; \
        for (int t0 = 0; t0 < b->T; t0 += DELTA_TOKENS) {                                                       \
            const int n = b->T - t0 < DELTA_TOKENS ? b->T - t0 : DELTA_TOKENS;                                  \
            for (int i = 0; i < n; i++) {                                                                       \
                const int t = t0 + i;                                                                           \
                const float *mix = b->mix + (size_t)t * s->channels;                                            \
                q[i] = mix + (size_t)kh * S;                                                                    \
                k[i] = mix + (size_t)(s->n_k + kh) * S;                                                         \
                v[i] = mix + (size_t)2 * s->n_k * S + (size_t)h * S;                                            \
                M[i] = b->ssm[t] + (size_t)h * S * S;                                                           \
                o[i] = b->out + (size_t)t * s->inner + (size_t)h * S;                                           \
                snap[i] = b->snap[t] ? b->snap[t] + s->conv_floats + (size_t)h * S * S : NULL;                  \
                decay[i] = expf(b->g[(size_t)t * s->n_v + h]);                                                  \
                beta[i] = b->beta[(size_t)t * s->n_v + h];                                                      \
            }                                                                                                   \
            for (int j = 0; j < S; j += 2) {                                                                    \
                const int rows = S - j < 2 ? 1 : 2;                                                             \
                for (int i = 0; i < n; i++) {                                                                   \
                    float *row = M[i] + (size_t)j * S;                                                          \
                    if (b->pos[t0 + i] == 0) memset(row, 0, sizeof(float) * (size_t)S * rows);                 \
                    if (rows == 2) {                                                                            \
                        float d[2];                                                                             \
                        row_k2(row, decay[i], k[i], S, d);                                                      \
                        d[0] = (v[i][j] - d[0]) * beta[i];                                                      \
                        d[1] = (v[i][j + 1] - d[1]) * beta[i];                                                  \
                        row_q2(row, decay[i], k[i], d, q[i], S);                                                \
                        o[i][j] = d[0] * scale;                                                                 \
                        o[i][j + 1] = d[1] * scale;                                                             \
                    } else {                                                                                    \
                        const float delta = (v[i][j] - row_k(row, decay[i], k[i], S)) * beta[i];                \
                        o[i][j] = row_q(row, decay[i], k[i], delta, q[i], S) * scale;                           \
                    }                                                                                           \
                    if (snap[i]) memcpy(snap[i] + (size_t)j * S, row, sizeof(float) * (size_t)S * rows);       \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    } while (0)

WITH_FMA static void delta_head_ref(const deltanet_batch *b, int h) {
    DELTA_HEAD(row_k_ref, row_q_ref, row_k2_ref, row_q2_ref);
}

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline float sum_lanes_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 half = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)); /* l + 16, then l + 8 */
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AVX2 static inline float row_k_avx2(const float *row, float decay, const float *k, int n) {
    const __m256 g = _mm256_set1_ps(decay);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int p = 0; p < 4; p++)
            acc[p] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * p), g), _mm256_loadu_ps(k + i + 8 * p),
                                     acc[p]);
    float sum = sum_lanes_avx2(acc[0], acc[1], acc[2], acc[3]);
    for (; i < n; i++) sum = fmaf(row[i] * decay, k[i], sum);
    return sum;
}

AVX2 static inline float row_q_avx2(float *row, float decay, const float *k, float d, const float *q, int n) {
    const __m256 g = _mm256_set1_ps(decay), dv = _mm256_set1_ps(d);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int p = 0; p < 4; p++) {
            const __m256 r = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8 * p), dv,
                                             _mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * p), g));
            _mm256_storeu_ps(row + i + 8 * p, r);
            acc[p] = _mm256_fmadd_ps(r, _mm256_loadu_ps(q + i + 8 * p), acc[p]);
        }
    float sum = sum_lanes_avx2(acc[0], acc[1], acc[2], acc[3]);
    for (; i < n; i++) {
        row[i] = fmaf(k[i], d, row[i] * decay);
        sum = fmaf(row[i], q[i], sum);
    }
    return sum;
}

/* Rows j and j + 1 (n apart) at once: each row's operations as row_k_avx2's and row_q_avx2's, the two rows'
 * chains interleaved (a row's passes wait on its sums; two rows keep the FMA units busy meanwhile). */
AVX2 static inline void row_k2_avx2(const float *row, float decay, const float *k, int n, float *sums) {
    if (n % LANES) {
        sums[0] = row_k_avx2(row, decay, k, n);
        sums[1] = row_k_avx2(row + n, decay, k, n);
        return;
    }
    const __m256 g = _mm256_set1_ps(decay);
    __m256 a[4], b[4];
    for (int p = 0; p < 4; p++) a[p] = b[p] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += LANES)
        for (int p = 0; p < 4; p++) {
            const __m256 kv = _mm256_loadu_ps(k + i + 8 * p);
            a[p] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * p), g), kv, a[p]);
            b[p] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + n + i + 8 * p), g), kv, b[p]);
        }
    sums[0] = sum_lanes_avx2(a[0], a[1], a[2], a[3]);
    sums[1] = sum_lanes_avx2(b[0], b[1], b[2], b[3]);
}

AVX2 static inline void row_q2_avx2(float *row, float decay, const float *k, float *d, const float *q, int n) {
    if (n % LANES) {
        d[0] = row_q_avx2(row, decay, k, d[0], q, n);
        d[1] = row_q_avx2(row + n, decay, k, d[1], q, n);
        return;
    }
    const __m256 g = _mm256_set1_ps(decay), d0 = _mm256_set1_ps(d[0]), d1 = _mm256_set1_ps(d[1]);
    __m256 a[4], b[4];
    for (int p = 0; p < 4; p++) a[p] = b[p] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += LANES)
        for (int p = 0; p < 4; p++) {
            const __m256 kv = _mm256_loadu_ps(k + i + 8 * p), qv = _mm256_loadu_ps(q + i + 8 * p);
            const __m256 r0 = _mm256_fmadd_ps(kv, d0, _mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * p), g));
            const __m256 r1 = _mm256_fmadd_ps(kv, d1, _mm256_mul_ps(_mm256_loadu_ps(row + n + i + 8 * p), g));
            _mm256_storeu_ps(row + i + 8 * p, r0);
            _mm256_storeu_ps(row + n + i + 8 * p, r1);
            a[p] = _mm256_fmadd_ps(r0, qv, a[p]);
            b[p] = _mm256_fmadd_ps(r1, qv, b[p]);
        }
    d[0] = sum_lanes_avx2(a[0], a[1], a[2], a[3]);
    d[1] = sum_lanes_avx2(b[0], b[1], b[2], b[3]);
}

AVX2 static void delta_head_avx2(const deltanet_batch *b, int h) {
    DELTA_HEAD(row_k_avx2, row_q_avx2, row_k2_avx2, row_q2_avx2);
}
#endif

static void delta_task(void *arg, int h, int ith) {
    (void)ith;
    const deltanet_batch *b = arg;
#if defined(__x86_64__)
    const int isa = llk_isa_get();
    if (isa == LLK_ISA_AVX2 || isa == LLK_ISA_AVXVNNI || isa == LLK_ISA_AVX512) {
        delta_head_avx2(b, h);
        return;
    }
#endif
    delta_head_ref(b, h);
}

void deltanet_run(llk_pool *pool, const deltanet_batch *b) {
    const deltanet_shape *s = b->shape;
    each_token(pool, b->T, gates_step, b);
    llk_pool_run(pool, conv_task, (void *)b, (s->channels + CONV_CHANNELS - 1) / CONV_CHANNELS);
    each_token(pool, b->T, qk_norm_step, b);
    llk_pool_run(pool, delta_task, (void *)b, s->n_v);
    each_token(pool, b->T, out_step, b);
}
