/* AVX-512 quantisers of rope_rotate_quantised (kernels.h; scalar/quant.c
 * is their specification), bit-identical to the scalar ones for every
 * input, for the "avx512" entry. The steps are the AVX2 kernels'
 * (quant_avx2.c says why each matches), 16 lanes per vector:
 *   amax       an integer max of |bits|, which also tells a NaN (then the
 *              default NaN, as scalar);
 *   int8       a true division, NaN to 0, clipped to +-127, vcvtps2dq
 *              (rounds as rintf), vpmovdb;
 *   float8     to_e4m3's integer rounding on the clamped bits, the lanes
 *              below 2^-6 by vcvtps2dq, NaN to 0x7F;
 *   q8_0       four blocks' maxima reduced together, their d and id in
 *              one xmm, d stored through F16C; roundf as the truncation
 *              of p + copysign(0.5 - 2^-25, p);
 *   dequantise int8 and q8_0 widened exactly times the scale; float8 built
 *              from its bits and multiplied value first, as the scalar
 *              kernel compiles to (x86 keeps the first operand's NaN when
 *              both are), in asm so that the compiler cannot swap them.
 * The last values (fewer than 16) are masked loads and stores: a disabled
 * lane is neither read nor written. */
#include <string.h>

#include "rotate_avx512.h"

#ifdef ROPE_HAVE_X86

#define DEFAULT_NAN 0x7FC00000

/* The first k lanes, 0 <= k <= 16. */
static inline __mmask16 first_lanes(int64_t k) { return (__mmask16)((1u << k) - 1u); }

ROPE_AVX512 static inline __m512i abs_bits(__m512 v)
{
    return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
}

/* amaxes from maxima of |bits|, lane by lane: the default NaN where one is a NaN's. */
ROPE_AVX512 static inline __m512 amax_lanes(__m512i m)
{
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(m, _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(m, nan, _mm512_set1_epi32(DEFAULT_NAN)));
}

/* amax from the max of |bits| (every lane). */
ROPE_AVX512 static inline __m512 amax_of(__m512i m)
{
    m = _mm512_max_epi32(m, _mm512_shuffle_i32x4(m, m, 0x4E));
    m = _mm512_max_epi32(m, _mm512_shuffle_i32x4(m, m, 0xB1));
    m = _mm512_max_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0x4E));
    m = _mm512_max_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0xB1));
    return amax_lanes(m);
}

/* ---- int8 ------------------------------------------------------------------ */

/* clip_int8(rintf(v / s)) in each lane, as bytes. */
ROPE_AVX512 static inline __m128i q_int8(__m512 v, __m512 s)
{
    __m512 x = _mm512_div_ps(v, s);
    x = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x); /* NaN: 0 */
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(x));
}

ROPE_AVX512 void rope_quantise_int8_avx512(const float *in, int64_t n, void *outv, float *scale)
{
    int8_t *out = (int8_t *)outv;
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_epi32(m0, abs_bits(_mm512_loadu_ps(in + i)));
        m1 = _mm512_max_epi32(m1, abs_bits(_mm512_loadu_ps(in + i + 16)));
    }
    for (; i < n; i += 16)
        m0 = _mm512_max_epi32(m0, abs_bits(_mm512_maskz_loadu_ps(first_lanes(n - i < 16 ? n - i : 16), in + i)));
    const __m512 sv = _mm512_div_ps(amax_of(_mm512_max_epi32(m0, m1)), _mm512_set1_ps(127.0f));
    i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m128i a = q_int8(_mm512_loadu_ps(in + i), sv), b = q_int8(_mm512_loadu_ps(in + i + 16), sv);
        const __m128i c = q_int8(_mm512_loadu_ps(in + i + 32), sv), d = q_int8(_mm512_loadu_ps(in + i + 48), sv);
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_set_m128i(b, a));
        _mm256_storeu_si256((__m256i *)(out + i + 32), _mm256_set_m128i(d, c));
    }
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128((__m128i *)(out + i), q_int8(_mm512_loadu_ps(in + i), sv));
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        _mm_mask_storeu_epi8(out + i, m, q_int8(_mm512_maskz_loadu_ps(m, in + i), sv));
    }
    *scale = _mm512_cvtss_f32(sv);
}

/* (float)q * s for 16 int8 q. */
ROPE_AVX512 static inline __m512 dq_int8(__m128i q, __m512 s)
{
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), s);
}

