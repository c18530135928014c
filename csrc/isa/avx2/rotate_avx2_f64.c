/* AVX2 rotation kernels for float64 storage (rotate_avx2.h says what every
 * AVX2 kernel shares): float64 arithmetic on float64 table rows; interleaved
 * four heads per step, as float32. */
#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

/* Split half: 4 pairs per step, two steps per 64-byte line of each half
 * (prefetched 4 KiB on); the inverse swaps fmsub and fmadd (see
 * SPLIT_STEP16 in rotate_avx2.h). */
#define SH64_STEP(I, FM0, FM1)                                                       \
    do {                                                                             \
        const __m256d c = _mm256_loadu_pd(cos + (I)), s = _mm256_loadu_pd(sin + (I)); \
        const __m256d x0 = _mm256_loadu_pd(x + (I)), x1 = _mm256_loadu_pd(x + (I) + half); \
        _mm256_storeu_pd(y + (I), FM0(x0, c, _mm256_mul_pd(x1, s)));                 \
        _mm256_storeu_pd(y + (I) + half, FM1(x1, c, _mm256_mul_pd(x0, s)));          \
    } while (0)

#define SH64_HEADS(FM0, FM1)                                                         \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const double *x = (const double *)xv + h * x_sh;                             \
        double *y = (double *)yv + h * y_sh;                                         \
        int64_t i = 0;                                                               \
        for (; i + 8 <= half; i += 8) {                                              \
            ROPE_PREFETCH(x + i, ahead);                                     \
            ROPE_PREFETCH(x + i + half, ahead);                              \
            SH64_STEP(i, FM0, FM1);                                                  \
            SH64_STEP(i + 4, FM0, FM1);                                              \
        }                                                                            \
        for (; i + 4 <= half; i += 4)                                                \
            SH64_STEP(i, FM0, FM1);                                                  \
        for (; i < half; i++) {                                                      \
            const double c = cos[i], s = inverse ? -sin[i] : sin[i];                 \
            rope_pair_f64(x, y, i, i + half, c, s);                                  \
        }                                                                            \
    }

ROPE_AVX2 void rope_rot_sh_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(double));
    if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
        SH64_HEADS(_mm256_fmsub_pd, _mm256_fmadd_pd)
    else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */
        SH64_HEADS(_mm256_fmadd_pd, _mm256_fmsub_pd)
}

/* Interleaved: the float32 kernel's scheme (rotate_avx2.h, ROPE_AVX2_INTERLEAVED)
 * in float64, 4 pairs (8 lanes) per step: the 4 table entries duplicated in
 * registers by permute4x64 and shared by 4, 2 or 1 heads; per head the pair
 * swap (permute_pd), a multiply and fmaddsub (fmsubadd for the inverse). */
#define IL64_STEP(H, FMAS)                                                           \
    do {                                                                             \
        __m256d xa = _mm256_loadu_pd(x + (H) * x_sh + 2 * i);                        \
        __m256d xb = _mm256_loadu_pd(x + (H) * x_sh + 2 * i + 4);                    \
        ROPE_IN_REGISTER(xa);                                                        \
        ROPE_IN_REGISTER(xb);                                                        \
        ROPE_PREFETCH(x + (H) * x_sh + 2 * i, ahead); /* its 64-byte line */  \
        _mm256_storeu_pd(y + (H) * y_sh + 2 * i, FMAS(xa, ca, _mm256_mul_pd(_mm256_permute_pd(xa, 0x5), sa))); \
        _mm256_storeu_pd(y + (H) * y_sh + 2 * i + 4,                                 \
                         FMAS(xb, cb, _mm256_mul_pd(_mm256_permute_pd(xb, 0x5), sb))); \
    } while (0)

#define IL64_GROUP(G, FMAS)                                                          \
    for (; h + (G) <= n_heads; h += (G)) {                                           \
        const double *x = (const double *)xv + h * x_sh;                             \
        double *y = (double *)yv + h * y_sh;                                         \
        for (int64_t i = 0; i < n4; i += 4) {                                        \
            const __m256d c4 = _mm256_loadu_pd(cos + i), s4 = _mm256_loadu_pd(sin + i); \
            const __m256d ca = _mm256_permute4x64_pd(c4, 0x50), cb = _mm256_permute4x64_pd(c4, 0xFA); \
            const __m256d sa = _mm256_permute4x64_pd(s4, 0x50), sb = _mm256_permute4x64_pd(s4, 0xFA); \
            IL64_STEP(0, FMAS);                                                      \
            if ((G) > 1)                                                             \
                IL64_STEP(1, FMAS);                                                  \
            if ((G) > 2) {                                                           \
                IL64_STEP(2, FMAS);                                                  \
                IL64_STEP(3, FMAS);                                                  \
            }                                                                        \
        }                                                                            \
    }

#define IL64_HEADS(FMAS)                                                             \
    {                                                                                \
        int64_t h = 0;                                                               \
        IL64_GROUP(4, FMAS)                                                          \
        IL64_GROUP(2, FMAS)                                                          \
        IL64_GROUP(1, FMAS)                                                          \
    }

ROPE_AVX2 void rope_rot_il_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    const int64_t ahead = rope_prefetch_ahead(x_sh, sizeof(double));
    const int64_t n4 = half & ~(int64_t)3; /* pairs in 4-pair steps */
    if (!inverse)
        IL64_HEADS(_mm256_fmaddsub_pd)
    else
        IL64_HEADS(_mm256_fmsubadd_pd)
    for (int64_t h = 0; h < n_heads && n4 < half; h++) /* the last pairs */
        for (int64_t i = n4; i < half; i++) {
            const double c = cos[i], s = inverse ? -sin[i] : sin[i];
            rope_pair_f64((const double *)xv + h * x_sh, (double *)yv + h * y_sh, 2 * i, 2 * i + 1, c, s);
        }
}

#endif
