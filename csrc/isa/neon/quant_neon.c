/* NEON quantisers of rope_rotate_quantised (kernels.h; scalar/quant.c is
 * their specification), bit-identical to the scalar ones for every input,
 * for the "neon" entry, under the default FPCR (rotate_neon.h):
 *   amax       an integer max of |bits| (UMAXV across lanes): the bits of
 *              non-negative floats order as their values, every NaN's above
 *              infinity's, so it tells a NaN too (then the default NaN);
 *   int8       FDIV (a true division), FRINTI (rintf: the current mode,
 *              ties to even by default), clipped to +-127 (FMAX/FMIN keep
 *              a NaN), FCVTZS, which converts a NaN to 0 as scalar stores;
 *   float8     v / scale clamped to +-448, to_e4m3's integer rounding on
 *              the bits, the lanes below 2^-6 by FRINTI, NaN to 0x7F;
 *   q8_0       d and id as scalar computes them (one per block), d stored
 *              by FCVTN, which rounds as rope_f32_to_f16; FRINTA rounds to
 *              nearest with ties away from zero: roundf itself;
 *   dequantise int8 and q8_0 widened exactly times the scale (d widened by
 *              FCVTL, which quiets a NaN as rope_f16_to_f32); float8 built
 *              from its bits as from_e4m3 does and multiplied scale first,
 *              as the scalar kernel compiles to with gcc here (when both
 *              are quiet NaNs AArch64 keeps the first operand's), in asm so
 *              that the compiler cannot swap them.
 * The last values (fewer than a step) go through zero-padded stack copies:
 * no access reaches past the arrays. Speed is unmeasured, as for the other
 * NEON kernels (rotate_neon.h): checked under qemu only. */
#include <string.h>

#include "rotate_neon.h"

#ifdef ROPE_HAVE_NEON

#define DEFAULT_NAN 0x7FC00000u

ROPE_NEON_INLINE uint32x4_t abs_bits(float32x4_t v)
{
    return vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x7FFFFFFFu));
}

/* amax from the max of |bits|: the default NaN if it is a NaN's. */
ROPE_NEON_INLINE float amax_of(uint32x4_t m)
{
    const uint32_t a = vmaxvq_u32(m);
    return rope_bits_f32(a > 0x7F800000u ? DEFAULT_NAN : a);
}

/* 8 floats from p[0..k) (0 < k <= 8), the others 0. */
ROPE_NEON_INLINE void load8_first(const float *p, int64_t k, float32x4_t *a, float32x4_t *b)
{
    float t[8] = {0};
    memcpy(t, p, (size_t)k * sizeof *t);
    *a = vld1q_f32(t);
    *b = vld1q_f32(t + 4);
}

/* k bytes of 8 stored (0 < k <= 8). */
ROPE_NEON_INLINE void store_first_u8(unsigned char *p, uint8x8_t v, int64_t k)
{
    unsigned char t[8];
    vst1_u8(t, v);
    memcpy(p, t, (size_t)k);
}

/* 16 bytes from p[0..k) (0 < k <= 16), the others 0. */
ROPE_NEON_INLINE uint8x16_t load16_first_u8(const unsigned char *p, int64_t k)
{
    unsigned char t[16] = {0};
    memcpy(t, p, (size_t)k);
    return vld1q_u8(t);
}

/* k floats of 16 stored (0 < k <= 16). */
ROPE_NEON_INLINE void store_first_f32(float *p, const float32x4_t v[4], int64_t k)
{
    float t[16];
    for (int j = 0; j < 4; j++)
        vst1q_f32(t + 4 * j, v[j]);
    memcpy(p, t, (size_t)k * sizeof *t);
}

/* Two vectors of 4 int32 (each in -255..255) to 8 bytes. */
ROPE_NEON_INLINE uint8x8_t narrow8(uint32x4_t a, uint32x4_t b)
{
    return vmovn_u16(vcombine_u16(vmovn_u32(a), vmovn_u32(b)));
}

/* The max of |bits| over in[0..n). */
ROPE_NEON_INLINE uint32x4_t abs_max(const float *in, int64_t n)
{
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = vmaxq_u32(m0, abs_bits(vld1q_f32(in + i)));
        m1 = vmaxq_u32(m1, abs_bits(vld1q_f32(in + i + 4)));
        m2 = vmaxq_u32(m2, abs_bits(vld1q_f32(in + i + 8)));
        m3 = vmaxq_u32(m3, abs_bits(vld1q_f32(in + i + 12)));
    }
    for (; i < n; i += 8) {
        float32x4_t a, b;
        load8_first(in + i, n - i < 8 ? n - i : 8, &a, &b);
        m0 = vmaxq_u32(m0, abs_bits(a));
        m1 = vmaxq_u32(m1, abs_bits(b));
    }
    return vmaxq_u32(vmaxq_u32(m0, m1), vmaxq_u32(m2, m3));
}

/* ---- int8 ------------------------------------------------------------------ */

