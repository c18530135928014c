/* AVX2 stage kernels of rope_rotate_staged (kernels.h; scalar/stage.c is
 * their specification), bit-identical to the scalar ones:
 *   sumsq      the 8 double lanes in two vectors of 4 (lanes 0-3, 4-7), so
 *              element i still goes to lane i mod 8 in increasing i; each
 *              element widened exactly (float16 through F16C, bfloat16 by a
 *              shift), squared and added as two roundings (no FMA: the
 *              build has -ffp-contract=off); the last n mod 8 elements
 *              update only their lanes (a blend), so the other lanes keep
 *              their bits, -0 and NaN payloads included;
 *   normalise  x * (inv * w) in double, 8 elements per step, rounded once
 *              to the arithmetic type (vcvtpd2ps rounds as a C cast does);
 *   widen      float16 through F16C, bfloat16 by a shift (exact), float32
 *              and float64 a copy;
 *   narrow     float32 to float16 through F16C (the rounding of convert.h),
 *              to bfloat16 by the integer rounding of convert.h, to float64
 *              exactly; double to float32 by vcvtpd2ps; float32 to float32
 *              and double to float64 a copy;
 *   norm_rot   normalise, the rotation (split half: rotate_avx2.h's
 *              16-pair step; interleaved: its pair swap and fmaddsub) and
 *              narrow, 16 elements at a time in registers, from and to
 *              float32, float16 and bfloat16: the same operations in the
 *              same order as the three kernels in turn.
 * Where both operands of an add or a multiply are NaN, IEEE leaves open
 * which one the result carries; x86 takes the first operand's, so the
 * operands come in the order the scalar kernels compile to with gcc (the
 * square before the lane's sum, inv before w, x before inv * w but inv * w
 * before x for float64), in asm so that the compiler cannot swap them: the
 * same NaN bits too (tests/c/kernels_identical.c counts any that differ).
 * The last elements (fewer than one step) go through a stack copy of 8,
 * padded with zeros, so no access reaches past the arrays.
 *
 * Results go out as two 16-byte stores, not one vinsertf128 and a 32-byte
 * store: the insert is a shuffle, and on Intel P-cores shuffles and the
 * conversions' shuffle halves share one port (measured on an Intel Xeon,
 * family 6 model 167: one vcvtps2pd ymm, xmm, vextractf128 or
 * vinsertf128 per cycle; normalise of float16/bfloat16 heads of 128 went
 * from 0.84/0.96 to 0.73/0.85 cycles per element). The float16 squares are
 * taken in float, exactly (11 significant bits square to at most 22,
 * between 2^-48 and 2^32: the same double as squaring in double for all
 * 65536 float16 values, NaNs and infinities included), then widened: one
 * multiply per 8, not two (sums of squares of heads of 128: 0.69 -> 0.59
 * cycles per element). */
#include <string.h>

#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

/* ---- 8 elements as double (two vectors), and 8 results stored --------------- */

