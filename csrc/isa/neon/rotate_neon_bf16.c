/* NEON rotation kernels for bfloat16 storage (rotate_neon.h says what every
 * NEON kernel shares), for two registry entries:
 *   "neon"      narrows with integer arithmetic, (u + 0x7FFF + lsb) >> 16
 *               exactly as convert.h (ARMv8.0);
 *   "neonbf16"  narrows with BFCVTN/BFCVTN2 (FEAT_BF16), which round to
 *               nearest even under the default FPCR (FZ and AH clear:
 *               subnormals kept), the same bits in one instruction.
 * Widening is a 16-bit shift in both (exact). Split half goes through the
 * shared 16-pair steps. Interleaved, one 32-bit lane holds a pair: shifted
 * left by 16 it is x0 as float32, its high half masked it is x1, so 4 pairs
 * need no deinterleaving; "neon" puts y1's rounded high half and y0's
 * (shifted down by SRI) back into one lane, "neonbf16" narrows y0 and y1
 * separately and interleaves them with ST2. */
#include "rotate_neon.h"

#ifdef ROPE_HAVE_NEON

/* ---- loads: 8 and 4 lanes, and the pair lanes of the interleaved kernels -- */

ROPE_NEON_INLINE float32x4_t ld4_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
/* Pairs i..i+3 at p: x0 and x1 of each as float32. */
ROPE_NEON_INLINE void ld_pairs_bf16(const uint16_t *p, float32x4_t *x0, float32x4_t *x1)
{
    const uint32x4_t u = vreinterpretq_u32_u16(vld1q_u16(p));
    *x0 = vreinterpretq_f32_u32(vshlq_n_u32(u, 16));
    *x1 = vreinterpretq_f32_u32(vandq_u32(u, vdupq_n_u32(0xFFFF0000u)));
}

/* ---- "neon": integer rounding -------------------------------------------- */

ROPE_NEON_INLINE void st4_bf16(uint16_t *p, float32x4_t v)
{
    vst1_u16(p, vshrn_n_u32(rope_neon_bf16_round(v), 16));
}
/* Pairs (y0, y1) back into their lanes: y1's rounded high half stays, y0's
 * is shifted into the low half. */
ROPE_NEON_INLINE void st_pairs_bf16(uint16_t *p, float32x4_t y0, float32x4_t y1)
{
    const uint32x4_t r = vsriq_n_u32(rope_neon_bf16_round(y1), rope_neon_bf16_round(y0), 16);
    vst1q_u16(p, vreinterpretq_u16_u32(r));
}

ROPE_NEON_SPLIT(rope_rot_sh_bf16_neon, uint16_t, ld8_bf16, st8_bf16, ld4_bf16, st4_bf16,
                rope_pair_bf16)

/* Interleaved: 8 pairs per step (both loads before both stores), then 4,
 * then single pairs. ST_PAIRS8(p, y0a, y1a, y0b, y1b) stores pairs 0-3
 * (a) and 4-7 (b), ST_PAIRS4 pairs 0-3. */
#define IL_HEADS_BF16(ST_PAIRS8, ST_PAIRS4, INV)                                     \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;                         \
        uint16_t *y = (uint16_t *)yv + h * y_sh;                                     \
        int64_t i = 0;                                                               \
        for (; i + 8 <= half; i += 8) {                                              \
            float32x4_t a0, a1, b0, b1, u0, u1, w0, w1;                              \
            ld_pairs_bf16(x + 2 * i, &a0, &a1);                                      \
            ld_pairs_bf16(x + 2 * i + 8, &b0, &b1);                                  \
            rope_neon_rot_f32(a0, a1, vld1q_f32(cos + i), vld1q_f32(sin + i), INV, &u0, &u1); \
            rope_neon_rot_f32(b0, b1, vld1q_f32(cos + i + 4), vld1q_f32(sin + i + 4), INV, \
                              &w0, &w1);                                             \
            ST_PAIRS8(y + 2 * i, u0, u1, w0, w1);                                    \
        }                                                                            \
        if (i + 4 <= half) {                                                         \
            float32x4_t a0, a1, u0, u1;                                              \
            ld_pairs_bf16(x + 2 * i, &a0, &a1);                                      \
            rope_neon_rot_f32(a0, a1, vld1q_f32(cos + i), vld1q_f32(sin + i), INV, &u0, &u1); \
            ST_PAIRS4(y + 2 * i, u0, u1);                                            \
            i += 4;                                                                  \
        }                                                                            \
        for (; i < half; i++)                                                        \
            rope_pair_bf16(x, y, 2 * i, 2 * i + 1, cos[i], INV ? -sin[i] : sin[i]);  \
    }

ROPE_NEON_INLINE void st_pairs8_bf16(uint16_t *p, float32x4_t y0a, float32x4_t y1a,
                                     float32x4_t y0b, float32x4_t y1b)
{
    st_pairs_bf16(p, y0a, y1a);
    st_pairs_bf16(p + 8, y0b, y1b);
}

void rope_rot_il_bf16_neon(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads,
                           const void *cosv, const void *sinv, int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    if (!inverse)
        IL_HEADS_BF16(st_pairs8_bf16, st_pairs_bf16, 0)
    else
        IL_HEADS_BF16(st_pairs8_bf16, st_pairs_bf16, 1)
}

/* ---- "neonbf16": BFCVTN -------------------------------------------------- */

ROPE_NEON_BF16 static inline void st4_bfcvt(uint16_t *p, float32x4_t v)
{
    vst1_u16(p, vreinterpret_u16_bf16(vcvt_bf16_f32(v)));
}
ROPE_NEON_BF16 static inline void st_pairs8_bfcvt(uint16_t *p, float32x4_t y0a, float32x4_t y1a,
                                                   float32x4_t y0b, float32x4_t y1b)
{
    const uint16x8x2_t r = {{narrow8_bfcvt(y0a, y0b), narrow8_bfcvt(y1a, y1b)}};
    vst2q_u16(p, r);
}
ROPE_NEON_BF16 static inline void st_pairs_bfcvt(uint16_t *p, float32x4_t y0, float32x4_t y1)
{
    const uint16x4x2_t r = {{vreinterpret_u16_bf16(vcvt_bf16_f32(y0)),
                             vreinterpret_u16_bf16(vcvt_bf16_f32(y1))}};
    vst2_u16(p, r);
}

ROPE_NEON_BF16 ROPE_NEON_SPLIT(rope_rot_sh_bf16_neonbf16, uint16_t, ld8_bf16, st8_bfcvt,
                               ld4_bf16, st4_bfcvt, rope_pair_bf16)

ROPE_NEON_BF16 void rope_rot_il_bf16_neonbf16(const void *xv, void *yv, int64_t x_sh, int64_t y_sh,
                                              int64_t n_heads, const void *cosv, const void *sinv,
                                              int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    if (!inverse)
        IL_HEADS_BF16(st_pairs8_bfcvt, st_pairs_bfcvt, 0)
    else
        IL_HEADS_BF16(st_pairs8_bfcvt, st_pairs_bfcvt, 1)
}

#endif
