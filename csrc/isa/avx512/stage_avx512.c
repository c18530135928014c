/* AVX-512 stage kernels of rope_rotate_staged (kernels.h; scalar/stage.c is
 * their specification), bit-identical to the scalar ones, for the "avx512"
 * entry and, narrowing float32 to bfloat16 in hardware, "avx512bf16":
 *   sumsq      the 8 double lanes in one vector, element i in lane i mod 8
 *              in increasing i; each element widened exactly (float16
 *              through F16C, bfloat16 by a shift), squared and added as two
 *              roundings (no FMA: the build has -ffp-contract=off); the last
 *              n mod 8 elements are a masked load and a masked move, so the
 *              other lanes keep their bits;
 *   normalise  x * (inv * w) in double, 8 elements per vector, rounded once
 *              to the arithmetic type (vcvtpd2ps rounds as a C cast does);
 *   widen      float16 through F16C, bfloat16 by a shift (exact), 16 per
 *              vector; float32 and float64 keep the "avx2" copies;
 *   narrow     float32 to float16 through F16C, to bfloat16 by the integer
 *              rounding of convert.h ("avx512") or vcvtne2ps2bf16 with a
 *              fix-up ("avx512bf16", below), to float64 exactly; double to
 *              float32 by vcvtpd2ps;
 *   norm_rot   the norm, the rotation in either layout and the narrowing,
 *              16 elements per vector in registers, from and to float32,
 *              float16 and bfloat16 (integer bfloat16 rounding), the same
 *              operations as the three kernels in turn.
 * The last elements of every kernel are masked loads and stores: a disabled
 * lane is neither read nor written. Where both operands of an add or a
 * multiply are NaN, x86 gives the first one's: the operands come in the
 * order the scalar kernels compile to, in asm so that the compiler cannot
 * swap them (stage_avx2.c says more). */
#include "rotate_avx512.h"

/* The four vectors of a step, in registers (not an array on the stack). */
#define ROPE_UNROLL4 _Pragma("GCC unroll 4")

#ifdef ROPE_HAVE_X86

/* a + b and a * b with a the first operand (its NaN kept when both are). */
ROPE_AVX512 static inline __m512d add_in_order(__m512d a, __m512d b)
{
    __m512d r;
    __asm__("vaddpd %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}
ROPE_AVX512 static inline __m512d mul_in_order(__m512d a, __m512d b)
{
    __m512d r;
    __asm__("vmulpd %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}

/* x * s in the order the scalar kernel compiles to: x first for the float
 * arithmetic types, s first for double. */
#define MUL_XS_FLOAT(x, s) mul_in_order(x, s)
#define MUL_XS_DOUBLE(x, s) mul_in_order(s, x)

/* ---- 8 elements as double, whole and masked (lanes m) ------------------------ */

ROPE_AVX512 static inline __m512d ld8d_f32(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
ROPE_AVX512 static inline __m512d ld8dm_f32(const float *p, __mmask8 m)
{
    return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p));
}
ROPE_AVX512 static inline __m512d ld8d_f16(const uint16_t *p)
{
    return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
}
ROPE_AVX512 static inline __m512d ld8dm_f16(const uint16_t *p, __mmask8 m)
{
    return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, p)));
}
ROPE_AVX512 static inline __m512d bf16_as_double(__m128i h)
{
    return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}
ROPE_AVX512 static inline __m512d ld8d_bf16(const uint16_t *p)
{
    return bf16_as_double(_mm_loadu_si128((const __m128i *)p));
}
ROPE_AVX512 static inline __m512d ld8dm_bf16(const uint16_t *p, __mmask8 m)
{
    return bf16_as_double(_mm_maskz_loadu_epi16(m, p));
}
ROPE_AVX512 static inline __m512d ld8d_f64(const double *p) { return _mm512_loadu_pd(p); }
ROPE_AVX512 static inline __m512d ld8dm_f64(const double *p, __mmask8 m) { return _mm512_maskz_loadu_pd(m, p); }

