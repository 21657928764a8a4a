/* Half-precision conversion (a table for the way in, round to nearest even on the way out) and the
 * lane orders of float sums (see floats.h). */
#include "floats.h"

#include <math.h>

float llk_f16_table[65536];

static float half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

__attribute__((constructor(101))) static void init_f16_table(void) {  /* first: other tables use it */
    for (uint32_t i = 0; i < 65536; i++) llk_f16_table[i] = half_bits_to_float((uint16_t)i);
}

f16_t llk_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (f16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (f16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (f16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (f16_t)(sign | half);
    }
    uint32_t h = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry into the exponent: still right */
    return (f16_t)(sign | h);
}

/* The sum of 16 floats in _mm512_reduce_add_ps's order: halves, quarters, then pairs. */
float llk_reduce16(const float *v) {
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = v[i + 8] + v[i];
    for (int i = 0; i < 4; i++) b[i] = a[i + 4] + a[i];
    return (b[0] + b[2]) + (b[1] + b[3]);
}
