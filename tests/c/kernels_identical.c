/* Every rotation kernel of every registry entry this machine supports (AVX2,
 * AVX-512 on x86-64; NEON on aarch64) against the scalar one, called
 * directly through each entry's kernel table (rope_isa_kernels): all storage
 * types, both layouts, both directions, half = 1..70 and longer heads (the
 * vector steps' tails, the 512-pair stack chunks), in place and not, x and y
 * at every element-aligned offset within 64 bytes, one head, many heads back
 * to back, heads with gaps, heads in reverse order, NaN/Inf/subnormal
 * inputs. Whole buffers are compared byte for byte, gaps included, and 64
 * guard bytes before and after each buffer must be left alone. A kernel
 * shared by several entries (one that an entry keeps from another) is run
 * once. Each entry's yardstick pass is compared with the scalar pass the
 * same way, and so are its stage kernels (those of rope_rotate_staged:
 * sumsq, normalise, widen, narrow_float, narrow_double) for every storage
 * type: lengths 0..80 and the longer ones up to ROPE_MAX_STAGE_DIM (every
 * tail of the vector steps), inputs and outputs at element-aligned offsets
 * within 64 bytes, random values with NaNs (quiet, signalling, payloads),
 * infinities, zeros of both signs, subnormals, huge values and rounding
 * ties of the narrower types, sums of squares continued over several calls
 * from any starting lanes, weights or none, and inv from 0 to infinity;
 * an entry's one-pass norm path (norm_rot) against the scalar normalise,
 * split-half rotation and narrowing in turn.
 * The quantisers (quantise and dequantise of rope_rotate_quantised: int8,
 * float8 e4m3, q8_0) must match the scalar ones in every bit, NaNs
 * included: every even length up to 80 and longer ones (q8_0: 1 to 128
 * blocks), input and output at any offset, heads of any values, of rounding
 * ties (k + 0.5, 0.49999997, float8's at bit 20 and below 2^-6, the clamp
 * at 448), tiny ones (scale 0, id infinite), NaNs and infinities; float8
 * scales of every kind; dequantise of random bytes, every float8 code and
 * every float16 d of q8_0.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/kernels_identical.c $(find csrc -name '*.c') -lm -o build/kernels_identical
 *
 * (`make check-kernels`; `make check-aarch64` also builds it for aarch64 and
 * runs it under qemu.) `kernels_identical --isas` only lists the supported
 * entries, one per line; `--isa-features` lists every entry of the registry,
 * one per line, with the CPU flags it needs (its bases' included), from
 * which the Makefile derives which entries a CPU must offer; `--quick`
 * checks everything at three offsets within 64 bytes instead of all (see
 * next_offset). Every storage
 * type of the list is checked, whatever its size (rope_dtype_size).
 *
 * x86-64 only, with -DBASELINE the kernels of another revision REV must give
 * the same bits too (its scalar kernels as today's, its AVX2 kernels as
 * today's), linked in under the names base_<name>:
 *
 *   B=build/base; mkdir -p $B && git archive REV csrc | tar -x -C $B
 *   R=$(find $B/csrc -name 'rotate*.c')   (any plane: scalar/, isa/<name>/, or flat)
 *   for f in $R; do cc <flags above> -I$B/csrc -c $f -o $f.o; done
 *   nm -g --defined-only $(find $B/csrc -name 'rotate*.o') | awk '/ T rope_rot_/ {print $3, "base_" $3}' > $B/map
 *   for o in $(find $B/csrc -name 'rotate*.o'); do objcopy --redefine-syms=$B/map $o; done
 *   cc <flags above> -DBASELINE tests/c/kernels_identical.c $(find csrc -name '*.c')
 *      $(find $B/csrc -name 'rotate*.o') -lm -o build/kernels_identical
 *
 * A NaN's sign and payload are left to the platform by IEEE, and the vector
 * and scalar instructions may pick them differently: where both sides hold
 * a NaN a SIMD and the scalar result count as equal (reported separately);
 * against the baseline every bit must match. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels.h"
#include "scalar/pair.h"

#define NAME_(code, sfx, T, A, name) [code] = name,
static const char *const NAMES[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(NAME_)};
static const char *const LAYOUTS[2] = {[ROPE_INTERLEAVED] = "interleaved", [ROPE_SPLIT_HALF] = "split-half"};
#undef NAME_

/* Any storage type of the list: value v rounded to it as the scalar kernels
 * store (rope_st_<sfx>), and whether element k of p is a NaN once widened
 * as they load it (rope_ld_<sfx>). */
#define STORE_(code, sfx, T, A, name)                                          \
    case code: {                                                               \
        T t;                                                                   \
        rope_st_##sfx(&t, (A)v);                                               \
        memcpy(p, &t, sizeof t);                                               \
        break;                                                                 \
    }
