/* Instantiates quants_neon.inc for each ARM level (see dispatch.c). */
#include "common.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>

#define SUFFIX neon
#define TARGET_ATTR
#define USE_DOTPROD 0
#include "quants_neon.inc"
#undef SUFFIX
#undef TARGET_ATTR
#undef USE_DOTPROD

#define SUFFIX neon_dotprod
#define TARGET_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))
#define USE_DOTPROD 1
#include "quants_neon.inc"
#undef SUFFIX
#undef TARGET_ATTR
#undef USE_DOTPROD

#else
void llk_fill_neon(kernel_table *t) { (void)t; }
void llk_fill_neon_dotprod(kernel_table *t) { (void)t; }
#endif
