/* Internal: where each token's angles come from (angles.c). The one place
 * that reads a rope_angles: it checks one before a call, and gives the
 * cos/sin row of any token during it. */
#ifndef PYROPE_ANGLES_H
#define PYROPE_ANGLES_H

#include "kernels.h"

/* Scratch floats a row may need (rope_token_row): the row itself and one
 * component's row for sectioned positions computed on the fly. */
#define ROPE_ROW_SCRATCH (4 * ROPE_MAX_OTF_HALF)

/* Check every field of a and every position of the [n_batch][n_seq] tokens
 * (each component of each) against the table or the on-the-fly range; half
 * is rotary_dim/2. Returns ROPE_OK or the status to return. */
int rope_angles_check(const rope_angles *a, int64_t n_batch, int64_t n_seq, int64_t half);

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
void rope_token_row_built(rope_angles a, rope_table_f32_fn table, int64_t half,
                          int64_t b, int64_t s, float *scratch, const float **cos_row,
                          const float **sin_row);

/* The cos and sin rows (half entries each) of token (b, s) of a checked a:
 * a table row, or one built into scratch (ROPE_ROW_SCRATCH floats) with the
 * table kernel given. Inline: one position per token from a table is the
 * common case, a few instructions per token. */
static inline void rope_token_row(const rope_angles *a, rope_table_f32_fn table, int64_t half,
                                  int64_t b, int64_t s, float *scratch, const float **cos_row,
                                  const float **sin_row)
{
    if (a->source != ROPE_POS_SECTIONS && rope_angles_tabled(a)) {
        const int64_t pos = rope_position_at(a, b, s, 0);
        const int64_t r = (int64_t)((uint64_t)pos - (uint64_t)a->table_start);
        *cos_row = a->cos_table + r * half;
        *sin_row = a->sin_table + r * half;
        return;
    }
    rope_token_row_built(*a, table, half, b, s, scratch, cos_row, sin_row);
}

#endif
