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
#include "../../kernels/llk.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float uniform(void) { return (float)(next() % 2000001) / 1000000.0f - 1.0f; }

static uint16_t to_half(float f) { /* normal values only, as the scales here are */
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = ((u >> 23) & 0xff) - 127 + 15, man = (u >> 13) & 0x3ff;
    return (uint16_t)(sign | (exp << 10) | man);
}

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
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)next();
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
                                LLK_Q4_K, LLK_Q5_K, LLK_Q6_K, LLK_F16, LLK_BF16, LLK_F32};
    static const char *names[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                  "F16", "BF16", "F32"};
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
     * for one token and for several at once */
    static const int packable[] = {LLK_Q4_0, LLK_Q4_1, LLK_Q5_0, LLK_Q5_1, LLK_Q8_0, LLK_Q4_K, LLK_Q5_K, LLK_Q6_K};
    const int64_t rows = 32, cols = 3 * 256;
    uint8_t *matrix = malloc(llk_row_size(LLK_F32, cols) * rows), *packed = malloc(llk_row_size(LLK_F32, cols) * rows);
    uint8_t *acts = malloc((llk_act_size(LLK_Q4_K, cols) + llk_act_size(LLK_Q4_0, cols)) * 3);
    float *simd_out = malloc(sizeof(float) * rows * 3), *ref_out = malloc(sizeof(float) * rows * 3);
    for (int isa = 1; isa <= best; isa++) {
        if (llk_isa_set(isa) != isa) continue;
        for (size_t t = 0; t < sizeof packable / sizeof packable[0]; t++) {
            int type = packable[t], rtype = llk_repack_type(type, cols, rows);
            if (rtype == type) continue; /* this level keeps the GGUF layout */
            size_t act_row = llk_act_size(type, cols);
            int same = 1;
            for (int trial = 0; trial < 5; trial++) {
                for (int64_t r = 0; r < rows; r++) fill(type, matrix + r * llk_row_size(type, cols), cols);
                llk_repack(type, matrix, cols, rows, packed);
                for (int c = 0; c < 3; c++) {
                    for (int64_t i = 0; i < cols; i++) x[i] = uniform() * (c + 1);
                    llk_quantize_act(type, x, acts + c * act_row, cols);
                }
                size_t group = llk_row_size(rtype, cols) * 16;
                for (int64_t g = 0; g < rows / 16; g++) {
                    llk_kernels()->dot_group[rtype](packed + g * group, acts, act_row, 3, cols, simd_out + 16 * g, rows);
                    llk_ref_kernels.dot_group[rtype](packed + g * group, acts, act_row, 3, cols, ref_out + 16 * g, rows);
                }
                same &= memcmp(simd_out, ref_out, sizeof(float) * rows * 3) == 0;
            }
            failures += !same;
            printf("isa %d %-5s repacked as %s %s\n", isa, llk_type_name(type), llk_type_name(rtype),
                   same ? "identical ok" : "FAILED");
        }
    }
    /* attention's helpers: scores in ggml's lanes, V accumulation, the cache's half precision */
    float q[256], y[256], y_ref[256];
    f16_t k[256], h[256], h_ref[256];
    for (int isa = 1; isa <= best; isa++) {
        if (llk_isa_set(isa) != isa) continue;
        const kernel_table *simd = llk_kernels();
        double worst = 0.0;
        int halves_differ = 0;
        for (int trial = 0; trial < 50; trial++) {
            for (int i = 0; i < 256; i++) { q[i] = uniform(); k[i] = to_half(uniform() + 2.0f); y[i] = y_ref[i] = uniform(); }
            for (int lanes = 16; lanes <= 64; lanes *= 4) {
                double a = simd->dot_f16_lanes(q, k, 256, lanes), b = llk_ref_kernels.dot_f16_lanes(q, k, 256, lanes);
                worst = fmax(worst, fabs(a - b) / (fabs(b) + 1.0));
            }
            simd->axpy_f16(0.37f, k, y, 256);
            llk_ref_kernels.axpy_f16(0.37f, k, y_ref, 256);
            for (int i = 0; i < 256; i++) worst = fmax(worst, fabs((double)y[i] - y_ref[i]) / (fabs(y_ref[i]) + 1.0));
            simd->f32_to_f16(q, h, 256);
            llk_ref_kernels.f32_to_f16(q, h_ref, 256);
            halves_differ += memcmp(h, h_ref, sizeof h) != 0;
        }
        int ok = worst < 1e-5 && !halves_differ;
        failures += !ok;
        printf("isa %d attention helpers worst relative difference %.2e, half conversions %s %s\n", isa, worst,
               halves_differ ? "differ" : "identical", ok ? "ok" : "FAILED");
    }
    printf("levels checked up to %d, %d failures\n", best, failures);
    return failures != 0 || best == 0;
}
