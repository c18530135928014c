/* AVX2 rotation kernels for float16 storage, through F16C (rotate_avx2.h
 * says what every AVX2 kernel shares): split half through the shared 16-pair
 * steps, not peeled; interleaved through the shared kernel of duplicated
 * table entries, four heads per step. */
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

ROPE_AVX2_INTERLEAVED(, rope_rot_il_f16_avx2, uint16_t, ld8_f16, st8_f16, rope_pair_f16)

#endif
