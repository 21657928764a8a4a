/* Run-time choice of the kernel table by CPU features (one build runs anywhere). */
#include <math.h>

#include "common.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

#define N_LEVELS 6
static kernel_table tables[N_LEVELS];
static int isa_best = -1, isa_current = -1;

static int available[N_LEVELS] = {1};  /* levels this CPU can run (not every lower level: Ice Lake has
                                         AVX-512 VNNI without AVX-VNNI) */

static int detect(void) {
    int best = LLK_ISA_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        available[best = LLK_ISA_AVX2] = 1;
        if (__builtin_cpu_supports("avxvnni")) available[best = LLK_ISA_AVXVNNI] = 1;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            available[best = LLK_ISA_AVX512] = 1;
    }
#elif defined(__aarch64__)
    available[best = LLK_ISA_NEON] = 1; /* Advanced SIMD is part of every AArch64 CPU */
#if defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) available[best = LLK_ISA_NEON_DOTPROD] = 1;
#elif defined(__APPLE__)
    available[best = LLK_ISA_NEON_DOTPROD] = 1; /* every Apple silicon CPU has the dot product instructions */
#endif
#endif
    return best;
}

/* Each level's table starts as a copy of the reference, so a kernel a level lacks falls back. */
__attribute__((constructor(200))) static void init_tables(void) {
    llk_fill_repacked_ref(&llk_ref_kernels);
    llk_fill_attention_ref(&llk_ref_kernels);
    for (int i = 0; i < N_LEVELS; i++) tables[i] = llk_ref_kernels;
    llk_fill_avx2(&tables[LLK_ISA_AVX2]);
    llk_fill_avxvnni(&tables[LLK_ISA_AVXVNNI]);
    llk_fill_avx512(&tables[LLK_ISA_AVX512]);
    llk_fill_neon(&tables[LLK_ISA_NEON]);
    llk_fill_neon_dotprod(&tables[LLK_ISA_NEON_DOTPROD]);
    isa_best = isa_current = detect();
}

const kernel_table *llk_kernels(void) { return &tables[isa_current]; }

int llk_isa_best(void) { return isa_best; }
int llk_isa_get(void) { return isa_current; }

int llk_isa_set(int isa) {
    if (isa >= LLK_ISA_SCALAR && isa < N_LEVELS && available[isa]) isa_current = isa;
    return isa_current;
}

int llk_quantize_act(int wtype, const float *x, void *dst, int64_t n) {
    int bs = llk_block_size(wtype);
    if (!bs || n < 0 || n % bs) return -1;
    const kernel_table *k = llk_kernels();
    switch (llk_act_kind(wtype)) {
    case ACT_Q8K: k->quantize_q8k(x, dst, n); break;
    case ACT_Q8A: k->quantize_q8a(x, dst, n); break;
    default: memcpy(dst, x, (size_t)n * sizeof(float));
    }
    return 0;
}

float llk_vec_dot(int wtype, const void *w, const void *act, int64_t n) {
    int bs = llk_block_size(wtype);
    if (!llk_type_supported(wtype) || n % bs) return NAN;
    return llk_kernels()->dot[wtype](w, act, n);
}

int llk_vec_dot_rows(int wtype, int count, const void *w, size_t w_row, const void *act, int64_t n, float *out) {
    int bs = llk_block_size(wtype);
    if (!llk_type_supported(wtype) || n % bs || (count != 2 && count != 8)) return -1;
    const kernel_table *k = llk_kernels();
    dot_rows_fn rows = count == 8 ? k->dot_rows8[wtype] : k->dot_rows2[wtype];
    if (rows) {
        rows(w, w_row, act, n, out);
    } else {
        for (int r = 0; r < count; r++) out[r] = k->dot[wtype]((const uint8_t *)w + r * w_row, act, n);
    }
    return 0;
}

int llk_vec_dot_cols(int wtype, const void *w, const void *act, size_t act_row, int n_cols, int64_t n, float *out) {
    int bs = llk_block_size(wtype);
    if (!llk_type_supported(wtype) || n % bs || n_cols < 1 || n_cols > DOT_MAX_COLS) return -1;
    const kernel_table *k = llk_kernels();
    if (k->dot_cols[wtype]) {
        k->dot_cols[wtype](w, act, act_row, n_cols, n, out);
    } else {
        for (int c = 0; c < n_cols; c++) out[c] = k->dot[wtype](w, (const uint8_t *)act + c * act_row, n);
    }
    return 0;
}
