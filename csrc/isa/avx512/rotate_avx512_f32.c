/* AVX-512 rotation kernels for float32 storage (rotate_avx512.h holds the
 * loops they share with float64 and says what every AVX-512 kernel shares).
 *
 * What bounds them (Zen 4, measured): a 512-bit multiply or FMA issues once
 * per cycle and a 512-bit store once every two, exactly the throughput of
 * two 256-bit ones. A rotation needs one rounded product and one FMA per
 * element and one store of it, so a head of 128 float32 takes at least 16
 * cycles with AVX2 and AVX-512 alike. In L1, 32 heads a call, the AVX2
 * kernels take 20-30 cycles a head (split half 20-25, interleaved 26-30,
 * the more 16 bytes off a 64-byte boundary), these 17.5-18 either way.
 * What AVX-512 removes is what surrounds the arithmetic: half the
 * instructions per element, the row in registers instead of reloaded per
 * step, vector tails instead of scalar pairs, and (heads back to back) no
 * access that straddles two cache lines.
 *
 * Split half: the row's cos and sin (up to 128 pairs) stay in registers
 * while the heads go by, per 16 pairs two loads, two products, two FMAs and
 * two stores; a head's last vector ends at its last pair. With a token's
 * heads back to back and x off a 64-byte boundary (numpy puts large arrays
 * 16 bytes past one) the token is one aligned run of vectors instead
 * (ROPE_AVX512_SH_FLAT). Longer heads go head by head with the row read
 * along.
 *
 * Interleaved, up to 64 pairs: the row duplicated to pair order
 * (c0 c0 c1 c1 ...) stays in registers and a vector v of 8 pairs becomes
 * fmaddsub(v, C, swap(v) * S), the swap an in-lane vpermilps that leaves
 * the FMA pipes alone: the work of split half plus one cheap shuffle.
 * head_dim 128 with heads back to back and x a whole number of pairs off a
 * 64-byte boundary: one aligned run, the duplicated row rotated to match
 * (il_f32_flat64). Longer heads separate the coordinates with in-lane
 * shuffles against a permuted row (ROPE_AVX512_IL_WIDE).
 *
 * The few shapes the AVX2 kernels do faster go to them
 * (ROPE_AVX512_SH_TO_AVX2, ROPE_AVX512_IL_TO_AVX2). Every path computes each
 * element as rotate.c does, y0 = fma(x0, c, -(x1 * s)),
 * y1 = fma(x1, c, x0 * s): one rounded product, one FMA. */
#include "rotate_avx512.h"

#ifdef ROPE_HAVE_X86

/* ---- split half ----------------------------------------------------------- */

ROPE_AVX512_SH_ROWS(sh_rows_f32, float, __m512, ps, 16, __mmask16, rope_avx512_lanes16)
/* lanes 16 - m .. 31 - m of two neighbouring row vectors */
#define ROT_PS(m)                                                                    \
    _mm512_sub_epi32(_mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, \
                                      17, 16),                                       \
                     _mm512_set1_epi32((int)(m)))
ROPE_AVX512_SH_FLAT(sh_flat_f32, float, __m512, ps, 16, __mmask16, rope_avx512_lanes16, ROT_PS)
ROPE_AVX512_SH(sh_f32, sh_rows_f32, sh_flat_f32, float, __m512, ps, 16, __mmask16)

/* the AVX2 kernels (rotate_avx2_f32.c), for what they do faster */
void rope_rot_sh_f32_avx2(ROPE_ROT_PARAMS);
void rope_rot_il_f32_avx2(ROPE_ROT_PARAMS);

ROPE_AVX512 void rope_rot_sh_f32_avx512(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                        int64_t n_heads, const void *cosv, const void *sinv,
                                        int64_t half, int inverse)
{
    if (n_heads <= 0 || half <= 0) /* nothing to rotate: touch nothing */
        return;
    const float *x = (const float *)xv, *cos = (const float *)cosv, *sin = (const float *)sinv;
    float *y = (float *)yv;
    const int64_t m = (int64_t)((uintptr_t)xv & 63) / 4; /* floats past a 64-byte boundary */
    if (half == 64 && m == 0) /* head_dim 128 on a boundary: no switch */
        sh_rows_f32(x, y, x_sh, y_sh, n_heads, cos, sin, 64, 64, inverse, 4);
    else if (ROPE_AVX512_SH_TO_AVX2(half, x_sh, 16))
        rope_rot_sh_f32_avx2(xv, yv, x_sh, y_sh, n_heads, cosv, sinv, half, inverse);
    else
        sh_f32(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse);
}

/* ---- interleaved ---------------------------------------------------------- */

/* shufps 0x88 / 0xDD leave the pairs of two vectors in the order
 * 0 1 8 9 | 2 3 10 11 | 4 5 12 13 | 6 7 14 15 (128-bit lanes); unpcklps and
 * unpckhps of a row vector in that order with itself duplicate pairs 0-7
 * and 8-15 to pair order */
#define IL_ORDER _mm512_set_epi32(15, 14, 7, 6, 13, 12, 5, 4, 11, 10, 3, 2, 9, 8, 1, 0)
/* exchange the coordinates of each pair */
#define SWAP_PS(v) _mm512_permute_ps(v, 0xB1)
ROPE_AVX512_IL_ROWS(il_rows_f32, float, __m512, ps, 16, __mmask16, rope_avx512_lanes16, IL_ORDER,
                    SWAP_PS)
