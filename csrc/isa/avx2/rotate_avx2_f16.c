/* AVX2 rotation kernels for float16 storage, through F16C (rotate_avx2.h
 * says what every AVX2 kernel shares): split half through the shared 16-pair
 * steps, not peeled; interleaved with fmaddsub on the vectors as loaded. */
#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

/* ---- loads and stores: 16 lanes (8 and 4: rotate_avx2.h) ----------------- */

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

/* ---- split half ----------------------------------------------------------- */

ROPE_AVX2_SPLIT_PART(split_part_f16, uint16_t, ld8_f16, st8_f16, ld4_f16, st4_f16, rope_pair_f16)
ROPE_AVX2_SPLIT(rope_rot_sh_f16_avx2, split_part_f16, 0, uint16_t, ld16_f16, st16_f16)

/* ---- interleaved ---------------------------------------------------------- */

/* Interleaved, for float16 storage: 4 pairs per 8 lanes, fmaddsub on the
 * vectors as loaded. The token's cos/sin are duplicated once ([c0 c0 c1 c1
 * ...], sin with the inverse sign) and shared by every head. Fewer shuffles
 * than the float32 kernel (rotate_avx2_f32.c), which matters when the F16C conversions
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

#define ROPE_AVX2_INTERLEAVED_DUP(NAME, T, LD16, ST16, LD8, ST8, PAIR)                    \
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const void *cosv, const void *sinv,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const float *cos = (const float *)cosv, *sin = (const float *)sinv;          \
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
                    PAIR(x, y, 2 * i, 2 * i + 1, c, s);                              \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }
ROPE_AVX2_INTERLEAVED_DUP(rope_rot_il_f16_avx2, uint16_t, ld16_f16, st16_f16, ld8_f16, st8_f16,
                          rope_pair_f16)

#endif
