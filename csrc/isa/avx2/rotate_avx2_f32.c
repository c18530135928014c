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

ROPE_AVX2_INTERLEAVED(rope_rot_il_f32_avx2, float, ld8_f32, st8_f32, rope_pair_f32)

#endif
