/* Internal: where each token's angles come from (angles.c). The one place
 * that reads a rope_angles: it checks one before a call, and gives the
 * cos/sin row of any token during it. */
#ifndef PYROPE_ANGLES_H
#define PYROPE_ANGLES_H

#include "kernels.h"
#include "checks.h"

/* Scratch doubles a row may need (rope_token_row): the row itself and one
 * component's row for sectioned positions computed on the fly, in doubles
 * (float rows use the start of each quarter). */
#define ROPE_ROW_SCRATCH (4 * ROPE_MAX_OTF_HALF)

/* How a call's rows are made: the table kernels of the active instruction
 * set, and whether rows are double (float64 data) or float. */
typedef struct {
    rope_table_f32_fn f32;
    rope_table_f64_fn f64;
    int wide;
} rope_row_maker;

/* Copy *given into *a (the pair -> component map of sectioned positions
 * into map, which a then points to) and check every field of it and every
 * position of the [n_batch][n_seq] tokens (each component of each) against
 * the table or the on-the-fly range; half is rotary_dim/2, wide says the
 * rows are double (else float). The call then reads only *a: the caller's
 * descriptor and map are read once, here, and may lie in memory the call
 * writes. Returns ROPE_OK or the status to return. */
int rope_angles_take(const rope_angles *given, rope_angles *a, uint8_t map[ROPE_MAX_OTF_HALF],
                     int64_t n_batch, int64_t n_seq, int64_t half, int wide);

/* The byte ranges [lo[i], hi[i]) of the caller's memory that checked
 * angles a read while the call writes: the positions, then the cos and sin
 * rows (or the frequencies). Returns how many (at most 3), or -1 when a
 * range leaves the address space. */
int rope_angles_reads(const rope_angles *a, int64_t n_batch, int64_t n_seq, int64_t half, int wide,
                      uintptr_t lo[3], uintptr_t hi[3]);

/* Is the angle source a table (else: computed on the fly)? */
static inline int rope_angles_tabled(const rope_angles *a)
{
    return a->cos_table != NULL;
}

/* Position component c of token (b, s). */
static inline int64_t rope_position_at(const rope_angles *a, int64_t b, int64_t s, int c)
{
    if (a->source == ROPE_POS_OFFSET)
        return a->offset + s;
    return a->positions[b * a->strides[0] + s * a->strides[1] + c * a->strides[2]];
}

/* A row rope_token_row cannot point to in a table: made into scratch. (a
 * by value: the caller's copy never escapes, so its fields stay in
 * registers in the token loop.) */
int rope_token_row_built(rope_angles a, rope_row_maker make, int64_t half,
                         int64_t b, int64_t s, double *scratch, const void **cos_row,
                         const void **sin_row);

/* The cos and sin rows (half entries each, float or double as make.wide
 * says) of token (b, s) of a checked a: a table row, or one built into
 * scratch (ROPE_ROW_SCRATCH doubles) with the table kernel given. Returns 0
 * (no row) when a position of the token is not one a serves: checked
 * before the call, a position can fail here only if another thread changed
 * it since. Each position is read once, into a local, and checked before
 * it computes an address. Inline: one position per token from a table is
 * the common case, a few instructions per token. */
static inline int rope_token_row(const rope_angles *a, rope_row_maker make, int64_t half,
                                 int64_t b, int64_t s, double *scratch, const void **cos_row,
                                 const void **sin_row)
{
    if (a->source != ROPE_POS_SECTIONS && rope_angles_tabled(a)) {
        const int64_t pos = rope_position_at(a, b, s, 0);
        const uint64_t r = (uint64_t)pos - (uint64_t)a->table_start;
        if (pos < a->table_start || r >= (uint64_t)a->table_rows)
            return 0;
        const int64_t off = (int64_t)r * half * (make.wide ? (int64_t)sizeof(double) : (int64_t)sizeof(float));
        *cos_row = (const char *)a->cos_table + off;
        *sin_row = (const char *)a->sin_table + off;
        return 1;
    }
    return rope_token_row_built(*a, make, half, b, s, scratch, cos_row, sin_row);
}

#endif
