/* Coverage-guided fuzzer for the C entry points (libFuzzer interface).
 *
 * The input bytes choose every argument of rope_rotate and of the table
 * functions: dtype and layout codes (valid or not), dims, counts, signed
 * strides, positions or offsets, tables or on-the-fly angles, frequencies
 * (NaN and huge included), thread counts. Buffers are allocated to exactly
 * the span the strides reach, so AddressSanitizer reports any access outside
 * them. For each accepted call the scalar kernel and the best kernel must
 * reach the same status and, where rows do not overlap, the same bits.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by `make fuzz`; the
 * replay driver (replay.c) runs saved inputs with gcc in the test suite.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyrope.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static uint64_t take(reader *r, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | (r->n ? *r->p : 0);
        if (r->n) {
            r->p++;
            r->n--;
        }
    }
    return v;
}

static int64_t take_small(reader *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(take(r, 2) % (uint64_t)(hi - lo + 1));
}

/* A stride: mostly the natural one, sometimes anything small and signed. */
static int64_t take_stride(reader *r, int64_t natural)
{
    switch (take(r, 1) % 4) {
    case 0: return natural;
    case 1: return -natural;
    case 2: return 0;
    default: return take_small(r, -300, 300);
    }
}

static double take_freq(reader *r)
{
    switch (take(r, 1) % 8) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return 1e300;
    case 3: return -1.0;
    default: return ldexp((double)take(r, 4), -32); /* in [0, 1) */
    }
}

/* Smallest and largest element offset reached, or 0 if beyond 2^20. */
static int span(const int64_t n[3], const int64_t s[3], int64_t extent,
                int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = extent;
    for (int k = 0; k < 3; k++) {
        if (n[k] <= 0)
            return 0;
        const int64_t reach = (n[k] - 1) * s[k];
        if (reach < 0)
            *lo += reach;
        else
            *hi += reach;
    }
    return *hi - *lo <= (1 << 20);
}

/* Bitwise equal, or both NaN (NaN payloads and signs may differ between
 * scalar and vector instructions; IEEE leaves them unspecified). */
static int same_values(const uint8_t *a, const uint8_t *b, int64_t count, int dtype)
{
    for (int64_t i = 0; i < count; i++) {
        if (dtype == ROPE_F64) {
            double u, v;
            memcpy(&u, a + 8 * i, 8);
            memcpy(&v, b + 8 * i, 8);
            if (memcmp(&u, &v, 8) != 0 && !(isnan(u) && isnan(v)))
                return 0;
        } else if (dtype == ROPE_F32) {
            float u, v;
            memcpy(&u, a + 4 * i, 4);
            memcpy(&v, b + 4 * i, 4);
            if (memcmp(&u, &v, 4) != 0 && !(isnan(u) && isnan(v)))
                return 0;
        } else {
            uint16_t u, v;
            memcpy(&u, a + 2 * i, 2);
            memcpy(&v, b + 2 * i, 2);
            const uint16_t exp = dtype == ROPE_F16 ? 0x7c00 : 0x7f80;
            const int nan_u = (u & exp) == exp && (u & (uint16_t)~(exp | 0x8000));
            const int nan_v = (v & exp) == exp && (v & (uint16_t)~(exp | 0x8000));
            if (u != v && !(nan_u && nan_v))
                return 0;
        }
    }
    return 1;
}

static int rows_disjoint(const int64_t n[3], const int64_t s[3], int64_t head_dim)
{
    /* Conservative: a strictly nested layout with no overlap between rows. */
    int64_t need = head_dim;
    int64_t order[3] = {2, 1, 0};
    for (int i = 0; i < 3; i++) {
        const int k = (int)order[i];
        const int64_t a = s[k] < 0 ? -s[k] : s[k];
        if (n[k] > 1 && a < need)
            return 0;
        if (n[k] > 1)
            need = a * n[k];
    }
    return 1;
}

