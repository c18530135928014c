/* AVX2 + FMA + F16C rotation kernels, compiled for that target by function
 * attributes (no global -m flags) and called only after run-time detection.
 * Lane for lane they compute the scalar formula of rotate.c:
 *   y0 = fma(x0, c, -(x1 * s)),  y1 = fma(x1, c, x0 * s)
 * float16 goes through F16C (vcvtph2ps / vcvtps2ph, round to nearest even),
 * bfloat16 through integer shifts with the same rounding as convert.h.
 * Unaligned loads and stores throughout; the leftover pairs (fewer than one
 * vector) run the scalar formula with the scalar conversions, which round
 * identically.
 */
#include "convert.h"
#include "kernels.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

#define ROPE_AVX2 __attribute__((target("avx2,fma,f16c")))

/* Keep a loaded vector in a register: stops the compiler from folding the
 * load into two instructions (two loads of the same bytes). */
#define ROPE_IN_REGISTER(v) __asm__("" : "+x"(v))

/* Pairs per interleaved chunk whose duplicated cos/sin sit on the stack. */
#define IL_CHUNK 512

/* ---- 8-lane loads and stores per storage type --------------------------- */

ROPE_AVX2 static inline __m256 ld8_f32(const float *p) { return _mm256_loadu_ps(p); }
ROPE_AVX2 static inline void st8_f32(float *p, __m256 v) { _mm256_storeu_ps(p, v); }

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

/* ---- 16-lane loads and stores ------------------------------------------- */

ROPE_AVX2 static inline void ld16_f32(const float *p, __m256 *a, __m256 *b)
{
    *a = _mm256_loadu_ps(p);
    *b = _mm256_loadu_ps(p + 8);
}
ROPE_AVX2 static inline void st16_f32(float *p, __m256 a, __m256 b)
{
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
}
ROPE_AVX2 static inline void ld16_f16(const uint16_t *p, __m256 *a, __m256 *b)
{
    *a = ld8_f16(p);
    *b = ld8_f16(p + 8);
}
ROPE_AVX2 static inline void st16_f16(uint16_t *p, __m256 a, __m256 b)
{
    /* two 16-byte stores, not one 32-byte store of the two halves joined:
     * the join (vinsertf128) competes with the conversions for the same
     * execution ports, which bound float16 (5-8% faster, measured) */
    st8_f16(p, a);
    st8_f16(p + 8, b);
}
/* ---- 4-lane loads and stores: the pairs before a 32-byte boundary ---------- */

ROPE_AVX2 static inline __m128 ld4_f32(const float *p) { return _mm_loadu_ps(p); }
ROPE_AVX2 static inline void st4_f32(float *p, __m128 v) { _mm_storeu_ps(p, v); }
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

static inline float ld1_f32(const float *p) { return *p; }
static inline void st1_f32(float *p, float v) { *p = v; }
static inline float ld1_f16(const uint16_t *p) { return rope_f16_to_f32(*p); }
static inline void st1_f16(uint16_t *p, float v) { *p = rope_f32_to_f16(v); }
static inline float ld1_bf16(const uint16_t *p) { return rope_bf16_to_f32(*p); }
static inline void st1_bf16(uint16_t *p, float v) { *p = rope_f32_to_bf16(v); }

/* ---- float32 arithmetic: float32, float16, bfloat16 storage -------------- */

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
        ST16(y + i, FM0(x0a, ca, _mm256_mul_ps(x1a, sa)), FM0(x0b, cb, _mm256_mul_ps(x1b, sb))); \
        ST16(y + i + half, FM1(x1a, ca, _mm256_mul_ps(x0a, sa)),                     \
             FM1(x1b, cb, _mm256_mul_ps(x0b, sb)));                                  \
    } while (0)

/* Pairs [a, b) of every head in 8-, 4- and 1-pair steps: the pairs before
 * the aligned 16-pair steps and after them. */
