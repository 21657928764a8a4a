/* Every SIMD level of the kernels library against its scalar reference, from C: built for a CPU the
 * Python suite cannot run on (tests/test_kernels_c.py runs it for AArch64 under qemu-user).
 * Prints one line per level and format; exits non-zero on any disagreement. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/common.h"
#include "../../kernels/deltanet.h"
#include "../../kernels/llk.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float uniform(void) { return (float)(next() % 2000001) / 1000000.0f - 1.0f; }

static uint16_t to_half(float f) { /* normal values only, as the scales here are */
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = ((u >> 23) & 0xff) - 127 + 15, man = (u >> 13) & 0x3ff;
    return (uint16_t)(sign | (exp << 10) | man);
}

/* Where set, fill's codes are every format's largest (all ones, MXFP4's 0x7, Q8_0's -128; scale bytes too): the repacked
 * kernels' narrow integer sums at their bounds. */
static int all_ones;

/* Random blocks with sane scale fields: offsets of the half-precision scales in each block. */
static void fill(int type, uint8_t *row, int64_t n) {
    static const struct { int type; size_t size; int n_scales; size_t at[2]; } blocks[] = {
        {LLK_Q4_0, sizeof(block_q4_0), 1, {offsetof(block_q4_0, d)}},
        {LLK_Q4_1, sizeof(block_q4_1), 2, {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}},
        {LLK_Q5_0, sizeof(block_q5_0), 1, {offsetof(block_q5_0, d)}},
        {LLK_Q5_1, sizeof(block_q5_1), 2, {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}},
        {LLK_Q8_0, sizeof(block_q8_0), 1, {offsetof(block_q8_0, d)}},
        {LLK_Q2_K, sizeof(block_q2_k), 2, {offsetof(block_q2_k, d), offsetof(block_q2_k, dmin)}},
        {LLK_Q3_K, sizeof(block_q3_k), 1, {offsetof(block_q3_k, d)}},
        {LLK_Q4_K, sizeof(block_q4_k), 2, {offsetof(block_q4_k, d), offsetof(block_q4_k, dmin)}},
        {LLK_Q5_K, sizeof(block_q5_k), 2, {offsetof(block_q5_k, d), offsetof(block_q5_k, dmin)}},
        {LLK_Q6_K, sizeof(block_q6_k), 1, {offsetof(block_q6_k, d)}},
    };
    size_t bytes = llk_row_size(type, n);
    /* MXFP4's largest code is 6.0 (0x7), not 0xF (-6.0); Q8_0's largest in size is -128 (0x80), the bound of plain
     * AVX2's |code| times the activation with the code's sign */
    const uint8_t largest = type == LLK_MXFP4 ? 0x77 : type == LLK_Q8_0 ? 0x80 : 0xFF;
    for (size_t i = 0; i < bytes; i++) row[i] = all_ones ? largest : (uint8_t)next();
    if (type == LLK_MXFP4) { /* power-of-two scale bytes: 2^-9 .. 2^-4 */
        for (size_t off = 0; off < bytes; off += sizeof(block_mxfp4)) row[off + offsetof(block_mxfp4, e)] = (uint8_t)(119 + next() % 6);
        return;
    }
    if (type == LLK_F32 || type == LLK_F16 || type == LLK_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = uniform();
            if (type == LLK_F32) memcpy(row + 4 * i, &v, 4);
            else if (type == LLK_F16) { uint16_t h = to_half(v == 0 ? 0.5f : v); memcpy(row + 2 * i, &h, 2); }
            else { uint32_t u; memcpy(&u, &v, 4); uint16_t b = (uint16_t)(u >> 16); memcpy(row + 2 * i, &b, 2); }
        }
        return;
    }
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        if (blocks[k].type != type) continue;
        for (size_t off = 0; off < bytes; off += blocks[k].size)
            for (int s = 0; s < blocks[k].n_scales; s++) {
                uint16_t h = to_half((0.001f + 0.05f * fabsf(uniform())) * (next() & 1 ? 1.0f : -1.0f));
                memcpy(row + off + blocks[k].at[s], &h, 2);
            }
    }
}