ROPE_AVX512 void rope_dequantise_int8_avx512(const void *inv, int64_t n, float scale, float *out)
{
    const int8_t *q = (const int8_t *)inv;
    const __m512 s = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(q + i));
        _mm512_storeu_ps(out + i, dq_int8(_mm256_castsi256_si128(b), s));
        _mm512_storeu_ps(out + i + 16, dq_int8(_mm256_extracti128_si256(b, 1), s));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i < 16 ? n - i : 16);
        _mm512_mask_storeu_ps(out + i, m, dq_int8(_mm_maskz_loadu_epi8(m, q + i), s));
    }
}

/* ---- float8 e4m3fn --------------------------------------------------------- */

/* to_e4m3(v / s) in each lane, as bytes. */
ROPE_AVX512 static inline __m128i q_fp8(__m512 v, __m512 s)
{
    const __m512 x = _mm512_div_ps(v, s);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-448.0f)), _mm512_set1_ps(448.0f));
    const __m512i u = _mm512_castps_si512(c);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const __m512i ax = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* below 2^-6: rintf(|c| * 512); else rebias, round to even at bit 20 */
    const __mmask16 small = _mm512_cmplt_epi32_mask(ax, _mm512_set1_epi32(0x3C800000));
    const __m512i qs = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(ax), _mm512_set1_ps(512.0f)));
    const __m512i r = _mm512_sub_epi32(ax, _mm512_set1_epi32(120 << 23));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(1));
    const __m512i qn = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(r, _mm512_set1_epi32(0x7FFFF)), lsb), 20);
    const __m512i q = _mm512_or_si512(_mm512_mask_mov_epi32(qn, small, qs), sign);
    return _mm512_cvtepi32_epi8(_mm512_mask_mov_epi32(q, nan, _mm512_set1_epi32(0x7F)));
}

ROPE_AVX512 void rope_quantise_fp8_avx512(const float *in, int64_t n, void *outv, float *scale)
{
    uint8_t *out = (uint8_t *)outv;
    const __m512 s = _mm512_set1_ps(*scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m128i a = q_fp8(_mm512_loadu_ps(in + i), s), b = q_fp8(_mm512_loadu_ps(in + i + 16), s);
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_set_m128i(b, a));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i < 16 ? n - i : 16);
        _mm_mask_storeu_epi8(out + i, m, q_fp8(_mm512_maskz_loadu_ps(m, in + i), s));
    }
}

/* a * b with a the first operand, whose NaN x86 keeps when both are NaN. */
ROPE_AVX512 static inline __m512 mul_in_order(__m512 a, __m512 b)
{
    __m512 r;
    __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}

/* from_e4m3(c) * s for 16 codes. */
ROPE_AVX512 static inline __m512 dq_fp8(__m128i codes, __m512 s)
{
    const __m512i c = _mm512_cvtepu8_epi32(codes);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    const __m512i a = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(a, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(c, _mm512_set1_epi32(7))),
                                     _mm512_set1_ps(0x1p-9f)); /* m * 2^-9, exact */
    const __mmask16 is_sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(8));
    __m512i v = _mm512_or_si512(_mm512_mask_mov_epi32(normal, is_sub, _mm512_castps_si512(sub)), sign);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(DEFAULT_NAN));
    return mul_in_order(_mm512_castsi512_ps(v), s);
}

ROPE_AVX512 void rope_dequantise_fp8_avx512(const void *inv, int64_t n, float scale, float *out)
{
    const uint8_t *q = (const uint8_t *)inv;
    const __m512 s = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(q + i));
        _mm512_storeu_ps(out + i, dq_fp8(_mm256_castsi256_si128(b), s));
        _mm512_storeu_ps(out + i + 16, dq_fp8(_mm256_extracti128_si256(b, 1), s));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i < 16 ? n - i : 16);
        _mm512_mask_storeu_ps(out + i, m, dq_fp8(_mm_maskz_loadu_epi8(m, q + i), s));
    }
}

/* ---- q8_0 ------------------------------------------------------------------ */

/* clip_int8(roundf(v * id)) in each lane, as bytes. The clip's constants
 * come first, so a NaN passes through both (vmaxps/vminps return the
 * second operand); clipped first, as in quant_avx2.c: the same result, and
 * no infinity in the rounding. roundf is trunc(p + copysign(0.5 - 2^-25, p)),
 * exact for every |p| <= 2^23 (checked over all of them), and vcvttps2dq
 * makes a NaN 0x80000000, whose low byte, which vpmovdb keeps, is 0. */
ROPE_AVX512 static inline __m128i q_q8_0(__m512 v, __m512 id)
{
    __m512 p = _mm512_mul_ps(v, id);
    p = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-127.0f), p));
    const __m512i half = _mm512_ternarylogic_epi32(_mm512_castps_si512(p), _mm512_set1_epi32((int)0x80000000u),
                                                   _mm512_castps_si512(_mm512_set1_ps(0x1.fffffep-2f)),
                                                   0xEA); /* (p & sign) | (0.5 - 2^-25) */
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_add_ps(p, _mm512_castsi512_ps(half))));
}

