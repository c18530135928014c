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

/* The cos and sin rows (half entries each) of token (b, s) of a checked a:
 * a table row, or one built into scratch (ROPE_ROW_SCRATCH floats) with the
 * table kernel given. */
void rope_token_row(const rope_angles *a, rope_table_f32_fn table, int64_t half,
                    int64_t b, int64_t s, float *scratch, const float **cos_row,
                    const float **sin_row);

#endif