/* clip_int8(rintf(v / s)) in each lane, as int32 bits. */
ROPE_NEON_INLINE uint32x4_t q_int8(float32x4_t v, float32x4_t s)
{
    float32x4_t x = vrndiq_f32(vdivq_f32(v, s));
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
    return vreinterpretq_u32_s32(vcvtq_s32_f32(x));
}

void rope_quantise_int8_neon(const float *in, int64_t n, void *outv, float *scale)
{
    unsigned char *out = (unsigned char *)outv;
    const float s = amax_of(abs_max(in, n)) / 127.0f;
    const float32x4_t sv = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8x8_t lo = narrow8(q_int8(vld1q_f32(in + i), sv), q_int8(vld1q_f32(in + i + 4), sv));
        const uint8x8_t hi = narrow8(q_int8(vld1q_f32(in + i + 8), sv), q_int8(vld1q_f32(in + i + 12), sv));
        vst1q_u8(out + i, vcombine_u8(lo, hi));
    }
    for (; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        float32x4_t a, b;
        load8_first(in + i, k, &a, &b);
        store_first_u8(out + i, narrow8(q_int8(a, sv), q_int8(b, sv)), k);
    }
    *scale = s;
}

/* (float)q * s for the 16 int8 q. */
ROPE_NEON_INLINE void dq_int8(int8x16_t q, float32x4_t s, float32x4_t v[4])
{
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    v[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s);
    v[1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), s);
    v[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s);
    v[3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), s);
}

void rope_dequantise_int8_neon(const void *inv, int64_t n, float scale, float *out)
{
    const unsigned char *q = (const unsigned char *)inv;
    const float32x4_t s = vdupq_n_f32(scale);
    float32x4_t v[4];
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        dq_int8(vreinterpretq_s8_u8(vld1q_u8(q + i)), s, v);
        for (int j = 0; j < 4; j++)
            vst1q_f32(out + i + 4 * j, v[j]);
    }
    if (i < n) {
        dq_int8(vreinterpretq_s8_u8(load16_first_u8(q + i, n - i)), s, v);
        store_first_f32(out + i, v, n - i);
    }
}

/* ---- float8 e4m3fn --------------------------------------------------------- */

/* to_e4m3(v / s) in each lane, as int32 (0..255). */
ROPE_NEON_INLINE uint32x4_t q_fp8(float32x4_t v, float32x4_t s)
{
    const float32x4_t x = vdivq_f32(v, s);
    const uint32x4_t ordered = vceqq_f32(x, x);
    const float32x4_t c = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-448.0f)), vdupq_n_f32(448.0f));
    const uint32x4_t u = vreinterpretq_u32_f32(c);
    const uint32x4_t sign = vandq_u32(vshrq_n_u32(u, 24), vdupq_n_u32(0x80u));
    const uint32x4_t ax = vandq_u32(u, vdupq_n_u32(0x7FFFFFFFu));
    /* below 2^-6: rintf(|c| * 512), the subnormal's m (exact product) */
    const uint32x4_t small = vcltq_u32(ax, vdupq_n_u32(0x3C800000u));
    const uint32x4_t qs = vreinterpretq_u32_s32(
        vcvtq_s32_f32(vrndiq_f32(vmulq_f32(vreinterpretq_f32_u32(ax), vdupq_n_f32(512.0f)))));
    /* else rebias 127 to 7, round to nearest even at bit 20 */
    const uint32x4_t r = vsubq_u32(ax, vdupq_n_u32(120u << 23));
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(r, 20), vdupq_n_u32(1u));
    const uint32x4_t qn = vshrq_n_u32(vaddq_u32(vaddq_u32(r, vdupq_n_u32(0x7FFFFu)), lsb), 20);
    const uint32x4_t q = vorrq_u32(vbslq_u32(small, qs, qn), sign);
    return vbslq_u32(ordered, q, vdupq_n_u32(0x7Fu));
}

void rope_quantise_fp8_neon(const float *in, int64_t n, void *outv, float *scale)
{
    unsigned char *out = (unsigned char *)outv;
    const float32x4_t s = vdupq_n_f32(*scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8x8_t lo = narrow8(q_fp8(vld1q_f32(in + i), s), q_fp8(vld1q_f32(in + i + 4), s));
        const uint8x8_t hi = narrow8(q_fp8(vld1q_f32(in + i + 8), s), q_fp8(vld1q_f32(in + i + 12), s));
        vst1q_u8(out + i, vcombine_u8(lo, hi));
    }
    for (; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        float32x4_t a, b;
        load8_first(in + i, k, &a, &b);
        store_first_u8(out + i, narrow8(q_fp8(a, s), q_fp8(b, s)), k);
    }
}

/* a * b with a the first operand, whose NaN AArch64 keeps when both are
 * quiet NaNs. */
ROPE_NEON_INLINE float32x4_t mul_in_order(float32x4_t a, float32x4_t b)
{
    float32x4_t r;
    __asm__("fmul %0.4s, %1.4s, %2.4s" : "=w"(r) : "w"(a), "w"(b));
    return r;
}

