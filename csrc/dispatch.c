/* Run-time dispatch and the public entry points.
 *
 * The best instruction set the CPU *and* the OS support is chosen on first
 * use and published atomically; rope_set_isa may force another (the scalar
 * kernel always works). Entry points check every argument and every position
 * before they write anything, then run the chosen kernels. This file holds
 * the only mutable global of the library: the ISA choice.
 */
#include <stdatomic.h>
#include <string.h>

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
    default: return "unknown status";
    }
}

/* ---- tables ------------------------------------------------------------ */

/* Frequencies up to 4 in magnitude keep |m*w| < 2^33, the range in which the
 * table kernel's argument reduction is exact. */
#define ROPE_MAX_INV_FREQ 4.0

static int check_table_args(int64_t n_pos, const double *inv_freq, int64_t n_freq,
                            double scale, const float *cos_out, const float *sin_out)
{
    if (n_pos < 0 || n_freq < 0)
        return ROPE_E_COUNT;
    if (n_pos == 0 || n_freq == 0)
        return ROPE_OK;
    if (!inv_freq || !cos_out || !sin_out)
        return ROPE_E_NULL;
    int64_t total;
    if (__builtin_mul_overflow(n_pos, n_freq, &total))
        return ROPE_E_OVERFLOW;
    if (!(scale - scale == 0.0))  /* NaN or infinite */
        return ROPE_E_VALUE;
    for (int64_t i = 0; i < n_freq; i++)
        if (!(inv_freq[i] >= -ROPE_MAX_INV_FREQ && inv_freq[i] <= ROPE_MAX_INV_FREQ))
            return ROPE_E_VALUE;
    return ROPE_OK;
}

static int position_ok(int64_t m)
{
    return m >= -ROPE_MAX_POSITION && m <= ROPE_MAX_POSITION;
}