/* 8 doubles rounded once to float, whole and masked. */
ROPE_AVX512 static inline void st8_float(float *p, __m512d v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
ROPE_AVX512 static inline void st8m_float(float *p, __mmask8 m, __m512d v)
{
    _mm256_mask_storeu_ps(p, m, _mm512_cvtpd_ps(v));
}

/* ---- 32 elements as double: four vectors ---------------------------------------
 *
 * On Intel only two ports run 512-bit vector instructions, and these
 * kernels are bound by them (each conversion between float and double
 * takes both): bfloat16 is widened 32 at a time by two word permutes
 * (bf16_widen_a/b) instead of a zero extension and a shift per 8, then
 * converted in halves. */

ROPE_AVX512 static inline void split16d(__m512 v, __m512d *lo, __m512d *hi)
{
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    *hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
}
#define LD32D_ELEMENTWISE(sfx, T)                                                    \
    ROPE_AVX512 static inline void ld32d_##sfx(const T *p, __m512d d[4])             \
    {                                                                                \
        ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                                  \
            d[k] = ld8d_##sfx(p + 8 * k);                                            \
    }
LD32D_ELEMENTWISE(f32, float)
LD32D_ELEMENTWISE(f16, uint16_t)
LD32D_ELEMENTWISE(f64, double)
ROPE_AVX512 static inline void ld32d_bf16(const uint16_t *p, __m512d d[4])
{
    const __m512i v = _mm512_loadu_si512(p);
    split16d(bf16_widen_a(v), &d[0], &d[1]);
    split16d(bf16_widen_b(v), &d[2], &d[3]);
}

/* ---- sum of squares ------------------------------------------------------------ */

/* The lanes a caller passes in, read in 16-byte pieces (stage_avx2.c says
 * why: a caller zeroes them with 16-byte stores). */
ROPE_AVX512 static inline __m512d load_lanes8(const double *acc)
{
    const __m256d lo = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(acc)), _mm_loadu_pd(acc + 2), 1);
    const __m256d hi = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(acc + 4)), _mm_loadu_pd(acc + 6), 1);
    return _mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1);
}

/* 32 elements per step (elements i + 8k + l into lane l, k = 0..3 in turn),
 * then 8, then the last ones masked. */
#define ROPE_AVX512_SUMSQ(sfx, T)                                                    \
    ROPE_AVX512 void rope_sumsq_##sfx##_avx512(const void *xv, int64_t n, double acc[8]) \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        __m512d a = load_lanes8(acc);                                                \
        int64_t i = 0;                                                               \
        for (; i + 32 <= n; i += 32) {                                               \
            __m512d d[4];                                                            \
            ld32d_##sfx(x + i, d);                                                   \
            ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                              \
                a = add_in_order(_mm512_mul_pd(d[k], d[k]), a);                      \
        }                                                                            \
        for (; i + 8 <= n; i += 8) {                                                 \
            const __m512d v = ld8d_##sfx(x + i);                                     \
            a = add_in_order(_mm512_mul_pd(v, v), a);                                \
        }                                                                            \
        if (i < n) { /* lanes 0 .. n-i-1 only */                                     \
            const __mmask8 m = rope_avx512_lanes8(n - i);                            \
            const __m512d v = ld8dm_##sfx(x + i, m);                                 \
            a = _mm512_mask_mov_pd(a, m, add_in_order(_mm512_mul_pd(v, v), a));      \
        }                                                                            \
        _mm512_storeu_pd(acc, a);                                                    \
    }

ROPE_AVX512_SUMSQ(f32, float)
ROPE_AVX512_SUMSQ(f16, uint16_t)
ROPE_AVX512_SUMSQ(bf16, uint16_t)
ROPE_AVX512_SUMSQ(f64, double)

/* ---- normalise ----------------------------------------------------------------- */

