/* NEON rotation kernels for float32 storage (rotate_neon.h says what every
 * NEON kernel shares): split half through the shared 16-pair steps;
 * interleaved through LD2/ST2, which split a head's pairs into x0 and x1
 * vectors and join them back on store. */
#include "rotate_neon.h"

#ifdef ROPE_HAVE_NEON

ROPE_NEON_INLINE void ld8_f32(const float *p, float32x4_t *a, float32x4_t *b)
{
    *a = vld1q_f32(p);
    *b = vld1q_f32(p + 4);
}
ROPE_NEON_INLINE void st8_f32(float *p, float32x4_t a, float32x4_t b)
{
    vst1q_f32(p, a);
    vst1q_f32(p + 4, b);
}

ROPE_NEON_SPLIT(rope_rot_sh_f32_neon, float, ld8_f32, st8_f32, vld1q_f32, vst1q_f32, rope_pair_f32)

/* Pairs i..i+3 of one head, interleaved. */
#define IL4_F32(INV, i)                                                              \
    do {                                                                             \
        const float32x4x2_t v_ = vld2q_f32(x + 2 * (i));                             \
        float32x4x2_t w_;                                                            \
        rope_neon_rot_f32(v_.val[0], v_.val[1], vld1q_f32(cos + (i)), vld1q_f32(sin + (i)), \
                          INV, &w_.val[0], &w_.val[1]);                              \
        vst2q_f32(y + 2 * (i), w_);                                                  \
    } while (0)

/* 8 pairs per step (both loads before both stores), then 4, then single. */
#define IL_HEADS_F32(INV)                                                            \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const float *x = (const float *)xv + h * x_sh;                               \
        float *y = (float *)yv + h * y_sh;                                           \
        int64_t i = 0;                                                               \
        for (; i + 8 <= half; i += 8) {                                              \
            const float32x4x2_t va = vld2q_f32(x + 2 * i), vb = vld2q_f32(x + 2 * i + 8); \
            float32x4x2_t wa, wb;                                                    \
            rope_neon_rot_f32(va.val[0], va.val[1], vld1q_f32(cos + i), vld1q_f32(sin + i), \
                              INV, &wa.val[0], &wa.val[1]);                          \
            rope_neon_rot_f32(vb.val[0], vb.val[1], vld1q_f32(cos + i + 4),          \
                              vld1q_f32(sin + i + 4), INV, &wb.val[0], &wb.val[1]);  \
            vst2q_f32(y + 2 * i, wa);                                                \
            vst2q_f32(y + 2 * i + 8, wb);                                            \
        }                                                                            \
        if (i + 4 <= half) {                                                         \
            IL4_F32(INV, i);                                                         \
            i += 4;                                                                  \
        }                                                                            \
        for (; i < half; i++)                                                        \
            rope_pair_f32(x, y, 2 * i, 2 * i + 1, cos[i], INV ? -sin[i] : sin[i]);   \
    }

void rope_rot_il_f32_neon(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads,
                          const void *cosv, const void *sinv, int64_t half, int inverse)
{
    const float *cos = (const float *)cosv, *sin = (const float *)sinv;
    if (!inverse)
        IL_HEADS_F32(0)
    else
        IL_HEADS_F32(1)
}

#endif