int rope_cos_sin_f32(const int64_t *positions, int64_t n_pos,
                     const double *inv_freq, int64_t n_freq, double scale,
                     float *cos_out, float *sin_out)
{
    int st = check_table_args(n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    if (st != ROPE_OK || n_pos == 0 || n_freq == 0)
        return st;
    if (!positions)
        return ROPE_E_NULL;
    for (int64_t p = 0; p < n_pos; p++)
        if (!position_ok(positions[p]))
            return ROPE_E_POSITION;
    rope_table_f32_scalar(positions, 0, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    return ROPE_OK;
}

int rope_cos_sin_range_f32(int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out)
{
    int st = check_table_args(n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    if (st != ROPE_OK || n_pos == 0 || n_freq == 0)
        return st;
    if (!position_ok(start) || n_pos - 1 > ROPE_MAX_POSITION - start)
        return ROPE_E_POSITION;
    rope_table_f32_scalar(NULL, start, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    return ROPE_OK;
}

/* ---- rotation ---------------------------------------------------------- */

/* Largest element offset reached by [n_batch][n_seq][n_heads][extent] under
 * strides (sb, ss, sh), which may be negative: fails on int64 overflow. */
static int span_ok(int64_t n_batch, int64_t n_seq, int64_t n_heads, int64_t extent,
                   int64_t sb, int64_t ss, int64_t sh)
{
    const int64_t n[3] = {n_batch, n_seq, n_heads};
    const int64_t s[3] = {sb, ss, sh};
    int64_t lo = 0, hi = extent;
    for (int k = 0; k < 3; k++) {
        int64_t reach;
        if (__builtin_mul_overflow(n[k] - 1, s[k], &reach))
            return 0;
        if (reach < 0) {
            if (__builtin_add_overflow(lo, reach, &lo))
                return 0;
        } else if (__builtin_add_overflow(hi, reach, &hi)) {
            return 0;
        }
    }
    return 1;
}

/* Is every token's position inside [table_start, table_start + table_rows)? */
static int positions_in_table(const int64_t *positions, int64_t p_sb, int64_t p_ss,
                              int64_t offset, int64_t n_batch, int64_t n_seq,
                              int64_t table_start, int64_t table_rows)
{
    if (!positions) {
        int64_t last;
        if (__builtin_add_overflow(offset, n_seq - 1, &last))
            return 0;
        return offset >= table_start &&
               (uint64_t)last - (uint64_t)table_start < (uint64_t)table_rows;
    }
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t s = 0; s < n_seq; s++) {
            const int64_t pos = positions[b * p_sb + s * p_ss];
            if (pos < table_start ||
                (uint64_t)pos - (uint64_t)table_start >= (uint64_t)table_rows)
                return 0;
        }
    return 1;
}

int rope_rotate(int dtype, int layout, int inverse,
                const void *x, void *out,
                int64_t n_batch, int64_t n_seq, int64_t n_heads,
                int64_t head_dim, int64_t rotary_dim,
                int64_t x_sb, int64_t x_ss, int64_t x_sh,
                int64_t o_sb, int64_t o_ss, int64_t o_sh,
                const int64_t *positions, int64_t p_sb, int64_t p_ss,
                int64_t offset,
                const float *cos_table, const float *sin_table,
                int64_t table_start, int64_t table_rows)
{
    if (dtype != ROPE_F32)
        return ROPE_E_DTYPE;
    if (layout != ROPE_INTERLEAVED && layout != ROPE_SPLIT_HALF)
        return ROPE_E_LAYOUT;
    if (head_dim <= 0 || rotary_dim <= 0 || rotary_dim > head_dim ||
        (rotary_dim & 1) || (head_dim & 1))
        return ROPE_E_DIM;
    if (n_batch < 0 || n_seq < 0 || n_heads < 0 || table_rows < 0)
        return ROPE_E_COUNT;
    if (n_batch == 0 || n_seq == 0 || n_heads == 0)
        return ROPE_OK; /* nothing to do: no pointer is dereferenced */
    if (!x || !out || !cos_table || !sin_table)
        return ROPE_E_NULL;
    if (!span_ok(n_batch, n_seq, n_heads, head_dim, x_sb, x_ss, x_sh) ||
        !span_ok(n_batch, n_seq, n_heads, head_dim, o_sb, o_ss, o_sh) ||
        (positions && !span_ok(n_batch, n_seq, 1, 1, p_sb, p_ss, 0)))
        return ROPE_E_OVERFLOW;
    const int64_t half = rotary_dim / 2;
    int64_t table_entries;
    if (__builtin_mul_overflow(table_rows, half, &table_entries))
        return ROPE_E_OVERFLOW;
    if (!positions_in_table(positions, p_sb, p_ss, offset, n_batch, n_seq,
                            table_start, table_rows))
        return ROPE_E_POSITION;

    const int in_place = (const void *)out == x;
    if (in_place && (o_sb != x_sb || o_ss != x_ss || o_sh != x_sh))
        return ROPE_E_OVERLAP;

    const int isa = rope_get_isa();
    rope_row_f32_fn row = layout == ROPE_INTERLEAVED ? rope_row_interleaved_f32_scalar
                                                     : rope_row_split_half_f32_scalar;
#ifdef ROPE_HAVE_X86
    if (isa == ROPE_ISA_AVX2)
        row = layout == ROPE_INTERLEAVED ? rope_row_interleaved_f32_avx2
                                         : rope_row_split_half_f32_avx2;
#else
    (void)isa;
#endif
    const float *xf = (const float *)x;
    float *of = (float *)out;
    const size_t tail_bytes = (size_t)(head_dim - rotary_dim) * sizeof(float);

    for (int64_t b = 0; b < n_batch; b++) {
        for (int64_t s = 0; s < n_seq; s++) {
            const int64_t pos = positions ? positions[b * p_sb + s * p_ss] : offset + s;
            const int64_t r = (int64_t)((uint64_t)pos - (uint64_t)table_start);
            const float *c = cos_table + r * half;
            const float *sn = sin_table + r * half;
            for (int64_t h = 0; h < n_heads; h++) {
                const float *xv = xf + b * x_sb + s * x_ss + h * x_sh;
                float *ov = of + b * o_sb + s * o_ss + h * o_sh;
                row(xv, ov, c, sn, half, inverse);
                if (!in_place && tail_bytes)
                    memcpy(ov + rotary_dim, xv + rotary_dim, tail_bytes);
            }
        }
    }
    return ROPE_OK;
}