ROPE_AVX2 static inline void split8d(__m256 v, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    *hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
ROPE_AVX2 static inline void ld8d_f32(const float *p, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_cvtps_pd(_mm_loadu_ps(p));
    *hi = _mm256_cvtps_pd(_mm_loadu_ps(p + 4));
}
ROPE_AVX2 static inline void ld8d_f16(const uint16_t *p, __m256d *lo, __m256d *hi)
{
    split8d(ld8_f16(p), lo, hi);
}
ROPE_AVX2 static inline void ld8d_bf16(const uint16_t *p, __m256d *lo, __m256d *hi)
{
    split8d(ld8_bf16(p), lo, hi);
}
ROPE_AVX2 static inline void ld8d_f64(const double *p, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_loadu_pd(p);
    *hi = _mm256_loadu_pd(p + 4);
}

/* 8 doubles rounded once to float, or stored as they are. */
ROPE_AVX2 static inline void st8_float(float *p, __m256d lo, __m256d hi)
{
    _mm_storeu_ps(p, _mm256_cvtpd_ps(lo));
    _mm_storeu_ps(p + 4, _mm256_cvtpd_ps(hi));
}
ROPE_AVX2 static inline void st8_double(double *p, __m256d lo, __m256d hi)
{
    _mm256_storeu_pd(p, lo);
    _mm256_storeu_pd(p + 4, hi);
}

/* a + b and a * b with a the first operand, whose NaN x86 keeps when both
 * are NaN. The compiler takes an intrinsic's add or multiply as commutative
 * and may swap its operands; in asm they stay where they are written. */
ROPE_AVX2 static inline __m256d add_in_order(__m256d a, __m256d b)
{
    __m256d r;
    __asm__("vaddpd %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
    return r;
}
ROPE_AVX2 static inline __m256d mul_in_order(__m256d a, __m256d b)
{
    __m256d r;
    __asm__("vmulpd %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
    return r;
}

/* x * s in the order the scalar kernel compiles to (above): x first for the
 * float arithmetic types, s first for double. */
#define MUL_XS_FLOAT(x, s) mul_in_order(x, s)
#define MUL_XS_DOUBLE(x, s) mul_in_order(s, x)

/* ---- sum of squares ------------------------------------------------------------ */

/* The lanes a caller passes in, read in 16-byte pieces: a caller compiled
 * for the baseline zeroes them with 16-byte stores, and a wider load over
 * several such stores cannot take its bytes from them in flight (store to
 * load forwarding fails): it waits until they reach the cache, which is
 * after everything before them has retired, one head's work serialised
 * behind the previous head's (measured: the sums of squares 2x slower). */
ROPE_AVX2 static inline __m256d load_lanes4(const double *acc)
{
    return _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(acc)), _mm_loadu_pd(acc + 2), 1);
}

/* The 8-element squares of lanes 0-3 and 4-7 of x[0..8) in double: widened
 * and squared in double, or (float16) squared exactly in float, then
 * widened. */
#define SQ8_DOUBLE(NAME, LD8D)                                                       \
    ROPE_AVX2 static inline void NAME(const void *p, __m256d *lo, __m256d *hi)      \
    {                                                                                \
        __m256d v0, v1;                                                              \
        LD8D(p, &v0, &v1);                                                           \
        *lo = _mm256_mul_pd(v0, v0);                                                 \
        *hi = _mm256_mul_pd(v1, v1);                                                 \
    }
SQ8_DOUBLE(sq8_f32, ld8d_f32)
SQ8_DOUBLE(sq8_bf16, ld8d_bf16)
SQ8_DOUBLE(sq8_f64, ld8d_f64)
ROPE_AVX2 static inline void sq8_f16(const void *p, __m256d *lo, __m256d *hi)
{
    const __m256 v = ld8_f16((const uint16_t *)p);
    split8d(_mm256_mul_ps(v, v), lo, hi);
}

/* 8-element steps (SQ8), then the last n mod 8 elements in a function of
 * their own: its stack copy would otherwise give every call a stack frame
 * (a head of 128 has no such elements). */
#define ROPE_AVX2_SUMSQ(sfx, T, SQ8)                                                 \
    ROPE_AVX2 static __attribute__((noinline)) void sumsq_tail_##sfx(               \
        const T *x, int64_t r, double acc[8])                                        \
    { /* lanes 0 .. r-1 only */                                                      \
        T t[8];                                                                      \
        memset(t, 0, sizeof t);                                                      \
        memcpy(t, x, (size_t)r * sizeof(T));                                         \
        __m256d q0, q1;                                                              \
        SQ8(t, &q0, &q1);                                                            \
        const __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4);     \
        const __m256i rv = _mm256_set1_epi64x(r);                                    \
        const __m256d m0 = _mm256_castsi256_pd(_mm256_cmpgt_epi64(rv, _mm256_setr_epi64x(0, 1, 2, 3))); \
        const __m256d m1 = _mm256_castsi256_pd(_mm256_cmpgt_epi64(rv, _mm256_setr_epi64x(4, 5, 6, 7))); \
        _mm256_storeu_pd(acc, _mm256_blendv_pd(a0, add_in_order(q0, a0), m0));      \
        _mm256_storeu_pd(acc + 4, _mm256_blendv_pd(a1, add_in_order(q1, a1), m1));  \
    }                                                                                \
    ROPE_AVX2 void rope_sumsq_##sfx##_avx2(const void *xv, int64_t n, double acc[8]) \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        __m256d a0 = load_lanes4(acc), a1 = load_lanes4(acc + 4);                    \
        int64_t i = 0;                                                               \
        for (; i + 8 <= n; i += 8) {                                                 \
            __m256d q0, q1;                                                          \
            SQ8(x + i, &q0, &q1);                                                    \
            a0 = add_in_order(q0, a0);                                               \
            a1 = add_in_order(q1, a1);                                               \
        }                                                                            \
        _mm256_storeu_pd(acc, a0);                                                   \
        _mm256_storeu_pd(acc + 4, a1);                                               \
        if (i < n)                                                                   \
            sumsq_tail_##sfx(x + i, n - i, acc);                                     \
    }

