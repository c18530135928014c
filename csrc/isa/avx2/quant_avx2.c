/* AVX2 quantisers of rope_rotate_quantised (kernels.h; scalar/quant.c is
 * their specification), bit-identical to the scalar ones for every input:
 *   amax       max |v| as integers: the bits of non-negative floats order
 *              as their values, and every NaN's |bits| exceed infinity's,
 *              so one integer max finds both the amax and whether a NaN
 *              was there (then the default NaN, as scalar);
 *   int8       v / s (a true division), NaN to 0, clipped to +-127, then
 *              vcvtps2dq, which rounds as rintf does (the current mode,
 *              ties to even by default; clipping first changes nothing);
 *   float8     v / scale, clamped to +-448, then to_e4m3's integer
 *              rounding on the bits, lane by lane, the subnormal lanes
 *              (below 2^-6) rounded by vcvtps2dq as rintf, NaN to 0x7F;
 *   q8_0       four blocks' maxima reduced together and their d and id
 *              in one xmm, d stored as float16 by F16C (which rounds as
 *              rope_f32_to_f16); roundf as the truncation of
 *              p + copysign(0.5 - 2^-25, p) (not of p + 0.5, which
 *              rounds 0.49999997 up to 1);
 *   dequantise int8 and q8_0 widened exactly and multiplied by the scale
 *              (only the scale can be NaN: no operand order to keep); the
 *              float8 value built from its bits as from_e4m3 does, and
 *              multiplied value first, as the scalar kernel compiles to
 *              with gcc (when both are NaN x86 keeps the first operand's),
 *              in asm so that the compiler cannot swap them.
 * The last values (fewer than 8) are masked loads and stack copies: no
 * access reaches past the arrays. */
#include <string.h>

#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

#define DEFAULT_NAN 0x7FC00000

/* The first k lanes (0 <= k <= 8) of p, the others 0; none past them read. */
ROPE_AVX2 static inline __m256 load_first(const float *p, int64_t k)
{
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, m);
}

/* |v| as integers (see above), and the running max of them. */
ROPE_AVX2 static inline __m256i abs_bits(__m256 v)
{
    return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
}

/* The max of 8 lanes in every lane. */
ROPE_AVX2 static inline __m256i hmax_bits(__m256i m)
{
    m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 1));
    m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
    return _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
}

/* amaxes as scalar/quant.c gives them from maxima of |bits|, lane by lane:
 * the default NaN where one is a NaN's. */
ROPE_AVX2 static inline __m256 amax_lanes(__m256i m)
{
    const __m256i nan = _mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7F800000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(m, _mm256_set1_epi32(DEFAULT_NAN), nan));
}

/* amax as scalar/quant.c gives it: the default NaN if any |v| is a NaN. */
ROPE_AVX2 static inline __m256 amax_of(__m256i m) { return amax_lanes(hmax_bits(m)); }

/* Four vectors of 8 int32 (each in -255..255) to 32 bytes in lane order;
 * US: unsigned saturation (float8 codes), else signed (int8). */
