/* AVX-512 rotation kernels for bfloat16 storage (rotate_avx512.h says what
 * the AVX-512 kernels share), for the "avx512" entry (integer rounding) and
 * the "avx512bf16" entry (vcvtne2ps2bf16).
 *
 * Widening is exact and needs no conversion instruction:
 *   interleaved: a 32-bit lane is one pair (x0 low, x1 high): shifting it
 *                left by 16 gives x0 as float32, masking off the low half
 *                gives x1; 16 pairs per vector against the row as stored;
 *   split half:  32 pairs per step, x0 and x1 vectors widened in memory
 *                order (one word permute per 16 elements, zeroing the low
 *                halves), against the row as stored.
 * Narrowing:
 *   "avx512":     (u + 0x7FFF + lsb) >> 16 on the bits, as convert.h, the
 *                 0x7FFF + lsb formed without a shift, and one word permute
 *                 picking the rounded high halves;
 *   "avx512bf16": vcvtne2ps2bf16 of two result vectors (split half: already
 *                 in memory order; interleaved: one word permute). That
 *                 instruction treats float32 subnormals as zero and flushes
 *                 (documented; on Zen 4 0x007FFFFF gives 0x0000 where round
 *                 to nearest even gives 0x0080, measured), so any zero word
 *                 among the stored ones (a zero or subnormal float32: a
 *                 normal one never rounds to zero) sends those vectors to
 *                 the integer rounding: one mask test per 32 results. Its
 *                 NaNs are the input's top bits, quieted: the bits of the
 *                 integer rounding for the NaNs a rotation makes from
 *                 bfloat16 data and finite rows (convert.h); a token whose
 *                 row holds a NaN (a caller's table) takes the "avx512"
 *                 kernel.
 * Both are bit-identical to the scalar kernel. With half 64 the token's row
 * (8 vectors) stays in registers across its heads, sin negated once for
 * the inverse rotation; other lengths read the row per step, in one loop per
 * direction (x1 * -s = -(x1 * s) exactly), and the last pairs of a head use
 * masked loads and stores, which touch no memory outside the pairs.
 *
 * On Zen 4 a 512-bit FMA takes both FMA pipes, so the four multiplies and
 * fused multiply-adds per 32 elements cost 4 cycles at least; the mask test
 * runs on the same pipes. Measured, one token's 8 heads in L1: about 6.6
 * cycles per 32 elements with vcvtne2ps2bf16, 8 with the integer rounding,
 * 10-11 for the AVX2 kernels. */
#include "rotate_avx512.h"

#ifdef ROPE_HAVE_X86

/* ---- widening and narrowing ---------------------------------------------- */

/* The low (lo) and high (hi) bfloat16 of each 32-bit lane as float32. */
ROPE_AVX512 static inline __m512 bf16_lo(__m512i v)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
ROPE_AVX512 static inline __m512 bf16_hi(__m512i v)
{
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The rounded high halves of two vectors' lanes, by a word index (one permute). */
#define BF16_PICK(a, idx, b) _mm512_permutex2var_epi16(bf16_round_hi(a), idx, bf16_round_hi(b))

/* Narrowing. PACK(lo, hi, tp): lanes bf16(lo) | bf16(hi) << 16 (interleaved
 * pairs), tp the lanes that will be stored; JOIN(a, b, tm): elements 0..15
 * from a and 16..31 from b in memory order (split half), tm the words that
 * will be stored. The fix-up test ignores the others (zeros, when masked). */
ROPE_AVX512 static inline __m512i bf16_pack_int(__m512 lo, __m512 hi, __mmask16 tp)
{
    (void)tp;
    const __m512i idx = _mm512_set_epi16(63, 31, 61, 29, 59, 27, 57, 25, 55, 23, 53, 21, 51, 19, 49, 17,
                                         47, 15, 45, 13, 43, 11, 41, 9, 39, 7, 37, 5, 35, 3, 33, 1);
    return BF16_PICK(lo, idx, hi);
}
ROPE_AVX512 static inline __m512i bf16_join_int(__m512 a, __m512 b, __mmask32 tm)
{
    (void)tm;
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                         31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return BF16_PICK(a, idx, b);
}

/* vcvtne2ps2bf16 of a (words 0..15) and b (16..31); any zero word among
 * those tested means a zero or subnormal float32 there, which that
 * instruction may get wrong: then the integer rounding (rare: data or
 * results below 2**-126, or exact zeros). */
#define BF16_HW(a, b, tm, FIXUP)                                                     \
    const __m512i t = (__m512i)_mm512_cvtne2ps_pbh(b, a);                            \
    if (__builtin_expect(_mm512_mask_testn_epi16_mask(tm, t, _mm512_set1_epi16(0x7FFF)) != 0, 0)) \
        return FIXUP(a, b, tm);

ROPE_AVX512BF16 static inline __m512i bf16_pack_hw(__m512 lo, __m512 hi, __mmask16 tp)
{
    /* t holds lane k's results at words k and 16 + k */
    BF16_HW(lo, hi, (__mmask32)tp | (__mmask32)tp << 16, bf16_pack_int)
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, t);
}
ROPE_AVX512BF16 static inline __m512i bf16_join_hw(__m512 a, __m512 b, __mmask32 tm)
{
    BF16_HW(a, b, tm, bf16_join_int)
    return t; /* already in memory order */
}

