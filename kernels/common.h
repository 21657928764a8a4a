/* Internal: GGUF block layouts and the kernel table. */
#ifndef LLK_COMMON_H
#define LLK_COMMON_H

#include <stdint.h>
#include <string.h>
#include "floats.h"
#include "llk.h"

#define QK 32   /* elements per block of the 32-formats */
#define QKK 256 /* elements per super-block of the K-formats */

typedef struct { f16_t d; uint8_t qs[16]; } block_q4_0;
typedef struct { f16_t d, m; uint8_t qs[16]; } block_q4_1;
typedef struct { f16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct { f16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
typedef struct { f16_t d; int8_t qs[32]; } block_q8_0;
/* MXFP4 (OCP microscaling): a power-of-two scale byte e (E8M0) and 32 E2M1 codes, element j < 16 the low
 * nibble of qs[j], element 16 + j its high nibble; value = kvalues_mxfp4[code] * e8m0_half(e). */
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; f16_t d, dmin; } block_q2_k;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; f16_t d; } block_q3_k;
typedef struct { f16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_k;
typedef struct { f16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_k;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; f16_t d; } block_q6_k;

/* Repacked K-formats: 16 rows interleaved per super-block, so one int8 dot instruction holds one 4-value
 * group of each of 16 rows in its 16 lanes (each lane one row: no horizontal sums), the activations'
 * group broadcast to all of them, and the scales ready as bytes (unpacked once, at load).
 * Codes of a (sub-)block: vector j of 64 bytes, lane r (4 bytes) holds row r's values 8j..8j+3 in its low
 * nibbles and 8j+4..8j+7 in its high nibbles (Q6_K and the five-bit formats: see block_q6_k_r16 and
 * block_q5_k_r16). The 32-formats keep one scale per block
 * and row; their codes are stored unsigned, the offset taken out through the activations' sum. */
typedef struct { f16_t d[16]; uint8_t qs[256]; } block_q4_0_r16;                 /* codes + 8 */
typedef struct { f16_t d[16], m[16]; uint8_t qs[256]; } block_q4_1_r16;
typedef struct { f16_t d[16]; uint8_t qs[320]; } block_q5_0_r16;  /* codes + 16, as Q5_K's sub-block */
typedef struct { f16_t d[16], m[16]; uint8_t qs[320]; } block_q5_1_r16;
typedef struct { f16_t d[16]; uint8_t qs[512]; } block_q8_0_r16;                 /* codes + 128, 8 vectors */
typedef struct { uint8_t e[16]; uint8_t qs[256]; } block_mxfp4_r16; /* the E2M1 codes (indices of kvalues_mxfp4) */
typedef struct {
    f16_t d[16], dmin[16];
    uint8_t scales[8][16], mins[8][16]; /* [sub-block of 32][row] */
    uint8_t qs[8][256];                 /* [sub-block of 32]: four vectors */
} block_q4_k_r16;
/* Q5_K: Q4_K's scales, then five vectors a sub-block: lane r byte b of each holds row r's codes v_k of values
 * 4k+b (k = 0..7) as W0 = v0 | bit4(v1) << 5 | top2(v5) << 6, W1 = v2 | bit4(v3) << 5 | top2(v7) << 6,
 * W2 = v4 | low3(v5) << 5, W3 = v6 | low3(v7) << 5, L = low4(v1) | low4(v3) << 4: four codes whole, each
 * other one a shift or two and a mask away (the layout of fifth bits apart took three operations a code). */
typedef struct {
    f16_t d[16], dmin[16];
    uint8_t scales[8][16], mins[8][16];
    uint8_t qs[8][320];
} block_q5_k_r16;
typedef struct {
    f16_t d[16];
    int8_t scales[16][16]; /* [sub-block of 16][row] */
    uint8_t qs[16][192];   /* [sub-block of 16]: three vectors, lane r byte b of each holding row r's codes v_i of
                            * values i = b, 4+b, 8+b, 12+b as v_b | top2(v_{4+b}) << 6, v_{8+b} | top2(v_{12+b}) << 6,
                            * low4(v_{4+b}) | low4(v_{12+b}) << 4: two codes whole, the two others a mask and a shift away */
} block_q6_k_r16;

/* Q2_K: sub-blocks of 16 values; vector s holds sub-block s's 2-bit codes, lane r (4 bytes) row r's value
 * 4k+b at bits 2k..2k+1 of byte b; the scale (low nibble) and min (high nibble) bytes as GGUF has them. */
typedef struct {
    f16_t d[16], dmin[16];
    uint8_t scales[16][16]; /* [sub-block of 16][row] */
    uint8_t qs[16][64];     /* [sub-block of 16]: one vector */
} block_q2_k_r16;
/* Q3_K: the low two bits of each code as Q2_K's vectors, the third bit of sub-blocks 2j and 2j+1 in
 * vector j of hbits (bit k of byte b of lane r: value 4k+b of the pair), the scales unpacked to bytes
 * (-32..31); codes stored unsigned (value = d * sc * (code - 4)). */
typedef struct {
    f16_t d[16];
    int8_t scales[16][16]; /* [sub-block of 16][row] */
    uint8_t qs[16][64];
    uint8_t hbits[8][64];
} block_q3_k_r16;

/* Activations for the 32-formats (as ggml's Q8_0/Q8_1).
 * d: the scale, s: d * (sum of qs), both rounded to half precision as ggml's Q8_1
 * (the min term of Q4_1/Q5_1 uses s). */
typedef struct { float d, s; int32_t sum; int8_t qs[32]; } block_q8a; /* sum: of qs, exact (repacked kernels) */
/* Activations for the K-formats (as ggml's Q8_K): bsums are sums of 16 qs each. */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } block_q8k;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(block_mxfp4) == 17, "mxfp4");
_Static_assert(sizeof(block_q2_k) == 84, "q2_k");
_Static_assert(sizeof(block_q3_k) == 110, "q3_k");
_Static_assert(sizeof(block_q4_k) == 144, "q4_k");
_Static_assert(sizeof(block_q5_k) == 176, "q5_k");
_Static_assert(sizeof(block_q6_k) == 210, "q6_k");
_Static_assert(sizeof(block_q4_k_r16) == 16 * 148, "q4_k_r16");
_Static_assert(sizeof(block_q4_0_r16) == 16 * 18 && sizeof(block_q4_1_r16) == 16 * 20, "q4_r16");
_Static_assert(sizeof(block_q5_0_r16) == 16 * 22 && sizeof(block_q5_1_r16) == 16 * 24, "q5_r16");
_Static_assert(sizeof(block_q8_0_r16) == 16 * 34, "q8_0_r16");
_Static_assert(sizeof(block_mxfp4_r16) == 16 * 17, "mxfp4_r16");
_Static_assert(sizeof(block_q6_k_r16) == 16 * 210, "q6_k_r16");
_Static_assert(sizeof(block_q5_k_r16) == 16 * 180, "q5_k_r16");
_Static_assert(sizeof(block_q2_k_r16) == 16 * 84, "q2_k_r16");
_Static_assert(sizeof(block_q3_k_r16) == 16 * 114, "q3_k_r16");
#define GROUP_ROWS 16 /* rows of a repacked group */


