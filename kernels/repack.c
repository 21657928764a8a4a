/* Repacking at load: quantized matrices into 16-row interleaved groups (block_*_r16 in common.h), and
 * the scalar reference of their kernels.
 *
 * A repacked row's result is its own: each row's integer sums are exact, and its float sum takes one
 * fixed chain per row (super-block after super-block), the same at every level and for any number of
 * tokens, so the SIMD kernels equal this reference bit for bit and batch invariance holds by
 * construction. Matrices that do not fit (rows not a multiple of 16) keep their GGUF layout and the
 * per-row kernels: the mmap path.
 */
#include <math.h>

#include "common.h"

const char *llk_type_name(int type) {
    switch (type) {
    case LLK_F32: return "F32";
    case LLK_F16: return "F16";
    case LLK_BF16: return "BF16";
    case LLK_Q4_0: return "Q4_0";
    case LLK_Q4_1: return "Q4_1";
    case LLK_Q5_0: return "Q5_0";
    case LLK_Q5_1: return "Q5_1";
    case LLK_Q8_0: return "Q8_0";
    case LLK_Q2_K: return "Q2_K";
    case LLK_Q3_K: return "Q3_K";
    case LLK_Q4_K: return "Q4_K";
    case LLK_Q5_K: return "Q5_K";
    case LLK_Q6_K: return "Q6_K";
    case LLK_MXFP4: return "MXFP4";
    case LLK_Q4_0_R16: return "Q4_0_R16";
    case LLK_Q4_1_R16: return "Q4_1_R16";
    case LLK_Q5_0_R16: return "Q5_0_R16";
    case LLK_Q5_1_R16: return "Q5_1_R16";
    case LLK_Q8_0_R16: return "Q8_0_R16";
    case LLK_Q2_K_R16: return "Q2_K_R16";
    case LLK_Q3_K_R16: return "Q3_K_R16";
    case LLK_Q4_K_R16: return "Q4_K_R16";
    case LLK_Q5_K_R16: return "Q5_K_R16";
    case LLK_Q6_K_R16: return "Q6_K_R16";
    case LLK_MXFP4_R16: return "MXFP4_R16";
    default: return "?";
    }
}

static int repacked_of(int type) {
    switch (type) {
    case LLK_Q4_0: case LLK_Q4_1: case LLK_Q5_0: case LLK_Q5_1: case LLK_Q8_0:
    case LLK_Q2_K: case LLK_Q3_K: case LLK_Q4_K: case LLK_Q5_K: case LLK_Q6_K: case LLK_MXFP4:
        return type + 100;
    default: return type;
    }
}

static int fits(int type, int64_t ne0, int64_t ne1) {
    int bs = llk_block_size(type);
    return repacked_of(type) != type && ne0 > 0 && ne0 % bs == 0 && ne1 > 0 && ne1 % GROUP_ROWS == 0;
}

int llk_repack_type(int type, int64_t ne0, int64_t ne1) {
    int r = repacked_of(type);
    /* only where the level has a kernel of its own: the scalar one would be slower than the per-row path */
    if (!fits(type, ne0, ne1) || llk_kernels()->dot_group[r] == llk_ref_kernels.dot_group[r]) return type;
    return r;
}

size_t llk_repack_size(int type, int64_t ne0, int64_t ne1) {
    return fits(type, ne0, ne1) ? llk_row_size(repacked_of(type), ne0) * (size_t)ne1 : 0;
}

/* The 256 unsigned codes of a Q4_K or Q5_K super-block (qh: Q5_K's fifth bits; value = d*sc*code - dmin*m). */
static void codes_q45_k(const uint8_t *qs, const uint8_t *qh, uint8_t *q) {
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            q[64 * j + l] = (uint8_t)((qs[32 * j + l] & 0xF) | (qh ? ((qh[l] >> (2 * j)) & 1) << 4 : 0));
            q[64 * j + 32 + l] = (uint8_t)((qs[32 * j + l] >> 4) | (qh ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0));
        }
}

