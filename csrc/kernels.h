/* Internal: the kernel signatures shared by the scalar specification, the
 * SIMD implementations and the dispatcher. Not part of the public API. */
#ifndef PYROPE_KERNELS_H
#define PYROPE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "pyrope.h"

/* Rotate n_heads head vectors of one token, all at the same angles: pairs
 * 0..half-1 of head h at x + h*x_sh go to y + h*y_sh (element strides; y may
 * equal x with y_sh == x_sh). x and y point to the storage type of the
 * kernel (float, uint16_t bits of float16/bfloat16, double); cos/sin hold
 * half float32 entries; inverse rotates by minus the angle. */
typedef void (*rope_rot_fn)(const void *x, void *y, int64_t x_sh, int64_t y_sh,
                            int64_t n_heads, const float *cos, const float *sin,
                            int64_t half, int inverse);

/* Table entries for n_pos positions (positions[p], or start + p when
 * positions is NULL) and n_freq frequencies; arguments already checked. */
typedef void (*rope_table_f32_fn)(const int64_t *positions, int64_t start,
                                  int64_t n_pos, const double *inv_freq,
                                  int64_t n_freq, double scale,
                                  float *cos_out, float *sin_out);

/* Scalar kernels: the specification (rotate.c, table.c). Names say layout
 * (il = interleaved, sh = split half), storage type and instruction set. */
#define ROPE_DECLARE_ROT(isa) \
    void rope_rot_il_f32_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int); \
    void rope_rot_sh_f32_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int); \
    void rope_rot_il_f16_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int); \
    void rope_rot_sh_f16_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int); \
    void rope_rot_il_bf16_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                                const float *, const float *, int64_t, int); \
    void rope_rot_sh_bf16_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                                const float *, const float *, int64_t, int); \
    void rope_rot_il_f64_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int); \
    void rope_rot_sh_f64_##isa(const void *, void *, int64_t, int64_t, int64_t, \
                               const float *, const float *, int64_t, int);
ROPE_DECLARE_ROT(scalar)
void rope_table_f32_scalar(const int64_t *positions, int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out);

/* AVX2 + FMA + F16C kernels (rotate_avx2.c, table_avx2.c); only called when the CPU has them. */
#if defined(__x86_64__) || defined(__i386__)
#define ROPE_HAVE_X86 1
ROPE_DECLARE_ROT(avx2)
void rope_table_f32_avx2(const int64_t *positions, int64_t start, int64_t n_pos,
                         const double *inv_freq, int64_t n_freq, double scale,
                         float *cos_out, float *sin_out);
#endif

/* The kernels one instruction set provides. */
typedef struct {
    rope_rot_fn rot[4][2];        /* indexed by [dtype][layout] */
    rope_table_f32_fn table_f32;
} rope_kernels;

/* Kernels of the instruction set chosen now (dispatch.c). */
const rope_kernels *rope_active_kernels(void);

/* Shared argument checks (api_table.c). */
#define ROPE_MAX_INV_FREQ 4.0   /* keeps |m*w| < 2^33: exact reduction range */
int rope_check_table_args(int64_t n_pos, const double *inv_freq, int64_t n_freq,
                          double scale, const float *cos_out, const float *sin_out);
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

/* Bytes per element of each storage type (indexed by ROPE_F32..ROPE_F64). */
static const int64_t ROPE_ELEM_SIZE[4] = {4, 2, 2, 8};

/* Threads (threads.c). rope_parallel_for runs fn(ctx, begin, end) over
 * n_items on the calling thread plus up to n_threads - 1 pool workers. The
 * items are cut into fixed contiguous chunks (several per thread) that
 * threads claim one at a time, so a worker the OS is slow to schedule only
 * means the others take more chunks; which thread runs a chunk never changes
 * what it computes. It falls back to the calling thread alone when the pool
 * is busy (another call is using it) or cannot start threads. */
typedef void (*rope_task_fn)(void *ctx, int64_t begin, int64_t end);
void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int n_threads);

/* Threads for `bytes` of memory traffic over n_items: one per
 * ROPE_MIN_PART_BYTES (threads.c: below it a thread's hand-off costs more
 * than it saves), at least 1, at most n_threads and n_items. */
int rope_threads_for(int64_t bytes, int64_t n_items, int n_threads);

#endif
