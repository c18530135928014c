/* Internal: what the NEON (AdvSIMD) rotation kernels (rotate_neon_*.c, one
 * file per storage type) share: the rotation of four float32 or two float64
 * lanes, bfloat16 rounding, and the split-half kernel built from a storage
 * type's 8- and 4-lane loads and stores.
 *
 * AdvSIMD, fused multiply-add and the float16 conversions (FCVTL/FCVTN) are
 * part of ARMv8.0, so these kernels need no target attribute and run on any
 * aarch64 CPU. Lane for lane they compute the scalar formula of pair.h,
 *   y0 = fma(x0, c, -(x1 * s)),  y1 = fma(x1, c, x0 * s),
 * under the default FPCR (round to nearest even, no flush to zero, no
 * default NaN), which every Linux process starts with and which the scalar
 * kernels assume too. float16 goes through FCVTL/FCVTN, which widen exactly
 * and narrow like convert.h: ties to even, overflow to infinity, subnormals
 * kept, a NaN quieted with its top payload bits; bfloat16 through integer
 * shifts with the rounding of convert.h. Unaligned loads and stores
 * throughout (no peeling to an alignment boundary: unmeasured on ARM); the
 * last pairs (fewer than four) call rope_pair_<sfx> (pair.h).
 *
 * Speed is unmeasured: no aarch64 machine was available and timings under
 * an emulator say nothing. The kernels are written from the instruction
 * set's usual costs: LD2/ST2 deinterleave float32, float16 and float64 pairs
 * for free; split half runs 16 pairs (four vectors per half) per step. The
 * cos/sin row is not kept in registers across heads: for head_dim 128 its
 * float32 cos and sin fill all 32 vector registers, and looping heads inside
 * a row chunk was measured 3x slower on x86 (the prefetcher loses the
 * streams); the row is read from L1 per head instead. */
#ifndef PYROPE_ROTATE_NEON_H
#define PYROPE_ROTATE_NEON_H

#include "core/kernels.h"
#include "scalar/pair.h"

/* Little-endian only: the bfloat16 interleaved kernels read a pair as one
 * 32-bit lane (x0 in its low half). */
#if defined(ROPE_HAVE_ARM64) && defined(__AARCH64EL__)
#define ROPE_HAVE_NEON 1
#include <arm_neon.h>

#define ROPE_NEON_INLINE static inline __attribute__((always_inline))

/* Four pairs at (c, s). vfmaq_f32(a, b, c) is a + b*c with one rounding, so
 * fma(x0, c, -p) is vfmaq_f32(-p, x0, c) (not -(p - x0*c): that gives -0
 * where the scalar formula gives +0). The inverse rotates by s' = -s, and
 * x1*s' = -(x1*s) exactly (rounding to nearest is symmetric), so it negates
 * the other product: y0 = fma(x0, c, x1*s), y1 = fma(x1, c, -(x0*s)). INV
 * is a constant in each loop nest, so the test folds away. */
ROPE_NEON_INLINE void rope_neon_rot_f32(float32x4_t x0, float32x4_t x1, float32x4_t c,
                                        float32x4_t s, const int inv, float32x4_t *y0,
                                        float32x4_t *y1)
{
    float32x4_t p0 = vmulq_f32(x1, s), p1 = vmulq_f32(x0, s);
    if (inv)
        p1 = vnegq_f32(p1);
    else
        p0 = vnegq_f32(p0);
    *y0 = vfmaq_f32(p0, x0, c);
    *y1 = vfmaq_f32(p1, x1, c);
}

/* The same for two float64 pairs. */
ROPE_NEON_INLINE void rope_neon_rot_f64(float64x2_t x0, float64x2_t x1, float64x2_t c,
                                        float64x2_t s, const int inv, float64x2_t *y0,
                                        float64x2_t *y1)
{
    float64x2_t p0 = vmulq_f64(x1, s), p1 = vmulq_f64(x0, s);
    if (inv)
        p1 = vnegq_f64(p1);
    else
        p0 = vnegq_f64(p0);
    *y0 = vfmaq_f64(p0, x0, c);
    *y1 = vfmaq_f64(p1, x1, c);
}