/* The 256 unsigned 6-bit codes of a Q6_K super-block (value = d*sc*(code - 32)). */
static void codes_q6_k(const block_q6_k *b, uint8_t *q) {
    const uint8_t *ql = b->ql, *qh = b->qh;
    for (int n = 0; n < QKK; n += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            q[n + l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
            q[n + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[n + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[n + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
}

/* Row r's codes of one sub-block (`len` values from q) as two nibble vectors at v: lane r of vector j
 * holds values 8j..8j+3 in its low nibbles and 8j+4..8j+7 in its high nibbles. */
static void put_nibbles(uint8_t *v, int r, const uint8_t *q, int len) {
    for (int j = 0; j < len / 8; j++)
        for (int b = 0; b < 4; b++) v[64 * j + 4 * r + b] = (uint8_t)((q[8 * j + b] & 0xF) | ((q[8 * j + 4 + b] & 0xF) << 4));
}

/* Row r's bit `bit` of 32 codes: bit k of byte b of lane r is that bit of value 4k+b (the third bits of Q3_K). */
static void put_bits(uint8_t *v, int r, const uint8_t *q, int bit) {
    for (int b = 0; b < 4; b++) {
        uint8_t bits = 0;
        for (int k = 0; k < 8; k++) bits |= (uint8_t)(((q[4 * k + b] >> bit) & 1) << k);
        v[4 * r + b] = bits;
    }
}

/* Row r's 2-bit codes of 16 values (the low two bits of q): value 4k+b at bits 2k..2k+1 of byte b of lane r. */
static void put_crumbs(uint8_t *v, int r, const uint8_t *q) {
    for (int b = 0; b < 4; b++) {
        uint8_t byte = 0;
        for (int k = 0; k < 4; k++) byte |= (uint8_t)((q[4 * k + b] & 3) << (2 * k));
        v[4 * r + b] = byte;
    }
}

/* Row r's 32 five-bit codes (a Q5_K sub-block, a Q5_0/Q5_1 block) in five vectors (block_q5_k_r16). */
static void put_five_bit_codes(uint8_t *v, int r, const uint8_t *q) {
    for (int b = 0; b < 4; b++) {
        const uint8_t *c = q + b; /* c[4 * k]: code k of byte b */
        uint8_t *lane = v + 4 * r + b;
        lane[0] = (uint8_t)(c[0] | (c[4] >> 4) << 5 | (c[20] >> 3) << 6);
        lane[64] = (uint8_t)(c[8] | (c[12] >> 4) << 5 | (c[28] >> 3) << 6);
        lane[128] = (uint8_t)(c[16] | (c[20] & 7) << 5);
        lane[192] = (uint8_t)(c[24] | (c[28] & 7) << 5);
        lane[256] = (uint8_t)((c[4] & 0xF) | (c[12] & 0xF) << 4);
    }
}

/* Code k of byte b of lane r of five-bit codes' vectors (put_five_bit_codes undone). */
static int five_bit_code(const uint8_t *v, int r, int k, int b) {
    const uint8_t *lane = v + 4 * r + b;
    switch (k) {
    case 0: case 2: case 4: case 6: return lane[64 * (k / 2)] & 0x1F;
    case 1: return (lane[256] & 0xF) | (lane[0] >> 5 & 1) << 4;
    case 3: return (lane[256] >> 4) | (lane[64] >> 5 & 1) << 4;
    case 5: return (lane[128] >> 5) | (lane[0] >> 6) << 3;
    default: return (lane[192] >> 5) | (lane[64] >> 6) << 3;
    }
}

/* Q4_K (fifth 0) or Q5_K (fifth 1): the same scales, then each sub-block's codes. */
static void repack_q45_k(const uint8_t *src, int64_t nb, int fifth, uint8_t *dst) {
    const size_t src_block = fifth ? sizeof(block_q5_k) : sizeof(block_q4_k);
    const size_t group = fifth ? sizeof(block_q5_k_r16) : sizeof(block_q4_k_r16);
    uint8_t q[QKK];
    for (int r = 0; r < GROUP_ROWS; r++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *b = src + (r * nb + ib) * src_block;
            const block_q5_k *b5 = (const block_q5_k *)b; /* d, dmin and scales: the same place in both */
            block_q5_k_r16 *g = (block_q5_k_r16 *)(dst + ib * group);
            g->d[r] = b5->d;
            g->dmin[r] = b5->dmin;
            codes_q45_k(fifth ? b5->qs : ((const block_q4_k *)b)->qs, fifth ? b5->qh : NULL, q);
            for (int s = 0; s < 8; s++) {
                scale_min_k4(s, b5->scales, &g->scales[s][r], &g->mins[s][r]);
                if (fifth) put_five_bit_codes(g->qs[s], r, q + 32 * s);
                else put_nibbles(((block_q4_k_r16 *)g)->qs[s], r, q + 32 * s, 32);
            }
        }
}

/* The 256 codes of a Q2_K super-block (0..3) or a Q3_K one (0..7, value code - 4), in order: sub-block s
 * of 16 is values 16s.., as the unpackers of quants.c walk them. */
static void codes_q23_k(const uint8_t *qs, const uint8_t *hmask, uint8_t *q) {
    for (int n = 0, is = 0; n < QKK / 128; n++, qs += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++, is++)
                for (int l = 0; l < 16; l++) {
                    const int k = l + 16 * half;
                    const int high = hmask ? ((hmask[k] >> (4 * n + shift / 2)) & 1) << 2 : 0;
                    q[16 * is + l] = (uint8_t)(((qs[k] >> shift) & 3) | high);
                }
}

static void repack_q2_k(const block_q2_k *src, int64_t nb, block_q2_k_r16 *dst) {
    uint8_t q[QKK];
    for (int r = 0; r < GROUP_ROWS; r++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q2_k *b = src + r * nb + ib;
            block_q2_k_r16 *g = dst + ib;
            g->d[r] = b->d;
            g->dmin[r] = b->dmin;
            codes_q23_k(b->qs, NULL, q);
            for (int s = 0; s < 16; s++) {
                g->scales[s][r] = b->scales[s];
                put_crumbs(g->qs[s], r, q + 16 * s);
            }
        }
}

static void repack_q3_k(const block_q3_k *src, int64_t nb, block_q3_k_r16 *dst) {
    uint8_t q[QKK];
    for (int r = 0; r < GROUP_ROWS; r++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q3_k *b = src + r * nb + ib;
            block_q3_k_r16 *g = dst + ib;
            g->d[r] = b->d;
            codes_q23_k(b->qs, b->hmask, q);
            int8_t scales[16];
            scales_q3_k(b->scales, scales);
            for (int s = 0; s < 16; s++) {
                g->scales[s][r] = scales[s];
                put_crumbs(g->qs[s], r, q + 16 * s);
            }
            for (int j = 0; j < 8; j++) put_bits(g->hbits[j], r, q + 32 * j, 2);
        }
}

static void repack_q6_k(const block_q6_k *src, int64_t nb, block_q6_k_r16 *dst) {
    uint8_t q[QKK];
    for (int r = 0; r < GROUP_ROWS; r++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q6_k *b = src + r * nb + ib;
            block_q6_k_r16 *g = dst + ib;
            g->d[r] = b->d;
            codes_q6_k(b, q);
            for (int s = 0; s < 16; s++) {
                const uint8_t *qs = q + 16 * s;
                g->scales[s][r] = b->scales[s];
                for (int b = 0; b < 4; b++) {
                    g->qs[s][4 * r + b] = (uint8_t)(qs[b] | (qs[4 + b] >> 4) << 6);
                    g->qs[s][64 + 4 * r + b] = (uint8_t)(qs[8 + b] | (qs[12 + b] >> 4) << 6);
                    g->qs[s][128 + 4 * r + b] = (uint8_t)((qs[4 + b] & 0xF) | (qs[12 + b] & 0xF) << 4);
                }
            }
        }
}

/* The 32 unsigned codes of a block of a 32-format (what the repacked layout stores), its scale and min
 * (0 where it has none): value = d * (code - offset) + m, offset 8 (Q4_0), 16 (Q5_0), 128 (Q8_0) or 0. */
static void codes32(int type, const void *block, uint8_t *q, f16_t *d, f16_t *m) {
    const uint8_t *nibbles = NULL, *qh = NULL;
    *m = 0;
    switch (type) {
    case LLK_Q4_0: { const block_q4_0 *b = block; *d = b->d; nibbles = b->qs; break; }
    case LLK_Q4_1: { const block_q4_1 *b = block; *d = b->d; *m = b->m; nibbles = b->qs; break; }
    case LLK_Q5_0: { const block_q5_0 *b = block; *d = b->d; nibbles = b->qs; qh = b->qh; break; }
    case LLK_Q5_1: { const block_q5_1 *b = block; *d = b->d; *m = b->m; nibbles = b->qs; qh = b->qh; break; }
    default: { const block_q8_0 *b = block; *d = b->d; for (int i = 0; i < QK; i++) q[i] = (uint8_t)(b->qs[i] + 128); return; }
    }
    uint32_t high = 0;
    if (qh) memcpy(&high, qh, 4);
    for (int i = 0; i < 16; i++) {
        q[i] = (uint8_t)((nibbles[i] & 0xF) | (((high >> i) & 1) << 4));
        q[i + 16] = (uint8_t)((nibbles[i] >> 4) | (((high >> (i + 16)) & 1) << 4));
    }
}

/* Row r of a repacked 32-format block at g: codes as nibble vectors (and fifth bits), or bytes (Q8_0). */
static void put32(int type, uint8_t *g, int r, const uint8_t *q, f16_t d, f16_t m) {
    f16_t *scales = (f16_t *)g;
    scales[r] = d;
    int has_min = type == LLK_Q4_1 || type == LLK_Q5_1, has_fifth = type == LLK_Q5_0 || type == LLK_Q5_1;
    if (has_min) scales[GROUP_ROWS + r] = m;
    uint8_t *codes = g + (has_min ? 64 : 32);
    if (type == LLK_Q8_0) {
        for (int k = 0; k < 8; k++) memcpy(codes + 64 * k + 4 * r, q + 4 * k, 4);
        return;
    }
    if (has_fifth) put_five_bit_codes(codes, r, q);
    else put_nibbles(codes, r, q, 32);
}

/* MXFP4: the scale bytes as they are, the codes (indices of kvalues_mxfp4) as the 32-formats' nibble vectors. */
static void repack_mxfp4(const block_mxfp4 *src, int64_t nb, block_mxfp4_r16 *dst) {
    uint8_t q[QK];
    for (int r = 0; r < GROUP_ROWS; r++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_mxfp4 *b = src + r * nb + ib;
            dst[ib].e[r] = b->e;
            for (int i = 0; i < 16; i++) {
                q[i] = b->qs[i] & 0xF;
                q[i + 16] = b->qs[i] >> 4;
            }
            put_nibbles(dst[ib].qs, r, q, QK);
        }
}

int llk_repack(int type, const void *src, int64_t ne0, int64_t ne1, void *dst) {
    if (!fits(type, ne0, ne1)) return -1;
    const int64_t nb = ne0 / llk_block_size(type);
    const size_t src_row = llk_row_size(type, ne0), src_block = src_row / (size_t)nb;
    const size_t group_block = llk_row_size(repacked_of(type), ne0) / (size_t)nb * GROUP_ROWS;
    for (int64_t g = 0; g < ne1 / GROUP_ROWS; g++) {
        const uint8_t *s = (const uint8_t *)src + g * src_row * GROUP_ROWS;
        uint8_t *out = (uint8_t *)dst + g * group_block * nb;
        if (type == LLK_Q4_K || type == LLK_Q5_K) {
            repack_q45_k(s, nb, type == LLK_Q5_K, out);
        } else if (type == LLK_Q2_K) {
            repack_q2_k((const block_q2_k *)s, nb, (block_q2_k_r16 *)out);
        } else if (type == LLK_Q3_K) {
            repack_q3_k((const block_q3_k *)s, nb, (block_q3_k_r16 *)out);
        } else if (type == LLK_Q6_K) {
            repack_q6_k((const block_q6_k *)s, nb, (block_q6_k_r16 *)out);
        } else if (type == LLK_MXFP4) {
            repack_mxfp4((const block_mxfp4 *)s, nb, (block_mxfp4_r16 *)out);
        } else {
            memset(out, 0, group_block * nb);
            uint8_t q[QK];
            f16_t d, m;
            for (int r = 0; r < GROUP_ROWS; r++)
                for (int64_t ib = 0; ib < nb; ib++) {
                    codes32(type, s + r * src_row + ib * src_block, q, &d, &m);
                    put32(type, out + ib * group_block, r, q, d, m);
                }
        }
    }
    return 0;
}

/* ---- scalar reference: the SIMD kernels' integers and float chains, one lane at a time ------------- */

/* Row r's code of value i (< 8 * vectors) of one sub-block's nibble vectors. */
static inline int nibble(const uint8_t *v, int r, int i) {
    uint8_t byte = v[64 * (i / 8) + 4 * r + i % 4];
    return i % 8 < 4 ? byte & 0xF : byte >> 4;
}

static void dot_group_q45_k_ref(int fifth, const void *w, const void *act, size_t act_row, int n_tok, int64_t n,
                                float *out, size_t out_stride) {
    const size_t group = fifth ? sizeof(block_q5_k_r16) : sizeof(block_q4_k_r16);
    for (int t = 0; t < n_tok; t++) {
        const block_q8k *y = (const block_q8k *)((const uint8_t *)act + t * act_row);
        float acc[GROUP_ROWS] = {0};
        for (int64_t ib = 0; ib < n / QKK; ib++) {
            const block_q5_k_r16 *g = (const block_q5_k_r16 *)((const uint8_t *)w + ib * group);
            for (int r = 0; r < GROUP_ROWS; r++) {
                int32_t isum = 0, msum = 0;
                for (int s = 0; s < 8; s++) {
                    int32_t p = 0;
                    for (int i = 0; i < 32; i++) {
                        int code = fifth ? five_bit_code(g->qs[s], r, i / 4, i % 4)
                                         : nibble(((const block_q4_k_r16 *)g)->qs[s], r, i);
                        p += code * y[ib].qs[32 * s + i];
                    }
                    isum += p * g->scales[s][r];
                    msum += g->mins[s][r] * (y[ib].bsums[2 * s] + y[ib].bsums[2 * s + 1]);
                }
                acc[r] = fmaf((float)isum, f16_to_f32(g->d[r]) * y[ib].d, acc[r]);
                acc[r] = fmaf(-(float)msum, f16_to_f32(g->dmin[r]) * y[ib].d, acc[r]);
            }
        }
        memcpy(out + t * out_stride, acc, sizeof acc);
    }
}

static void dot_group_q4_k_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                               size_t out_stride) {
    dot_group_q45_k_ref(0, w, act, act_row, n_tok, n, out, out_stride);
}

static void dot_group_q5_k_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                               size_t out_stride) {
    dot_group_q45_k_ref(1, w, act, act_row, n_tok, n, out, out_stride);
}

static void dot_group_q6_k_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                               size_t out_stride) {
    for (int t = 0; t < n_tok; t++) {
        const block_q8k *y = (const block_q8k *)((const uint8_t *)act + t * act_row);
        float acc[GROUP_ROWS] = {0};
        for (int64_t ib = 0; ib < n / QKK; ib++) {
            const block_q6_k_r16 *g = (const block_q6_k_r16 *)w + ib;
            for (int r = 0; r < GROUP_ROWS; r++) {
                int32_t isum = 0;
                for (int s = 0; s < 16; s++) {
                    int32_t p = -32 * y[ib].bsums[s];
                    for (int i = 0; i < 16; i++) {
                        const uint8_t *lane = g->qs[s] + 4 * r + i % 4; /* bytes of vectors 0, 1, 2 at +0, +64, +128 */
                        const int whole = lane[i / 8 * 64], low4 = lane[128] >> (i / 8 * 4) & 0xF;
                        p += (i / 4 % 2 ? low4 | (whole >> 6) << 4 : whole & 0x3F) * y[ib].qs[16 * s + i];
                    }
                    isum += p * g->scales[s][r];
                }
                acc[r] = fmaf((float)isum, f16_to_f32(g->d[r]) * y[ib].d, acc[r]);
            }
        }
        memcpy(out + t * out_stride, acc, sizeof acc);
    }
}

/* Q2_K (hbits NULL) and Q3_K: per sub-block of 16 one integer dot (Q3_K's starting at minus 4 times the
 * activations' 16-sum), times its scale; Q2_K's min against that 16-sum in a second integer sum. */
static void dot_group_q23_k_ref(int three, const void *w, const void *act, size_t act_row, int n_tok, int64_t n,
                                float *out, size_t out_stride) {
    const size_t group = three ? sizeof(block_q3_k_r16) : sizeof(block_q2_k_r16);
    for (int t = 0; t < n_tok; t++) {
        const block_q8k *y = (const block_q8k *)((const uint8_t *)act + t * act_row);
        float acc[GROUP_ROWS] = {0};
        for (int64_t ib = 0; ib < n / QKK; ib++) {
            const uint8_t *g = (const uint8_t *)w + ib * group;
            const block_q2_k_r16 *g2 = (const block_q2_k_r16 *)g;
            const block_q3_k_r16 *g3 = (const block_q3_k_r16 *)g;
            for (int r = 0; r < GROUP_ROWS; r++) {
                int32_t isum = 0, msum = 0;
                for (int s = 0; s < 16; s++) {
                    const uint8_t *crumbs = three ? g3->qs[s] : g2->qs[s];
                    int32_t p = three ? -4 * y[ib].bsums[s] : 0;
                    for (int i = 0; i < 16; i++) {
                        int code = (crumbs[4 * r + i % 4] >> (2 * (i / 4))) & 3;
                        if (three) code |= ((g3->hbits[s / 2][4 * r + i % 4] >> (4 * (s % 2) + i / 4)) & 1) << 2;
                        p += code * y[ib].qs[16 * s + i];
                    }
                    isum += p * (three ? g3->scales[s][r] : g2->scales[s][r] & 0xF);
                    if (!three) msum += (g2->scales[s][r] >> 4) * y[ib].bsums[s];
                }
                acc[r] = fmaf((float)isum, f16_to_f32(three ? g3->d[r] : g2->d[r]) * y[ib].d, acc[r]);
                if (!three) acc[r] = fmaf(-(float)msum, f16_to_f32(g2->dmin[r]) * y[ib].d, acc[r]);
            }
        }
        memcpy(out + t * out_stride, acc, sizeof acc);
    }
}

static void dot_group_q2_k_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                               size_t out_stride) {
    dot_group_q23_k_ref(0, w, act, act_row, n_tok, n, out, out_stride);
}

static void dot_group_q3_k_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                               size_t out_stride) {
    dot_group_q23_k_ref(1, w, act, act_row, n_tok, n, out, out_stride);
}

