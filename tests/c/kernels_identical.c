/* Every AVX2 rotation kernel against the scalar one, called directly: all
 * storage types, both layouts, both directions, half = 1..70 and longer
 * heads (the vector steps' tails, the 512-pair stack chunks), in place and
 * not, x and y at every element-aligned offset within 32 bytes, one head,
 * many heads back to back, heads with gaps, NaN/Inf/subnormal inputs. Whole
 * buffers are compared byte for byte, gaps included. x86-64 only.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/kernels_identical.c csrc/[a-z]*.c -lm -o build/kernels_identical
 *
 * With -DBASELINE the kernels of another revision REV must give the same
 * bits too (its scalar kernels as today's, its AVX2 kernels as today's),
 * linked in under the names base_<name>:
 *
 *   B=build/base; mkdir -p $B && git archive REV csrc | tar -x -C $B
 *   for f in $B/csrc/rotate*.c; do cc <flags above> -I$B/csrc -c $f -o $f.o; done
 *   nm -g --defined-only $B/csrc/rotate*.o | awk '/ T rope_rot_/ {print $3, "base_" $3}' > $B/map
 *   for o in $B/csrc/rotate*.o; do objcopy --redefine-syms=$B/map $o; done
 *   cc <flags above> -DBASELINE tests/c/kernels_identical.c csrc/[a-z]*.c
 *      $B/csrc/rotate*.o -lm -o build/kernels_identical
 *
 * A NaN's sign and payload are left to the platform by IEEE, and the vector
 * and scalar instructions may pick them differently: where both sides hold
 * a NaN the AVX2 and scalar results count as equal (reported separately);
 * against the baseline every bit must match. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "kernels.h"

extern const rope_isa rope_isa_avx2; /* isa_avx2.c */

#define DECLARE_(code, sfx, T, A, name)                                        \
    void rope_rot_il_##sfx##_avx2(ROPE_ROT_PARAMS);                            \
    void rope_rot_sh_##sfx##_avx2(ROPE_ROT_PARAMS);                            \
    void base_rope_rot_il_##sfx##_avx2(ROPE_ROT_PARAMS);                       \
    void base_rope_rot_sh_##sfx##_avx2(ROPE_ROT_PARAMS);                       \
    void base_rope_rot_il_##sfx##_scalar(ROPE_ROT_PARAMS);                     \
    void base_rope_rot_sh_##sfx##_scalar(ROPE_ROT_PARAMS);
ROPE_STORAGE_TYPES(DECLARE_)