ROPE_AVX2_SUMSQ(f32, float, sq8_f32)
ROPE_AVX2_SUMSQ(f16, uint16_t, sq8_f16)
ROPE_AVX2_SUMSQ(bf16, uint16_t, sq8_bf16)
ROPE_AVX2_SUMSQ(f64, double, sq8_f64)

/* ---- normalise ----------------------------------------------------------------- */

/* out = (A)(x * (inv * w)), one loop with weights and one without. */
#define ROPE_AVX2_NORMALISE(sfx, T, A, LD8D, ST8, MUL_XS)                             \
    ROPE_AVX2 void rope_normalise_##sfx##_avx2(const void *xv, int64_t n, double inv, \
                                               const double *w, void *outv)           \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        A *out = (A *)outv;                                                          \
        const __m256d vi = _mm256_set1_pd(inv);                                      \
        const int64_t n8 = n & ~(int64_t)7;                                          \
        __m256d v0, v1;                                                              \
        if (w)                                                                       \
            for (int64_t i = 0; i < n8; i += 8) {                                    \
                LD8D(x + i, &v0, &v1);                                               \
                const __m256d s0 = mul_in_order(vi, _mm256_loadu_pd(w + i));        \
                const __m256d s1 = mul_in_order(vi, _mm256_loadu_pd(w + i + 4));    \
                ST8(out + i, MUL_XS(v0, s0), MUL_XS(v1, s1));                        \
            }                                                                        \
        else                                                                         \
            for (int64_t i = 0; i < n8; i += 8) {                                    \
                LD8D(x + i, &v0, &v1);                                               \
                ST8(out + i, MUL_XS(v0, vi), MUL_XS(v1, vi));                        \
            }                                                                        \
        if (n8 < n) {                                                                \
            const size_t r = (size_t)(n - n8);                                       \
            T t[8];                                                                  \
            A o[8];                                                                  \
            memset(t, 0, sizeof t);                                                  \
            memcpy(t, x + n8, r * sizeof(T));                                        \
            LD8D(t, &v0, &v1);                                                       \
            __m256d s0 = vi, s1 = vi;                                                \
            if (w) {                                                                 \
                double tw[8];                                                        \
                memset(tw, 0, sizeof tw);                                            \
                memcpy(tw, w + n8, r * sizeof(double));                              \
                s0 = mul_in_order(vi, _mm256_loadu_pd(tw));                         \
                s1 = mul_in_order(vi, _mm256_loadu_pd(tw + 4));                     \
            }                                                                        \
            ST8(o, MUL_XS(v0, s0), MUL_XS(v1, s1));                                  \
            memcpy(out + n8, o, r * sizeof(A));                                      \
        }                                                                            \
    }

ROPE_AVX2_NORMALISE(f32, float, float, ld8d_f32, st8_float, MUL_XS_FLOAT)
ROPE_AVX2_NORMALISE(f16, uint16_t, float, ld8d_f16, st8_float, MUL_XS_FLOAT)
ROPE_AVX2_NORMALISE(bf16, uint16_t, float, ld8d_bf16, st8_float, MUL_XS_FLOAT)
ROPE_AVX2_NORMALISE(f64, double, double, ld8d_f64, st8_double, MUL_XS_DOUBLE)

/* ---- normalise, rotate and narrow a head in one pass ------------------------------ */

/* 8 elements of x normalised to float as rope_normalise does: x * (inv * w)
 * (weighted) or x * inv in double, rounded once; weighted is a constant
 * where it is inlined. */
