/* pyrope: rotary position embedding on the CPU -- the whole C API.
 *
 * The data plane: cos/sin tables and rotation of query/key vectors in place.
 * Every function checks its arguments and returns a status (ROPE_OK or a
 * ROPE_E_* code, see rope_strerror); none allocates, prints or aborts, and
 * none writes outside the buffers it was given. Counts, strides and positions
 * are int64_t; strides are in elements, not bytes.
 *
 * This header is also the cffi cdef: the builder runs it through the C
 * preprocessor with ROPE_CDEF defined (no system headers, macros expanded)
 * and keeps its numeric #define constants, so keep declarations plain C.
 *
 * It stands alone (C11 or C++, no other pyrope header) and is installed with
 * the Python package: pyrope.get_include() is its directory, and the shared
 * library libpyrope (pyrope.get_library_path()) exports these functions and
 * nothing else: each public declaration carries ROPE_API.
 */
#ifndef PYROPE_H
#define PYROPE_H

#ifndef ROPE_CDEF
#include <stddef.h>
#include <stdint.h>
#endif

/* Marks the library's exports: libpyrope is compiled with
 * -fvisibility=hidden, so only declarations carrying it are visible. Empty
 * where it means nothing (the cffi cdef, compilers without the attribute). */
#if defined(ROPE_CDEF) || !defined(__GNUC__)
#define ROPE_API
#else
#define ROPE_API __attribute__((visibility("default")))
#endif

