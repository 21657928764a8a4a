/* Scalar reference of every block format: unpack, dequantize, quantize activations, dot.
 *
 * Each format has ONE unpacker that turns a block into small signed integers
 * plus a scale and an offset per 16 elements; dequantization and the
 * reference dot product are both written on top of it, so they cannot
 * disagree about the layout.  The SIMD files must match these numbers.
 */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "ops.h"

/* ---- format table ------------------------------------------------------ */

int llk_block_size(int type) {
    switch (type) {
    case LLK_F32: case LLK_F16: case LLK_BF16: return 1;
    case LLK_Q4_0: case LLK_Q4_1: case LLK_Q5_0: case LLK_Q5_1: case LLK_Q8_0: case LLK_MXFP4: return QK;
    case LLK_Q2_K: case LLK_Q3_K: case LLK_Q4_K: case LLK_Q5_K: case LLK_Q6_K: return QKK;
    case LLK_Q4_0_R16: case LLK_Q4_1_R16: case LLK_Q5_0_R16: case LLK_Q5_1_R16: case LLK_Q8_0_R16: return QK;
    case LLK_MXFP4_R16: return QK;
    case LLK_Q2_K_R16: case LLK_Q3_K_R16: case LLK_Q4_K_R16: case LLK_Q5_K_R16: case LLK_Q6_K_R16: return QKK;
    default: return 0;
    }
}

static size_t block_bytes(int type) {
    switch (type) {
    case LLK_F32: return 4;
    case LLK_F16: case LLK_BF16: return 2;
    case LLK_Q4_0: return sizeof(block_q4_0);
    case LLK_Q4_1: return sizeof(block_q4_1);
    case LLK_Q5_0: return sizeof(block_q5_0);
    case LLK_Q5_1: return sizeof(block_q5_1);
    case LLK_Q8_0: return sizeof(block_q8_0);
    case LLK_MXFP4: return sizeof(block_mxfp4);
    case LLK_Q2_K: return sizeof(block_q2_k);
    case LLK_Q3_K: return sizeof(block_q3_k);
    case LLK_Q4_K: return sizeof(block_q4_k);
    case LLK_Q5_K: return sizeof(block_q5_k);
    case LLK_Q6_K: return sizeof(block_q6_k);
    case LLK_Q4_0_R16: return sizeof(block_q4_0_r16) / GROUP_ROWS;
    case LLK_Q4_1_R16: return sizeof(block_q4_1_r16) / GROUP_ROWS;
    case LLK_Q5_0_R16: return sizeof(block_q5_0_r16) / GROUP_ROWS;
    case LLK_Q5_1_R16: return sizeof(block_q5_1_r16) / GROUP_ROWS;
    case LLK_Q8_0_R16: return sizeof(block_q8_0_r16) / GROUP_ROWS;
    case LLK_MXFP4_R16: return sizeof(block_mxfp4_r16) / GROUP_ROWS;
    case LLK_Q2_K_R16: return sizeof(block_q2_k_r16) / GROUP_ROWS;
    case LLK_Q3_K_R16: return sizeof(block_q3_k_r16) / GROUP_ROWS;
    case LLK_Q4_K_R16: return sizeof(block_q4_k_r16) / GROUP_ROWS;
    case LLK_Q5_K_R16: return sizeof(block_q5_k_r16) / GROUP_ROWS;
    case LLK_Q6_K_R16: return sizeof(block_q6_k_r16) / GROUP_ROWS;
    default: return 0;
    }
}

int llk_type_supported(int type) { return type < LLK_Q4_0_R16 && llk_block_size(type) != 0; }
_Static_assert(LLK_MXFP4 < LLK_Q4_0_R16, "the GGUF types' ids lie below the repacked ones");

size_t llk_row_size(int type, int64_t n) {
    int bs = llk_block_size(type);
    if (!bs || n < 0 || n % bs) return 0;
    return (size_t)(n / bs) * block_bytes(type);
}

int llk_act_kind(int type) {
    int bs = llk_block_size(type);
    return bs == QKK ? ACT_Q8K : bs == QK ? ACT_Q8A : ACT_F32;
}

size_t llk_act_size(int wtype, int64_t n) {
    switch (llk_act_kind(wtype)) {
    case ACT_Q8K: return (size_t)(n / QKK) * sizeof(block_q8k);
    case ACT_Q8A: return (size_t)(n / QK) * sizeof(block_q8a);
    default: return (size_t)n * sizeof(float);
    }
}

/* ---- unpackers: q[i] * sc[i/16] + bias[i/16] is element i ----------------- */

