/* Internal: the kernel signatures shared by the scalar specification, the
 * SIMD implementations and the dispatcher, and the registry of instruction
 * sets. Not part of the public API. */
#ifndef PYROPE_KERNELS_H
#define PYROPE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "pyrope.h"

#if defined(__x86_64__) || defined(__i386__)
#define ROPE_HAVE_X86 1
#endif
#if defined(__aarch64__)
#define ROPE_HAVE_ARM64 1
#endif

/* Rotate n_heads head vectors of one token, all at the same angles: pairs
 * 0..half-1 of head h at x + h*x_sh go to y + h*y_sh (element strides; y may
 * equal x with y_sh == x_sh). x and y point to the storage type of the
 * kernel (float, uint16_t bits of float16/bfloat16, double); cos/sin hold
 * half entries of its arithmetic type (float rows for float32, float16 and
 * bfloat16, double rows for float64); inverse rotates by minus the angle. */
#define ROPE_ROT_PARAMS                                                        \
    const void *x, void *y, int64_t x_sh, int64_t y_sh, int64_t n_heads,      \
        const void *cos, const void *sin, int64_t half, int inverse
typedef void (*rope_rot_fn)(ROPE_ROT_PARAMS);

/* Table entries for n_pos positions (positions[p], or start + p when
 * positions is NULL) and n_freq frequencies; arguments already checked. */
#define ROPE_TABLE_PARAMS                                                      \
    const int64_t *positions, int64_t start, int64_t n_pos,                   \
        const double *inv_freq, int64_t n_freq, double scale,                 \
        float *cos_out, float *sin_out
typedef void (*rope_table_f32_fn)(ROPE_TABLE_PARAMS);
/* The same in float64 (rows for float64 data). */
#define ROPE_TABLE_F64_PARAMS                                                  \
    const int64_t *positions, int64_t start, int64_t n_pos,                   \
        const double *inv_freq, int64_t n_freq, double scale,                 \
        double *cos_out, double *sin_out
typedef void (*rope_table_f64_fn)(ROPE_TABLE_F64_PARAMS);

/* The yardstick's pass over bytes p[0..n): XOR with mask (repeated,
 * little-endian, byte i takes mask byte i mod 4). */
typedef void (*rope_pass_fn)(unsigned char *p, int64_t n, uint32_t mask);

/* The kernels of one instruction set. */
typedef struct {
    rope_rot_fn rot[ROPE_N_DTYPES][2];  /* [dtype][layout] */
    rope_table_f32_fn table_f32;
    rope_table_f64_fn table_f64;
    rope_pass_fn pass;
} rope_kernels;

/* One entry of the instruction-set registry (dispatch.c). Its kernel table
 * starts as a copy of the scalar one; override replaces what the set does
 * better, so an instruction set can land one kernel at a time. */
typedef struct {
    const char *name;
    int (*supported)(void);              /* CPU and OS can run it */
    void (*override)(rope_kernels *k);   /* NULL: nothing to replace */
} rope_isa;

/* Kernels of the instruction set chosen now (dispatch.c). */
const rope_kernels *rope_active_kernels(void);
/* Kernel table of registry entry isa (NULL if out of range), whether or not
 * this CPU can run it: for tests that compare every entry with the scalar
 * one (check rope_isa_supported before calling its kernels). */
const rope_kernels *rope_isa_kernels(int isa);

/* Scalar kernels: the specification (rotate.c, table.c), one rotation
 * kernel per (layout, storage type): rope_rot_{il,sh}_<suffix>_scalar. */
#define ROPE_DECLARE_SCALAR_ROT_(code, sfx, T, A, name)                         \
    void rope_rot_il_##sfx##_scalar(ROPE_ROT_PARAMS);                          \
    void rope_rot_sh_##sfx##_scalar(ROPE_ROT_PARAMS);
ROPE_STORAGE_TYPES(ROPE_DECLARE_SCALAR_ROT_)
void rope_table_f32_scalar(ROPE_TABLE_PARAMS);
void rope_table_f64_scalar(ROPE_TABLE_F64_PARAMS);

/* Is the arithmetic type of storage type dtype double (its rows are double)? */
#define ROPE_WIDE_(code, sfx, T, A, name) [code] = sizeof(A) == sizeof(double),
static const int ROPE_WIDE_ROWS[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(ROPE_WIDE_)};
#undef ROPE_WIDE_

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

/* Do byte ranges [alo, ahi) and [blo, bhi) share a byte? (Empty ones never do.) */
static inline int rope_ranges_meet(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi)
{
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

/* Bytes per element of each storage type, from the list. */
#define ROPE_ELEM_SIZE_(code, sfx, T, A, name) [code] = (int64_t)sizeof(T),
static const int64_t ROPE_ELEM_SIZE[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(ROPE_ELEM_SIZE_)};

/* Threads (threads.c). rope_parallel_for runs fn(ctx, begin, end) over
 * n_items, whose memory traffic (bytes read + written) is `bytes`, on the
 * calling thread plus up to n_threads - 1 pool workers, as many as the size
 * rule gives it (threads.c): small calls, and calls that would have to wake
 * a sleeping worker for less than it saves, run on the calling thread. The
 * items are cut into fixed contiguous chunks (several per thread) that
 * threads claim one at a time, so a worker the OS is slow to schedule only
 * means the others take more chunks; which thread runs a chunk never changes
 * what it computes. It falls back to the calling thread alone when the pool
 * is busy (another call is using it) or cannot start threads. */
typedef void (*rope_task_fn)(void *ctx, int64_t begin, int64_t end);
void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int64_t bytes, int n_threads);

/* Timing and tests only: the size rule's traffic per thread (0: every call
 * of two or more items splits), the work left after a call's first part
 * worth waking the pool for, in ns (0: wake it as every call starts), each
 * negative for the default, and whether splits that did not pay stop
 * splitting for a while (the default: yes). */
void rope_threads_set_rule(int64_t hot_bytes, int64_t wake_ns, int feedback);
/* Timing only: counts since the start (threads.c). */
enum {
    ROPE_STAT_CALLS,        /* calls the size rule would split */
    ROPE_STAT_SPLIT,        /* calls split */
    ROPE_STAT_WAKES,        /* wake-ups of sleeping workers */
    ROPE_STAT_WORKER_PARTS, /* parts run by workers */
    ROPE_STAT_LOSSES,       /* splits that cost more than they saved */
    ROPE_STAT_BACKED_OFF,   /* calls run alone after such a loss */
    ROPE_THREAD_STATS
};
void rope_threads_stats(int64_t out[ROPE_THREAD_STATS]);

#endif