/* bfloat16 rounding of four float32 lanes, as convert.h: u + 0x7FFF + lsb,
 * lsb being bit 16 of u, brought down by (u << 15) >> 31 and added by USRA.
 * The bfloat16 value is the top half of each lane. */
ROPE_NEON_INLINE uint32x4_t rope_neon_bf16_round(float32x4_t v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    return vsraq_n_u32(vaddq_u32(u, vdupq_n_u32(0x7FFFu)), vshlq_n_u32(u, 15), 31);
}

/* ---- the 16-bit storage types' 8-lane loads and stores ------------------
 * (the rotation kernels of rotate_neon_f16.c and rotate_neon_bf16.c and the
 * stage kernels of stage_neon.c): float16 through FCVTL/FCVTN, bfloat16 by
 * a shift and the integer rounding above or, where FEAT_BF16 is (functions
 * marked ROPE_NEON_BF16 run only after isa_neon.c has found it), BFCVTN. */

#define ROPE_NEON_BF16 __attribute__((target("arch=armv8.2-a+bf16")))

/* 8 values <-> two float32 vectors (FCVTL/FCVTL2, FCVTN/FCVTN2). */
ROPE_NEON_INLINE void widen8_f16(uint16x8_t u, float32x4_t *a, float32x4_t *b)
{
    const float16x8_t h = vreinterpretq_f16_u16(u);
    *a = vcvt_f32_f16(vget_low_f16(h));
    *b = vcvt_high_f32_f16(h);
}
ROPE_NEON_INLINE uint16x8_t narrow8_f16(float32x4_t a, float32x4_t b)
{
    return vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(a), b));
}

ROPE_NEON_INLINE void ld8_f16(const uint16_t *p, float32x4_t *a, float32x4_t *b)
{
    widen8_f16(vld1q_u16(p), a, b);
}
ROPE_NEON_INLINE void st8_f16(uint16_t *p, float32x4_t a, float32x4_t b)
{
    vst1q_u16(p, narrow8_f16(a, b));
}
ROPE_NEON_INLINE void ld8_bf16(const uint16_t *p, float32x4_t *a, float32x4_t *b)
{
    const uint16x8_t u = vld1q_u16(p);
    *a = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(u), 16));
    *b = vreinterpretq_f32_u32(vshll_high_n_u16(u, 16));
}
ROPE_NEON_INLINE void st8_bf16(uint16_t *p, float32x4_t a, float32x4_t b)
{
    const uint16x4_t lo = vshrn_n_u32(rope_neon_bf16_round(a), 16);
    vst1q_u16(p, vshrn_high_n_u32(lo, rope_neon_bf16_round(b), 16));
}
ROPE_NEON_BF16 static inline uint16x8_t narrow8_bfcvt(float32x4_t a, float32x4_t b)
{
    return vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(a), b));
}
ROPE_NEON_BF16 static inline void st8_bfcvt(uint16_t *p, float32x4_t a, float32x4_t b)
{
    vst1q_u16(p, narrow8_bfcvt(a, b));
}

/* ---- split half, float32 arithmetic: float32, float16, bfloat16 storage --- */

/* Pairs i..i+7 of one head: (x + i, x + i + half) -> (y + i, y + i + half).
 * LD8(p, &a, &b) widens 8 stored elements to two float32 vectors, ST8(p, a,
 * b) rounds them back. Every load of a step comes before its stores, so
 * y == x is safe. */
#define ROPE_NEON_SPLIT8(LD8, ST8, INV, i)                                           \
    do {                                                                             \
        const float32x4_t c0_ = vld1q_f32(cos + (i)), c1_ = vld1q_f32(cos + (i) + 4); \
        const float32x4_t s0_ = vld1q_f32(sin + (i)), s1_ = vld1q_f32(sin + (i) + 4); \
        float32x4_t a0_, a1_, b0_, b1_, u0_, u1_, v0_, v1_;                          \
        LD8(x + (i), &a0_, &a1_);                                                    \
        LD8(x + (i) + half, &b0_, &b1_);                                             \
        rope_neon_rot_f32(a0_, b0_, c0_, s0_, INV, &u0_, &v0_);                      \
        rope_neon_rot_f32(a1_, b1_, c1_, s1_, INV, &u1_, &v1_);                      \
        ST8(y + (i), u0_, u1_);                                                      \
        ST8(y + (i) + half, v0_, v1_);                                               \
    } while (0)