/* Blocks b0 .. b0+k-1 (k <= 4) of the 4 starting at x, whose max |bits| are
 * in the low lane of chunk b of m (any lanes of the chunks past k): d per
 * block in an xmm, one vdivps for all four, stored as float16; the bytes
 * of each block from its id broadcast. */
ROPE_AVX512 static inline void q8_0_blocks(const float *x, unsigned char *blk, int k, __m512i m)
{
    const __m128 amax = _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), amax_lanes(m)));
    const __m128 d = _mm_div_ps(amax, _mm_set1_ps(127.0f));
    /* id = d != 0 ? 1 / d : 0 (a NaN d is != 0: id NaN, as scalar) */
    const __m128 id = _mm_maskz_div_ps(_mm_cmp_ps_mask(d, _mm_setzero_ps(), _CMP_NEQ_UQ), _mm_set1_ps(1.0f), d);
    const uint64_t dh = (uint64_t)_mm_cvtsi128_si64(_mm_cvtps_ph(d, F16_RNE));
    const __m512 ids = _mm512_castps128_ps512(id);
    for (int b = 0; b < k; b++) {
        const uint16_t h = (uint16_t)(dh >> (16 * b));
        memcpy(blk + b * ROPE_Q8_0_BYTES, &h, 2);
        const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), ids);
        const __m128i lo = q_q8_0(_mm512_loadu_ps(x + 32 * b), idb), hi = q_q8_0(_mm512_loadu_ps(x + 32 * b + 16), idb);
        _mm256_storeu_si256((__m256i *)(blk + b * ROPE_Q8_0_BYTES + 2), _mm256_set_m128i(hi, lo));
    }
}

/* max |bits| of the 32 values at x. */
ROPE_AVX512 static inline __m512i block_abs(const float *x)
{
    return _mm512_max_epi32(abs_bits(_mm512_loadu_ps(x)), abs_bits(_mm512_loadu_ps(x + 16)));
}

/* Four blocks at a time: their 16-lane maxima reduced together, block b's
 * to chunk b (two rounds of 128-bit shuffles), then within the chunks. */
ROPE_AVX512 void rope_quantise_q8_0_avx512(const float *in, int64_t n, void *outv, float *scale)
{
    (void)scale;
    unsigned char *out = (unsigned char *)outv;
    const int64_t blocks = n / ROPE_Q8_0_VALUES;
    for (int64_t b = 0; b < blocks; b += 4) {
        const int k = blocks - b < 4 ? (int)(blocks - b) : 4;
        const float *x = in + b * ROPE_Q8_0_VALUES;
        const __m512i zero = _mm512_setzero_si512();
        const __m512i a0 = block_abs(x), a1 = k > 1 ? block_abs(x + 32) : zero;
        const __m512i a2 = k > 2 ? block_abs(x + 64) : zero, a3 = k > 3 ? block_abs(x + 96) : zero;
        const __m512i t01 = _mm512_max_epi32(_mm512_shuffle_i32x4(a0, a1, 0x44), _mm512_shuffle_i32x4(a0, a1, 0xEE));
        const __m512i t23 = _mm512_max_epi32(_mm512_shuffle_i32x4(a2, a3, 0x44), _mm512_shuffle_i32x4(a2, a3, 0xEE));
        __m512i m = _mm512_max_epi32(_mm512_shuffle_i32x4(t01, t23, 0x88), _mm512_shuffle_i32x4(t01, t23, 0xDD));
        m = _mm512_max_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0x4E));
        m = _mm512_max_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0xB1));
        q8_0_blocks(x, out + b * ROPE_Q8_0_BYTES, k, m);
    }
}

ROPE_AVX512 void rope_dequantise_q8_0_avx512(const void *inv, int64_t n, float scale, float *out)
{
    (void)scale;
    const unsigned char *in = (const unsigned char *)inv;
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const unsigned char *blk = in + b * ROPE_Q8_0_BYTES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        /* F16C widens as rope_f16_to_f32 (NaNs quieted, payload kept) */
        const __m512 d = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dh)));
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 2));
        _mm512_storeu_ps(out + b * ROPE_Q8_0_VALUES, dq_int8(_mm256_castsi256_si128(q), d));
        _mm512_storeu_ps(out + b * ROPE_Q8_0_VALUES + 16, dq_int8(_mm256_extracti128_si256(q, 1), d));
    }
}

#endif /* ROPE_HAVE_X86 */