#define ROPE_AVX2_SPLIT_PART(NAME, T, LD8, ST8, LD4, ST4, LD1, ST1)                   \
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
                const float x0 = LD1(x + i), x1 = LD1(x + i + half);                 \
                ST1(y + i, __builtin_fmaf(x0, c, -(x1 * s)));                        \
                ST1(y + i + half, __builtin_fmaf(x1, c, x0 * s));                    \
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
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const float *cos, const float *sin,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const int64_t p = PEEL ? rope_peel_pairs(xv, x_sh, sizeof(T), half) : 0;  \
        const int64_t n16 = (half - p) & ~(int64_t)15;                               \
        if (p == 0 && half == 64) { /* head_dim 128, the common case */              \
            if (!inverse)                                                            \
                SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps, 64) \
            else                                                                     \
                SPLIT_HEADS_FIXED(T, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps, 64) \
            return;                                                                  \
        }                                                                            \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            SPLIT_HEADS16(T, PART, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps)     \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            SPLIT_HEADS16(T, PART, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps)     \
    }

/* Interleaved, float32: 8 pairs (16 lanes) per step, turned into the split-half
 * computation. shuffle_ps separates even and odd coordinates of two vectors,
 * which leaves the pairs in the order 0 1 4 5 2 3 6 7; the token's cos/sin
 * rows are permuted to that order once (permute4x64) and shared by every
 * head, so a step costs what a split-half step costs: two table loads, four
 * multiplies/FMAs, and unpacklo/hi put the results back in place. Each pair
 * still computes exactly y0 = fma(x0, c, -(x1*s)), y1 = fma(x1, c, x0*s). */
#define IL_STEP16(T, LD16, ST16, FM0, FM1)                                           \
    do {                                                                             \
        __m256 va, vb;                                                               \
        LD16(x + j, &va, &vb);                                                       \
        const __m256 c = _mm256_loadu_ps(cp + j / 2), s = _mm256_loadu_ps(sp + j / 2); \
        const __m256 x0 = _mm256_shuffle_ps(va, vb, 0x88); /* evens */               \
        const __m256 x1 = _mm256_shuffle_ps(va, vb, 0xDD); /* odds */                \
        const __m256 y0 = FM0(x0, c, _mm256_mul_ps(x1, s));                          \
        const __m256 y1 = FM1(x1, c, _mm256_mul_ps(x0, s));                          \
        ST16(y + j, _mm256_unpacklo_ps(y0, y1), _mm256_unpackhi_ps(y0, y1));         \
    } while (0)

/* Every head's whole steps of one row chunk, one loop nest per direction. */
#define IL_HEADS16(T, LD16, ST16, FM0, FM1)                                          \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const T *x = (const T *)xv + h * x_sh + 2 * i0;                              \
        T *y = (T *)yv + h * y_sh + 2 * i0;                                          \
        for (int64_t j = 0; j < 2 * nv; j += 16)                                     \
            IL_STEP16(T, LD16, ST16, FM0, FM1);                                      \
    }