ROPE_AVX512_IL_SEP_ROWS(il_sep_f32, float, __m512, ps, 16, __mmask16, rope_avx512_lanes16,
                        IL_ORDER, 0x88, 0xDD)
ROPE_AVX512_IL_WIDE(il_wide_f32, il_sep_f32, float, __m512, ps, 16, __mmask16, rope_avx512_lanes16,
                    IL_ORDER, 0x88, 0xDD)

/* Interleaved, head_dim 128 (half 64), a token's heads back to back
 * (x_sh == y_sh == 128) and x an even number m of floats (whole pairs) past
 * a 64-byte boundary: the token is one run of aligned vectors V_k = its
 * elements [16k - m, 16k - m + 16), each read and written once, the first
 * and last masked to the token. Every pair stays within one vector; vector
 * k needs the duplicated row rotated by m lanes, R_j with j = k mod 8 (8 of
 * cos, 8 of sin, made once per call by vpermt2ps, kept in registers). */
#define IL_FLAT_STEP(FM, J, OFF, MASK)                                               \
    do {                                                                             \
        __m512 v = _mm512_maskz_loadu_ps(MASK, xa + (OFF));                          \
        ROPE_IN_ZMM(v);                                                              \
        ROPE_PREFETCH(xa + (OFF), 4 * 128); /* the line 4 heads on */         \
        _mm512_mask_storeu_ps(ya + (OFF), MASK,                                      \
                              FM(v, C[J], _mm512_mul_ps(SWAP_PS(v), S[J])));         \
    } while (0)
#define IL_FLAT_HEADS(FM)                                                            \
    {                                                                                \
        IL_FLAT_STEP(FM, 0, 0, high);                                                \
        for (int64_t q = 0; q < n_heads; q++, xa += 128, ya += 128) {                \
            ROPE_AVX512_UNROLL for (int j = 1; j < 8; j++)                           \
                IL_FLAT_STEP(FM, j, 16 * j, (__mmask16)0xFFFF);                      \
            IL_FLAT_STEP(FM, 0, 128, q + 1 < n_heads ? (__mmask16)0xFFFF : low);     \
        }                                                                            \
    }

ROPE_AVX512 static void il_f32_flat64(const float *x, float *y, int64_t n_heads, const float *cos,
                                      const float *sin, int64_t m, int inverse)
{
    const float *xa = (const float *)((uintptr_t)x - 4 * (uintptr_t)m);
    float *ya = (float *)((uintptr_t)y - 4 * (uintptr_t)m);
    const __mmask16 low = (__mmask16)((1u << m) - 1), high = (__mmask16)~low;
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 cv[4], sv[4], C[8], S[8];
    ROPE_AVX512_UNROLL for (int k = 0; k < 4; k++) {
        cv[k] = _mm512_loadu_ps(cos + 16 * k);
        sv[k] = _mm512_loadu_ps(sin + 16 * k);
    }
    ROPE_AVX512_UNROLL for (int j = 0; j < 8; j++) {
        /* lane l holds pair (8j - m/2 + l/2) mod 64: with m/2 in 1..7, the
         * 8 pairs start in vector a = ((8j + 63) >> 4) mod 4, at p mod 16 */
        const int a = ((8 * j + 63) >> 4) & 3, b = (a + 1) & 3;
        const __m512i idx = _mm512_add_epi32(dup, _mm512_set1_epi32((int)((8 * j - m / 2) & 15)));
        C[j] = _mm512_permutex2var_ps(cv[a], idx, cv[b]);
        S[j] = _mm512_permutex2var_ps(sv[a], idx, sv[b]);
    }
    if (!inverse) /* even lanes x0*c - x1*s, odd lanes x1*c + x0*s */
        IL_FLAT_HEADS(_mm512_fmaddsub_ps)
    else          /* even lanes x0*c + x1*s, odd lanes x1*c - x0*s */
        IL_FLAT_HEADS(_mm512_fmsubadd_ps)
}

ROPE_AVX512 void rope_rot_il_f32_avx512(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                        int64_t n_heads, const void *cosv, const void *sinv,
                                        int64_t half, int inverse)
{
    if (n_heads <= 0 || half <= 0) /* nothing to rotate: touch nothing */
        return;
    const float *x = (const float *)xv, *cos = (const float *)cosv, *sin = (const float *)sinv;
    float *y = (float *)yv;
    const int64_t m = (int64_t)((uintptr_t)xv & 63) / 4; /* floats past a 64-byte boundary */
    if (half == 64 && m && m % 2 == 0 && x_sh == 128 && y_sh == 128)
        il_f32_flat64(x, y, n_heads, cos, sin, m, inverse);
    else if (half == 64) /* head_dim 128: no switch */
        il_rows_f32(x, y, x_sh, y_sh, n_heads, cos, sin, 64, inverse, 8);
    else if (ROPE_AVX512_IL_TO_AVX2(half, x_sh, 16))
        rope_rot_il_f32_avx2(xv, yv, x_sh, y_sh, n_heads, cosv, sinv, half, inverse);
    else if (half < 64) {
#define IL_ROWS_(F, NV) F(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse, NV)
        ROPE_AVX512_NV_SWITCH((2 * half + 15) / 16, IL_ROWS_, il_rows_f32)
#undef IL_ROWS_
    } else
        il_wide_f32(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse);
}

#endif
