/* The NEON entries of the instruction-set registry:
 *   "neon"      AdvSIMD, architectural on aarch64 (ARMv8.0, with fused
 *               multiply-add and the float16 conversions): always there;
 *   "neonbf16"  the same plus FEAT_BF16, whose BFCVTN narrows float32 to
 *               bfloat16 in one instruction (Linux: HWCAP2_BF16).
 * "neonbf16" builds on "neon" (the registry, dispatch.c, says so): it
 * starts from its kernels and is supported only where it is.
 * The kernels live beside it, in rotate_neon_*.c, stage_neon.c and
 * quant_neon.c (bit-identical to the scalar ones; rotate_neon.h); this file
 * detects the CPU, names the kernels each entry replaces ("neon": the
 * rotations, the stages and the quantisers of every storage type and kind,
 * the pass; "neonbf16": bfloat16's rotations and narrowing) and holds the
 * yardstick's NEON pass. Both entries are defined on
 * every platform; elsewhere they are not supported. The cos/sin tables stay
 * scalar. */
#include "rotate_neon.h"

/* The CPU flags each adds to its base's (Linux's spelling). */
#define FEATURES_NEON "asimd"
#define FEATURES_NEONBF16 "bf16"

#ifdef ROPE_HAVE_NEON
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

#define ROPE_NEON_TYPES(X) X(ROPE_F32, f32) X(ROPE_F16, f16) X(ROPE_BF16, bf16) X(ROPE_F64, f64)
#define ROPE_DECLARE_NEON_ROT_(code, sfx)                                      \
    void rope_rot_il_##sfx##_neon(ROPE_ROT_PARAMS);                            \
    void rope_rot_sh_##sfx##_neon(ROPE_ROT_PARAMS);
ROPE_NEON_TYPES(ROPE_DECLARE_NEON_ROT_)
void rope_rot_il_bf16_neonbf16(ROPE_ROT_PARAMS);
void rope_rot_sh_bf16_neonbf16(ROPE_ROT_PARAMS);
/* The stage kernels (stage_neon.c), for the same storage types, and the
 * narrowing of double to float32 and float64; "neonbf16" narrows float32 to
 * bfloat16 by BFCVTN. */
#define ROPE_DECLARE_NEON_STAGE_(code, sfx)                                    \
    void rope_sumsq_##sfx##_neon(const void *x, int64_t n, double acc[8]);     \
    void rope_normalise_##sfx##_neon(const void *x, int64_t n, double inv,     \
                                     const double *w, void *out);              \
    void rope_widen_##sfx##_neon(const void *x, int64_t n, void *out);         \
    void rope_narrow_float_##sfx##_neon(const void *in, int64_t n, void *out);
ROPE_NEON_TYPES(ROPE_DECLARE_NEON_STAGE_)
void rope_narrow_double_f32_neon(const void *in, int64_t n, void *out);
void rope_narrow_double_f64_neon(const void *in, int64_t n, void *out);
void rope_narrow_float_bf16_neonbf16(const void *in, int64_t n, void *out);
/* The quantisers (quant_neon.c), one pair per ROPE_QUANT_* kind. */
#define ROPE_NEON_QUANTS(X) X(ROPE_QUANT_INT8, int8) X(ROPE_QUANT_FP8_E4M3, fp8) X(ROPE_QUANT_Q8_0, q8_0)
#define ROPE_DECLARE_NEON_QUANT_(code, kind)                                   \
    void rope_quantise_##kind##_neon(const float *in, int64_t n, void *out, float *scale); \
    void rope_dequantise_##kind##_neon(const void *in, int64_t n, float scale, float *out);
ROPE_NEON_QUANTS(ROPE_DECLARE_NEON_QUANT_)

static int neon_supported(void) { return 1; }

static int neonbf16_supported(void)
{
#if defined(__linux__)
    return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#else
    return 0; /* no detection written for other systems */
#endif
}

/* The yardstick: 64 bytes per step, four 16-byte loads then four stores. */
static void pass_neon(unsigned char *p, int64_t n, uint32_t mask)
{
    const uint8x16_t m = vreinterpretq_u8_u32(vdupq_n_u32(mask));
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const uint8x16_t a = vld1q_u8(p + i), b = vld1q_u8(p + i + 16);
        const uint8x16_t c = vld1q_u8(p + i + 32), d = vld1q_u8(p + i + 48);
        vst1q_u8(p + i, veorq_u8(a, m));
        vst1q_u8(p + i + 16, veorq_u8(b, m));
        vst1q_u8(p + i + 32, veorq_u8(c, m));
        vst1q_u8(p + i + 48, veorq_u8(d, m));
    }
    for (; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}

#define ROPE_NEON_ROW_(code, sfx)                                              \
    k->rot[code][ROPE_INTERLEAVED] = rope_rot_il_##sfx##_neon;                 \
    k->rot[code][ROPE_SPLIT_HALF] = rope_rot_sh_##sfx##_neon;                  \
    k->sumsq[code] = rope_sumsq_##sfx##_neon;                                  \
    k->normalise[code] = rope_normalise_##sfx##_neon;                          \
    k->widen[code] = rope_widen_##sfx##_neon;                                  \
    k->narrow_float[code] = rope_narrow_float_##sfx##_neon;
#define ROPE_NEON_QUANT_(code, kind)                                           \
    k->quantise[code] = rope_quantise_##kind##_neon;                           \
    k->dequantise[code] = rope_dequantise_##kind##_neon;

static void neon_override(rope_kernels *k)
{
    ROPE_NEON_TYPES(ROPE_NEON_ROW_)
    ROPE_NEON_QUANTS(ROPE_NEON_QUANT_)
    k->narrow_double[ROPE_F32] = rope_narrow_double_f32_neon;
    k->narrow_double[ROPE_F64] = rope_narrow_double_f64_neon;
    k->pass = pass_neon;
}

static void neonbf16_override(rope_kernels *k) /* on "neon"'s kernels */
{
    k->rot[ROPE_BF16][ROPE_INTERLEAVED] = rope_rot_il_bf16_neonbf16;
    k->rot[ROPE_BF16][ROPE_SPLIT_HALF] = rope_rot_sh_bf16_neonbf16;
    k->narrow_float[ROPE_BF16] = rope_narrow_float_bf16_neonbf16;
}

const rope_isa rope_isa_neon = {"neon", neon_supported, neon_override, FEATURES_NEON};
const rope_isa rope_isa_neonbf16 = {"neonbf16", neonbf16_supported, neonbf16_override, FEATURES_NEONBF16};

#else

static int neon_supported(void) { return 0; }
const rope_isa rope_isa_neon = {"neon", neon_supported, NULL, FEATURES_NEON};
const rope_isa rope_isa_neonbf16 = {"neonbf16", neon_supported, NULL, FEATURES_NEONBF16};

#endif