static void unpack_q4_0(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q4_0 *b = p;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0xF) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
    sc[0] = sc[1] = f16_to_f32(b->d);
    bias[0] = bias[1] = 0.0f;
}

static void unpack_q4_1(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q4_1 *b = p;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(b->qs[j] & 0xF);
        q[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
    sc[0] = sc[1] = f16_to_f32(b->d);
    bias[0] = bias[1] = f16_to_f32(b->m);
}

static void unpack_q5(const uint8_t *qhb, const uint8_t *qs, int offset, int8_t *q) {
    uint32_t qh;
    memcpy(&qh, qhb, 4);
    for (int j = 0; j < 16; j++) {
        int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        q[j] = (int8_t)(((qs[j] & 0xF) | h0) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | h1) - offset);
    }
}

static void unpack_q5_0(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q5_0 *b = p;
    unpack_q5(b->qh, b->qs, 16, q);
    sc[0] = sc[1] = f16_to_f32(b->d);
    bias[0] = bias[1] = 0.0f;
}

static void unpack_q5_1(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q5_1 *b = p;
    unpack_q5(b->qh, b->qs, 0, q);
    sc[0] = sc[1] = f16_to_f32(b->d);
    bias[0] = bias[1] = f16_to_f32(b->m);
}

static void unpack_q8_0(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q8_0 *b = p;
    memcpy(q, b->qs, 32);
    sc[0] = sc[1] = f16_to_f32(b->d);
    bias[0] = bias[1] = 0.0f;
}

static void unpack_mxfp4(const void *p, int8_t *q, float *sc, float *bias) {
    const block_mxfp4 *b = p;
    for (int j = 0; j < 16; j++) {
        q[j] = kvalues_mxfp4[b->qs[j] & 0xF];
        q[j + 16] = kvalues_mxfp4[b->qs[j] >> 4];
    }
    sc[0] = sc[1] = e8m0_half(b->e);
    bias[0] = bias[1] = 0.0f;
}

static void unpack_q2_k(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q2_k *b = p;
    float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    const uint8_t *qs = b->qs;
    int is = 0;
    for (int n = 0; n < QKK; n += 128, qs += 32) {
        for (int j = 0, shift = 0; j < 4; j++, shift += 2) {
            for (int half = 0; half < 2; half++, is++) {
                sc[is] = d * (b->scales[is] & 0xF);
                bias[is] = -(dmin * (b->scales[is] >> 4));
                for (int l = 0; l < 16; l++) q[16 * is + l] = (int8_t)((qs[l + 16 * half] >> shift) & 3);
            }
        }
    }
}

static void unpack_q3_k(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q3_k *b = p;
    int8_t scales[16];
    scales_q3_k(b->scales, scales);
    float d = f16_to_f32(b->d);
    const uint8_t *qs = b->qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < QKK; n += 128, qs += 32) {
        for (int j = 0, shift = 0; j < 4; j++, shift += 2, m <<= 1) {
            for (int half = 0; half < 2; half++, is++) {
                sc[is] = d * (float)scales[is];
                bias[is] = 0.0f;
                for (int l = 0; l < 16; l++) {
                    int k = l + 16 * half;
                    q[16 * is + l] = (int8_t)(((qs[k] >> shift) & 3) - ((b->hmask[k] & m) ? 0 : 4));
                }
            }
        }
    }
}

static void unpack_q45_k(const uint8_t *scales, float d, float dmin, int8_t *q, float *sc, float *bias,
                         const uint8_t *qs, const uint8_t *qh) {
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QKK; j += 64, qs += 32, is += 2, u1 <<= 2, u2 <<= 2) {
        uint8_t s, m;
        for (int k = 0; k < 2; k++) {
            scale_min_k4(is + k, scales, &s, &m);
            sc[2 * (is + k)] = sc[2 * (is + k) + 1] = d * s;
            bias[2 * (is + k)] = bias[2 * (is + k) + 1] = -(dmin * m);
        }
        for (int l = 0; l < 32; l++) {
            int h0 = qh && (qh[l] & u1) ? 16 : 0, h1 = qh && (qh[l] & u2) ? 16 : 0;
            q[j + l] = (int8_t)((qs[l] & 0xF) + h0);
            q[j + 32 + l] = (int8_t)((qs[l] >> 4) + h1);
        }
    }
}

static void unpack_q4_k(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q4_k *b = p;
    unpack_q45_k(b->scales, f16_to_f32(b->d), f16_to_f32(b->dmin), q, sc, bias, b->qs, NULL);
}

