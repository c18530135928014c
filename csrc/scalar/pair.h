/* Internal: the rotation of one pair in scalar code, the formula every
 * rotation kernel computes (rotate.c, and the AVX2 kernels' last pairs), and
 * the scalar load and store of each storage type.
 *
 * A pair (x0, x1) with c = cos a, s = sin a becomes
 *   y0 = fma(x0, c, -(x1 * s))
 *   y1 = fma(x1, c,  (x0 * s))
 * in the arithmetic type of the storage type (fmaf for float, fma for
 * double): one product rounded, one fused multiply-add. The inverse rotation
 * is the same with s negated. Both coordinates are loaded before either is
 * stored, so y == x is safe.
 *
 * rope_ld_<sfx> / rope_st_<sfx> widen a stored element to the arithmetic
 * type exactly and round back once (convert.h); <sfx> is the suffix in
 * ROPE_STORAGE_TYPES, so a new storage type needs its two functions here and
 * its list entry in pyrope.h, and rope_pair_<sfx> follows from the list. */
#ifndef PYROPE_PAIR_H
#define PYROPE_PAIR_H

#include <math.h>
#include <stdint.h>

#include "convert.h"
#include "pyrope.h"

static inline float rope_ld_f32(const float *p) { return *p; }
static inline void rope_st_f32(float *p, float v) { *p = v; }
static inline float rope_ld_f16(const uint16_t *p) { return rope_f16_to_f32(*p); }
static inline void rope_st_f16(uint16_t *p, float v) { *p = rope_f32_to_f16(v); }
static inline float rope_ld_bf16(const uint16_t *p) { return rope_bf16_to_f32(*p); }
static inline void rope_st_bf16(uint16_t *p, float v) { *p = rope_f32_to_bf16(v); }
static inline double rope_ld_f64(const double *p) { return *p; }
static inline void rope_st_f64(double *p, double v) { *p = v; }

/* The fused multiply-add of the arithmetic type. */
#define ROPE_FMA_(a, b, c) _Generic((a), float: fmaf, double: fma)((a), (b), (c))

/* rope_pair_<sfx>(x, y, i0, i1, c, s): the pair at elements i0 and i1 of x,
 * rotated by (c, s), stored at the same elements of y. Always inlined: in an
 * AVX2 kernel the fma then compiles to the FMA instruction (a copy of its
 * own, compiled for the baseline target, would call fmaf/fma in libm). */
#define ROPE_PAIR_(code, sfx, T, A, name)                                      \
    static inline __attribute__((always_inline)) void rope_pair_##sfx(         \
        const T *x, T *y, int64_t i0, int64_t i1, A c, A s)                    \
    {                                                                          \
        const A x0 = rope_ld_##sfx(x + i0), x1 = rope_ld_##sfx(x + i1);        \
        rope_st_##sfx(y + i0, ROPE_FMA_(x0, c, -(x1 * s)));                    \
        rope_st_##sfx(y + i1, ROPE_FMA_(x1, c, x0 * s));                       \
    }
ROPE_STORAGE_TYPES(ROPE_PAIR_)
#undef ROPE_PAIR_
#undef ROPE_FMA_

#endif
