/* AVX-512 rotation kernels for float16 storage (rotate_avx512.h says what
 * the AVX-512 kernels share).
 *
 * float16 is bound by its conversions on Zen 4: vcvtph2ps and vcvtps2ph
 * (register form, round to nearest even: the rounding of F16C and
 * convert.h) run on the two floating-point add/convert pipes at the same
 * cost per element for 256 and 512 bits (measured: 1.3-1.4 cycles per
 * 512-bit conversion, 0.7 per 256-bit one), and 512-bit ones are slower in
 * the kernel's dependency chain (split half 7.5-7.8 cycles per 32 elements
 * against 6.2-7.0 with 256-bit ones, measured). So:
 *   split half:  x0 = 16 pairs' first elements, x1 = their partners, as two
 *                sets of 8 lanes converted by 256-bit instructions (four
 *                conversions in flight each way), against the row as stored;
 *   interleaved: 512-bit, the vector as loaded ([x0 x1 x0 x1 ...], 8 pairs):
 *                y = fmaddsub(v, c', swap(v) * s') with the row duplicated
 *                once per token (c' = [c0 c0 c1 c1 ...], s' with the inverse
 *                sign); with half 64 the 16 duplicated vectors stay in
 *                registers across the token's heads (the AVX2 kernel reads
 *                them from the stack), otherwise they sit on the stack per
 *                chunk of pairs.
 * The swap costs the interleaved layout about a third more than split half
 * (it competes with the conversions; no form of it measured cheaper).
 * The last pairs of a head use masked loads and stores, which touch no
 * memory outside the pairs. The inverse rotation uses x1 * (-s) =
 * -(x1 * s) exactly, so the scalar roundings hold. */
#include "rotate_avx512.h"

#ifdef ROPE_HAVE_X86

/* ---- loads and stores: 8 lanes, whole and masked (16: rotate_avx512.h) ------ */

ROPE_AVX512 static inline __m256 ld8_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
ROPE_AVX512 static inline __m256 ld8m_f16(const uint16_t *p, __mmask8 m)
{
    return _mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, p));
}
ROPE_AVX512 static inline void st8_f16(uint16_t *p, __m256 v)
{
    __m128i h = _mm256_cvtps_ph(v, F16_RNE);
    ROPE_ZMM_IN_REGISTER(h);
    _mm_storeu_si128((__m128i *)p, h);
}
ROPE_AVX512 static inline void st8m_f16(uint16_t *p, __mmask8 m, __m256 v)
{
    __m128i h = _mm256_cvtps_ph(v, F16_RNE);
    ROPE_ZMM_IN_REGISTER(h);
    _mm_mask_storeu_epi16(p, m, h);
}

/* ---- split half ------------------------------------------------------------ */

/* 16 pairs at i (x0) and i + half (x1), as two sets of 8: four independent
 * conversions in, four out, per step. FM0/FM1: fmsub/fmadd forward,
 * fmadd/fmsub inverse (x1 * -s = -(x1 * s) exactly: the scalar roundings). */
#define SH_STEP16(FM0, FM1, x, y, i, half)                                           \
    do {                                                                             \
        const __m256 ca = _mm256_loadu_ps(cos + (i)), cb = _mm256_loadu_ps(cos + (i) + 8); \
        const __m256 sa = _mm256_loadu_ps(sin + (i)), sb = _mm256_loadu_ps(sin + (i) + 8); \
        const __m256 x0a = ld8_f16((x) + (i)), x0b = ld8_f16((x) + (i) + 8);         \
        const __m256 x1a = ld8_f16((x) + (i) + (half)), x1b = ld8_f16((x) + (i) + (half) + 8); \
        st8_f16((y) + (i), FM0(x0a, ca, _mm256_mul_ps(x1a, sa)));                    \
        st8_f16((y) + (i) + 8, FM0(x0b, cb, _mm256_mul_ps(x1b, sb)));                \
        st8_f16((y) + (i) + (half), FM1(x1a, ca, _mm256_mul_ps(x0a, sa)));           \
        st8_f16((y) + (i) + (half) + 8, FM1(x1b, cb, _mm256_mul_ps(x0b, sb)));       \
    } while (0)

/* Up to 8 pairs at i, masked to m. */
#define SH_STEP8M(FM0, FM1, x, y, i, half, m)                                        \
    do {                                                                             \
        const __m256 c = _mm256_maskz_loadu_ps(m, cos + (i));                        \
        const __m256 s = _mm256_maskz_loadu_ps(m, sin + (i));                        \
        const __m256 x0 = ld8m_f16((x) + (i), m), x1 = ld8m_f16((x) + (i) + (half), m); \
        st8m_f16((y) + (i), m, FM0(x0, c, _mm256_mul_ps(x1, s)));                    \
        st8m_f16((y) + (i) + (half), m, FM1(x1, c, _mm256_mul_ps(x0, s)));           \
    } while (0)

/* Every head, one direction: 16-pair steps (all four unrolled for half 64,
 * the common case), then the last pairs in up to two masked steps of 8. */
#define SH_HEADS(FM0, FM1)                                                           \
    if (half == 64) {                                                                \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            SH_STEP16(FM0, FM1, x, y, 0, 64);                                        \
            SH_STEP16(FM0, FM1, x, y, 16, 64);                                       \
            SH_STEP16(FM0, FM1, x, y, 32, 64);                                       \
            SH_STEP16(FM0, FM1, x, y, 48, 64);                                       \
        }                                                                            \
    } else {                                                                         \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            for (int64_t i = 0; i < n16; i += 16)                                    \
                SH_STEP16(FM0, FM1, x, y, i, half);                                  \
            if (ma)                                                                  \
                SH_STEP8M(FM0, FM1, x, y, n16, half, ma);                            \
            if (mb)                                                                  \
                SH_STEP8M(FM0, FM1, x, y, n16 + 8, half, mb);                        \
        }                                                                            \
    }