/* out = (A)(x * (inv * w)), one loop with weights and one without, 32
 * elements per step; the last ones masked. A float row is stored 16
 * elements (64 bytes) at a time: the rotation that reads it next loads 64
 * bytes at a time, and a load over two 32-byte stores still in flight
 * cannot take its bytes from them (it waits until they reach the cache:
 * rotations of the row measured 6x slower). */
ROPE_AVX512 static inline __m512 join_float(__m512d a, __m512d b)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a)), _mm512_cvtpd_ps(b), 1);
}
#define ROPE_AVX512_NORMALISE_FLOAT(sfx, T)                                          \
    ROPE_AVX512 void rope_normalise_##sfx##_avx512(const void *xv, int64_t n, double inv, \
                                                   const double *w, void *outv)      \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        float *out = (float *)outv;                                                  \
        const __m512d vi = _mm512_set1_pd(inv);                                      \
        const int64_t n32 = n & ~(int64_t)31;                                        \
        __m512d d[4];                                                                \
        if (w)                                                                       \
            for (int64_t i = 0; i < n32; i += 32) {                                  \
                ld32d_##sfx(x + i, d);                                               \
                ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                          \
                    d[k] = MUL_XS_FLOAT(d[k], mul_in_order(vi, _mm512_loadu_pd(w + i + 8 * k))); \
                _mm512_storeu_ps(out + i, join_float(d[0], d[1]));                   \
                _mm512_storeu_ps(out + i + 16, join_float(d[2], d[3]));              \
            }                                                                        \
        else                                                                         \
            for (int64_t i = 0; i < n32; i += 32) {                                  \
                ld32d_##sfx(x + i, d);                                               \
                ROPE_UNROLL4 for (int k = 0; k < 4; k++)                                          \
                    d[k] = MUL_XS_FLOAT(d[k], vi);                                   \
                _mm512_storeu_ps(out + i, join_float(d[0], d[1]));                   \
                _mm512_storeu_ps(out + i + 16, join_float(d[2], d[3]));              \
            }                                                                        \
        for (int64_t i = n32; i < n; i += 16) { /* up to 16, masked */               \
            const __mmask16 m = rope_avx512_lanes16(n - i);                          \
            const __mmask8 ma = (__mmask8)m, mb = (__mmask8)(m >> 8);                \
            __m512d sa = vi, sb = vi;                                                \
            if (w) {                                                                 \
                sa = mul_in_order(vi, _mm512_maskz_loadu_pd(ma, w + i));             \
                sb = mul_in_order(vi, _mm512_maskz_loadu_pd(mb, w + i + 8));         \
            }                                                                        \
            const __m512d a = MUL_XS_FLOAT(ld8dm_##sfx(x + i, ma), sa);              \
            const __m512d b = MUL_XS_FLOAT(ld8dm_##sfx(x + i + 8, mb), sb);          \
            _mm512_mask_storeu_ps(out + i, m, join_float(a, b));                     \
        }                                                                            \
    }

ROPE_AVX512_NORMALISE_FLOAT(f32, float)
ROPE_AVX512_NORMALISE_FLOAT(f16, uint16_t)
ROPE_AVX512_NORMALISE_FLOAT(bf16, uint16_t)

/* float64: 8 elements (one 64-byte store) per step. */
ROPE_AVX512 void rope_normalise_f64_avx512(const void *xv, int64_t n, double inv, const double *w, void *outv)
{
    const double *x = (const double *)xv;
    double *out = (double *)outv;
    const __m512d vi = _mm512_set1_pd(inv);
    const int64_t n8 = n & ~(int64_t)7;
    if (w)
        for (int64_t i = 0; i < n8; i += 8)
            _mm512_storeu_pd(out + i, MUL_XS_DOUBLE(_mm512_loadu_pd(x + i), mul_in_order(vi, _mm512_loadu_pd(w + i))));
    else
        for (int64_t i = 0; i < n8; i += 8)
            _mm512_storeu_pd(out + i, MUL_XS_DOUBLE(_mm512_loadu_pd(x + i), vi));
    if (n8 < n) {
        const __mmask8 m = rope_avx512_lanes8(n - n8);
        const __m512d s = w ? mul_in_order(vi, _mm512_maskz_loadu_pd(m, w + n8)) : vi;
        _mm512_mask_storeu_pd(out + n8, m, MUL_XS_DOUBLE(_mm512_maskz_loadu_pd(m, x + n8), s));
    }
}

/* ---- normalise, rotate and narrow a head in one pass ------------------------------ */

/* 16 elements of x normalised to float as rope_normalise does (x * (inv *
 * w) or x * inv in double, rounded once), lanes m (0xFFFF: all; a lane
 * outside m is not read); weighted is a constant where it is inlined. */
#define ROPE_AVX512_NORM16(sfx, T)                                                   \
    ROPE_AVX512 static inline __attribute__((always_inline)) __m512 norm16_##sfx(    \
        const T *x, const double *w, __m512d vi, int weighted, __mmask16 m)          \
    {                                                                                \
        const __mmask8 ma = (__mmask8)m, mb = (__mmask8)(m >> 8);                    \
        const int all = m == 0xFFFF;                                                 \
        const __m512d a = all ? ld8d_##sfx(x) : ld8dm_##sfx(x, ma);                  \
        const __m512d b = all ? ld8d_##sfx(x + 8) : ld8dm_##sfx(x + 8, mb);          \
        __m512d sa = vi, sb = vi;                                                    \
        if (weighted) {                                                              \
            sa = mul_in_order(vi, all ? _mm512_loadu_pd(w) : _mm512_maskz_loadu_pd(ma, w)); \
            sb = mul_in_order(vi, all ? _mm512_loadu_pd(w + 8) : _mm512_maskz_loadu_pd(mb, w + 8)); \
        }                                                                            \
        return join_float(MUL_XS_FLOAT(a, sa), MUL_XS_FLOAT(b, sb));                 \
    }
