/* Internal: the kernel signatures shared by the scalar specification, the
 * SIMD implementations and the dispatcher. Not part of the public API. */
#ifndef PYROPE_KERNELS_H
#define PYROPE_KERNELS_H

#include <stdint.h>

#include "pyrope.h"

/* Rotate one head vector: pairs 0..half-1 of x into y (y may equal x).
 * cos/sin hold half entries; inverse rotates by minus the angle. */
typedef void (*rope_row_f32_fn)(const float *x, float *y,
                                const float *cos, const float *sin,
                                int64_t half, int inverse);

/* Table entries for n_pos positions (positions[p], or start + p when
 * positions is NULL) and n_freq frequencies; arguments already checked. */
typedef void (*rope_table_f32_fn)(const int64_t *positions, int64_t start,
                                  int64_t n_pos, const double *inv_freq,
                                  int64_t n_freq, double scale,
                                  float *cos_out, float *sin_out);

/* Scalar kernels: the specification (rotate.c, table.c). */
void rope_row_interleaved_f32_scalar(const float *x, float *y, const float *cos,
                                     const float *sin, int64_t half, int inverse);
void rope_row_split_half_f32_scalar(const float *x, float *y, const float *cos,
                                    const float *sin, int64_t half, int inverse);
void rope_table_f32_scalar(const int64_t *positions, int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out);

/* AVX2 + FMA kernels (rotate_avx2.c, table_avx2.c); only called when the CPU has them. */
#if defined(__x86_64__) || defined(__i386__)
#define ROPE_HAVE_X86 1
void rope_row_interleaved_f32_avx2(const float *x, float *y, const float *cos,
                                   const float *sin, int64_t half, int inverse);
void rope_row_split_half_f32_avx2(const float *x, float *y, const float *cos,
                                  const float *sin, int64_t half, int inverse);
void rope_table_f32_avx2(const int64_t *positions, int64_t start, int64_t n_pos,
                         const double *inv_freq, int64_t n_freq, double scale,
                         float *cos_out, float *sin_out);
#endif

/* The kernels one instruction set provides. */
typedef struct {
    rope_row_f32_fn row_f32[2];   /* indexed by layout */
    rope_table_f32_fn table_f32;
} rope_kernels;

/* Kernels of the instruction set chosen now (dispatch.c). */
const rope_kernels *rope_active_kernels(void);

/* Shared argument checks (api_table.c). */
#define ROPE_MAX_INV_FREQ 4.0   /* keeps |m*w| < 2^33: exact reduction range */
int rope_check_table_args(int64_t n_pos, const double *inv_freq, int64_t n_freq,
                          double scale, const float *cos_out, const float *sin_out);
static inline int rope_position_ok(int64_t m)
{
    return m >= -ROPE_MAX_POSITION && m <= ROPE_MAX_POSITION;
}

#endif