#if defined(__cplusplus) && !defined(ROPE_CDEF)
extern "C" {
#endif

/* ---- version ------------------------------------------------------------- */

/* The version of this header, the same as the Python package's
 * (pyrope.__version__), and the C ABI's number, ROPE_ABI_VERSION, which is
 * the one in the library's soname (libpyrope.so.<ROPE_ABI_VERSION>). The ABI
 * number changes when, and only when, a change breaks programs built against
 * an earlier header: a declaration removed or changed, a struct's layout, a
 * constant's value or meaning. A change that only adds (functions, status
 * codes, constants, storage types appended to the list) raises the version
 * and keeps the ABI number. So a program runs with any library of its ABI
 * number whose rope_version() is at least the ROPE_VERSION it was built with. */
#define ROPE_VERSION_MAJOR 0
#define ROPE_VERSION_MINOR 3
#define ROPE_VERSION_PATCH 0
#define ROPE_ABI_VERSION 1
#define ROPE_VERSION (ROPE_VERSION_MAJOR * 10000 + ROPE_VERSION_MINOR * 100 + ROPE_VERSION_PATCH)

/* The library's ROPE_VERSION (major * 10000 + minor * 100 + patch), which may
 * be newer than the header a program was built with. */
ROPE_API int rope_version(void);
/* The library's ROPE_ABI_VERSION (the same for every library a program can
 * load by its soname; worth checking after dlopen). */
ROPE_API int rope_abi_version(void);

/* ---- limits: the Python package reads these, never retypes them ---------- */

/* Largest |position|: angles are exact for every int64 up to it. */
#define ROPE_MAX_POSITION 2147483647
/* Largest |inv_freq| a table or rotation accepts (keeps |m*w| < 2^33, the
 * range of the exact reduction). */
#define ROPE_MAX_INV_FREQ 4.0
/* Range of |scale| (the attention factor): far outside any model's factor
 * (about 1), and such that scale * cos stays finite and non-zero in float32. */
#define ROPE_MIN_SCALE 0x1p-32
#define ROPE_MAX_SCALE 0x1p32
/* Largest rotary_dim/2 the on-the-fly path (no tables) accepts. */
#define ROPE_MAX_OTF_HALF 512
/* Most threads one call uses. */
#define ROPE_MAX_THREADS 64
/* Most position components of a sectioned position source. */
#define ROPE_MAX_COMPONENTS 4
/* Largest head_dim of a staged call that normalises or converts (its head
 * passes through a scratch row of this many elements). */
#define ROPE_MAX_STAGE_DIM 4096

/* ---- status codes -------------------------------------------------------- */

enum {
    ROPE_OK = 0,
    ROPE_E_NULL = 1,       /* a required pointer is NULL */
    ROPE_E_DIM = 2,        /* head_dim/rotary_dim not positive, even, ordered */
    ROPE_E_LAYOUT = 3,     /* layout is not ROPE_INTERLEAVED or ROPE_SPLIT_HALF */
    ROPE_E_DTYPE = 4,      /* storage type code unknown */
    ROPE_E_COUNT = 5,      /* a count is negative or out of range */
    ROPE_E_POSITION = 6,   /* a position lies outside the table or range */
    ROPE_E_OVERFLOW = 7,   /* a size or index computation would overflow */
    ROPE_E_ISA = 8,        /* the requested instruction set is not usable */
    ROPE_E_VALUE = 9,      /* a frequency or scale is not finite or out of range */
    ROPE_E_OVERLAP = 10,   /* out shares x's first element but not its strides, or an
                            * output meets memory the call reads while it writes */
    ROPE_E_ALIGN = 11,     /* a pointer is not aligned to its element type */
    ROPE_E_SOURCE = 12,    /* the position source or its component map is invalid */
    ROPE_E_SLOT = 13,      /* a cache slot lies outside the cache (and is not -1) */
    ROPE_E_STAGE = 14      /* a stage or quant is invalid: its kind, norm, eps, type conversion,
                            * or in_place without slots, with a norm or a copy */
};

/* A static message for a status code (never NULL). */
ROPE_API const char *rope_strerror(int status);

/* ---- pair layouts -------------------------------------------------------- */

enum {
    ROPE_INTERLEAVED = 0,  /* pairs (0,1), (2,3), ...          GPT-J, Meta */
    ROPE_SPLIT_HALF = 1    /* pairs (i, i + rotary_dim/2)      HF, GPT-NeoX */
};

/* ---- storage types ------------------------------------------------------- */

/* The one list of storage types the rotation kernels read and write:
 * X(code, suffix, storage C type, arithmetic C type, name). float16 and
 * bfloat16 are held as their bits (uint16_t) and computed in float32;
 * float64 is computed in float64. Codes are the list order. */
#define ROPE_STORAGE_TYPES(X)                                  \
    X(ROPE_F32, f32, float, float, "float32")                  \
    X(ROPE_F16, f16, uint16_t, float, "float16")               \
    X(ROPE_BF16, bf16, uint16_t, float, "bfloat16")            \
    X(ROPE_F64, f64, double, double, "float64")

#define ROPE_DTYPE_CODE_(code, sfx, T, A, name) code,
enum { ROPE_STORAGE_TYPES(ROPE_DTYPE_CODE_) ROPE_N_DTYPES };

/* Number of storage types, and each one's name ("float32", ...) and size in
 * bytes (NULL and 0 for a code out of range). */
ROPE_API int rope_dtype_count(void);
ROPE_API const char *rope_dtype_name(int dtype);
ROPE_API int rope_dtype_size(int dtype);

/* ---- instruction sets ---------------------------------------------------- */

/* Instruction sets are numbered by their place in the registry (dispatch.c),
 * in priority order: 0 is the scalar specification, always supported. */
ROPE_API int rope_isa_count(void);
/* Name of instruction set isa ("scalar", "avx2", ...), NULL if out of range. */
ROPE_API const char *rope_isa_name(int isa);
/* 1 if the CPU and OS can run the instruction set, else 0. */
ROPE_API int rope_isa_supported(int isa);
/* The instruction set that rope_* functions use now. */
ROPE_API int rope_get_isa(void);
/* Use this instruction set from now on (ROPE_E_ISA if not supported).
 * The choice is published atomically; calls already running finish on the
 * kernels they started with. */
ROPE_API int rope_set_isa(int isa);

/* ---- tables -------------------------------------------------------------- */

/* cos/sin tables, float32, row-major [n_pos, n_freq]:
 *   cos[p][i] = scale * cos(positions[p] * inv_freq[i]), sin likewise,
 * with the product positions[p] * inv_freq[i] taken exactly, and the result
 * correctly rounded to float32 at any |position| <= ROPE_MAX_POSITION
 * (docs/ACCURACY.md); |inv_freq[i]| <= ROPE_MAX_INV_FREQ and
 * ROPE_MIN_SCALE <= |scale| <= ROPE_MAX_SCALE. cos_out and sin_out share no
 * byte with each other, positions or inv_freq (else ROPE_E_OVERLAP, nothing
 * written). */
ROPE_API int rope_cos_sin_f32(const int64_t *positions, int64_t n_pos,
                              const double *inv_freq, int64_t n_freq, double scale,
                              float *cos_out, float *sin_out);

/* The same for the dense range start, start+1, ..., start+n_pos-1. */
ROPE_API int rope_cos_sin_range_f32(int64_t start, int64_t n_pos,
                                    const double *inv_freq, int64_t n_freq, double scale,
                                    float *cos_out, float *sin_out);

/* float64 tables [n_pos, n_freq] for float64 data: the same exact angles,
 * each entry within about 1.5 ulp of float64 (scalar code); the same rules
 * for the arguments and their overlaps. */
ROPE_API int rope_cos_sin_f64(const int64_t *positions, int64_t n_pos,
                              const double *inv_freq, int64_t n_freq, double scale,
                              double *cos_out, double *sin_out);

/* ---- rotation ------------------------------------------------------------ */

/* What one call computes, shared by all its tensors. Tokens are
 * [n_batch][n_seq]; each head holds head_dim elements of storage type dtype,
 * of which the first rotary_dim rotate in pairs of the given layout.
 * inverse != 0 rotates by minus the angle. n_threads is the most threads to
 * use (<= 1: the calling thread only); a call gets at most one thread per
 * 512 KiB of traffic (bytes read + written), and sleeping pool threads are
 * woken only for large calls or runs of back-to-back calls
 * (docs/ARCHITECTURE.md, "Threads"), so small and isolated calls stay on the
 * calling thread; results never depend on the thread count. */
typedef struct {
    int dtype;
    int layout;
    int inverse;
    int64_t n_batch;
    int64_t n_seq;
    int64_t head_dim;
    int64_t rotary_dim;
    int n_threads;
} rope_op;

/* One array to rotate: x into out, both addressed as
 * [n_batch][n_seq][n_heads][head_dim] with element strides for batch,
 * sequence and head ({batch, seq, head}); the last axis is contiguous.
 * out either is x (same pointer and strides: in place) or overlaps neither
 * x nor any other tensor of the call -- the caller checks the latter.
 * Coordinates past rotary_dim are copied from x when out != x and never
 * touched otherwise. A tensor with n_heads == 0 is skipped (pointers unread). */
typedef struct {
    const void *x;
    void *out;
    int64_t n_heads;
    int64_t x_strides[3];
    int64_t out_strides[3];
} rope_tensor;

/* Where token (b, s) takes its position from. */
enum {
    ROPE_POS_OFFSET = 0,   /* offset + s */
    ROPE_POS_LIST = 1,     /* positions[b*strides[0] + s*strides[1]] */
    ROPE_POS_SECTIONS = 2  /* n_components positions per token, component c at
                            * positions[b*strides[0] + s*strides[1] + c*strides[2]];
                            * rotation pair i turns by component pair_component[i]
                            * (multimodal RoPE); rotary_dim/2 <= ROPE_MAX_OTF_HALF
                            * with tables too (the row is gathered per token) */
};

/* The angles of a call: which position each token (and pair) uses, and
 * where cos/sin of position * inv_freq come from:
 *   - a table: cos_table/sin_table rows of rotary_dim/2 entries of the call's
 *     arithmetic type: float rows (made by rope_cos_sin_*_f32) for float32,
 *     float16 and bfloat16 data, double rows (made by rope_cos_sin_f64) for
 *     float64 data; position p uses row p - table_start, and every
 *     position must satisfy table_start <= p < table_start + table_rows;
 *   - on the fly (cos_table == sin_table == NULL): from inv_freq[rotary_dim/2]
 *     and scale, exactly as rope_cos_sin_f32 (float64 data: rope_cos_sin_f64)
 *     would build the row (requires rotary_dim/2 <= ROPE_MAX_OTF_HALF and
 *     |p| <= ROPE_MAX_POSITION).
 * Every position is checked before anything is written (ROPE_E_POSITION). */
typedef struct {
    int source;                     /* ROPE_POS_* */
    int64_t offset;                 /* ROPE_POS_OFFSET */
    const int64_t *positions;       /* ROPE_POS_LIST, ROPE_POS_SECTIONS */
    int64_t strides[3];             /* {batch, seq, component} in elements */
    int n_components;               /* ROPE_POS_SECTIONS: 1..ROPE_MAX_COMPONENTS */
    const uint8_t *pair_component;  /* ROPE_POS_SECTIONS: [rotary_dim/2] */
    const void *cos_table;          /* rows of the arithmetic type (above) */
    const void *sin_table;
    int64_t table_start;
    int64_t table_rows;
    const double *inv_freq;
    double scale;
} rope_angles;

/* Rotate n_tensors tensors (e.g. q and k) at the same positions in one pass:
 * each token's cos/sin row is made or read once and applied to the heads of
 * every tensor.
 *
 * Aliasing. op, *angles and the pair_component map are read once, before
 * anything is written, so they may lie anywhere. What the call reads while
 * it writes -- the positions, the table rows (or inv_freq) and the tensors
 * array -- must share no byte with the span of any out (from its lowest to
 * its highest element, gaps included): else ROPE_E_OVERLAP, nothing
 * written. Each position is read again where it is used, into a local that
 * is checked before it indexes a row: one that another thread changed
 * during the call is never used; its token is left as it was and the call
 * returns ROPE_E_POSITION. */
ROPE_API int rope_rotate(const rope_op *op, const rope_tensor *tensors, int n_tensors,
                         const rope_angles *angles);

/* rope_rotate of one or two tensors whose data pointers come as addresses
 * (a binding's integers, such as torch's data_ptr(), which it would
 * otherwise wrap as pointers call by call): tensors[0].x and .out are set
 * to x0 and out0, tensors[1]'s (n_tensors == 2) to x1 and out1, then
 * rope_rotate runs with every check. n_tensors 1 or 2, else ROPE_E_COUNT. */
ROPE_API int rope_rotate_at(const rope_op *op, rope_tensor *tensors, int n_tensors, const rope_angles *angles,
                            uintptr_t x0, uintptr_t out0, uintptr_t x1, uintptr_t out1);

/* ---- staged calls: a norm before the rotation, a cache slot after it ------ */

/* What happens to one tensor of rope_rotate_staged around its rotation. */
enum {
    ROPE_NORM_NONE = 0,    /* no norm */
    ROPE_NORM_HEAD = 1,    /* RMSNorm of each head (head_dim elements) */
    ROPE_NORM_TOKEN = 2    /* RMSNorm across all heads of a token (n_heads * head_dim) */
};

/* One tensor's stage. A stage of zeros (C's {0}) is rope_rotate's plain
 * rotation of x into out: every field below opts into something more.
 *   - copy: 0 rotates (after the norm, if any); 1 copies x to out instead
 *     (values in a cache write: never normalised nor rotated; converted if
 *     convert says so).
 *   - norm, norm_weight, norm_eps (not with copy): y = x * (inv * w) with
 *     inv = 1 / sqrt(mean(x^2) + eps) over the norm's group, computed in
 *     double (the sum of squares over 8 lanes in a fixed order: the scalar
 *     kernels in scalar/stage.c are the specification), rounded once to the
 *     arithmetic type, then rotated as rope_rotate rotates; every coordinate
 *     is normalised, the rotary ones are rotated too. norm_weight: NULL (w =
 *     1), [head_dim] doubles (ROPE_NORM_HEAD, shared by every head) or
 *     [n_heads * head_dim] (ROPE_NORM_TOKEN); eps finite and > 0.
 *   - convert, out_dtype: convert 0 stores the op's storage type (out_dtype
 *     is not read); 1 stores out_dtype, written from the arithmetic value,
 *     rounded once: float32, float16 and bfloat16 data go to any storage
 *     type, float64 data to float64 or float32 (else ROPE_E_STAGE). out's
 *     strides count elements of the type stored.
 *   - slots: NULL, out is addressed as in rope_tensor. Else out is a cache
 *     of n_slots slots in blocks of block_size: token (b, s) goes to slot
 *     k = slots[b*slot_strides[0] + s*slot_strides[1]], head h at
 *     out + (k / block_size)*out_strides[0] + (k % block_size)*out_strides[1]
 *     + h*out_strides[2] (out_strides are {block, slot in the block, head}
 *     here: a [blocks, block_size, heads, dim] cache or a [blocks, heads,
 *     block_size, dim] one, by the strides; the cache spans ceil(n_slots /
 *     block_size) blocks, n_slots need not fill the last); k == -1 skips
 *     the token; every other k must satisfy 0 <= k < n_slots, checked before
 *     anything is written (ROPE_E_SLOT). out is never x. Two tokens with one
 *     slot leave either's values there (the caller refuses them).
 * A stage with norm or another out type needs head_dim <= ROPE_MAX_STAGE_DIM. */
typedef struct {
    int copy;
    int norm;
    const double *norm_weight;
    double norm_eps;
    int convert;
    int out_dtype;
    const int64_t *slots;
    int64_t slot_strides[2];
    int64_t n_slots;
    int64_t block_size;
} rope_stage;

/* rope_rotate with a stage per tensor (stages == NULL: rope_rotate itself):
 * e.g. q normalised and rotated in place, k normalised, rotated and written
 * to its cache slots, v copied to its slots, in one pass over the tokens.
 * The same checks and aliasing rules as rope_rotate; besides, what the
 * call reads while it writes (the stages, their weights and slots) must
 * share no byte with the span of any out, a slotted out's span being its
 * whole cache. Each slot is read again where it is used, into a local that
 * is checked; one changed during the call leaves its token unwritten and
 * the call returns ROPE_E_SLOT. */
ROPE_API int rope_rotate_staged(const rope_op *op, const rope_tensor *tensors, const rope_stage *stages,
                                int n_tensors, const rope_angles *angles);

/* ---- quantised caches: rotate, then quantise, in one pass ---------------- */

/* How a staged tensor's out is quantised (rope_quant.kind). Each rounds the
 * float32 value v the stage computed (normalised, rotated) once:
 *   - INT8: per head, s = amax / 127 in float32 (amax = max |v| over the
 *     head's head_dim values), q = v / s rounded to nearest even, clipped to
 *     +-127; amax == 0 gives s = 0 and q = 0 (an amax below 127 * 2^-149
 *     also rounds s to 0: its values store +-127 or 0 and dequantise to 0).
 *     s goes to scales.
 *   - FP8_E4M3: q = v / scale (float32), clamped to +-448, rounded to
 *     nearest even, stored as float8 e4m3fn bits (vLLM's convention).
 *   - Q8_0: per 32 values, ggml's block_q8_0 (quantize_row_q8_0_ref):
 *     d = amax / 127, id = d ? 1 / d : 0, qs = roundf(v * id) (ties away
 *     from zero), d stored as float16 (ties to even). head_dim % 32 == 0.
 * Non-finite values (where the formulas convert NaN or infinity to an
 * integer) are defined here: a NaN value stores q = 0 (float8: a NaN); an
 * amax that is NaN or infinite is the scale (int8: s, q8_0: d), so the head
 * or block dequantises to NaN, never to a finite guess. */
enum {
    ROPE_QUANT_NONE = 0,
    ROPE_QUANT_INT8 = 1,
    ROPE_QUANT_FP8_E4M3 = 2,
    ROPE_QUANT_Q8_0 = 3
};

/* Values per q8_0 block, and its bytes: float16 d, then 32 int8 qs. */
#define ROPE_Q8_0_VALUES 32
#define ROPE_Q8_0_BYTES 34
/* Largest magnitude float8 e4m3fn holds (the clamp of FP8_E4M3). */
#define ROPE_FP8_E4M3_MAX 448.0

/* One tensor's quantisation in rope_rotate_quantised. A quant of zeros is
 * no quantisation: the tensor is staged as rope_rotate_staged stages it.
 *   - kind (ROPE_QUANT_*): out holds int8 values, float8 e4m3fn bytes or
 *     q8_0 blocks instead of the op's storage type; out's strides count
 *     those elements (bytes; for q8_0, blocks of ROPE_Q8_0_BYTES: a head
 *     is head_dim / 32 blocks back to back). The op's dtype must be
 *     float32, float16 or bfloat16 (the value is computed in float32), the
 *     stage's convert 0; else ROPE_E_STAGE.
 *   - scale: FP8_E4M3's static scale, finite and > 0 (else ROPE_E_VALUE).
 *   - scales, scale_strides: INT8's float32 scale of every head written,
 *     scales[a*scale_strides[0] + b*scale_strides[1] + h*scale_strides[2]]
 *     for the head h that out addresses by (a, b): {batch, seq} without
 *     slots, {block, slot in the block} with them. Written like out (and
 *     read back when in_place); they share no byte with any out, nor with
 *     what the call reads while it writes (positions, rows, weights,
 *     slots; else ROPE_E_OVERLAP); like an out, they must keep apart from
 *     every x, which the caller checks (Rope.cache_write does).
 *   - in_place (needs slots; no norm, no copy): x is not read. Each
 *     token's head is read from its slot (dequantised: int8 q * s, float8
 *     e4m3 value * scale, q8_0 qs * d, in float32; kind NONE: the cache's
 *     own values), rotated at the token's position and stored back to the
 *     same slot: keys moved to new positions (rotate by the difference).
 *     A slot listed twice is read and written by both tokens, one after the
 *     other or, split over threads, at once: the caller refuses them, as
 *     Rope.shift_keys does (the call stays within the cache either way). */
typedef struct {
    int kind;
    int in_place;
    float scale;
    float *scales;
    int64_t scale_strides[3];
} rope_quant;

/* rope_rotate_staged with a quantisation per tensor (quants == NULL:
 * rope_rotate_staged itself): e.g. k rotated and written as int8 to its
 * cache slots with a scale per head, v copied as int8, in one pass. Every
 * check of rope_rotate_staged, every quant's before anything is written. */
ROPE_API int rope_rotate_quantised(const rope_op *op, const rope_tensor *tensors, const rope_stage *stages,
                                   const rope_quant *quants, int n_tensors, const rope_angles *angles);

/* ---- the bandwidth yardstick ------------------------------------------- */

/* XOR every byte of data[0..n_bytes) in place with xor_mask (repeated,
 * little-endian; 0 leaves the bytes unchanged), reading and writing each byte
 * once with the widest vectors of the active instruction set, split over up
 * to n_threads threads by the same size rule as rope_rotate. */
ROPE_API int rope_bandwidth_pass(void *data, int64_t n_bytes, uint32_t xor_mask, int n_threads);

#if defined(__cplusplus) && !defined(ROPE_CDEF)
}
#endif

#endif