ROPE_AVX512BF16 static inline __m256i bf16_narrow16_hw(__m512 v, __mmask16 tm)
{
    const __m256i t = (__m256i)_mm512_cvtneps_pbh(v);
    if (__builtin_expect(_mm256_mask_testn_epi16_mask(tm, t, _mm256_set1_epi16(0x7FFF)) != 0, 0))
        return bf16_narrow16_int(v, tm);
    return t;
}

/* ---- steps ------------------------------------------------------------------ */

/* FM0/FM1 are fmsub/fmadd forward and fmadd/fmsub inverse (with the sin row
 * as stored: x1*s exact negation, so the scalar roundings), or fmsub/fmadd
 * with a negated row (the half-64 kernels). LD/ST: whole vectors, or masked
 * to the words in m. */

/* Interleaved, 16 pairs at element e. */
#define IL_STEP(PACK, FM0, FM1, LD, ST, x, y, e, c, s)                               \
    do {                                                                             \
        __m512i v = LD((x) + (e));                                                   \
        ROPE_ZMM_IN_REGISTER(v);                                                     \
        const __m512 x0 = bf16_lo(v), x1 = bf16_hi(v);                               \
        ST((y) + (e), PACK(FM0(x0, c, _mm512_mul_ps(x1, s)), FM1(x1, c, _mm512_mul_ps(x0, s)), mp)); \
    } while (0)

/* Split half, 32 pairs at i: pairs i..i+15 against (ca, sa), the next 16
 * against (cb, sb). */
#define SH_STEP(JOIN, FM0, FM1, LD, ST, x, y, i, half, ca, cb, sa, sb)               \
    do {                                                                             \
        const __m512i v0 = LD((x) + (i)), v1 = LD((x) + (i) + (half));               \
        const __m512 x0a = bf16_widen_a(v0), x0b = bf16_widen_b(v0);                 \
        const __m512 x1a = bf16_widen_a(v1), x1b = bf16_widen_b(v1);                 \
        ST((y) + (i), JOIN(FM0(x0a, ca, _mm512_mul_ps(x1a, sa)),                     \
                           FM0(x0b, cb, _mm512_mul_ps(x1b, sb)), m));                \
        ST((y) + (i) + (half), JOIN(FM1(x1a, ca, _mm512_mul_ps(x0a, sa)),            \
                                    FM1(x1b, cb, _mm512_mul_ps(x0b, sb)), m));       \
    } while (0)

/* Split half, up to 16 pairs at i (word mask m16), from 256-bit loads. */
#define SH_STEP16(NARROW16, FM0, FM1, x, y, i, half, m16)                            \
    do {                                                                             \
        const __m512 c = _mm512_maskz_loadu_ps(m16, cos + (i));                      \
        const __m512 s = _mm512_maskz_loadu_ps(m16, sin + (i));                      \
        const __m512 x0 = bf16_widen_a(_mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m16, (x) + (i)))); \
        const __m512 x1 = bf16_widen_a(_mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m16, (x) + (i) + (half)))); \
        _mm256_mask_storeu_epi16((y) + (i), m16, NARROW16(FM0(x0, c, _mm512_mul_ps(x1, s)), m16)); \
        _mm256_mask_storeu_epi16((y) + (i) + (half), m16, NARROW16(FM1(x1, c, _mm512_mul_ps(x0, s)), m16)); \
    } while (0)

