/* Position sources: which position each token, and each rotation pair of it,
 * turns by, and where its cos/sin row comes from.
 *
 *   ROPE_POS_OFFSET    offset + s                  one position per token
 *   ROPE_POS_LIST      positions[b, s]             one position per token
 *   ROPE_POS_SECTIONS  positions[b, s, c]          n_components per token;
 *                      pair i uses component pair_component[i]
 *
 * A row of one position is a table row (no copy) or made on the fly by the
 * table kernel; a sectioned row gathers entry i from the row of its pair's
 * component, so every entry is still the correctly rounded
 * scale * cos(position_c * inv_freq[i]) of the tables (float rows for
 * float32, float16 and bfloat16 data, double rows for float64). This scalar code is
 * the specification of any faster row builder.
 */
#include <string.h>

#include "angles.h"

/* Largest element offset reached by n[k] items of strides s[k] (k < dims),
 * starting from [0, extent): 0 on int64 overflow. */
static int reach_ok(const int64_t *n, const int64_t *s, int dims, int64_t extent)
{
    int64_t lo = 0, hi = extent;
    for (int k = 0; k < dims; k++) {
        int64_t reach;
        if (n[k] <= 0)
            return 1;
        if (__builtin_mul_overflow(n[k] - 1, s[k], &reach))
            return 0;
        if (reach < 0 ? __builtin_add_overflow(lo, reach, &lo) : __builtin_add_overflow(hi, reach, &hi))
            return 0;
    }
    return 1;
}

/* Is position p one the angle source can serve? */
static inline int servable(const rope_angles *a, int64_t p)
{
    if (!rope_angles_tabled(a))
        return rope_position_ok(p);
    return p >= a->table_start && (uint64_t)p - (uint64_t)a->table_start < (uint64_t)a->table_rows;
}

int rope_angles_check(const rope_angles *a, int64_t n_batch, int64_t n_seq, int64_t half, int wide)
{
    if (!a)
        return ROPE_E_NULL;
    const int n_comp = a->source == ROPE_POS_SECTIONS ? a->n_components : 1;
    if (a->source != ROPE_POS_OFFSET && a->source != ROPE_POS_LIST && a->source != ROPE_POS_SECTIONS)
        return ROPE_E_SOURCE;
    if (a->source == ROPE_POS_SECTIONS) {
        if (n_comp < 1 || n_comp > ROPE_MAX_COMPONENTS || half > ROPE_MAX_OTF_HALF)
            return ROPE_E_SOURCE;
        if (!a->pair_component)
            return ROPE_E_NULL;
        for (int64_t i = 0; i < half; i++)
            if (a->pair_component[i] >= n_comp)
                return ROPE_E_SOURCE;
    }
    const int tabled = rope_angles_tabled(a);
    if (tabled ? !a->sin_table : (a->sin_table || !a->inv_freq))
        return ROPE_E_NULL;
    const size_t row_align = wide ? sizeof(double) : sizeof(float);
    if (tabled ? !rope_aligned(a->cos_table, row_align) || !rope_aligned(a->sin_table, row_align)
               : !rope_aligned(a->inv_freq, 8))  /* only what the source reads */
        return ROPE_E_ALIGN;
    if (tabled) {
        int64_t entries;
        if (a->table_rows < 0)
            return ROPE_E_COUNT;
        if (__builtin_mul_overflow(a->table_rows, half, &entries))
            return ROPE_E_OVERFLOW;
    } else {
        if (half > ROPE_MAX_OTF_HALF)
            return ROPE_E_DIM;
        const float probe = 0.0f; /* the check wants output pointers: none written */
        const int st = rope_check_table_args(1, a->inv_freq, half, a->scale, &probe, &probe);
        if (st != ROPE_OK)
            return st;
    }
    if (a->source == ROPE_POS_OFFSET) {
        int64_t last;
        if (__builtin_add_overflow(a->offset, n_seq - 1, &last))
            return ROPE_E_POSITION;
        /* the positions are a run: its two ends decide */
        return servable(a, a->offset) && servable(a, last) ? ROPE_OK : ROPE_E_POSITION;
    }
    if (!a->positions)
        return ROPE_E_NULL;
    if (!rope_aligned(a->positions, 8))
        return ROPE_E_ALIGN;
    const int64_t n[3] = {n_batch, n_seq, n_comp};
    if (!reach_ok(n, a->strides, 3, 1))
        return ROPE_E_OVERFLOW;
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t s = 0; s < n_seq; s++)
            for (int c = 0; c < n_comp; c++)
                if (!servable(a, rope_position_at(a, b, s, c)))
                    return ROPE_E_POSITION;
    return ROPE_OK;
}

/* The row of one position, or of each section, in the element type E
 * (float or double) with the row builder TABLE. */
#define ROPE_ROW_BUILT_(E, TABLE)                                                        \
    do {                                                                                 \
        E *rc = (E *)scratch, *rs = (E *)(scratch + ROPE_MAX_OTF_HALF);                  \
        if (a->source != ROPE_POS_SECTIONS) {                                            \
            const int64_t pos = rope_position_at(a, b, s, 0);                            \
            TABLE(&pos, 0, 1, a->inv_freq, half, a->scale, rc, rs);                      \
        } else if (rope_angles_tabled(a)) {                                              \
            const E *ct = (const E *)a->cos_table, *st = (const E *)a->sin_table;        \
            int64_t row[ROPE_MAX_COMPONENTS];                                            \
            for (int c = 0; c < a->n_components; c++)                                    \
                row[c] = (int64_t)((uint64_t)rope_position_at(a, b, s, c) -             \
                                   (uint64_t)a->table_start) * half;                     \
            for (int64_t i = 0; i < half; i++) {                                         \
                const int64_t e = row[a->pair_component[i]] + i;                         \
                rc[i] = ct[e];                                                           \
                rs[i] = st[e];                                                           \
            }                                                                            \
        } else {                                                                         \
            /* one component's whole row at a time, its pairs' entries kept */           \
            E *tc = (E *)(scratch + 2 * ROPE_MAX_OTF_HALF);                              \
            E *ts = (E *)(scratch + 3 * ROPE_MAX_OTF_HALF);                              \
            for (int c = 0; c < a->n_components; c++) {                                  \
                const int64_t pos = rope_position_at(a, b, s, c);                        \
                TABLE(&pos, 0, 1, a->inv_freq, half, a->scale, tc, ts);                  \
                for (int64_t i = 0; i < half; i++)                                       \
                    if (a->pair_component[i] == c) {                                     \
                        rc[i] = tc[i];                                                   \
                        rs[i] = ts[i];                                                   \
                    }                                                                    \
            }                                                                            \
        }                                                                                \
        *cos_row = rc;                                                                   \
        *sin_row = rs;                                                                   \
    } while (0)

void rope_token_row_built(rope_angles angles, rope_row_maker make, int64_t half,
                          int64_t b, int64_t s, double *scratch, const void **cos_row,
                          const void **sin_row)
{
    const rope_angles *a = &angles;
    if (make.wide)
        ROPE_ROW_BUILT_(double, make.f64);
    else
        ROPE_ROW_BUILT_(float, make.f32);
}