/* s * from_e4m3(c) for 4 codes c (0..255). */
ROPE_NEON_INLINE float32x4_t dq_fp8(uint32x4_t c, float32x4_t s)
{
    const uint32x4_t sign = vshlq_n_u32(vandq_u32(c, vdupq_n_u32(0x80u)), 24);
    const uint32x4_t a = vandq_u32(c, vdupq_n_u32(0x7Fu));
    /* exponent and mantissa shifted into place, the exponent rebiased */
    const uint32x4_t normal = vaddq_u32(vshlq_n_u32(a, 20), vdupq_n_u32(120u << 23));
    /* exponent 0: m * 2^-9, exact */
    const uint32x4_t sub = vreinterpretq_u32_f32(
        vmulq_f32(vcvtq_f32_u32(vandq_u32(c, vdupq_n_u32(7u))), vdupq_n_f32(0x1p-9f)));
    uint32x4_t v = vorrq_u32(vbslq_u32(vcltq_u32(a, vdupq_n_u32(8u)), sub, normal), sign);
    v = vbslq_u32(vceqq_u32(a, vdupq_n_u32(0x7Fu)), vdupq_n_u32(DEFAULT_NAN), v);
    return mul_in_order(s, vreinterpretq_f32_u32(v));
}

/* The 16 codes of b dequantised into v. */
ROPE_NEON_INLINE void dq_fp8_16(uint8x16_t b, float32x4_t s, float32x4_t v[4])
{
    const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    v[0] = dq_fp8(vmovl_u16(vget_low_u16(lo)), s);
    v[1] = dq_fp8(vmovl_high_u16(lo), s);
    v[2] = dq_fp8(vmovl_u16(vget_low_u16(hi)), s);
    v[3] = dq_fp8(vmovl_high_u16(hi), s);
}

void rope_dequantise_fp8_neon(const void *inv, int64_t n, float scale, float *out)
{
    const unsigned char *q = (const unsigned char *)inv;
    const float32x4_t s = vdupq_n_f32(scale);
    float32x4_t v[4];
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        dq_fp8_16(vld1q_u8(q + i), s, v);
        for (int j = 0; j < 4; j++)
            vst1q_f32(out + i + 4 * j, v[j]);
    }
    if (i < n) {
        dq_fp8_16(load16_first_u8(q + i, n - i), s, v);
        store_first_f32(out + i, v, n - i);
    }
}

/* ---- q8_0 ------------------------------------------------------------------ */

/* clip_int8(roundf(v * id)) in each lane, as int32 bits. */
ROPE_NEON_INLINE uint32x4_t q_q8_0(float32x4_t v, float32x4_t id)
{
    float32x4_t r = vrndaq_f32(vmulq_f32(v, id));
    r = vminq_f32(vmaxq_f32(r, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
    return vreinterpretq_u32_s32(vcvtq_s32_f32(r));
}

void rope_quantise_q8_0_neon(const float *in, int64_t n, void *outv, float *scale)
{
    (void)scale;
    unsigned char *out = (unsigned char *)outv;
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const float *x = in + b * ROPE_Q8_0_VALUES;
        unsigned char *blk = out + b * ROPE_Q8_0_BYTES;
        float32x4_t v[8];
        uint32x4_t m = vdupq_n_u32(0);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(x + 4 * j);
            m = vmaxq_u32(m, abs_bits(v[j]));
        }
        const float d = amax_of(m) / 127.0f;
        const float32x4_t id = vdupq_n_f32(d != 0.0f ? 1.0f / d : 0.0f);
        const uint16_t dh = vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(d))), 0);
        memcpy(blk, &dh, 2);
        const uint8x8_t q0 = narrow8(q_q8_0(v[0], id), q_q8_0(v[1], id));
        const uint8x8_t q1 = narrow8(q_q8_0(v[2], id), q_q8_0(v[3], id));
        const uint8x8_t q2 = narrow8(q_q8_0(v[4], id), q_q8_0(v[5], id));
        const uint8x8_t q3 = narrow8(q_q8_0(v[6], id), q_q8_0(v[7], id));
        vst1q_u8(blk + 2, vcombine_u8(q0, q1));
        vst1q_u8(blk + 18, vcombine_u8(q2, q3));
    }
}

void rope_dequantise_q8_0_neon(const void *inv, int64_t n, float scale, float *out)
{
    (void)scale;
    const unsigned char *in = (const unsigned char *)inv;
    float32x4_t v[4];
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const unsigned char *blk = in + b * ROPE_Q8_0_BYTES;
        float *o = out + b * ROPE_Q8_0_VALUES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const float32x4_t d = vdupq_laneq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(dh))), 0);
        for (int h = 0; h < 2; h++) {
            dq_int8(vreinterpretq_s8_u8(vld1q_u8(blk + 2 + 16 * h)), d, v);
            for (int j = 0; j < 4; j++)
                vst1q_f32(o + 16 * h + 4 * j, v[j]);
        }
    }
}

#endif /* ROPE_HAVE_NEON */
