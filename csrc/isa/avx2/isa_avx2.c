/* The AVX2 entry of the instruction-set registry: AVX2 + FMA + F16C with OS
 * support for YMM state. Its kernels live beside it, in rotate_avx2_*.c,
 * stage_avx2.c, quant_avx2.c and table_avx2.c; this file detects the CPU,
 * names the kernels it replaces (the rotations, the stages and the
 * quantisers of every storage type and kind, the float32 table, the pass)
 * and holds the yardstick's 256-bit pass. */
#include "core/kernels.h"

#ifdef ROPE_HAVE_X86
#include <cpuid.h>
#include <immintrin.h>

/* The rotation and table kernels (bit-identical to the scalar ones), for the
 * storage types this set has kernels for: a type it lacks keeps the scalar
 * kernels, so a new storage type needs no change here. */
#define ROPE_AVX2_TYPES(X) X(ROPE_F32, f32) X(ROPE_F16, f16) X(ROPE_BF16, bf16) X(ROPE_F64, f64)
#define ROPE_DECLARE_AVX2_ROT_(code, sfx)                                      \
    void rope_rot_il_##sfx##_avx2(ROPE_ROT_PARAMS);                            \
    void rope_rot_sh_##sfx##_avx2(ROPE_ROT_PARAMS);
ROPE_AVX2_TYPES(ROPE_DECLARE_AVX2_ROT_)
void rope_table_f32_avx2(ROPE_TABLE_PARAMS);
/* The stage kernels (stage_avx2.c), for the same storage types, and the
 * narrowing of double to float32 and float64. */
#define ROPE_DECLARE_AVX2_STAGE_(code, sfx)                                    \
    void rope_sumsq_##sfx##_avx2(const void *x, int64_t n, double acc[8]);     \
    void rope_normalise_##sfx##_avx2(const void *x, int64_t n, double inv,     \
                                     const double *w, void *out);              \
    void rope_widen_##sfx##_avx2(const void *x, int64_t n, void *out);         \
    void rope_narrow_float_##sfx##_avx2(const void *in, int64_t n, void *out);
ROPE_AVX2_TYPES(ROPE_DECLARE_AVX2_STAGE_)
void rope_narrow_double_f32_avx2(const void *in, int64_t n, void *out);
void rope_narrow_double_f64_avx2(const void *in, int64_t n, void *out);
/* The one-pass norm path (stage_avx2.c), every pair, both layouts. */
#define ROPE_DECLARE_AVX2_NORM_ROT_(cin, in, cout, out) ROPE_DECLARE_NORM_ROT(in, out, avx2)
ROPE_NORM_ROT_PAIRS(ROPE_DECLARE_AVX2_NORM_ROT_)
void rope_duplicate_row_avx2(const float *cos, const float *sin, int64_t half, float *dup_cos, float *dup_sin);
/* The quantisers (quant_avx2.c), one pair per ROPE_QUANT_* kind. */
#define ROPE_AVX2_QUANTS(X) X(ROPE_QUANT_INT8, int8) X(ROPE_QUANT_FP8_E4M3, fp8) X(ROPE_QUANT_Q8_0, q8_0)
#define ROPE_DECLARE_AVX2_QUANT_(code, kind)                                   \
    void rope_quantise_##kind##_avx2(const float *in, int64_t n, void *out, float *scale); \
    void rope_dequantise_##kind##_avx2(const void *in, int64_t n, float scale, float *out);
ROPE_AVX2_QUANTS(ROPE_DECLARE_AVX2_QUANT_)

static int avx2_supported(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1;
    const int avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c))
        return 0;
    /* The OS must save XMM and YMM state (XCR0 bits 1 and 2). */
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & 6u) != 6u)
        return 0;
    if (__get_cpuid_max(0, 0) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1; /* AVX2 */
}

/* The yardstick: 128 bytes per step, four 32-byte loads then four stores. */
__attribute__((target("avx2"))) static void pass_avx2(unsigned char *p, int64_t n, uint32_t mask)
{
    const __m256i m = _mm256_set1_epi32((int)mask);
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i *v = (__m256i *)(p + i);
        const __m256i a = _mm256_loadu_si256(v), b = _mm256_loadu_si256(v + 1);
        const __m256i c = _mm256_loadu_si256(v + 2), d = _mm256_loadu_si256(v + 3);
        _mm256_storeu_si256(v, _mm256_xor_si256(a, m));
        _mm256_storeu_si256(v + 1, _mm256_xor_si256(b, m));
        _mm256_storeu_si256(v + 2, _mm256_xor_si256(c, m));
        _mm256_storeu_si256(v + 3, _mm256_xor_si256(d, m));
    }
    for (; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}

#define ROPE_AVX2_ROW_(code, sfx)                                              \
    k->rot[code][ROPE_INTERLEAVED] = rope_rot_il_##sfx##_avx2;                 \
    k->rot[code][ROPE_SPLIT_HALF] = rope_rot_sh_##sfx##_avx2;                  \
    k->sumsq[code] = rope_sumsq_##sfx##_avx2;                                  \
    k->normalise[code] = rope_normalise_##sfx##_avx2;                          \
    k->widen[code] = rope_widen_##sfx##_avx2;                                  \
    k->narrow_float[code] = rope_narrow_float_##sfx##_avx2;
#define ROPE_AVX2_NORM_ROT_(cin, in, cout, out) ROPE_SET_NORM_ROT(k, cin, in, cout, out, avx2)
#define ROPE_AVX2_QUANT_(code, kind)                                           \
    k->quantise[code] = rope_quantise_##kind##_avx2;                           \
    k->dequantise[code] = rope_dequantise_##kind##_avx2;

static void avx2_override(rope_kernels *k)
{
    ROPE_AVX2_TYPES(ROPE_AVX2_ROW_)
    ROPE_AVX2_QUANTS(ROPE_AVX2_QUANT_)
    ROPE_NORM_ROT_PAIRS(ROPE_AVX2_NORM_ROT_)
    k->duplicate_row = rope_duplicate_row_avx2;
    k->narrow_double[ROPE_F32] = rope_narrow_double_f32_avx2;
    k->narrow_double[ROPE_F64] = rope_narrow_double_f64_avx2;
    k->table_f32 = rope_table_f32_avx2;
    k->pass = pass_avx2;
}

const rope_isa rope_isa_avx2 = {"avx2", avx2_supported, avx2_override, "avx fma f16c avx2"};

#else

static int avx2_supported(void) { return 0; }
const rope_isa rope_isa_avx2 = {"avx2", avx2_supported, NULL, "avx fma f16c avx2"};

#endif