ROPE_AVX512_NORM16(f32, float)
ROPE_AVX512_NORM16(f16, uint16_t)
ROPE_AVX512_NORM16(bf16, uint16_t)

/* 16 results stored in the output's type, lanes m. */
ROPE_AVX512 static inline void st16r_f32(float *p, __m512 v, __mmask16 m)
{
    if (m == 0xFFFF)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}
ROPE_AVX512 static inline void st16r_f16(uint16_t *p, __m512 v, __mmask16 m)
{
    if (m == 0xFFFF)
        st16_f16(p, v);
    else
        st16m_f16(p, m, v);
}
ROPE_AVX512 static inline void st16r_bf16(uint16_t *p, __m512 v, __mmask16 m)
{
    const __m256i h = bf16_narrow16_int(v, m);
    if (m == 0xFFFF)
        _mm256_storeu_si256((__m256i *)p, h);
    else
        _mm256_mask_storeu_epi16(p, m, h);
}

/* Split half: pairs i .. i+15 and i+half .. i+half+15 per step (lanes m),
 * both normalised, rotated as the split-half kernels rotate (FM0/FM1 by
 * direction: see rotate_avx2.h's SPLIT_STEP16), stored. Interleaved: 16
 * elements per step, rotated as the interleaved kernels rotate (the pair
 * swap, fmaddsub or fmsubadd) against the row duplicated by the caller
 * (kernels.h). Every step reads its elements before it writes them and no
 * other step touches them: in place is exact. No offset of a NULL w is
 * formed. */
