/* Element-wise and normalisation operations of the forward pass (single thread). */
#ifndef LLK_OPS_H
#define LLK_OPS_H
#include <stddef.h>
#include <stdint.h>

void llk_rmsnorm(const float *x, const float *w, float *out, int n, float eps);
/* Rotate n_heads heads of x (head_dim apart) at position pos; cs holds cos,sin pairs of rope_dim/2 angles. */
void llk_rope_angles(float *cs, float theta_scale, int rope_dim, float pos, const float *freq_factors);
/* YaRN's rotary angles, as ggml's rope_yarn: corr the correction range of dimensions (ggml_rope_yarn_corr_dims),
 * mscale the attention factor that cos and sin are multiplied by. */
typedef struct {
    float freq_scale, ext_factor, mscale, corr[2];
} rope_yarn;
void llk_rope_yarn_corr(rope_yarn *y, int rope_dim, int n_ctx_orig, float base, float beta_fast, float beta_slow);
void llk_rope_angles_yarn(float *cs, float theta_scale, int rope_dim, float pos, const rope_yarn *y);
void llk_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int neox);
/* exp(x) as ggml's vectorised expf gives it (the attention kernels' vector forms give the same bits). */
float llk_expf(float x);
void llk_silu_mul(float *g, const float *u, int n); /* g = silu(g) * u */
void llk_softcap(float *x, float cap, int n);     /* x = cap * tanh(x / cap) */
void llk_gelu_mul(float *g, const float *u, int n); /* g = gelu_tanh(g) * u */
/* GELU by the half-precision input, as half precision (two entries more: the SIMD kernels gather 32 bits). */
extern uint16_t llk_gelu_table[(1 << 16) + 2];

#endif
