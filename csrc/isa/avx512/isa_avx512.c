/* The AVX-512 entries of the instruction-set registry:
 *   "avx512"     AVX-512 F, BW, VL and DQ (with AVX2, FMA, F16C), the OS
 *                saving ZMM state;
 *   "avx512bf16" the same plus AVX512_BF16, whose conversion instruction
 *                narrows float32 to bfloat16 in one step.
 * "avx512" builds on "avx2" and "avx512bf16" on "avx512" (the registry,
 * dispatch.c, says so): each starts from its base's kernels (a storage type
 * or table without an AVX-512 kernel keeps its AVX2 one), is supported only
 * where its base is, and replaces what it does better. The kernels live
 * beside it, in rotate_avx512_*.c, stage_avx512.c and quant_avx512.c; this
 * file detects the CPU, names the kernels each entry replaces ("avx512":
 * the rotations but float16's, most stage kernels, the one-pass norm
 * paths, the quantisers of every kind and the pass; "avx512bf16":
 * bfloat16's rotations and narrowing) and
 * holds the yardstick's 512-bit pass.
 * AVX512-FP16 adds half-precision arithmetic, which rounds differently from
 * the specification (float32 arithmetic, one rounding on store), and
 * nothing for the conversions F already has: no entry uses it. */
#include "core/kernels.h"

/* The CPU flags each adds to its base's (Linux's spelling). */
#define FEATURES_AVX512 "avx512f avx512dq avx512bw avx512vl"
#define FEATURES_AVX512BF16 "avx512_bf16"

#ifdef ROPE_HAVE_X86
#include <cpuid.h>
#include <immintrin.h>

#include "rotate_avx512.h"

/* Storage types with AVX-512 rotation kernels rope_rot_{il,sh}_<sfx>_avx512
 * (float16 keeps "avx2"'s: its conversions cost the same per element at
 * either width, and the AVX2 kernels were as fast in L1 and 2-10% faster on
 * real calls, interleaved 1.2-2.5x, forced side by side on an Intel Xeon,
 * family 6 model 167), those with AVX-512 stage kernels (every type), and
 * those whose "avx512bf16" kernels are rope_rot_{il,sh}_<sfx>_avx512bf16. */
#define ROPE_AVX512_ROT_TYPES(X) X(ROPE_F32, f32) X(ROPE_BF16, bf16) X(ROPE_F64, f64)
#define ROPE_AVX512_TYPES(X) X(ROPE_F32, f32) X(ROPE_F16, f16) X(ROPE_BF16, bf16) X(ROPE_F64, f64)
#define ROPE_AVX512BF16_TYPES(X) X(ROPE_BF16, bf16)

#define ROPE_DECLARE_ROT_(code, sfx, isa)                                      \
    void rope_rot_il_##sfx##_##isa(ROPE_ROT_PARAMS);                           \
    void rope_rot_sh_##sfx##_##isa(ROPE_ROT_PARAMS);
#define ROPE_DECLARE_AVX512_(code, sfx) ROPE_DECLARE_ROT_(code, sfx, avx512)
#define ROPE_DECLARE_AVX512BF16_(code, sfx) ROPE_DECLARE_ROT_(code, sfx, avx512bf16)
ROPE_AVX512_ROT_TYPES(ROPE_DECLARE_AVX512_)
ROPE_AVX512BF16_TYPES(ROPE_DECLARE_AVX512BF16_)

/* The stage kernels (stage_avx512.c): for every storage type the sum of
 * squares, the norm and (the 16-bit types) widening; narrowing of float32
 * to float16, bfloat16 and float64 and of double to float32; "avx512bf16"
 * narrows float32 to bfloat16 in hardware. The copies (float32 and float64
 * widened, float32 and double narrowed to their own type) stay "avx2"'s. */
#define ROPE_DECLARE_AVX512_STAGE_(code, sfx)                                  \
    void rope_sumsq_##sfx##_avx512(const void *x, int64_t n, double acc[8]);   \
    void rope_normalise_##sfx##_avx512(const void *x, int64_t n, double inv,   \
                                       const double *w, void *out);
ROPE_AVX512_TYPES(ROPE_DECLARE_AVX512_STAGE_)
void rope_widen_f16_avx512(const void *x, int64_t n, void *out);
void rope_widen_bf16_avx512(const void *x, int64_t n, void *out);
void rope_narrow_float_f16_avx512(const void *in, int64_t n, void *out);
void rope_narrow_float_bf16_avx512(const void *in, int64_t n, void *out);
void rope_narrow_float_f64_avx512(const void *in, int64_t n, void *out);
void rope_narrow_double_f32_avx512(const void *in, int64_t n, void *out);
void rope_narrow_float_bf16_avx512bf16(const void *in, int64_t n, void *out);
/* The one-pass norm path (stage_avx512.c), every pair, both layouts. */
#define ROPE_DECLARE_AVX512_NORM_ROT_(cin, in, cout, out) ROPE_DECLARE_NORM_ROT(in, out, avx512)
ROPE_NORM_ROT_PAIRS(ROPE_DECLARE_AVX512_NORM_ROT_)
/* The quantisers (quant_avx512.c), one pair per ROPE_QUANT_* kind. */
#define ROPE_AVX512_QUANTS(X) X(ROPE_QUANT_INT8, int8) X(ROPE_QUANT_FP8_E4M3, fp8) X(ROPE_QUANT_Q8_0, q8_0)
#define ROPE_DECLARE_AVX512_QUANT_(code, kind)                                 \
    void rope_quantise_##kind##_avx512(const float *in, int64_t n, void *out, float *scale); \
    void rope_dequantise_##kind##_avx512(const void *in, int64_t n, float scale, float *out);
