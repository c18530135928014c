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

/* Is position p one the angle source can serve? */
static inline int servable(const rope_angles *a, int64_t p)
{
    if (!rope_angles_tabled(a))
        return rope_position_ok(p);
    return p >= a->table_start && (uint64_t)p - (uint64_t)a->table_start < (uint64_t)a->table_rows;
}

int rope_angles_take(const rope_angles *given, rope_angles *a, uint8_t map[ROPE_MAX_OTF_HALF],
                     int64_t n_batch, int64_t n_seq, int64_t half, int wide)
{
    if (!given)
        return ROPE_E_NULL;
    /* Read once: the descriptor may lie in memory the call writes. */
    *a = *given;
    const int n_comp = a->source == ROPE_POS_SECTIONS ? a->n_components : 1;
    if (a->source != ROPE_POS_OFFSET && a->source != ROPE_POS_LIST && a->source != ROPE_POS_SECTIONS)
        return ROPE_E_SOURCE;
    if (a->source == ROPE_POS_SECTIONS) {
        if (n_comp < 1 || n_comp > ROPE_MAX_COMPONENTS || half > ROPE_MAX_OTF_HALF)
            return ROPE_E_SOURCE;
        if (!a->pair_component)
            return ROPE_E_NULL;
        /* The map indexes a row per pair: each entry read once, checked,
         * and kept in the call's own copy, so a map in memory the call
         * writes cannot change under it. */
        for (int64_t i = 0; i < half; i++) {
            const uint8_t c = a->pair_component[i];
            if (c >= n_comp)
                return ROPE_E_SOURCE;
            map[i] = c;
        }
        a->pair_component = map;
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
    int64_t lo, hi;
    if (!rope_reach(n, a->strides, 3, 1, &lo, &hi))
        return ROPE_E_OVERFLOW;
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t s = 0; s < n_seq; s++)
            for (int c = 0; c < n_comp; c++)
                if (!servable(a, rope_position_at(a, b, s, c)))
                    return ROPE_E_POSITION;
    return ROPE_OK;
}

int rope_angles_reads(const rope_angles *a, int64_t n_batch, int64_t n_seq, int64_t half, int wide,
                      uintptr_t lo[3], uintptr_t hi[3])
{
    int k = 0;
    if (a->source != ROPE_POS_OFFSET) {
        const int64_t n[3] = {n_batch, n_seq, a->source == ROPE_POS_SECTIONS ? a->n_components : 1};
        int64_t elo, ehi;
        if (!rope_reach(n, a->strides, 3, 1, &elo, &ehi) ||
            !rope_bytes(a->positions, elo, ehi, (int64_t)sizeof(int64_t), &lo[k], &hi[k]))
            return -1;
        k++;
    }
    if (rope_angles_tabled(a)) {
        const int64_t entries = a->table_rows * half;  /* checked: no overflow */
        const int64_t esize = wide ? (int64_t)sizeof(double) : (int64_t)sizeof(float);
        if (!rope_bytes(a->cos_table, 0, entries, esize, &lo[k], &hi[k]) ||
            !rope_bytes(a->sin_table, 0, entries, esize, &lo[k + 1], &hi[k + 1]))
            return -1;
        k += 2;
    } else {
        if (!rope_bytes(a->inv_freq, 0, half, (int64_t)sizeof(double), &lo[k], &hi[k]))
            return -1;
        k++;
    }
    return k;
}

/* The row of one position, or of each section, in the element type E
 * (float or double) with the row builder TABLE; returns 0 (nothing built)
 * when a position is not one the angles serve. Each position is read once,
 * into a local that is checked and then used: checked before the call, it
 * can differ now only if another thread wrote it meanwhile. */
#define ROPE_ROW_BUILT_(E, TABLE)                                                        \
    do {                                                                                 \
        E *rc = (E *)scratch, *rs = (E *)(scratch + ROPE_MAX_OTF_HALF);                  \
        if (a->source != ROPE_POS_SECTIONS) {                                            \
            const int64_t pos = rope_position_at(a, b, s, 0);                            \
            if (!rope_position_ok(pos))                                                  \
                return 0;                                                                \
            TABLE(&pos, 0, 1, a->inv_freq, half, a->scale, rc, rs);                      \
        } else if (rope_angles_tabled(a)) {                                              \
            const E *ct = (const E *)a->cos_table, *st = (const E *)a->sin_table;        \
            int64_t row[ROPE_MAX_COMPONENTS];                                            \
            for (int c = 0; c < a->n_components; c++) {                                  \
                const int64_t pos = rope_position_at(a, b, s, c);                        \
                if (!servable(a, pos))                                                   \
                    return 0;                                                            \
                row[c] = (int64_t)((uint64_t)pos - (uint64_t)a->table_start) * half;     \
            }                                                                            \
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
                if (!rope_position_ok(pos))                                              \
                    return 0;                                                            \
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
        return 1;                                                                        \
    } while (0)

int rope_token_row_built(rope_angles angles, rope_row_maker make, int64_t half,
                         int64_t b, int64_t s, double *scratch, const void **cos_row,
                         const void **sin_row)
{
    const rope_angles *a = &angles;
    if (make.wide)
        ROPE_ROW_BUILT_(double, make.f64);
    ROPE_ROW_BUILT_(float, make.f32);
}
