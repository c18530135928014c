/* Public entry points for cos/sin tables: check, then run the chosen kernel. */
#include "pyrope.h"
#include "core/kernels.h"
#include "core/checks.h"

/* Shortest run of consecutive positions worth the dense-range kernel. */
#define ROPE_MIN_RUN 48

int rope_check_table_args(int64_t n_pos, const double *inv_freq, int64_t n_freq,
                            double scale, const float *cos_out, const float *sin_out)
{
    if (n_pos < 0 || n_freq < 0)
        return ROPE_E_COUNT;
    if (n_pos == 0 || n_freq == 0)
        return ROPE_OK;
    if (!inv_freq || !cos_out || !sin_out)
        return ROPE_E_NULL;
    if (!rope_aligned(inv_freq, 8) || !rope_aligned(cos_out, 4) || !rope_aligned(sin_out, 4))
        return ROPE_E_ALIGN;
    int64_t total;
    if (__builtin_mul_overflow(n_pos, n_freq, &total))
        return ROPE_E_OVERFLOW;
    if (!rope_scale_ok(scale))
        return ROPE_E_VALUE;
    for (int64_t i = 0; i < n_freq; i++)
        if (!(inv_freq[i] >= -ROPE_MAX_INV_FREQ && inv_freq[i] <= ROPE_MAX_INV_FREQ))
            return ROPE_E_VALUE;
    return ROPE_OK;
}

int rope_check_table_apart(const int64_t *positions, int64_t n_pos, const double *inv_freq, int64_t n_freq,
                           const void *cos_out, const void *sin_out, int64_t esize)
{
    /* what the kernels read while they write (the positions, the
     * frequencies), and the two outputs: no two may share a byte */
    uintptr_t lo[4], hi[4];
    if (!rope_bytes(cos_out, 0, n_pos * n_freq, esize, &lo[0], &hi[0]) ||  /* product checked */
        !rope_bytes(sin_out, 0, n_pos * n_freq, esize, &lo[1], &hi[1]) ||
        !rope_bytes(inv_freq, 0, n_freq, (int64_t)sizeof(double), &lo[2], &hi[2]) ||
        !rope_bytes(positions, 0, positions ? n_pos : 0, (int64_t)sizeof(int64_t), &lo[3], &hi[3]))
        return ROPE_E_OVERFLOW;
    for (int out = 0; out < 2; out++)
        for (int i = out + 1; i < 4; i++)
            if (rope_ranges_meet(lo[out], hi[out], lo[i], hi[i]))
                return ROPE_E_OVERLAP;
    return ROPE_OK;
}

int rope_cos_sin_f32(const int64_t *positions, int64_t n_pos,
                     const double *inv_freq, int64_t n_freq, double scale,
                     float *cos_out, float *sin_out)
{
    int st = rope_check_table_args(n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    if (st != ROPE_OK || n_pos == 0 || n_freq == 0)
        return st;
    if (!positions)
        return ROPE_E_NULL;
    if (!rope_aligned(positions, 8))
        return ROPE_E_ALIGN;
    st = rope_check_table_apart(positions, n_pos, inv_freq, n_freq, cos_out, sin_out, sizeof(float));
    if (st != ROPE_OK)
        return st;
    for (int64_t p = 0; p < n_pos; p++)
        if (!rope_position_ok(positions[p]))
            return ROPE_E_POSITION;
    /* Runs of consecutive positions take the dense-range kernel, the rest the
     * per-position one; entries are correctly rounded, so the split never
     * changes a bit, only the speed. */
    const rope_table_f32_fn table = rope_active_kernels()->table_f32;
    int64_t done = 0, p = 0;
    while (p < n_pos) {
        int64_t run = 1;
        while (p + run < n_pos && positions[p + run] == positions[p] + run)
            run++;
        if (run >= ROPE_MIN_RUN) {
            if (p > done)
                table(positions + done, 0, p - done, inv_freq, n_freq, scale,
                      cos_out + done * n_freq, sin_out + done * n_freq);
            table(NULL, positions[p], run, inv_freq, n_freq, scale,
                  cos_out + p * n_freq, sin_out + p * n_freq);
            done = p + run;
        }
        p += run;
    }
    if (n_pos > done)
        table(positions + done, 0, n_pos - done, inv_freq, n_freq, scale,
              cos_out + done * n_freq, sin_out + done * n_freq);
    return ROPE_OK;
}

int rope_cos_sin_range_f32(int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out)
{
    int st = rope_check_table_args(n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    if (st != ROPE_OK || n_pos == 0 || n_freq == 0)
        return st;
    st = rope_check_table_apart(NULL, n_pos, inv_freq, n_freq, cos_out, sin_out, sizeof(float));
    if (st != ROPE_OK)
        return st;
    if (!rope_position_ok(start) || n_pos - 1 > ROPE_MAX_POSITION - start)
        return ROPE_E_POSITION;
    rope_active_kernels()->table_f32(NULL, start, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    return ROPE_OK;
}

