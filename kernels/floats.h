/* Half-precision conversion and the fixed orders in which lanes of float sums meet: the numeric floor
 * that the reference kernels, the SIMD kernels and the forward pass's operations all stand on. */
#ifndef LLK_FLOATS_H
#define LLK_FLOATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t f16_t;

extern float llk_f16_table[65536];

static inline float f16_to_f32(f16_t h) { return llk_f16_table[h]; }

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

f16_t llk_f32_to_f16(float f);
/* x as ggml stores it in a half-precision field: the activation scales of Q8_0/Q8_1. */
static inline float round_f16(float x) { return f16_to_f32(llk_f32_to_f16(x)); }

/* The sum of 16 floats in _mm512_reduce_add_ps's order: halves, quarters, then pairs. */
float llk_reduce16(const float *v);

/* Functions using fmaf are built twice on x86, with and without FMA instructions (chosen at load):
 * fmaf without them is a library call per operation. AArch64 always has them. */
#if defined(__x86_64__)
#define WITH_FMA __attribute__((target_clones("fma", "default")))
#else
#define WITH_FMA
#endif

#endif
