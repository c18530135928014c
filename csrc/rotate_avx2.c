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
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

ROPE_AVX2 static inline __m256 ld8_bf16(const uint16_t *p)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
ROPE_AVX2 static inline void st8_bf16(uint16_t *p, __m256 v)
{
    /* round to nearest even: (u + 0x7FFF + lsb) >> 16; NaN -> sign | 0x7FC0 */
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i qnan = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7FC0));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i b = _mm256_blendv_epi8(r, qnan, nan);
    /* 8 x 32 -> 8 x 16 (values fit: no saturation), lanes back in order */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

static inline float ld1_f32(const float *p) { return *p; }
static inline void st1_f32(float *p, float v) { *p = v; }
static inline float ld1_f16(const uint16_t *p) { return rope_f16_to_f32(*p); }
static inline void st1_f16(uint16_t *p, float v) { *p = rope_f32_to_f16(v); }
static inline float ld1_bf16(const uint16_t *p) { return rope_bf16_to_f32(*p); }
static inline void st1_bf16(uint16_t *p, float v) { *p = rope_f32_to_bf16(v); }

/* ---- float32 arithmetic: float32, float16, bfloat16 storage -------------- */

/* Split half: 8 pairs (i .. i+7, i+half .. i+half+7) per step. */
#define ROPE_AVX2_SPLIT(NAME, T, LD8, ST8, LD1, ST1)                                 \
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const float *cos, const float *sin,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        const __m256 sign = _mm256_set1_ps(inverse ? -0.0f : 0.0f);                  \
        for (int64_t h = 0; h < n_heads; h++) {                                      \
            const T *x = (const T *)xv + h * x_sh;                                   \
            T *y = (T *)yv + h * y_sh;                                               \
            int64_t i = 0;                                                           \
            for (; i + 8 <= half; i += 8) {                                          \
                const __m256 c = _mm256_loadu_ps(cos + i);                           \
                const __m256 s = _mm256_xor_ps(_mm256_loadu_ps(sin + i), sign);      \
                const __m256 x0 = LD8(x + i), x1 = LD8(x + i + half);                \
                /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                             \
                ST8(y + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));            \
                ST8(y + i + half, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)));     \
            }                                                                        \
            for (; i < half; i++) { /* leftovers: the scalar formula */              \
                const float c = cos[i], s = inverse ? -sin[i] : sin[i];              \
                const float x0 = LD1(x + i), x1 = LD1(x + i + half);                 \
                ST1(y + i, __builtin_fmaf(x0, c, -(x1 * s)));                        \
                ST1(y + i + half, __builtin_fmaf(x1, c, x0 * s));                    \
            }                                                                        \
        }                                                                            \
    }

/* Interleaved: 4 pairs per 8 lanes. The token's cos/sin are duplicated once
 * ([c0 c0 c1 c1 ...], sin with the inverse sign) and shared by every head. */
#define ROPE_AVX2_INTERLEAVED(NAME, T, LD8, ST8, LD1, ST1)                           \
    ROPE_AVX2 void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,        \
                        int64_t n_heads, const float *cos, const float *sin,         \
                        int64_t half, int inverse)                                   \
    {                                                                                \
        float cc[2 * IL_CHUNK], ss[2 * IL_CHUNK];                                    \
        for (int64_t i0 = 0; i0 < half; i0 += IL_CHUNK) {                            \
            const int64_t n = half - i0 < IL_CHUNK ? half - i0 : IL_CHUNK;           \
            const int64_t nv = n & ~(int64_t)3;                                      \
            for (int64_t i = 0; i < nv; i++) {                                       \
                const float s = inverse ? -sin[i0 + i] : sin[i0 + i];                \
                cc[2 * i] = cc[2 * i + 1] = cos[i0 + i];                             \
                ss[2 * i] = ss[2 * i + 1] = s;                                       \
            }                                                                        \
            for (int64_t h = 0; h < n_heads; h++) {                                  \
                const T *x = (const T *)xv + h * x_sh + 2 * i0;                      \
                T *y = (T *)yv + h * y_sh + 2 * i0;                                  \
                for (int64_t j = 0; j < 2 * nv; j += 8) {                            \
                    const __m256 v = LD8(x + j);                   /* x0 x1 ... */   \
                    const __m256 w = _mm256_permute_ps(v, 0xB1);   /* x1 x0 ... */   \
                    const __m256 s = _mm256_loadu_ps(ss + j);                        \
                    /* even lanes: x0*c - x1*s, odd lanes: x1*c + x0*s */            \
                    ST8(y + j, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(cc + j),        \
                                                  _mm256_mul_ps(w, s)));             \
                }                                                                    \
                for (int64_t i = nv; i < n; i++) { /* leftovers */                   \
                    const float c = cos[i0 + i];                                     \
                    const float s = inverse ? -sin[i0 + i] : sin[i0 + i];            \
                    const float x0 = LD1(x + 2 * i), x1 = LD1(x + 2 * i + 1);        \
                    ST1(y + 2 * i, __builtin_fmaf(x0, c, -(x1 * s)));                \
                    ST1(y + 2 * i + 1, __builtin_fmaf(x1, c, x0 * s));               \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }

ROPE_AVX2_SPLIT(rope_rot_sh_f32_avx2, float, ld8_f32, st8_f32, ld1_f32, st1_f32)
ROPE_AVX2_SPLIT(rope_rot_sh_f16_avx2, uint16_t, ld8_f16, st8_f16, ld1_f16, st1_f16)
ROPE_AVX2_SPLIT(rope_rot_sh_bf16_avx2, uint16_t, ld8_bf16, st8_bf16, ld1_bf16, st1_bf16)
ROPE_AVX2_INTERLEAVED(rope_rot_il_f32_avx2, float, ld8_f32, st8_f32, ld1_f32, st1_f32)
ROPE_AVX2_INTERLEAVED(rope_rot_il_f16_avx2, uint16_t, ld8_f16, st8_f16, ld1_f16, st1_f16)
ROPE_AVX2_INTERLEAVED(rope_rot_il_bf16_avx2, uint16_t, ld8_bf16, st8_bf16, ld1_bf16, st1_bf16)

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