ROPE_AVX2 static inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d, int us)
{
    const __m256i ab = us ? _mm256_packus_epi32(a, b) : _mm256_packs_epi32(a, b);
    const __m256i cd = us ? _mm256_packus_epi32(c, d) : _mm256_packs_epi32(c, d);
    const __m256i q = us ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
    /* the packs work within 128-bit lanes: 4-byte groups back in order */
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
/* One vector of 8 int32 to 8 bytes (low half). */
ROPE_AVX2 static inline __m128i pack8(__m256i a, int us)
{
    const __m128i lo = _mm256_castsi256_si128(a), hi = _mm256_extracti128_si256(a, 1);
    const __m128i w = us ? _mm_packus_epi32(lo, hi) : _mm_packs_epi32(lo, hi);
    return us ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
}

/* ---- int8 ------------------------------------------------------------------ */

/* clip_int8(rintf(v / s)) in each lane, as int32. */
ROPE_AVX2 static inline __m256i q_int8(__m256 v, __m256 s)
{
    __m256 x = _mm256_div_ps(v, s);
    x = _mm256_and_ps(x, _mm256_cmp_ps(x, x, _CMP_ORD_Q)); /* NaN: 0 */
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(x);
}

ROPE_AVX2 void rope_quantise_int8_avx2(const float *in, int64_t n, void *outv, float *scale)
{
    int8_t *out = (int8_t *)outv;
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_epi32(m0, abs_bits(_mm256_loadu_ps(in + i)));
        m1 = _mm256_max_epi32(m1, abs_bits(_mm256_loadu_ps(in + i + 8)));
    }
    for (; i < n; i += 8)
        m0 = _mm256_max_epi32(m0, abs_bits(load_first(in + i, n - i < 8 ? n - i : 8)));
    const __m256 sv = _mm256_div_ps(amax_of(_mm256_max_epi32(m0, m1)), _mm256_set1_ps(127.0f));
    i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = q_int8(_mm256_loadu_ps(in + i), sv), b = q_int8(_mm256_loadu_ps(in + i + 8), sv);
        const __m256i c = q_int8(_mm256_loadu_ps(in + i + 16), sv), d = q_int8(_mm256_loadu_ps(in + i + 24), sv);
        _mm256_storeu_si256((__m256i *)(out + i), pack32(a, b, c, d, 0));
    }
    for (; i + 8 <= n; i += 8)
        _mm_storel_epi64((__m128i *)(out + i), pack8(q_int8(_mm256_loadu_ps(in + i), sv), 0));
    if (i < n) {
        unsigned char t[8];
        _mm_storel_epi64((__m128i *)t, pack8(q_int8(load_first(in + i, n - i), sv), 0));
        memcpy(out + i, t, (size_t)(n - i));
    }
    *scale = _mm256_cvtss_f32(sv);
}

ROPE_AVX2 void rope_dequantise_int8_avx2(const void *inv, int64_t n, float scale, float *out)
{
    const int8_t *q = (const int8_t *)inv;
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(q + i));
        const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), s));
        _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), s));
        _mm256_storeu_ps(out + i + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), s));
        _mm256_storeu_ps(out + i + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), s));
    }
    for (; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        int8_t t[8] = {0};
        memcpy(t, q + i, (size_t)k);
        const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)t))), s);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(out + i, m, v);
    }
}

/* ---- float8 e4m3fn --------------------------------------------------------- */

/* to_e4m3(v / s) in each lane, as int32 (0..255). */
ROPE_AVX2 static inline __m256i q_fp8(__m256 v, __m256 s)
{
    const __m256 x = _mm256_div_ps(v, s);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256 c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-448.0f)), _mm256_set1_ps(448.0f));
    const __m256i u = _mm256_castps_si256(c);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    const __m256i ax = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below 2^-6: rintf(|c| * 512), the subnormal's m (exact product) */
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), ax);
    const __m256i qs = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(ax), _mm256_set1_ps(512.0f)));
    /* else rebias 127 to 7, round to nearest even at bit 20 */
    const __m256i r = _mm256_sub_epi32(ax, _mm256_set1_epi32(120 << 23));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(1));
    const __m256i qn = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(r, _mm256_set1_epi32(0x7FFFF)), lsb), 20);
    const __m256i q = _mm256_or_si256(_mm256_blendv_epi8(qn, qs, small), sign);
    return _mm256_blendv_epi8(q, _mm256_set1_epi32(0x7F), nan);
}

ROPE_AVX2 void rope_quantise_fp8_avx2(const float *in, int64_t n, void *outv, float *scale)
{
    uint8_t *out = (uint8_t *)outv;
    const __m256 s = _mm256_set1_ps(*scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = q_fp8(_mm256_loadu_ps(in + i), s), b = q_fp8(_mm256_loadu_ps(in + i + 8), s);
        const __m256i c = q_fp8(_mm256_loadu_ps(in + i + 16), s), d = q_fp8(_mm256_loadu_ps(in + i + 24), s);
        _mm256_storeu_si256((__m256i *)(out + i), pack32(a, b, c, d, 1));
    }
    for (; i + 8 <= n; i += 8)
        _mm_storel_epi64((__m128i *)(out + i), pack8(q_fp8(_mm256_loadu_ps(in + i), s), 1));
    if (i < n) {
        unsigned char t[8];
        _mm_storel_epi64((__m128i *)t, pack8(q_fp8(load_first(in + i, n - i), s), 1));
        memcpy(out + i, t, (size_t)(n - i));
    }
}