static void unpack_q5_k(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q5_k *b = p;
    unpack_q45_k(b->scales, f16_to_f32(b->d), f16_to_f32(b->dmin), q, sc, bias, b->qs, b->qh);
}

static void unpack_q6_k(const void *p, int8_t *q, float *sc, float *bias) {
    const block_q6_k *b = p;
    float d = f16_to_f32(b->d);
    const uint8_t *ql = b->ql, *qh = b->qh;
    for (int n = 0; n < QKK; n += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            q[n + l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[n + l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[n + l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[n + l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
    for (int is = 0; is < 16; is++) {
        sc[is] = d * (float)b->scales[is];
        bias[is] = 0.0f;
    }
}

typedef void (*unpack_fn)(const void *, int8_t *, float *, float *);

static unpack_fn unpacker(int type) {
    switch (type) {
    case LLK_Q4_0: return unpack_q4_0;
    case LLK_Q4_1: return unpack_q4_1;
    case LLK_Q5_0: return unpack_q5_0;
    case LLK_Q5_1: return unpack_q5_1;
    case LLK_Q8_0: return unpack_q8_0;
    case LLK_MXFP4: return unpack_mxfp4;
    case LLK_Q2_K: return unpack_q2_k;
    case LLK_Q3_K: return unpack_q3_k;
    case LLK_Q4_K: return unpack_q4_k;
    case LLK_Q5_K: return unpack_q5_k;
    case LLK_Q6_K: return unpack_q6_k;
    default: return NULL;
    }
}

int llk_dequantize(int type, const void *src, float *dst, int64_t n) {
    int bs = llk_block_size(type);
    if (!bs || n < 0 || n % bs) return -1;
    if (type == LLK_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return 0;
    }
    if (type == LLK_F16 || type == LLK_BF16) {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = type == LLK_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
        return 0;
    }
    unpack_fn unpack = unpacker(type);
    if (!unpack) return -1; /* a repacked layout: its rows are interleaved */
    size_t bb = block_bytes(type);
    int8_t q[QKK];
    float sc[16], bias[16];
    for (int64_t ib = 0; ib < n / bs; ib++, dst += bs) {
        unpack((const uint8_t *)src + ib * bb, q, sc, bias);
        for (int i = 0; i < bs; i++) dst[i] = sc[i / 16] * q[i] + bias[i / 16];
    }
    return 0;
}

/* ---- activation quantization ---------------------------------------------
 * Bit for bit as ggml's CPU backend, so that our logits follow llama.cpp's:
 * Q8_0/Q8_1 blocks scale by 127/amax and keep d (and s = d * sum of codes)
 * rounded to half precision; Q8_K blocks scale by -127/max, max being the
 * signed value of largest magnitude, and keep d = 1/scale in full precision.
 * Codes round to nearest even, as the SIMD paths. */

static void quantize_q8a_ref(const float *x, block_q8a *y, int64_t n) {
    for (int64_t ib = 0; ib < n / QK; ib++, x += QK) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < QK; i++) {
            y[ib].qs[i] = (int8_t)nearbyintf(x[i] * id);
            sum += y[ib].qs[i];
        }
        y[ib].d = round_f16(d);
        y[ib].s = round_f16(d * (float)sum);
        y[ib].sum = sum;
    }
}

static void quantize_q8k_ref(const float *x, block_q8k *y, int64_t n) {
    for (int64_t ib = 0; ib < n / QKK; ib++, x += QKK) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QKK; i++) {
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                max = x[i];
            }
        }
        float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        for (int i = 0; i < QKK; i++) y[ib].qs[i] = (int8_t)fminf(127.0f, nearbyintf(x[i] * iscale));
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[ib].qs[16 * j + i];
            y[ib].bsums[j] = (int16_t)sum;
        }
        y[ib].d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    }
}

/* ---- reference dot products ---------------------------------------------- */

static float dot_ref_blocks(int type, const void *w, const void *act, int64_t n) {
    unpack_fn unpack = unpacker(type);
    int bs = llk_block_size(type);
    size_t bb = block_bytes(type);
    int8_t q[QKK];
    float sc[16], bias[16], sum = 0.0f;
    for (int64_t ib = 0; ib < n / bs; ib++) {
        unpack((const uint8_t *)w + ib * bb, q, sc, bias);
        const int8_t *a;
        float da, min_term = 0.0f;  /* a 32-block's bias times its activations, as ggml: m * s */
        if (bs == QKK) {
            const block_q8k *y = (const block_q8k *)act + ib;
            a = y->qs;
            da = y->d;
        } else {
            const block_q8a *y = (const block_q8a *)act + ib;
            a = y->qs;
            da = y->d;
            min_term = bias[0] * y->s;
        }
        for (int s = 0; s < bs / 16; s++) {
            int dot = 0, asum = 0;
            for (int i = 0; i < 16; i++) {
                dot += q[16 * s + i] * a[16 * s + i];
                asum += a[16 * s + i];
            }
            sum += da * (sc[s] * (float)dot + (bs == QKK ? bias[s] * (float)asum : 0.0f));
        }
        sum += min_term;
    }
    return sum;
}

