/* Scalar quantisers: the specification of rope_rotate_quantised's stores
 * (pyrope.h, rope_quant, gives the formulas), which every SIMD quantiser
 * must match bit for bit. Every step is one IEEE operation in float32
 * (the build uses -ffp-contract=off): an amax, one division or product,
 * one rounding to an integer, a clip. Where the formulas would convert a
 * NaN or an infinity to an integer, the result is fixed here: a NaN value
 * stores 0 (float8: 0x7F), and an amax that is NaN is the default quiet NaN
 * (0x7FC00000), whatever NaN the head held, so every kernel stores the
 * same scale bits.
 */
#include <math.h>
#include <string.h>

#include "convert.h"
#include "scalar.h"

#define DEFAULT_NAN 0x7FC00000u

/* max |in[i]| over n values; the default NaN if any is NaN. */
static float amax(const float *in, int64_t n)
{
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(in[i]);
        if (a != a)
            nan = 1;
        else if (a > m)
            m = a;
    }
    return nan ? rope_bits_f32(DEFAULT_NAN) : m;
}

/* An integral-valued or infinite float clipped to +-127 (NaN: 0), as int8. */
static int8_t clip_int8(float r)
{
    if (r != r)
        return 0;
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}

void rope_quantise_int8_scalar(const float *in, int64_t n, void *outv, float *scale)
{
    int8_t *out = (int8_t *)outv;
    const float s = amax(in, n) / 127.0f;
    for (int64_t i = 0; i < n; i++)
        out[i] = clip_int8(rintf(in[i] / s));
    *scale = s;
}

void rope_dequantise_int8_scalar(const void *inv, int64_t n, float scale, float *out)
{
    const int8_t *q = (const int8_t *)inv;
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)q[i] * scale;
}

/* float32 to float8 e4m3fn bits: clamped to +-448, rounded to nearest even
 * (NaN: 0x7F). Below 2^-6 the result is a subnormal m * 2^-9, m = 0..8 (8
 * is the encoding of 2^-6, the smallest normal); above, the exponent is
 * rebiased (127 to 7) and the mantissa rounded at bit 20. */
static uint8_t to_e4m3(float v)
{
    if (v != v)
        return 0x7F;
    v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
    const uint32_t x = rope_f32_bits(v);
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax < 0x3C800000u)   /* < 2^-6 */
        return (uint8_t)(sign | (uint8_t)rintf(rope_bits_f32(ax) * 512.0f));
    const uint32_t r = ax - (120u << 23);
    return (uint8_t)(sign | ((r + 0x7FFFFu + ((r >> 20) & 1u)) >> 20));
}

/* float8 e4m3fn bits to float32, exactly (0x7F, 0xFF: the default NaN). */
static float from_e4m3(uint8_t c)
{
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    const uint32_t e = (c >> 3) & 15u, m = c & 7u;
    if (e == 15u && m == 7u)
        return rope_bits_f32(DEFAULT_NAN);
    if (e == 0)
        return rope_bits_f32(sign | rope_f32_bits((float)m * 0x1p-9f));
    return rope_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

void rope_quantise_fp8_scalar(const float *in, int64_t n, void *outv, float *scale)
{
    uint8_t *out = (uint8_t *)outv;
    const float s = *scale;
    for (int64_t i = 0; i < n; i++)
        out[i] = to_e4m3(in[i] / s);
}

void rope_dequantise_fp8_scalar(const void *inv, int64_t n, float scale, float *out)
{
    const uint8_t *q = (const uint8_t *)inv;
    for (int64_t i = 0; i < n; i++)
        out[i] = from_e4m3(q[i]) * scale;
}

/* ggml's quantize_row_q8_0_ref, block by block; roundf ties away from zero.
 * A block is 2 bytes of float16 d, then 32 int8 (memcpy: blocks are
 * 34 bytes, so d need not be aligned). */
void rope_quantise_q8_0_scalar(const float *in, int64_t n, void *outv, float *scale)
{
    (void)scale;
    unsigned char *out = (unsigned char *)outv;
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const float *x = in + b * ROPE_Q8_0_VALUES;
        unsigned char *blk = out + b * ROPE_Q8_0_BYTES;
        const float d = amax(x, ROPE_Q8_0_VALUES) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = rope_f32_to_f16(d);
        memcpy(blk, &dh, 2);
        for (int j = 0; j < ROPE_Q8_0_VALUES; j++)
            blk[2 + j] = (unsigned char)clip_int8(roundf(x[j] * id));
    }
}

void rope_dequantise_q8_0_scalar(const void *inv, int64_t n, float scale, float *out)
{
    (void)scale;
    const unsigned char *in = (const unsigned char *)inv;
    for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
        const unsigned char *blk = in + b * ROPE_Q8_0_BYTES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const float d = rope_f16_to_f32(dh);
        for (int j = 0; j < ROPE_Q8_0_VALUES; j++)
            out[b * ROPE_Q8_0_VALUES + j] = (float)(int8_t)blk[2 + j] * d;
    }
}
