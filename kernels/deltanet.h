/* Gated DeltaNet, the linear attention of Qwen 3.5 and 3.6 (qwen35, qwen35moe), as llama.cpp's CPU backend
 * computes it (its fused ggml_gated_delta_net, ggml_ssm_conv and the graph of src/models/qwen35.cpp).
 *
 * Per token, after the projections: the mixed q/k/v channels go through a causal depthwise convolution whose
 * window (the last d_conv - 1 inputs) is part of the sequence's state, then SiLU; each K head of q and k is
 * L2-normalised; beta = sigmoid(x W_beta), g = softplus(x W_alpha + dt_bias) * a (a = -exp(A_log)); then each
 * V head h (reading K head h % n_k) updates its S x S state M (row j of M is column j of the rule's S):
 *   M *= exp(g);  delta_j = beta (v_j - M_j . k);  M_j += delta_j k;  o_j = (M_j . q) / sqrt(S)
 * and o is RMS-normed per head (ssm_norm) and multiplied by silu(z).
 *
 * Batch invariance: the rule runs token by token (as llama.cpp's CPU op does, for prefill too), each token's
 * arithmetic a fixed sequence of operations on its own inputs and its sequence's state, the same whichever
 * batch or chunk it comes in; threads split the work by channel (convolution) and by V head (the rule),
 * never a token's sums.
 */
#ifndef LLK_DELTANET_H
#define LLK_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "llk.h"
#include "pool.h"

/* The most taps (d_conv) of the convolution: its items keep that many rows of their channels (the models have 4). */
#define DELTANET_MAX_CONV 16

/* A model's Gated DeltaNet dimensions and the floats one sequence's state takes per layer. */
typedef struct {
    int d_conv, S, n_k, n_v;
    int channels;      /* the mixed q/k/v: 2 n_k S + n_v S */
    int inner;         /* o and z: n_v S */
    size_t conv_floats; /* the window: [channels][d_conv - 1], as llama.cpp's conv state */
    size_t ssm_floats;  /* [n_v][S][S] */
} deltanet_shape;

/* The dimensions of `m` (0 channels: a model without such layers, or with a convolution over DELTANET_MAX_CONV). */
deltanet_shape deltanet_shape_of(const llk_model *m);

/* One Gated DeltaNet layer over a batch of T tokens, between its input projections and its output one. */
typedef struct {
    const deltanet_shape *shape;
    const llk_layer *L;
    int T;
    const int32_t *pos; /* [T]: position 0 starts a sequence afresh (its state zeroed first) */
    float *const *conv; /* [T]: the convolution window of token t's sequence in this layer */
    float *const *ssm;  /* [T]: the S states of token t's sequence in this layer */
    float *const *snap; /* [T]: where the layer's state after token t is copied (window, then S states), or NULL */
    float *mix;         /* [T][channels]: x W_qkv in; convolved, SiLU'd, q and k L2-normed out */
    float *z;           /* [T][inner]: x W_z (used up) */
    float *beta, *g;    /* [T][n_v]: x W_beta and x W_alpha in; beta and the decay g out */
    float *out;         /* [T][inner]: RMSNorm(o) * silu(z) */
    float eps;
} deltanet_batch;

/* The layer's recurrence for the batch, its tokens in order, over the pool; updates the states it names. */
void deltanet_run(llk_pool *pool, const deltanet_batch *b);

#endif
