/* NEON rotation kernels for float16 storage, through FCVTL/FCVTN
 * (rotate_neon.h says what every NEON kernel shares, and why these
 * conversions round as convert.h does): split half through the shared
 * 16-pair steps; interleaved through LD2/ST2 on 16-bit lanes, 8 pairs per
 * step. */
#include "rotate_neon.h"

#ifdef ROPE_HAVE_NEON

ROPE_NEON_INLINE float32x4_t ld4_f16(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
ROPE_NEON_INLINE void st4_f16(uint16_t *p, float32x4_t v)
{
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}

ROPE_NEON_SPLIT(rope_rot_sh_f16_neon, uint16_t, ld8_f16, st8_f16, ld4_f16, st4_f16, rope_pair_f16)

/* Interleaved: LD2 gives 8 pairs' x0 and x1 as two 8-lane vectors, each
 * widened to two float32 vectors; 4 pairs by the 64-bit forms; single. */
#define IL_HEADS_F16(INV)                                                            \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const uint16_t *x = (const uint16_t *)xv + h * x_sh;                         \
        uint16_t *y = (uint16_t *)yv + h * y_sh;                                     \
        int64_t i = 0;                                                               \
        for (; i + 8 <= half; i += 8) {                                              \
            const uint16x8x2_t v = vld2q_u16(x + 2 * i);                             \
            float32x4_t a0, a1, b0, b1, u0, u1, w0, w1;                              \
            widen8_f16(v.val[0], &a0, &a1);                                          \
            widen8_f16(v.val[1], &b0, &b1);                                          \
            rope_neon_rot_f32(a0, b0, vld1q_f32(cos + i), vld1q_f32(sin + i), INV, &u0, &w0); \
            rope_neon_rot_f32(a1, b1, vld1q_f32(cos + i + 4), vld1q_f32(sin + i + 4), INV, \
                              &u1, &w1);                                             \
            const uint16x8x2_t r = {{narrow8_f16(u0, u1), narrow8_f16(w0, w1)}};     \
            vst2q_u16(y + 2 * i, r);                                                 \
        }                                                                            \
        if (i + 4 <= half) {                                                         \
            const uint16x4x2_t v = vld2_u16(x + 2 * i);                              \
            float32x4_t u, w;                                                        \
            rope_neon_rot_f32(vcvt_f32_f16(vreinterpret_f16_u16(v.val[0])),          \
                              vcvt_f32_f16(vreinterpret_f16_u16(v.val[1])),          \
                              vld1q_f32(cos + i), vld1q_f32(sin + i), INV, &u, &w);  \
            const uint16x4x2_t r = {{vreinterpret_u16_f16(vcvt_f16_f32(u)),          \
                                     vreinterpret_u16_f16(vcvt_f16_f32(w))}};        \
            vst2_u16(y + 2 * i, r);                                                  \
            i += 4;                                                                  \
        }                                                                            \
        for (; i < half; i++)                                                        \
            rope_pair_f16(x, y, 2 * i, 2 * i + 1, cos[i], INV ? -sin[i] : sin[i]);   \
    }

void rope_rot_il_f16_neon(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads,
                          const void *cosv, const void *sinv, int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    if (!inverse)
        IL_HEADS_F16(0)
    else
        IL_HEADS_F16(1)
}

#endif
