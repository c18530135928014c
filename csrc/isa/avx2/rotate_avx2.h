/* Internal: what the AVX2 + FMA + F16C rotation kernels (rotate_avx2_*.c,
 * one file per storage type) share: the target attribute, the 16-bit
 * storage types' 8- and 4-lane loads and stores (which the stage kernels,
 * stage_avx2.c, use too), the split-half kernel built from a storage type's
 * 16-, 8- and 4-lane loads and stores, its peeling to a 32-byte boundary,
 * the interleaved kernel built from its 8-lane loads and stores (table
 * entries duplicated in registers, four heads per step), and the stack
 * chunk of table entries.
 *
 * The kernels are compiled for that target by function attributes (no
 * global -m flags) and called only after run-time detection. Lane for lane
 * they compute the scalar formula of pair.h:
 *   y0 = fma(x0, c, -(x1 * s)),  y1 = fma(x1, c, x0 * s)
 * float16 goes through F16C (vcvtph2ps / vcvtps2ph, round to nearest even),
 * bfloat16 through integer shifts with the same rounding as convert.h.
 * Unaligned loads and stores throughout; the leftover pairs (fewer than one
 * vector) call rope_pair_<sfx> (pair.h), the scalar formula with the scalar
 * conversions, which round identically.
 */
#ifndef PYROPE_ROTATE_AVX2_H
#define PYROPE_ROTATE_AVX2_H

#include "core/kernels.h"
#include "scalar/pair.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

#define ROPE_AVX2 __attribute__((target("avx2,fma,f16c")))

/* Keep a loaded vector in a register: stops the compiler from folding the
 * load into two instructions (two loads of the same bytes). */
#define ROPE_IN_REGISTER(v) __asm__("" : "+x"(v))

/* Pairs per row chunk whose reordered cos/sin sit on the stack (the bfloat16
 * split-half kernel). */
#define IL_CHUNK 512

/* ---- the 16-bit storage types' 8- and 4-lane loads and stores ------------
 * (the rotation kernels of rotate_avx2_f16.c and rotate_avx2_bf16.c and the
 * stage kernels of stage_avx2.c): float16 through F16C, which rounds as
 * convert.h does; bfloat16 through integer shifts with its rounding. */

ROPE_AVX2 static inline __m256 ld8_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
ROPE_AVX2 static inline void st8_f16(uint16_t *p, __m256 v)
{
    /* register-form conversion: the memory form is slower on AMD */
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    ROPE_IN_REGISTER(h);
    _mm_storeu_si128((__m128i *)p, h);
}

ROPE_AVX2 static inline __m128 ld4_f16(const uint16_t *p)
{
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p));
}
ROPE_AVX2 static inline void st4_f16(uint16_t *p, __m128 v)
{
    __m128i h = _mm_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    ROPE_IN_REGISTER(h);
    _mm_storel_epi64((__m128i *)p, h);
}

ROPE_AVX2 static inline __m256 ld8_bf16(const uint16_t *p)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* Round to nearest even, (u + 0x7FFF + lsb) >> 16, exactly as convert.h. */
ROPE_AVX2 static inline __m256i bf16_round(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
}
ROPE_AVX2 static inline void st8_bf16(uint16_t *p, __m256 v)
{
    const __m256i r = bf16_round(v);
    /* 8 x 32 -> 8 x 16 (values fit: no saturation), lanes back in order */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

ROPE_AVX2 static inline __m128 ld4_bf16(const uint16_t *p)
{
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)p)), 16));
}
ROPE_AVX2 static inline void st4_bf16(uint16_t *p, __m128 v)
{
    const __m128i u = _mm_castps_si128(v); /* (u + 0x7FFF + lsb) >> 16, as convert.h */
    const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
    const __m128i r = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7FFF)), lsb), 16);
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi32(r, r));
}

/* Split-half pairs before the first 32-byte boundary of x, the same for
 * every head (0 if x is aligned or the head stride is not a multiple of 32
 * bytes): numpy places large arrays 16 bytes past a page, and 32-byte loads
 * and stores that straddle cache lines cost a third more (measured). Which
 * step handles a pair never changes its bits. */
static inline int64_t rope_peel_pairs(const void *x, int64_t x_sh, int64_t esize, int64_t half)
{
    const int64_t mis = (int64_t)((uintptr_t)x & 31);
    if (mis == 0 || x_sh % (32 / esize) != 0)
        return 0;
    const int64_t p = (32 - mis) / esize;
    return p < half ? p : 0;
}

