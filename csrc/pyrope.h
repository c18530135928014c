/* pyrope: rotary position embedding on the CPU -- the whole C API.
 *
 * The data plane: cos/sin tables and rotation of query/key vectors in place.
 * Every function checks its arguments and returns a status (ROPE_OK or a
 * ROPE_E_* code, see rope_strerror); none allocates, prints or aborts, and
 * none writes outside the buffers it was given. Counts, strides and positions
 * are int64_t; strides are in elements, not bytes.
 *
 * This header is also the cffi cdef: lines starting with '#' are dropped
 * before it is handed to cffi, so keep declarations plain C.
 */
#ifndef PYROPE_H
#define PYROPE_H

#include <stddef.h>
#include <stdint.h>

/* Status codes. */
enum {
    ROPE_OK = 0,
    ROPE_E_NULL = 1,       /* a required pointer is NULL */
    ROPE_E_DIM = 2,        /* head_dim/rotary_dim not positive, even, ordered */
    ROPE_E_LAYOUT = 3,     /* layout is not ROPE_INTERLEAVED or ROPE_SPLIT_HALF */
    ROPE_E_DTYPE = 4,      /* dtype code unknown or not supported here */
    ROPE_E_COUNT = 5,      /* a count is negative */
    ROPE_E_POSITION = 6,   /* a position lies outside the table or range */
    ROPE_E_OVERFLOW = 7,   /* a size or index computation would overflow */
    ROPE_E_ISA = 8,        /* the requested instruction set is not usable */
    ROPE_E_VALUE = 9,      /* a numeric argument is not finite or too large */
    ROPE_E_OVERLAP = 10,   /* out shares x's first element but not its strides */
    ROPE_E_ALIGN = 11      /* a pointer is not aligned to its element type */
};

/* Pair layouts. */
enum {
    ROPE_INTERLEAVED = 0,  /* pairs (0,1), (2,3), ...          GPT-J, Meta */
    ROPE_SPLIT_HALF = 1    /* pairs (i, i + rotary_dim/2)      HF, GPT-NeoX */
};

/* Storage types of the rotated data. */
enum {
    ROPE_F32 = 0,
    ROPE_F16 = 1,
    ROPE_BF16 = 2,
    ROPE_F64 = 3
};

/* Largest rotary_dim/2 the on-the-fly path (no tables) accepts. */
#define ROPE_MAX_OTF_HALF 512

/* Instruction sets, in priority order. */
enum {
    ROPE_ISA_SCALAR = 0,
    ROPE_ISA_AVX2 = 1      /* AVX2 + FMA + F16C, with OS support for YMM state */
};

/* Largest |position| accepted: angles are exact for every int64 below it. */
#define ROPE_MAX_POSITION 2147483647

/* A static message for a status code (never NULL). */
const char *rope_strerror(int status);

/* 1 if the CPU and OS can run the instruction set, else 0. */
int rope_isa_supported(int isa);

/* The instruction set that rope_* functions use now. */
int rope_get_isa(void);

/* Use this instruction set from now on (ROPE_E_ISA if not supported).
 * The choice is published atomically; calls already running finish on the
 * kernel they started with. */
int rope_set_isa(int isa);

/* cos/sin tables, float32, row-major [n_pos, n_freq]:
 *   cos[p][i] = scale * cos(positions[p] * inv_freq[i]), sin likewise,
 * with the product positions[p] * inv_freq[i] taken exactly, and the result
 * correctly rounded to float32 at any |position| <= ROPE_MAX_POSITION
 * (docs/ACCURACY.md); |inv_freq[i]| <= 4 and scale finite. */
int rope_cos_sin_f32(const int64_t *positions, int64_t n_pos,
                     const double *inv_freq, int64_t n_freq, double scale,
                     float *cos_out, float *sin_out);

/* The same for the dense range start, start+1, ..., start+n_pos-1. */
int rope_cos_sin_range_f32(int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out);

/* float64 tables [n_pos, n_freq] for float64 data: the same exact angles,
 * each entry within about 1.5 ulp of float64 (scalar code). */