#define ROPE_AVX2_NORM8(sfx, T, LD8D)                                                \
    ROPE_AVX2 static inline __attribute__((always_inline)) __m256 norm8_##sfx(       \
        const T *x, const double *w, __m256d vi, int weighted)                      \
    {                                                                                \
        __m256d v0, v1, s0 = vi, s1 = vi;                                            \
        LD8D(x, &v0, &v1);                                                           \
        if (weighted) {                                                              \
            s0 = mul_in_order(vi, _mm256_loadu_pd(w));                               \
            s1 = mul_in_order(vi, _mm256_loadu_pd(w + 4));                           \
        }                                                                            \
        return _mm256_set_m128(_mm256_cvtpd_ps(MUL_XS_FLOAT(v1, s1)), _mm256_cvtpd_ps(MUL_XS_FLOAT(v0, s0))); \
    }
ROPE_AVX2_NORM8(f32, float, ld8d_f32)
ROPE_AVX2_NORM8(f16, uint16_t, ld8d_f16)
ROPE_AVX2_NORM8(bf16, uint16_t, ld8d_bf16)

/* Pairs i .. i+15 and i+half .. i+half+15 per step (then, if half is not a
 * multiple of 16, one step of 8), both halves normalised, then rotated as
 * SPLIT_STEP16 rotates (FM0/FM1 by direction), then stored in the storage
 * type, 16 elements at a time (ST16: bfloat16 packs two vectors in one
 * instruction). Each step reads its elements before it writes them, and no
 * other step touches them: in place is exact. No offset of a NULL w is
 * formed. */
#define NORM_ROT_STEP(NORM8, WEIGHTED, j, FM0, FM1, y0, y1)                          \
    do {                                                                             \
        const __m256 x0 = NORM8(x + (j), WEIGHTED ? w + (j) : NULL, vi, WEIGHTED);   \
        const __m256 x1 = NORM8(x + (j) + half, WEIGHTED ? w + (j) + half : NULL, vi, WEIGHTED); \
        const __m256 c = _mm256_loadu_ps(cos + (j)), s = _mm256_loadu_ps(sin + (j)); \
        y0 = FM0(x0, c, _mm256_mul_ps(x1, s));                                       \
        y1 = FM1(x1, c, _mm256_mul_ps(x0, s));                                       \
    } while (0)
#define NORM_ROT_LOOP(NORM8, ST8, ST16, WEIGHTED, FM0, FM1)                          \
    {                                                                                \
        int64_t i = 0;                                                               \
        for (; i + 16 <= half; i += 16) {                                            \
            __m256 y0a, y1a, y0b, y1b;                                               \
            NORM_ROT_STEP(NORM8, WEIGHTED, i, FM0, FM1, y0a, y1a);                   \
            NORM_ROT_STEP(NORM8, WEIGHTED, i + 8, FM0, FM1, y0b, y1b);               \
            ST16(out + i, y0a, y0b);                                                 \
            ST16(out + i + half, y1a, y1b);                                          \
        }                                                                            \
        if (i < half) {                                                              \
            __m256 y0, y1;                                                           \
            NORM_ROT_STEP(NORM8, WEIGHTED, i, FM0, FM1, y0, y1);                     \
            ST8(out + i, y0);                                                        \
            ST8(out + i + half, y1);                                                 \
        }                                                                            \
    }

/* Interleaved: 8 pairs (16 elements) per step, normalised 8 at a time,
 * rotated as rotate_avx2.h's interleaved step rotates: the pair swap of
 * the row (vpermilps), one multiply by the duplicated sines and fmaddsub
 * (fmsubadd inverse) with the duplicated cosines, which the caller built
 * once for the token's heads (kernels.h): one shuffle per 8 elements more
 * than split half, not three. Each step reads its elements before it
 * writes them: in place is exact. */
#define NORM_ROT_IL_STEP(NORM8, WEIGHTED, j, FMAS, y)                                \
    do {                                                                             \
        const __m256 v = NORM8(x + (j), WEIGHTED ? w + (j) : NULL, vi, WEIGHTED);    \
        const __m256 s = _mm256_loadu_ps(sin + (j));                                 \
        y = FMAS(v, _mm256_loadu_ps(cos + (j)), _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), s)); \
    } while (0)
#define NORM_ROT_IL_LOOP(NORM8, ST16, WEIGHTED, FMAS)                                \
    for (int64_t i = 0; i < head_dim; i += 16) {                                     \
        __m256 ya, yb;                                                               \
        NORM_ROT_IL_STEP(NORM8, WEIGHTED, i, FMAS, ya);                              \
        NORM_ROT_IL_STEP(NORM8, WEIGHTED, i + 8, FMAS, yb);                          \
        ST16(out + i, ya, yb);                                                       \
    }