/* ---- split half, float32 arithmetic: float32, float16, bfloat16 storage --- */

/* Split half: 8 pairs (i .. i+7, i+half .. i+half+7) per step. */
/* The 16-pair step. With s' = -s (inverse), x1*s' = -(x1*s) exactly (rounding
 * to nearest is symmetric), so the inverse rotation is the forward one with
 * fmsub and fmadd swapped: no sign flips in the loop, same bits as rotate.c. */
#define SPLIT_STEP16(T, LD16, ST16, FM0, FM1)                                        \
    do {                                                                             \
        const __m256 ca = _mm256_loadu_ps(cos + i), cb = _mm256_loadu_ps(cos + i + 8); \
        const __m256 sa = _mm256_loadu_ps(sin + i), sb = _mm256_loadu_ps(sin + i + 8); \
        __m256 x0a, x0b, x1a, x1b;                                                   \
        LD16(x + i, &x0a, &x0b);                                                     \
        LD16(x + i + half, &x1a, &x1b);                                              \
        if (sizeof(T) == 4 || i % 32 == 0) { /* once per 64-byte line */             \
            ROPE_PREFETCH(x + i, ahead);                                     \
            ROPE_PREFETCH(x + i + half, ahead);                              \
        }                                                                            \
        ST16(y + i, FM0(x0a, ca, _mm256_mul_ps(x1a, sa)), FM0(x0b, cb, _mm256_mul_ps(x1b, sb))); \
        ST16(y + i + half, FM1(x1a, ca, _mm256_mul_ps(x0a, sa)),                     \
             FM1(x1b, cb, _mm256_mul_ps(x0b, sb)));                                  \
    } while (0)

/* Pairs [a, b) of every head in 8-, 4- and 1-pair steps: the pairs before
 * the aligned 16-pair steps and after them. LD8/ST8 and LD4/ST4 are the
 * storage type's vector loads and stores, PAIR its rope_pair_<sfx>. */
#define ROPE_AVX2_SPLIT_PART(NAME, T, LD8, ST8, LD4, ST4, PAIR)                        \
    ROPE_AVX2 static inline __attribute__((always_inline)) void NAME(                 \
        const void *xv, void *yv, int64_t x_sh, int64_t y_sh,                        \
        int64_t n_heads, const float *cos, const float *sin,                         \
        int64_t half, int inverse, int64_t a, int64_t b)                             \
    {                                                                                \
        if (a >= b)                                                                  \
            return;                                                                  \
        const __m256 sign = _mm256_set1_ps(inverse ? -0.0f : 0.0f);                  \
        const __m128 sign4 = _mm256_castps256_ps128(sign);                           \
        for (int64_t h = 0; h < n_heads; h++) {                                      \
            const T *x = (const T *)xv + h * x_sh;                                   \
            T *y = (T *)yv + h * y_sh;                                               \
            int64_t i = a;                                                           \
            for (; i + 8 <= b; i += 8) {                                             \
                const __m256 c = _mm256_loadu_ps(cos + i);                           \
                const __m256 s = _mm256_xor_ps(_mm256_loadu_ps(sin + i), sign);      \
                const __m256 x0 = LD8(x + i), x1 = LD8(x + i + half);                \
                /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                             \
                ST8(y + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));            \
                ST8(y + i + half, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)));     \
            }                                                                        \
            for (; i + 4 <= b; i += 4) {                                             \
                const __m128 c = _mm_loadu_ps(cos + i);                              \
                const __m128 s = _mm_xor_ps(_mm_loadu_ps(sin + i), sign4);           \
                const __m128 x0 = LD4(x + i), x1 = LD4(x + i + half);                \
                /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                             \
                ST4(y + i, _mm_fmsub_ps(x0, c, _mm_mul_ps(x1, s)));                  \
                ST4(y + i + half, _mm_fmadd_ps(x1, c, _mm_mul_ps(x0, s)));           \
            }                                                                        \
            for (; i < b; i++) { /* the scalar formula */                            \
                const float c = cos[i], s = inverse ? -sin[i] : sin[i];              \
                PAIR(x, y, i, i + half, c, s);                                       \
            }                                                                        \
        }                                                                            \
    }

/* Every head in one loop nest per direction: its pairs before the 32-byte
 * boundary (p), its 16-pair steps, its last pairs. The direction test stays
 * out of the loop: with head_dim 128 a head is only four steps. */
