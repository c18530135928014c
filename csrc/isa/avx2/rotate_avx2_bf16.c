/* AVX2 rotation kernels for bfloat16 storage, through integer shifts with
 * the rounding of convert.h (rotate_avx2.h says what every AVX2 kernel
 * shares): even and odd elements in separate vectors, for both layouts. */
#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

/* The pairs after the 16-pair steps of the split-half kernel below. */
ROPE_AVX2_SPLIT_PART(split_part_bf16, uint16_t, ld8_bf16, st8_bf16, ld4_bf16, st4_bf16, rope_pair_bf16)

/* ---- bfloat16: even and odd elements in separate vectors --------------------
 *
 * One 256-bit load holds 16 bfloat16 values, two per 32-bit lane: shifting
 * each lane left by 16 gives the even-indexed values as float32, masking off
 * the low half gives the odd-indexed ones (bf16 -> f32 is exact). Narrowing
 * rounds both to nearest even on the 32-bit lanes (as convert.h) and blends
 * the even results' high halves (shifted down) with the odd results' high
 * halves: the original order, with no cross-lane shuffles.
 * Interleaved, the even values are the pairs' x0 and the odd ones their x1,
 * so the split-half arithmetic applies directly against the cos/sin row as
 * stored. Split half, evens and odds are two sets of 8 pairs each, against
 * the token's row split once into even and odd entries. */

ROPE_AVX2 static inline void bf16_widen_eo(const uint16_t *p, __m256 *even, __m256 *odd)
{
    const __m256i v = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* (u + 0x7FFF + lsb) >> 16 per lane, exactly as convert.h; the odd results'
 * shift is done by the blend, which takes their high halves as they are.
 * The shifts by 16 bits are byte shifts within each 128-bit half (vpsrldq,
 * a shuffle): the word a lane needs comes from within it, and the word a
 * neighbour pushes in is masked off or not taken by the blend. On Intel
 * this moves them off the two ports that the multiplies and FMAs need
 * (interleaved 3-4% faster, measured on an Intel Xeon, family 6 model
 * 167). */
ROPE_AVX2 static inline __m256i bf16_round_hi(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_si256(u, 2), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
}

ROPE_AVX2 static inline void bf16_narrow_eo(uint16_t *p, __m256 even, __m256 odd)
{
    const __m256i e = _mm256_srli_si256(bf16_round_hi(even), 2);
    _mm256_storeu_si256((__m256i *)p, _mm256_blend_epi16(e, bf16_round_hi(odd), 0xAA));
}

/* Split half: 16 pairs per step, as two sets of 8 (even and odd i). */
#define BF16_SPLIT_STEP(FM0, FM1)                                                    \
    do {                                                                             \
        __m256 x0e, x0o, x1e, x1o;                                                   \
        bf16_widen_eo(x + i, &x0e, &x0o);                                            \
        bf16_widen_eo(x + i + half, &x1e, &x1o);                                     \
        if ((i - i0) % 32 == 0) { /* once per 64-byte line, 4 KiB on */             \
            ROPE_PREFETCH(x + i, ahead);                                     \
            ROPE_PREFETCH(x + i + half, ahead);                              \
        }                                                                            \
        const __m256 ce = _mm256_loadu_ps(cp + i - i0), co = _mm256_loadu_ps(cp + i - i0 + 8); \
        const __m256 se = _mm256_loadu_ps(sp + i - i0), so = _mm256_loadu_ps(sp + i - i0 + 8); \
        bf16_narrow_eo(y + i, FM0(x0e, ce, _mm256_mul_ps(x1e, se)), FM0(x0o, co, _mm256_mul_ps(x1o, so))); \
        bf16_narrow_eo(y + i + half, FM1(x1e, ce, _mm256_mul_ps(x0e, se)),           \
                       FM1(x1o, co, _mm256_mul_ps(x0o, so)));                        \
    } while (0)

/* Every head of one row chunk: the 16-pair steps, then the last pairs (last
 * chunk). No peeling to a 32-byte boundary here, unlike the other split-half
 * kernels: bfloat16 is bound by its instructions, and two 8-pair steps per
 * head cost more than the straddled cache lines (measured). */
#define BF16_SPLIT_HEADS(FM0, FM1)                                                   \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;                         \
        uint16_t *y = (uint16_t *)yv + h * y_sh;                                     \
        for (int64_t i = i0; i < i0 + n16; i += 16)                                  \
            BF16_SPLIT_STEP(FM0, FM1);                                               \
        if (n16 < n)                                                                 \
            split_part_bf16(x, y, 0, 0, 1, cos, sin, half, inverse, i0 + n16, i0 + n); \
    }