ROPE_AVX512 void rope_rot_sh_f16_avx512(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                       int64_t n_heads, const void *cosv, const void *sinv,
                                       int64_t half, int inverse)
{
    const uint16_t *x = (const uint16_t *)xv;
    uint16_t *y = (uint16_t *)yv;
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    const int64_t n16 = half & ~(int64_t)15;
    const int64_t r = half - n16; /* 0..15 pairs left */
    const __mmask8 ma = (__mmask8)(r >= 8 ? 0xFFu : (1u << r) - 1u);
    const __mmask8 mb = (__mmask8)(r > 8 ? (1u << (r - 8)) - 1u : 0u);
    if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
        SH_HEADS(_mm256_fmsub_ps, _mm256_fmadd_ps)
    else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */
        SH_HEADS(_mm256_fmadd_ps, _mm256_fmsub_ps)
}

/* ---- interleaved ----------------------------------------------------------- */

/* 8 pairs as loaded: even lanes x0*c - x1*s, odd lanes x1*c + x0*s, with c
 * and s duplicated per pair (s carrying the inverse sign). */
ROPE_AVX512 static inline __m512 il_rot8(__m512 v, __m512 c, __m512 s)
{
    const __m512 w = _mm512_permute_ps(v, 0xB1); /* x1 x0 x1 x0 ... */
    return _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(w, s));
}

/* [c0 c0 c1 c1 .. c7 c7] and [c8 c8 .. c15 c15] from 16 entries. */
ROPE_AVX512 static inline __m512 dup_lo(__m512 c)
{
    return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), c);
}
ROPE_AVX512 static inline __m512 dup_hi(__m512 c)
{
    return _mm512_permutexvar_ps(_mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), c);
}

/* Any half: the row duplicated on the stack, ROPE_AVX512_CHUNK pairs at a time;
 * 8-pair steps, then the last pairs masked. */
ROPE_AVX512 static void il_f16_any(const uint16_t *xv, uint16_t *yv, int64_t x_sh, int64_t y_sh,
                                   int64_t n_heads, const float *cos, const float *sin,
                                   int64_t half, __m512 sign)
{
    float cc[2 * ROPE_AVX512_CHUNK], ss[2 * ROPE_AVX512_CHUNK];
    for (int64_t i0 = 0; i0 < half; i0 += ROPE_AVX512_CHUNK) {
        const int64_t n = half - i0 < ROPE_AVX512_CHUNK ? half - i0 : ROPE_AVX512_CHUNK;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
            const __m512 c = _mm512_maskz_loadu_ps(m, cos + i0 + i);
            const __m512 s = _mm512_xor_ps(_mm512_maskz_loadu_ps(m, sin + i0 + i), sign);
            _mm512_storeu_ps(cc + 2 * i, dup_lo(c));
            _mm512_storeu_ps(cc + 2 * i + 16, dup_hi(c));
            _mm512_storeu_ps(ss + 2 * i, dup_lo(s));
            _mm512_storeu_ps(ss + 2 * i + 16, dup_hi(s));
        }
        const int64_t n8 = 2 * (n & ~(int64_t)7);                  /* elements in whole steps */
        const __mmask16 m = (__mmask16)((1u << (2 * (n & 7))) - 1u); /* the last pairs */
        const uint16_t *x = xv + 2 * i0;
        uint16_t *y = yv + 2 * i0;
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {
            for (int64_t j = 0; j < n8; j += 16)
                st16_f16(y + j, il_rot8(ld16_f16(x + j), _mm512_loadu_ps(cc + j), _mm512_loadu_ps(ss + j)));
            if (m)
                st16m_f16(y + n8, m, il_rot8(ld16m_f16(x + n8, m), _mm512_loadu_ps(cc + n8),
                                             _mm512_loadu_ps(ss + n8)));
        }
    }
}

/* half == 64: the duplicated row in 16 registers, each head unrolled. */
ROPE_AVX512 static void il_f16_64(const uint16_t *x, uint16_t *y, int64_t x_sh, int64_t y_sh,
                                  int64_t n_heads, const float *cos, const float *sin, __m512 sign)
{
    __m512 c[8], s[8];
    for (int g = 0; g < 4; g++) {
        const __m512 cg = _mm512_loadu_ps(cos + 16 * g);
        const __m512 sg = _mm512_xor_ps(_mm512_loadu_ps(sin + 16 * g), sign);
        c[2 * g] = dup_lo(cg);
        c[2 * g + 1] = dup_hi(cg);
        s[2 * g] = dup_lo(sg);
        s[2 * g + 1] = dup_hi(sg);
    }
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++)
            st16_f16(y + 16 * k, il_rot8(ld16_f16(x + 16 * k), c[k], s[k]));
    }
}

ROPE_AVX512 void rope_rot_il_f16_avx512(ROPE_ROT_PARAMS)
{
    const __m512 sign = _mm512_set1_ps(inverse ? -0.0f : 0.0f);
    if (half == 64)
        il_f16_64((const uint16_t *)x, (uint16_t *)y, x_sh, y_sh, n_heads, (const float *)cos,
                  (const float *)sin, sign);
    else
        il_f16_any((const uint16_t *)x, (uint16_t *)y, x_sh, y_sh, n_heads, (const float *)cos,
                   (const float *)sin, half, sign);
}

#endif
