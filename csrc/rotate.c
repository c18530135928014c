/* Scalar rotation kernels: the specification every SIMD kernel must match.
 *
 * Each pair (x0, x1) at angle a becomes
 *   y0 = fma(x0, cos a, -(x1 * sin a))
 *   y1 = fma(x1, cos a,  (x0 * sin a))
 * with exactly these roundings (one product rounded, one fused multiply-add),
 * which is what the AVX2 kernels compute lane by lane, so the two agree bit
 * for bit. Both coordinates are loaded before either is stored, so y == x is
 * safe. The build uses -ffp-contract=off so the compiler adds no fusion.
 */
#include <math.h>

#include "kernels.h"

void rope_row_interleaved_f32_scalar(const float *x, float *y, const float *cos,
                                     const float *sin, int64_t half, int inverse)
{
    for (int64_t i = 0; i < half; i++) {
        const float c = cos[i];
        const float s = inverse ? -sin[i] : sin[i];
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        y[2 * i] = fmaf(x0, c, -(x1 * s));
        y[2 * i + 1] = fmaf(x1, c, x0 * s);
    }
}

void rope_row_split_half_f32_scalar(const float *x, float *y, const float *cos,
                                    const float *sin, int64_t half, int inverse)
{
    for (int64_t i = 0; i < half; i++) {
        const float c = cos[i];
        const float s = inverse ? -sin[i] : sin[i];
        const float x0 = x[i], x1 = x[i + half];
        y[i] = fmaf(x0, c, -(x1 * s));
        y[i + half] = fmaf(x1, c, x0 * s);
    }
}