/* not vectorised: GCC 12 for AArch64 crashes vectorising its error reductions */
__attribute__((optimize("no-tree-vectorize"))) int main(void) {
    static const int types[] = {LLK_Q4_0, LLK_Q4_1, LLK_Q5_0, LLK_Q5_1, LLK_Q8_0, LLK_Q2_K, LLK_Q3_K,
                                LLK_Q4_K, LLK_Q5_K, LLK_Q6_K, LLK_MXFP4, LLK_F16, LLK_BF16, LLK_F32};
    static const char *names[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                  "MXFP4", "F16", "BF16", "F32"};
    const int64_t n = 9 * 256; /* odd block counts for every format; a multiple of 8 and 4 for the floats */
    uint8_t *row = malloc(llk_row_size(LLK_F32, n)), *act = malloc(llk_act_size(LLK_F32, n) + llk_act_size(LLK_Q4_K, n));
    float *x = malloc(sizeof(float) * (size_t)n);
    int failures = 0, best = llk_isa_best();
    for (int isa = 1; isa <= best; isa++) {
        if (llk_isa_set(isa) != isa) continue;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            double worst = 0.0;
            for (int trial = 0; trial < 20; trial++) {
                fill(types[t], row, n);
                for (int64_t i = 0; i < n; i++) x[i] = uniform();
                llk_quantize_act(types[t], x, act, n);
                float simd = llk_vec_dot(types[t], row, act, n), ref = llk_vec_dot_ref(types[t], row, act, n);
                double err = fabs((double)simd - ref) / (fabs(ref) + 1.0);
                if (err > worst) worst = err;
            }
            /* every level has its own kernel for every format: a gap would compare the reference with itself */
            int own = llk_kernels()->dot[types[t]] != llk_ref_kernels.dot[types[t]];
            int ok = worst < 1e-4 && own;
            failures += !ok;
            printf("isa %d %-5s worst relative difference %.2e %s%s\n", isa, names[t], worst, ok ? "ok" : "FAILED",
                   own ? "" : " (no kernel of its own: the scalar reference)");
        }
    }
    /* repacked layouts: where a level has a group kernel of its own, its results are the reference's bit for bit,
     * for one token and for several at once (a whole run of GROUP_MAX_TOK, and one short of it), also with
     * every code at its largest against activations all at +-127 */
    static const int packable[] = {LLK_Q4_0, LLK_Q4_1, LLK_Q5_0, LLK_Q5_1, LLK_Q8_0, LLK_Q2_K, LLK_Q3_K, LLK_Q4_K, LLK_Q5_K, LLK_Q6_K,
                                   LLK_MXFP4};
    static const int token_counts[] = {1, GROUP_MAX_TOK - 1, GROUP_MAX_TOK};
    const int64_t rows = 32, cols = 3 * 256;
    uint8_t *matrix = malloc(llk_row_size(LLK_F32, cols) * rows), *packed = malloc(llk_row_size(LLK_F32, cols) * rows);
    uint8_t *acts = malloc((llk_act_size(LLK_Q4_K, cols) + llk_act_size(LLK_Q4_0, cols)) * GROUP_MAX_TOK);
    float *simd_out = malloc(sizeof(float) * rows * GROUP_MAX_TOK), *ref_out = malloc(sizeof(float) * rows * GROUP_MAX_TOK);
    for (int isa = 1; isa <= best; isa++) {
        if (llk_isa_set(isa) != isa) continue;
        for (size_t t = 0; t < sizeof packable / sizeof packable[0]; t++) {
            int type = packable[t], rtype = llk_repack_type(type, cols, rows);
            if (rtype == type) continue; /* this level keeps the GGUF layout */
            size_t act_row = llk_act_size(type, cols);
            int same = 1;
            for (int trial = 0; trial < 7; trial++) {
                all_ones = trial >= 5;
                for (int64_t r = 0; r < rows; r++) fill(type, matrix + r * llk_row_size(type, cols), cols);
                all_ones = 0;
                llk_repack(type, matrix, cols, rows, packed);
                for (int c = 0; c < GROUP_MAX_TOK; c++) {
                    for (int64_t i = 0; i < cols; i++) x[i] = trial >= 5 ? (trial == 5 ? 1.0f : -1.0f) : uniform() * (c + 1);
                    llk_quantize_act(type, x, acts + c * act_row, cols);
                }
                size_t group = llk_row_size(rtype, cols) * 16;
                for (size_t k = 0; k < sizeof token_counts / sizeof *token_counts; k++) {
                    const int n_tok = token_counts[k];
                    for (int64_t g = 0; g < rows / 16; g++) {
                        llk_kernels()->dot_group[rtype](packed + g * group, acts, act_row, n_tok, cols, simd_out + 16 * g, rows);
                        llk_ref_kernels.dot_group[rtype](packed + g * group, acts, act_row, n_tok, cols, ref_out + 16 * g, rows);
                    }
                    same &= memcmp(simd_out, ref_out, sizeof(float) * rows * n_tok) == 0;
                }
            }
            failures += !same;
            printf("isa %d %-5s repacked as %s %s\n", isa, llk_type_name(type), llk_type_name(rtype),
                   same ? "identical ok" : "FAILED");
        }
    }
    /* attention's tile kernels (three tiles of 16 cells, 64 and 96 dimensions, 7 queries) and the
     * cache's half precision: the same bits as the reference */
    enum { NQ = 7, HD = 96, TILES = 3, STRIDE = 32 };
    static float q[NQ * HD], s[NQ * 64], s_ref[NQ * 64], acc[NQ * HD], acc_ref[NQ * HD], wide[256], wide_ref[256];
    static f16_t k16[HD * STRIDE * TILES], scales[HD / 32 * STRIDE * TILES], v16[48 * HD], h[256], h_ref[256];
    static int8_t k8[HD * STRIDE * TILES];
    static block_q8_0 v8[48 * HD / 32];
    for (int isa = 1; isa <= best; isa++) {
        if (llk_isa_set(isa) != isa) continue;
        const kernel_table *simd = llk_kernels();
        int differ = 0;
        for (int trial = 0; trial < 20; trial++) {
            for (int i = 0; i < NQ * HD; i++) q[i] = uniform();
            for (int i = 0; i < HD * STRIDE * TILES; i++) { k16[i] = to_half(uniform() + 2.0f); k8[i] = (int8_t)next(); }
            for (int i = 0; i < HD / 32 * STRIDE * TILES; i++) scales[i] = to_half(0.01f + 0.001f * (float)(next() % 100));
            for (int i = 0; i < 48 * HD; i++) v16[i] = to_half(uniform() + 2.0f);
            for (int i = 0; i < 48 * HD / 32; i++) {
                v8[i].d = scales[i % (HD / 32 * STRIDE)];
                for (int j = 0; j < 32; j++) v8[i].qs[j] = (int8_t)next();
            }
            for (int hd = 64; hd <= HD; hd += 32) {
                for (int q8 = 0; q8 < 2; q8++) {
                    const void *tiles[2 * TILES], *rows[2 * TILES];
                    for (int t = 0; t < TILES; t++) { /* tiles of blocks of 32 cells: the second half of one, then others */
                        const int cell = t ? 0 : 16, block = t * HD * STRIDE;
                        tiles[2 * t] = q8 ? (const void *)(k8 + block + cell) : (const void *)(k16 + block + cell);
                        tiles[2 * t + 1] = scales + t * HD / 32 * STRIDE + cell;
                        rows[2 * t] = q8 ? (const void *)(v8 + t * 16 * HD / 32) : (const void *)(v16 + t * 16 * HD);
                    }
                    simd->attn_scores[q8](q, NQ, hd, tiles, TILES, STRIDE, s, 64);
                    llk_ref_kernels.attn_scores[q8](q, NQ, hd, tiles, TILES, STRIDE, s_ref, 64);
                    differ += memcmp(s, s_ref, sizeof s) != 0;
                    for (int i = 0; i < NQ; i++) { /* the softmax over a range cut inside the first and last tiles */
                        float m, m_ref, sum = simd->attn_softmax(s + i * 64, 48, 3 + i, 40 - i, 0.125f, &m);
                        float sum_ref = llk_ref_kernels.attn_softmax(s_ref + i * 64, 48, 3 + i, 40 - i, 0.125f, &m_ref);
                        differ += sum != sum_ref || m != m_ref;
                    }
                    differ += memcmp(s, s_ref, sizeof s) != 0;
                    for (int i = 0; i < NQ * HD; i++) acc[i] = acc_ref[i] = uniform();
                    size_t row = q8 ? HD / 32 * sizeof(block_q8_0) : HD * sizeof(f16_t);
                    simd->attn_accum[q8](s, NQ, 64, rows, TILES, 9, row, hd, acc);
                    llk_ref_kernels.attn_accum[q8](s_ref, NQ, 64, rows, TILES, 9, row, hd, acc_ref);
                    differ += memcmp(acc, acc_ref, sizeof acc) != 0;
                }
            }
            for (int i = 0; i < 256; i++) wide[i] = uniform() * 1000.0f;
            simd->f32_to_f16(wide, h, 256);
            llk_ref_kernels.f32_to_f16(wide, h_ref, 256);
            differ += memcmp(h, h_ref, sizeof h) != 0;
            static uint64_t words[4 * STREAM_BYTES / 8]; /* the bandwidth reader reads every word */
            for (size_t i = 0; i < sizeof words / 8; i++) words[i] = (uint64_t)next() << 32 | (uint64_t)next();
            const uint64_t all = simd->stream_sum(words, sizeof words);
            differ += all != llk_ref_kernels.stream_sum(words, sizeof words);
            words[3 * STREAM_BYTES / 8 + 5] ^= 1;
            differ += simd->stream_sum(words, sizeof words) != (all ^ 1);
            for (int scaled = 0; scaled < 2; scaled++) { /* to half-precision subnormals, and beyond its range */
                for (int i = 0; i < 256; i++) wide_ref[i] = wide[i] = uniform() * 1000.0f;
                simd->scale_round_f16(wide, scaled ? 100.0f : 1e-5f, 253); /* and a tail after the vectors */
                llk_ref_kernels.scale_round_f16(wide_ref, scaled ? 100.0f : 1e-5f, 253);
                differ += memcmp(wide, wide_ref, sizeof wide) != 0;
            }
            /* the SiLU gate over inputs where exp(-x) is normal, tiny and beyond float (its scalar lanes) */
            static float g[259], g_ref[259], up[259];
            for (int i = 0; i < 259; i++) {
                g[i] = g_ref[i] = uniform() * (i % 3 == 0 ? 150.0f : 10.0f);
                up[i] = uniform();
            }
            simd->silu_mul(g, up, 259);
            llk_ref_kernels.silu_mul(g_ref, up, 259);
            differ += memcmp(g, g_ref, sizeof g) != 0;
            for (int i = 0; i < 259; i++) g[i] = g_ref[i] = uniform() * (i % 3 == 0 ? 15.0f : i % 3 == 1 ? 1e-4f : 3.0f);
            simd->gelu_mul(g, up, 259); /* the GELU gate: both sides of +-10, and half-precision subnormals */
            llk_ref_kernels.gelu_mul(g_ref, up, 259);
            differ += memcmp(g, g_ref, sizeof g) != 0;
            static float logit[259];
            for (int i = 0; i < 259; i++)
                logit[i] = g[i] = g_ref[i] = uniform() * (i % 3 == 0 ? 1000.0f : i % 3 == 1 ? 1e-3f : 40.0f);
            simd->softcap(g, 30.0f, 259); /* final-logit soft-capping: clamped (beyond +-270), tiny, and a tail */
            llk_ref_kernels.softcap(g_ref, 30.0f, 259);
            differ += memcmp(g, g_ref, sizeof g) != 0;
            for (int i = 0; i < 259; i++) differ += fabsf(g_ref[i] - 30.0f * tanhf(logit[i] / 30.0f)) > 30.0f * 4e-7f;
        }
        failures += differ != 0;
        printf("isa %d attention tiles, half conversions, SiLU, GELU and soft-capping %s\n", isa, differ ? "FAILED" : "identical ok");
    }
    /* the Gated DeltaNet's recurrence over 20 tokens (two tiles of the rule's), a snapshot after the 18th: heads of
     * 80 (two runs of 32 lanes and a tail of 16), of 64 (runs only, rows in pairs) and of 33 (an odd row left) */
    static const int head_sizes[] = {80, 64, 33};
    for (int hs = 0; hs < 3; hs++) {
        enum { T = 20, MAX_S = 80 };
        const int S = head_sizes[hs];
        llk_model m = {.ssm_d_conv = 4, .ssm_d_state = S, .ssm_n_group = 2, .ssm_dt_rank = 4};
        const deltanet_shape sh = deltanet_shape_of(&m);
        const size_t state_floats = sh.conv_floats + sh.ssm_floats;
        static float conv_w[4 * 8 * MAX_S], dt[4], a[4], norm[MAX_S], mix0[T * 8 * MAX_S], z0[T * 4 * MAX_S];
        static float beta0[T * 4], g0[T * 4], mix[T * 8 * MAX_S], z[T * 4 * MAX_S], beta[T * 4], g[T * 4];
        static float out[2][T * 4 * MAX_S], state[2][3 * 8 * MAX_S + 4 * MAX_S * MAX_S];
        static float snapped[2][3 * 8 * MAX_S + 4 * MAX_S * MAX_S];
        for (size_t i = 0; i < sizeof conv_w / 4; i++) conv_w[i] = uniform();
        for (int i = 0; i < 4; i++) dt[i] = uniform(), a[i] = -1.0f - uniform() * 0.5f;
        for (int i = 0; i < MAX_S; i++) norm[i] = 1.0f + uniform() * 0.2f;
        for (int i = 0; i < T * 8 * MAX_S; i++) mix0[i] = uniform();
        for (int i = 0; i < T * 4 * MAX_S; i++) z0[i] = uniform() * 3.0f;
        for (int i = 0; i < T * 4; i++) beta0[i] = uniform() * 2.0f, g0[i] = uniform() * 2.0f;
        llk_layer L = {0};
        L.ssm_conv.data = conv_w, L.ssm_dt.data = dt, L.ssm_a.data = a, L.ssm_norm.data = norm;
        llk_pool *pool = llk_pool_new(2);
        int32_t pos[T];
        for (int t = 0; t < T; t++) pos[t] = t;
        int differ = 0;
        for (int isa = 0; isa <= best; isa++) {
            if (isa != 0 && llk_isa_set(isa) != isa) continue;
            if (isa == 0) llk_isa_set(0);
            float *r = state[isa != 0], *o = out[isa != 0];
            float *conv[T], *ssm[T], *snap[T];
            for (int t = 0; t < T; t++)
                conv[t] = r, ssm[t] = r + sh.conv_floats, snap[t] = t == 17 ? snapped[isa != 0] : NULL;
            memcpy(mix, mix0, sizeof mix), memcpy(z, z0, sizeof z);
            memcpy(beta, beta0, sizeof beta), memcpy(g, g0, sizeof g);
            const deltanet_batch batch = {&sh, &L, T, pos, conv, ssm, snap, mix, z, beta, g, o, 1e-6f};
            deltanet_run(pool, &batch);
            if (isa)
                differ += memcmp(out[0], out[1], sizeof(float) * T * sh.inner) != 0 ||
                          memcmp(state[0], state[1], sizeof(float) * state_floats) != 0 ||
                          memcmp(snapped[0], snapped[1], sizeof(float) * state_floats) != 0;
        }
        llk_pool_free(pool);
        failures += differ != 0;
        printf("Gated DeltaNet, heads of %d, up to isa %d %s\n", S, best, differ ? "FAILED" : "identical ok");
    }
    printf("levels checked up to %d, %d failures\n", best, failures);
    return failures != 0 || best == 0;
}
