/* Scalar rotation kernels: the specification every SIMD kernel must match.
 *
 * Each pair (x0, x1) at angle a becomes
 *   y0 = fma(x0, cos a, -(x1 * sin a))
 *   y1 = fma(x1, cos a,  (x0 * sin a))
 * with exactly these roundings (one product rounded, one fused multiply-add),
 * which is what the AVX2 kernels compute lane by lane, so the two agree bit
 * for bit. float32, float16 and bfloat16 are widened to float32 (exactly),
 * computed in float32 and rounded once on store (round to nearest even,
 * convert.h); float64 computes in float64 with the float32 table entries
 * widened exactly. Both coordinates are loaded before either is stored, so
 * y == x is safe. The build uses -ffp-contract=off so the compiler adds no
 * fusion.
 */
#include <math.h>

#include "convert.h"
#include "kernels.h"

static inline float ld_f32(const float *p) { return *p; }
static inline void st_f32(float *p, float v) { *p = v; }
static inline float ld_f16(const uint16_t *p) { return rope_f16_to_f32(*p); }
static inline void st_f16(uint16_t *p, float v) { *p = rope_f32_to_f16(v); }
static inline float ld_bf16(const uint16_t *p) { return rope_bf16_to_f32(*p); }
static inline void st_bf16(uint16_t *p, float v) { *p = rope_f32_to_bf16(v); }
static inline double ld_f64(const double *p) { return *p; }
static inline void st_f64(double *p, double v) { *p = v; }

/* One kernel per (storage type, layout): T is the storage type, A the
 * arithmetic type, FMA its fused multiply-add; pair i sits at (I0, I1). */
#define ROPE_SCALAR_KERNEL(NAME, T, A, FMA, LD, ST, I0, I1)                          \
    void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads, \
              const float *cos, const float *sin, int64_t half, int inverse)         \
    {                                                                                \
        for (int64_t h = 0; h < n_heads; h++) {                                      \
            const T *x = (const T *)xv + h * x_sh;                                   \
            T *y = (T *)yv + h * y_sh;                                               \
            for (int64_t i = 0; i < half; i++) {                                     \
                const A c = (A)cos[i];                                               \
                const A s = (A)(inverse ? -sin[i] : sin[i]);                         \
                const A x0 = LD(x + (I0)), x1 = LD(x + (I1));                        \
                ST(y + (I0), FMA(x0, c, -(x1 * s)));                                 \
                ST(y + (I1), FMA(x1, c, x0 * s));                                    \
            }                                                                        \
        }                                                                            \
    }

ROPE_SCALAR_KERNEL(rope_rot_il_f32_scalar, float, float, fmaf, ld_f32, st_f32, 2 * i, 2 * i + 1)
ROPE_SCALAR_KERNEL(rope_rot_sh_f32_scalar, float, float, fmaf, ld_f32, st_f32, i, i + half)
ROPE_SCALAR_KERNEL(rope_rot_il_f16_scalar, uint16_t, float, fmaf, ld_f16, st_f16, 2 * i, 2 * i + 1)
ROPE_SCALAR_KERNEL(rope_rot_sh_f16_scalar, uint16_t, float, fmaf, ld_f16, st_f16, i, i + half)
ROPE_SCALAR_KERNEL(rope_rot_il_bf16_scalar, uint16_t, float, fmaf, ld_bf16, st_bf16, 2 * i, 2 * i + 1)
ROPE_SCALAR_KERNEL(rope_rot_sh_bf16_scalar, uint16_t, float, fmaf, ld_bf16, st_bf16, i, i + half)
ROPE_SCALAR_KERNEL(rope_rot_il_f64_scalar, double, double, fma, ld_f64, st_f64, 2 * i, 2 * i + 1)
ROPE_SCALAR_KERNEL(rope_rot_sh_f64_scalar, double, double, fma, ld_f64, st_f64, i, i + half)
