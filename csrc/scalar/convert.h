/* Internal: scalar conversions between float32 and the 16-bit storage types.
 *
 * float16: widening is exact; narrowing rounds to nearest, ties to even,
 * overflows to infinity and keeps the top payload bits of a NaN with the
 * quiet bit set -- exactly what F16C's vcvtps2ph does, so scalar and AVX2
 * kernels store the same bits.
 * bfloat16: widening is a 16-bit shift; narrowing rounds to nearest, ties to
 * even: (u + 0x7FFF + lsb) >> 16 on the bits u, for every input. A NaN keeps
 * its sign and top payload bits: the NaNs a rotation produces are quiet and
 * have their low 16 bits zero (they come from bfloat16 inputs or are the
 * default NaN), so the add cannot carry out of the payload.
 */
#ifndef PYROPE_CONVERT_H
#define PYROPE_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline float rope_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t rope_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rope_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)                          /* inf or NaN (quieted, like F16C) */
        return rope_bits_f32(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e)
        return rope_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    /* zero or subnormal: m * 2^-24, exact in float32 */
    return rope_bits_f32(sign | rope_f32_bits((float)m * 0x1p-24f));
}

static inline uint16_t rope_f32_to_f16(float f)
{
    const uint32_t x = rope_f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)                   /* NaN: quiet, top payload bits */
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u)                  /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7C00u);
    if (ax >= 0x38800000u) {                /* normal: rebias, round at bit 13 */
        const uint32_t r = ax - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
    }
    if (ax <= 0x33000000u)                  /* <= 2^-25 rounds to zero */
        return (uint16_t)sign;
    /* subnormal result: units of 2^-24 */
    const uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;        /* 14..24 */
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    return (uint16_t)(sign | (q + ((rem > halfway) || (rem == halfway && (q & 1u)))));
}

static inline float rope_bf16_to_f32(uint16_t h)
{
    return rope_bits_f32((uint32_t)h << 16);
}

static inline uint16_t rope_f32_to_bf16(float f)
{
    const uint32_t x = rope_f32_bits(f);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

#endif