/* The same where the head is one chunk of whole steps and HALF is known at
 * compile time (head_dim 64 and 128): the compiler unrolls a head's steps
 * and the per-head bookkeeping goes, as SPLIT_HEADS_FIXED does. */
#define BF16_SPLIT_HEADS_FIXED(FM0, FM1, HALF)                                       \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;                         \
        uint16_t *y = (uint16_t *)yv + h * y_sh;                                     \
        const int64_t i0 = 0, half = HALF;                                           \
        _Pragma("GCC unroll 8")                                                      \
        for (int64_t i = 0; i < HALF; i += 16)                                       \
            BF16_SPLIT_STEP(FM0, FM1);                                               \
    }

ROPE_AVX2 void rope_rot_sh_bf16_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                     int64_t n_heads, const void *cosv, const void *sinv,
                                     int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(uint16_t));
    float cp[IL_CHUNK], sp[IL_CHUNK];
    for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {
        const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;
        const int64_t n16 = n & ~(int64_t)15;
        for (int64_t i = 0; i < n16; i += 16) { /* entries i, i+2, .. i+14, then i+1, .. i+15 */
            const __m256 clo = _mm256_loadu_ps(cos + i0 + i), chi = _mm256_loadu_ps(cos + i0 + i + 8);
            const __m256 slo = _mm256_loadu_ps(sin + i0 + i), shi = _mm256_loadu_ps(sin + i0 + i + 8);
#define BF16_EVEN_ODD(lo, hi, imm) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, imm)), 0xD8))
            _mm256_storeu_ps(cp + i, BF16_EVEN_ODD(clo, chi, 0x88));
            _mm256_storeu_ps(cp + i + 8, BF16_EVEN_ODD(clo, chi, 0xDD));
            _mm256_storeu_ps(sp + i, BF16_EVEN_ODD(slo, shi, 0x88));
            _mm256_storeu_ps(sp + i + 8, BF16_EVEN_ODD(slo, shi, 0xDD));
#undef BF16_EVEN_ODD
        }
        if (half == 64 && !inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
            BF16_SPLIT_HEADS_FIXED(_mm256_fmsub_ps, _mm256_fmadd_ps, 64)
        else if (half == 64)        /* y0 = x0*c + x1*s, y1 = x1*c - x0*s (see SPLIT_STEP16) */
            BF16_SPLIT_HEADS_FIXED(_mm256_fmadd_ps, _mm256_fmsub_ps, 64)
        else if (half == 32 && !inverse)
            BF16_SPLIT_HEADS_FIXED(_mm256_fmsub_ps, _mm256_fmadd_ps, 32)
        else if (half == 32)
            BF16_SPLIT_HEADS_FIXED(_mm256_fmadd_ps, _mm256_fmsub_ps, 32)
        else if (!inverse)
            BF16_SPLIT_HEADS(_mm256_fmsub_ps, _mm256_fmadd_ps)
        else
            BF16_SPLIT_HEADS(_mm256_fmadd_ps, _mm256_fmsub_ps)
    }
}

/* Interleaved: 8 pairs per step, x0 in the even vector and x1 in the odd. */
#define BF16_IL_HEADS(FM0, FM1)                                                      \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;                         \
        uint16_t *y = (uint16_t *)yv + h * y_sh;                                     \
        for (int64_t i = 0; i < n8; i += 8) {                                        \
            __m256 x0, x1;                                                           \
            bf16_widen_eo(x + 2 * i, &x0, &x1);                                      \
            if (i % 16 == 0) /* once per 64-byte line, 4 KiB on */                  \
                ROPE_PREFETCH(x + 2 * i, ahead);                             \
            const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i); \
            bf16_narrow_eo(y + 2 * i, FM0(x0, c, _mm256_mul_ps(x1, s)),              \
                           FM1(x1, c, _mm256_mul_ps(x0, s)));                        \
        }                                                                            \
    }

ROPE_AVX2 void rope_rot_il_bf16_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                     int64_t n_heads, const void *cosv, const void *sinv,
                                     int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(uint16_t));
    const int64_t n8 = half & ~(int64_t)7;
    if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
        BF16_IL_HEADS(_mm256_fmsub_ps, _mm256_fmadd_ps)
    else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s (see SPLIT_STEP16) */
        BF16_IL_HEADS(_mm256_fmadd_ps, _mm256_fmsub_ps)
    if (n8 == half)
        return;
    for (int64_t h = 0; h < n_heads; h++) { /* leftovers: < 8 pairs */
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;
        uint16_t *y = (uint16_t *)yv + h * y_sh;
        for (int64_t i = n8; i < half; i++) {
            const float c = cos[i], s = inverse ? -sin[i] : sin[i];
            rope_pair_bf16(x, y, 2 * i, 2 * i + 1, c, s);
        }
    }
}

#endif