#define SPLIT_HEADS16(T, PART, LD16, ST16, FM0, FM1)                                 \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const T *x = (const T *)xv + h * x_sh;                                       \
        T *y = (T *)yv + h * y_sh;                                                   \
        if (p)                                                                       \
            PART(x, y, 0, 0, 1, cos, sin, half, inverse, 0, p);                      \
        for (int64_t i = p; i < p + n16; i += 16)                                    \
            SPLIT_STEP16(T, LD16, ST16, FM0, FM1);                                   \
        if (p + n16 < half)                                                          \
            PART(x, y, 0, 0, 1, cos, sin, half, inverse, p + n16, half);             \
    }

/* Every head when no pair comes before the 16-pair steps and HALF is known
 * at compile time: the compiler unrolls a head's steps and the per-head
 * bookkeeping of SPLIT_HEADS16 goes (float16 split half 6-7% faster). */
#define SPLIT_HEADS_FIXED(T, LD16, ST16, FM0, FM1, HALF)                              \
    {                                                                                \
        const T *x = (const T *)xv;                                                  \
        T *y = (T *)yv;                                                              \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            const int64_t half = HALF;                                               \
            _Pragma("GCC unroll 8")                                                  \
            for (int64_t i = 0; i < HALF; i += 16)                                   \
                SPLIT_STEP16(T, LD16, ST16, FM0, FM1);                               \
        }                                                                            \
    }

/* PEEL: start the 16-pair steps at x's first 32-byte boundary (float32);
 * float16 gains nothing from it (bound by its conversions, measured). */
#define ROPE_AVX2_SPLIT(NAME, PART, PEEL, T, LD16, ST16)                             \
    ROPE_AVX2 static __attribute__((unused)) void NAME##_dim64(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, \
                                    int64_t n_heads, const float *cos, const float *sin, \
                                    int64_t ahead, int inverse);                     \
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const void *cosv, const void *sinv,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const float *cos = (const float *)cosv, *sin = (const float *)sinv;          \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(T));                  \
        const int64_t p = PEEL ? rope_peel_pairs(xv, x_sh, sizeof(T), half) : 0;  \
        const int64_t n16 = (half - p) & ~(int64_t)15;                               \
        if (p == 0 && half == 64) { /* head_dim 128, the common case */              \
            if (!inverse)                                                            \
                SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps, 64) \
            else                                                                     \
                SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps, 64) \
            return;                                                                  \
        }                                                                            \
        if (!PEEL && half == 32) {                                                   \
            NAME##_dim64(xv, yv, x_sh, y_sh, n_heads, cos, sin, ahead, inverse);        \
            return;                                                                  \
        }                                                                            \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            SPLIT_HEADS16(T, PART, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps)     \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            SPLIT_HEADS16(T, PART, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps)     \
    }                                                                                \
    /* head_dim 64 unpeeled (float16: 19.7 -> 16.4 cycles per head in L1, the \
     * small case 0.36-0.37 -> 0.43-0.44 of the yardstick), out of line so   \
     * that the head_dim 128 loop's code stays as it was (in line, float32's \
     * decode measured 5-8% slower); float32, peeled, keeps the general loop  \
     * (its small case measured no faster) */                                 \
    ROPE_AVX2 static __attribute__((noinline, unused)) void NAME##_dim64(const void *xv, void *yv, \
                        int64_t x_sh, int64_t y_sh, int64_t n_heads, const float *cos, \
                        const float *sin, int64_t ahead, int inverse)               \
    {                                                                                \
        if (!inverse)                                                                \
            SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps, 32)   \
        else                                                                         \
            SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps, 32)   \
    }

/* ---- interleaved, float32 arithmetic: float32 and float16 storage ---------
 *
 * Each step takes 8 pairs (16 lanes) of G heads against the same 8 table
 * entries, duplicated in registers into (c0 c0 c1 c1 ...) and (s0 s0 s1 s1
 * ...) by one vpermps per 8 lanes that the G heads share. Per head and 8
 * lanes a step is then the pair swap of x (vpermilps), one multiply and one
 * fmaddsub: a split-half step's instructions and the swap. fmaddsub
 * subtracts in even lanes and adds in odd ones:
 *   y0 = fma(x0, c, -(x1*s)), y1 = fma(x1, c, x0*s), the scalar formula;
 * the inverse is fmsubadd (see SPLIT_STEP16). Groups of 4 heads, then 2,
 * then 1 (docs/ARCHITECTURE.md has the measurements). */