/* The 32-formats: one integer dot per block and row (the offset taken out through the activations'
 * exact sum), then the block's scale, then its min against the activations' s. */
static void dot_group_32_ref(int type, const void *w, const void *act, size_t act_row, int n_tok, int64_t n,
                             float *out, size_t out_stride) {
    const int has_min = type == LLK_Q4_1_R16 || type == LLK_Q5_1_R16, has_fifth = type == LLK_Q5_0_R16 || type == LLK_Q5_1_R16;
    const int offset = type == LLK_Q4_0_R16 ? 8 : type == LLK_Q5_0_R16 ? 16 : type == LLK_Q8_0_R16 ? 128 : 0;
    const size_t group_block = llk_row_size(type, QK) * GROUP_ROWS;
    for (int t = 0; t < n_tok; t++) {
        const block_q8a *y = (const block_q8a *)((const uint8_t *)act + t * act_row);
        float acc[GROUP_ROWS] = {0};
        for (int64_t ib = 0; ib < n / QK; ib++) {
            const uint8_t *g = (const uint8_t *)w + ib * group_block;
            const f16_t *d = (const f16_t *)g, *m = d + GROUP_ROWS;
            const uint8_t *codes = g + (has_min ? 64 : 32);
            for (int r = 0; r < GROUP_ROWS; r++) {
                int32_t p = -offset * y[ib].sum;
                for (int i = 0; i < QK; i++) {
                    const int code = type == LLK_Q8_0_R16 ? codes[64 * (i / 4) + 4 * r + i % 4]
                                     : has_fifth ? five_bit_code(codes, r, i / 4, i % 4) : nibble(codes, r, i);
                    p += code * y[ib].qs[i];
                }
                acc[r] = fmaf((float)p, f16_to_f32(d[r]) * y[ib].d, acc[r]);
                if (has_min) acc[r] = fmaf(f16_to_f32(m[r]), y[ib].s, acc[r]);
            }
        }
        memcpy(out + t * out_stride, acc, sizeof acc);
    }
}