#define ROPE_AVX2_INTERLEAVED(NAME, T, LD16, ST16, LD8, ST8, LD1, ST1)               \
    ROPE_AVX2 static void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const float *cos, const float *sin,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        float cp[IL_CHUNK], sp[IL_CHUNK];                                            \
        (void)LD8;                                                                   \
        (void)ST8;                                                                   \
        for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {                            \
            const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;           \
            const int64_t nv = n & ~(int64_t)7;     /* pairs in 8-pair steps */      \
            for (int64_t i = 0; i < nv; i += 8) {   /* pair order 0 1 4 5 2 3 6 7 */ \
                _mm256_storeu_ps(cp + i, _mm256_castpd_ps(_mm256_permute4x64_pd(     \
                    _mm256_castps_pd(_mm256_loadu_ps(cos + i0 + i)), 0xD8)));        \
                _mm256_storeu_ps(sp + i, _mm256_castpd_ps(_mm256_permute4x64_pd(     \
                    _mm256_castps_pd(_mm256_loadu_ps(sin + i0 + i)), 0xD8)));        \
            }                                                                        \
            if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                   \
                IL_HEADS16(T, LD16, ST16, _mm256_fmsub_ps, _mm256_fmadd_ps)          \
            else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                   \
                IL_HEADS16(T, LD16, ST16, _mm256_fmadd_ps, _mm256_fmsub_ps)          \
            if (nv == n)                                                             \
                continue;                                                            \
            for (int64_t h = 0; h < n_heads; h++) { /* leftovers: < 8 pairs */       \
                const T *x = (const T *)xv + h * x_sh + 2 * i0;                      \
                T *y = (T *)yv + h * y_sh + 2 * i0;                                  \
                for (int64_t i = nv; i < n; i++) {                                   \
                    const float c = cos[i0 + i];                                     \
                    const float s = inverse ? -sin[i0 + i] : sin[i0 + i];            \
                    const float x0 = LD1(x + 2 * i), x1 = LD1(x + 2 * i + 1);        \
                    ST1(y + 2 * i, __builtin_fmaf(x0, c, -(x1 * s)));                \
                    ST1(y + 2 * i + 1, __builtin_fmaf(x1, c, x0 * s));               \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }

/* Interleaved, for float16 storage: 4 pairs per 8 lanes, fmaddsub on the
 * vectors as loaded. The token's cos/sin are duplicated once ([c0 c0 c1 c1
 * ...], sin with the inverse sign) and shared by every head. Fewer shuffles
 * than the float32 kernel above, which matters when the F16C conversions
 * already keep the shuffle units busy (measured).
 * (Taking heads two at a time, to load each duplicated vector once per two,
 * was measured 3x slower on large in-place calls: do not.) */
#define IL_DUP_STEP16(T, LD16, ST16, x, y, j)                                            \
    do {                                                                             \
        __m256 va, vb;                                                               \
        LD16((x) + (j), &va, &vb);                                                   \
        ROPE_IN_REGISTER(va);                                                        \
        ROPE_IN_REGISTER(vb);                                                        \
        ST16((y) + (j), _mm256_fmaddsub_ps(va, c0, _mm256_mul_ps(_mm256_permute_ps(va, 0xB1), s0)), \
             _mm256_fmaddsub_ps(vb, c1, _mm256_mul_ps(_mm256_permute_ps(vb, 0xB1), s1)));          \
    } while (0)

#define ROPE_AVX2_INTERLEAVED_DUP(NAME, T, LD16, ST16, LD8, ST8, LD1, ST1)               \
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const float *cos, const float *sin,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        float cc[2 * IL_CHUNK], ss[2 * IL_CHUNK];                                    \
        for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {                            \
            const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;           \
            const int64_t nv = n & ~(int64_t)3;     /* pairs in whole vectors */     \
            const int64_t n16 = 2 * n & ~(int64_t)15; /* floats in 16-lane steps */  \
            const __m128 sign = _mm_set1_ps(inverse ? -0.0f : 0.0f);                 \
            for (int64_t i = 0; i < nv; i += 4) {                                    \
                const __m128 c4 = _mm_loadu_ps(cos + i0 + i);                        \
                const __m128 s4 = _mm_xor_ps(_mm_loadu_ps(sin + i0 + i), sign);      \
                _mm_storeu_ps(cc + 2 * i, _mm_unpacklo_ps(c4, c4));                  \
                _mm_storeu_ps(cc + 2 * i + 4, _mm_unpackhi_ps(c4, c4));              \
                _mm_storeu_ps(ss + 2 * i, _mm_unpacklo_ps(s4, s4));                  \
                _mm_storeu_ps(ss + 2 * i + 4, _mm_unpackhi_ps(s4, s4));              \
            }                                                                        \
            int64_t h = 0;                                                           \
            for (; h < n_heads; h++) {                                               \
                const T *xa = (const T *)xv + h * x_sh + 2 * i0;                     \
                T *ya = (T *)yv + h * y_sh + 2 * i0;                                 \
                for (int64_t j = 0; j < n16; j += 16) {                              \
                    const __m256 c0 = _mm256_loadu_ps(cc + j), c1 = _mm256_loadu_ps(cc + j + 8); \
                    const __m256 s0 = _mm256_loadu_ps(ss + j), s1 = _mm256_loadu_ps(ss + j + 8); \
                    IL_DUP_STEP16(T, LD16, ST16, xa, ya, j);                             \
                }                                                                    \
            }                                                                        \
            for (h = 0; h < n_heads; h++) { /* leftovers: < 8 pairs per head */      \
                const T *x = (const T *)xv + h * x_sh + 2 * i0;                      \
                T *y = (T *)yv + h * y_sh + 2 * i0;                                  \
                for (int64_t j = n16; j < 2 * nv; j += 8) {                          \
                    const __m256 v = LD8(x + j);                   /* x0 x1 ... */   \
                    const __m256 w = _mm256_permute_ps(v, 0xB1);   /* x1 x0 ... */   \
                    /* even lanes: x0*c - x1*s, odd lanes: x1*c + x0*s */            \
                    ST8(y + j, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(cc + j),        \
                                                  _mm256_mul_ps(w, _mm256_loadu_ps(ss + j)))); \
                }                                                                    \
                for (int64_t i = nv; i < n; i++) {                                   \
                    const float c = cos[i0 + i];                                     \
                    const float s = inverse ? -sin[i0 + i] : sin[i0 + i];            \
                    const float x0 = LD1(x + 2 * i), x1 = LD1(x + 2 * i + 1);        \
                    ST1(y + 2 * i, __builtin_fmaf(x0, c, -(x1 * s)));                \
                    ST1(y + 2 * i + 1, __builtin_fmaf(x1, c, x0 * s));               \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }

#define F32 float, ld16_f32, st16_f32, ld8_f32, st8_f32, ld1_f32, st1_f32
#define F16 uint16_t, ld16_f16, st16_f16, ld8_f16, st8_f16, ld1_f16, st1_f16
#define EXPAND(M, ...) M(__VA_ARGS__)
ROPE_AVX2_SPLIT_PART(split_part_f32, float, ld8_f32, st8_f32, ld4_f32, st4_f32, ld1_f32, st1_f32)
ROPE_AVX2_SPLIT_PART(split_part_f16, uint16_t, ld8_f16, st8_f16, ld4_f16, st4_f16, ld1_f16, st1_f16)
ROPE_AVX2_SPLIT_PART(split_part_bf16, uint16_t, ld8_bf16, st8_bf16, ld4_bf16, st4_bf16, ld1_bf16, st1_bf16)
ROPE_AVX2_SPLIT(rope_rot_sh_f32_avx2, split_part_f32, 1, float, ld16_f32, st16_f32)
ROPE_AVX2_SPLIT(rope_rot_sh_f16_avx2, split_part_f16, 0, uint16_t, ld16_f16, st16_f16)
EXPAND(ROPE_AVX2_INTERLEAVED, il_f32_by_head, F32)

/* Interleaved float32 with the token's heads back to back (full rotary,
 * x_sh == y_sh == 2 * half) and x off a 32-byte boundary by p whole pairs
 * (numpy puts large arrays 16 bytes past a page; every other 32-byte access
 * then straddles two cache lines, about a quarter slower on in-cache data,
 * measured). The token is one run of n_heads * half pairs whose table entry
 * repeats every half pairs, so the 8-pair steps can start at the boundary
 * and run on across head boundaries: step k takes pairs p + 8k .. p + 8k + 7
 * and the table entries (p + 8k + m) mod half, permuted as IL_STEP16 wants
 * (half % 8 == 0: they repeat every half / 8 steps). The first p pairs and
 * the last 8 - p take the scalar formula. */
#define IL_FLAT_STEPS(FM0, FM1)                                                      \
    for (int64_t k = 0; j + 8 <= n_pairs; j += 8) {                                  \
        const __m256 va = _mm256_loadu_ps(x + 2 * j), vb = _mm256_loadu_ps(x + 2 * j + 8); \
        const __m256 c = _mm256_loadu_ps(cp + 8 * k), s = _mm256_loadu_ps(sp + 8 * k); \
        const __m256 x0 = _mm256_shuffle_ps(va, vb, 0x88); /* evens */               \
        const __m256 x1 = _mm256_shuffle_ps(va, vb, 0xDD); /* odds */                \
        const __m256 y0 = FM0(x0, c, _mm256_mul_ps(x1, s));                          \
        const __m256 y1 = FM1(x1, c, _mm256_mul_ps(x0, s));                          \
        _mm256_storeu_ps(y + 2 * j, _mm256_unpacklo_ps(y0, y1));                     \
        _mm256_storeu_ps(y + 2 * j + 8, _mm256_unpackhi_ps(y0, y1));                 \
        k = k + 1 == period ? 0 : k + 1;                                             \
    }

ROPE_AVX2 static void il_f32_flat(const float *x, float *y, int64_t n_pairs, const float *cos,
                                  const float *sin, int64_t half, int64_t p, int inverse)
{
    float cp[IL_CHUNK], sp[IL_CHUNK];
    const int64_t period = half / 8;
    for (int64_t k = 0; k < period; k++) { /* pair order 0 1 4 5 2 3 6 7 */
        const float *c8 = cos + p + 8 * k, *s8 = sin + p + 8 * k;
        float wc[8], ws[8];
        if (k == period - 1) { /* the step that wraps to entry 0 */
            for (int64_t m = 0; m < 8; m++) {
                const int64_t e = p + 8 * k + m < half ? p + 8 * k + m : p + 8 * k + m - half;
                wc[m] = cos[e];
                ws[m] = sin[e];
            }
            c8 = wc;
            s8 = ws;
        }
        _mm256_storeu_ps(cp + 8 * k, _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_loadu_ps(c8)), 0xD8)));
        _mm256_storeu_ps(sp + 8 * k, _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_loadu_ps(s8)), 0xD8)));
    }
    int64_t j = p;
    if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
        IL_FLAT_STEPS(_mm256_fmsub_ps, _mm256_fmadd_ps)
    else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s (see SPLIT_STEP16) */
        IL_FLAT_STEPS(_mm256_fmadd_ps, _mm256_fmsub_ps)
    for (int64_t part = 0; part < 2; part++) { /* pairs [0, p), then [j, n_pairs) */
        const int64_t a = part ? j : 0, b = part ? n_pairs : p;
        for (int64_t i = a, e = a % half; i < b; i++, e = e + 1 == half ? 0 : e + 1) {
            const float c = cos[e], s = inverse ? -sin[e] : sin[e];
            const float x0 = x[2 * i], x1 = x[2 * i + 1];
            y[2 * i] = __builtin_fmaf(x0, c, -(x1 * s));
            y[2 * i + 1] = __builtin_fmaf(x1, c, x0 * s);
        }
    }
}