#define NORM_ROT_SH_STEP(NORM16, ST16, WEIGHTED, FM0, FM1, m)                        \
    do {                                                                             \
        const __m512 x0 = NORM16(x + i, WEIGHTED ? w + i : NULL, vi, WEIGHTED, m);    \
        const __m512 x1 = NORM16(x + i + half, WEIGHTED ? w + i + half : NULL, vi, WEIGHTED, m); \
        const __m512 c = _mm512_maskz_loadu_ps(m, cos + i), s = _mm512_maskz_loadu_ps(m, sin + i); \
        ST16(out + i, FM0(x0, c, _mm512_mul_ps(x1, s)), m);                          \
        ST16(out + i + half, FM1(x1, c, _mm512_mul_ps(x0, s)), m);                   \
    } while (0)
#define NORM_ROT_SH_LOOP(NORM16, ST16, WEIGHTED, FM0, FM1)                           \
    {                                                                                \
        int64_t i = 0;                                                               \
        for (; i + 16 <= half; i += 16)                                              \
            NORM_ROT_SH_STEP(NORM16, ST16, WEIGHTED, FM0, FM1, (__mmask16)0xFFFF);   \
        if (i < half) {                                                              \
            const __mmask16 m = rope_avx512_lanes16(half - i);                       \
            NORM_ROT_SH_STEP(NORM16, ST16, WEIGHTED, FM0, FM1, m);                   \
        }                                                                            \
    }
#define NORM_ROT_IL_LOOP(NORM16, ST16, WEIGHTED, FMAS)                               \
    for (int64_t i = 0; i < head_dim; i += 16) {                                     \
        const __m512 v = NORM16(x + i, WEIGHTED ? w + i : NULL, vi, WEIGHTED, (__mmask16)0xFFFF); \
        const __m512 p = _mm512_mul_ps(_mm512_permute_ps(v, 0xB1), _mm512_loadu_ps(sin + i)); \
        ST16(out + i, FMAS(v, _mm512_loadu_ps(cos + i), p), (__mmask16)0xFFFF);      \
    }

/* x of storage type TI into out of storage type TO:
 * rope_norm_rot_{sh,il}_<IN>_<OUT>_avx512. */