/* The E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times two), as ggml's
 * kvalues_mxfp4: integers for the int8 dot products, the factor two taken back by e8m0_half. */
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* What the SIMD kernels add to each doubled value to make it an unsigned operand (taken out again through
 * the activations' exact sum, as the offsets of Q4_0's codes). */
#define MXFP4_OFFSET 12

/* Half the scale an E8M0 byte encodes, 2^(e - 128), exactly (ggml's GGML_E8M0_TO_FP32_HALF): e = 0 and 1
 * are below the normal range and come out as the subnormals 2^-128 and 2^-127. */
static inline float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The 16 signed 6-bit scales (-32..31) of a Q3_K super-block, from their 12 packed bytes. */
static inline void scales_q3_k(const uint8_t *packed, int8_t *scales) {
    const uint32_t low4 = 0x0f0f0f0f, high2 = 0x03030303;
    uint32_t aux[4];
    memcpy(aux, packed, 12);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & low4) | (((tmp >> 4) & high2) << 4);
    aux[3] = ((aux[1] >> 4) & low4) | (((tmp >> 6) & high2) << 4);
    aux[0] = (aux[0] & low4) | (((tmp >> 0) & high2) << 4);
    aux[1] = (aux[1] & low4) | (((tmp >> 2) & high2) << 4);
    memcpy(scales, aux, 16);
    for (int j = 0; j < 16; j++) scales[j] = (int8_t)(scales[j] - 32);
}

/* Which activation layout a weight type's dot product takes. */
enum act_kind { ACT_F32 = 0, ACT_Q8A = 1, ACT_Q8K = 2 };
int llk_act_kind(int type);