ROPE_AVX2 void rope_rot_il_f32_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const float *cos, const float *sin,
                                    int64_t half, int inverse)
{
    /* pairs before x's first 32-byte boundary (0: on it, or a pair straddles it) */
    const int64_t mis = (int64_t)((uintptr_t)xv & 31);
    const int64_t p = mis % 8 ? 0 : (32 - mis) % 32 / 8;
    /* Below 512 pairs a token the scalar pairs and the wrapped table step
     * cost more than the aligned steps save (measured: 1x128x8x64 14% slower,
     * 1x2048x8x128 3% faster, 16x1x32x128 20% faster). */
    if (p && x_sh == 2 * half && y_sh == 2 * half && half % 8 == 0 && half <= IL_CHUNK &&
        n_heads * half >= 512)
        il_f32_flat((const float *)xv, (float *)yv, n_heads * half, cos, sin, half, p, inverse);
    else
        il_f32_by_head(xv, yv, x_sh, y_sh, n_heads, cos, sin, half, inverse);
}
EXPAND(ROPE_AVX2_INTERLEAVED_DUP, rope_rot_il_f16_avx2, F16)

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
 * shift is done by the blend, which takes their high halves as they are. */
ROPE_AVX2 static inline __m256i bf16_round_hi(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
}

ROPE_AVX2 static inline void bf16_narrow_eo(uint16_t *p, __m256 even, __m256 odd)
{
    const __m256i e = _mm256_srli_epi32(bf16_round_hi(even), 16);
    _mm256_storeu_si256((__m256i *)p, _mm256_blend_epi16(e, bf16_round_hi(odd), 0xAA));
}