#define ROPE_AVX512_NORM_ROT(IN, TI, OUT, TO)                                        \
    ROPE_AVX512 void rope_norm_rot_sh_##IN##_##OUT##_avx512(const void *xv, int64_t head_dim, double inv, \
                                                            const double *w, const float *cos, \
                                                            const float *sin, int inverse, void *outv) \
    {                                                                                \
        const TI *x = (const TI *)xv;                                                \
        TO *out = (TO *)outv;                                                        \
        const int64_t half = head_dim / 2;                                           \
        const __m512d vi = _mm512_set1_pd(inv);                                      \
        if (w && !inverse)                                                           \
            NORM_ROT_SH_LOOP(norm16_##IN, st16r_##OUT, 1, _mm512_fmsub_ps, _mm512_fmadd_ps) \
        else if (w)                                                                  \
            NORM_ROT_SH_LOOP(norm16_##IN, st16r_##OUT, 1, _mm512_fmadd_ps, _mm512_fmsub_ps) \
        else if (!inverse)                                                           \
            NORM_ROT_SH_LOOP(norm16_##IN, st16r_##OUT, 0, _mm512_fmsub_ps, _mm512_fmadd_ps) \
        else                                                                         \
            NORM_ROT_SH_LOOP(norm16_##IN, st16r_##OUT, 0, _mm512_fmadd_ps, _mm512_fmsub_ps) \
    }                                                                                \
    ROPE_AVX512 void rope_norm_rot_il_##IN##_##OUT##_avx512(const void *xv, int64_t head_dim, double inv, \
                                                            const double *w, const float *cos, \
                                                            const float *sin, int inverse, void *outv) \
    {                                                                                \
        const TI *x = (const TI *)xv;                                                \
        TO *out = (TO *)outv;                                                        \
        const __m512d vi = _mm512_set1_pd(inv);                                      \
        if (w && !inverse)                                                           \
            NORM_ROT_IL_LOOP(norm16_##IN, st16r_##OUT, 1, _mm512_fmaddsub_ps)        \
        else if (w)                                                                  \
            NORM_ROT_IL_LOOP(norm16_##IN, st16r_##OUT, 1, _mm512_fmsubadd_ps)        \
        else if (!inverse)                                                           \
            NORM_ROT_IL_LOOP(norm16_##IN, st16r_##OUT, 0, _mm512_fmaddsub_ps)        \
        else                                                                         \
            NORM_ROT_IL_LOOP(norm16_##IN, st16r_##OUT, 0, _mm512_fmsubadd_ps)        \
    }
#define ROPE_AVX512_NORM_ROT_TO(IN, TI)                                              \
    ROPE_AVX512_NORM_ROT(IN, TI, f32, float)                                         \
    ROPE_AVX512_NORM_ROT(IN, TI, f16, uint16_t)                                      \
    ROPE_AVX512_NORM_ROT(IN, TI, bf16, uint16_t)
ROPE_AVX512_NORM_ROT_TO(f32, float)
ROPE_AVX512_NORM_ROT_TO(f16, uint16_t)
ROPE_AVX512_NORM_ROT_TO(bf16, uint16_t)

/* ---- conversions ----------------------------------------------------------------- */

/* Steps of L elements, FULL(in + i, out + i), then the last ones masked,
 * PART(in + i, out + i, m) with m = LANES(n - i). */
#define ROPE_AVX512_CONVERT(ATTR, NAME, TI, TO, L, LANES, FULL, PART)                \
    ATTR void NAME(const void *inv_, int64_t n, void *outv)                          \
    {                                                                                \
        const TI *in = (const TI *)inv_;                                             \
        TO *out = (TO *)outv;                                                        \
        int64_t i = 0;                                                               \
        _Pragma("GCC unroll 2")                                                      \
        for (; i + L <= n; i += L)                                                   \
            FULL(in + i, out + i);                                                   \
        if (i < n)                                                                   \
            PART(in + i, out + i, LANES(n - i));                                     \
    }

ROPE_AVX512 static inline __m512 ld16_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
ROPE_AVX512 static inline __m512 ld16m_bf16(const uint16_t *p, __mmask16 m)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

#define WIDEN_F16(p, q) _mm512_storeu_ps(q, ld16_f16(p))
#define WIDEN_F16_M(p, q, m) _mm512_mask_storeu_ps(q, m, ld16m_f16(p, m))
#define WIDEN_BF16(p, q) _mm512_storeu_ps(q, ld16_bf16(p))
#define WIDEN_BF16_M(p, q, m) _mm512_mask_storeu_ps(q, m, ld16m_bf16(p, m))
ROPE_AVX512_CONVERT(ROPE_AVX512, rope_widen_f16_avx512, uint16_t, float, 16, rope_avx512_lanes16, WIDEN_F16,
                    WIDEN_F16_M)
ROPE_AVX512_CONVERT(ROPE_AVX512 static, widen_bf16_16, uint16_t, float, 16, rope_avx512_lanes16, WIDEN_BF16,
                    WIDEN_BF16_M)

/* bfloat16 32 at a time by two word permutes (above), then 16 at a time. */
ROPE_AVX512 void rope_widen_bf16_avx512(const void *xv, int64_t n, void *outv)
{
    const uint16_t *x = (const uint16_t *)xv;
    float *out = (float *)outv;
    const int64_t n32 = n & ~(int64_t)31;
    for (int64_t i = 0; i < n32; i += 32) {
        const __m512i v = _mm512_loadu_si512(x + i);
        _mm512_storeu_ps(out + i, bf16_widen_a(v));
        _mm512_storeu_ps(out + i + 16, bf16_widen_b(v));
    }
    widen_bf16_16(x + n32, n - n32, out + n32);
}

#define NARROW_F16(p, q) st16_f16(q, _mm512_loadu_ps(p))
#define NARROW_F16_M(p, q, m) st16m_f16(q, m, _mm512_maskz_loadu_ps(m, p))
#define NARROW_BF16(p, q) _mm256_storeu_si256((__m256i *)(q), bf16_narrow16_int(_mm512_loadu_ps(p), 0xFFFF))
#define NARROW_BF16_M(p, q, m) _mm256_mask_storeu_epi16(q, m, bf16_narrow16_int(_mm512_maskz_loadu_ps(m, p), m))
#define NARROW_F64(p, q) _mm512_storeu_pd(q, _mm512_cvtps_pd(_mm256_loadu_ps(p)))
#define NARROW_F64_M(p, q, m) _mm512_mask_storeu_pd(q, m, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p)))
ROPE_AVX512_CONVERT(ROPE_AVX512, rope_narrow_float_f16_avx512, float, uint16_t, 16, rope_avx512_lanes16,
                    NARROW_F16, NARROW_F16_M)
ROPE_AVX512_CONVERT(ROPE_AVX512, rope_narrow_float_bf16_avx512, float, uint16_t, 16, rope_avx512_lanes16,
                    NARROW_BF16, NARROW_BF16_M)
ROPE_AVX512_CONVERT(ROPE_AVX512, rope_narrow_float_f64_avx512, float, double, 8, rope_avx512_lanes8, NARROW_F64,
                    NARROW_F64_M)

#define NARROW_D_F32(p, q) st8_float(q, _mm512_loadu_pd(p))
#define NARROW_D_F32_M(p, q, m) st8m_float(q, m, _mm512_maskz_loadu_pd(m, p))
ROPE_AVX512_CONVERT(ROPE_AVX512, rope_narrow_double_f32_avx512, double, float, 8, rope_avx512_lanes8,
                    NARROW_D_F32, NARROW_D_F32_M)

/* ---- "avx512bf16": float32 to bfloat16 by vcvtne2ps2bf16 ---------------------------
 *
 * That instruction rounds to nearest even, as convert.h does, except for
 * two kinds of input: a float32 subnormal, which it treats as zero (a
 * normal float32 never rounds to a zero bfloat16, so its results hold a
 * zero word exactly where an input was zero or subnormal), and a NaN, whose
 * top bits it keeps and quiets where the integer rounding adds 0x7FFF + lsb
 * to all of its bits (a payload in the low half can carry: 0x7FFFFFFF gives
 * 0x8000). So a step of 32 results whose words hold a zero (w & 0x7FFF ==
 * 0) or a NaN (w & 0x7FFF > 0x7F80) -- (w & 0x7FFF) - 1 >= 0x7F80 as 16-bit
 * unsigned -- is done again by the integer rounding; the last elements
 * (fewer than 32) take the integer rounding, masked. */
ROPE_AVX512BF16 void rope_narrow_float_bf16_avx512bf16(const void *inv_, int64_t n, void *outv)
{
    const float *in = (const float *)inv_;
    uint16_t *out = (uint16_t *)outv;
    const __m512i magnitude = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
    const __m512i limit = _mm512_set1_epi16((short)0x7F80);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a = _mm512_loadu_ps(in + i), b = _mm512_loadu_ps(in + i + 16);
        const __m512i t = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* a: words 0..15, b: 16..31 */
        const __m512i m = _mm512_sub_epi16(_mm512_and_si512(t, magnitude), one);
        if (__builtin_expect(_mm512_cmpge_epu16_mask(m, limit) != 0, 0)) {
            _mm256_storeu_si256((__m256i *)(out + i), bf16_narrow16_int(a, 0xFFFF));
            _mm256_storeu_si256((__m256i *)(out + i + 16), bf16_narrow16_int(b, 0xFFFF));
        } else {
            _mm512_storeu_si512(out + i, t);
        }
    }
    for (; i < n; i += 16) {
        const __mmask16 m = rope_avx512_lanes16(n - i);
        NARROW_BF16_M(in + i, out + i, m);
    }
}

#endif