static void store_value(int dtype, unsigned char *p, double v)
{
    switch (dtype) { ROPE_STORAGE_TYPES(STORE_) }
}
#undef STORE_
#define IS_NAN_(code, sfx, T, A, name)                                         \
    case code: {                                                               \
        T t;                                                                   \
        memcpy(&t, p, sizeof t);                                               \
        return isnan(rope_ld_##sfx(&t));                                       \
    }
static int loads_nan(int dtype, const unsigned char *p)
{
    switch (dtype) { ROPE_STORAGE_TYPES(IS_NAN_) }
    return 0;
}
#undef IS_NAN_
/* Whether element p (of a storage type) is what narrowing some NaN can give
 * by convert.h's roundings: a NaN, an infinity or a zero (bfloat16's
 * integer rounding carries a NaN's low payload bits into its exponent or
 * past its sign). */
#define NAN_IMAGE_(code, sfx, T, A, name)                                      \
    case code: {                                                               \
        T t;                                                                   \
        memcpy(&t, p, sizeof t);                                               \
        const double v = (double)rope_ld_##sfx(&t);                            \
        return isnan(v) || isinf(v) || v == 0.0;                               \
    }
static int nan_image(int dtype, const unsigned char *p)
{
    switch (dtype) { ROPE_STORAGE_TYPES(NAN_IMAGE_) }
    return 0;
}
#undef NAN_IMAGE_

/* ---- the contenders ------------------------------------------------------- */

/* A set of kernels under test and what it must match: the scalar kernels
 * (ref -1, a NaN's bits may differ) or another contender (exact). */
typedef struct {
    const char *name;
    rope_rot_fn rot[ROPE_N_DTYPES][2];
    rope_pass_fn pass;
    const rope_kernels *kernels; /* a registry entry's table (its stage kernels), else NULL */
    int ref;
    long cases, pass_cases, stage_cases, quant_cases, fails, nan_only, stage_nan_only, norm_rot_nan_only;
} contender;

enum { MAX_CONTENDERS = 32 };
static contender C[MAX_CONTENDERS];
static int n_contenders;
static rope_rot_fn scalar_rot[ROPE_N_DTYPES][2];
static rope_pass_fn scalar_pass;

#ifdef BASELINE
#define DECLARE_(code, sfx, T, A, name)                                        \
    void base_rope_rot_il_##sfx##_avx2(ROPE_ROT_PARAMS);                       \
    void base_rope_rot_sh_##sfx##_avx2(ROPE_ROT_PARAMS);                       \
    void base_rope_rot_il_##sfx##_scalar(ROPE_ROT_PARAMS);                     \
    void base_rope_rot_sh_##sfx##_scalar(ROPE_ROT_PARAMS);
ROPE_STORAGE_TYPES(DECLARE_)
#define BASE_ROW_(code, sfx, T, A, name)                                       \
    [code] = {base_rope_rot_il_##sfx##_scalar, base_rope_rot_sh_##sfx##_scalar},
static const rope_rot_fn BASE_SCALAR[ROPE_N_DTYPES][2] = {ROPE_STORAGE_TYPES(BASE_ROW_)};
#undef BASE_ROW_
#define BASE_ROW_(code, sfx, T, A, name)                                       \
    [code] = {base_rope_rot_il_##sfx##_avx2, base_rope_rot_sh_##sfx##_avx2},
static const rope_rot_fn BASE_AVX2[ROPE_N_DTYPES][2] = {ROPE_STORAGE_TYPES(BASE_ROW_)};
#undef BASE_ROW_
#endif

/* Every supported registry entry; then, with -DBASELINE, the baseline's
 * scalar kernels (against today's) and AVX2 kernels (against today's). */
static void find_contenders(void)
{
    const rope_kernels *s = rope_isa_kernels(0);
    memcpy(scalar_rot, s->rot, sizeof scalar_rot);
    scalar_pass = s->pass;
    for (int isa = 1; isa < rope_isa_count(); isa++) {
        if (!rope_isa_supported(isa))
            continue;
        const rope_kernels *k = rope_isa_kernels(isa);
        contender *c = &C[n_contenders++];
        c->name = rope_isa_name(isa);
        memcpy(c->rot, k->rot, sizeof c->rot);
        c->pass = k->pass;
        c->kernels = k;
        c->ref = -1;
    }
#ifdef BASELINE
    int avx2 = -1;
    for (int i = 0; i < n_contenders; i++)
        if (strcmp(C[i].name, "avx2") == 0)
            avx2 = i;
    contender *b = &C[n_contenders++];
    b->name = "baseline scalar";
    memcpy(b->rot, BASE_SCALAR, sizeof b->rot);
    b->ref = -2; /* today's scalar, exactly */
    if (avx2 >= 0) {
        b = &C[n_contenders++];
        b->name = "baseline avx2";
        memcpy(b->rot, BASE_AVX2, sizeof b->rot);
        b->ref = avx2;
    }
#endif
}

/* The kernel contender i is checked with for (dtype, layout), or NULL
 * when there is nothing new to check: it is the scalar kernel itself, or an
 * earlier contender with the same reference has the very same function. */
static rope_rot_fn own_kernel(int i, int dtype, int layout)
{
    const rope_rot_fn f = C[i].rot[dtype][layout];
    if (C[i].ref == -1 && f == scalar_rot[dtype][layout])
        return NULL;
    for (int j = 0; j < i; j++)
        if (C[j].ref == C[i].ref && C[j].rot[dtype][layout] == f)
            return NULL;
    return f;
}

/* The function contender i's reference runs (ref < 0: the scalar kernel). */
static rope_rot_fn ref_kernel(int i, int dtype, int layout)
{
    return C[i].ref < 0 ? scalar_rot[dtype][layout] : C[C[i].ref].rot[dtype][layout];
}

/* ---- inputs --------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}
static double uniform(void) { return (double)(next() >> 11) * 0x1p-53; }

/* A value with every kind of input now and then: NaNs (quiet, signalling,
 * with payloads), infinities, zeros, subnormals, values near overflow. */
static double value(void)
{
    static const double special[] = {INFINITY, -INFINITY, 0.0, -0.0, 0x1p-149, 0x1p-1070,
                                     65504.0, -65519.0, 3.0e38, -3.4e38, 1.0e300};
    const uint64_t r = next() % 32;
    if (r == 0)
        return special[next() % (sizeof special / sizeof special[0])];
    return (uniform() * 2 - 1) * ldexp(1.0, (int)(next() % 24) - 12);
}
static void put(int dtype, unsigned char *p, int64_t k)
{
    const uint64_t r = next() % 40;
    if (dtype == ROPE_F32) {
        uint32_t u = rope_f32_bits((float)value());
        if (r < 2) /* NaN: random sign and payload, quiet or signalling */
            u = (uint32_t)(next() & 0x807FFFFFu) | 0x7F800001u;
        memcpy(p + 4 * k, &u, 4);
    } else if (dtype == ROPE_F64) {
        double d = value();
        if (r < 2) {
            const uint64_t u = (next() & 0x800FFFFFFFFFFFFFull) | 0x7FF0000000000001ull;
            memcpy(&d, &u, 8);
        }
        memcpy(p + 8 * k, &d, 8);
    } else { /* any other type, of any size (rope_dtype_size): random bits now and
              * then (NaN payloads included), else a value rounded to the type */
        const double v = value();
        const uint64_t bits = next();
        const int64_t es = rope_dtype_size(dtype);
        if (r >= 4)
            store_value(dtype, p + es * k, v);
        else
            for (int64_t i = 0; i < es; i++)
                p[es * k + i] = (unsigned char)(bits >> (8 * (i % 8)));
    }
}
static int is_nan(int dtype, const unsigned char *p, int64_t k)
{
    return loads_nan(dtype, p + rope_dtype_size(dtype) * k);
}

/* ---- one case -------------------------------------------------------------- */

enum { MAXB = 1 << 20, GUARD = 64, MAX_OFF = 64 };

/* Inputs: put() is slow under an emulator, so each storage type's values are
 * drawn once into a pool of 2 MiB and every buffer starts at a random
 * element of its first half. */
static unsigned char pool[2 * MAXB];
static int pool_dtype = -1;
static const unsigned char *pool_at(int dtype)
{
    const int64_t es = (int64_t)rope_dtype_size(dtype);
    if (pool_dtype != dtype) {
        for (int64_t k = 0; k < 2 * MAXB / es; k++)
            put(dtype, pool, k);
        pool_dtype = dtype;
    }
    return pool + (int64_t)(next() % (uint64_t)(MAXB / es)) * es;
}
static unsigned char guard[GUARD];

/* --quick: the offsets within 64 bytes that a loop over all of them visits
 * are only three (aligned, one element past, one element short of the next
 * 64 bytes), for runs where the full sweep has run elsewhere (an emulated
 * CPU whose kernels this machine checks natively, the recipes' scratch
 * build under ASan): every path of the kernels still runs, on fewer
 * alignments. */
static int quick;
static int64_t next_offset(int64_t off, int64_t es)
{
    if (!quick)
        return off + es;
    return off == 0 ? es : off == es ? MAX_OFF - es : MAX_OFF;
}

static _Alignas(64) unsigned char work[2][GUARD + MAX_OFF + MAXB + GUARD];
static long n_guard_fail;

/* Buffer b holds n bytes at work[b] + GUARD + off, guard bytes before (the
 * offset's bytes too) and GUARD after. */
static void lay(int b, int64_t off, const unsigned char *init, int64_t n)
{
    unsigned char *w = work[b];
    for (int64_t i = 0; i < GUARD + off; i++)
        w[i] = guard[i % GUARD];
    memcpy(w + GUARD + off, init, (size_t)n);
    memcpy(w + GUARD + off + n, guard, GUARD);
}
static int guards_ok(int b, int64_t off, int64_t n)
{
    const unsigned char *w = work[b];
    for (int64_t i = 0; i < GUARD + off; i++)
        if (w[i] != guard[i % GUARD])
            return 0;
    return memcmp(w + GUARD + off + n, guard, GUARD) == 0;
}

/* Elements of a buffer of n_heads heads sh apart: the heads and their gaps;
 * with sh < 0 the kernel's first head is the buffer's last. */
static int64_t span(int64_t n_heads, int64_t sh, int64_t half)
{
    return (n_heads - 1) * (sh < 0 ? -sh : sh) + 2 * half;
}
static int64_t first_head(int64_t n_heads, int64_t sh) { return sh < 0 ? (n_heads - 1) * -sh : 0; }

static void one_case(int dtype, int layout, int inverse, int64_t half, int64_t n_heads,
                     int64_t x_sh, int64_t y_sh, int64_t x_off, int64_t y_off, int in_place,
                     const void *c, const void *s)
{
    static unsigned char out[1 + 2 * MAX_CONTENDERS][2][MAXB];
    const int64_t es = (int64_t)rope_dtype_size(dtype);
    const int64_t nx = span(n_heads, x_sh, half), ny = in_place ? 0 : span(n_heads, y_sh, half);
    if (nx * es > MAXB || ny * es > MAXB)
        abort();
    const unsigned char *init[2] = {pool_at(dtype), pool_at(dtype)};
    for (int i = 0; i < 16; i++) /* the guard bytes change from case to case */
        guard[next() % GUARD] = (unsigned char)next();
    /* Each distinct function runs once, the scalar kernel first: runs[r]. */
    rope_rot_fn runs[1 + 2 * MAX_CONTENDERS];
    const char *run_name[1 + 2 * MAX_CONTENDERS];
    int n_runs = 0;
    run_name[n_runs] = "scalar";
    runs[n_runs++] = scalar_rot[dtype][layout];
    for (int i = 0; i < n_contenders; i++)
        for (int k = 0; k < 2; k++) {
            const rope_rot_fn f = k ? ref_kernel(i, dtype, layout) : C[i].rot[dtype][layout];
            int r = 0;
            while (r < n_runs && runs[r] != f)
                r++;
            if (r == n_runs) {
                run_name[n_runs] = k ? C[C[i].ref].name : C[i].name; /* k: ref >= 0 here */
                runs[n_runs++] = f;
            }
        }
    for (int r = 0; r < n_runs; r++) {
        lay(0, x_off, init[0], nx * es);
        lay(1, y_off, init[1], ny * es);
        unsigned char *x = work[0] + GUARD + x_off, *y = in_place ? x : work[1] + GUARD + y_off;
        const int64_t ysh = in_place ? x_sh : y_sh;
        runs[r](x + first_head(n_heads, x_sh) * es, y + first_head(n_heads, ysh) * es, x_sh, ysh,
                n_heads, c, s, half, inverse);
        if ((!guards_ok(0, x_off, nx * es) || !guards_ok(1, y_off, ny * es)) && n_guard_fail++ < 20)
            printf("GUARD BYTES WRITTEN by the %s kernel: %s %s half=%lld heads=%lld x_off=%lld "
                   "y_off=%lld %s\n",
                   run_name[r], NAMES[dtype], LAYOUTS[layout],
                   (long long)half, (long long)n_heads, (long long)x_off, (long long)y_off,
                   in_place ? "in place" : "out of place");
        memcpy(out[r][0], x, (size_t)(nx * es));
        memcpy(out[r][1], y, (size_t)(ny * es));
    }
    for (int i = 0; i < n_contenders; i++) {
        if (!own_kernel(i, dtype, layout))
            continue;
        int mine = 0, ref = 0;
        while (runs[mine] != C[i].rot[dtype][layout])
            mine++;
        while (runs[ref] != ref_kernel(i, dtype, layout))
            ref++;
        const int exact = C[i].ref != -1;
        int nan_only = 0, fail = 0;
        for (int b = 0; b < 2; b++) {
            const int64_t n = b ? ny : nx;
            const unsigned char *o = out[mine][b], *r = out[ref][b];
            if (memcmp(o, r, (size_t)(n * es)) == 0)
                continue;
            for (int64_t k = 0; k < n; k++) {
                if (memcmp(o + k * es, r + k * es, (size_t)es) == 0)
                    continue;
                if (!exact && is_nan(dtype, o, k) && is_nan(dtype, r, k))
                    nan_only = 1;
                else
                    fail = 1;
            }
        }
        C[i].cases++;
        C[i].nan_only += nan_only;
        if (fail && C[i].fails++ < 20)
            printf("MISMATCH %s: %s %s%s half=%lld heads=%lld x_sh=%lld y_sh=%lld x_off=%lld "
                   "y_off=%lld %s\n",
                   C[i].name, NAMES[dtype], LAYOUTS[layout],
                   inverse ? " inverse" : "", (long long)half, (long long)n_heads, (long long)x_sh,
                   (long long)y_sh, (long long)x_off, (long long)y_off,
                   in_place ? "in place" : "out of place");
    }
}

/* The yardstick's pass of every contender against the scalar pass (once
 * per function): lengths 0..300 at offsets 0..15 between guard bytes. */
static void check_passes(void)
{
    static unsigned char init[512], ref[512];
    for (int i = 0; i < n_contenders; i++) {
        int seen = !C[i].pass || C[i].ref != -1 || C[i].pass == scalar_pass;
        for (int j = 0; j < i; j++)
            seen |= C[j].pass == C[i].pass;
        if (seen) /* none, or one checked already */
            continue;
        for (int64_t n = 0; n <= 300; n++)
            for (int64_t off = 0; off < 16; off++) {
                const uint32_t mask = (uint32_t)next();
                for (int64_t k = 0; k < n; k++)
                    init[k] = (unsigned char)next();
                memcpy(ref, init, (size_t)n);
                scalar_pass(ref, n, mask);
                lay(0, off, init, n);
                C[i].pass(work[0] + GUARD + off, n, mask);
                C[i].pass_cases++;
                if ((memcmp(work[0] + GUARD + off, ref, (size_t)n) || !guards_ok(0, off, n)) &&
                    C[i].fails++ < 20)
                    printf("MISMATCH %s: pass n=%lld offset=%lld\n", C[i].name, (long long)n,
                           (long long)off);
            }
    }
}

/* ---- the stage kernels --------------------------------------------------------- */

enum { K_SUMSQ, K_NORMALISE, K_WIDEN, K_NARROW_FLOAT, K_NARROW_DOUBLE, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"sumsq", "normalise", "widen", "narrow_float", "narrow_double"};

/* Kernel `kind` of storage type dtype in table k, as a generic pointer (NULL:
 * none; narrow_double is offered for some types only). */
typedef void (*any_fn)(void);
static any_fn stage_kernel(const rope_kernels *k, int kind, int dtype)
{
    switch (kind) {
    case K_SUMSQ: return (any_fn)k->sumsq[dtype];
    case K_NORMALISE: return (any_fn)k->normalise[dtype];
    case K_WIDEN: return (any_fn)k->widen[dtype];
    case K_NARROW_FLOAT: return (any_fn)k->narrow_float[dtype];
    default: return (any_fn)k->narrow_double[dtype];
    }
}

/* Inputs of the stage kernels, drawn once (put() is slow under an emulator):
 * each storage type's elements, float32 and double values for the
 * narrowings (stage_float, stage_double), weights and inv values. */
enum { STAGE_POOL = 3 * ROPE_MAX_STAGE_DIM, STAGE_SLACK = 64 };
static unsigned char stage_pool[ROPE_N_DTYPES][8 * (STAGE_POOL + STAGE_SLACK)];
static float stage_float[STAGE_POOL + STAGE_SLACK];
static double stage_double[STAGE_POOL + STAGE_SLACK], stage_w[STAGE_POOL + STAGE_SLACK];

/* A float32 for the narrowings: any value, and those their roundings decide
 * on: ties and near-ties of bfloat16 (bit 15) and float16 (normal: bit 12;
 * subnormal results), the float16 overflow threshold, subnormal float32,
 * NaNs with low payload bits (which the bfloat16 rounding carries into). */
static float narrow_input(void)
{
    uint32_t u = (uint32_t)next();
    switch (next() % 12) {
    case 0: u = (u & 0xFFFF0000u) | 0x8000u; break;                  /* bfloat16 tie */
    case 1: u = (u & 0xFFFF0000u) | (0x7FFFu + (uint32_t)(next() % 3)); break;
    case 2: u = (u & 0x80000000u) | ((112u + (uint32_t)(next() % 32)) << 23) | (u & 0x7FE000u) | 0x1000u;
        break;                                                       /* float16 tie */
    case 3: u = (u & 0x80000000u) | ((100u + (uint32_t)(next() % 14)) << 23) | (u & 0x7FFFFFu);
        break;                                                       /* float16 subnormal */
    case 4: u = (u & 0x80000000u) | (0x477FE000u + (uint32_t)(next() % 0x2000u)); break; /* near 65520 */
    case 5: u &= 0x807FFFFFu; break;                                 /* subnormal or zero */
    case 6: u |= 0x7F800000u; break;                                 /* NaN (or inf) */
    case 7: u = (u & 0x80000000u) | 0x7F800000u; break;              /* inf */
    case 8: u &= 0x80000000u; break;                                 /* +-0 */
    case 9: u = (u & 0x80000000u) | (0x7F7F0000u + (u & 0xFFFFu)); break; /* near FLT_MAX */
    default: return (float)value();
    }
    return rope_bits_f32(u);
}

/* A double for narrow_double: any value, float32 ties (bit 28), results
 * below float32's normal range and past its largest, NaN payloads. */
static double narrow_double_input(void)
{
    uint64_t u = next();
    double d;
    switch (next() % 8) {
    case 0: u = (u & 0xFFFFFFFFE0000000ull) | 0x10000000ull; break;   /* tie at float32 */
    case 1: u = (u & 0x800FFFFFFFFFFFFFull) | ((uint64_t)(1023 - 126 - (int)(next() % 30)) << 52); break;
    case 2: u = (u & 0x800FFFFFFFFFFFFFull) | ((uint64_t)(1023 + 127 + (int)(next() % 3)) << 52); break;
    case 3: u |= 0x7FF0000000000000ull; break;                       /* NaN (or inf) */
    case 4: u &= 0x800FFFFFFFFFFFFFull; break;                       /* double subnormal or zero */
    default: return value();
    }
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A weight: mostly around 1, any sign, now and then a special value. */
static double weight_value(void)
{
    static const double special[] = {0.0, -0.0, INFINITY, -INFINITY, 1e300, 1e-310, -2.5e-320};
    const uint64_t r = next() % 40;
    if (r == 0)
        return special[next() % (sizeof special / sizeof special[0])];
    if (r == 1) {
        double d;
        const uint64_t u = (next() & 0x800FFFFFFFFFFFFFull) | 0x7FF0000000000001ull;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    return (uniform() * 4 - 2) * ldexp(1.0, (int)(next() % 9) - 4);
}

/* inv as the stages compute it, 1 / sqrt(mean + eps), and what a head of
 * zeros, infinities or NaNs makes of it. */
static double inv_value(void)
{
    switch (next() % 16) {
    case 0: return 0.0;
    case 1: return INFINITY;
    case 2: return NAN;
    case 3: return 1e300;
    case 4: return 1e-300;
    case 5: return 0x1p-1074;
    default: return 1.0 / sqrt(uniform() * ldexp(1.0, (int)(next() % 40) - 20) + 1e-6);
    }
}

static void stage_pools(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    for (int dtype = 0; dtype < ROPE_N_DTYPES; dtype++)
        for (int64_t k = 0; k < STAGE_POOL + STAGE_SLACK; k++)
            put(dtype, stage_pool[dtype], k);
    for (int64_t k = 0; k < STAGE_POOL + STAGE_SLACK; k++) {
        stage_float[k] = narrow_input();
        stage_double[k] = narrow_double_input();
        stage_w[k] = weight_value();
    }
}

/* Equal bits, or (not exact) both NaN: *nan_only set then. size: 2, 4 or 8
 * (dtype >= 0: elements of that storage type, else float or double). */
static int stage_same(const unsigned char *a, const unsigned char *b, int64_t n, int64_t size, int dtype,
                      int *nan_only)
{
    int ok = 1;
    for (int64_t k = 0; k < n; k++) {
        if (memcmp(a + k * size, b + k * size, (size_t)size) == 0)
            continue;
        int both_nan;
        if (dtype >= 0) {
            both_nan = is_nan(dtype, a, k) && is_nan(dtype, b, k);
        } else if (size == 4) {
            float u, v;
            memcpy(&u, a + 4 * k, 4);
            memcpy(&v, b + 4 * k, 4);
            both_nan = isnan(u) && isnan(v);
        } else {
            double u, v;
            memcpy(&u, a + 8 * k, 8);
            memcpy(&v, b + 8 * k, 8);
            both_nan = isnan(u) && isnan(v);
        }
        if (both_nan)
            *nan_only = 1;
        else
            ok = 0;
    }
    return ok;
}

/* One case of kernel `kind` of dtype: f (contender i's) against the scalar
 * g on n elements, the input x_off bytes and the output y_off bytes past a
 * 64-byte boundary; sumsq continues over `calls` calls of n elements each
 * from the same starting lanes. */
static void stage_case(int i, int kind, int dtype, any_fn f, any_fn g, int64_t n, int64_t x_off, int64_t y_off,
                       int calls)
{
    const int64_t es = rope_dtype_size(dtype), as = ROPE_WIDE_ROWS[dtype] ? 8 : 4;
    /* input element size and source; output element size */
    const int64_t is = kind == K_NARROW_FLOAT ? 4 : kind == K_NARROW_DOUBLE ? 8 : es;
    const int64_t os = kind == K_SUMSQ ? 8 : kind == K_NORMALISE || kind == K_WIDEN ? as : es;
    const int64_t start = (int64_t)(next() % (uint64_t)(STAGE_POOL - calls * n + 1));
    const unsigned char *src = kind == K_NARROW_FLOAT    ? (const unsigned char *)(stage_float + start)
                               : kind == K_NARROW_DOUBLE ? (const unsigned char *)(stage_double + start)
                                                         : stage_pool[dtype] + start * es;
    const int weighted = next() % 3 != 0;
    const double *w = stage_w + next() % (uint64_t)(STAGE_POOL - n + 1);
    const double inv = inv_value();
    double acc0[8];
    for (int l = 0; l < 8; l++) { /* lanes as earlier heads leave them, now and then a special */
        const uint64_t r = next() % 16;
        acc0[l] = r == 0 ? -0.0 : r == 1 ? INFINITY : r == 2 ? NAN : r == 3 ? 0.0 : uniform() * 100;
    }
    const int64_t nin = calls * n, nout = kind == K_SUMSQ ? 8 : n;
    static unsigned char out[2][8 * ROPE_MAX_STAGE_DIM + 64];
    for (int r = 0; r < 16; r++)
        guard[next() % GUARD] = (unsigned char)next();
    for (int run = 0; run < 2; run++) {
        const any_fn h = run ? f : g;
        lay(0, x_off, src, nin * is);
        unsigned char *x = work[0] + GUARD + x_off, *y = work[1] + GUARD + y_off;
        if (kind == K_SUMSQ) {
            lay(1, y_off, (const unsigned char *)acc0, 64);
            for (int c = 0; c < calls; c++)
                ((rope_sumsq_fn)h)(x + c * n * is, n, (double *)(void *)y);
        } else {
            memset(out[run], 0xA5, (size_t)(n * os));
            lay(1, y_off, out[run], n * os);
            if (kind == K_NORMALISE)
                ((rope_normalise_fn)h)(x, n, inv, weighted ? w : NULL, y);
            else
                ((rope_convert_fn)h)(x, n, y);
        }
        if ((!guards_ok(0, x_off, nin * is) || !guards_ok(1, y_off, nout * os) ||
             memcmp(x, src, (size_t)(nin * is)) != 0) && n_guard_fail++ < 20)
            printf("GUARD BYTES OR INPUT WRITTEN by the %s %s kernel: %s n=%lld x_off=%lld y_off=%lld\n",
                   run ? C[i].name : "scalar", KIND_NAMES[kind], NAMES[dtype], (long long)n, (long long)x_off,
                   (long long)y_off);
        memcpy(out[run], y, (size_t)(nout * os));
    }
    int nan_only = 0;
    const int same = stage_same(out[1], out[0], nout, os, kind == K_NARROW_FLOAT || kind == K_NARROW_DOUBLE ? dtype : -1,
                                &nan_only);
    C[i].stage_cases++;
    C[i].nan_only += nan_only;
    C[i].stage_nan_only += nan_only;
    if (!same && C[i].fails++ < 20)
        printf("MISMATCH %s: %s %s n=%lld calls=%d x_off=%lld y_off=%lld%s (inv %g)\n", C[i].name,
               KIND_NAMES[kind], NAMES[dtype], (long long)n, calls, (long long)x_off, (long long)y_off,
               kind == K_NORMALISE ? (weighted ? " weighted" : " no weights") : "", kind == K_NORMALISE ? inv : 0.0);
}

/* Every contender's own stage kernels (those that are not the scalar ones,
 * each function once) against the scalar ones. */
static void check_stages(void)
{
    const rope_kernels *s = rope_isa_kernels(0);
    int64_t lengths[200];
    int n_lengths = 0;
    for (int64_t n = 0; n <= 80; n++)
        lengths[n_lengths++] = n;
    const int64_t more[] = {95, 96, 97, 120, 127, 128, 129, 136, 191, 192, 200, 255, 256, 257, 383, 384,
                            511, 512, 513, 1000, 1023, 1024, 2047, 2048, 4095, 4096};
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
        lengths[n_lengths++] = more[k];
    stage_pools();
    for (int i = 0; i < n_contenders; i++) {
        if (!C[i].kernels)
            continue;
        for (int dtype = 0; dtype < ROPE_N_DTYPES; dtype++)
            for (int kind = 0; kind < N_KINDS; kind++) {
                const any_fn f = stage_kernel(C[i].kernels, kind, dtype), g = stage_kernel(s, kind, dtype);
                if (!f != !g) {
                    if (C[i].fails++ < 20)
                        printf("MISMATCH %s: %s %s is %s where the scalar table's is %s\n", C[i].name,
                               KIND_NAMES[kind], NAMES[dtype], f ? "set" : "NULL", g ? "set" : "NULL");
                    continue;
                }
                int seen = f == g;
                for (int j = 0; j < i; j++)
                    seen |= C[j].kernels && stage_kernel(C[j].kernels, kind, dtype) == f;
                if (seen) /* none, the scalar kernel, or one checked already */
                    continue;
                const int64_t es = rope_dtype_size(dtype);
                const int64_t is = kind == K_NARROW_FLOAT ? 4 : kind == K_NARROW_DOUBLE ? 8 : es;
                const int64_t os = kind == K_SUMSQ ? 8 : kind == K_NORMALISE || kind == K_WIDEN
                                                                ? (ROPE_WIDE_ROWS[dtype] ? 8 : 4) : es;
                for (int li = 0; li < n_lengths; li++) {
                    const int64_t n = lengths[li];
                    /* short lengths at every element offset of the input, longer
                     * ones at a few; the output anywhere its elements align */
                    for (int64_t t = 0, off = 0; n <= 80 ? off < MAX_OFF : t < 4; t++, off = next_offset(off, is)) {
                        const int64_t xo = n <= 80 ? off : (int64_t)(next() % (uint64_t)(MAX_OFF / is)) * is;
                        const int64_t yo = (int64_t)(next() % (uint64_t)(MAX_OFF / os)) * os;
                        const int calls = kind == K_SUMSQ && n <= 1024 ? 1 + (int)(next() % 3) : 1;
                        stage_case(i, kind, dtype, f, g, n, xo, yo, calls);
                    }
                }
            }
    }
}

/* ---- the one-pass norm path ------------------------------------------------------ */

/* A table entry of the norm path's rotation: cos or sin of an angle, now
 * and then a special value. */
static float table_entry(int is_sin, double angle)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, 1e-40f};
    const uint64_t r = next() % 64;
    if (r == 0)
        return special[next() % (sizeof special / sizeof special[0])];
    if (r == 1) /* a NaN of any sign and payload */
        return rope_bits_f32((uint32_t)(next() & 0x807FFFFFu) | 0x7F800001u);
    return (float)(is_sin ? sin(angle) : cos(angle));
}

/* Every contender's own duplicate_row (the interleaved norm_rot's row)
 * against its definition, bit for bit: half 0 to 80 and a few longer, the
 * rows at any float offset within 64 bytes, nothing written past 2 half. */
static void check_duplicate_row(void)
{
    enum { MAXH = 2048, PAD = 16 };
    static float in[2][MAXH + PAD], out[2][2 * MAXH + 2 * PAD];
    for (int i = 0; i < n_contenders; i++) {
        const rope_duplicate_fn f = C[i].kernels ? C[i].kernels->duplicate_row : NULL;
        int seen = !f;
        for (int j = 0; j < i; j++)
            seen |= C[j].kernels && C[j].kernels->duplicate_row == f;
        if (seen)
            continue;
        for (int64_t half = 0; half <= MAXH; half = half < 80 ? half + 1 : half * 2) {
            const int64_t xo = (int64_t)(next() % PAD), yo = (int64_t)(next() % PAD);
            for (int r = 0; r < 2; r++) {
                for (int64_t k = 0; k < MAXH + PAD; k++)
                    in[r][k] = rope_bits_f32((uint32_t)next());
                memset(out[r], 0xA5, sizeof out[r]);
            }
            f(in[0] + xo, in[1] + xo, half, out[0] + yo, out[1] + yo);
            int ok = 1;
            for (int r = 0; r < 2; r++)
                for (int64_t k = 0; k < 2 * MAXH + 2 * PAD; k++) {
                    const int64_t e = k - yo;
                    uint32_t want = 0xA5A5A5A5u, got;
                    if (e >= 0 && e < 2 * half)
                        memcpy(&want, &in[r][xo + e / 2], 4);
                    memcpy(&got, &out[r][k], 4);
                    ok &= got == want;
                }
            C[i].stage_cases++;
            if (!ok && C[i].fails++ < 20)
                printf("MISMATCH %s: duplicate_row half=%lld\n", C[i].name, (long long)half);
        }
    }
}

/* Every contender's own norm_rot kernels against the scalar composition
 * they replace (normalise, the rotation of the row as one head in either
 * layout, narrow_float; scalar/stage.c and scalar/rotate.c), interleaved
 * given the row as the caller builds it (the contender's duplicate_row):
 * head_dim 16 up to ROPE_MAX_STAGE_DIM, weights or none, both directions,
 * in place or not, x and out at element offsets within 64 bytes, the stage
 * kernels' inputs and inv values. Only the float arithmetic types may have
 * one. */
static void check_norm_rot(void)
{
    const rope_kernels *s = rope_isa_kernels(0);
    static const int64_t dims[] = {16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256, 384, 512, ROPE_MAX_STAGE_DIM};
    static float row[ROPE_MAX_STAGE_DIM], cs[ROPE_MAX_STAGE_DIM / 2], sn[ROPE_MAX_STAGE_DIM / 2];
    static float dcs[ROPE_MAX_STAGE_DIM], dsn[ROPE_MAX_STAGE_DIM];
    static unsigned char ref[8 * ROPE_MAX_STAGE_DIM], blank[8 * ROPE_MAX_STAGE_DIM];
    memset(blank, 0xA5, sizeof blank);
    stage_pools();
    for (int i = 0; i < n_contenders; i++) {
        if (!C[i].kernels)
            continue;
        for (int dtype = 0; dtype < ROPE_N_DTYPES; dtype++)
            for (int otype = 0; otype < ROPE_N_DTYPES; otype++)
            for (int layout = 0; layout < 2; layout++) {
                const rope_norm_rot_fn f = C[i].kernels->norm_rot[dtype][otype][layout];
                if (!f)
                    continue;
                if (ROPE_WIDE_ROWS[dtype] || ROPE_WIDE_ROWS[otype] || s->norm_rot[dtype][otype][layout]) {
                    if (C[i].fails++ < 20)
                        printf("MISMATCH %s: norm_rot %s to %s (%s) is set: only non-scalar entries of the "
                               "float types may have one\n", C[i].name, NAMES[dtype], NAMES[otype], LAYOUTS[layout]);
                    continue;
                }
                int seen = 0;
                for (int j = 0; j < i; j++)
                    seen |= C[j].kernels && C[j].kernels->norm_rot[dtype][otype][layout] == f;
                if (seen)
                    continue;
                const int64_t es = rope_dtype_size(dtype), os = rope_dtype_size(otype);
                for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
                    for (int t = 0; t < 24; t++) {
                        const int64_t n = dims[di], half = n / 2;
                        const int64_t start = (int64_t)(next() % (uint64_t)(STAGE_POOL - n + 1));
                        const unsigned char *src = stage_pool[dtype] + start * es;
                        /* in place only where the types (element sizes) are the same */
                        const int weighted = next() % 3 != 0, inverse = (int)(next() % 2);
                        const int in_place = dtype == otype && t % 2;
                        const double *w = weighted ? stage_w + next() % (uint64_t)(STAGE_POOL - n + 1) : NULL;
                        const double inv = inv_value();
                        for (int64_t k = 0; k < half; k++) {
                            const double a = uniform() * 1000.0;
                            cs[k] = table_entry(0, a);
                            sn[k] = table_entry(1, a);
                        }
                        s->normalise[dtype](src, n, inv, w, row);
                        s->rot[ROPE_F32][layout](row, row, 0, 0, 1, cs, sn, half, inverse);
                        s->narrow_float[otype](row, n, ref);
                        /* where the rotated row holds a NaN, the two may hold different NaNs
                         * (as every rotation kernel may), and narrowing them may then
                         * differ: any image of a NaN passes there */
                        const int64_t xo = (int64_t)(next() % (uint64_t)(MAX_OFF / es)) * es;
                        const int64_t yo = in_place ? xo : (int64_t)(next() % (uint64_t)(MAX_OFF / os)) * os;
                        for (int r = 0; r < 16; r++)
                            guard[next() % GUARD] = (unsigned char)next();
                        lay(0, xo, src, n * es);
                        lay(1, yo, blank, n * os);
                        unsigned char *x = work[0] + GUARD + xo, *y = in_place ? x : work[1] + GUARD + yo;
                        if (layout == ROPE_INTERLEAVED) { /* the row as the caller builds it */
                            C[i].kernels->duplicate_row(cs, sn, half, dcs, dsn);
                            f(x, n, inv, w, dcs, dsn, inverse, y);
                        } else {
                            f(x, n, inv, w, cs, sn, inverse, y);
                        }
                        if ((!guards_ok(0, xo, n * es) || !guards_ok(1, yo, n * os) ||
                             (!in_place && memcmp(x, src, (size_t)(n * es)) != 0)) &&
                            n_guard_fail++ < 20)
                            printf("GUARD BYTES OR INPUT WRITTEN by the %s norm_rot kernel: %s to %s (%s) n=%lld\n",
                                   C[i].name, NAMES[dtype], NAMES[otype], LAYOUTS[layout], (long long)n);
                        int nan_only = 0, same = 1;
                        for (int64_t k = 0; k < n; k++) {
                            if (memcmp(y + k * os, ref + k * os, (size_t)os) == 0)
                                continue;
                            if (isnan(row[k]) && nan_image(otype, y + k * os))
                                nan_only = 1;
                            else
                                same = 0;
                        }
                        C[i].stage_cases++;
                        C[i].nan_only += nan_only;
                        C[i].norm_rot_nan_only += nan_only;
                        if (!same && C[i].fails++ < 20)
                            printf("MISMATCH %s: norm_rot %s to %s (%s) n=%lld%s%s%s (inv %g)\n", C[i].name,
                                   NAMES[dtype], NAMES[otype], LAYOUTS[layout], (long long)n,
                                   weighted ? " weighted" : " no weights",
                                   inverse ? " inverse" : "", in_place ? " in place" : "", inv);
                    }
            }
    }
}

/* ---- the quantisers ------------------------------------------------------------ */

static const char *const QUANT_NAMES[ROPE_N_QUANTS] = {
    [ROPE_QUANT_INT8] = "int8", [ROPE_QUANT_FP8_E4M3] = "fp8_e4m3", [ROPE_QUANT_Q8_0] = "q8_0"};

/* Bytes that n values of quant kind take. */
static int64_t quant_bytes(int kind, int64_t n)
{
    return kind == ROPE_QUANT_Q8_0 ? n / ROPE_Q8_0_VALUES * ROPE_Q8_0_BYTES : n;
}

static float random_nan(void) { return rope_bits_f32((uint32_t)(next() & 0x807FFFFFu) | 0x7F800001u); }
static float random_sign(float v) { return next() & 1 ? -v : v; }
static float up(float v) { return nextafterf(v, INFINITY); }
static float down(float v) { return nextafterf(v, -INFINITY); }

/* A value of a head whose scale is unit (int8, q8_0: 127 * unit is the
 * amax, set by quant_head) or for float8 of static scale unit, both powers
 * of two: the quotient or product is exact, so these reach the roundings'
 * ties: k + 0.5, 0.49999997 (which floor(|v| + 0.5) rounds up), either
 * side of them; float8 e4m3 ties at mantissa bit 20 and subnormal ties
 * (m + 0.5) * 2^-9, the boundary 2^-6 either side, values at and past the
 * clamp 448 (464, the tie that would round to 480, a NaN code). */
static float tie_value(int kind, float unit)
{
    if (kind != ROPE_QUANT_FP8_E4M3) {
        const float k = (float)(next() % 127), h = k + 0.5f; /* |v| <= 126.5 < 127 */
        static const float small[] = {0.49999997f, 0.50000006f, 0.5f, 0.0f, 1.5f, 2.5f};
        float v;
        switch (next() % 5) {
        case 0: v = h; break;
        case 1: v = down(h); break;
        case 2: v = up(h); break;
        case 3: v = k; break;
        default: v = small[next() % (sizeof small / sizeof small[0])]; break;
        }
        return random_sign(v * unit);
    }
    float v;
    switch (next() % 6) {
    case 0: { /* a normal e4m3 value's tie or a neighbour of it */
        const uint32_t e = 121u + (uint32_t)(next() % 15), m = (uint32_t)(next() % 8);
        const uint32_t low = (const uint32_t[]){0x80000u, 0x7FFFFu, 0x80001u, 0u, 0xFFFFFu}[next() % 5];
        v = rope_bits_f32((e << 23) | (m << 20) | low);
        break;
    }
    case 1: { /* a subnormal's tie (m + 0.5) * 2^-9 or a neighbour */
        const float t = ((float)(next() % 8) + 0.5f) * 0x1p-9f;
        v = (const float[]){t, up(t), down(t)}[next() % 3];
        break;
    }
    case 2: { /* about 2^-6 */
        static const uint32_t b[] = {0x3C800000u, 0x3C800001u, 0x3C7FFFFFu, 0x3C7FFFFEu, 0x3C780000u, 0x3C880000u};
        v = rope_bits_f32(b[next() % (sizeof b / sizeof b[0])]);
        break;
    }
    case 3: { /* about 448 and past it */
        static const float b[] = {448.0f, 447.99997f, 448.00003f, 464.0f, 463.99997f, 464.00003f, 480.0f,
                                  416.0f, 432.0f, 440.0f, 1e9f, 3.4e38f, INFINITY};
        v = b[next() % (sizeof b / sizeof b[0])];
        break;
    }
    case 4: v = (float)(next() % 512) * 0x1p-12f; break; /* the smallest codes */
    default: v = (float)((uniform() * 2 - 1) * 500); break;
    }
    return random_sign(v) * unit;
}

/* n float32 values of one head, of the given profile (Q_PROFILES of them):
 * any value (value(): now and then an infinity, a subnormal, near
 * overflow); finite only; ties (tie_value) with the amax 127 * unit in
 * every block of 32; tiny (subnormal or about 2^-126..2^-149: the scale 0,
 * subnormal, or id = 1 / d infinite); finite with a few NaNs (random sign
 * and payload, quiet or signalling); finite with infinities; zeros of both
 * signs; any bits; huge (up to FLT_MAX). */
enum { Q_PROFILES = 9, Q_TIES = 2 };
static void quant_head(int kind, int profile, float unit, float *h, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        float v;
        switch (profile) {
        case 0: v = (float)value(); break;
        case 1: v = (float)((uniform() * 2 - 1) * unit * 200); break;
        case Q_TIES: v = tie_value(kind, unit); break;
        case 3: v = next() % 2 ? rope_bits_f32((uint32_t)next() & 0x807FFFFFu)
                               : random_sign(ldexpf((float)uniform(), -100 - (int)(next() % 50))); break;
        case 6: v = next() % 4 ? random_sign(0.0f) : rope_bits_f32((uint32_t)next() & 0x800000FFu); break;
        case 7: v = rope_bits_f32((uint32_t)next()); break;
        case 8: v = random_sign(ldexpf((float)uniform(), 100 + (int)(next() % 29))); break;
        default: v = (float)((uniform() * 2 - 1) * unit * 200); break;
        }
        h[k] = v;
    }
    if (profile == Q_TIES && kind != ROPE_QUANT_FP8_E4M3)
        for (int64_t b = 0; b < n; b += ROPE_Q8_0_VALUES)
            h[b + (int64_t)(next() % (uint64_t)(n - b < ROPE_Q8_0_VALUES ? n - b : ROPE_Q8_0_VALUES))] =
                random_sign(127.0f * unit);
    const int specials = profile == 4 || profile == 5 ? 1 + (int)(next() % 3) : 0;
    for (int s = 0; s < specials; s++)
        h[next() % (uint64_t)n] = profile == 4 ? random_nan() : random_sign(INFINITY);
}

/* float8's static scale: ordinary ones, powers of two (exact quotients),
 * extremes; and those rope_rotate_quantised refuses (0, negative, infinite,
 * NaN), which the kernels define all the same. */
static float fp8_scale(void)
{
    static const float b[] = {1.0f, 0.5f, 2.0f, 1e-3f, 1e3f, 0x1p-149f, 1e-40f, 3.4e38f, 0x1p-126f,
                              0.0f, -0.0f, -1.5f, INFINITY, -INFINITY};
    const uint64_t r = next() % 8;
    if (r < 4)
        return (float)(uniform() * 10 + 0.01);
    if (r == 4)
        return random_nan();
    return b[next() % (sizeof b / sizeof b[0])];
}

/* A scale of a dequantise (int8, float8): ordinary, extreme or not finite,
 * NaNs of every kind. */
static float dequant_scale(void)
{
    static const float b[] = {1.0f, 0.0f, -0.0f, 0x1p-149f, 3.4e38f, INFINITY, -INFINITY, 1e-20f};
    const uint64_t r = next() % 8;
    if (r < 4)
        return (float)(uniform() * 0.1);
    if (r == 4)
        return random_nan();
    if (r == 5)
        return rope_bits_f32(0x7FC00000u);
    return b[next() % (sizeof b / sizeof b[0])];
}

/* Contender i's quantise f of kind against the scalar g: n values of the
 * profile at x_off bytes past a 64-byte boundary, the output at y_off
 * (any byte); out (every byte, those it must not touch start random), the
 * scale (int8: written; the others: unchanged) and the input compared. */
static void quant_case(int i, int kind, rope_quantise_fn f, rope_quantise_fn g, int64_t n, int profile,
                       int64_t x_off, int64_t y_off)
{
    static float head[ROPE_MAX_STAGE_DIM];
    static unsigned char init[2 * ROPE_MAX_STAGE_DIM], out[2][2 * ROPE_MAX_STAGE_DIM];
    const int64_t nb = quant_bytes(kind, n);
    const float unit = ldexpf(1.0f, (int)(next() % 40) - 20);
    quant_head(kind, profile, unit, head, n);
    for (int64_t k = 0; k < nb; k++)
        init[k] = (unsigned char)next();
    const float scale0 = kind != ROPE_QUANT_FP8_E4M3 ? rope_bits_f32((uint32_t)next())
                         : profile == Q_TIES         ? unit
                                                     : fp8_scale();
    uint32_t scale_bits[2];
    for (int r = 0; r < 16; r++)
        guard[next() % GUARD] = (unsigned char)next();
    for (int run = 0; run < 2; run++) {
        lay(0, x_off, (const unsigned char *)head, n * 4);
        lay(1, y_off, init, nb);
        float *x = (float *)(void *)(work[0] + GUARD + x_off), scale = scale0;
        unsigned char *y = work[1] + GUARD + y_off;
        (run ? f : g)(x, n, y, &scale);
        if ((!guards_ok(0, x_off, n * 4) || !guards_ok(1, y_off, nb) || memcmp(x, head, (size_t)(n * 4)) != 0) &&
            n_guard_fail++ < 20)
            printf("GUARD BYTES OR INPUT WRITTEN by the %s quantise: %s n=%lld x_off=%lld y_off=%lld\n",
                   run ? C[i].name : "scalar", QUANT_NAMES[kind], (long long)n, (long long)x_off, (long long)y_off);
        memcpy(out[run], y, (size_t)nb);
        scale_bits[run] = rope_f32_bits(scale);
    }
    C[i].quant_cases++;
    const int same_scale = scale_bits[0] == scale_bits[1] &&
                           (kind == ROPE_QUANT_INT8 || scale_bits[1] == rope_f32_bits(scale0));
    if ((memcmp(out[0], out[1], (size_t)nb) != 0 || !same_scale) && C[i].fails++ < 20) {
        int64_t k = 0;
        while (k < nb && out[0][k] == out[1][k])
            k++;
        printf("MISMATCH %s: quantise %s n=%lld profile %d x_off=%lld y_off=%lld: ", C[i].name, QUANT_NAMES[kind],
               (long long)n, profile, (long long)x_off, (long long)y_off);
        if (k < nb)
            printf("byte %lld is 0x%02X, scalar 0x%02X\n", (long long)k, out[1][k], out[0][k]);
        else
            printf("scale 0x%08X, scalar 0x%08X\n", (unsigned)scale_bits[1], (unsigned)scale_bits[0]);
    }
}

/* Contender i's dequantise f of kind against the scalar g: the bytes of n
 * values (mode 0: random; 1: float8 codes in a run, start random, so that
 * a head of 256 or more holds every code; q8_0's d special values, and
 * d_next++ for mode 2, which walks all 65536 float16 values), the input at
 * x_off (any byte), the float32 output at y_off, compared bit for bit. */
static void dequant_case(int i, int kind, rope_dequantise_fn f, rope_dequantise_fn g, int64_t n, int mode,
                         int64_t x_off, int64_t y_off)
{
    static unsigned char in[2 * ROPE_MAX_STAGE_DIM];
    static float init[ROPE_MAX_STAGE_DIM], out[2][ROPE_MAX_STAGE_DIM];
    static uint16_t d_next;
    const int64_t nb = quant_bytes(kind, n);
    const unsigned start = (unsigned)next();
    for (int64_t k = 0; k < nb; k++)
        in[k] = (unsigned char)(mode == 1 && kind == ROPE_QUANT_FP8_E4M3 ? start + (unsigned)k : next());
    if (kind == ROPE_QUANT_Q8_0)
        for (int64_t b = 0; b < nb; b += ROPE_Q8_0_BYTES) {
            static const uint16_t special[] = {0x7C00u, 0xFC00u, 0x7C01u, 0x7DFFu, 0x7E00u, 0xFE01u, 0x7FFFu,
                                               0x0001u, 0x03FFu, 0x0400u, 0x0000u, 0x8000u, 0x7BFFu, 0x3C00u};
            uint16_t d = (uint16_t)next();
            if (mode == 1)
                d = special[next() % (sizeof special / sizeof special[0])];
            else if (mode == 2)
                d = d_next++;
            memcpy(in + b, &d, 2);
        }
    for (int64_t k = 0; k < n; k++)
        init[k] = rope_bits_f32((uint32_t)next());
    const float scale = dequant_scale();
    for (int r = 0; r < 16; r++)
        guard[next() % GUARD] = (unsigned char)next();
    for (int run = 0; run < 2; run++) {
        lay(0, x_off, in, nb);
        lay(1, y_off, (const unsigned char *)init, n * 4);
        unsigned char *x = work[0] + GUARD + x_off;
        float *y = (float *)(void *)(work[1] + GUARD + y_off);
        (run ? f : g)(x, n, scale, y);
        if ((!guards_ok(0, x_off, nb) || !guards_ok(1, y_off, n * 4) || memcmp(x, in, (size_t)nb) != 0) &&
            n_guard_fail++ < 20)
            printf("GUARD BYTES OR INPUT WRITTEN by the %s dequantise: %s n=%lld x_off=%lld y_off=%lld\n",
                   run ? C[i].name : "scalar", QUANT_NAMES[kind], (long long)n, (long long)x_off, (long long)y_off);
        memcpy(out[run], y, (size_t)(n * 4));
    }
    C[i].quant_cases++;
    if (memcmp(out[0], out[1], (size_t)(n * 4)) != 0 && C[i].fails++ < 20) {
        int64_t k = 0;
        while (rope_f32_bits(out[0][k]) == rope_f32_bits(out[1][k]))
            k++;
        printf("MISMATCH %s: dequantise %s n=%lld mode %d scale 0x%08X: value %lld is 0x%08X, scalar 0x%08X\n",
               C[i].name, QUANT_NAMES[kind], (long long)n, mode, (unsigned)rope_f32_bits(scale), (long long)k,
               (unsigned)rope_f32_bits(out[1][k]), (unsigned)rope_f32_bits(out[0][k]));
    }
}

/* Every contender's own quantisers (those that are not the scalar ones, each
 * function once) against the scalar ones, bit for bit, NaNs included (the
 * scalar kernels fix every NaN they store): int8 and float8 at every even n
 * up to 80 and longer ones up to ROPE_MAX_STAGE_DIM (the tails of every
 * vector width), q8_0 at 1..8 blocks and more; every input profile at
 * several offsets; dequantise of random bytes, every float8 code and every
 * float16 d of q8_0. */
static void check_quants(void)
{
    const rope_kernels *s = rope_isa_kernels(0);
    int64_t lengths[80];
    for (int i = 0; i < n_contenders; i++) {
        if (!C[i].kernels)
            continue;
        for (int kind = 1; kind < ROPE_N_QUANTS; kind++) {
            const rope_quantise_fn fq = C[i].kernels->quantise[kind], gq = s->quantise[kind];
            const rope_dequantise_fn fd = C[i].kernels->dequantise[kind], gd = s->dequantise[kind];
            int seen_q = fq == gq, seen_d = fd == gd;
            for (int j = 0; j < i; j++) {
                seen_q |= C[j].kernels && C[j].kernels->quantise[kind] == fq;
                seen_d |= C[j].kernels && C[j].kernels->dequantise[kind] == fd;
            }
            int n_lengths = 0;
            if (kind == ROPE_QUANT_Q8_0) {
                const int64_t blocks[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 33, 64, 128};
                for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++)
                    lengths[n_lengths++] = blocks[k] * ROPE_Q8_0_VALUES;
            } else {
                for (int64_t n = 2; n <= 80; n += 2)
                    lengths[n_lengths++] = n;
                const int64_t more[] = {94, 96, 98, 126, 128, 130, 190, 192, 254, 256, 258, 510, 512, 1000, 1024,
                                        2046, 4094, 4096};
                for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
                    lengths[n_lengths++] = more[k];
            }
            for (int li = 0; li < n_lengths; li++) {
                const int64_t n = lengths[li];
                const int reps = n <= 256 ? 3 : 1;
                for (int t = 0; t < reps * Q_PROFILES; t++) {
                    const int64_t xo = (int64_t)(next() % 16) * 4, yo = (int64_t)(next() % MAX_OFF);
                    if (!seen_q)
                        quant_case(i, kind, fq, gq, n, t % Q_PROFILES, xo, yo);
                    if (!seen_d)
                        dequant_case(i, kind, fd, gd, n, t % 2, yo, xo);
                }
            }
            if (!seen_d && kind == ROPE_QUANT_Q8_0) /* every float16 d: 65536 blocks */
                for (int t = 0; t < 65536 / 128; t++)
                    dequant_case(i, kind, fd, gd, 128 * ROPE_Q8_0_VALUES, 2, (int64_t)(next() % MAX_OFF),
                                 (int64_t)(next() % 16) * 4);
        }
    }
}

int main(int argc, char **argv)
{
    find_contenders();
    if (argc > 1 && strcmp(argv[1], "--isas") == 0) {
        puts("scalar");
        for (int i = 0; i < n_contenders; i++)
            puts(C[i].name);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--isa-features") == 0) { /* supported or not */
        for (int isa = 0; isa < rope_isa_count(); isa++) {
            printf("%s", rope_isa_name(isa));
            for (int b = isa; b >= 0; b = rope_isa_base(b))
                if (*rope_isa_features(b))
                    printf(" %s", rope_isa_features(b));
            putchar('\n');
        }
        return 0;
    }
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    for (int i = 0; i < GUARD; i++)
        guard[i] = (unsigned char)next();
    enum { N_TAB = 2048 };
    /* rows of each arithmetic type: float for float32/16/bfloat16, double for float64 */
    static float c[N_TAB], s[N_TAB];
    static double cd[N_TAB], sd[N_TAB];
    for (int i = 0; i < N_TAB; i++) {
        const double a = uniform() * 6.283185307179586, scale = i % 7 ? 1.0 : 1.3;
        cd[i] = i % 13 ? scale * cos(a) : 1.0;
        sd[i] = i % 13 ? scale * sin(a) : 0.0;
        c[i] = (float)cd[i];
        s[i] = (float)sd[i];
    }
    int64_t halves[80];
    int n_halves = 0;
    for (int64_t h = 1; h <= 70; h++)
        halves[n_halves++] = h;
    const int64_t more[] = {128, 256, 512, 513, 600, 1030};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        halves[n_halves++] = more[i];

    printf("instruction sets compared with scalar:");
    for (int i = 0; i < n_contenders; i++)
        printf(" %s", C[i].name);
    printf("%s\n", n_contenders ? "" : " none (this machine runs the scalar kernels only)");
    long total = 0;
    for (int dtype = 0; dtype < ROPE_N_DTYPES; dtype++) {
        /* elements per 32 bytes (head gaps) and per 64 bytes (offsets) */
        const int64_t es = (int64_t)rope_dtype_size(dtype), v = 32 / es, v64 = MAX_OFF / es;
        long cases = 0;
        for (int layout = 0; layout < 2; layout++)
            for (int inverse = 0; inverse < 2; inverse++)
                for (int hi = 0; hi < n_halves; hi++) {
                    const int64_t half = halves[hi], d = 2 * half;
                    /* heads, x_sh, y_sh: one; back to back (full rotary); gaps of
                     * odd sizes; gaps that keep heads 32-byte aligned; heads in
                     * reverse order (negative strides) */
                    const int64_t heads[5][3] = {{1, d, d}, {32, d, d}, {3, d + 5, d + 1},
                                                 {4, (d + 1 + v - 1) / v * v, (d + 1 + v - 1) / v * v + v},
                                                 {3, -(d + 3), -(d + 1)}};
                    for (int hc = 0; hc < 5; hc++)
                        for (int64_t xo = 0; xo < MAX_OFF; xo = next_offset(xo, es))
                            for (int in_place = 0; in_place < 2; in_place++, cases++)
                                one_case(dtype, layout, inverse, half, heads[hc][0], heads[hc][1],
                                         heads[hc][2], xo, (xo / es * 5 % v64) * es, in_place,
                                         ROPE_WIDE_ROWS[dtype] ? (const void *)cd : c,
                                         ROPE_WIDE_ROWS[dtype] ? (const void *)sd : s);
                }
        printf("%-8s %6ld cases\n", NAMES[dtype], cases);
        total += cases;
    }
    check_passes();
    check_stages();
    check_duplicate_row();
    check_norm_rot();
    check_quants();
    int failed = n_guard_fail != 0;
    for (int i = 0; i < n_contenders; i++) {
        const char *vs = C[i].ref == -1 ? "scalar" : C[i].ref == -2 ? "scalar (exact)" : C[C[i].ref].name;
        printf("%-16s %7ld rotation, %4ld pass, %6ld stage and %5ld quantiser checks of its own kernels "
               "against %s: %ld mismatching; %ld differing only in a NaN's bits (%ld of them stage checks, %ld "
               "norm_rot ones)\n",
               C[i].name, C[i].cases, C[i].pass_cases, C[i].stage_cases, C[i].quant_cases, vs, C[i].fails,
               C[i].nan_only, C[i].stage_nan_only, C[i].norm_rot_nan_only);
        failed |= C[i].fails != 0;
    }
    if (n_guard_fail)
        printf("%ld runs wrote outside their buffers\n", n_guard_fail);
    printf("%ld cases per kernel, %s\n", total, failed ? "FAILED" : "every kernel bit-identical to scalar");
    return failed;
}
