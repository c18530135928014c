/* Run-time dispatch: which kernels run.
 *
 * The best instruction set the CPU *and* the OS support is chosen on first
 * use and published atomically; rope_set_isa may force another (the scalar
 * kernel always works). This file holds the only mutable global of the
 * library: the ISA choice.
 */
#include <stdatomic.h>

#include "pyrope.h"
#include "kernels.h"

#ifdef ROPE_HAVE_X86
#include <cpuid.h>
#endif

/* ---- CPU features ------------------------------------------------------ */

#ifdef ROPE_HAVE_X86
static int cpu_has_avx2_fma_f16c(void)
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
#endif

int rope_isa_supported(int isa)
{
    switch (isa) {
    case ROPE_ISA_SCALAR:
        return 1;
#ifdef ROPE_HAVE_X86
    case ROPE_ISA_AVX2:
        return cpu_has_avx2_fma_f16c();
#endif
    default:
        return 0;
    }
}

static _Atomic int g_isa = -1; /* -1: not chosen yet */

static int best_isa(void)
{
    return rope_isa_supported(ROPE_ISA_AVX2) ? ROPE_ISA_AVX2 : ROPE_ISA_SCALAR;
}

int rope_get_isa(void)
{
    int isa = atomic_load(&g_isa);
    if (isa < 0) {
        int expected = -1;
        atomic_compare_exchange_strong(&g_isa, &expected, best_isa());
        isa = atomic_load(&g_isa);
    }
    return isa;
}

int rope_set_isa(int isa)
{
    if (!rope_isa_supported(isa))
        return ROPE_E_ISA;
    atomic_store(&g_isa, isa);
    return ROPE_OK;
}

/* ---- status ------------------------------------------------------------ */

const char *rope_strerror(int status)
{
    switch (status) {
    case ROPE_OK: return "success";
    case ROPE_E_NULL: return "a required pointer is NULL";
    case ROPE_E_DIM: return "head_dim and rotary_dim must be even with 0 < rotary_dim <= head_dim";
    case ROPE_E_LAYOUT: return "layout must be interleaved or split_half";
    case ROPE_E_DTYPE: return "dtype is not supported";
    case ROPE_E_COUNT: return "a count is negative";
    case ROPE_E_POSITION: return "a position lies outside the table or the supported range";
    case ROPE_E_OVERFLOW: return "a size or index computation would overflow";
    case ROPE_E_ISA: return "the instruction set is not supported by this CPU or OS";
    case ROPE_E_VALUE: return "a numeric argument is not finite or out of range";
    case ROPE_E_OVERLAP: return "out starts where x starts but has other strides";
    case ROPE_E_ALIGN: return "a pointer is not aligned to its element type";
    default: return "unknown status";
    }
}

/* ---- kernels per instruction set ---------------------------------------- */

/* Rotation kernels of one instruction set, as rot[dtype][layout]. */
#define ROPE_ROT_TABLE(isa)                                          \
    {                                                                \
        {rope_rot_il_f32_##isa, rope_rot_sh_f32_##isa},              \
        {rope_rot_il_f16_##isa, rope_rot_sh_f16_##isa},              \
        {rope_rot_il_bf16_##isa, rope_rot_sh_bf16_##isa},            \
        {rope_rot_il_f64_##isa, rope_rot_sh_f64_##isa},              \
    }

static const rope_kernels KERNELS_SCALAR = {
    .rot = ROPE_ROT_TABLE(scalar),
    .table_f32 = rope_table_f32_scalar,
};

#ifdef ROPE_HAVE_X86
static const rope_kernels KERNELS_AVX2 = {
    .rot = ROPE_ROT_TABLE(avx2),
    .table_f32 = rope_table_f32_avx2,
};
#endif

const rope_kernels *rope_active_kernels(void)
{
#ifdef ROPE_HAVE_X86
    if (rope_get_isa() == ROPE_ISA_AVX2)
        return &KERNELS_AVX2;
#endif
    return &KERNELS_SCALAR;
}
