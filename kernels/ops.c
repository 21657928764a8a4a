/* Small operations of the forward pass: norms, rotary embeddings, softmax, activations. */
#include "ops.h"
#include "floats.h"

#include <math.h>

/* As ggml: the squares in float, their sum in double; in eight partial sums (ggml adds them one after the
 * other, a chain of dependent additions that took 4% of a Gemma 3 prefill), which differ from ggml's sum only
 * in the last bits of a double, far below the float the scale is rounded to. */
void llk_rmsnorm(const float *x, const float *w, float *out, int n, float eps) {
    double part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += (double)(x[i + k] * x[i + k]);
    double ss = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    for (; i < n; i++) ss += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else for (int i = 0; i < n; i++) out[i] = x[i] * scale;
}

void llk_rope_angles(float *cs, float theta_scale, int rope_dim, float pos, const float *freq_factors) {
    float theta = pos; /* as ggml's rope cache: each angle is the previous one times theta_scale, */
    for (int i = 0; i < rope_dim / 2; i++, theta *= theta_scale) { /* divided by its frequency factor */
        float angle = freq_factors ? theta / freq_factors[i] : theta;
        cs[2 * i] = cosf(angle);
        cs[2 * i + 1] = sinf(angle);
    }
}

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void llk_rope_yarn_corr(rope_yarn *y, int rope_dim, int n_ctx_orig, float base, float beta_fast, float beta_slow) {
    const float start = floorf(yarn_corr_dim(rope_dim, n_ctx_orig, beta_fast, base));
    const float end = ceilf(yarn_corr_dim(rope_dim, n_ctx_orig, beta_slow, base));
    y->corr[0] = start > 0 ? start : 0;
    y->corr[1] = end < rope_dim - 1 ? end : (float)(rope_dim - 1);
}

void llk_rope_angles_yarn(float *cs, float theta_scale, int rope_dim, float pos, const rope_yarn *y) {
    float theta = pos;
    for (int i = 0; i < rope_dim / 2; i++, theta *= theta_scale) {
        const float interp = y->freq_scale * theta;
        float angle = interp, mscale = y->mscale;
        if (y->ext_factor != 0.0f) { /* dimensions below the range keep their angle, above it are scaled */
            const float r = (i - y->corr[0]) / fmaxf(0.001f, y->corr[1] - y->corr[0]);
            const float mix = (1 - fminf(1, fmaxf(0, r))) * y->ext_factor;
            angle = interp * (1 - mix) + theta * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / y->freq_scale);
        }
        cs[2 * i] = cosf(angle) * mscale;
        cs[2 * i + 1] = sinf(angle) * mscale;
    }
}

/* The rotation fused as ggml's compiled rotate_pairs is: x0*cos - x1*sin with the first product
 * fused, x0*sin + x1*cos with the second added to the first (one rounding less than plain code). */
WITH_FMA void llk_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int neox) {
    int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++, x += head_dim) {
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = x[a], x1 = x[b];
            x[a] = fmaf(x0, c, -(x1 * s));
            x[b] = fmaf(x0, s, x1 * c);
        }
    }
}

/* ggml's vectorised expf (ggml_v_expf, AVX-512 form) one lane at a time: the same fused
 * operations give the same bits, where libm's expf differs from it in the last place. */
static inline float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    const int e = (int)n;
    if (e < -126 || e > 127) return ldexpf(j, e); /* subnormal or huge: rare, let libm scale */
    union { uint32_t u; float f; } scale = {.u = (uint32_t)(e + 127) << 23};
    return j * scale.f; /* exact: as _mm512_scalef_ps for normal results */
}

WITH_FMA float llk_expf(float x) { return expf_ggml(x); }

/* Final-logit soft-capping, x = cap * tanh(x / cap), with tanh(y) = 1 - 2 / (exp(2y) + 1) from expf_ggml (the
 * vector forms give the same bits; libm's tanhf lane by lane was ~2% of a Gemma 4 decode step at a 49,152-word
 * vocabulary). y is clamped to +-9 first, where tanh rounds to +-1: exp(2y) stays normal, no lane is special.
 * Within ~3e-7 of tanh (the logits within ~cap * 3e-7). */
WITH_FMA void llk_softcap(float *x, float cap, int n) {
    const float twice_inv = 2.0f / cap;
    for (int i = 0; i < n; i++) {
        float y2 = x[i] * twice_inv;
        y2 = y2 > 18.0f ? 18.0f : y2 < -18.0f ? -18.0f : y2; /* NaN stays NaN */
        x[i] = cap * (1.0f - 2.0f / (expf_ggml(y2) + 1.0f));
    }
}

WITH_FMA void llk_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf_ggml(-g[i])) * u[i];
}

/* GELU (tanh form) as ggml's CPU backend computes it: looked up by the half-precision input in
 * a table of half-precision outputs (built once at load), exact outside (-10, 10). */
f16_t llk_gelu_table[(1 << 16) + 2];

__attribute__((constructor(300))) static void init_gelu_table(void) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int h = 0; h < 1 << 16; h++) {
        float x = f16_to_f32((f16_t)h);
        llk_gelu_table[h] = llk_f32_to_f16(0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x))));
    }
}

void llk_gelu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float x = g[i];
        if (x <= -10.0f) g[i] = 0.0f;
        else if (x >= 10.0f) g[i] = x * u[i];
        else g[i] = f16_to_f32(llk_gelu_table[llk_f32_to_f16(x)]) * u[i];
    }
}
