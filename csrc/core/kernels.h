/* Internal: the kernel ABI, what the scalar specification, every instruction
 * set and the dispatcher share: the kernel signatures, the kernel table of
 * one instruction set, its registry entry, and what each storage type's
 * kernels store and read (element size, row type). Not part of the public
 * API. The shared argument checks are in checks.h, the thread pool's
 * interface in threads.h. */
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

/* For the rotation kernels of every instruction set: prefetch (for reading,
 * into every cache level) the line holding the element `ahead` elements past
 * p, the same lanes some heads on; past the token's last head that is the next
 * token's or bytes nobody reads. A prefetch never faults, and the address is
 * formed as an integer: no pointer past the array is made. Measured (forced
 * AVX2, Intel Xeon family 6 model 167), 4 heads ahead: the memory-resident
 * 1x2048x32x128 split-half calls went from 0.76-0.83 to 0.89-0.97 of the
 * yardstick (float16, float32), in-cache calls within 3-4%. */
#define ROPE_PREFETCH(p, ahead)                                                \
    __builtin_prefetch((const void *)((uintptr_t)(p) +                         \
                                      (uintptr_t)((ahead) * (int64_t)sizeof *(p))), 0, 3)

/* How far on the AVX2 kernels (and the AVX-512 bfloat16 ones) prefetch, in elements: the heads within
 * ROPE_PREFETCH_BYTES of the current one (at least one head), x_sh
 * elements of esize bytes apart. A fixed count of heads was too short for
 * the 16-bit types: 4 heads of 128 are 1 KiB of float16, read in about 30
 * ns, less than a memory access takes. Measured (forced AVX2, Intel Xeon
 * family 6 model 167, prefill q 1x8192x32x128 split half / interleaved, 2
 * threads, fraction of the yardstick): float16 0.51-0.62 / 0.51-0.56 at 4
 * heads, 0.72-0.83 / 0.75-0.76 at 16 (4 KiB), 0.61 / 0.72 at 32; bfloat16
 * 0.41 / 0.45 at 4, 0.47 / 0.56 at 16; float32 0.90-1.10 at 4 to 16
 * heads alike. */
#define ROPE_PREFETCH_BYTES 4096
/* heads * x_sh, the offset of the same lanes `heads` heads on; 0 (the
 * current line) where the stride is beyond what any array spans, so that
 * neither this product nor ROPE_PREFETCH's, in bytes, can overflow (a call
 * with one head may give any stride: it is never used to address). */
static inline int64_t rope_prefetch_heads(int64_t x_sh, int64_t heads)
{
    const uint64_t mag = x_sh < 0 ? 0 - (uint64_t)x_sh : (uint64_t)x_sh;
    return heads <= 0 || mag > (uint64_t)INT64_MAX / 8 / (uint64_t)heads ? 0 : heads * x_sh;
}
static inline int64_t rope_prefetch_ahead(int64_t x_sh, int64_t esize)
{
    const uint64_t mag = x_sh < 0 ? 0 - (uint64_t)x_sh : (uint64_t)x_sh;
    /* a head's bytes, capped before the product could overflow */
    const uint64_t head = mag < ROPE_PREFETCH_BYTES ? mag * (uint64_t)esize : ROPE_PREFETCH_BYTES;
    return rope_prefetch_heads(x_sh, head == 0 || head >= ROPE_PREFETCH_BYTES ? 1 : (int64_t)(ROPE_PREFETCH_BYTES / head));
}

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

/* The stages of rope_rotate_staged (scalar/stage.c is their specification).
 * sumsq: acc[i mod 8] += x[i]^2 for i in 0..n-1, in increasing i, x widened
 * to double, the square rounded to double before the add (no fusion).
 * normalise: out[i] = (A)(x[i] * (inv * w[i])) in double, rounded once to
 * the arithmetic type A (w NULL: w[i] = 1). widen: out[i] = x[i] in A,
 * exactly. narrow: out[i] = in[i] rounded once to the storage type; in is
 * float (narrow_float) or double (narrow_double, to float32 and float64). */
typedef void (*rope_sumsq_fn)(const void *x, int64_t n, double acc[8]);
typedef void (*rope_normalise_fn)(const void *x, int64_t n, double inv, const double *w, void *out);
typedef void (*rope_convert_fn)(const void *in, int64_t n, void *out);
/* The norm path of one head in one pass: normalise into float, the
 * rotation of that row over the whole head (rot[ROPE_F32][layout], one
 * head, half = head_dim / 2) and narrow_float to the output's storage
 * type: the same bits as the three in turn, without the row's trips
 * through memory and two of the calls. Split half: cos/sin are the row's
 * half entries. Interleaved: head_dim entries each, every entry twice
 * (cos[2i] = cos[2i + 1] = the cosine of pair i, the same for sin), which
 * the caller builds once for all the heads of a token. x and out may be
 * the same array (same types); head_dim is a multiple of 16. NULL where an
 * instruction set has none (the caller composes the three). */
#define ROPE_NORM_ROT_PARAMS                                                   \
    const void *x, int64_t head_dim, double inv, const double *w, const float *cos, const float *sin, \
        int inverse, void *out
typedef void (*rope_norm_rot_fn)(ROPE_NORM_ROT_PARAMS);
/* The (x, out) storage-type pairs of a set of norm_rot kernels, the float
 * arithmetic types: X(x's code, x's suffix, out's code, out's suffix); and
 * the declarations of an instruction set's two kernels of one pair,
 * rope_norm_rot_{sh,il}_<in>_<out>_<isa> (split half, interleaved). */