static float dot_ref_f32(const void *w, const void *act, int64_t n) {
    const float *x = w, *y = act;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static float dot_ref_f16(const void *w, const void *act, int64_t n) {
    const f16_t *x = w;
    const float *y = act;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += f16_to_f32(x[i]) * y[i];
    return s;
}

static float dot_ref_bf16(const void *w, const void *act, int64_t n) {
    const uint16_t *x = w;
    const float *y = act;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += bf16_to_f32(x[i]) * y[i];
    return s;
}

#define REF_DOT(name, type) \
    static float name(const void *w, const void *act, int64_t n) { return dot_ref_blocks(type, w, act, n); }
REF_DOT(dot_ref_q4_0, LLK_Q4_0)
REF_DOT(dot_ref_q4_1, LLK_Q4_1)
REF_DOT(dot_ref_q5_0, LLK_Q5_0)
REF_DOT(dot_ref_q5_1, LLK_Q5_1)
REF_DOT(dot_ref_q8_0, LLK_Q8_0)
REF_DOT(dot_ref_mxfp4, LLK_MXFP4)
REF_DOT(dot_ref_q2_k, LLK_Q2_K)
REF_DOT(dot_ref_q3_k, LLK_Q3_K)
REF_DOT(dot_ref_q4_k, LLK_Q4_K)
REF_DOT(dot_ref_q5_k, LLK_Q5_K)
REF_DOT(dot_ref_q6_k, LLK_Q6_K)

static float dot_f32_f16_ref(const float *x, const f16_t *y, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * f16_to_f32(y[i]);
    return s;
}

static void f32_to_f16_ref(const float *x, f16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = llk_f32_to_f16(x[i]);
}

static void scale_round_f16_ref(float *x, float scale, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = round_f16(x[i] * scale);
}

/* The exclusive or of the buffer's 64-bit words (every level's stream_sum gives it). */
static uint64_t stream_sum_ref(const void *p, int64_t n) {
    const uint64_t *w = p;
    uint64_t a[8] = {0}; /* independent chains: the loads are the bottleneck */
    for (int64_t i = 0; i < n / 8; i += 8) {
        PREFETCH_AHEAD(w + i, 64);
        for (int k = 0; k < 8; k++) a[k] ^= w[i + k];
    }
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

kernel_table llk_ref_kernels = {
    .dot = {
        [LLK_F32] = dot_ref_f32, [LLK_F16] = dot_ref_f16, [LLK_BF16] = dot_ref_bf16,
        [LLK_Q4_0] = dot_ref_q4_0, [LLK_Q4_1] = dot_ref_q4_1, [LLK_Q5_0] = dot_ref_q5_0,
        [LLK_Q5_1] = dot_ref_q5_1, [LLK_Q8_0] = dot_ref_q8_0, [LLK_Q2_K] = dot_ref_q2_k,
        [LLK_Q3_K] = dot_ref_q3_k, [LLK_Q4_K] = dot_ref_q4_k, [LLK_Q5_K] = dot_ref_q5_k,
        [LLK_Q6_K] = dot_ref_q6_k, [LLK_MXFP4] = dot_ref_mxfp4,
    },
    .quantize_q8a = quantize_q8a_ref,
    .quantize_q8k = quantize_q8k_ref,
    .dot_f32_f16 = dot_f32_f16_ref,
    .f32_to_f16 = f32_to_f16_ref,
    .scale_round_f16 = scale_round_f16_ref,
    .stream_sum = stream_sum_ref,
    .silu_mul = llk_silu_mul,
    .gelu_mul = llk_gelu_mul,
    .softcap = llk_softcap,
};

float llk_vec_dot_ref(int wtype, const void *w, const void *act, int64_t n) {
    int bs = llk_block_size(wtype);
    if (!llk_type_supported(wtype) || n % bs) return NAN;
    return llk_ref_kernels.dot[wtype](w, act, n);
}