/* x of storage type TI (its norm8_<IN>) into out of storage type TO (its
 * ST8, ST16): rope_norm_rot_sh_<IN>_<OUT>_avx2 (split half) and
 * rope_norm_rot_il_<IN>_<OUT>_avx2 (interleaved). */
#define ROPE_AVX2_NORM_ROT(IN, TI, OUT, TO, ST8, ST16)                                \
    ROPE_AVX2 void rope_norm_rot_sh_##IN##_##OUT##_avx2(const void *xv, int64_t head_dim, double inv, \
                                                        const double *w, const float *cos, \
                                                        const float *sin, int inverse, void *outv) \
    {                                                                                \
        const TI *x = (const TI *)xv;                                                \
        TO *out = (TO *)outv;                                                        \
        const int64_t half = head_dim / 2;                                           \
        const __m256d vi = _mm256_set1_pd(inv);                                      \
        if (w && !inverse)                                                           \
            NORM_ROT_LOOP(norm8_##IN, ST8, ST16, 1, _mm256_fmsub_ps, _mm256_fmadd_ps) \
        else if (w)                                                                  \
            NORM_ROT_LOOP(norm8_##IN, ST8, ST16, 1, _mm256_fmadd_ps, _mm256_fmsub_ps) \
        else if (!inverse)                                                           \
            NORM_ROT_LOOP(norm8_##IN, ST8, ST16, 0, _mm256_fmsub_ps, _mm256_fmadd_ps) \
        else                                                                         \
            NORM_ROT_LOOP(norm8_##IN, ST8, ST16, 0, _mm256_fmadd_ps, _mm256_fmsub_ps) \
    }                                                                                \
    ROPE_AVX2 void rope_norm_rot_il_##IN##_##OUT##_avx2(const void *xv, int64_t head_dim, double inv, \
                                                        const double *w, const float *cos, \
                                                        const float *sin, int inverse, void *outv) \
    {                                                                                \
        const TI *x = (const TI *)xv;                                                \
        TO *out = (TO *)outv;                                                        \
        const __m256d vi = _mm256_set1_pd(inv);                                      \
        if (w && !inverse)                                                           \
            NORM_ROT_IL_LOOP(norm8_##IN, ST16, 1, _mm256_fmaddsub_ps)                \
        else if (w)                                                                  \
            NORM_ROT_IL_LOOP(norm8_##IN, ST16, 1, _mm256_fmsubadd_ps)                \
        else if (!inverse)                                                           \
            NORM_ROT_IL_LOOP(norm8_##IN, ST16, 0, _mm256_fmaddsub_ps)                \
        else                                                                         \
            NORM_ROT_IL_LOOP(norm8_##IN, ST16, 0, _mm256_fmsubadd_ps)                \
    }

ROPE_AVX2 static inline void st8_f32v(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
ROPE_AVX2 static inline void st16_f32v(float *p, __m256 a, __m256 b)
{
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
}
ROPE_AVX2 static inline void st16_f16v(uint16_t *p, __m256 a, __m256 b)
{
    st8_f16(p, a);
    st8_f16(p + 8, b);
}
/* 16 floats to bfloat16: both vectors rounded (convert.h), packed to 16
 * bits in one instruction (the values fit: no saturation), the 64-bit
 * blocks back in order. */
ROPE_AVX2 static inline void st16_bf16v(uint16_t *p, __m256 a, __m256 b)
{
    _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_round(a), bf16_round(b)), 0xD8));
}
/* The interleaved kernels' row (kernels.h): 8 entries into 16 by two
 * vpermps each, the last half mod 8 one at a time. */
ROPE_AVX2 void rope_duplicate_row_avx2(const float *cos, const float *sin, int64_t half, float *dup_cos,
                                       float *dup_sin)
{
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
        _mm256_storeu_ps(dup_cos + 2 * i, _mm256_permutevar8x32_ps(c, lo));
        _mm256_storeu_ps(dup_cos + 2 * i + 8, _mm256_permutevar8x32_ps(c, hi));
        _mm256_storeu_ps(dup_sin + 2 * i, _mm256_permutevar8x32_ps(s, lo));
        _mm256_storeu_ps(dup_sin + 2 * i + 8, _mm256_permutevar8x32_ps(s, hi));
    }
    for (; i < half; i++) {
        dup_cos[2 * i] = dup_cos[2 * i + 1] = cos[i];
        dup_sin[2 * i] = dup_sin[2 * i + 1] = sin[i];
    }
}

/* every pair of the float arithmetic types */
#define ROPE_AVX2_NORM_ROT_TO(IN, TI)                                                \
    ROPE_AVX2_NORM_ROT(IN, TI, f32, float, st8_f32v, st16_f32v)                      \
    ROPE_AVX2_NORM_ROT(IN, TI, f16, uint16_t, st8_f16, st16_f16v)                    \
    ROPE_AVX2_NORM_ROT(IN, TI, bf16, uint16_t, st8_bf16, st16_bf16v)
ROPE_AVX2_NORM_ROT_TO(f32, float)
ROPE_AVX2_NORM_ROT_TO(f16, uint16_t)
ROPE_AVX2_NORM_ROT_TO(bf16, uint16_t)

/* ---- conversions ----------------------------------------------------------------- */

/* An 8-element step CONV(in + i, out + i) over [0, n), the last elements
 * through stack copies; SPEC: empty, or static. */
#define ROPE_AVX2_CONVERT(SPEC, NAME, TI, TO, CONV)                                  \
    ROPE_AVX2 SPEC void NAME(const void *inv_, int64_t n, void *outv)                \
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
#define ROPE_AVX2_COPY(NAME, T)                                                      \
    void NAME(const void *in, int64_t n, void *out)                                  \
    {                                                                                \
        memcpy(out, in, (size_t)n * sizeof(T));                                      \
    }

#define WIDEN8_F16(p, q) _mm256_storeu_ps(q, ld8_f16(p))
#define WIDEN8_BF16(p, q) _mm256_storeu_ps(q, ld8_bf16(p))
ROPE_AVX2_CONVERT(, rope_widen_f16_avx2, uint16_t, float, WIDEN8_F16)
ROPE_AVX2_CONVERT(, rope_widen_bf16_avx2, uint16_t, float, WIDEN8_BF16)
ROPE_AVX2_COPY(rope_widen_f32_avx2, float)
ROPE_AVX2_COPY(rope_widen_f64_avx2, double)

#define NARROW8_F16(p, q) st8_f16(q, _mm256_loadu_ps(p))
#define NARROW8_BF16(p, q) st8_bf16(q, _mm256_loadu_ps(p))
#define NARROW8_F64(p, q)                                                            \
    do {                                                                             \
        _mm256_storeu_pd(q, _mm256_cvtps_pd(_mm_loadu_ps(p)));                       \
        _mm256_storeu_pd((q) + 4, _mm256_cvtps_pd(_mm_loadu_ps((p) + 4)));           \
    } while (0)
ROPE_AVX2_CONVERT(, rope_narrow_float_f16_avx2, float, uint16_t, NARROW8_F16)
ROPE_AVX2_CONVERT(static, narrow8_bf16, float, uint16_t, NARROW8_BF16)
ROPE_AVX2_CONVERT(, rope_narrow_float_f64_avx2, float, double, NARROW8_F64)
ROPE_AVX2_COPY(rope_narrow_float_f32_avx2, float)

/* float32 to bfloat16, 16 per step (st16_bf16v), then 8 at a time. */
ROPE_AVX2 void rope_narrow_float_bf16_avx2(const void *inv_, int64_t n, void *outv)
{
    const float *in = (const float *)inv_;
    uint16_t *out = (uint16_t *)outv;
    const int64_t n16 = n & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16)
        st16_bf16v(out + i, _mm256_loadu_ps(in + i), _mm256_loadu_ps(in + i + 8));
    narrow8_bf16(in + n16, n - n16, out + n16);
}

#define NARROW8_D_F32(p, q) st8_float(q, _mm256_loadu_pd(p), _mm256_loadu_pd((p) + 4))
ROPE_AVX2_CONVERT(, rope_narrow_double_f32_avx2, double, float, NARROW8_D_F32)
ROPE_AVX2_COPY(rope_narrow_double_f64_avx2, double)

#endif
