/* NEON stage kernels of rope_rotate_staged (kernels.h; scalar/stage.c is
 * their specification), bit-identical to the scalar ones, for the "neon"
 * entry and, narrowing float32 to bfloat16 by BFCVTN, "neonbf16":
 *   sumsq      the 8 double lanes in four vectors of 2 (lanes 0-1, 2-3,
 *              4-5, 6-7), element i in lane i mod 8 in increasing i; each
 *              element widened exactly (FCVTL; bfloat16 by a shift), squared
 *              and added as two roundings (no FMA: the build has
 *              -ffp-contract=off); the last n mod 8 elements update only
 *              their lanes (BSL), so the other lanes keep their bits;
 *   normalise  x * (inv * w) in double, 8 elements per step, rounded once
 *              to the arithmetic type (FCVTN rounds as a C cast does);
 *   widen      float16 by FCVTL, bfloat16 by a shift (exact), float32 and
 *              float64 a copy;
 *   narrow     float32 to float16 by FCVTN (the rounding of convert.h), to
 *              bfloat16 by the integer rounding of convert.h ("neon") or
 *              BFCVTN with a fix-up ("neonbf16", below), to float64 by FCVTL
 *              (exact); double to float32 by FCVTN; float32 to float32 and
 *              double to float64 a copy.
 * Under the default FPCR (rotate_neon.h): round to nearest even, no flush
 * to zero, no default NaN. Where both operands of an add or a multiply are
 * quiet NaNs, AArch64 gives the first one's (a signalling one wins either
 * way): the operands come in the order the scalar kernels compile to here
 * (the lane's sum before the square, inv before w, x before inv * w but
 * inv * w before x for float64), in asm so that the compiler cannot swap
 * them. The last elements (fewer than one step) go through a stack copy of
 * 8, padded with zeros, so no access reaches past the arrays. */
#include <string.h>

#include "rotate_neon.h"

/* The four vectors of a step, in registers (not an array on the stack). */
#define ROPE_UNROLL4 _Pragma("GCC unroll 4")

#ifdef ROPE_HAVE_NEON

