/* AVX2 rotation kernels for float64 storage (rotate_avx2.h says what every
 * AVX2 kernel shares): float64 arithmetic on float64 table rows. */
#include "rotate_avx2.h"

#ifdef ROPE_HAVE_X86

ROPE_AVX2 void rope_rot_sh_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    const __m256d sign = _mm256_set1_pd(inverse ? -0.0 : 0.0);
    for (int64_t h = 0; h < n_heads; h++) {
        const double *x = (const double *)xv + h * x_sh;
        double *y = (double *)yv + h * y_sh;
        int64_t i = 0;
        for (; i + 4 <= half; i += 4) {
            const __m256d c = _mm256_loadu_pd(cos + i);
            const __m256d s = _mm256_xor_pd(_mm256_loadu_pd(sin + i), sign);
            const __m256d x0 = _mm256_loadu_pd(x + i), x1 = _mm256_loadu_pd(x + i + half);
            _mm256_storeu_pd(y + i, _mm256_fmsub_pd(x0, c, _mm256_mul_pd(x1, s)));
            _mm256_storeu_pd(y + i + half, _mm256_fmadd_pd(x1, c, _mm256_mul_pd(x0, s)));
        }
        for (; i < half; i++) {
            const double c = cos[i], s = inverse ? -sin[i] : sin[i];
            rope_pair_f64(x, y, i, i + half, c, s);
        }
    }
}

ROPE_AVX2 void rope_rot_il_f64_avx2(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                    int64_t n_heads, const void *cosv, const void *sinv,
                                    int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    double cc[2 * IL_CHUNK], ss[2 * IL_CHUNK];
    for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {
        const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;
        const int64_t nv = n & ~(int64_t)1;
        for (int64_t i = 0; i < nv; i++) {
            const double s = inverse ? -sin[i0 + i] : sin[i0 + i];
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
                rope_pair_f64(x, y, 2 * i, 2 * i + 1, c, s);
            }
        }
    }
}

#endif
