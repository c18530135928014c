/* Scalar rotation kernels: the specification every SIMD kernel must match.
 *
 * Each pair (x0, x1) at angle a becomes
 *   y0 = fma(x0, cos a, -(x1 * sin a))
 *   y1 = fma(x1, cos a,  (x0 * sin a))
 * with exactly these roundings (one product rounded, one fused multiply-add:
 * rope_pair_<sfx>, pair.h), which is what the AVX2 kernels compute lane by
 * lane, so the two agree bit for bit. float32, float16 and bfloat16 are
 * widened to float32 (exactly), computed in float32 and rounded once on
 * store (round to nearest even, convert.h), with float32 table rows; float64
 * computes in float64 with float64 table rows. Both coordinates are loaded
 * before either is stored, so y == x is safe. The build uses
 * -ffp-contract=off so the compiler adds no fusion.
 */
#include "core/kernels.h"
#include "scalar.h"
#include "pair.h"

/* One kernel per (storage type, layout): T is the storage type, A the
 * arithmetic type, also the type of the
 * cos/sin rows; pair i sits at (I0, I1). */
#define ROPE_SCALAR_KERNEL_(NAME, sfx, T, A, I0, I1)                                 \
    void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads, \
              const void *cosv, const void *sinv, int64_t half, int inverse)         \
    {                                                                                \
        const A *cos = (const A *)cosv, *sin = (const A *)sinv;                      \
        for (int64_t h = 0; h < n_heads; h++) {                                      \
            const T *x = (const T *)xv + h * x_sh;                                   \
            T *y = (T *)yv + h * y_sh;                                               \
            for (int64_t i = 0; i < half; i++) {                                     \
                const A c = cos[i];                                                  \
                const A s = inverse ? -sin[i] : sin[i];                              \
                rope_pair_##sfx(x, y, I0, I1, c, s);                                 \
            }                                                                        \
        }                                                                            \
    }

/* Both layouts of every storage type in the list (pyrope.h). */
#define ROPE_SCALAR_KERNELS_(code, sfx, T, A, name)                                  \
    ROPE_SCALAR_KERNEL_(rope_rot_il_##sfx##_scalar, sfx, T, A, 2 * i, 2 * i + 1)     \
    ROPE_SCALAR_KERNEL_(rope_rot_sh_##sfx##_scalar, sfx, T, A, i, i + half)
ROPE_STORAGE_TYPES(ROPE_SCALAR_KERNELS_)