/* While `rows` rows are taken block by block, fetch the next `rows` rows into the cache, an equal
 * share each block: decode streams the weights from memory, and rows of a few hundred bytes are too
 * short for the hardware prefetcher to run ahead. `block` is block ib of the first of the rows. */
#define PREFETCH_NEXT_ROWS(rows, block, w_row, ib, block_size)                                \
    do {                                                                                      \
        const char *next_ = (const char *)(block) + (rows) * (w_row) + (ib) * ((rows) - 1) * (block_size); \
        for (int l_ = 0; l_ < (rows) * (block_size); l_ += 64) __builtin_prefetch(next_ + l_); \
    } while (0)

/* The same for kernels that take one row at a time (the K-formats, NEON's): block ib of the next
 * row, which follows this one, while block ib of this row is worked on. */
#define PREFETCH_NEXT_ROW(block, n_blocks)                                                    \
    do {                                                                                      \
        const char *next_ = (const char *)((block) + (n_blocks));                             \
        for (int l_ = 0; l_ < (int)sizeof(*(block)); l_ += 64) __builtin_prefetch(next_ + l_); \
    } while (0)

/* The repacked kernels stream each thread's rows as one run of bytes (whole groups, one after the other):
 * while one piece of `bytes` at p is worked on, fetch the piece PREFETCH_DISTANCE bytes on. Measured on
 * Zen 4 (one thread, 4096 x 4096 matrices from the last-level cache): Q5_K 16 GB/s without, 34 with 4 KiB
 * (2 KiB: 33, 8 KiB: 34.6), Q4_K 40 -> 43, Q4_0 and Q6_K unchanged; from memory (4096 x 32768) within the
 * noise of no prefetch (the hardware prefetcher streams those). Into L2 only (locality 2): no better. */
#ifndef PREFETCH_DISTANCE
#define PREFETCH_DISTANCE 4096
#endif
#ifndef PREFETCH_LOCALITY
#define PREFETCH_LOCALITY 3
#endif
#define PREFETCH_AHEAD(p, bytes)                                                                       \
    do {                                                                                               \
        for (int l_ = 0; PREFETCH_DISTANCE && l_ < (int)(bytes); l_ += 64)                              \
            __builtin_prefetch((const char *)(p) + PREFETCH_DISTANCE + l_, 0, PREFETCH_LOCALITY);      \
    } while (0)

typedef float (*dot_fn)(const void *w, const void *act, int64_t n);
/* One weight row against n_cols (<= DOT_MAX_COLS) activation rows act_row bytes apart, for prefill
 * and batches: the weights are unpacked once for all of them, and each result is bit for bit what
 * dot_fn gives for that row alone (a sequence's output must not depend on what it is batched with). */
#define DOT_MAX_COLS 4
typedef void (*dot_cols_fn)(const void *w, const void *act, size_t act_row, int n_cols, int64_t n, float *out);
/* Several weight rows (two, or eight) w_row bytes apart against one activation row, each result bit
 * for bit dot_fn's: ggml's order is one FMA chain per row, so decode interleaves rows to keep the FMA
 * units busy (and, with eight, reads their scales together). */
typedef void (*dot_rows_fn)(const void *w, size_t w_row, const void *act, int64_t n, float *out);

/* A repacked group of GROUP_ROWS rows against n_tok (<= GROUP_MAX_TOK) activation rows act_row bytes apart:
 * out[t * out_stride + r]. Each token's arithmetic is the same whatever n_tok is (the codes are unpacked
 * once for all of them, or for each run of as many as a level's registers hold), so a row's result never
 * depends on the batch. */
#define GROUP_MAX_TOK 8
typedef void (*dot_group_fn)(const void *w, const void *act, size_t act_row, int n_tok, int64_t n, float *out,
                             size_t out_stride);

#define STREAM_BYTES 256 /* the unit of stream_sum */

#define ATTN_TILE 16 /* cells of a tile: the unit of the attention kernels' loops over the cache */
/* s[i * s_stride + j] for the n_q query rows q[i] (head_dim apart) and the cells j of n_tiles tiles:
 * one fused multiply-add chain over the dimensions in order (Q8_0: a chain per 32 dimensions, then
 * one over the blocks with the scales).  tiles[2t] is tile t's K at its first cell (cells per dimension row:
 * stride), tiles[2t + 1] its Q8_0 scales (stride per 32 dimensions).  s_stride a multiple of 16. */
typedef void (*attn_scores_fn)(const float *q, int n_q, int head_dim, const void *const *tiles, int n_tiles,
                               int stride, float *s, int s_stride);
