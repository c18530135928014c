/* AVX2 rotation kernels for float32 storage (rotate_avx2.h says what every
 * AVX2 kernel shares): split half through the shared 16-pair steps, peeled
 * to x's first 32-byte boundary; interleaved by separating even and odd
 * coordinates, per head or, for a token's heads back to back, in one run
 * across head boundaries. */
#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

/* ---- loads and stores: 8, 16 and 4 lanes --------------------------------- */

ROPE_AVX2 static inline __m256 ld8_f32(const float *p) { return _mm256_loadu_ps(p); }
ROPE_AVX2 static inline void st8_f32(float *p, __m256 v) { _mm256_storeu_ps(p, v); }

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

ROPE_AVX2 static inline __m128 ld4_f32(const float *p) { return _mm_loadu_ps(p); }
ROPE_AVX2 static inline void st4_f32(float *p, __m128 v) { _mm_storeu_ps(p, v); }

/* ---- split half ----------------------------------------------------------- */

ROPE_AVX2_SPLIT_PART(split_part_f32, float, ld8_f32, st8_f32, ld4_f32, st4_f32, rope_pair_f32)
ROPE_AVX2_SPLIT(rope_rot_sh_f32_avx2, split_part_f32, 1, float, ld16_f32, st16_f32)

/* ---- interleaved ---------------------------------------------------------- */

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

#define ROPE_AVX2_INTERLEAVED(NAME, T, LD16, ST16, PAIR)                              \
    ROPE_AVX2 static void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const void *cosv, const void *sinv,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const float *cos = (const float *)cosv, *sin = (const float *)sinv;          \
        float cp[IL_CHUNK], sp[IL_CHUNK];                                            \
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
                    PAIR(x, y, 2 * i, 2 * i + 1, c, s);                              \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }

ROPE_AVX2_INTERLEAVED(il_f32_by_head, float, ld16_f32, st16_f32, rope_pair_f32)

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
            rope_pair_f32(x, y, 2 * i, 2 * i + 1, c, s);
        }
    }
}

ROPE_AVX2 void rope_rot_il_f32_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
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

#endif