/* Split half: 16 pairs per step, as two sets of 8 (even and odd i). */
#define BF16_SPLIT_STEP(FM0, FM1)                                                    \
    do {                                                                             \
        __m256 x0e, x0o, x1e, x1o;                                                   \
        bf16_widen_eo(x + i, &x0e, &x0o);                                            \
        bf16_widen_eo(x + i + half, &x1e, &x1o);                                     \
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

ROPE_AVX2 void rope_rot_sh_bf16_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                     int64_t n_heads, const float *cos, const float *sin,
                                     int64_t half, int inverse)
{
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
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
            BF16_SPLIT_HEADS(_mm256_fmsub_ps, _mm256_fmadd_ps)
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s (see SPLIT_STEP16) */
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
            const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i); \
            bf16_narrow_eo(y + 2 * i, FM0(x0, c, _mm256_mul_ps(x1, s)),              \
                           FM1(x1, c, _mm256_mul_ps(x0, s)));                        \
        }                                                                            \
    }

ROPE_AVX2 void rope_rot_il_bf16_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                     int64_t n_heads, const float *cos, const float *sin,
                                     int64_t half, int inverse)
{
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
            const float x0 = ld1_bf16(x + 2 * i), x1 = ld1_bf16(x + 2 * i + 1);
            st1_bf16(y + 2 * i, __builtin_fmaf(x0, c, -(x1 * s)));
            st1_bf16(y + 2 * i + 1, __builtin_fmaf(x1, c, x0 * s));
        }
    }
}