#define LD_FULL(p) _mm512_loadu_si512((const void *)(p))
#define ST_FULL(p, v) _mm512_storeu_si512((void *)(p), v)
#define LD_MASK(p) _mm512_maskz_loadu_epi16(m, (const void *)(p))
#define ST_MASK(p, v) _mm512_mask_storeu_epi16((void *)(p), m, v)

/* The row of half 64 in c0..c3 and s0..s3 (sin negated for the inverse
 * rotation); with CHECK, return 0 first if it holds a NaN (see the header:
 * such a row takes the integer rounding). */
#define ROW64_LOAD(CHECK)                                                            \
    const __m512 c0 = _mm512_loadu_ps(cos), c1 = _mm512_loadu_ps(cos + 16);          \
    const __m512 c2 = _mm512_loadu_ps(cos + 32), c3 = _mm512_loadu_ps(cos + 48);     \
    __m512 s0 = _mm512_loadu_ps(sin), s1 = _mm512_loadu_ps(sin + 16);                \
    __m512 s2 = _mm512_loadu_ps(sin + 32), s3 = _mm512_loadu_ps(sin + 48);           \
    if ((CHECK) && (_mm512_cmp_ps_mask(c0, s0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c1, s1, _CMP_UNORD_Q) | \
                    _mm512_cmp_ps_mask(c2, s2, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c3, s3, _CMP_UNORD_Q))) \
        return 0;                                                                    \
    {                                                                                \
        const __m512 sign = _mm512_set1_ps(inverse ? -0.0f : 0.0f);                  \
        s0 = _mm512_xor_ps(s0, sign);                                                \
        s1 = _mm512_xor_ps(s1, sign);                                                \
        s2 = _mm512_xor_ps(s2, sign);                                                \
        s3 = _mm512_xor_ps(s3, sign);                                                \
    }

/* Does a row of any length hold a NaN? */
ROPE_AVX512 static int row_has_nan(const float *cos, const float *sin, int64_t half)
{
    __mmask16 k = 0;
    for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 m = half - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (half - i)) - 1u);
        k |= _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, cos + i), _mm512_maskz_loadu_ps(m, sin + i),
                                     _CMP_UNORD_Q);
    }
    return k != 0;
}

/* ---- kernels, once per narrowing --------------------------------------------- */

/* The four 64-byte lines of a head of 128 (half 64) `ahead` elements on
 * (rope_prefetch_ahead: the heads within 4 KiB); the other lengths
 * prefetch each step's lines. Without it the memory-resident split-half
 * prefill (1x8192x32x128) ran at 0.30-0.40 of the yardstick and
 * interleaved at 0.43-0.45 (0.66-0.91 and 0.78-0.91 with it; every other
 * line only: 0.49-0.63 / 0.59-0.77), on the Intel Xeon, family 6 model
 * 167, avx512bf16. */
#define PREFETCH_HEAD64(x, ahead)                                                    \
    do {                                                                             \
        ROPE_PREFETCH((x), ahead);                                                   \
        ROPE_PREFETCH((x) + 32, ahead);                                              \
        ROPE_PREFETCH((x) + 64, ahead);                                              \
        ROPE_PREFETCH((x) + 96, ahead);                                              \
    } while (0)

/* Interleaved, any half, one direction: 16-pair steps, then the last pairs
 * masked. */
#define IL_ANY_LOOP(PACK, FM0, FM1)                                                  \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                    \
        {                                                                            \
            const __mmask16 mp = 0xFFFFu;                                            \
            for (int64_t i = 0; i < n16; i += 16) {                                  \
                const __m512 c = _mm512_loadu_ps(cos + i), s = _mm512_loadu_ps(sin + i); \
                ROPE_PREFETCH(x + 2 * i, ahead);                                     \
                IL_STEP(PACK, FM0, FM1, LD_FULL, ST_FULL, x, y, 2 * i, c, s);        \
            }                                                                        \
        }                                                                            \
        if (mr) {                                                                    \
            const __mmask16 mp = mr;                                                 \
            const __m512 c = _mm512_maskz_loadu_ps(mr, cos + n16);                   \
            const __m512 s = _mm512_maskz_loadu_ps(mr, sin + n16);                   \
            IL_STEP(PACK, FM0, FM1, LD_MASK, ST_MASK, x, y, 2 * n16, c, s);          \
        }                                                                            \
    }

