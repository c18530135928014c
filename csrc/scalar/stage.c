/* Scalar stage kernels: the specification of the norm prologue and the
 * conversions of rope_rotate_staged (kernels.h), which every SIMD kernel
 * must match bit for bit.
 *
 * The sum of squares runs over 8 double lanes, element i into lane i mod 8
 * in increasing i: SIMD kernels hold the lanes in vector registers (two
 * of 4 doubles, one of 8, four of 2) and get the same sums. Every element
 * is widened exactly (convert.h) before it is squared; for float32 data the
 * square is exact in double, for float64 it is rounded once, then added
 * (the build uses -ffp-contract=off: no fusion). The normalised value is
 * x * (inv * w) in double, rounded once to the arithmetic type.
 */
#include "core/kernels.h"
#include "scalar.h"
#include "pair.h"

#define ROPE_SCALAR_STAGE_(code, sfx, T, A, name)                                       \
    void rope_sumsq_##sfx##_scalar(const void *xv, int64_t n, double acc[8])            \
    {                                                                                   \
        const T *x = (const T *)xv;                                                     \
        for (int64_t i = 0; i < n; i++) {                                               \
            const double v = (double)rope_ld_##sfx(x + i);                              \
            acc[i & 7] = acc[i & 7] + v * v;                                            \
        }                                                                               \
    }                                                                                   \
    void rope_normalise_##sfx##_scalar(const void *xv, int64_t n, double inv, const double *w, \
                                       void *outv)                                      \
    {                                                                                   \
        const T *x = (const T *)xv;                                                     \
        A *out = (A *)outv;                                                             \
        for (int64_t i = 0; i < n; i++)                                                 \
            out[i] = (A)((double)rope_ld_##sfx(x + i) * (w ? inv * w[i] : inv));        \
    }                                                                                   \
    void rope_widen_##sfx##_scalar(const void *xv, int64_t n, void *outv)               \
    {                                                                                   \
        const T *x = (const T *)xv;                                                     \
        A *out = (A *)outv;                                                             \
        for (int64_t i = 0; i < n; i++)                                                 \
            out[i] = rope_ld_##sfx(x + i);                                              \
    }                                                                                   \
    void rope_narrow_float_##sfx##_scalar(const void *inv_, int64_t n, void *outv)      \
    {                                                                                   \
        const float *in = (const float *)inv_;                                          \
        T *out = (T *)outv;                                                             \
        for (int64_t i = 0; i < n; i++)                                                 \
            rope_st_##sfx(out + i, (A)in[i]);                                           \
    }
ROPE_STORAGE_TYPES(ROPE_SCALAR_STAGE_)
#undef ROPE_SCALAR_STAGE_

/* The row of the interleaved norm_rot (kernels.h): every entry twice. */
void rope_duplicate_row_scalar(const float *cos, const float *sin, int64_t half, float *dup_cos, float *dup_sin)
{
    for (int64_t i = 0; i < half; i++) {
        dup_cos[2 * i] = dup_cos[2 * i + 1] = cos[i];
        dup_sin[2 * i] = dup_sin[2 * i + 1] = sin[i];
    }
}

/* double to float32 (rounded once, to nearest even) and to float64 (a copy). */
void rope_narrow_double_f32_scalar(const void *inv_, int64_t n, void *outv)
{
    const double *in = (const double *)inv_;
    float *out = (float *)outv;
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)in[i];
}

void rope_narrow_double_f64_scalar(const void *inv_, int64_t n, void *outv)
{
    const double *in = (const double *)inv_;
    double *out = (double *)outv;
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i];
}