#define ROPE_NORM_ROT_PAIRS(X)                                                 \
    X(ROPE_F32, f32, ROPE_F32, f32) X(ROPE_F32, f32, ROPE_F16, f16) X(ROPE_F32, f32, ROPE_BF16, bf16) \
    X(ROPE_F16, f16, ROPE_F32, f32) X(ROPE_F16, f16, ROPE_F16, f16) X(ROPE_F16, f16, ROPE_BF16, bf16) \
    X(ROPE_BF16, bf16, ROPE_F32, f32) X(ROPE_BF16, bf16, ROPE_F16, f16) X(ROPE_BF16, bf16, ROPE_BF16, bf16)
#define ROPE_DECLARE_NORM_ROT(in, out, isa)                                    \
    void rope_norm_rot_sh_##in##_##out##_##isa(ROPE_NORM_ROT_PARAMS);         \
    void rope_norm_rot_il_##in##_##out##_##isa(ROPE_NORM_ROT_PARAMS);
/* Its two slots of kernel table k set to them. */
#define ROPE_SET_NORM_ROT(k, cin, in, cout, out, isa)                          \
    (k)->norm_rot[cin][cout][ROPE_SPLIT_HALF] = rope_norm_rot_sh_##in##_##out##_##isa; \
    (k)->norm_rot[cin][cout][ROPE_INTERLEAVED] = rope_norm_rot_il_##in##_##out##_##isa;

/* A token's float row as the interleaved norm_rot takes it: cos[0..half)
 * and sin[0..half), every entry twice, into dup_cos[0..2 half) and
 * dup_sin (bits kept). */
typedef void (*rope_duplicate_fn)(const float *cos, const float *sin, int64_t half, float *dup_cos,
                                  float *dup_sin);

/* The quantisers of rope_rotate_quantised (scalar/quant.c is their
 * specification, pyrope.h's rope_quant their formulas), one per ROPE_QUANT_*
 * kind (index 0 unused). quantise: float32 in[0..n) (one head) into out;
 * INT8 writes the head's scale to *scale, FP8_E4M3 divides by *scale, Q8_0
 * ignores it (n a multiple of 32). dequantise: the reverse, into float32
 * out[0..n), scale as quantise took or gave it (Q8_0: unread). */
typedef void (*rope_quantise_fn)(const float *in, int64_t n, void *out, float *scale);
typedef void (*rope_dequantise_fn)(const void *in, int64_t n, float scale, float *out);
#define ROPE_N_QUANTS 4

/* The yardstick's pass over bytes p[0..n): XOR with mask (repeated,
 * little-endian, byte i takes mask byte i mod 4). */
typedef void (*rope_pass_fn)(unsigned char *p, int64_t n, uint32_t mask);

/* The kernels of one instruction set. */
typedef struct {
    rope_rot_fn rot[ROPE_N_DTYPES][2];  /* [dtype][layout] */
    rope_table_f32_fn table_f32;
    rope_table_f64_fn table_f64;
    rope_pass_fn pass;
    rope_sumsq_fn sumsq[ROPE_N_DTYPES];
    rope_normalise_fn normalise[ROPE_N_DTYPES];
    rope_convert_fn widen[ROPE_N_DTYPES];
    rope_convert_fn narrow_float[ROPE_N_DTYPES];
    rope_convert_fn narrow_double[ROPE_N_DTYPES];  /* NULL where not offered */
    rope_norm_rot_fn norm_rot[ROPE_N_DTYPES][ROPE_N_DTYPES][2]; /* [x][out][layout], float types; NULL: none */
    rope_duplicate_fn duplicate_row;
    rope_quantise_fn quantise[ROPE_N_QUANTS];
    rope_dequantise_fn dequantise[ROPE_N_QUANTS];
} rope_kernels;

/* One entry of the instruction-set registry (dispatch.c's REGISTRY, which
 * also says which entry, if any, it builds on: its base). Its kernel table
 * starts as a copy of its base's (the scalar one when it has none);
 * override replaces what the set does better, so an instruction set can
 * land one kernel at a time. supported() is only called once its base is
 * supported, and need only check what the entry adds to it. features names
 * the CPU flags the entry adds to its base's, as Linux's /proc/cpuinfo
 * spells them, space-separated: the tests derive from them which entries a
 * CPU model must offer (`make check-x86-baselines`, `make check-aarch64`). */
typedef struct {
    const char *name;
    int (*supported)(void);              /* CPU and OS can run it */
    void (*override)(rope_kernels *k);   /* NULL: nothing to replace */
    const char *features;                /* "" for none */
} rope_isa;

/* Kernels of the instruction set chosen now (dispatch.c). */
const rope_kernels *rope_active_kernels(void);
/* Kernel table of registry entry isa (NULL if out of range), whether or not
 * this CPU can run it: for tests that compare every entry with the scalar
 * one (check rope_isa_supported before calling its kernels). */
const rope_kernels *rope_isa_kernels(int isa);
/* For the tests: the registry entry entry isa builds on (-1: none, or isa
 * out of range) and the CPU flags it adds (NULL if out of range). */
int rope_isa_base(int isa);
const char *rope_isa_features(int isa);

/* Bytes per element of each storage type, from the list. */
#define ROPE_ELEM_SIZE_(code, sfx, T, A, name) [code] = (int64_t)sizeof(T),
static const int64_t ROPE_ELEM_SIZE[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(ROPE_ELEM_SIZE_)};
#undef ROPE_ELEM_SIZE_

/* Is the arithmetic type of storage type dtype double (its rows are double)? */
#define ROPE_WIDE_(code, sfx, T, A, name) [code] = sizeof(A) == sizeof(double),
static const int ROPE_WIDE_ROWS[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(ROPE_WIDE_)};
#undef ROPE_WIDE_

#endif