/* Split half, any half, one direction: 32-pair steps, then the last pairs
 * in one masked step of 32 or (up to 16 left) of 16. */
#define SH_ANY_LOOP(JOIN, NARROW16, FM0, FM1)                                        \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                    \
        {                                                                            \
            const __mmask32 m = 0xFFFFFFFFu;                                         \
            for (int64_t i = 0; i < n32; i += 32) {                                  \
                const __m512 ca = _mm512_loadu_ps(cos + i), cb = _mm512_loadu_ps(cos + i + 16); \
                const __m512 sa = _mm512_loadu_ps(sin + i), sb = _mm512_loadu_ps(sin + i + 16); \
                ROPE_PREFETCH(x + i, ahead);                                         \
                ROPE_PREFETCH(x + i + half, ahead);                                  \
                SH_STEP(JOIN, FM0, FM1, LD_FULL, ST_FULL, x, y, i, half, ca, cb, sa, sb); \
            }                                                                        \
        }                                                                            \
        if (r > 16) {                                                                \
            const __m512 ca = _mm512_loadu_ps(cos + n32);                            \
            const __m512 cb = _mm512_maskz_loadu_ps(mb, cos + n32 + 16);             \
            const __m512 sa = _mm512_loadu_ps(sin + n32);                            \
            const __m512 sb = _mm512_maskz_loadu_ps(mb, sin + n32 + 16);             \
            SH_STEP(JOIN, FM0, FM1, LD_MASK, ST_MASK, x, y, n32, half, ca, cb, sa, sb); \
        } else if (r) {                                                              \
            SH_STEP16(NARROW16, FM0, FM1, x, y, n32, half, m16);                     \
        }                                                                            \
    }

#define ROPE_AVX512_BF16_KERNELS(ISA, ATTR, PACK, JOIN, NARROW16, NAN_CHECK)         \
    /* Interleaved, half 64: the row in 8 registers. 0: not done (a NaN in           \
     * the row and NAN_CHECK). */                                                    \
    ATTR static inline __attribute__((always_inline)) int il_bf16_64_##ISA(          \
        const uint16_t *x, uint16_t *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, \
        const float *cos, const float *sin, int inverse)                             \
    {                                                                                \
        ROW64_LOAD(NAN_CHECK);                                                       \
        const __mmask16 mp = 0xFFFFu;                                                \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof *x);                  \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            PREFETCH_HEAD64(x, ahead);                                               \
            IL_STEP(PACK, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 0, c0, s0); \
            IL_STEP(PACK, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 32, c1, s1); \
            IL_STEP(PACK, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 64, c2, s2); \
            IL_STEP(PACK, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 96, c3, s3); \
        }                                                                            \
        return 1;                                                                    \
    }                                                                                \
                                                                                     \
    ATTR static void il_bf16_any_##ISA(const uint16_t *x, uint16_t *y, int64_t x_sh, \
                                       int64_t y_sh, int64_t n_heads, const float *cos, \
                                       const float *sin, int64_t half, int inverse)  \
    {                                                                                \
        const int64_t n16 = half & ~(int64_t)15;                                     \
        const __mmask16 mr = (__mmask16)((1u << (half - n16)) - 1u);                 \
        const __mmask32 m = (__mmask32)((1u << (2 * (half - n16))) - 1u);            \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof *x);                  \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            IL_ANY_LOOP(PACK, _mm512_fmsub_ps, _mm512_fmadd_ps)                      \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            IL_ANY_LOOP(PACK, _mm512_fmadd_ps, _mm512_fmsub_ps)                      \
    }                                                                                \
                                                                                     \
    /* Split half, half 64: the row in 8 registers (return as above). */             \
    ATTR static inline __attribute__((always_inline)) int sh_bf16_64_##ISA(          \
        const uint16_t *x, uint16_t *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, \
        const float *cos, const float *sin, int inverse)                             \
    {                                                                                \
        ROW64_LOAD(NAN_CHECK);                                                       \
        const __mmask32 m = 0xFFFFFFFFu;                                             \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof *x);                  \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            PREFETCH_HEAD64(x, ahead);                                               \
            SH_STEP(JOIN, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 0, 64, c0, c1, s0, s1); \
            SH_STEP(JOIN, _mm512_fmsub_ps, _mm512_fmadd_ps, LD_FULL, ST_FULL, x, y, 32, 64, c2, c3, s2, s3); \
        }                                                                            \
        return 1;                                                                    \
    }                                                                                \
                                                                                     \
    ATTR static void sh_bf16_any_##ISA(const uint16_t *x, uint16_t *y, int64_t x_sh, \
                                       int64_t y_sh, int64_t n_heads, const float *cos, \
                                       const float *sin, int64_t half, int inverse)  \
    {                                                                                \
        const int64_t n32 = half & ~(int64_t)31, r = half - n32;                     \
        const __mmask32 m = (__mmask32)((1u << r) - 1u);                             \
        const __mmask16 m16 = (__mmask16)m, mb = (__mmask16)(m >> 16);               \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof *x);                  \
        if (!inverse)                                                                \
            SH_ANY_LOOP(JOIN, NARROW16, _mm512_fmsub_ps, _mm512_fmadd_ps)            \
        else                                                                         \
            SH_ANY_LOOP(JOIN, NARROW16, _mm512_fmadd_ps, _mm512_fmsub_ps)            \
    }

