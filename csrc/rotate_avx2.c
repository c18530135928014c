/* AVX2 + FMA rotation kernels, compiled for that target by function
 * attributes (no global -m flags) and called only after run-time detection.
 * Lane for lane they compute the scalar formula of rotate.c:
 *   y0 = fma(x0, c, -(x1 * s)),  y1 = fma(x1, c, x0 * s)
 * Unaligned loads and stores throughout; the leftover pairs (fewer than one
 * vector) run the scalar kernel, which rounds identically.
 */
#include "kernels.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

#define ROPE_AVX2 __attribute__((target("avx2,fma")))

ROPE_AVX2 void rope_row_interleaved_f32_avx2(const float *x, float *y,
                                             const float *cos, const float *sin,
                                             int64_t half, int inverse)
{
    /* 8 floats = 4 pairs per vector: duplicate each of 4 cos/sin values. */
    const __m256 sign = _mm256_set1_ps(inverse ? -0.0f : 0.0f);
    int64_t i = 0;
    for (; i + 4 <= half; i += 4) {
        const __m128 c4 = _mm_loadu_ps(cos + i);
        const __m128 s4 = _mm_loadu_ps(sin + i);
        const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 s = _mm256_xor_ps(
            _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4)), sign);
        const __m256 v = _mm256_loadu_ps(x + 2 * i);            /* x0 x1 ... */
        const __m256 w = _mm256_permute_ps(v, 0xB1);            /* x1 x0 ... */
        /* even lanes: x0*c - x1*s, odd lanes: x1*c + x0*s */
        _mm256_storeu_ps(y + 2 * i, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(w, s)));
    }
    if (i < half)
        rope_row_interleaved_f32_scalar(x + 2 * i, y + 2 * i, cos + i, sin + i,
                                        half - i, inverse);
}

ROPE_AVX2 void rope_row_split_half_f32_avx2(const float *x, float *y,
                                            const float *cos, const float *sin,
                                            int64_t half, int inverse)
{
    const __m256 sign = _mm256_set1_ps(inverse ? -0.0f : 0.0f);
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 c = _mm256_loadu_ps(cos + i);
        const __m256 s = _mm256_xor_ps(_mm256_loadu_ps(sin + i), sign);
        const __m256 x0 = _mm256_loadu_ps(x + i);
        const __m256 x1 = _mm256_loadu_ps(x + i + half);
        /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */
        const __m256 y0 = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
        const __m256 y1 = _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s));
        _mm256_storeu_ps(y + i, y0);
        _mm256_storeu_ps(y + i + half, y1);
    }
    /* Leftover pairs: the scalar formula on (i, i + half) for the rest. */
    for (; i < half; i++) {
        const float c = cos[i];
        const float s = inverse ? -sin[i] : sin[i];
        const float x0 = x[i], x1 = x[i + half];
        y[i] = __builtin_fmaf(x0, c, -(x1 * s));
        y[i + half] = __builtin_fmaf(x1, c, x0 * s);
    }
}

#endif