#define DOT_GROUP_32_REF(NAME, TYPE)                                                                         \
    static void NAME(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,        \
                     size_t out_stride) {                                                                   \
        dot_group_32_ref(TYPE, w, act, act_row, n_tok, n, out, out_stride);                                 \
    }
DOT_GROUP_32_REF(dot_group_q4_0_ref, LLK_Q4_0_R16)
DOT_GROUP_32_REF(dot_group_q4_1_ref, LLK_Q4_1_R16)
DOT_GROUP_32_REF(dot_group_q5_0_ref, LLK_Q5_0_R16)
DOT_GROUP_32_REF(dot_group_q5_1_ref, LLK_Q5_1_R16)
DOT_GROUP_32_REF(dot_group_q8_0_ref, LLK_Q8_0_R16)

/* MXFP4: one integer dot of the doubled values per block and row, then the block's scale (2^(e-128), the
 * halving that undoes the doubling) times the activations' as one float: ggml's d. */
static void dot_group_mxfp4_ref(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                                size_t out_stride) {
    for (int t = 0; t < n_tok; t++) {
        const block_q8a *y = (const block_q8a *)((const uint8_t *)act + t * act_row);
        float acc[GROUP_ROWS] = {0};
        for (int64_t ib = 0; ib < n / QK; ib++) {
            const block_mxfp4_r16 *g = (const block_mxfp4_r16 *)w + ib;
            for (int r = 0; r < GROUP_ROWS; r++) {
                int32_t p = 0;
                for (int i = 0; i < QK; i++) p += kvalues_mxfp4[nibble(g->qs, r, i)] * y[ib].qs[i];
                acc[r] = fmaf((float)p, e8m0_half(g->e[r]) * y[ib].d, acc[r]);
            }
        }
        memcpy(out + t * out_stride, acc, sizeof acc);
    }
}

void llk_fill_repacked_ref(kernel_table *t) {
    t->dot_group[LLK_Q4_0_R16] = dot_group_q4_0_ref;
    t->dot_group[LLK_Q4_1_R16] = dot_group_q4_1_ref;
    t->dot_group[LLK_Q5_0_R16] = dot_group_q5_0_ref;
    t->dot_group[LLK_Q5_1_R16] = dot_group_q5_1_ref;
    t->dot_group[LLK_Q8_0_R16] = dot_group_q8_0_ref;
    t->dot_group[LLK_Q2_K_R16] = dot_group_q2_k_ref;
    t->dot_group[LLK_Q3_K_R16] = dot_group_q3_k_ref;
    t->dot_group[LLK_Q4_K_R16] = dot_group_q4_k_ref;
    t->dot_group[LLK_Q5_K_R16] = dot_group_q5_k_ref;
    t->dot_group[LLK_Q6_K_R16] = dot_group_q6_k_ref;
    t->dot_group[LLK_MXFP4_R16] = dot_group_mxfp4_ref;
}