/* acc[i][d] += p[i * p_stride + j] * V_j[d] over the cells j of n_tiles tiles in order (the last has
 * last_cells), one fused chain per (i, d): tiles[2t] is tile t's first V row, rows row_bytes apart. */
typedef void (*attn_accum_fn)(const float *p, int n_q, int p_stride, const void *const *tiles, int n_tiles,
                              int last_cells, size_t row_bytes, int head_dim, float *acc);
/* s[0..n) (n a multiple of 16): the cells in [lo, hi] become their softmax weights, exp(s * scale - max)
 * over the sum (in 16 lanes by index, then llk_reduce16's order), rounded to half precision as ggml
 * hands them to V; the others 0.  Returns the sum, and the max in *max_out. */
typedef float (*attn_softmax_fn)(float *s, int n, int lo, int hi, float scale, float *max_out);
void llk_attn_scores_f16_ref(const float *q, int n_q, int head_dim, const void *const *tiles, int n_tiles,
                             int stride, float *s, int s_stride);
void llk_attn_scores_q8_ref(const float *q, int n_q, int head_dim, const void *const *tiles, int n_tiles,
                            int stride, float *s, int s_stride);
void llk_attn_accum_f16_ref(const float *p, int n_q, int p_stride, const void *const *tiles, int n_tiles,
                            int last_cells, size_t row_bytes, int head_dim, float *acc);
void llk_attn_accum_q8_ref(const float *p, int n_q, int p_stride, const void *const *tiles, int n_tiles,
                           int last_cells, size_t row_bytes, int head_dim, float *acc);
float llk_attn_softmax_ref(float *s, int n, int lo, int hi, float scale, float *max_out);

/* One ISA level's kernels; NULL entries fall back to the scalar reference. */
typedef struct {
    dot_fn dot[LLK_TYPE_SLOTS];
    dot_cols_fn dot_cols[LLK_TYPE_SLOTS]; /* NULL: matmul calls dot once per activation row */
    dot_rows_fn dot_rows2[LLK_TYPE_SLOTS]; /* NULL: a decode matmul calls dot once per weight row */
    dot_rows_fn dot_rows8[LLK_TYPE_SLOTS]; /* the same for eight rows (out[0..7]), where a level has it */
    dot_group_fn dot_group[LLK_TYPE_SLOTS]; /* the repacked types' only kernel */
    void (*quantize_q8a)(const float *x, block_q8a *y, int64_t n);
    void (*quantize_q8k)(const float *x, block_q8k *y, int64_t n);
    float (*dot_f32_f16)(const float *x, const f16_t *y, int64_t n);
    void (*f32_to_f16)(const float *x, f16_t *y, int64_t n);
    void (*scale_round_f16)(float *x, float scale, int64_t n); /* x[i] = round_f16(x[i] * scale) */
    /* The exclusive or of the 64-bit words of the n bytes at p (n a multiple of STREAM_BYTES), read as the
     * repacked kernels read their weights:
     * the level's widest loads, PREFETCH_AHEAD's distance. llk_read_bandwidth's reader, so that decode's
     * bandwidth is measured against reads of its own kind. */
    uint64_t (*stream_sum)(const void *p, int64_t n);
    /* Attention over tiles of ATTN_TILE cached cells (see attention.h for the cache's layout); each
     * result is one fixed chain of fused operations, so every level gives the reference's bits. */
    attn_scores_fn attn_scores[2];   /* [kv type: 0 F16, 1 Q8_0] */
    attn_accum_fn attn_accum[2];
    attn_softmax_fn attn_softmax;
    void (*silu_mul)(float *g, const float *u, int n); /* ops.c's llk_silu_mul, the same bits */
    void (*gelu_mul)(float *g, const float *u, int n); /* ops.c's llk_gelu_mul, the same bits */
    void (*softcap)(float *x, float cap, int n);       /* ops.c's llk_softcap, the same bits */
} kernel_table;

extern kernel_table llk_ref_kernels;
void llk_fill_repacked_ref(kernel_table *t);
void llk_fill_attention_ref(kernel_table *t);
void llk_fill_avx2(kernel_table *t);
void llk_fill_avxvnni(kernel_table *t);
void llk_fill_avx512(kernel_table *t);
void llk_fill_neon(kernel_table *t);
void llk_fill_neon_dotprod(kernel_table *t);
const kernel_table *llk_kernels(void); /* the table of the selected ISA, gaps filled from the reference */

#endif