static void fuzz_tables(reader *r)
{
    int64_t n_pos = take_small(r, -1, 40), n_freq = take_small(r, -1, 40);
    const int64_t np = n_pos > 0 ? n_pos : 1, nf = n_freq > 0 ? n_freq : 1;
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)np);
    double *w = malloc(sizeof(double) * (size_t)nf);
    float *c1 = malloc(sizeof(float) * (size_t)(np * nf));
    float *s1 = malloc(sizeof(float) * (size_t)(np * nf));
    float *c2 = malloc(sizeof(float) * (size_t)(np * nf));
    float *s2 = malloc(sizeof(float) * (size_t)(np * nf));
    for (int64_t i = 0; i < np; i++)
        pos[i] = (int64_t)take(r, 8) >> take_small(r, 0, 63);
    for (int64_t i = 0; i < nf; i++)
        w[i] = take_freq(r);
    const double scale = take(r, 1) % 5 == 0 ? NAN : 1.0 + ldexp((double)take(r, 2), -16);
    const int64_t start = (int64_t)take(r, 8) >> take_small(r, 0, 63);
    const int isa = rope_get_isa();
    for (int range = 0; range < 2; range++) {
        rope_set_isa(ROPE_ISA_SCALAR);
        int st1 = range ? rope_cos_sin_range_f32(start, n_pos, w, n_freq, scale, c1, s1)
                        : rope_cos_sin_f32(pos, n_pos, w, n_freq, scale, c1, s1);
        rope_set_isa(isa);
        int st2 = range ? rope_cos_sin_range_f32(start, n_pos, w, n_freq, scale, c2, s2)
                        : rope_cos_sin_f32(pos, n_pos, w, n_freq, scale, c2, s2);
        if (st1 != st2)
            abort(); /* error decisions must not depend on the kernel */
    }
    free(pos); free(w); free(c1); free(s1); free(c2); free(s2);
}

/* Big tokens, for inputs whose first byte is 0xB1 (no input saved before
 * this mode starts with it): the shapes for which the kernels take paths of
 * their own -- rotary_dim 128, a token's heads back to back with 512 pairs
 * or more, heads with gaps between them -- at every element-aligned
 * placement, with 1-3 threads. The values come from a generator seeded by
 * the input (the buffers are larger than inputs). Scalar and best kernel
 * must agree, and every element outside the rows (before, between heads,
 * after) must come back unchanged; AddressSanitizer watches the ends. */
static uint64_t next_bits(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 16;
}

