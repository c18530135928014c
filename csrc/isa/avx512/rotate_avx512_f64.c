/* AVX-512 rotation kernels for float64 storage (rotate_avx512.h holds the
 * loops they share with float32): float64 arithmetic on float64 table rows,
 * 8 lanes per vector, rotate.c's formula lane for lane.
 *
 * Split half: the row in registers while the heads go by (up to 64 pairs;
 * longer heads head by head with the row read along), per 8 pairs two
 * loads, two products, two FMAs, two stores, a head's last vector ending at
 * its last pair; a token's heads back to back off a 64-byte boundary as one
 * aligned run (ROPE_AVX512_SH_FLAT).
 * Interleaved, up to 32 pairs: the row duplicated to pair order in
 * registers and fmaddsub(v, C, swap(v) * S) per vector of 4 pairs; longer
 * heads separate the coordinates with in-lane shuffles (shufpd, unpcklpd)
 * against a row permuted to match, one head after the other.
 * The few shapes the AVX2 kernels do faster go to them. */
#include "rotate_avx512.h"

#ifdef ROPE_HAVE_X86

/* ---- split half ----------------------------------------------------------- */

ROPE_AVX512_SH_ROWS(sh_rows_f64, double, __m512d, pd, 8, __mmask8, rope_avx512_lanes8)
/* lanes 8 - m .. 15 - m of two neighbouring row vectors */
#define ROT_PD(m)                                                                    \
    _mm512_sub_epi64(_mm512_set_epi64(15, 14, 13, 12, 11, 10, 9, 8), _mm512_set1_epi64(m))
ROPE_AVX512_SH_FLAT(sh_flat_f64, double, __m512d, pd, 8, __mmask8, rope_avx512_lanes8, ROT_PD)
ROPE_AVX512_SH(sh_f64, sh_rows_f64, sh_flat_f64, double, __m512d, pd, 8, __mmask8)

/* the AVX2 kernels (rotate_avx2_f64.c), for what they do faster */
void rope_rot_sh_f64_avx2(ROPE_ROT_PARAMS);
void rope_rot_il_f64_avx2(ROPE_ROT_PARAMS);

ROPE_AVX512 void rope_rot_sh_f64_avx512(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                        int64_t n_heads, const void *cosv, const void *sinv,
                                        int64_t half, int inverse)
{
    if (n_heads <= 0 || half <= 0) /* nothing to rotate: touch nothing */
        return;
    if (ROPE_AVX512_SH_TO_AVX2(half, x_sh, 8))
        rope_rot_sh_f64_avx2(xv, yv, x_sh, y_sh, n_heads, cosv, sinv, half, inverse);
    else
        sh_f64((const double *)xv, (double *)yv, x_sh, y_sh, n_heads, (const double *)cosv,
               (const double *)sinv, half, inverse);
}

/* ---- interleaved ---------------------------------------------------------- */

/* shufpd 0x00 / 0xFF leave the pairs of two vectors in the order
 * 0 4 | 1 5 | 2 6 | 3 7 (128-bit lanes); unpcklpd and unpckhpd of a row
 * vector in that order with itself duplicate pairs 0-3 and 4-7 to pair
 * order */
#define IL_ORDER _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0)
/* exchange the coordinates of each pair */
#define SWAP_PD(v) _mm512_permute_pd(v, 0x55)
ROPE_AVX512_IL_ROWS(il_rows_f64, double, __m512d, pd, 8, __mmask8, rope_avx512_lanes8, IL_ORDER,
                    SWAP_PD)
ROPE_AVX512_IL_SEP_ROWS(il_sep_f64, double, __m512d, pd, 8, __mmask8, rope_avx512_lanes8,
                        IL_ORDER, 0x00, 0xFF)
ROPE_AVX512_IL_WIDE(il_wide_f64, il_sep_f64, double, __m512d, pd, 8, __mmask8, rope_avx512_lanes8,
                    IL_ORDER, 0x00, 0xFF)

ROPE_AVX512 void rope_rot_il_f64_avx512(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                        int64_t n_heads, const void *cosv, const void *sinv,
                                        int64_t half, int inverse)
{
    if (n_heads <= 0 || half <= 0) /* nothing to rotate: touch nothing */
        return;
    const double *x = (const double *)xv, *cos = (const double *)cosv, *sin = (const double *)sinv;
    double *y = (double *)yv;
    if (ROPE_AVX512_IL_TO_AVX2(half, x_sh, 8))
        rope_rot_il_f64_avx2(xv, yv, x_sh, y_sh, n_heads, cosv, sinv, half, inverse);
    else if (half <= 32) {
#define IL_ROWS_(F, NV) F(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse, NV)
        ROPE_AVX512_NV_SWITCH((2 * half + 7) / 8, IL_ROWS_, il_rows_f64)
#undef IL_ROWS_
    } else
        il_wide_f64(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse);
}

#endif
