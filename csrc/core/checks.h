/* Internal: the argument checks the entry points share (api_rotate.c,
 * api_table.c, angles.c, table_f64.c): ranges of the limits in pyrope.h,
 * alignment, the memory a descriptor reaches, whether two byte ranges meet.
 * Not part of the public API. */
#ifndef PYROPE_CHECKS_H
#define PYROPE_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#include "pyrope.h"

/* Shared argument checks (api_table.c). */
int rope_check_table_args(int64_t n_pos, const double *inv_freq, int64_t n_freq,
                          double scale, const float *cos_out, const float *sin_out);
/* Table outputs (esize-byte entries) apart from each other and from the
 * positions (NULL: none) and frequencies the kernels read while they write:
 * ROPE_OK, ROPE_E_OVERLAP or ROPE_E_OVERFLOW (arguments checked: counts
 * positive, n_pos * n_freq without overflow). */
int rope_check_table_apart(const int64_t *positions, int64_t n_pos, const double *inv_freq, int64_t n_freq,
                           const void *cos_out, const void *sin_out, int64_t esize);
/* Is |scale| within [ROPE_MIN_SCALE, ROPE_MAX_SCALE]? (false for NaN) */
static inline int rope_scale_ok(double scale)
{
    const double a = scale < 0 ? -scale : scale;
    return a >= ROPE_MIN_SCALE && a <= ROPE_MAX_SCALE;
}
/* C forbids dereferencing a misaligned element pointer: callers must pass
 * pointers aligned to their element type (NULL counts as aligned). */
static inline int rope_aligned(const void *p, size_t align)
{
    return ((uintptr_t)p & (align - 1)) == 0;
}

static inline int rope_position_ok(int64_t m)
{
    return m >= -ROPE_MAX_POSITION && m <= ROPE_MAX_POSITION;
}

/* Element offsets [*lo, *hi) that n[k] items of strides s[k] (k < dims,
 * any sign) reach, each item extent elements long: 0 when an offset leaves
 * int64. Nothing (lo == hi == 0) when a count is <= 0. */
static inline int rope_reach(const int64_t *n, const int64_t *s, int dims, int64_t extent,
                             int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int k = 0; k < dims; k++)
        if (n[k] <= 0)
            return 1;
    int64_t l = 0, h = extent;
    for (int k = 0; k < dims; k++) {
        int64_t reach;
        if (__builtin_mul_overflow(n[k] - 1, s[k], &reach))
            return 0;
        if (reach < 0 ? __builtin_add_overflow(l, reach, &l) : __builtin_add_overflow(h, reach, &h))
            return 0;
    }
    *lo = l;
    *hi = h;
    return 1;
}

/* The bytes [*lo, *hi) of memory at p that element offsets [elo, ehi) of
 * esize-byte elements cover: 0 when they leave the address space (no
 * buffer is that large). An empty range gives lo == hi. */
static inline int rope_bytes(const void *p, int64_t elo, int64_t ehi, int64_t esize,
                             uintptr_t *lo, uintptr_t *hi)
{
    int64_t b[2];
    uint64_t r[2];
    const uint64_t base = (uintptr_t)p;
    if (__builtin_mul_overflow(elo, esize, &b[0]) || __builtin_mul_overflow(ehi, esize, &b[1]))
        return 0;
    for (int i = 0; i < 2; i++) {
        const uint64_t mag = b[i] < 0 ? (uint64_t)0 - (uint64_t)b[i] : (uint64_t)b[i];
        if (b[i] < 0 ? mag > base : mag > (uint64_t)UINTPTR_MAX - base)
            return 0;
        r[i] = b[i] < 0 ? base - mag : base + mag;
    }
    *lo = (uintptr_t)r[0];
    *hi = (uintptr_t)r[1];
    return 1;
}

/* The fields of a rope_op every rotation checks first: storage type, layout,
 * dims, counts. Returns ROPE_OK or the status to return. */
static inline int rope_check_op(const rope_op *op)
{
    if (op->dtype < 0 || op->dtype >= ROPE_N_DTYPES)
        return ROPE_E_DTYPE;
    if (op->layout != ROPE_INTERLEAVED && op->layout != ROPE_SPLIT_HALF)
        return ROPE_E_LAYOUT;
    if (op->head_dim <= 0 || op->rotary_dim <= 0 || op->rotary_dim > op->head_dim ||
        (op->rotary_dim & 1) || (op->head_dim & 1))
        return ROPE_E_DIM;
    if (op->n_batch < 0 || op->n_seq < 0)
        return ROPE_E_COUNT;
    return ROPE_OK;
}

/* Do byte ranges [alo, ahi) and [blo, bhi) share a byte? (Empty ones never do.) */
static inline int rope_ranges_meet(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi)
{
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

#endif
