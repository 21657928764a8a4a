/* Instantiates quants_x86.inc for each x86 ISA level (see dispatch.c). */
#include "common.h"
#include "ops.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define SUFFIX avx2
#define TARGET "avx2,fma,f16c"
#define USE_VNNI 0
#include "quants_x86.inc"
#undef SUFFIX
#undef TARGET
#undef USE_VNNI

#define SUFFIX avxvnni
#define TARGET "avx2,fma,f16c,avxvnni"
#define USE_VNNI 1
#include "quants_x86.inc"
#undef SUFFIX
#undef TARGET
#undef USE_VNNI

#define SUFFIX avx512
#define TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define USE_VNNI 2
#include "quants_x86.inc"
#undef SUFFIX
#undef TARGET
#undef USE_VNNI

#else
void llk_fill_avx2(kernel_table *t) { (void)t; }
void llk_fill_avxvnni(kernel_table *t) { (void)t; }
void llk_fill_avx512(kernel_table *t) { (void)t; }
#endif