/* ---- float64: float64 arithmetic, float32 table entries widened ---------- */

ROPE_AVX2 void rope_rot_sh_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const float *cos, const float *sin,
                                    int64_t half, int inverse)
{
    const __m256d sign = _mm256_set1_pd(inverse ? -0.0 : 0.0);
    for (int64_t h = 0; h < n_heads; h++) {
        const double *x = (const double *)xv + h * x_sh;
        double *y = (double *)yv + h * y_sh;
        int64_t i = 0;
        for (; i + 4 <= half; i += 4) {
            const __m256d c = _mm256_cvtps_pd(_mm_loadu_ps(cos + i));
            const __m256d s = _mm256_xor_pd(_mm256_cvtps_pd(_mm_loadu_ps(sin + i)), sign);
            const __m256d x0 = _mm256_loadu_pd(x + i), x1 = _mm256_loadu_pd(x + i + half);
            _mm256_storeu_pd(y + i, _mm256_fmsub_pd(x0, c, _mm256_mul_pd(x1, s)));
            _mm256_storeu_pd(y + i + half, _mm256_fmadd_pd(x1, c, _mm256_mul_pd(x0, s)));
        }
        for (; i < half; i++) {
            const double c = cos[i], s = inverse ? -sin[i] : sin[i];
            const double x0 = x[i], x1 = x[i + half];
            y[i] = __builtin_fma(x0, c, -(x1 * s));
            y[i + half] = __builtin_fma(x1, c, x0 * s);
        }
    }
}

ROPE_AVX2 void rope_rot_il_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const float *cos, const float *sin,
                                    int64_t half, int inverse)
{
    double cc[2 * IL_CHUNK], ss[2 * IL_CHUNK];
    for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {
        const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;
        const int64_t nv = n & ~(int64_t)1;
        for (int64_t i = 0; i < nv; i++) {
            const float s = inverse ? -sin[i0 + i] : sin[i0 + i];
            cc[2 * i] = cc[2 * i + 1] = cos[i0 + i];
            ss[2 * i] = ss[2 * i + 1] = s;
        }
        for (int64_t h = 0; h < n_heads; h++) {
            const double *x = (const double *)xv + h * x_sh + 2 * i0;
            double *y = (double *)yv + h * y_sh + 2 * i0;
            for (int64_t j = 0; j < 2 * nv; j += 4) {
                const __m256d v = _mm256_loadu_pd(x + j);
                const __m256d w = _mm256_permute_pd(v, 0x5);
                _mm256_storeu_pd(y + j, _mm256_fmaddsub_pd(v, _mm256_loadu_pd(cc + j),
                                                           _mm256_mul_pd(w, _mm256_loadu_pd(ss + j))));
            }
            for (int64_t i = nv; i < n; i++) {
                const double c = cos[i0 + i], s = inverse ? -sin[i0 + i] : sin[i0 + i];
                const double x0 = x[2 * i], x1 = x[2 * i + 1];
                y[2 * i] = __builtin_fma(x0, c, -(x1 * s));
                y[2 * i + 1] = __builtin_fma(x1, c, x0 * s);
            }
        }
    }
}

#endif