enum { N_IMPL = 4 }; /* scalar, avx2, baseline scalar, baseline avx2 */
#ifdef BASELINE
#define BASE_(name) base_##name
#define N_RUN 4
#else
#define BASE_(name) NULL
#define N_RUN 2
#endif
#define ROW_(code, sfx, T, A, name)                                            \
    [code] = {{rope_rot_il_##sfx##_scalar, rope_rot_il_##sfx##_avx2,           \
               BASE_(rope_rot_il_##sfx##_scalar), BASE_(rope_rot_il_##sfx##_avx2)}, \
              {rope_rot_sh_##sfx##_scalar, rope_rot_sh_##sfx##_avx2,           \
               BASE_(rope_rot_sh_##sfx##_scalar), BASE_(rope_rot_sh_##sfx##_avx2)}},
static const rope_rot_fn KERNELS[ROPE_N_DTYPES][2][N_IMPL] = {ROPE_STORAGE_TYPES(ROW_)};
#define NAME_(code, sfx, T, A, name) [code] = name,
static const char *const NAMES[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(NAME_)};

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
    } else { /* 16-bit: random bits now and then (NaN payloads included) */
        const float f = (float)value();
        uint16_t h = (uint16_t)next();
        if (r >= 4)
            h = dtype == ROPE_F16 ? rope_f32_to_f16(f) : rope_f32_to_bf16(f);
        memcpy(p + 2 * k, &h, 2);
    }
}
static int is_nan(int dtype, const unsigned char *p, int64_t k)
{
    uint64_t u = 0;
    switch (dtype) {
    case ROPE_F32: memcpy(&u, p + 4 * k, 4); return (u & 0x7FFFFFFFu) > 0x7F800000u;
    case ROPE_F64: memcpy(&u, p + 8 * k, 8); return (u & ~(1ull << 63)) > 0x7FF0000000000000ull;
    case ROPE_F16: memcpy(&u, p + 2 * k, 2); return (u & 0x7FFFu) > 0x7C00u;
    default: memcpy(&u, p + 2 * k, 2); return (u & 0x7FFFu) > 0x7F80u;
    }
}

static long n_cases, n_nan_only, n_fail;

/* Elements of a buffer of n_heads heads sh apart: the heads and their gaps. */
static int64_t span(int64_t n_heads, int64_t sh, int64_t half) { return (n_heads - 1) * sh + 2 * half; }

static void one_case(int dtype, int layout, int inverse, int64_t half, int64_t n_heads,
                     int64_t x_sh, int64_t y_sh, int64_t x_off, int64_t y_off, int in_place,
                     const void *c, const void *s)
{
    enum { MAXB = 1 << 20 };
    static unsigned char init[2][MAXB], out[N_IMPL][2][MAXB];
    static _Alignas(64) unsigned char work[2][MAXB + 64];
    const int64_t es = ROPE_ELEM_SIZE[dtype];
    const int64_t nx = span(n_heads, x_sh, half), ny = in_place ? 0 : span(n_heads, y_sh, half);
    if (nx * es > MAXB || ny * es > MAXB)
        abort();
    for (int64_t k = 0; k < nx; k++)
        put(dtype, init[0], k);
    for (int64_t k = 0; k < ny; k++)
        put(dtype, init[1], k);
    for (int impl = 0; impl < N_RUN; impl++) {
        unsigned char *x = work[0] + x_off, *y = in_place ? x : work[1] + y_off;
        memcpy(x, init[0], (size_t)(nx * es));
        memcpy(y, init[1], (size_t)(ny * es));
        KERNELS[dtype][layout][impl](x, y, x_sh, in_place ? x_sh : y_sh, n_heads, c, s, half,
                                     inverse);
        memcpy(out[impl][0], x, (size_t)(nx * es));
        memcpy(out[impl][1], y, (size_t)(ny * es));
    }
    n_cases++;
    int nan_only = 0, fail = 0;
    for (int impl = 1; impl < N_RUN; impl++) {
        const int ref = impl == 3 ? 1 : 0; /* baseline avx2 vs avx2, others vs scalar */
        for (int b = 0; b < 2; b++) {
            const int64_t n = b ? ny : nx;
            if (memcmp(out[impl][b], out[ref][b], (size_t)(n * es)) == 0)
                continue;
            for (int64_t k = 0; k < n; k++) {
                if (memcmp(out[impl][b] + k * es, out[ref][b] + k * es, (size_t)es) == 0)
                    continue;
                if (impl == 1 && is_nan(dtype, out[1][b], k) && is_nan(dtype, out[0][b], k))
                    nan_only = 1;
                else
                    fail = 1;
            }
        }
    }
    n_nan_only += nan_only;
    if (fail && n_fail++ < 20)
        printf("MISMATCH %s %s%s half=%lld heads=%lld x_sh=%lld y_sh=%lld x_off=%lld y_off=%lld %s\n",
               NAMES[dtype], layout ? "split-half" : "interleaved", inverse ? " inverse" : "",
               (long long)half, (long long)n_heads, (long long)x_sh, (long long)y_sh,
               (long long)x_off, (long long)y_off, in_place ? "in place" : "out of place");
}

int main(void)
{
    if (!rope_isa_avx2.supported()) {
        puts("skipped: this CPU cannot run the AVX2 kernels");
        return 0;
    }
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

    for (int dtype = 0; dtype < ROPE_N_DTYPES; dtype++) {
        const int64_t es = ROPE_ELEM_SIZE[dtype], v = 32 / es; /* elements per 32 bytes */
        const long fails_before = n_fail, cases_before = n_cases;
        for (int layout = 0; layout < 2; layout++)
            for (int inverse = 0; inverse < 2; inverse++)
                for (int hi = 0; hi < n_halves; hi++) {
                    const int64_t half = halves[hi], d = 2 * half;
                    /* heads, x_sh, y_sh: one; back to back (full rotary); gaps of
                     * odd sizes; gaps that keep heads 32-byte aligned */
                    const int64_t heads[4][3] = {{1, d, d}, {32, d, d}, {3, d + 5, d + 1},
                                                 {4, (d + 1 + v - 1) / v * v, (d + 1 + v - 1) / v * v + v}};
                    for (int hc = 0; hc < 4; hc++)
                        for (int64_t xo = 0; xo < 32; xo += es)
                            for (int in_place = 0; in_place < 2; in_place++)
                                one_case(dtype, layout, inverse, half, heads[hc][0], heads[hc][1],
                                         heads[hc][2], xo, (xo / es * 5 % v) * es, in_place,
                                         dtype == ROPE_F64 ? (const void *)cd : c,
                                         dtype == ROPE_F64 ? (const void *)sd : s);
                }
        printf("%-8s %6ld cases, %ld mismatching\n", NAMES[dtype], n_cases - cases_before,
               n_fail - fails_before);
    }
    printf("%ld cases (%s), %ld mismatching; %ld where AVX2 and scalar differ only in a NaN's bits\n",
           n_cases, N_RUN == 4 ? "scalar, AVX2 and the baseline's two" : "scalar and AVX2", n_fail,
           n_nan_only);
    return n_fail != 0;
}