/* a * b with a the first operand, whose NaN x86 keeps when both are NaN. */
ROPE_AVX2 static inline __m256 mul_in_order(__m256 a, __m256 b)
{
    __m256 r;
    __asm__("vmulps %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
    return r;
}

/* from_e4m3(c) * s for 8 codes c (int32 lanes, 0..255). */
ROPE_AVX2 static inline __m256 dq_fp8(__m256i c, __m256 s)
{
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256i a = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    /* exponent and mantissa shifted into place, the exponent rebiased */
    const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(a, 20), _mm256_set1_epi32(120 << 23));
    /* exponent 0: m * 2^-9, exact */
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, _mm256_set1_epi32(7))),
                                     _mm256_set1_ps(0x1p-9f));
    const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), a);
    __m256i v = _mm256_or_si256(_mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub), sign);
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(DEFAULT_NAN), _mm256_cmpeq_epi32(a, _mm256_set1_epi32(0x7F)));
    return mul_in_order(_mm256_castsi256_ps(v), s);
}

ROPE_AVX2 void rope_dequantise_fp8_avx2(const void *inv, int64_t n, float scale, float *out)
{
    const uint8_t *q = (const uint8_t *)inv;
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(q + i));
        _mm256_storeu_ps(out + i, dq_fp8(_mm256_cvtepu8_epi32(b), s));
        _mm256_storeu_ps(out + i + 8, dq_fp8(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)), s));
    }
    for (; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        uint8_t t[8] = {0};
        memcpy(t, q + i, (size_t)k);
        const __m256 v = dq_fp8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)t)), s);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(out + i, m, v);
    }
}

/* ---- q8_0 ------------------------------------------------------------------ */

/* roundf(clip(v * id)) in each lane, as int32, except that a NaN product
 * gives 0x80000000 (vcvttps2dq's answer), which q8_0_bytes makes 0. The
 * clip's constants come first, so a NaN passes through both (vmaxps and
 * vminps return the second operand); clipped first: roundf of a value in
 * (127, 127.5) is 127 either way, and no infinity reaches the rounding.
 * roundf is trunc(p + copysign(0.5 - 2^-25, p)), exact for every
 * |p| <= 2^23 (checked over all of them); with 0.5 itself the add would
 * round 0.49999997 up to 1. */
ROPE_AVX2 static inline __m256i q_q8_0(__m256 v, __m256 id)
{
    __m256 p = _mm256_mul_ps(v, id);
    p = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), p));
    const __m256 half = _mm256_or_ps(_mm256_and_ps(p, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(0x1.fffffep-2f));
    return _mm256_cvttps_epi32(_mm256_add_ps(p, half));
}

/* The 32 bytes of a block from q_q8_0 of its four vectors: a NaN's
 * 0x80000000 saturates to -128, which no other value gives, then 0. */
ROPE_AVX2 static inline __m256i q8_0_bytes(const float *x, __m256 id)
{
    const __m256i q = pack32(q_q8_0(_mm256_loadu_ps(x), id), q_q8_0(_mm256_loadu_ps(x + 8), id),
                             q_q8_0(_mm256_loadu_ps(x + 16), id), q_q8_0(_mm256_loadu_ps(x + 24), id), 0);
    return _mm256_andnot_si256(_mm256_cmpeq_epi8(q, _mm256_set1_epi8(-128)), q);
}

/* max |bits| of the 32 values at x, 8 lanes. */
ROPE_AVX2 static inline __m256i block_abs(const float *x)
{
    return _mm256_max_epi32(_mm256_max_epi32(abs_bits(_mm256_loadu_ps(x)), abs_bits(_mm256_loadu_ps(x + 8))),
                            _mm256_max_epi32(abs_bits(_mm256_loadu_ps(x + 16)), abs_bits(_mm256_loadu_ps(x + 24))));
}