#define IL_DUP_STEP(LD8, ST8, H, FMAS)                                               \
    do {                                                                             \
        __m256 xa = LD8(x + (H) * x_sh + 2 * i);                                     \
        __m256 xb = LD8(x + (H) * x_sh + 2 * i + 8);                                 \
        ROPE_IN_REGISTER(xa); /* one load each: not one per use */                   \
        ROPE_IN_REGISTER(xb);                                                        \
        /* the same lanes 4 KiB on, once per 64-byte line: the 4 heads'         \
         * streams otherwise outrun the hardware prefetcher */                       \
        if (sizeof *x == 4 || i % 16 == 0)                                           \
            ROPE_PREFETCH(x + (H) * x_sh + 2 * i, ahead);                    \
        ST8(y + (H) * y_sh + 2 * i, FMAS(xa, ca, _mm256_mul_ps(_mm256_permute_ps(xa, 0xB1), sa))); \
        ST8(y + (H) * y_sh + 2 * i + 8, FMAS(xb, cb, _mm256_mul_ps(_mm256_permute_ps(xb, 0xB1), sb))); \
    } while (0)

/* Heads [h, h + G) while G more remain: their 8-pair steps. */
#define IL_DUP_GROUP(T, LD8, ST8, G, FMAS)                                           \
    for (; h + (G) <= n_heads; h += (G)) {                                           \
        const T *x = (const T *)xv + h * x_sh;                                       \
        T *y = (T *)yv + h * y_sh;                                                   \
        for (int64_t i = 0; i < n8; i += 8) {                                        \
            const __m256 c8 = _mm256_loadu_ps(cos + i), s8 = _mm256_loadu_ps(sin + i); \
            const __m256 ca = _mm256_permutevar8x32_ps(c8, lo), cb = _mm256_permutevar8x32_ps(c8, hi); \
            const __m256 sa = _mm256_permutevar8x32_ps(s8, lo), sb = _mm256_permutevar8x32_ps(s8, hi); \
            IL_DUP_STEP(LD8, ST8, 0, FMAS);                                          \
            if ((G) > 1)                                                             \
                IL_DUP_STEP(LD8, ST8, 1, FMAS);                                      \
            if ((G) > 2) {                                                           \
                IL_DUP_STEP(LD8, ST8, 2, FMAS);                                      \
                IL_DUP_STEP(LD8, ST8, 3, FMAS);                                      \
            }                                                                        \
        }                                                                            \
    }

#define IL_DUP_HEADS(T, LD8, ST8, FMAS)                                              \
    {                                                                                \
        int64_t h = 0;                                                               \
        IL_DUP_GROUP(T, LD8, ST8, 4, FMAS)                                           \
        IL_DUP_GROUP(T, LD8, ST8, 2, FMAS)                                           \
        IL_DUP_GROUP(T, LD8, ST8, 1, FMAS)                                           \
    }

/* The interleaved kernel NAME (LINKAGE: static or nothing) of a storage type
 * with 8-lane loads and stores LD8/ST8 and scalar pair PAIR (the last pairs,
 * fewer than 8). */
#define ROPE_AVX2_INTERLEAVED(LINKAGE, NAME, T, LD8, ST8, PAIR)                      \
    ROPE_AVX2 LINKAGE void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const void *cosv, const void *sinv,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const float *cos = (const float *)cosv, *sin = (const float *)sinv;          \
        const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(T));                  \
        const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);                \
        const __m256i hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);                \
        const int64_t n8 = half & ~(int64_t)7; /* pairs in 8-pair steps */           \
        if (!inverse)                                                                \
            IL_DUP_HEADS(T, LD8, ST8, _mm256_fmaddsub_ps)                            \
        else                                                                         \
            IL_DUP_HEADS(T, LD8, ST8, _mm256_fmsubadd_ps)                            \
        for (int64_t h = 0; h < n_heads && n8 < half; h++) /* the last pairs */      \
            for (int64_t i = n8; i < half; i++) {                                    \
                const float c = cos[i], s = inverse ? -sin[i] : sin[i];              \
                PAIR((const T *)xv + h * x_sh, (T *)yv + h * y_sh, 2 * i, 2 * i + 1, c, s); \
            }                                                                        \
    }

#endif /* ROPE_HAVE_X86 */

#endif