int rope_cos_sin_f64(const int64_t *positions, int64_t n_pos,
                     const double *inv_freq, int64_t n_freq, double scale,
                     double *cos_out, double *sin_out);

/* Rotate x into out (out == x rotates in place).
 *
 * x is addressed as [n_batch][n_seq][n_heads][head_dim] with element strides
 * (x_sb, x_ss, x_sh) for batch, sequence and head; the last axis is
 * contiguous. out likewise with (o_sb, o_ss, o_sh). Token (b, s) sits at
 *   pos = positions[b*p_sb + s*p_ss]   if positions != NULL,
 *   pos = offset + s                   otherwise.
 * Angles come from one of two sources:
 *   - tables: cos_table/sin_table rows of rotary_dim/2 floats; token pos uses
 *     row (pos - table_start), and every pos must satisfy
 *     table_start <= pos < table_start + table_rows;
 *   - on the fly (cos_table == sin_table == NULL): from inv_freq[rotary_dim/2]
 *     and scale, exactly as rope_cos_sin_f32 would build the row (requires
 *     rotary_dim/2 <= ROPE_MAX_OTF_HALF and |pos| <= ROPE_MAX_POSITION).
 * Every position is checked before anything is written (ROPE_E_POSITION).
 * Coordinates past rotary_dim are copied from x when out != x and never
 * touched otherwise. inverse != 0 rotates by minus the angle. out must
 * either be x (same pointer and strides: in place) or not overlap it at all;
 * the caller checks the latter. dtype is the storage type of x and out
 * (ROPE_F32/F16/BF16: float32 arithmetic, rounded to nearest even on store;
 * ROPE_F64: float64 arithmetic); strides count elements of that type.
 * n_threads is the most threads to use (<= 1: the calling thread only); a
 * call gets one thread per MiB of traffic (bytes read + written), so small
 * calls stay on the calling thread, and results never depend on the thread
 * count. */
int rope_rotate(int dtype, int layout, int inverse,
                const void *x, void *out,
                int64_t n_batch, int64_t n_seq, int64_t n_heads,
                int64_t head_dim, int64_t rotary_dim,
                int64_t x_sb, int64_t x_ss, int64_t x_sh,
                int64_t o_sb, int64_t o_ss, int64_t o_sh,
                const int64_t *positions, int64_t p_sb, int64_t p_ss,
                int64_t offset,
                const float *cos_table, const float *sin_table,
                int64_t table_start, int64_t table_rows,
                const double *inv_freq, double scale,
                int n_threads);

/* Rotate queries and keys at the same positions in one pass: for each token
 * the table row (or on-the-fly row) is read once and applied to the q heads,
 * then to the k heads. q and k share n_batch and n_seq (and the positions)
 * and may differ in head count and strides; each pair (q, q_out), (k, k_out)
 * follows the rules of rope_rotate, and q's arrays must not overlap k's. */
int rope_rotate_qk(int dtype, int layout, int inverse,
                   const void *q, void *q_out, int64_t q_heads,
                   int64_t q_sb, int64_t q_ss, int64_t q_sh,
                   int64_t qo_sb, int64_t qo_ss, int64_t qo_sh,
                   const void *k, void *k_out, int64_t k_heads,
                   int64_t k_sb, int64_t k_ss, int64_t k_sh,
                   int64_t ko_sb, int64_t ko_ss, int64_t ko_sh,
                   int64_t n_batch, int64_t n_seq, int64_t head_dim, int64_t rotary_dim,
                   const int64_t *positions, int64_t p_sb, int64_t p_ss,
                   int64_t offset,
                   const float *cos_table, const float *sin_table,
                   int64_t table_start, int64_t table_rows,
                   const double *inv_freq, double scale,
                   int n_threads);

/* The bandwidth yardstick: XOR every byte of data[0..n_bytes) in place with
 * xor_mask (repeated, little-endian; 0 leaves the bytes unchanged), reading
 * and writing each byte once with the widest vectors available, split over
 * up to n_threads threads by the same size rule as rope_rotate. */
int rope_bandwidth_pass(void *data, int64_t n_bytes, uint32_t xor_mask, int n_threads);

#endif
