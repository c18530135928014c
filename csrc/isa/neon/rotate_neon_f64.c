/* NEON rotation kernels for float64 storage (rotate_neon.h says what every
 * NEON kernel shares): float64 arithmetic on float64 table rows, two pairs
 * per vector. Split half: 8 pairs per step, then 2, then single;
 * interleaved: LD2/ST2 split and join the pairs, 4 per step, then 2, then
 * single. */
#include "rotate_neon.h"

#ifdef ROPE_HAVE_NEON

/* Pairs i, i+1 of one head, split half. */
#define SH2_F64(INV, i)                                                              \
    do {                                                                             \
        float64x2_t u_, w_;                                                          \
        rope_neon_rot_f64(vld1q_f64(x + (i)), vld1q_f64(x + (i) + half), vld1q_f64(cos + (i)), \
                          vld1q_f64(sin + (i)), INV, &u_, &w_);                      \
        vst1q_f64(y + (i), u_);                                                      \
        vst1q_f64(y + (i) + half, w_);                                               \
    } while (0)

#define SH_HEADS_F64(INV)                                                            \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const double *x = (const double *)xv + h * x_sh;                             \
        double *y = (double *)yv + h * y_sh;                                         \
        int64_t i = 0;                                                               \
        for (; i + 8 <= half; i += 8) {                                              \
            SH2_F64(INV, i);                                                         \
            SH2_F64(INV, i + 2);                                                     \
            SH2_F64(INV, i + 4);                                                     \
            SH2_F64(INV, i + 6);                                                     \
        }                                                                            \
        for (; i + 2 <= half; i += 2)                                                \
            SH2_F64(INV, i);                                                         \
        if (i < half)                                                                \
            rope_pair_f64(x, y, i, i + half, cos[i], INV ? -sin[i] : sin[i]);        \
    }

void rope_rot_sh_f64_neon(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads,
                          const void *cosv, const void *sinv, int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    if (!inverse)
        SH_HEADS_F64(0)
    else
        SH_HEADS_F64(1)
}

#define IL_HEADS_F64(INV)                                                            \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const double *x = (const double *)xv + h * x_sh;                             \
        double *y = (double *)yv + h * y_sh;                                         \
        int64_t i = 0;                                                               \
        for (; i + 4 <= half; i += 4) {                                              \
            const float64x2x2_t va = vld2q_f64(x + 2 * i), vb = vld2q_f64(x + 2 * i + 4); \
            float64x2x2_t wa, wb;                                                    \
            rope_neon_rot_f64(va.val[0], va.val[1], vld1q_f64(cos + i), vld1q_f64(sin + i), \
                              INV, &wa.val[0], &wa.val[1]);                          \
            rope_neon_rot_f64(vb.val[0], vb.val[1], vld1q_f64(cos + i + 2),          \
                              vld1q_f64(sin + i + 2), INV, &wb.val[0], &wb.val[1]);  \
            vst2q_f64(y + 2 * i, wa);                                                \
            vst2q_f64(y + 2 * i + 4, wb);                                            \
        }                                                                            \
        if (i + 2 <= half) {                                                         \
            const float64x2x2_t v = vld2q_f64(x + 2 * i);                            \
            float64x2x2_t w;                                                         \
            rope_neon_rot_f64(v.val[0], v.val[1], vld1q_f64(cos + i), vld1q_f64(sin + i), \
                              INV, &w.val[0], &w.val[1]);                            \
            vst2q_f64(y + 2 * i, w);                                                 \
            i += 2;                                                                  \
        }                                                                            \
        if (i < half)                                                                \
            rope_pair_f64(x, y, 2 * i, 2 * i + 1, cos[i], INV ? -sin[i] : sin[i]);   \
    }

void rope_rot_il_f64_neon(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads,
                          const void *cosv, const void *sinv, int64_t half, int inverse)
{
    const double *cos = (const double *)cosv, *sin = (const double *)sinv;
    if (!inverse)
        IL_HEADS_F64(0)
    else
        IL_HEADS_F64(1)
}

#endif
