/* Small operations of the forward pass: norms, rotary embeddings, softmax, activations. */
#include "ops.h"
#include "common.h"

#include <math.h>

void llk_rmsnorm(const float *x, const float *w, float *out, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else for (int i = 0; i < n; i++) out[i] = x[i] * scale;
}

void llk_rope_angles(float *cs, const float *inv_freq, int rope_dim, float pos) {
    for (int i = 0; i < rope_dim / 2; i++) {
        float theta = pos * inv_freq[i];
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
    }
}

void llk_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int neox) {
    int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++, x += head_dim) {
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = x[a], x1 = x[b];
            x[a] = x0 * c - x1 * s;
            x[b] = x0 * s + x1 * c;
        }
    }
}

void llk_softmax(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void llk_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* GELU (tanh form) as ggml's CPU backend computes it: looked up by the half-precision input in
 * a table of half-precision outputs (built once at load), exact outside (-10, 10). */
static f16_t gelu_table[1 << 16];

__attribute__((constructor(300))) static void init_gelu_table(void) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int h = 0; h < 1 << 16; h++) {
        float x = f16_to_f32((f16_t)h);
        gelu_table[h] = llk_f32_to_f16(0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x))));
    }
}

void llk_gelu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float x = g[i];
        if (x <= -10.0f) g[i] = 0.0f;
        else if (x >= 10.0f) g[i] = x * u[i];
        else g[i] = f16_to_f32(gelu_table[llk_f32_to_f16(x)]) * u[i];
    }
}
