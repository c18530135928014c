/* AVX2 rotation kernels for float32 storage (rotate_avx2.h says what every
 * AVX2 kernel shares): split half through the shared 16-pair steps, peeled
 * to x's first 32-byte boundary; interleaved through the shared kernel of
 * duplicated table entries, four heads per step. */
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

ROPE_AVX2_INTERLEAVED(static, il_f32_heads, float, ld8_f32, st8_f32, rope_pair_f32)

/* Interleaved, head_dim 128 (half 64), a token's heads back to back and x p
 * whole pairs short of a 32-byte boundary (numpy puts large arrays 16 bytes
 * past a page: every other 32-byte access of il_f32_heads then straddles two
 * cache lines). The token is one run of pairs; its 8-pair steps start at the
 * boundary, pair p of each head, and step j of a head takes its pairs
 * p + 8j .. p + 8j + 7, so step 7 ends in the next head's first p pairs: its
 * table entries wrap, (p + 56 + m) mod 64. As in ROPE_AVX2_INTERLEAVED, 4
 * heads (then 2, then 1) share each step's duplicated entries. The token's
 * first p pairs and the last head's step 7 (it would run past the token)
 * take the scalar formula. Each pair is rotated once, and no step reads a
 * pair another step writes, so in place is exact. */
/* One 8-pair step of head h + Q at pair i (head stride 128, x_sh), against
 * the duplicated entries ca, cb, sa, sb. */
#define IL_FLAT_STEP(Q, FMAS)                                                        \
    do {                                                                             \
        const float *x = xv + (h + (Q)) * x_sh;                                      \
        float *y = yv + (h + (Q)) * y_sh;                                            \
        IL_DUP_STEP(ld8_f32, st8_f32, 0, FMAS);                                      \
    } while (0)
#define IL_FLAT_DUP(C8P, S8P)                                                        \
    const __m256 c8 = _mm256_loadu_ps(C8P), s8 = _mm256_loadu_ps(S8P);              \
    const __m256 ca = _mm256_permutevar8x32_ps(c8, lo), cb = _mm256_permutevar8x32_ps(c8, hi); \
    const __m256 sa = _mm256_permutevar8x32_ps(s8, lo), sb = _mm256_permutevar8x32_ps(s8, hi)
/* Heads [h, h + G) while G more remain: steps 0-6 within each head, then
 * step 7 (wrapped entries), which the token's last head leaves out. */
#define IL_FLAT_GROUP(G, FMAS)                                                       \
    for (; h + (G) <= n_heads; h += (G)) {                                           \
        for (int64_t i = p; i < p + 56; i += 8) {                                    \
            IL_FLAT_DUP(cos + i, sin + i);                                           \
            IL_FLAT_STEP(0, FMAS);                                                   \
            if ((G) > 1)                                                             \
                IL_FLAT_STEP(1, FMAS);                                               \
            if ((G) > 2) {                                                           \
                IL_FLAT_STEP(2, FMAS);                                               \
                IL_FLAT_STEP(3, FMAS);                                               \
            }                                                                        \
        }                                                                            \
        const int64_t i = p + 56;                                                    \
        IL_FLAT_DUP(wc, ws);                                                         \
        for (int64_t q = 0; q < (G) && h + q < n_heads - 1; q++)                     \
            IL_FLAT_STEP(q, FMAS);                                                   \
    }
#define IL_FLAT_HEADS(FMAS)                                                          \
    {                                                                                \
        int64_t h = 0;                                                               \
        IL_FLAT_GROUP(4, FMAS)                                                       \
        IL_FLAT_GROUP(2, FMAS)                                                       \
        IL_FLAT_GROUP(1, FMAS)                                                       \
    }

ROPE_AVX2 static void il_f32_flat(const float *xv, float *yv, int64_t n_heads, const float *cos,
                                  const float *sin, int64_t p, int inverse)
{
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    const int64_t x_sh = 128, y_sh = 128; /* heads back to back */
    const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(float));
    float wc[8], ws[8]; /* step 7's entries: the head's last 8 - p, then its first p */
    for (int m = 0; m < 8; m++) {
        wc[m] = cos[(p + 56 + m) % 64];
        ws[m] = sin[(p + 56 + m) % 64];
    }
    if (!inverse)
        IL_FLAT_HEADS(_mm256_fmaddsub_ps)
    else
        IL_FLAT_HEADS(_mm256_fmsubadd_ps)
    for (int64_t e = 0; e < p; e++) { /* head 0's pairs before the first step */
        const float c = cos[e], s = inverse ? -sin[e] : sin[e];
        rope_pair_f32(xv, yv, 2 * e, 2 * e + 1, c, s);
    }
    const float *xl = xv + (n_heads - 1) * x_sh;
    float *yl = yv + (n_heads - 1) * y_sh;
    for (int64_t e = p + 56; e < 64; e++) { /* the last head's step 7, in its own head */
        const float c = cos[e], s = inverse ? -sin[e] : sin[e];
        rope_pair_f32(xl, yl, 2 * e, 2 * e + 1, c, s);
    }
}

ROPE_AVX2 void rope_rot_il_f32_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    /* pairs before x's first 32-byte boundary (0: on it, or a pair straddles it) */
    const int64_t mis = (int64_t)((uintptr_t)xv & 31);
    const int64_t p = mis % 8 ? 0 : (32 - mis) % 32 / 8;
    /* below 16 heads a token, its 8 scalar pairs cost more than the aligned
     * steps save */
    if (p && half == 64 && x_sh == 128 && y_sh == 128 && n_heads >= 16)
        il_f32_flat((const float *)xv, (float *)yv, n_heads, (const float *)cosv, (const float *)sinv, p,
                    inverse);
    else
        il_f32_heads(xv, yv, x_sh, y_sh, n_heads, cosv, sinv, half, inverse);
}

#endif
