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
 * same way.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/kernels_identical.c $(find csrc -name '*.c') -lm -o build/kernels_identical
 *
 * (`make check-kernels`; `make check-aarch64` also builds it for aarch64 and
 * runs it under qemu.) `kernels_identical --isas` only lists the supported
 * entries, one per line; `--isa-features` lists every entry of the registry,
 * one per line, with the CPU flags it needs (its bases' included), from
 * which the Makefile derives which entries a CPU must offer. Every storage
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

/* ---- the contenders ------------------------------------------------------- */

/* A set of kernels under test and what it must match: the scalar kernels
 * (ref -1, a NaN's bits may differ) or another contender (exact). */
typedef struct {
    const char *name;
    rope_rot_fn rot[ROPE_N_DTYPES][2];
    rope_pass_fn pass;
    int ref;
    long cases, pass_cases, fails, nan_only;
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
                   run_name[r], NAMES[dtype], layout ? "split-half" : "interleaved",
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
                   C[i].name, NAMES[dtype], layout ? "split-half" : "interleaved",
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
                        for (int64_t xo = 0; xo < MAX_OFF; xo += es)
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
    int failed = n_guard_fail != 0;
    for (int i = 0; i < n_contenders; i++) {
        const char *vs = C[i].ref == -1 ? "scalar" : C[i].ref == -2 ? "scalar (exact)" : C[C[i].ref].name;
        printf("%-16s %7ld rotation and %4ld pass checks of its own kernels against %s: "
               "%ld mismatching; %ld differing only in a NaN's bits\n",
               C[i].name, C[i].cases, C[i].pass_cases, vs, C[i].fails, C[i].nan_only);
        failed |= C[i].fails != 0;
    }
    if (n_guard_fail)
        printf("%ld runs wrote outside their buffers\n", n_guard_fail);
    printf("%ld cases per kernel, %s\n", total, failed ? "FAILED" : "every kernel bit-identical to scalar");
    return failed;
}