/* One head (x, y): 16 pairs per step, then 8, 4 and single pairs. */
#define ROPE_NEON_SPLIT_HEAD(LD8, ST8, LD4, ST4, PAIR, INV)                          \
    do {                                                                             \
        int64_t i = 0;                                                               \
        for (; i + 16 <= half; i += 16) {                                            \
            ROPE_NEON_SPLIT8(LD8, ST8, INV, i);                                      \
            ROPE_NEON_SPLIT8(LD8, ST8, INV, i + 8);                                  \
        }                                                                            \
        if (i + 8 <= half) {                                                         \
            ROPE_NEON_SPLIT8(LD8, ST8, INV, i);                                      \
            i += 8;                                                                  \
        }                                                                            \
        if (i + 4 <= half) {                                                         \
            float32x4_t u_, v_;                                                      \
            const float32x4_t a_ = LD4(x + i), b_ = LD4(x + i + half);               \
            rope_neon_rot_f32(a_, b_, vld1q_f32(cos + i), vld1q_f32(sin + i), INV, &u_, &v_); \
            ST4(y + i, u_);                                                          \
            ST4(y + i + half, v_);                                                   \
            i += 4;                                                                  \
        }                                                                            \
        for (; i < half; i++)                                                        \
            PAIR(x, y, i, i + half, cos[i], INV ? -sin[i] : sin[i]);                 \
    } while (0)

/* Every head, one loop nest per direction. With head_dim 128 (half 64, the
 * common case) the step count is a constant, so a head's four steps unroll
 * with fixed offsets and the tests for the last pairs go. */
#define ROPE_NEON_SPLIT_HEADS(T, LD8, ST8, LD4, ST4, PAIR, INV)                      \
    do {                                                                             \
        if (half == 64) {                                                            \
            for (int64_t h = 0; h < n_heads; h++) {                                  \
                const T *x = (const T *)xv + h * x_sh;                               \
                T *y = (T *)yv + h * y_sh;                                           \
                const int64_t half = 64; /* a constant for the compiler */           \
                _Pragma("GCC unroll 4")                                              \
                for (int64_t i = 0; i < 64; i += 16) {                               \
                    ROPE_NEON_SPLIT8(LD8, ST8, INV, i);                              \
                    ROPE_NEON_SPLIT8(LD8, ST8, INV, i + 8);                          \
                }                                                                    \
            }                                                                        \
        } else {                                                                     \
            for (int64_t h = 0; h < n_heads; h++) {                                  \
                const T *x = (const T *)xv + h * x_sh;                               \
                T *y = (T *)yv + h * y_sh;                                           \
                ROPE_NEON_SPLIT_HEAD(LD8, ST8, LD4, ST4, PAIR, INV);                 \
            }                                                                        \
        }                                                                            \
    } while (0)

/* The split-half kernel NAME for storage type T (float32 rows). */
#define ROPE_NEON_SPLIT(NAME, T, LD8, ST8, LD4, ST4, PAIR)                           \
    void NAME(const void *xv, void *yv, int64_t x_sh, int64_t y_sh, int64_t n_heads, \
              const void *cosv, const void *sinv, int64_t half, int inverse)         \
    {                                                                                \
        const float *cos = (const float *)cosv, *sin = (const float *)sinv;          \
        if (!inverse)                                                                \
            ROPE_NEON_SPLIT_HEADS(T, LD8, ST8, LD4, ST4, PAIR, 0);                   \
        else                                                                         \
            ROPE_NEON_SPLIT_HEADS(T, LD8, ST8, LD4, ST4, PAIR, 1);                   \
    }

#endif /* ROPE_HAVE_ARM64 && __AARCH64EL__ */

#endif