static void fuzz_big(reader *r)
{
    static const int64_t dims[5] = {64, 96, 128, 136, 256};
    const int dtype = (int)take_small(r, 0, 3), layout = (int)take_small(r, 0, 1);
    const int inverse = (int)(take(r, 1) & 1), in_place = (int)(take(r, 1) & 1);
    const int64_t head_dim = dims[take(r, 1) % 5];
    const int64_t rotary_dim = take(r, 1) & 1 ? head_dim : 2 * take_small(r, 1, head_dim / 2);
    const int64_t heads = take_small(r, 1, 40), seq = take_small(r, 1, 3);
    const int64_t gap = 2 * (int64_t)(take(r, 1) % 4), lead = take_small(r, 0, 31);
    const int threads = (int)take_small(r, 1, 3), otf = (int)(take(r, 1) & 1);
    const int64_t offset = (int64_t)(take(r, 4) % 2147483000u);
    uint64_t state = take(r, 8);
    const size_t esize = dtype == ROPE_F64 ? 8 : dtype == ROPE_F32 ? 4 : 2;
    const int64_t stride = head_dim + gap, rows = seq * heads * stride;
    const size_t bytes = (size_t)(lead + rows + 16) * esize;
    uint8_t *orig = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
    uint8_t *xa = malloc(bytes), *xb = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        orig[i] = (uint8_t)next_bits(&state);
    memcpy(a, orig, bytes);
    memcpy(b, orig, bytes);
    memcpy(xa, orig, bytes);
    memcpy(xb, orig, bytes);
    const int64_t half = rotary_dim / 2;
    double w[128];
    for (int64_t i = 0; i < half; i++)
        w[i] = pow(10000.0, -2.0 * (double)i / (double)rotary_dim);
    float *cos = malloc(sizeof(float) * (size_t)(seq * half)), *sin = malloc(sizeof(float) * (size_t)(seq * half));
    if (rope_cos_sin_range_f32(offset, seq, w, half, 1.0, cos, sin) != ROPE_OK)
        abort();
    const int isa = rope_get_isa();
    uint8_t *res[2] = {a, b};
    uint8_t *src[2] = {xa, xb};
    for (int k = 0; k < 2; k++) {
        rope_set_isa(k ? isa : ROPE_ISA_SCALAR);
        uint8_t *x = (in_place ? res[k] : src[k]) + lead * (int64_t)esize;
        uint8_t *o = res[k] + lead * (int64_t)esize;
        const int st = rope_rotate(dtype, layout, inverse, x, o, 1, seq, heads, head_dim, rotary_dim,
                                   rows, heads * stride, stride, rows, heads * stride, stride,
                                   NULL, 0, 0, offset, otf ? NULL : cos, otf ? NULL : sin,
                                   offset, seq, w, 1.0, threads);
        if (st != ROPE_OK)
            abort(); /* every argument here is valid */
    }
    rope_set_isa(isa);
    if (!same_values(a, b, (int64_t)(bytes / esize), dtype))
        abort(); /* scalar and best kernel must agree bit for bit */
    for (int64_t e = 0; e < (int64_t)(bytes / esize); e++) {
        const int64_t j = e - lead;
        const int in_rows = j >= 0 && j < rows && j % stride < rotary_dim;
        if (!in_rows && memcmp(a + e * (int64_t)esize, orig + e * (int64_t)esize, esize) != 0)
            abort(); /* nothing outside the rotated coordinates is written */
    }
    if (!in_place && (memcmp(xa, orig, bytes) != 0 || memcmp(xb, orig, bytes) != 0))
        abort(); /* the input of an out-of-place call is left alone */
    free(orig); free(a); free(b); free(xa); free(xb); free(cos); free(sin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    const uint64_t first = take(&r, 1);
    if (first == 0xB1) {
        fuzz_big(&r);
        return 0;
    }
    if (first % 4 == 0) {
        fuzz_tables(&r);
        return 0;
    }
    const int dtype = (int)take_small(&r, -1, 4);
    const int layout = (int)take_small(&r, -1, 2);
    const int inverse = (int)(take(&r, 1) & 1);
    const int64_t head_dim = take_small(&r, -2, 80);
    const int64_t rotary_dim = take_small(&r, -2, 82);
    const int64_t n[3] = {take_small(&r, -1, 4), take_small(&r, -1, 6), take_small(&r, -1, 4)};
    const int64_t hd = head_dim > 0 ? head_dim : 1;
    const int64_t xs[3] = {take_stride(&r, n[1] * n[2] * hd), take_stride(&r, n[2] * hd),
                           take_stride(&r, hd)};
    const int in_place = (int)(take(&r, 1) & 1);
    const int64_t os[3] = {take_stride(&r, n[1] * n[2] * hd), take_stride(&r, n[2] * hd),
                           take_stride(&r, hd)};
    const size_t esize = dtype == ROPE_F64 ? 8 : dtype == ROPE_F32 ? 4 : 2;

    int64_t xlo, xhi, olo, ohi;
    if (!span(n, xs, hd, &xlo, &xhi) || !span(n, in_place ? xs : os, hd, &olo, &ohi))
        return 0; /* the caller could not have such buffers: nothing to test */
    uint8_t *xbuf = malloc((size_t)(xhi - xlo) * esize);
    uint8_t *obuf = malloc((size_t)(ohi - olo) * esize);
    uint8_t *obuf2 = malloc((size_t)(ohi - olo) * esize);
    for (int64_t i = 0; i < (xhi - xlo) * (int64_t)esize; i++)
        xbuf[i] = (uint8_t)take(&r, 1);
    memset(obuf, 0, (size_t)(ohi - olo) * esize);

    /* positions: NULL (offset) or an array with its own strides */
    const int use_pos = (int)(take(&r, 1) & 1);
    int64_t pos[4 * 6];
    for (int i = 0; i < 24; i++)
        pos[i] = take_small(&r, -5, 70) - (take(&r, 1) % 9 == 0 ? (int64_t)1 << 40 : 0);
    const int64_t p_sb = take(&r, 1) & 1 ? 6 : 0, p_ss = 1;
    const int64_t offset = take(&r, 1) % 7 == 0 ? (int64_t)take(&r, 8) : take_small(&r, -3, 40);

    /* angles: a table over [table_start, table_start + rows) or on the fly */
    const int otf = (int)(take(&r, 1) & 1);
    const int64_t table_start = take_small(&r, -10, 30), table_rows = take_small(&r, -1, 80);
    const int64_t half = rotary_dim > 0 ? rotary_dim / 2 : 1;
    const int64_t tr = table_rows > 0 ? table_rows : 1;
    float *cosb = malloc(sizeof(float) * (size_t)(tr * half));
    float *sinb = malloc(sizeof(float) * (size_t)(tr * half));
    for (int64_t i = 0; i < tr * half; i++) {
        cosb[i] = (float)take(&r, 1) / 128.0f - 1.0f;
        sinb[i] = (float)take(&r, 1) / 128.0f - 1.0f;
    }
    double w[96];
    for (int i = 0; i < 96; i++)
        w[i] = i < 8 ? take_freq(&r) : ldexp(1.0, -i / 8);
    const int threads = (int)take_small(&r, 0, 4);

    /* now and then a pointer one byte off its element alignment: refused */
    const int misalign = take(&r, 1) % 16 == 0;
    uint8_t *x0 = xbuf - xlo * (int64_t)esize + misalign;
    uint8_t *ob = in_place ? xbuf : obuf;
    uint8_t *o0 = ob - (in_place ? xlo : olo) * (int64_t)esize;
    const int64_t *o_s = in_place ? xs : os;
    const float *ct = otf ? NULL : cosb, *st = otf ? NULL : sinb;
    uint8_t *xcopy = malloc((size_t)(xhi - xlo) * esize);
    memcpy(xcopy, xbuf, (size_t)(xhi - xlo) * esize);

    const int isa = rope_get_isa();
    rope_set_isa(ROPE_ISA_SCALAR);
    const int st1 = rope_rotate(dtype, layout, inverse, x0, o0, n[0], n[1], n[2], head_dim,
                                rotary_dim, xs[0], xs[1], xs[2], o_s[0], o_s[1], o_s[2],
                                use_pos ? pos : NULL, p_sb, p_ss, offset, ct, st,
                                table_start, table_rows, w, 1.0, threads);
    const int disjoint = rows_disjoint(n, xs, hd) && rows_disjoint(n, o_s, hd);
    if (disjoint)
        memcpy(obuf2, ob, (size_t)((in_place ? xhi - xlo : ohi - olo)) * esize);
    /* again with the best kernel, from the same input */
    memcpy(xbuf, xcopy, (size_t)(xhi - xlo) * esize);
    if (!in_place)
        memset(obuf, 0, (size_t)(ohi - olo) * esize);
    rope_set_isa(isa);
    const int st2 = rope_rotate(dtype, layout, inverse, x0, o0, n[0], n[1], n[2], head_dim,
                                rotary_dim, xs[0], xs[1], xs[2], o_s[0], o_s[1], o_s[2],
                                use_pos ? pos : NULL, p_sb, p_ss, offset, ct, st,
                                table_start, table_rows, w, 1.0, threads);
    if (st1 != st2)
        abort(); /* error decisions must not depend on the kernel */
    if (st1 == ROPE_OK && disjoint &&
        !same_values(obuf2, ob, in_place ? xhi - xlo : ohi - olo, dtype))
        abort(); /* scalar and SIMD kernels must agree bit for bit */
    if (st1 != ROPE_OK && memcmp(xbuf, xcopy, (size_t)(xhi - xlo) * esize) != 0)
        abort(); /* nothing may be written before an error */
    if (st1 != ROPE_OK && !in_place)
        for (int64_t i = 0; i < (ohi - olo) * (int64_t)esize; i++)
            if (obuf[i] != 0)
                abort();

    free(xbuf); free(obuf); free(obuf2); free(xcopy); free(cosb); free(sinb);
    return 0;
}