/* a + b and a * b with a the first operand. */
ROPE_NEON_INLINE float64x2_t add_in_order(float64x2_t a, float64x2_t b)
{
    float64x2_t r;
    __asm__("fadd %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}
ROPE_NEON_INLINE float64x2_t mul_in_order(float64x2_t a, float64x2_t b)
{
    float64x2_t r;
    __asm__("fmul %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}

#define MUL_XS_FLOAT(x, s) mul_in_order(x, s)
#define MUL_XS_DOUBLE(x, s) mul_in_order(s, x)

/* ---- 8 elements as double (four vectors), and 8 results stored -------------- */

ROPE_NEON_INLINE void split8d(float32x4_t a, float32x4_t b, float64x2_t v[4])
{
    v[0] = vcvt_f64_f32(vget_low_f32(a));
    v[1] = vcvt_high_f64_f32(a);
    v[2] = vcvt_f64_f32(vget_low_f32(b));
    v[3] = vcvt_high_f64_f32(b);
}
ROPE_NEON_INLINE void ld8d_f32(const float *p, float64x2_t v[4]) { split8d(vld1q_f32(p), vld1q_f32(p + 4), v); }
ROPE_NEON_INLINE void ld8d_f16(const uint16_t *p, float64x2_t v[4])
{
    float32x4_t a, b;
    ld8_f16(p, &a, &b);
    split8d(a, b, v);
}
ROPE_NEON_INLINE void ld8d_bf16(const uint16_t *p, float64x2_t v[4])
{
    float32x4_t a, b;
    ld8_bf16(p, &a, &b);
    split8d(a, b, v);
}
ROPE_NEON_INLINE void ld8d_f64(const double *p, float64x2_t v[4])
{
    ROPE_UNROLL4 for (int k = 0; k < 4; k++)
        v[k] = vld1q_f64(p + 2 * k);
}

/* 8 doubles rounded once to float, or stored as they are. */
ROPE_NEON_INLINE void st8_float(float *p, const float64x2_t v[4])
{
    vst1q_f32(p, vcvt_high_f32_f64(vcvt_f32_f64(v[0]), v[1]));
    vst1q_f32(p + 4, vcvt_high_f32_f64(vcvt_f32_f64(v[2]), v[3]));
}
ROPE_NEON_INLINE void st8_double(double *p, const float64x2_t v[4])
{
    ROPE_UNROLL4 for (int k = 0; k < 4; k++)
        vst1q_f64(p + 2 * k, v[k]);
}

/* ---- sum of squares ------------------------------------------------------------ */

#define ROPE_NEON_SUMSQ(sfx, T)                                                      \
    void rope_sumsq_##sfx##_neon(const void *xv, int64_t n, double acc[8])           \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        float64x2_t a[4], v[4];                                                      \
        ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                                  \
            a[k] = vld1q_f64(acc + 2 * k);                                           \
        int64_t i = 0;                                                               \
        for (; i + 8 <= n; i += 8) {                                                 \
            ld8d_##sfx(x + i, v);                                                    \
            ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                              \
                a[k] = add_in_order(a[k], vmulq_f64(v[k], v[k]));                    \
        }                                                                            \
        if (i < n) { /* lanes 0 .. n-i-1 only */                                     \
            T t[8];                                                                  \
            memset(t, 0, sizeof t);                                                  \
            memcpy(t, x + i, (size_t)(n - i) * sizeof(T));                           \
            ld8d_##sfx(t, v);                                                        \
            const int64x2_t r = vdupq_n_s64(n - i);                                  \
            const int64_t first[2] = {0, 1};                                         \
            const int64x2_t lane = vld1q_s64(first);                                 \
            ROPE_UNROLL4 for (int k = 0; k < 4; k++) {                                            \
                const uint64x2_t m = vcltq_s64(vaddq_s64(lane, vdupq_n_s64(2 * k)), r); \
                a[k] = vbslq_f64(m, add_in_order(a[k], vmulq_f64(v[k], v[k])), a[k]); \
            }                                                                        \
        }                                                                            \
        ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                                  \
            vst1q_f64(acc + 2 * k, a[k]);                                            \
    }

ROPE_NEON_SUMSQ(f32, float)
ROPE_NEON_SUMSQ(f16, uint16_t)
ROPE_NEON_SUMSQ(bf16, uint16_t)
ROPE_NEON_SUMSQ(f64, double)

/* ---- normalise ----------------------------------------------------------------- */

/* out = (A)(x * (inv * w)) for the 8 elements at x (weights w if WEIGHTED,
 * else none). */
#define NORM8(sfx, ST, MUL_XS, x, WEIGHTED, w, out)                                  \
    do {                                                                             \
        float64x2_t v_[4];                                                           \
        ld8d_##sfx(x, v_);                                                           \
        ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                                  \
            v_[k] = MUL_XS(v_[k], (WEIGHTED) ? mul_in_order(vi, vld1q_f64((w) + 2 * k)) : vi); \
        ST(out, v_);                                                                 \
    } while (0)

#define ROPE_NEON_NORMALISE(sfx, T, A, ST, MUL_XS)                                   \
    void rope_normalise_##sfx##_neon(const void *xv, int64_t n, double inv, const double *w, \
                                     void *outv)                                     \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        A *out = (A *)outv;                                                          \
        const float64x2_t vi = vdupq_n_f64(inv);                                     \
        const int64_t n8 = n & ~(int64_t)7;                                          \
        if (w)                                                                       \
            for (int64_t i = 0; i < n8; i += 8)                                      \
                NORM8(sfx, ST, MUL_XS, x + i, 1, w + i, out + i);                       \
        else                                                                         \
            for (int64_t i = 0; i < n8; i += 8)                                      \
                NORM8(sfx, ST, MUL_XS, x + i, 0, w, out + i);        \
        if (n8 < n) {                                                                \
            const size_t r = (size_t)(n - n8);                                       \
            T t[8];                                                                  \
            A o[8];                                                                  \
            double tw[8];                                                            \
            memset(t, 0, sizeof t);                                                  \
            memcpy(t, x + n8, r * sizeof(T));                                        \
            memset(tw, 0, sizeof tw);                                                \
            if (w)                                                                   \
                memcpy(tw, w + n8, r * sizeof(double));                              \
            NORM8(sfx, ST, MUL_XS, t, w != NULL, tw, o);                             \
            memcpy(out + n8, o, r * sizeof(A));                                      \
        }                                                                            \
    }

ROPE_NEON_NORMALISE(f32, float, float, st8_float, MUL_XS_FLOAT)
ROPE_NEON_NORMALISE(f16, uint16_t, float, st8_float, MUL_XS_FLOAT)
ROPE_NEON_NORMALISE(bf16, uint16_t, float, st8_float, MUL_XS_FLOAT)
ROPE_NEON_NORMALISE(f64, double, double, st8_double, MUL_XS_DOUBLE)

/* ---- conversions ----------------------------------------------------------------- */

/* An 8-element step CONV(in + i, out + i) over [0, n), the last elements
 * through stack copies; SPEC: empty, static, or a target attribute. */
#define ROPE_NEON_CONVERT(SPEC, NAME, TI, TO, CONV)                                  \
    SPEC void NAME(const void *inv_, int64_t n, void *outv)                          \
    {                                                                                \
        const TI *in = (const TI *)inv_;                                             \
        TO *out = (TO *)outv;                                                        \
        int64_t i = 0;                                                               \
        for (; i + 8 <= n; i += 8)                                                   \
            CONV(in + i, out + i);                                                   \
        if (i < n) {                                                                 \
            TI t[8];                                                                 \
            TO o[8];                                                                 \
            memset(t, 0, sizeof t);                                                  \
            memcpy(t, in + i, (size_t)(n - i) * sizeof(TI));                         \
            CONV(t, o);                                                              \
            memcpy(out + i, o, (size_t)(n - i) * sizeof(TO));                        \
        }                                                                            \
    }

/* Exact copies: float32 to float32, float64 to float64. */
#define ROPE_NEON_COPY(NAME, T)                                                      \
    void NAME(const void *in, int64_t n, void *out)                                  \
    {                                                                                \
        memcpy(out, in, (size_t)n * sizeof(T));                                      \
    }

#define WIDEN8(LD8, p, q)                                                            \
    do {                                                                             \
        float32x4_t a_, b_;                                                          \
        LD8(p, &a_, &b_);                                                            \
        vst1q_f32(q, a_);                                                            \
        vst1q_f32((q) + 4, b_);                                                      \
    } while (0)
#define WIDEN8_F16(p, q) WIDEN8(ld8_f16, p, q)
#define WIDEN8_BF16(p, q) WIDEN8(ld8_bf16, p, q)
ROPE_NEON_CONVERT(, rope_widen_f16_neon, uint16_t, float, WIDEN8_F16)
ROPE_NEON_CONVERT(, rope_widen_bf16_neon, uint16_t, float, WIDEN8_BF16)
ROPE_NEON_COPY(rope_widen_f32_neon, float)
ROPE_NEON_COPY(rope_widen_f64_neon, double)

#define NARROW8_F16(p, q) st8_f16(q, vld1q_f32(p), vld1q_f32((p) + 4))
#define NARROW8_BF16(p, q) st8_bf16(q, vld1q_f32(p), vld1q_f32((p) + 4))
#define NARROW8_F64(p, q)                                                            \
    do {                                                                             \
        float64x2_t v_[4];                                                           \
        ld8d_f32(p, v_);                                                             \
        st8_double(q, v_);                                                           \
    } while (0)
ROPE_NEON_CONVERT(, rope_narrow_float_f16_neon, float, uint16_t, NARROW8_F16)
ROPE_NEON_CONVERT(, rope_narrow_float_bf16_neon, float, uint16_t, NARROW8_BF16)
ROPE_NEON_CONVERT(, rope_narrow_float_f64_neon, float, double, NARROW8_F64)
ROPE_NEON_COPY(rope_narrow_float_f32_neon, float)

#define NARROW8_D_F32(p, q)                                                          \
    do {                                                                             \
        float64x2_t v_[4];                                                           \
        ld8d_f64(p, v_);                                                             \
        st8_float(q, v_);                                                            \
    } while (0)
ROPE_NEON_CONVERT(, rope_narrow_double_f32_neon, double, float, NARROW8_D_F32)
ROPE_NEON_COPY(rope_narrow_double_f64_neon, double)

/* ---- "neonbf16": float32 to bfloat16 by BFCVTN -----------------------------------
 *
 * Under the default FPCR BFCVTN rounds to nearest even and keeps
 * subnormals: the bits of convert.h's integer rounding, but for a NaN,
 * whose top bits it keeps and quiets where the integer rounding adds
 * 0x7FFF + lsb to all of its bits (a payload in the low half can carry:
 * 0x7FFFFFFF gives 0x8000). So 8 results with a NaN among their inputs are
 * narrowed by the integer rounding instead. */
ROPE_NEON_BF16 static inline void narrow8_bfcvt_exact(const float *p, uint16_t *q)
{
    const float32x4_t a = vld1q_f32(p), b = vld1q_f32(p + 4);
    const uint32x4_t ordered = vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b)); /* lanes not NaN */
    if (__builtin_expect(vminvq_u32(ordered) == 0, 0))
        st8_bf16(q, a, b);
    else
        st8_bfcvt(q, a, b);
}
#define NARROW8_BFCVT(p, q) narrow8_bfcvt_exact(p, q)
ROPE_NEON_CONVERT(ROPE_NEON_BF16, rope_narrow_float_bf16_neonbf16, float, uint16_t, NARROW8_BFCVT)

#endif
