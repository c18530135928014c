/* Public entry point for rotation: check every argument and every position
 * before anything is written, then run the chosen row kernel per head. */
#include <string.h>

#include "pyrope.h"
#include "kernels.h"

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

/* Is every token's position inside [lo, lo + rows)? (rows < 0: only the
 * +-ROPE_MAX_POSITION range is checked, for the on-the-fly path.) */
static int positions_ok(const int64_t *positions, int64_t p_sb, int64_t p_ss,
                        int64_t offset, int64_t n_batch, int64_t n_seq,
                        int64_t lo, int64_t rows)
{
    if (!positions) {
        int64_t last;
        if (__builtin_add_overflow(offset, n_seq - 1, &last))
            return 0;
        if (rows < 0)
            return rope_position_ok(offset) && rope_position_ok(last);
        return offset >= lo && (uint64_t)last - (uint64_t)lo < (uint64_t)rows;
    }
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t s = 0; s < n_seq; s++) {
            const int64_t pos = positions[b * p_sb + s * p_ss];
            if (rows < 0 ? !rope_position_ok(pos)
                         : pos < lo || (uint64_t)pos - (uint64_t)lo >= (uint64_t)rows)
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
                int64_t table_start, int64_t table_rows,
                const double *inv_freq, double scale,
                int n_threads)
{
    (void)n_threads; /* single-threaded for now; results never depend on it */
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
    const int64_t half = rotary_dim / 2;
    const int on_the_fly = !cos_table && !sin_table;
    if (!x || !out || (on_the_fly ? !inv_freq : (!cos_table || !sin_table)))
        return ROPE_E_NULL;
    if (!span_ok(n_batch, n_seq, n_heads, head_dim, x_sb, x_ss, x_sh) ||
        !span_ok(n_batch, n_seq, n_heads, head_dim, o_sb, o_ss, o_sh) ||
        (positions && !span_ok(n_batch, n_seq, 1, 1, p_sb, p_ss, 0)))
        return ROPE_E_OVERFLOW;
    if (on_the_fly) {
        if (half > ROPE_MAX_OTF_HALF)
            return ROPE_E_DIM;
        const int st = rope_check_table_args(1, inv_freq, half, scale, (const float *)x,
                                             (const float *)x);
        if (st != ROPE_OK)
            return st;
        if (!positions_ok(positions, p_sb, p_ss, offset, n_batch, n_seq, 0, -1))
            return ROPE_E_POSITION;
    } else {
        int64_t table_entries;
        if (__builtin_mul_overflow(table_rows, half, &table_entries))
            return ROPE_E_OVERFLOW;
        if (!positions_ok(positions, p_sb, p_ss, offset, n_batch, n_seq,
                          table_start, table_rows))
            return ROPE_E_POSITION;
    }
    const int in_place = (const void *)out == x;
    if (in_place && (o_sb != x_sb || o_ss != x_ss || o_sh != x_sh))
        return ROPE_E_OVERLAP;

    const rope_kernels *k = rope_active_kernels();
    const rope_row_f32_fn row = k->row_f32[layout];
    const float *xf = (const float *)x;
    float *of = (float *)out;
    const size_t tail_bytes = (size_t)(head_dim - rotary_dim) * sizeof(float);
    float otf_cos[ROPE_MAX_OTF_HALF], otf_sin[ROPE_MAX_OTF_HALF];

    for (int64_t b = 0; b < n_batch; b++) {
        for (int64_t s = 0; s < n_seq; s++) {
            const int64_t pos = positions ? positions[b * p_sb + s * p_ss] : offset + s;
            const float *c, *sn;
            if (on_the_fly) {
                /* One row, shared by every head of this token. */
                k->table_f32(&pos, 0, 1, inv_freq, half, scale, otf_cos, otf_sin);
                c = otf_cos;
                sn = otf_sin;
            } else {
                const int64_t r = (int64_t)((uint64_t)pos - (uint64_t)table_start);
                c = cos_table + r * half;
                sn = sin_table + r * half;
            }
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