ROPE_AVX512_BF16_KERNELS(avx512, ROPE_AVX512, bf16_pack_int, bf16_join_int, bf16_narrow16_int, 0)
ROPE_AVX512_BF16_KERNELS(avx512bf16, ROPE_AVX512BF16, bf16_pack_hw, bf16_join_hw, bf16_narrow16_hw, 1)

/* ---- entries ------------------------------------------------------------------ */

/* half 64 through the registers, any other length through the general loop;
 * FALLBACK (the integer rounding) for a row with a NaN when NAN_CHECK. */
#define ROPE_AVX512_BF16_ENTRY(NAME, ATTR, LAYOUT, ISA, NAN_CHECK, FALLBACK)         \
    ATTR void NAME(ROPE_ROT_PARAMS)                                                  \
    {                                                                                \
        const uint16_t *xs = (const uint16_t *)x;                                    \
        uint16_t *ys = (uint16_t *)y;                                                \
        const float *c = (const float *)cos, *s = (const float *)sin;                \
        if (half == 64) {                                                            \
            if (LAYOUT##_bf16_64_##ISA(xs, ys, x_sh, y_sh, n_heads, c, s, inverse))  \
                return;                                                              \
        } else if (!(NAN_CHECK) || !row_has_nan(c, s, half)) {                       \
            LAYOUT##_bf16_any_##ISA(xs, ys, x_sh, y_sh, n_heads, c, s, half, inverse); \
            return;                                                                  \
        }                                                                            \
        FALLBACK(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse);                \
    }

/* Unreachable for the integer rounding (no NaN check). */
ROPE_AVX512 static void no_fallback(ROPE_ROT_PARAMS)
{
    (void)x, (void)y, (void)x_sh, (void)y_sh, (void)n_heads, (void)cos, (void)sin, (void)half,
        (void)inverse;
}

ROPE_AVX512_BF16_ENTRY(rope_rot_il_bf16_avx512, ROPE_AVX512, il, avx512, 0, no_fallback)
ROPE_AVX512_BF16_ENTRY(rope_rot_sh_bf16_avx512, ROPE_AVX512, sh, avx512, 0, no_fallback)
ROPE_AVX512_BF16_ENTRY(rope_rot_il_bf16_avx512bf16, ROPE_AVX512BF16, il, avx512bf16, 1,
                       rope_rot_il_bf16_avx512)
ROPE_AVX512_BF16_ENTRY(rope_rot_sh_bf16_avx512bf16, ROPE_AVX512BF16, sh, avx512bf16, 1,
                       rope_rot_sh_bf16_avx512)

#endif