ROPE_AVX512_QUANTS(ROPE_DECLARE_AVX512_QUANT_)

/* CPUID leaf 7 bits and the XCR0 state the OS must save. */
#define EBX7_AVX512F (1u << 16)
#define EBX7_AVX512DQ (1u << 17)
#define EBX7_AVX512BW (1u << 30)
#define EBX7_AVX512VL (1u << 31)
#define EAX7_1_AVX512BF16 (1u << 5)
#define XCR0_ZMM 0xE6u /* XMM, YMM, opmask, ZMM0-15 upper halves, ZMM16-31 */

/* Called only where "avx2" is supported (its base): CPUID leaf 7 and XGETBV
 * exist there. */
static int avx512_supported(void)
{
    unsigned a, b, c, d, xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & XCR0_ZMM) != XCR0_ZMM)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need = EBX7_AVX512F | EBX7_AVX512DQ | EBX7_AVX512BW | EBX7_AVX512VL;
    return (b & need) == need;
}

static int avx512bf16_supported(void) /* where "avx512" is */
{
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    if (a < 1) /* no sub-leaf 1 */
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return (a & EAX7_1_AVX512BF16) != 0;
}

/* The yardstick: 256 bytes per step, four 64-byte loads then four stores. */
ROPE_AVX512 static void pass_avx512(unsigned char *p, int64_t n, uint32_t mask)
{
    const __m512i m = _mm512_set1_epi32((int)mask);
    int64_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m512i *v = (__m512i *)(p + i);
        const __m512i a = _mm512_loadu_si512(v), b = _mm512_loadu_si512(v + 1);
        const __m512i c = _mm512_loadu_si512(v + 2), d = _mm512_loadu_si512(v + 3);
        _mm512_storeu_si512(v, _mm512_xor_si512(a, m));
        _mm512_storeu_si512(v + 1, _mm512_xor_si512(b, m));
        _mm512_storeu_si512(v + 2, _mm512_xor_si512(c, m));
        _mm512_storeu_si512(v + 3, _mm512_xor_si512(d, m));
    }
    for (; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}

#define ROPE_ROW_(code, sfx, isa)                                              \
    k->rot[code][ROPE_INTERLEAVED] = rope_rot_il_##sfx##_##isa;                \
    k->rot[code][ROPE_SPLIT_HALF] = rope_rot_sh_##sfx##_##isa;
#define ROPE_AVX512_ROW_(code, sfx) ROPE_ROW_(code, sfx, avx512)
#define ROPE_AVX512_STAGE_ROW_(code, sfx)                                      \
    k->sumsq[code] = rope_sumsq_##sfx##_avx512;                                \
    k->normalise[code] = rope_normalise_##sfx##_avx512;
#define ROPE_AVX512_NORM_ROT_(cin, in, cout, out) ROPE_SET_NORM_ROT(k, cin, in, cout, out, avx512)
#define ROPE_AVX512BF16_ROW_(code, sfx) ROPE_ROW_(code, sfx, avx512bf16)
#define ROPE_AVX512_QUANT_(code, kind)                                         \
    k->quantise[code] = rope_quantise_##kind##_avx512;                         \
    k->dequantise[code] = rope_dequantise_##kind##_avx512;

static void avx512_override(rope_kernels *k) /* on "avx2"'s kernels */
{
    ROPE_AVX512_ROT_TYPES(ROPE_AVX512_ROW_)
    ROPE_AVX512_TYPES(ROPE_AVX512_STAGE_ROW_)
    k->widen[ROPE_F16] = rope_widen_f16_avx512;
    k->widen[ROPE_BF16] = rope_widen_bf16_avx512;
    k->narrow_float[ROPE_F16] = rope_narrow_float_f16_avx512;
    k->narrow_float[ROPE_BF16] = rope_narrow_float_bf16_avx512;
    k->narrow_float[ROPE_F64] = rope_narrow_float_f64_avx512;
    k->narrow_double[ROPE_F32] = rope_narrow_double_f32_avx512;
    ROPE_AVX512_QUANTS(ROPE_AVX512_QUANT_)
    ROPE_NORM_ROT_PAIRS(ROPE_AVX512_NORM_ROT_)
    k->pass = pass_avx512;
}

static void avx512bf16_override(rope_kernels *k) /* on "avx512"'s kernels */
{
    ROPE_AVX512BF16_TYPES(ROPE_AVX512BF16_ROW_)
    k->narrow_float[ROPE_BF16] = rope_narrow_float_bf16_avx512bf16;
}

const rope_isa rope_isa_avx512 = {"avx512", avx512_supported, avx512_override, FEATURES_AVX512};
const rope_isa rope_isa_avx512bf16 = {"avx512bf16", avx512bf16_supported, avx512bf16_override,
                                      FEATURES_AVX512BF16};

#else

static int avx512_supported(void) { return 0; }
const rope_isa rope_isa_avx512 = {"avx512", avx512_supported, NULL, FEATURES_AVX512};
const rope_isa rope_isa_avx512bf16 = {"avx512bf16", avx512_supported, NULL, FEATURES_AVX512BF16};

#endif