/* Four blocks at a time (the last 1 to 3 with zeros for the missing ones):
 * their 8-lane maxima reduced together, to lanes 0, 4, 2, 6 for blocks
 * 0 to 3, then d and id of all four in one xmm, one vdivps each. */
ROPE_AVX2 void rope_quantise_q8_0_avx2(const float *in, int64_t n, void *outv, float *scale)
{
    (void)scale;
    unsigned char *out = (unsigned char *)outv;
    const int64_t blocks = n / ROPE_Q8_0_VALUES;
    for (int64_t b = 0; b < blocks; b += 4) {
        const int k = blocks - b < 4 ? (int)(blocks - b) : 4;
        const float *x = in + b * ROPE_Q8_0_VALUES;
        unsigned char *blk = out + b * ROPE_Q8_0_BYTES;
        const __m256i zero = _mm256_setzero_si256();
        const __m256i a0 = block_abs(x), a1 = k > 1 ? block_abs(x + 32) : zero;
        const __m256i a2 = k > 2 ? block_abs(x + 64) : zero, a3 = k > 3 ? block_abs(x + 96) : zero;
        /* [a0 | a1] and [a2 | a3], each half one block's 4 partial maxima */
        const __m256i t01 = _mm256_max_epi32(_mm256_permute2x128_si256(a0, a1, 0x20), _mm256_permute2x128_si256(a0, a1, 0x31));
        const __m256i t23 = _mm256_max_epi32(_mm256_permute2x128_si256(a2, a3, 0x20), _mm256_permute2x128_si256(a2, a3, 0x31));
        /* lanes 0-1: a0, 2-3: a2, 4-5: a1, 6-7: a3, 2 partial maxima each */
        __m256i m = _mm256_max_epi32(
            _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(t01), _mm256_castsi256_ps(t23), 0x44)),
            _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(t01), _mm256_castsi256_ps(t23), 0xEE)));
        m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
        const __m128 amax = _mm256_castps256_ps128(
            _mm256_permutevar8x32_ps(amax_lanes(m), _mm256_setr_epi32(0, 4, 2, 6, 0, 0, 0, 0)));
        const __m128 d = _mm_div_ps(amax, _mm_set1_ps(127.0f));
        /* id = d != 0 ? 1 / d : 0 (a NaN d is != 0: id NaN, as scalar) */
        const __m128 id = _mm_and_ps(_mm_div_ps(_mm_set1_ps(1.0f), d), _mm_cmp_ps(d, _mm_setzero_ps(), _CMP_NEQ_UQ));
        const uint64_t dh = (uint64_t)_mm_cvtsi128_si64(_mm_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256 ids = _mm256_castps128_ps256(id);
        for (int j = 0; j < k; j++) {
            const uint16_t h = (uint16_t)(dh >> (16 * j));
            memcpy(blk + j * ROPE_Q8_0_BYTES, &h, 2);
            const __m256 idj = _mm256_permutevar8x32_ps(ids, _mm256_set1_epi32(j));
            _mm256_storeu_si256((__m256i *)(blk + j * ROPE_Q8_0_BYTES + 2), q8_0_bytes(x + 32 * j, idj));
        }
    }
}

ROPE_AVX2 void rope_dequantise_q8_0_avx2(const void *inv, int64_t n, float scale, float *out)
{
    (void)scale;
    const unsigned char *in = (const unsigned char *)inv;
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const unsigned char *blk = in + b * ROPE_Q8_0_BYTES;
        float *o = out + b * ROPE_Q8_0_VALUES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        /* F16C widens as rope_f16_to_f32 (NaNs quieted, payload kept) */
        const __m256 d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dh)));
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 2));
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
        _mm256_storeu_ps(o + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
        _mm256_storeu_ps(o + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
    }
}

#endif /* ROPE_HAVE_X86 */
