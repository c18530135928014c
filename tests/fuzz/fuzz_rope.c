/* Coverage-guided fuzzer for the C entry points (libFuzzer interface).
 *
 * The input bytes choose every argument of rope_rotate and of the table
 * functions: storage type and layout codes (valid or not), dims, counts,
 * signed strides (huge ones included), 0 to 3 tensors (or -1), position
 * sources (offset, list, sectioned with 0..ROPE_MAX_COMPONENTS+1 components
 * and maps with out-of-range entries, unknown source codes), tables or
 * on-the-fly angles, frequencies and scales (NaN, infinite and out of range
 * included), thread counts, NULL and misaligned pointers. Buffers are
 * allocated to exactly the span the strides reach, so AddressSanitizer
 * reports any access outside them.
 *
 * For each call, every supported instruction set of the registry must reach
 * the same status as the scalar kernels (entry 0) and, where output rows do
 * not overlap, the same bits. Besides, from the scalar run:
 *   - the status is ROPE_OK exactly when pyrope.h says the call is valid;
 *   - a failed call writes nothing; a successful one writes nothing outside
 *     the rotated coordinates and the copied tails, and never writes x of an
 *     out-of-place tensor;
 *   - q and k in one call give what each gives alone;
 *   - a sectioned call gives, pair by pair, what the position-list call of
 *     that pair's component gives;
 *   - tables and on-the-fly angles agree, and table rows do not depend on
 *     how the positions are split into runs;
 *   - with one input laid in the memory of an output or of an out-of-place
 *     x (positions, the pair map, table rows, frequencies, the tensor array,
 *     op, the angles; for the tables, positions or frequencies in cos_out or
 *     sin_out, or the two outputs meeting), a call is refused with
 *     ROPE_E_OVERLAP and nothing written exactly where pyrope.h says, and
 *     otherwise gives what it gives with the input in its own buffer.
 * Any violation aborts.
 *
 * Input modes, by the first byte: 0xB1 "big tokens" (fuzz_big), 0xB2
 * staged calls (fuzz_staged, rope_rotate_staged), 0xB3 quantised calls
 * (fuzz_quantised, rope_rotate_quantised), otherwise a multiple of
 * 4: tables (fuzz_tables), else rotation (fuzz_rotate). Each
 * mode reads the fields it had before the position sources and n_tensors
 * existed in the same order, and reads the new ones after them, with 0 (an
 * input that ended) meaning the old behaviour: saved inputs keep their
 * meaning.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by `make fuzz`; the
 * replay driver (replay.c) runs saved inputs with gcc in the test suite.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyrope.h"

/* ---- reading the input --------------------------------------------------- */

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

/* A stride: mostly the natural one, sometimes anything small and signed,
 * now and then one that overflows int64 when multiplied by a count. */
static int64_t take_stride(reader *r, int64_t natural)
{
    switch (take(r, 1) % 4) {
    case 0: return natural;
    case 1: return -natural;
    case 2: return 0;
    default: {
        const int64_t v = take_small(r, -300, 300);
        return v == 300 ? ((int64_t)1 << 62) + 1 : v == -300 ? INT64_MIN : v;
    }
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

/* A scale: sel 0 is the usual 1.0; the others reach both ends of the
 * allowed range, just past them, and what is never allowed. */
static double scale_of(unsigned sel)
{
    static const double SCALES[16] = {
        1.0, -1.0, 0.5, 1.2079441541679836, ROPE_MIN_SCALE, -ROPE_MIN_SCALE, ROPE_MAX_SCALE,
        -ROPE_MAX_SCALE, ROPE_MIN_SCALE * 0.5, ROPE_MAX_SCALE * 2.0, 0x1.fffffffffffffp-33,
        0x1.0000000000001p32, 0.0, -0.0, NAN, INFINITY};
    return SCALES[sel % 16];
}

/* A generator for data the input is too short to hold. */
static uint64_t next_bits(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 16;
}

/* ---- buffers --------------------------------------------------------------- */

/* malloc that aborts on failure; 0 bytes gives a block nothing may touch. */
static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p && bytes)
        abort();
    return p ? p : malloc(1);
}

#define MAX_SPAN (1 << 20)
enum { SPAN_OK, SPAN_HUGE, SPAN_OVERFLOW };

/* Element offsets [lo, hi) that an [n0][n1][n2][extent] array reaches under
 * strides s (which may be negative): nothing if a count is <= 0.
 * SPAN_OVERFLOW if an offset leaves int64, SPAN_HUGE if the span is larger
 * than a test can allocate. */
static int span(const int64_t n[3], const int64_t s[3], int64_t extent, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int k = 0; k < 3; k++)
        if (n[k] <= 0)
            return SPAN_OK;
    int64_t l = 0, h = extent;
    for (int k = 0; k < 3; k++) {
        int64_t reach;
        if (__builtin_mul_overflow(n[k] - 1, s[k], &reach))
            return SPAN_OVERFLOW;
        if (reach < 0 ? __builtin_add_overflow(l, reach, &l) : __builtin_add_overflow(h, reach, &h))
            return SPAN_OVERFLOW;
    }
    if ((uint64_t)h - (uint64_t)l > MAX_SPAN)
        return SPAN_HUGE;
    *lo = l;
    *hi = h;
    return SPAN_OK;
}

/* Bitwise equal, or both NaN (NaN payloads and signs may differ between
 * scalar and vector instructions; IEEE leaves them unspecified). A storage
 * type this file does not know: bitwise equal. */
static int same_value(const uint8_t *a, const uint8_t *b, int dtype, size_t esize)
{
    if (dtype != ROPE_F64 && dtype != ROPE_F32 && dtype != ROPE_F16 && dtype != ROPE_BF16)
        return memcmp(a, b, esize) == 0;
    if (dtype == ROPE_F64) {
        double u, v;
        memcpy(&u, a, 8);
        memcpy(&v, b, 8);
        return memcmp(&u, &v, 8) == 0 || (isnan(u) && isnan(v));
    }
    if (dtype == ROPE_F32) {
        float u, v;
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        return memcmp(&u, &v, 4) == 0 || (isnan(u) && isnan(v));
    }
    uint16_t u, v;
    memcpy(&u, a, 2);
    memcpy(&v, b, 2);
    const uint16_t exp = dtype == ROPE_F16 ? 0x7c00 : 0x7f80;
    const int nan_u = (u & exp) == exp && (u & (uint16_t)~(exp | 0x8000));
    const int nan_v = (v & exp) == exp && (v & (uint16_t)~(exp | 0x8000));
    return u == v || (nan_u && nan_v);
}

static int same_values(const uint8_t *a, const uint8_t *b, int64_t count, int dtype, size_t esize)
{
    for (int64_t i = 0; i < count; i++)
        if (!same_value(a + i * (int64_t)esize, b + i * (int64_t)esize, dtype, esize))
            return 0;
    return 1;
}

/* Do the [n0][n1][n2] rows of head_dim elements under strides s never
 * overlap? Conservative: a strictly nested layout. */
static int rows_disjoint(const int64_t n[3], const int64_t s[3], int64_t head_dim)
{
    int64_t need = head_dim;
    for (int k = 2; k >= 0; k--) {
        if (n[k] <= 1)
            continue;
        const int64_t a = s[k] < 0 ? -s[k] : s[k];
        if (a < need || a > MAX_SPAN)
            return 0;
        need = a * n[k];
    }
    return 1;
}

/* The supported instruction sets other than scalar (entry 0), in order. */
static int other_isas(int *isa)
{
    int n = 0;
    for (int i = 1; i < rope_isa_count(); i++)
        if (rope_isa_supported(i))
            isa[n++] = i;
    return n;
}

#define MAX_ISAS 64

static void check_status(int st)
{
    if (!rope_strerror(st))
        abort();
}

/* ---- tables ---------------------------------------------------------------- */

/* Is p a position the table functions accept? */
static int position_ok(int64_t p)
{
    return p >= -ROPE_MAX_POSITION && p <= ROPE_MAX_POSITION;
}

static int freqs_ok(const double *w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(w[i]) <= ROPE_MAX_INV_FREQ))
            return 0;
    return 1;
}

static int scale_ok(double scale)
{
    return fabs(scale) >= ROPE_MIN_SCALE && fabs(scale) <= ROPE_MAX_SCALE;
}

/* The table functions with inputs laid in their outputs (alias 1-4:
 * positions or frequencies in cos_out or sin_out) or outputs that meet
 * (5: the same array; 6: sin_out a few entries into cos_out), in float32
 * (list and range) and float64: a call valid with separate buffers must be
 * refused, every other call must get the same status, nothing written. */
static void fuzz_tables_alias(unsigned alias, uint64_t where, const int64_t *pos, int64_t np, const double *wf,
                              int64_t nfr, int64_t n_pos, int64_t n_freq, double scale, int64_t start,
                              float *c32, float *s32, double *c64, double *s64)
{
    const size_t entries = (size_t)(np * nfr);
    for (int kind = 0; kind < 3; kind++) {   /* list f32, range f32, list f64 */
        const size_t es = kind == 2 ? 8 : 4;
        uint8_t *co = kind == 2 ? (uint8_t *)c64 : (uint8_t *)c32, *so = kind == 2 ? (uint8_t *)s64 : (uint8_t *)s32;
        const size_t out_bytes = entries * es;
        const int64_t *p_arg = pos;
        const double *w_arg = wf;
        uint8_t *so_arg = so;
        uint8_t *host = alias % 2 ? co : so;
        size_t size = alias <= 2 ? sizeof(int64_t) * (size_t)np : sizeof(double) * (size_t)nfr;
        if (kind == 1 && alias <= 2)
            continue; /* a range has no positions */
        if (alias <= 4) {
            if (!size || size > out_bytes)
                continue;
            const size_t off = 8 * (size_t)(where % ((out_bytes - size) / 8 + 1));
            memcpy(host + off, alias <= 2 ? (const void *)pos : (const void *)wf, size);
            if (alias <= 2)
                p_arg = (const int64_t *)(const void *)(host + off);
            else
                w_arg = (const double *)(const void *)(host + off);
        } else {
            so_arg = alias == 5 ? co : co + es * (size_t)(where % 4);
            if ((size_t)(so_arg - co) >= out_bytes)
                continue; /* past cos_out: apart, and past its buffer */
        }
        /* the status with separate buffers (fresh outputs: nothing here may change) */
        void *tc = xmalloc(out_bytes), *ts = xmalloc(out_bytes);
        const int st_ref = kind == 0 ? rope_cos_sin_f32(pos, n_pos, wf, n_freq, scale, tc, ts)
                         : kind == 1 ? rope_cos_sin_range_f32(start, n_pos, wf, n_freq, scale, tc, ts)
                                     : rope_cos_sin_f64(pos, n_pos, wf, n_freq, scale, tc, ts);
        free(tc);
        free(ts);
        uint8_t *before_c = xmalloc(out_bytes), *before_s = xmalloc(out_bytes);
        memcpy(before_c, co, out_bytes);
        memcpy(before_s, so, out_bytes);
        const int st = kind == 0 ? rope_cos_sin_f32(p_arg, n_pos, w_arg, n_freq, scale, (float *)(void *)co,
                                                    (float *)(void *)so_arg)
                     : kind == 1 ? rope_cos_sin_range_f32(start, n_pos, w_arg, n_freq, scale, (float *)(void *)co,
                                                          (float *)(void *)so_arg)
                                 : rope_cos_sin_f64(p_arg, n_pos, w_arg, n_freq, scale, (double *)(void *)co,
                                                    (double *)(void *)so_arg);
        check_status(st);
        const int nonempty = n_pos > 0 && n_freq > 0;
        if (st_ref == ROPE_OK ? (nonempty ? st != ROPE_E_OVERLAP : st != ROPE_OK) : st == ROPE_OK)
            abort(); /* refused exactly when the separate call would be accepted */
        if (st != ROPE_OK && (memcmp(before_c, co, out_bytes) != 0 || memcmp(before_s, so, out_bytes) != 0))
            abort(); /* nothing written before an error */
        free(before_c);
        free(before_s);
    }
}

static void fuzz_tables(reader *r)
{
    int64_t n_pos = take_small(r, -1, 40);
    const int64_t n_freq = take_small(r, -1, 40);
    const int64_t np0 = n_pos > 0 ? n_pos : 1, nf = n_freq > 0 ? n_freq : 1;
    int64_t pool[40];
    double w[40];
    for (int64_t i = 0; i < np0; i++)
        pool[i] = (int64_t)take(r, 8) >> take_small(r, 0, 63);
    for (int64_t i = 0; i < nf; i++)
        w[i] = take_freq(r);
    const unsigned scale_sel = (unsigned)take(r, 1);
    const double scale = scale_sel % 5 == 0 ? (scale_sel < 128 ? NAN : scale_of(scale_sel >> 1))
                                            : 1.0 + ldexp((double)take(r, 2), -16);
    const int64_t start = (int64_t)take(r, 8) >> take_small(r, 0, 63);
    /* new fields: runs of consecutive positions (the dense-range kernel
     * takes runs of 48 or more), and a NULL or misaligned pointer */
    const unsigned runs = (unsigned)take(r, 1), fault = (unsigned)(take(r, 1) % 24);
    uint64_t state = take(r, 8);
    if (runs)
        n_pos = take_small(r, 0, 200);
    const int64_t np = n_pos > 0 ? n_pos : 0, nfr = n_freq > 0 ? n_freq : 0;
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)np);
    int64_t p = (int64_t)take(r, 8) >> (runs % 64);
    for (int64_t i = 0; i < np; i++) {
        if (!runs) {
            pos[i] = pool[i];
            continue;
        }
        const uint64_t b = next_bits(&state);
        p = b % 64 == 0 ? ((int64_t)(b >> 8) - ((int64_t)1 << 39)) >> (runs % 16) : p + 1;
        pos[i] = p;
    }
    /* a NULL or misaligned pointer for the fault chosen (1-7; else none):
     * refused before any access, so the buffers stay exact */
    double *wf = xmalloc(sizeof(double) * (size_t)nfr);
    memcpy(wf, w, sizeof(double) * (size_t)nfr);
    const size_t entries = (size_t)(np * nfr);
    float *c[2], *s[2];
    for (int k = 0; k < 2; k++) {
        c[k] = xmalloc(sizeof(float) * entries);
        s[k] = xmalloc(sizeof(float) * entries);
    }
    double *cd = xmalloc(sizeof(double) * entries), *sd = xmalloc(sizeof(double) * entries);
    const int64_t *pos_arg = fault == 1 ? NULL : fault == 6 ? (const int64_t *)(void *)((char *)pos + 1) : pos;
    const double *w_arg = fault == 2 ? NULL : fault == 7 ? (const double *)(void *)((char *)wf + 1) : wf;
    const size_t cos_off = fault == 5 ? 1 : 0;

    const int isa0 = rope_get_isa();
    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    for (int range = 0; range < 2; range++) {
        int st0 = ROPE_OK;
        for (int k = 0; k <= n_isas; k++) {
            rope_set_isa(k ? isas[k - 1] : 0);
            float *co = fault == 3 ? NULL : (float *)(void *)((char *)c[k > 0] + cos_off);
            float *so = fault == 4 ? NULL : s[k > 0];
            const int st = range ? rope_cos_sin_range_f32(start, n_pos, w_arg, n_freq, scale, co, so)
                                 : rope_cos_sin_f32(pos_arg, n_pos, w_arg, n_freq, scale, co, so);
            check_status(st);
            if (k == 0) {
                st0 = st;
                continue;
            }
            if (st != st0)
                abort(); /* error decisions must not depend on the kernel */
            if (st == ROPE_OK && (memcmp((char *)c[0] + cos_off, (char *)c[1] + cos_off, entries * 4) != 0 ||
                                  memcmp(s[0], s[1], entries * 4) != 0))
                abort(); /* entries are correctly rounded: the same bits on every kernel */
        }
        rope_set_isa(0);
        /* ROPE_OK exactly when the contract says the call is valid */
        const int faulty = fault >= 1 && fault <= 7 && !(range && (fault == 1 || fault == 6));
        int valid = n_pos >= 0 && n_freq >= 0;
        if (valid && n_pos > 0 && n_freq > 0) {
            valid = !faulty && scale_ok(scale) && freqs_ok(wf, nfr);
            if (range)
                valid = valid && position_ok(start) && start <= ROPE_MAX_POSITION - (n_pos - 1);
            else
                for (int64_t i = 0; i < np && valid; i++)
                    valid = position_ok(pos[i]);
        }
        if ((st0 == ROPE_OK) != valid)
            abort();
        if (st0 != ROPE_OK || cos_off || !entries)
            continue;
        /* every row is the row of its position alone: how the positions
         * split into runs (or that they form a range) changes no bit */
        float one_c[40], one_s[40];
        for (int64_t i = 0; i < np; i++) {
            const int64_t m = range ? start + i : pos[i];
            if (rope_cos_sin_f32(&m, 1, wf, nfr, scale, one_c, one_s) != ROPE_OK ||
                memcmp(one_c, c[0] + i * nfr, sizeof(float) * (size_t)nfr) != 0 ||
                memcmp(one_s, s[0] + i * nfr, sizeof(float) * (size_t)nfr) != 0)
                abort();
        }
    }
    /* float64 tables (scalar code only): the same checks decide */
    const int st32 = rope_cos_sin_f32(pos_arg, n_pos, w_arg, n_freq, scale, fault == 3 ? NULL : c[0],
                                      fault == 4 ? NULL : s[0]);
    const int st64 = rope_cos_sin_f64(pos_arg, n_pos, w_arg, n_freq, scale, fault == 3 ? NULL : cd,
                                      fault == 4 ? NULL : sd);
    check_status(st64);
    if ((st32 == ROPE_OK) != (st64 == ROPE_OK))
        abort();
    /* newest fields (0: none): an input laid in an output, or the outputs
     * meeting; each table function must refuse a call it would otherwise
     * accept (ROPE_E_OVERLAP), writing nothing */
    const unsigned alias = (unsigned)(take(r, 1) % 7);
    const uint64_t where = take(r, 2);
    if (alias && (fault < 1 || fault > 7))
        fuzz_tables_alias(alias, where, pos, np, wf, nfr, n_pos, n_freq, scale, start, c[0], s[0], cd, sd);
    rope_set_isa(isa0);
    free(pos); free(wf); free(cd); free(sd);
    for (int k = 0; k < 2; k++) {
        free(c[k]);
        free(s[k]);
    }
}

/* ---- what pyrope.h promises about a rotation ------------------------------ */

static int aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* Can the angles serve position p? */
static int servable(const rope_angles *a, int64_t p)
{
    if (!a->cos_table)
        return position_ok(p);
    return p >= a->table_start && (uint64_t)p - (uint64_t)a->table_start < (uint64_t)a->table_rows;
}

/* Should rope_rotate accept this call, by the contract of pyrope.h?
 * 1 yes, 0 no. (An empty call reaches no element whatever its strides, and
 * a tabled call never reads inv_freq: both are accepted.) */
static int contract(const rope_op *op, const rope_tensor *t, int n_tensors, const rope_angles *a)
{
    if (!op)
        return 0;
    if (op->dtype < 0 || op->dtype >= rope_dtype_count())
        return 0;
    if (op->layout != ROPE_INTERLEAVED && op->layout != ROPE_SPLIT_HALF)
        return 0;
    if (op->head_dim <= 0 || op->rotary_dim <= 0 || op->rotary_dim > op->head_dim ||
        op->head_dim % 2 || op->rotary_dim % 2)
        return 0;
    if (op->n_batch < 0 || op->n_seq < 0 || n_tensors < 0)
        return 0;
    if (n_tensors > 0 && !t)
        return 0;
    const size_t esize = (size_t)rope_dtype_size(op->dtype);
    int64_t heads = 0;
    for (int k = 0; k < n_tensors; k++) {
        if (t[k].n_heads < 0)
            return 0;
        if (t[k].n_heads == 0)
            continue;
        if (!t[k].x || !t[k].out)
            return 0;
        const int64_t n[3] = {op->n_batch, op->n_seq, t[k].n_heads};
        int64_t lo, hi;
        if (span(n, t[k].x_strides, op->head_dim, &lo, &hi) == SPAN_OVERFLOW ||
            span(n, t[k].out_strides, op->head_dim, &lo, &hi) == SPAN_OVERFLOW)
            return 0;
        if (!aligned(t[k].x, esize) || !aligned(t[k].out, esize))
            return 0;
        if ((const void *)t[k].out == t[k].x &&
            memcmp(t[k].x_strides, t[k].out_strides, sizeof t[k].x_strides) != 0)
            return 0;
        heads += t[k].n_heads;
    }
    if (op->n_batch == 0 || op->n_seq == 0 || heads == 0)
        return 1; /* nothing to do: the angles are not read */
    if (!a)
        return 0;
    if (a->source != ROPE_POS_OFFSET && a->source != ROPE_POS_LIST && a->source != ROPE_POS_SECTIONS)
        return 0;
    const int64_t half = op->rotary_dim / 2;
    const int nc = a->source == ROPE_POS_SECTIONS ? a->n_components : 1;
    if (a->source == ROPE_POS_SECTIONS) {
        /* the gathered row needs rotary_dim/2 <= ROPE_MAX_OTF_HALF (pyrope.h) */
        if (nc < 1 || nc > ROPE_MAX_COMPONENTS || !a->pair_component || half > ROPE_MAX_OTF_HALF)
            return 0;
        for (int64_t i = 0; i < half; i++)
            if (a->pair_component[i] >= nc)
                return 0;
    }
    if (a->cos_table) {
        /* rows of the arithmetic type: double for float64 data, else float */
        const size_t ra = op->dtype == ROPE_F64 ? 8 : 4;
        if (!a->sin_table || !aligned(a->cos_table, ra) || !aligned(a->sin_table, ra) || a->table_rows < 0)
            return 0;
    } else {
        if (a->sin_table || !a->inv_freq || !aligned(a->inv_freq, 8) || half > ROPE_MAX_OTF_HALF ||
            !scale_ok(a->scale) || !freqs_ok(a->inv_freq, half))
            return 0;
    }
    if (a->source == ROPE_POS_OFFSET) {
        int64_t last;
        if (__builtin_add_overflow(a->offset, op->n_seq - 1, &last))
            return 0;
        if (!servable(a, a->offset) || !servable(a, last))
            return 0; /* the positions form a run: its ends decide */
        return 1;
    }
    if (!a->positions || !aligned(a->positions, 8))
        return 0;
    const int64_t n[3] = {op->n_batch, op->n_seq, nc};
    int64_t lo, hi;
    if (span(n, a->strides, 1, &lo, &hi) == SPAN_OVERFLOW)
        return 0;
    for (int64_t b = 0; b < op->n_batch; b++)
        for (int64_t s = 0; s < op->n_seq; s++)
            for (int c = 0; c < nc; c++)
                if (!servable(a, a->positions[b * a->strides[0] + s * a->strides[1] + c * a->strides[2]]))
                    return 0;
    return 1;
}

/* ---- rotation ---------------------------------------------------------------- */

#define MAX_TENSORS 3

/* One tensor of a call and its buffers, each exactly the span its strides
 * reach (a one-element stand-in when the span leaves int64: the call must
 * then fail without reading it). */
typedef struct {
    int64_t heads, xs[3], os[3];
    int in_place;           /* out is x, with x's strides */
    int64_t xlo, xn, olo, on;  /* element 0's place in the buffer; elements */
    uint8_t *x, *out;       /* buffers (out is x when in place) */
    uint8_t *x0, *out0;     /* their contents before every call */
    uint8_t *xr, *outr;     /* and after the scalar call */
    int16_t *coord;         /* per element of out: its coordinate in a head, -1: no row */
    int64_t *src;           /* and the element of x it comes from */
    int disjoint;           /* no two rows of out overlap */
} tensor;

typedef struct {
    int dtype;
    size_t esize;
    int64_t n_batch, n_seq, head_dim, rotary_dim;
    int n_tensors;
    tensor t[MAX_TENSORS];
} call_data;

/* Allocate t's buffers for [nb][ns][heads][head_dim]: 0 if too large. */
static int setup_tensor(tensor *t, int64_t nb, int64_t ns, int64_t head_dim, size_t esize)
{
    const int64_t n[3] = {nb, ns, t->heads};
    int64_t lo, hi;
    int sx = span(n, t->xs, head_dim, &lo, &hi);
    if (sx == SPAN_HUGE)
        return 0;
    t->xlo = lo;
    t->xn = sx == SPAN_OVERFLOW ? 1 : hi - lo;
    if (t->in_place) {
        t->olo = t->xlo;
        t->on = t->xn;
        memcpy(t->os, t->xs, sizeof t->os);
    } else {
        const int so = span(n, t->os, head_dim, &lo, &hi);
        if (so == SPAN_HUGE)
            return 0;
        t->olo = lo;
        t->on = so == SPAN_OVERFLOW ? 1 : hi - lo;
        sx = sx == SPAN_OVERFLOW ? sx : so;
    }
    t->x = xmalloc((size_t)t->xn * esize);
    t->x0 = xmalloc((size_t)t->xn * esize);
    t->xr = xmalloc((size_t)t->xn * esize);
    t->out = t->in_place ? t->x : xmalloc((size_t)t->on * esize);
    t->out0 = t->in_place ? t->x0 : xmalloc((size_t)t->on * esize);
    t->outr = t->in_place ? t->xr : xmalloc((size_t)t->on * esize);
    t->coord = xmalloc(sizeof(int16_t) * (size_t)t->on);
    t->src = xmalloc(sizeof(int64_t) * (size_t)t->on);
    for (int64_t e = 0; e < t->on; e++)
        t->coord[e] = -1;
    t->disjoint = 0;
    if (sx != SPAN_OK || head_dim <= 0 || nb <= 0 || ns <= 0 || t->heads <= 0)
        return 1;
    /* where every row element lands (rows may overlap: the last one wins) */
    for (int64_t b = 0; b < nb; b++)
        for (int64_t s = 0; s < ns; s++)
            for (int64_t h = 0; h < t->heads; h++)
                for (int64_t d = 0; d < head_dim; d++) {
                    const int64_t e = b * t->os[0] + s * t->os[1] + h * t->os[2] + d - t->olo;
                    t->coord[e] = (int16_t)d;
                    t->src[e] = b * t->xs[0] + s * t->xs[1] + h * t->xs[2] + d - t->xlo;
                }
    t->disjoint = rows_disjoint(n, t->os, head_dim);
    return 1;
}

static void free_tensor(tensor *t)
{
    if (!t->out0 && !t->x0)
        return;
    if (!t->in_place) {
        free(t->out); free(t->out0); free(t->outr);
    }
    free(t->x); free(t->x0); free(t->xr); free(t->coord); free(t->src);
}

/* Restore every buffer and make the call on instruction set isa. */
static int run(call_data *cd, int isa, const rope_op *op, const rope_tensor *tensors, int n_tensors,
               const rope_angles *angles)
{
    for (int k = 0; k < cd->n_tensors; k++) {
        tensor *t = &cd->t[k];
        memcpy(t->x, t->x0, (size_t)t->xn * cd->esize);
        if (!t->in_place)
            memcpy(t->out, t->out0, (size_t)t->on * cd->esize);
    }
    rope_set_isa(isa);
    const int st = rope_rotate(op, tensors, n_tensors, angles);
    check_status(st);
    return st;
}

/* After a call: every buffer as before it? */
static int untouched(const call_data *cd)
{
    for (int k = 0; k < cd->n_tensors; k++) {
        const tensor *t = &cd->t[k];
        if (memcmp(t->x, t->x0, (size_t)t->xn * cd->esize) != 0 ||
            (!t->in_place && memcmp(t->out, t->out0, (size_t)t->on * cd->esize) != 0))
            return 0;
    }
    return 1;
}

/* Pair of coordinate d (< rotary_dim) in the layout. */
static int64_t pair_of(int layout, int64_t d, int64_t half)
{
    return layout == ROPE_INTERLEAVED ? d / 2 : d < half ? d : d - half;
}

/* The checks of a successful scalar call (see the top of the file). */
static void check_success(call_data *cd, int layout, const rope_op *op, const rope_tensor *tensors,
                          const rope_angles *angles)
{
    const size_t es = cd->esize;
    for (int k = 0; k < cd->n_tensors; k++) {
        const tensor *t = &cd->t[k];
        if (!t->in_place && memcmp(t->xr, t->x0, (size_t)t->xn * es) != 0)
            abort(); /* x of an out-of-place call is read only */
        for (int64_t e = 0; e < t->on; e++) {
            const int16_t d = t->coord[e];
            const uint8_t *now = t->outr + e * (int64_t)es;
            if (d < 0 && memcmp(now, t->out0 + e * (int64_t)es, es) != 0)
                abort(); /* no row reaches it: never written */
            if (d >= cd->rotary_dim && t->disjoint && memcmp(now, t->x0 + t->src[e] * (int64_t)es, es) != 0)
                abort(); /* coordinates past rotary_dim: copied, or left alone in place */
        }
    }
    /* q and k in one call give what each gives alone */
    if (cd->n_tensors >= 2)
        for (int k = 0; k < cd->n_tensors; k++) {
            const tensor *t = &cd->t[k];
            if (run(cd, 0, op, &tensors[k], 1, angles) != ROPE_OK)
                abort();
            if (t->disjoint && !same_values(t->out, t->outr, t->on, cd->dtype, es))
                abort();
        }
    /* sectioned positions: pair i turns as the position list of its
     * component pair_component[i] turns it */
    int64_t heads = 0;
    for (int k = 0; k < cd->n_tensors; k++)
        heads += tensors[k].n_heads;
    if (!angles || angles->source != ROPE_POS_SECTIONS || cd->n_batch == 0 || cd->n_seq == 0 || heads == 0)
        return; /* (else the angles were not needed, maybe not valid) */
    const int64_t half = cd->rotary_dim / 2;
    for (int c = 0; c < angles->n_components; c++) {
        rope_angles list = *angles;
        list.source = ROPE_POS_LIST;
        list.positions = angles->positions + c * angles->strides[2];
        list.strides[2] = 0;
        list.n_components = 0;
        list.pair_component = NULL;
        if (run(cd, 0, op, tensors, cd->n_tensors, &list) != ROPE_OK)
            abort();
        for (int k = 0; k < cd->n_tensors; k++) {
            const tensor *t = &cd->t[k];
            if (!t->disjoint)
                continue;
            for (int64_t e = 0; e < t->on; e++) {
                const int16_t d = t->coord[e];
                if (d >= 0 && d < cd->rotary_dim && angles->pair_component[pair_of(layout, d, half)] == c &&
                    !same_value(t->out + e * (int64_t)es, t->outr + e * (int64_t)es, cd->dtype, es))
                    abort();
            }
        }
    }
}

/* ---- aliasing ------------------------------------------------------------------ */

/* What an aliased call lays in the memory of a tensor's buffer: one input
 * the call reads. pyrope.h: op, the angles and the pair map are read once,
 * before anything is written (so they may lie anywhere); the positions, the
 * table rows, the frequencies and the tensor array may not meet the span of
 * an output (ROPE_E_OVERLAP, nothing written). */
enum { AL_POSITIONS = 1, AL_MAP, AL_COS, AL_SIN, AL_FREQ, AL_TENSORS, AL_OP, AL_ANGLES, AL_KINDS };

typedef struct {
    const void *bytes;  /* the object as the unaliased call has it */
    size_t size;        /* its bytes */
    int64_t first;      /* the element (of esize bytes) its pointer is to, from its start */
    size_t esize;
} alias_object;

/* Repeat the call (op, tensors, angles: valid pointers, no fault) with
 * object `what` laid in tensor ak's out buffer (in_x: its x buffer) at an
 * 8-byte boundary chosen by `where`, the buffer's initial bytes holding the
 * object: on scalar and the best instruction set, the call must give what
 * the same call with the object in its own buffer gives (status, bits), or
 * ROPE_E_OVERLAP with nothing written where pyrope.h refuses it. */
static void fuzz_alias(call_data *cd, unsigned what, int in_x, int ak, uint64_t where, const rope_op *op,
                       const rope_tensor *tensors, int n_tensors, const rope_angles *angles,
                       const alias_object *obj)
{
    tensor *t = &cd->t[ak];
    const int tabled = angles->cos_table != NULL;
    if ((what == AL_COS || what == AL_SIN) && !tabled)
        return; /* (a pointer the call does not have) */
    const int in_out = !in_x || t->in_place;
    uint8_t *host = in_out ? t->out : t->x, *image = in_out ? t->out0 : t->x0;
    const size_t host_bytes = (size_t)(in_out ? t->on : t->xn) * cd->esize;
    if (!obj->size || obj->size > host_bytes)
        return;
    const size_t off = 8 * (size_t)(where % ((host_bytes - obj->size) / 8 + 1));
    memcpy(image + off, obj->bytes, obj->size);
    void *placed = host + off;
    const void *at = (const uint8_t *)placed + obj->first * (int64_t)obj->esize;

    rope_angles aan = *angles;
    const rope_op *opp = op;
    const rope_tensor *tp = tensors;
    const rope_angles *anp = &aan;
    switch (what) {
    case AL_POSITIONS: aan.positions = at; break;
    case AL_MAP: aan.pair_component = at; break;
    case AL_COS: aan.cos_table = at; break;
    case AL_SIN: aan.sin_table = at; break;
    case AL_FREQ: aan.inv_freq = at; break;
    case AL_TENSORS: tp = at; break;
    case AL_OP: opp = at; break;
    default: anp = at; break;   /* AL_ANGLES */
    }
    /* Is it in an output the call writes, and read while the call writes? */
    int64_t heads = 0;
    for (int k = 0; k < n_tensors; k++)
        heads += tensors[k].n_heads;
    const int nonempty = op->n_batch > 0 && op->n_seq > 0 && heads > 0;
    const int written = in_out && ak < n_tensors && tensors[ak].n_heads > 0;
    const int read_while_writing =
        what == AL_POSITIONS ? angles->source == ROPE_POS_LIST || angles->source == ROPE_POS_SECTIONS
        : what == AL_COS || what == AL_SIN ? tabled
        : what == AL_FREQ ? !tabled
        : what == AL_TENSORS;   /* the map, op and angles are read once, first */
    const int refused = nonempty && written && read_while_writing;

    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    const int order[2] = {0, n_isas ? isas[n_isas - 1] : 0};
    const size_t es = cd->esize;
    for (int i = 0; i < (n_isas ? 2 : 1); i++) {
        const int st_ref = run(cd, order[i], op, tensors, n_tensors, angles);
        for (int k = 0; k < cd->n_tensors; k++) {
            tensor *u = &cd->t[k];
            memcpy(u->xr, u->x, (size_t)u->xn * es);
            if (!u->in_place)
                memcpy(u->outr, u->out, (size_t)u->on * es);
        }
        const int st = run(cd, order[i], opp, tp, n_tensors, anp);
        if (st_ref != ROPE_OK) {
            if (st != st_ref || !untouched(cd))
                abort(); /* the same refusal, nothing written */
            continue;
        }
        if (refused) {
            if (st != ROPE_E_OVERLAP || !untouched(cd))
                abort(); /* an output meets what the call reads: refused before any write */
            continue;
        }
        if (st != ROPE_OK)
            abort();
        for (int k = 0; k < cd->n_tensors; k++) {
            const tensor *u = &cd->t[k];
            if (memcmp(u->x, u->xr, (size_t)u->xn * es) != 0 && !u->in_place)
                abort(); /* x of an out-of-place tensor is never written */
            if (u->disjoint && !same_values(u->out, u->in_place ? u->xr : u->outr, u->on, cd->dtype, es))
                abort(); /* as if the object were in a buffer of its own */
        }
    }
}

static const int N_TENSORS_OF[8] = {1, 2, 3, 0, -1, 1, 2, 3};

static void fuzz_rotate(reader *r)
{
    call_data cd;
    memset(&cd, 0, sizeof cd);
    const int dtype = (int)take_small(r, -1, rope_dtype_count());
    const int layout = (int)take_small(r, -1, 2);
    const int inverse = (int)(take(r, 1) & 1);
    const int64_t head_dim = take_small(r, -2, 80);
    const int64_t rotary_dim = take_small(r, -2, 82);
    const int64_t n[3] = {take_small(r, -1, 4), take_small(r, -1, 6), take_small(r, -1, 4)};
    const int64_t hd = head_dim > 0 ? head_dim : 1;
    const size_t esize = rope_dtype_size(dtype) > 0 ? (size_t)rope_dtype_size(dtype) : 2;
    cd.dtype = dtype;
    cd.esize = esize;
    cd.n_batch = n[0];
    cd.n_seq = n[1];
    cd.head_dim = head_dim;
    cd.rotary_dim = rotary_dim;
    tensor *t0 = &cd.t[0];
    t0->heads = n[2];
    const int64_t xs[3] = {take_stride(r, n[1] * n[2] * hd), take_stride(r, n[2] * hd), take_stride(r, hd)};
    memcpy(t0->xs, xs, sizeof xs);
    t0->in_place = (int)(take(r, 1) & 1);
    const int64_t os[3] = {take_stride(r, n[1] * n[2] * hd), take_stride(r, n[2] * hd), take_stride(r, hd)};
    memcpy(t0->os, os, sizeof os);
    cd.n_tensors = 1;
    if (!setup_tensor(t0, n[0], n[1], hd, esize))
        goto done; /* the caller could not have such buffers: nothing to test */
    for (int64_t i = 0; i < t0->xn * (int64_t)esize; i++)
        t0->x0[i] = (uint8_t)take(r, 1);
    if (!t0->in_place)
        memset(t0->out0, 0, (size_t)t0->on * esize);

    /* positions: a pool of values (offsets from the table start and past
     * the on-the-fly range among them) and the old list strides */
    const int use_pos = (int)(take(r, 1) & 1);
    int64_t pool[24];
    for (int i = 0; i < 24; i++)
        pool[i] = take_small(r, -5, 70) - (take(r, 1) % 9 == 0 ? (int64_t)1 << 40 : 0);
    const int64_t p_sb = take(r, 1) & 1 ? 6 : 0;
    const int64_t offset = take(r, 1) % 7 == 0 ? (int64_t)take(r, 8) : take_small(r, -3, 40);

    /* angles: a table over [table_start, table_start + rows) or on the fly */
    const int otf = (int)(take(r, 1) & 1);
    const int64_t table_start = take_small(r, -10, 30), table_rows = take_small(r, -1, 80);
    const int64_t half = rotary_dim > 0 ? rotary_dim / 2 : 0;
    const int64_t rows = table_rows > 0 ? table_rows : 0;
    const int64_t entries_read = (table_rows > 0 ? table_rows : 1) * (rotary_dim > 0 ? rotary_dim / 2 : 1);
    /* rows of the call's arithmetic type: double for float64 data, else float */
    const int wide = dtype == ROPE_F64;
    const size_t rsize = wide ? sizeof(double) : sizeof(float);
    void *cosb = xmalloc(rsize * (size_t)(rows * half));
    void *sinb = xmalloc(rsize * (size_t)(rows * half));
    for (int64_t i = 0; i < entries_read; i++) {
        const float c = (float)take(r, 1) / 128.0f - 1.0f, s = (float)take(r, 1) / 128.0f - 1.0f;
        if (i < rows * half && wide) {
            ((double *)cosb)[i] = c;
            ((double *)sinb)[i] = s;
        } else if (i < rows * half) {
            ((float *)cosb)[i] = c;
            ((float *)sinb)[i] = s;
        }
    }
    double w[96];
    for (int i = 0; i < 96; i++)
        w[i] = i < 8 ? take_freq(r) : ldexp(1.0, -i / 8);
    double *wb = xmalloc(sizeof(double) * (size_t)half);
    memcpy(wb, w, sizeof(double) * (size_t)half);
    int threads = (int)take_small(r, 0, 4);
    /* now and then x one byte off its element alignment: refused */
    const int misalign = take(r, 1) % 16 == 0;

    /* Fields added with the descriptor API; 0 (or an ended input) keeps the
     * old meaning. The scale of on-the-fly angles: */
    const double scale = scale_of((unsigned)take(r, 1));
    /* the position source: 0 as before (use_pos), else sectioned, list,
     * offset or an unknown code */
    static const int BAD_SOURCES[6] = {-1, ROPE_POS_SECTIONS + 1, ROPE_POS_SECTIONS + 2, 255, INT_MIN, INT_MAX};
    const int src_sel = (int)(take(r, 1) % 16);
    int source = src_sel == 0 ? (use_pos ? ROPE_POS_LIST : ROPE_POS_OFFSET)
               : src_sel <= 7 ? ROPE_POS_SECTIONS
               : src_sel <= 10 ? ROPE_POS_LIST
               : src_sel <= 13 ? ROPE_POS_OFFSET : 0;
    if (src_sel >= 14)
        source = BAD_SOURCES[take(r, 1) % 6];
    const int nc = (int)(take(r, 1) % (ROPE_MAX_COMPONENTS + 2)); /* 0..MAX+1: both ends invalid */
    const int nc_alloc = source == ROPE_POS_SECTIONS ? nc : 1;
    const int64_t nb0 = n[0] > 0 ? n[0] : 0, ns0 = n[1] > 0 ? n[1] : 0;
    int64_t ps[3] = {p_sb, 1, 0};
    switch (take(r, 1) % 4) {
    case 0:
        if (source == ROPE_POS_SECTIONS) { /* component innermost */
            ps[0] = ns0 * nc;
            ps[1] = nc;
            ps[2] = 1;
        }
        break;
    case 1: /* planar: [component][batch][seq] */
        ps[0] = ns0;
        ps[1] = 1;
        ps[2] = nb0 * ns0;
        break;
    case 2:
        for (int k = 0; k < 3; k++) {
            const int64_t v = take_small(r, -9, 9);
            ps[k] = v == 9 ? ((int64_t)1 << 62) + 1 : v == -9 ? INT64_MIN : v;
        }
        break;
    default: /* one position for the whole batch and every component */
        ps[0] = 0;
        ps[1] = 1;
        ps[2] = 0;
    }
    int64_t *pbuf = NULL, *pbase = NULL;
    if (source == ROPE_POS_LIST || source == ROPE_POS_SECTIONS) {
        const int64_t pn[3] = {n[0], n[1], nc_alloc};
        int64_t lo, hi;
        const int sp = span(pn, ps, 1, &lo, &hi);
        if (sp == SPAN_HUGE)
            goto free_angles;
        const int64_t count = sp == SPAN_OVERFLOW ? 1 : hi - lo;
        pbuf = xmalloc(sizeof(int64_t) * (size_t)count);
        for (int64_t j = 0; j < count; j++)
            pbuf[j] = pool[j % 24];
        pbase = pbuf - (sp == SPAN_OVERFLOW ? 0 : lo);
    } else {
        pbuf = pbase = xmalloc(0); /* never read */
    }
    /* the pair -> component map: mostly in range, sometimes not */
    uint8_t *map = xmalloc(source == ROPE_POS_SECTIONS ? (size_t)half : 0);
    if (source == ROPE_POS_SECTIONS)
        for (int64_t i = 0; i < half; i++) {
            const uint8_t e = (uint8_t)take(r, 1);
            map[i] = e < 232 ? (uint8_t)(e % (nc > 0 ? nc : 1)) : (uint8_t)(e - 232 + (e & 1) * 224);
        }

    /* more tensors: a call rotates n_tensors (q, k, ...) at once */
    cd.n_tensors = N_TENSORS_OF[take(r, 1) % 8];
    for (int k = 1; k < cd.n_tensors; k++) {
        tensor *t = &cd.t[k];
        t->heads = take_small(r, -1, 4);
        const int64_t xk[3] = {take_stride(r, n[1] * t->heads * hd), take_stride(r, t->heads * hd), take_stride(r, hd)};
        memcpy(t->xs, xk, sizeof xk);
        t->in_place = (int)(take(r, 1) & 1);
        const int64_t ok[3] = {take_stride(r, n[1] * t->heads * hd), take_stride(r, t->heads * hd), take_stride(r, hd)};
        memcpy(t->os, ok, sizeof ok);
        uint64_t state = take(r, 8);
        if (!setup_tensor(t, n[0], n[1], hd, esize)) {
            cd.n_tensors = k; /* the ones set up so far are freed below */
            goto free_all;
        }
        for (int64_t i = 0; i < t->xn * (int64_t)esize; i++)
            t->x0[i] = (uint8_t)next_bits(&state);
        if (!t->in_place)
            for (int64_t i = 0; i < t->on * (int64_t)esize; i++)
                t->out0[i] = (uint8_t)next_bits(&state);
    }
    const int n_setup = cd.n_tensors > 0 ? cd.n_tensors : 1; /* tensor 0 is always set up */
    const int n_tensors = cd.n_tensors;
    cd.n_tensors = n_setup;

    /* one fault (or none): a NULL or misaligned pointer (which must be
     * refused before any access), out aliasing x with other strides */
    const unsigned fault = (unsigned)(take(r, 1) % 64); /* 1..18: a fault */
    const int fk = (int)(take(r, 1) % (uint64_t)n_setup);
    /* newest fields (0: none): an input laid in a tensor's memory (fuzz_alias) */
    const unsigned alias = (unsigned)(take(r, 1) % (2 * AL_KINDS));
    const int alias_k = (int)(take(r, 1) % (uint64_t)n_setup);
    const uint64_t alias_where = take(r, 2);
    rope_tensor tensors[MAX_TENSORS];
    for (int k = 0; k < n_setup; k++) {
        tensor *t = &cd.t[k];
        rope_tensor *d = &tensors[k];
        d->x = t->x - t->xlo * (int64_t)esize;
        d->out = t->out - t->olo * (int64_t)esize;
        d->n_heads = t->heads;
        memcpy(d->x_strides, t->xs, sizeof t->xs);
        memcpy(d->out_strides, t->os, sizeof t->os);
    }
    if (misalign)
        tensors[0].x = (const uint8_t *)tensors[0].x + 1;
    rope_angles angles = {
        .source = source, .offset = offset, .positions = pbase, .strides = {ps[0], ps[1], ps[2]},
        .n_components = nc, .pair_component = map,
        .cos_table = otf ? NULL : cosb, .sin_table = otf ? NULL : sinb,
        .table_start = table_start, .table_rows = table_rows, .inv_freq = wb, .scale = scale};
    const rope_tensor *tp = tensors;
    const rope_angles *ap = &angles;
    int no_op = 0;
    switch (fault) {
    case 1: no_op = 1; break;
    case 2: tp = NULL; break;
    case 3: ap = NULL; break;
    case 4: angles.positions = NULL; break;
    case 5: angles.pair_component = NULL; break;
    case 6: angles.cos_table = cosb; angles.sin_table = NULL; break;
    case 7: angles.cos_table = NULL; angles.sin_table = sinb; break;
    case 8: angles.inv_freq = NULL; break;
    case 9: tensors[fk].x = NULL; break;
    case 10: tensors[fk].out = NULL; break;
    case 11: /* out is x, with other strides */
        tensors[fk].out = (void *)(uintptr_t)tensors[fk].x;
        if (memcmp(tensors[fk].x_strides, tensors[fk].out_strides, sizeof tensors[fk].x_strides) == 0)
            tensors[fk].out_strides[fk] += 2;
        break;
    case 12: tensors[fk].out = (uint8_t *)tensors[fk].out + 1; break;
    case 13: angles.positions = (const int64_t *)(const void *)((const char *)pbase + 4); break;
    case 14: if (angles.cos_table) angles.cos_table = (const char *)cosb + 1; break;
    case 15: if (angles.sin_table) angles.sin_table = (const char *)sinb + 2; break;
    case 16: angles.inv_freq = (const double *)(const void *)((const char *)wb + 4); break;
    case 17: threads = -7; break;
    case 18: threads = 1000; break;
    default: break;
    }
    const rope_op op = {dtype, layout, inverse, n[0], n[1], head_dim, rotary_dim, threads};
    const rope_op *opp = no_op ? NULL : &op;
    /* scalar first, then every other supported instruction set */
    const int isa0 = rope_get_isa();
    const int st0 = run(&cd, 0, opp, tp, n_tensors, ap);
    for (int k = 0; k < n_setup; k++) {
        tensor *t = &cd.t[k];
        memcpy(t->xr, t->x, (size_t)t->xn * esize);
        if (!t->in_place)
            memcpy(t->outr, t->out, (size_t)t->on * esize);
    }
    if (st0 != ROPE_OK && !untouched(&cd))
        abort(); /* nothing may be written before an error */
    if ((st0 == ROPE_OK) != contract(opp, tp, n_tensors, ap))
        abort(); /* accepted exactly when pyrope.h says the call is valid */
    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        const int st = run(&cd, isas[i], opp, tp, n_tensors, ap);
        if (st != st0)
            abort(); /* error decisions must not depend on the kernel */
        if (st != ROPE_OK && !untouched(&cd))
            abort();
        for (int k = 0; k < n_setup && st == ROPE_OK; k++) {
            const tensor *t = &cd.t[k];
            if (!t->in_place && memcmp(t->x, t->x0, (size_t)t->xn * esize) != 0)
                abort();
            if (t->disjoint && !same_values(t->out, t->outr, t->on, dtype, esize))
                abort(); /* scalar and SIMD kernels must agree bit for bit */
        }
    }
    if (st0 == ROPE_OK && tp && n_tensors > 0)
        check_success(&cd, layout, opp, tp, ap);
    if (alias % AL_KINDS && (fault == 0 || fault > 18)) {
        const unsigned what = alias % AL_KINDS;
        int64_t plo = 0, phi = 0, p_count = 0;   /* the positions buffer, as allocated above */
        if (source == ROPE_POS_LIST || source == ROPE_POS_SECTIONS) {
            const int64_t pn[3] = {n[0], n[1], nc_alloc};
            const int sp = span(pn, ps, 1, &plo, &phi);
            p_count = sp == SPAN_OVERFLOW ? 1 : phi - plo;
            if (sp != SPAN_OK)
                plo = 0;   /* a stand-in of one element: the pointer is to it */
        }
        const alias_object objects[AL_KINDS] = {
            [AL_POSITIONS] = {pbuf, sizeof(int64_t) * (size_t)p_count, -plo, sizeof(int64_t)},
            [AL_MAP] = {map, source == ROPE_POS_SECTIONS ? (size_t)half : 0, 0, 1},
            [AL_COS] = {cosb, rsize * (size_t)(rows * half), 0, rsize},
            [AL_SIN] = {sinb, rsize * (size_t)(rows * half), 0, rsize},
            [AL_FREQ] = {wb, sizeof(double) * (size_t)half, 0, sizeof(double)},
            [AL_TENSORS] = {tensors, n_tensors > 0 ? sizeof(rope_tensor) * (size_t)n_tensors : 0, 0, 1},
            [AL_OP] = {&op, sizeof op, 0, 1},
            [AL_ANGLES] = {&angles, sizeof angles, 0, 1}};
        fuzz_alias(&cd, what, alias >= AL_KINDS, alias_k, alias_where, &op, tensors, n_tensors, &angles,
                   &objects[what]);
    }
    rope_set_isa(isa0);

free_all:
    free(map);
    free(pbuf);
free_angles:
    free(cosb); free(sinb); free(wb);
done:
    for (int k = 0; k < MAX_TENSORS; k++)
        free_tensor(&cd.t[k]);
}

/* ---- big tokens ---------------------------------------------------------------- */

/* Big tokens, for inputs whose first byte is 0xB1 (no input saved before
 * this mode starts with it): the shapes for which the kernels take paths of
 * their own -- rotary_dim 128, a token's heads back to back with 512 pairs
 * or more, heads with gaps between them -- at every element-aligned
 * placement, with 1-3 threads; one tensor or q and k in one call, positions
 * from an offset, a list or sections, and rotary_dim/2 around
 * ROPE_MAX_OTF_HALF. The values come from a generator seeded by the input
 * (the buffers are larger than inputs). Every instruction set must agree
 * with scalar bit for bit, every element outside the rotated coordinates
 * (before, between heads, after) must come back unchanged, x of an
 * out-of-place call too, and tables and on-the-fly angles must agree.
 * AddressSanitizer watches the ends. */
typedef struct {
    int64_t heads, stride, lead, rows;
    size_t bytes;
    uint8_t *orig, *x, *out, *res;
} big_tensor;

static void fuzz_big(reader *r)
{
    static const int64_t dims[5] = {64, 96, 128, 136, 256};
    const int dtype = (int)take_small(r, 0, rope_dtype_count() - 1), layout = (int)take_small(r, 0, 1);
    const int inverse = (int)(take(r, 1) & 1), in_place = (int)(take(r, 1) & 1);
    int64_t head_dim = dims[take(r, 1) % 5];
    int64_t rotary_dim = take(r, 1) & 1 ? head_dim : 2 * take_small(r, 1, head_dim / 2);
    int64_t heads = take_small(r, 1, 40);
    const int64_t seq = take_small(r, 1, 3);
    const int64_t gap = 2 * (int64_t)(take(r, 1) % 4), lead = take_small(r, 0, 31);
    const int threads = (int)take_small(r, 1, 3), otf = (int)(take(r, 1) & 1);
    const int64_t offset = (int64_t)(take(r, 4) % 2147483000u);
    uint64_t state = take(r, 8);
    /* new fields (0: as before): the position source, components and map,
     * a second tensor, a second batch row, rotary_dim/2 near the limit */
    const int src_sel = (int)(take(r, 1) % 4);
    const int source = src_sel == 0 ? ROPE_POS_OFFSET : src_sel == 1 ? ROPE_POS_LIST : ROPE_POS_SECTIONS;
    const int nc = source == ROPE_POS_SECTIONS ? 1 + (int)(take(r, 1) % ROPE_MAX_COMPONENTS) : 1;
    const int map_mode = (int)(take(r, 1) % 3);
    const int64_t kv_heads = (int64_t)(take(r, 1) % 9);
    const int64_t batch = 1 + (int64_t)(take(r, 1) % 2);
    if (take(r, 1) % 4 == 3) {
        head_dim = rotary_dim = 2 * (ROPE_MAX_OTF_HALF - 1 + (int64_t)(take(r, 1) % 3));
        heads = 1 + heads % 3;
    }
    const int64_t half = rotary_dim / 2;
    const size_t esize = (size_t)rope_dtype_size(dtype);

    big_tensor T[2];
    const int n_tensors = kv_heads ? 2 : 1;
    rope_tensor tensors[2];
    for (int k = 0; k < n_tensors; k++) {
        big_tensor *t = &T[k];
        t->heads = k ? kv_heads : heads;
        t->stride = head_dim + (k ? 2 * (int64_t)(next_bits(&state) % 4) : gap);
        t->lead = k ? (int64_t)(next_bits(&state) % 32) : lead;
        t->rows = batch * seq * t->heads * t->stride;
        t->bytes = (size_t)(t->lead + t->rows + 16) * esize;
        t->orig = xmalloc(t->bytes);
        t->x = xmalloc(t->bytes);
        t->out = xmalloc(t->bytes);
        t->res = xmalloc(t->bytes);
        for (size_t i = 0; i < t->bytes; i++)
            t->orig[i] = (uint8_t)next_bits(&state);
        uint8_t *o = t->out + t->lead * (int64_t)esize;
        const int64_t s[3] = {seq * t->heads * t->stride, t->heads * t->stride, t->stride};
        tensors[k] = (rope_tensor){in_place ? o : t->x + t->lead * (int64_t)esize, o, t->heads,
                                   {s[0], s[1], s[2]}, {s[0], s[1], s[2]}};
    }

    /* positions in [offset, offset + seq], planar [component][batch][seq] */
    const int64_t n_pos = batch * seq * nc;
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)n_pos);
    for (int64_t i = 0; i < n_pos; i++)
        pos[i] = offset + (int64_t)(next_bits(&state) % (uint64_t)(seq + 1));
    uint8_t *map = xmalloc((size_t)half);
    for (int64_t i = 0; i < half; i++)
        map[i] = (uint8_t)(map_mode == 0 ? i * nc / half : map_mode == 1 ? i % nc : (int64_t)(next_bits(&state) % (uint64_t)nc));
    double *w = xmalloc(sizeof(double) * (size_t)half);
    for (int64_t i = 0; i < half; i++)
        w[i] = pow(10000.0, -2.0 * (double)i / (double)rotary_dim);
    /* rows of the arithmetic type: double for float64 data, else float */
    const size_t rsize = dtype == ROPE_F64 ? sizeof(double) : sizeof(float);
    void *cos = xmalloc(rsize * (size_t)((seq + 1) * half));
    void *sin = xmalloc(rsize * (size_t)((seq + 1) * half));
    if (dtype == ROPE_F64) {
        int64_t *run = xmalloc(sizeof(int64_t) * (size_t)(seq + 1));
        for (int64_t i = 0; i <= seq; i++)
            run[i] = offset + i;
        if (rope_cos_sin_f64(run, seq + 1, w, half, 1.0, cos, sin) != ROPE_OK)
            abort();
        free(run);
    } else if (rope_cos_sin_range_f32(offset, seq + 1, w, half, 1.0, cos, sin) != ROPE_OK) {
        abort();
    }
    rope_angles angles = {.source = source, .offset = offset, .positions = pos,
                          .strides = {seq, 1, batch * seq}, .n_components = nc, .pair_component = map,
                          .cos_table = otf ? NULL : cos, .sin_table = otf ? NULL : sin,
                          .table_start = offset, .table_rows = seq + 1, .inv_freq = w, .scale = 1.0};
    const rope_op op = {dtype, layout, inverse, batch, seq, head_dim, rotary_dim, threads};
    /* every argument is valid but rotary_dim/2 may be past the limit of
     * on-the-fly angles and sectioned positions */
    const int valid = half <= ROPE_MAX_OTF_HALF || (!otf && source != ROPE_POS_SECTIONS);

    const int isa0 = rope_get_isa();
    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    int st0 = ROPE_OK;
    for (int i = 0; i <= n_isas + 2; i++) {
        /* scalar, every other set, then scalar with the other angle form
         * and (for two tensors) scalar with the first tensor alone */
        if (i == n_isas + 1) {
            angles.cos_table = otf ? cos : NULL;
            angles.sin_table = otf ? sin : NULL;
        } else if (i == n_isas + 2) {
            angles.cos_table = otf ? NULL : cos;
            angles.sin_table = otf ? NULL : sin;
            if (n_tensors == 1)
                break;
        }
        for (int k = 0; k < n_tensors; k++) {
            memcpy(T[k].x, T[k].orig, T[k].bytes);
            memcpy(T[k].out, T[k].orig, T[k].bytes);
        }
        rope_set_isa(i > 0 && i <= n_isas ? isas[i - 1] : 0);
        const int st = rope_rotate(&op, tensors, i == n_isas + 2 ? 1 : n_tensors, &angles);
        check_status(st);
        if (i == 0) {
            st0 = st;
            if ((st == ROPE_OK) != valid)
                abort();
        } else if (i <= n_isas && st != st0) {
            abort(); /* error decisions must not depend on the kernel */
        }
        if (st != ROPE_OK) {
            for (int k = 0; k < n_tensors; k++)
                if (memcmp(T[k].out, T[k].orig, T[k].bytes) != 0 || memcmp(T[k].x, T[k].orig, T[k].bytes) != 0)
                    abort(); /* nothing written before an error */
            if (i == 0)
                break;
            continue; /* the other angle form may be out of its limits */
        }
        for (int k = 0; k < (i == n_isas + 2 ? 1 : n_tensors); k++) {
            const big_tensor *t = &T[k];
            if (i == 0) {
                memcpy(t->res, t->out, t->bytes);
                for (int64_t e = 0; e < (int64_t)(t->bytes / esize); e++) {
                    const int64_t j = e - t->lead;
                    const int in_rows = j >= 0 && j < t->rows && j % t->stride < rotary_dim;
                    if (!in_rows && memcmp(t->out + e * (int64_t)esize, t->orig + e * (int64_t)esize, esize) != 0)
                        abort(); /* nothing outside the rotated coordinates is written */
                }
            } else if (!same_values(t->res, t->out, (int64_t)(t->bytes / esize), dtype, esize)) {
                abort(); /* every kernel, angle form and tensor grouping: the same bits */
            }
            if (!in_place && memcmp(t->x, t->orig, t->bytes) != 0)
                abort(); /* the input of an out-of-place call is left alone */
        }
    }
    rope_set_isa(isa0);
    for (int k = 0; k < n_tensors; k++) {
        free(T[k].orig); free(T[k].x); free(T[k].out); free(T[k].res);
    }
    free(pos); free(map); free(w); free(cos); free(sin);
}

/* ---- staged calls ------------------------------------------------------------- */

/* rope_rotate_staged, for inputs whose first byte is 0xB2 (no input saved
 * before this mode starts with it): 0-3 tensors, each with a random stage
 * -- rotate or copy (or an invalid kind), no norm, a per-head or a
 * per-token RMSNorm (or an invalid one), weights or NULL, eps (0, negative,
 * NaN, infinite and tiny among them), the output's storage type (the op's,
 * any other, invalid), cache slots or none (-1, in range, out of range,
 * n_slots and block_size of any sign), strides of an NHD or HND layout or
 * any others, in place or not -- with head_dim up to past
 * ROPE_MAX_STAGE_DIM, positions from an offset or a list, a table or on
 * the fly, 1-3 threads. Buffers are exactly the span their strides reach,
 * so AddressSanitizer reports any access outside them; besides:
 *   - every instruction set reaches the scalar call's status and, where
 *     output rows never overlap and no two tokens share a slot, its values
 *     (NaN payloads aside, as in fuzz_rotate);
 *   - a failed call writes nothing; a successful one writes no output
 *     element that no written row reaches, and never writes x of an
 *     out-of-place tensor. */
typedef struct {
    int64_t heads, xs[3], os[3];
    int in_place, out_dtype;                /* out_dtype as the stage has it (-1: the op's) */
    size_t oes;                             /* out's element size */
    int64_t xlo, xn, olo, on;
    uint8_t *x, *out, *x0, *out0, *outr;
    double *w;
    int64_t nw;
    int64_t *slots;
    rope_stage st;
    int ok;                                 /* buffers allocated (else the tensor is skipped) */
} staged_tensor;

static double take_eps(reader *r)
{
    switch (take(r, 1) % 10) {
    case 0: return 0.0;
    case 1: return -1e-6;
    case 2: return NAN;
    case 3: return INFINITY;
    case 4: return 1e-300;
    case 5: return 1e300;
    default: return 1e-6;
    }
}

/* A weight: mostly near 1, now and then anything (NaN payloads included). */
static double weight_of(uint64_t bits)
{
    if (bits % 16 == 0) {
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    return 0.5 + (double)(bits >> 11) * 0x1p-53;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The angles of a staged or quantised call, from the fuzz bytes (offset, list
 * or offset, table or on the fly, the positions, the table's rows): the
 * positions, frequencies and table rows they point into, owned here. */
typedef struct {
    rope_angles angles;
    int64_t *pos;
    double *wf;
    void *cosb, *sinb;
    size_t rsize;   /* bytes per table entry */
    int list, otf;  /* positions from the list; on the fly: the table is not read */
} fuzz_angles;

static void take_angles(reader *r, int dtype, int64_t rotary_dim, int64_t ns, int64_t n_tok, fuzz_angles *fa)
{
    const int64_t half = rotary_dim > 0 ? rotary_dim / 2 : 0;
    const int64_t offset = take_small(r, -3, 40);
    const int list = (int)(take(r, 1) & 1), otf = (int)(take(r, 1) & 1);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)(n_tok > 0 ? n_tok : 1));
    for (int64_t i = 0; i < n_tok; i++)
        pos[i] = take_small(r, -3, 44);
    const int64_t table_start = -3, table_rows = take_small(r, 0, 50);
    const int wide = dtype == ROPE_F64;
    const size_t rsize = wide ? sizeof(double) : sizeof(float);
    const int64_t hh = half > 0 && half <= 4096 ? half : 1;
    double *wf = xmalloc(sizeof(double) * (size_t)hh);
    for (int64_t i = 0; i < hh; i++)
        wf[i] = pow(10000.0, -2.0 * (double)i / (double)(2 * hh));
    void *cosb = xmalloc(rsize * (size_t)(table_rows * hh + 1)), *sinb = xmalloc(rsize * (size_t)(table_rows * hh + 1));
    if (table_rows > 0) {
        int64_t *run = xmalloc(sizeof(int64_t) * (size_t)table_rows);
        for (int64_t i = 0; i < table_rows; i++)
            run[i] = table_start + i;
        if (wide ? rope_cos_sin_f64(run, table_rows, wf, hh, 1.0, cosb, sinb)
                 : rope_cos_sin_range_f32(table_start, table_rows, wf, hh, 1.0, cosb, sinb))
            abort();
        free(run);
    }
    rope_angles angles = {.source = list ? ROPE_POS_LIST : ROPE_POS_OFFSET, .offset = offset, .positions = pos,
                          .strides = {ns, 1, 0}, .cos_table = otf ? NULL : cosb, .sin_table = otf ? NULL : sinb,
                          .table_start = table_start, .table_rows = table_rows, .inv_freq = wf, .scale = 1.0};
    *fa = (fuzz_angles){angles, pos, wf, cosb, sinb, rsize, list, otf};
}

static void release_angles(fuzz_angles *fa)
{
    free(fa->pos);
    free(fa->wf);
    free(fa->cosb);
    free(fa->sinb);
}

static void fuzz_staged(reader *r)
{
    const int n_dtypes = rope_dtype_count();
    const int dtype = (int)take_small(r, -1, n_dtypes - 1 + (take(r, 1) % 8 == 0));
    const int layout = (int)take_small(r, 0, take(r, 1) % 16 == 0 ? 2 : 1);
    const int inverse = (int)(take(r, 1) & 1);
    int64_t head_dim = take_small(r, -2, 40);
    if (take(r, 1) % 32 == 0)
        head_dim = ROPE_MAX_STAGE_DIM - 2 + take_small(r, 0, 4);
    const int64_t rotary_dim = take(r, 1) & 1 ? head_dim : take_small(r, -2, head_dim > 0 ? head_dim + 2 : 4);
    const int64_t nb = take_small(r, -1, 3), ns = take_small(r, 0, 4);
    const int n_tensors = (int)take_small(r, -1, 3);
    const int threads = (int)take_small(r, 1, 3);
    const int64_t hd = head_dim > 0 ? head_dim : 1;
    const size_t es = rope_dtype_size(dtype) > 0 ? (size_t)rope_dtype_size(dtype) : 2;
    uint64_t state = take(r, 8);

    staged_tensor T[MAX_TENSORS];
    memset(T, 0, sizeof T);
    const int n_setup = n_tensors > 0 ? n_tensors : 0;
    for (int k = 0; k < n_setup; k++) {
        staged_tensor *t = &T[k];
        t->heads = take_small(r, 0, 4);
        const int64_t h = t->heads;
        /* x: NHD ([b][s][h][d]), HND ([b][h][s][d]) or anything */
        switch (take(r, 1) % 4) {
        case 0: t->xs[0] = ns * h * hd, t->xs[1] = h * hd, t->xs[2] = hd; break;
        case 1: t->xs[0] = h * ns * hd, t->xs[1] = hd, t->xs[2] = ns * hd; break;
        case 2: t->xs[0] = take_stride(r, ns * h * hd), t->xs[1] = take_stride(r, h * hd), t->xs[2] = take_stride(r, hd); break;
        default: t->xs[0] = ns * h * (hd + 3), t->xs[1] = h * (hd + 3), t->xs[2] = hd + 3; break;
        }
        rope_stage *st = &t->st;
        st->copy = (int)take_small(r, 0, take(r, 1) % 16 == 0 ? 2 : 1);
        st->norm = (int)(take(r, 1) % 7);
        st->norm = st->norm >= 3 ? (st->norm == 6 ? 3 : st->norm % 3) : st->norm; /* 0..2, sometimes 3 */
        st->norm_eps = take_eps(r);
        const int sel = (int)(take(r, 1) % 8);
        /* convert 0 leaves out_dtype unread: any value there (a stage of zeros, or garbage) */
        st->convert = sel < 4 ? 0 : take(r, 1) % 32 == 0 ? 2 : 1;
        st->out_dtype = sel < 4 ? (int)take(r, 1) - 128
                                : sel == 7 ? n_dtypes + (int)(take(r, 1) % 3) : (int)take_small(r, 0, n_dtypes - 1);
        t->out_dtype = st->convert == 0 ? -1 : st->out_dtype;
        const int odt = t->out_dtype == -1 ? dtype : t->out_dtype;
        t->oes = rope_dtype_size(odt) > 0 ? (size_t)rope_dtype_size(odt) : 2;
        const int slotted = (int)(take(r, 1) % 3 == 0);
        t->in_place = !slotted && take(r, 1) % 3 == 0 && t->oes == es;
        int64_t count[3] = {nb, ns, h};
        if (slotted) {
            st->n_slots = take_small(r, -1, 8);
            st->block_size = take_small(r, -1, 4);
            const int64_t bs = st->block_size > 0 ? st->block_size : 1;
            const int64_t blocks = st->n_slots > 0 ? (st->n_slots - 1) / bs + 1 : 0;
            count[0] = blocks, count[1] = bs;
            switch (take(r, 1) % 3) { /* a paged cache: NHD, HND, or other strides */
            case 0: t->os[0] = bs * h * hd, t->os[1] = h * hd, t->os[2] = hd; break;
            case 1: t->os[0] = h * bs * hd, t->os[1] = hd, t->os[2] = bs * hd; break;
            default: t->os[0] = take_stride(r, bs * h * hd), t->os[1] = take_stride(r, h * hd), t->os[2] = take_stride(r, hd); break;
            }
            const int64_t n_tok = nb > 0 ? nb * ns : 0;
            t->slots = xmalloc(sizeof(int64_t) * (size_t)(n_tok > 0 ? n_tok : 1));
            for (int64_t i = 0; i < n_tok; i++) {
                const uint64_t v = next_bits(&state);
                t->slots[i] = v % 8 == 0 ? -1 : v % 8 == 1 ? st->n_slots : v % 16 == 2 ? -2
                              : v % 64 == 3 ? INT64_MIN : st->n_slots > 0 ? (int64_t)((v >> 8) % (uint64_t)st->n_slots) : 0;
            }
            st->slots = t->slots;
            st->slot_strides[0] = ns;
            st->slot_strides[1] = 1;
            if (take(r, 1) % 8 == 0)
                st->slot_strides[0] = 0; /* every batch row the same slots */
        } else if (t->in_place) {
            memcpy(t->os, t->xs, sizeof t->os);
        } else {
            switch (take(r, 1) % 3) {
            case 0: t->os[0] = ns * h * hd, t->os[1] = h * hd, t->os[2] = hd; break;
            case 1: t->os[0] = h * ns * hd, t->os[1] = hd, t->os[2] = ns * hd; break;
            default: t->os[0] = take_stride(r, ns * h * hd), t->os[1] = take_stride(r, h * hd), t->os[2] = take_stride(r, hd); break;
            }
        }
        /* buffers of exactly the spans */
        const int64_t xc[3] = {nb, ns, h};
        int64_t xlo, xhi, olo, ohi;
        const int a = span(xc, t->xs, hd, &xlo, &xhi), b = span(count, t->os, hd, &olo, &ohi);
        if (a == SPAN_HUGE || b == SPAN_HUGE || (xhi - xlo) + (ohi - olo) > (1 << 18))
            continue; /* a caller could not have such buffers */
        t->xlo = a == SPAN_OVERFLOW ? 0 : xlo;
        t->xn = a == SPAN_OVERFLOW ? 1 : xhi - xlo;
        t->olo = b == SPAN_OVERFLOW ? 0 : olo;
        t->on = b == SPAN_OVERFLOW ? 1 : ohi - olo;
        if (t->in_place) {
            t->olo = t->xlo;
            t->on = t->xn;
        }
        t->x = xmalloc((size_t)t->xn * es);
        t->x0 = xmalloc((size_t)t->xn * es);
        t->out = t->in_place ? t->x : xmalloc((size_t)t->on * t->oes);
        t->out0 = t->in_place ? t->x0 : xmalloc((size_t)t->on * t->oes);
        t->outr = xmalloc((size_t)t->on * (t->in_place ? es : t->oes));
        for (int64_t i = 0; i < t->xn * (int64_t)es; i++)
            t->x0[i] = (uint8_t)next_bits(&state);
        if (dtype == ROPE_F32 || dtype == ROPE_F64 || dtype == ROPE_F16 || dtype == ROPE_BF16)
            for (int64_t i = 0; i < t->xn; i++) /* mostly ordinary values, so that norms are not all NaN */
                if (next_bits(&state) % 4) {
                    const double v = ((double)(next_bits(&state) % 2001) - 1000.0) / 100.0;
                    const float f = (float)v;
                    const uint32_t u = f32_bits(f);
                    if (dtype == ROPE_F32)
                        memcpy(t->x0 + 4 * i, &f, 4);
                    else if (dtype == ROPE_F64)
                        memcpy(t->x0 + 8 * i, &v, 8);
                    else if (dtype == ROPE_BF16) {
                        const uint16_t hb = (uint16_t)(u >> 16);
                        memcpy(t->x0 + 2 * i, &hb, 2);
                    } else {
                        const uint16_t hf = (uint16_t)(0x3C00u + (next_bits(&state) % 0x800u)) ^ (uint16_t)((u >> 16) & 0x8000u);
                        memcpy(t->x0 + 2 * i, &hf, 2);
                    }
                }
        if (!t->in_place)
            for (int64_t i = 0; i < t->on * (int64_t)t->oes; i++)
                t->out0[i] = (uint8_t)next_bits(&state);
        if (take(r, 1) % 3 != 0 && st->norm != 0) {
            t->nw = st->norm == ROPE_NORM_TOKEN ? h * hd : hd;
            t->w = xmalloc(sizeof(double) * (size_t)(t->nw > 0 ? t->nw : 1));
            for (int64_t i = 0; i < t->nw; i++)
                t->w[i] = weight_of(next_bits(&state));
            st->norm_weight = t->w;
        }
        t->ok = 1;
    }
    /* angles: offset or a position list; a table or on the fly */
    const int64_t n_tok = nb > 0 && ns > 0 ? nb * ns : 0;
    fuzz_angles fa;
    take_angles(r, dtype, rotary_dim, ns, n_tok, &fa);
    const rope_angles angles = fa.angles;
    const rope_op op = {dtype, layout, inverse, nb, ns, head_dim, rotary_dim, threads};
    rope_tensor tensors[MAX_TENSORS];
    rope_stage stages[MAX_TENSORS];
    int all_ok = 1;
    for (int k = 0; k < n_setup; k++) {
        staged_tensor *t = &T[k];
        all_ok &= t->ok;
        tensors[k] = (rope_tensor){t->ok ? t->x - t->xlo * (int64_t)es : NULL,
                                   t->ok ? t->out - t->olo * (int64_t)t->oes : NULL, t->ok ? t->heads : 0,
                                   {t->xs[0], t->xs[1], t->xs[2]}, {t->os[0], t->os[1], t->os[2]}};
        stages[k] = t->st;
    }
    if (!all_ok)
        goto done; /* (a tensor's buffers could not be had: nothing to test) */

    /* scalar first, then every other instruction set */
    const int isa0 = rope_get_isa();
    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    int st0 = ROPE_OK;
    for (int i = 0; i <= n_isas; i++) {
        for (int k = 0; k < n_setup; k++) {
            staged_tensor *t = &T[k];
            memcpy(t->x, t->x0, (size_t)t->xn * es);
            if (!t->in_place)
                memcpy(t->out, t->out0, (size_t)t->on * t->oes);
        }
        rope_set_isa(i ? isas[i - 1] : 0);
        const int st = rope_rotate_staged(&op, tensors, stages, n_tensors, &angles);
        check_status(st);
        if (i == 0)
            st0 = st;
        else if (st != st0)
            abort(); /* error decisions must not depend on the kernel */
        for (int k = 0; k < n_setup; k++) {
            const staged_tensor *t = &T[k];
            const size_t oes = t->in_place ? es : t->oes;
            if (st != ROPE_OK) {
                if (memcmp(t->x, t->x0, (size_t)t->xn * es) != 0 ||
                    (!t->in_place && memcmp(t->out, t->out0, (size_t)t->on * t->oes) != 0))
                    abort(); /* nothing written before an error */
                continue;
            }
            if (!t->in_place && memcmp(t->x, t->x0, (size_t)t->xn * es) != 0)
                abort(); /* x of an out-of-place tensor is read only */
            if (i == 0) {
                memcpy(t->outr, t->out, (size_t)t->on * oes);
                if (t->heads == 0 || t->in_place || nb <= 0 || ns <= 0)
                    continue;
                /* no element that no written row reaches is written */
                uint8_t *reached = calloc((size_t)t->on, 1);
                if (!reached)
                    abort();
                for (int64_t b = 0; b < nb; b++)
                    for (int64_t q = 0; q < ns; q++) {
                        int64_t base0 = b, base1 = q;
                        if (t->slots) {
                            const int64_t kslot = t->slots[b * t->st.slot_strides[0] + q * t->st.slot_strides[1]];
                            if (kslot < 0)
                                continue;
                            base0 = kslot / t->st.block_size;
                            base1 = kslot % t->st.block_size;
                        }
                        for (int64_t hh2 = 0; hh2 < t->heads; hh2++)
                            for (int64_t d = 0; d < head_dim; d++) {
                                const int64_t e = base0 * t->os[0] + base1 * t->os[1] + hh2 * t->os[2] + d - t->olo;
                                if (e < 0 || e >= t->on)
                                    abort(); /* the call accepted a row outside out's span */
                                reached[e] = 1;
                            }
                    }
                for (int64_t e = 0; e < t->on; e++)
                    if (!reached[e] && memcmp(t->out + e * (int64_t)oes, t->out0 + e * (int64_t)oes, oes) != 0)
                        abort();
                free(reached);
            } else {
                /* the same values where every row has a place of its own */
                const int64_t count[3] = {t->slots ? (t->st.n_slots + t->st.block_size - 1) / t->st.block_size : nb,
                                          t->slots ? t->st.block_size : ns, t->heads};
                int unique = 1;
                if (t->slots) /* no slot written twice */
                    for (int64_t a = 0; a < nb * ns && unique; a++)
                        for (int64_t c = a + 1; c < nb * ns && unique; c++) {
                            const int64_t sa = t->slots[(a / ns) * t->st.slot_strides[0] + (a % ns)];
                            const int64_t sc = t->slots[(c / ns) * t->st.slot_strides[0] + (c % ns)];
                            unique = sa < 0 || sa != sc;
                        }
                const int odt = t->out_dtype == -1 ? dtype : t->out_dtype;
                if (unique && rows_disjoint(count, t->os, head_dim) &&
                    !same_values(t->out, t->outr, t->on, odt, oes))
                    abort(); /* scalar and SIMD kernels must agree */
            }
        }
    }
    rope_set_isa(isa0);
done:
    for (int k = 0; k < MAX_TENSORS; k++) {
        staged_tensor *t = &T[k];
        if (t->ok) {
            free(t->x); free(t->x0); free(t->outr);
            if (!t->in_place) {
                free(t->out); free(t->out0);
            }
        }
        free(t->w);
        free(t->slots);
    }
    release_angles(&fa);
}

/* ---- quantised calls ---------------------------------------------------------- */

/* rope_rotate_quantised, for inputs whose first byte is 0xB3: 0-3 tensors,
 * each with a stage as fuzz_staged draws it (mostly rotate, no norm and the
 * op's type, as a quantised store wants) and a quant of every kind (and
 * invalid ones): int8 with scales of natural, HND-like or fuzzed strides
 * (0, negative, overflowing), float8 e4m3 with a static scale (NaN,
 * infinities, 0, -0, negative, subnormal and huge included), q8_0 with
 * head_dim a multiple of 32 or not; in place (read from the cache slot) or
 * not, with or without slots, unique or repeated; head_dim up to past
 * ROPE_MAX_STAGE_DIM; one fault for one tensor (scales NULL or misaligned,
 * x or the slots misaligned, out one byte off its block, out == x, x NULL);
 * quants NULL when every quant is zero. Buffers -- x, out, scales, slots --
 * are exactly the span their strides reach (the one-byte shifts inside
 * exact blocks), and an in-place tensor's x is NULL or a block of 0 bytes,
 * so AddressSanitizer reports any access outside them. Besides:
 *   - a call that breaks a rule of rope_quant (its kind, in_place without
 *     slots or with a norm, copy or convert, float64 or convert with a
 *     kind, q8_0 with head_dim % 32, an fp8 scale not finite and > 0, int8
 *     without aligned scales, a fault above) is refused;
 *   - every instruction set reaches the scalar call's status and, where
 *     rows and scales never overlap and no two tokens share a slot, its
 *     bits (quantised bytes and scales exactly; float caches NaN payloads
 *     aside);
 *   - a failed call writes nothing; a successful one writes no out element
 *     and no scale that no written head reaches, and never writes x;
 *   - a successful scalar call equals, where rows and scales are apart and
 *     slots unique, the float32 stage (rope_rotate_staged into float32; in
 *     place: the cache dequantised here, then rotated) quantised here by
 *     formulas of this file (nearest float8 and float16 by search, not by
 *     bit tricks);
 *   - with one int8 tensor's scales laid in another buffer the call reads
 *     while it writes or writes (its own or another tensor's out, a stage's
 *     slots, the positions, a table, the frequencies), a call valid with
 *     the scales apart is refused with ROPE_E_OVERLAP, any other keeps its
 *     status, and nothing is written. */

/* The float8 e4m3fn value of code c (0x7F, 0xFF: NaN), by its definition. */
static float ref_e4m3_value(uint8_t c)
{
    const int e = (c >> 3) & 15, m = c & 7;
    const double sign = c & 0x80 ? -1.0 : 1.0;
    if (e == 15 && m == 7)
        return NAN;
    return (float)(sign * (e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10)));
}

/* float32 to float8 e4m3fn: clamped to +-448, then the nearest of the
 * codes 0..0x7E (ascending values) by binary search, a tie to the even
 * code; NaN: 0x7F. */
static uint8_t ref_e4m3(float v)
{
    static double value[0x7F];
    if (value[0x7E] == 0)
        for (int c = 0; c < 0x7F; c++)
            value[c] = ref_e4m3_value((uint8_t)c);
    if (isnan(v))
        return 0x7F;
    const uint8_t sign = signbit(v) ? 0x80 : 0;
    const double a = fmin(fabs((double)v), 448.0);
    int lo = 0, hi = 0x7E;   /* value[lo] <= a < value[hi], or a == 448 */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (value[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    if (a >= value[hi])
        return (uint8_t)(sign | hi);
    const double mid = (value[lo] + value[hi]) / 2;   /* exact: multiples of 2^-10 */
    const int c = a < mid ? lo : a > mid ? hi : lo % 2 ? hi : lo;
    return (uint8_t)(sign | c);
}

/* float16 bits to float, by the definition. */
static float ref_f16_value(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double sign = h & 0x8000 ? -1.0 : 1.0;
    if (e == 31)
        return m ? NAN : (float)(sign * INFINITY);
    return (float)(sign * (e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25)));
}

/* float32 to float16, nearest, ties to even: the value in units of its
 * binade's spacing, rounded in double (exact there). NaN: 0x7E00. */
static uint16_t ref_f16(float f)
{
    if (isnan(f))
        return 0x7E00;
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    const double a = fabs((double)f);
    if (a >= 65520.0)
        return (uint16_t)(sign | 0x7C00);
    int e;
    frexp(a, &e);
    const int ex = a < 0x1p-14 ? -14 : e - 1;
    const double r = rint(a / ldexp(1.0, ex - 10)) * ldexp(1.0, ex - 10);
    if (r < 0x1p-14)
        return (uint16_t)(sign | (uint16_t)(r * 0x1p24));
    frexp(r, &e);
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((r / ldexp(1.0, e - 1) - 1.0) * 1024.0));
}

/* max |v| over n values; NaN if any is NaN. */
static float ref_amax(const float *v, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i]))
            return NAN;
        m = fmaxf(m, fabsf(v[i]));
    }
    return m;
}

/* A float clipped to +-127 and rounded (ties away from zero when away,
 * else to even), as int8; NaN: 0. */
static int8_t ref_int8_of(float r, int away)
{
    if (isnan(r))
        return 0;
    const double c = fmax(-127.0, fmin(127.0, (double)r));
    return (int8_t)(away ? (c < 0 ? -floor(-c + 0.5) : floor(c + 0.5)) : rint(c));
}

/* One head of n values quantised by kind into out (q8_0: n / 32 blocks);
 * int8's scale to *s, fp8's static scale taken from *s. */
static void ref_quantise(int kind, const float *v, int64_t n, uint8_t *out, float *s)
{
    if (kind == ROPE_QUANT_INT8) {
        const float sc = ref_amax(v, n) / 127.0f;
        for (int64_t i = 0; i < n; i++)
            out[i] = (uint8_t)ref_int8_of(v[i] / sc, 0);
        *s = sc;
    } else if (kind == ROPE_QUANT_FP8_E4M3) {
        for (int64_t i = 0; i < n; i++)
            out[i] = ref_e4m3(v[i] / *s);
    } else {
        for (int64_t b = 0; b < n / ROPE_Q8_0_VALUES; b++) {
            const float *x = v + b * ROPE_Q8_0_VALUES;
            const float d = ref_amax(x, ROPE_Q8_0_VALUES) / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            const uint16_t dh = ref_f16(d);
            uint8_t *blk = out + b * ROPE_Q8_0_BYTES;
            blk[0] = (uint8_t)(dh & 0xFF);   /* little-endian, as the library's memcpy on x86 and arm64 */
            blk[1] = (uint8_t)(dh >> 8);
            for (int j = 0; j < ROPE_Q8_0_VALUES; j++)
                blk[2 + j] = (uint8_t)ref_int8_of(x[j] * id, 1);
        }
    }
}

/* The reverse: one head's float32 values from out (scale: int8's or fp8's). */
static void ref_dequantise(int kind, const uint8_t *in, int64_t n, float scale, float *v)
{
    for (int64_t i = 0; i < n; i++) {
        if (kind == ROPE_QUANT_INT8) {
            v[i] = (float)(int8_t)in[i] * scale;
        } else if (kind == ROPE_QUANT_FP8_E4M3) {
            v[i] = ref_e4m3_value(in[i]) * scale;
        } else {
            const uint8_t *blk = in + (i / ROPE_Q8_0_VALUES) * ROPE_Q8_0_BYTES;
            v[i] = (float)(int8_t)blk[2 + i % ROPE_Q8_0_VALUES] * ref_f16_value((uint16_t)(blk[0] | blk[1] << 8));
        }
    }
}

/* Quantised bytes equal: exactly, but a q8_0 block's float16 d may be any
 * NaN where the other is one. */
static int same_quantised(int kind, const uint8_t *a, const uint8_t *b, int64_t n_elems)
{
    if (kind != ROPE_QUANT_Q8_0)
        return memcmp(a, b, (size_t)n_elems) == 0;
    for (int64_t k = 0; k < n_elems; k++) {
        const uint8_t *x = a + k * ROPE_Q8_0_BYTES, *y = b + k * ROPE_Q8_0_BYTES;
        if (memcmp(x + 2, y + 2, ROPE_Q8_0_VALUES) != 0)
            return 0;
        if (memcmp(x, y, 2) != 0 && !(isnan(ref_f16_value((uint16_t)(x[0] | x[1] << 8))) &&
                                      isnan(ref_f16_value((uint16_t)(y[0] | y[1] << 8)))))
            return 0;
    }
    return 1;
}

static int same_floats(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i])))
            return 0;
    return 1;
}

/* An fp8 static scale: sel 0-7 valid (subnormal and huge ones too), the
 * others what rope_quant refuses. */
static float fp8_scale_of(unsigned sel)
{
    static const float SCALES[16] = {1.0f, 0.5f, 0.0625f, 3.3f, 1e-3f, 0x1p-140f, 3e38f, 7.0f,
                                     NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -1.0f, -0x1p-140f, -NAN};
    return SCALES[sel % 16];
}

/* Ordinary values in most elements of a buffer of storage type dtype (the
 * rest keeps its random bits), as fuzz_staged fills x. */
static void ordinary_values(uint8_t *p, int64_t n, int dtype, uint64_t *state)
{
    if (dtype != ROPE_F32 && dtype != ROPE_F64 && dtype != ROPE_F16 && dtype != ROPE_BF16)
        return;
    for (int64_t i = 0; i < n; i++)
        if (next_bits(state) % 4) {
            const double v = ((double)(next_bits(state) % 2001) - 1000.0) / 100.0;
            const float f = (float)v;
            const uint32_t u = f32_bits(f);
            if (dtype == ROPE_F32) {
                memcpy(p + 4 * i, &f, 4);
            } else if (dtype == ROPE_F64) {
                memcpy(p + 8 * i, &v, 8);
            } else if (dtype == ROPE_BF16) {
                const uint16_t hb = (uint16_t)(u >> 16);
                memcpy(p + 2 * i, &hb, 2);
            } else {
                const uint16_t hf = (uint16_t)(0x3C00u + (next_bits(state) % 0x800u)) ^ (uint16_t)((u >> 16) & 0x8000u);
                memcpy(p + 2 * i, &hf, 2);
            }
        }
}

typedef struct {
    int64_t heads, xs[3], os[3], ss[3];
    int kind, in_place, slotted;    /* kind, in_place as the quant has them */
    int64_t count[3];               /* what out (and scales) address: {batch, seq} or {block, slot}, heads */
    int64_t pe;                     /* out elements per head */
    size_t oes;                     /* out's element size */
    int64_t xlo, xn, olo, on, slo, sn;       /* element 0's place in x, out, scales; their elements */
    size_t xbytes;                           /* x's bytes (0 in place: a block of none) */
    size_t xshift, oshift, sshift, pshift;   /* bytes by which x, out, scales, slots sit into their blocks */
    uint8_t *xb, *x0, *ob, *out0, *outr;     /* blocks; x0, out0: contents before every call; outr: after scalar */
    float *sb, *sc0, *scr;                   /* the scales' block, before, after scalar (int8 only) */
    int64_t *slotb;                           /* the slots' block */
    int64_t *slots;                           /* the slots (n_tok, stride {ns or 0, 1}) */
    double *w;
    rope_stage st;
    rope_quant q;
    int ok;
} quant_tensor;

static uint8_t *q_x(const quant_tensor *t) { return t->xb + t->xshift; }
static uint8_t *q_out(const quant_tensor *t) { return t->ob + t->oshift; }
static float *q_scales(const quant_tensor *t) { return (float *)(void *)((char *)t->sb + t->sshift); }

/* out element and scale index (relative to the buffers) of head h of the
 * token whose out is addressed by (a0, a1). */
static int64_t q_out_at(const quant_tensor *t, int64_t a0, int64_t a1, int64_t h)
{
    return a0 * t->os[0] + a1 * t->os[1] + h * t->os[2] - t->olo;
}

static int64_t q_scale_at(const quant_tensor *t, int64_t a0, int64_t a1, int64_t h)
{
    return a0 * t->ss[0] + a1 * t->ss[1] + h * t->ss[2] - t->slo;
}

/* (a0, a1) of token (b, s): 0 when the token is skipped (slot -1 or out of range). */
static int q_addr(const quant_tensor *t, int64_t b, int64_t s, int64_t *a0, int64_t *a1)
{
    if (!t->slotted) {
        *a0 = b;
        *a1 = s;
        return 1;
    }
    const int64_t k = t->slots[b * t->st.slot_strides[0] + s * t->st.slot_strides[1]];
    if (k < 0 || k >= t->st.n_slots)
        return 0;
    *a0 = k / t->st.block_size;
    *a1 = k % t->st.block_size;
    return 1;
}

/* Do any two tokens that are written share a slot? */
static int q_slots_repeat(const quant_tensor *t, int64_t nb, int64_t ns)
{
    if (!t->slotted)
        return 0;
    for (int64_t a = 0; a < nb * ns; a++)
        for (int64_t c = a + 1; c < nb * ns; c++) {
            const int64_t sa = t->slots[(a / ns) * t->st.slot_strides[0] + a % ns];
            const int64_t sc = t->slots[(c / ns) * t->st.slot_strides[0] + c % ns];
            if (sa >= 0 && sa == sc)
                return 1;
        }
    return 0;
}

static void q_restore(quant_tensor *T, int n)
{
    for (int k = 0; k < n; k++) {
        quant_tensor *t = &T[k];
        if (!t->ok)
            continue;
        memcpy(q_x(t), t->x0, t->xbytes);
        memcpy(q_out(t), t->out0, (size_t)t->on * t->oes);
        if (t->sb)
            memcpy(q_scales(t), t->sc0, (size_t)t->sn * sizeof(float));
    }
}

static int q_untouched(const quant_tensor *T, int n)
{
    for (int k = 0; k < n; k++) {
        const quant_tensor *t = &T[k];
        if (!t->ok)
            continue;
        if (memcmp(q_x(t), t->x0, t->xbytes) != 0 || memcmp(q_out(t), t->out0, (size_t)t->on * t->oes) != 0 ||
            (t->sb && memcmp(q_scales(t), t->sc0, (size_t)t->sn * sizeof(float)) != 0))
            return 0;
    }
    return 1;
}

/* The successful scalar call's results of tensor t against the float32
 * stage quantised here (see the top of this section); only where rows and
 * scales are apart and no slot repeats. */
static void q_check_reference(const quant_tensor *t, const rope_op *op, const rope_angles *angles)
{
    const int64_t nb = op->n_batch, ns = op->n_seq, hd = op->head_dim, h = t->heads;
    const int quant = t->kind != ROPE_QUANT_NONE;
    if (h == 0 || nb == 0 || ns == 0 || (!quant && !t->in_place) || q_slots_repeat(t, nb, ns) ||
        !rows_disjoint(t->count, t->os, t->pe) || (t->kind == ROPE_QUANT_INT8 && !rows_disjoint(t->count, t->ss, 1)))
        return;
    const size_t es = (size_t)rope_dtype_size(op->dtype);
    const size_t ves = quant ? sizeof(float) : es;   /* the reference's element: float32, or the cache's type */
    const int64_t n = nb * ns * h * hd;
    uint8_t *g = xmalloc((size_t)n * ves), *res = xmalloc((size_t)n * ves);
    memset(g, 0, (size_t)n * ves);
    rope_op rop = *op;
    rop.n_threads = 1;
    rope_tensor rt = {g, res, h, {ns * h * hd, h * hd, hd}, {ns * h * hd, h * hd, hd}};
    rope_stage rst = {0};
    if (t->in_place) {
        /* the cache's heads, dequantised here (kind NONE: as they are) */
        for (int64_t b = 0; b < nb; b++)
            for (int64_t s = 0; s < ns; s++) {
                int64_t a0, a1;
                if (!q_addr(t, b, s, &a0, &a1))
                    continue;
                for (int64_t hh = 0; hh < h; hh++) {
                    const uint8_t *src = t->out0 + q_out_at(t, a0, a1, hh) * (int64_t)t->oes;
                    uint8_t *dst = g + ((b * ns + s) * h + hh) * hd * (int64_t)ves;
                    if (!quant)
                        memcpy(dst, src, (size_t)hd * es);
                    else
                        ref_dequantise(t->kind, src, hd, t->kind == ROPE_QUANT_INT8 ? t->sc0[q_scale_at(t, a0, a1, hh)]
                                                                                   : t->q.scale, (float *)(void *)dst);
                }
            }
        if (quant)
            rop.dtype = ROPE_F32;
    } else {
        rt.x = q_x(t) - t->xlo * (int64_t)es;
        memcpy(rt.x_strides, t->xs, sizeof rt.x_strides);
        rst = t->st;
        rst.slots = NULL;
        rst.convert = 1;
        rst.out_dtype = ROPE_F32;
    }
    if (rope_rotate_staged(&rop, &rt, &rst, 1, angles) != ROPE_OK)
        abort(); /* the float32 stage of an accepted call is valid */
    /* what the cache and scales must hold: as before, each written head replaced */
    uint8_t *want = xmalloc((size_t)t->on * t->oes);
    float *wsc = t->kind == ROPE_QUANT_INT8 ? xmalloc((size_t)t->sn * sizeof(float)) : NULL;
    memcpy(want, t->out0, (size_t)t->on * t->oes);
    if (wsc)
        memcpy(wsc, t->sc0, (size_t)t->sn * sizeof(float));
    for (int64_t b = 0; b < nb; b++)
        for (int64_t s = 0; s < ns; s++) {
            int64_t a0, a1;
            if (!q_addr(t, b, s, &a0, &a1))
                continue;
            for (int64_t hh = 0; hh < h; hh++) {
                const uint8_t *v = res + ((b * ns + s) * h + hh) * hd * (int64_t)ves;
                uint8_t *dst = want + q_out_at(t, a0, a1, hh) * (int64_t)t->oes;
                if (!quant) {
                    memcpy(dst, v, (size_t)hd * es);
                } else {
                    float sc = t->q.scale;
                    ref_quantise(t->kind, (const float *)(const void *)v, hd, dst, &sc);
                    if (wsc)
                        wsc[q_scale_at(t, a0, a1, hh)] = sc;
                }
            }
        }
    const int agree = quant ? same_quantised(t->kind, want, t->outr, t->on)
                            : same_values(want, t->outr, t->on, op->dtype, es);
    if (!agree || (wsc && !same_floats(wsc, t->scr, t->sn)))
        abort(); /* the quantised call is the float32 stage, quantised by the formulas */
    free(want); free(wsc); free(g); free(res);
}

/* The scalar call's writes of tensor t: none to an out element or scale
 * that no written head reaches. */
static void q_check_reached(const quant_tensor *t, int64_t nb, int64_t ns)
{
    if (t->heads == 0 || nb <= 0 || ns <= 0)
        return;
    uint8_t *reached = calloc((size_t)t->on, 1), *sreached = calloc((size_t)(t->sn ? t->sn : 1), 1);
    if (!reached || !sreached)
        abort();
    for (int64_t b = 0; b < nb; b++)
        for (int64_t s = 0; s < ns; s++) {
            int64_t a0, a1;
            if (!q_addr(t, b, s, &a0, &a1))
                continue;
            for (int64_t h = 0; h < t->heads; h++) {
                for (int64_t d = 0; d < t->pe; d++) {
                    const int64_t e = q_out_at(t, a0, a1, h) + d;
                    if (e < 0 || e >= t->on)
                        abort(); /* the call accepted a head outside out's span */
                    reached[e] = 1;
                }
                if (t->kind == ROPE_QUANT_INT8) {
                    const int64_t e = q_scale_at(t, a0, a1, h);
                    if (e < 0 || e >= t->sn)
                        abort(); /* the call accepted a scale outside its span */
                    sreached[e] = 1;
                }
            }
        }
    for (int64_t e = 0; e < t->on; e++)
        if (!reached[e] && memcmp(t->outr + e * (int64_t)t->oes, t->out0 + e * (int64_t)t->oes, t->oes) != 0)
            abort();
    for (int64_t e = 0; t->kind == ROPE_QUANT_INT8 && e < t->sn; e++)
        if (!sreached[e] && memcmp(&t->scr[e], &t->sc0[e], sizeof(float)) != 0)
            abort();
    free(reached);
    free(sreached);
}

static void fuzz_quantised(reader *r)
{
    const int n_dtypes = rope_dtype_count();
    const int dtype = (int)take_small(r, -1, n_dtypes - 1 + (take(r, 1) % 8 == 0));
    const int layout = (int)take_small(r, 0, take(r, 1) % 16 == 0 ? 2 : 1);
    const int inverse = (int)(take(r, 1) & 1);
    /* head_dim: mostly multiples of 32 up to 128, or a few either side;
     * small ones (mostly no multiple of 32); about ROPE_MAX_STAGE_DIM */
    const unsigned hsel = (unsigned)(take(r, 1) % 8);
    int64_t head_dim = hsel == 0 ? take_small(r, -2, 40) : 32 * take_small(r, 1, 4);
    if (hsel == 1)
        head_dim = ROPE_MAX_STAGE_DIM - 64 + head_dim;
    if (hsel != 0 && take(r, 1) % 8 == 0)
        head_dim += 2 * take_small(r, -2, 2);
    const int64_t rotary_dim = take(r, 1) & 1 ? head_dim : take_small(r, -2, head_dim > 0 ? head_dim + 2 : 4);
    const int64_t nb = take_small(r, -1, 3), ns = take_small(r, 0, 4);
    const int n_tensors = (int)take_small(r, -1, 3);
    const int threads = (int)take_small(r, 1, 3);
    const int64_t hd = head_dim > 0 ? head_dim : 1;
    const size_t es = rope_dtype_size(dtype) > 0 ? (size_t)rope_dtype_size(dtype) : 2;
    const unsigned fault = (unsigned)(take(r, 1) % 16);
    const int ftensor = (int)take_small(r, 0, 2);
    uint64_t state = take(r, 8);
    const int64_t n_tok = nb > 0 && ns > 0 ? nb * ns : 0;

    quant_tensor T[MAX_TENSORS];
    memset(T, 0, sizeof T);
    const int n_setup = n_tensors > 0 ? n_tensors : 0;
    for (int k = 0; k < n_setup; k++) {
        quant_tensor *t = &T[k];
        rope_stage *st = &t->st;
        rope_quant *q = &t->q;
        t->heads = take_small(r, 0, 4);
        const int64_t h = t->heads;
        const unsigned ksel = (unsigned)(take(r, 1) % 16);
        q->kind = ksel == 14 ? -1 : ksel == 15 ? ROPE_QUANT_Q8_0 + 1 : (int)(ksel % 4);
        t->kind = q->kind;
        t->slotted = take(r, 1) % 4 != 0;
        const unsigned isel = (unsigned)(take(r, 1) % 32);
        q->in_place = isel == 31 ? 2 : isel % 3 == 0;
        t->in_place = q->in_place == 1;
        q->scale = fp8_scale_of((unsigned)(take(r, 1) % 16 < 12 ? take(r, 1) % 8 : take(r, 1)));
        switch (take(r, 1) % 4) {   /* x: NHD, HND, anything, padded */
        case 0: t->xs[0] = ns * h * hd, t->xs[1] = h * hd, t->xs[2] = hd; break;
        case 1: t->xs[0] = h * ns * hd, t->xs[1] = hd, t->xs[2] = ns * hd; break;
        case 2: t->xs[0] = take_stride(r, ns * h * hd), t->xs[1] = take_stride(r, h * hd), t->xs[2] = take_stride(r, hd); break;
        default: t->xs[0] = ns * h * (hd + 3), t->xs[1] = h * (hd + 3), t->xs[2] = hd + 3; break;
        }
        /* the stage: mostly what a quantised store wants (rotate, or copy for values; no norm, no convert) */
        const unsigned ssel = (unsigned)(take(r, 1) % 8);
        st->copy = ssel == 7 ? (int)take_small(r, 0, 2) : ssel == 6;
        st->norm = ssel >= 4 && ssel < 6 ? (int)take_small(r, 0, 3) : 0;
        st->norm_eps = take_eps(r);
        st->convert = take(r, 1) % 8 == 0 ? (int)take_small(r, 1, 2) : 0;
        st->out_dtype = st->convert ? (int)take_small(r, -1, n_dtypes) : (int)take(r, 1) - 128;
        const int odt = st->convert ? st->out_dtype : dtype;
        t->oes = q->kind == ROPE_QUANT_NONE ? (rope_dtype_size(odt) > 0 ? (size_t)rope_dtype_size(odt) : 2)
                 : q->kind == ROPE_QUANT_Q8_0 ? ROPE_Q8_0_BYTES : 1;
        t->pe = q->kind == ROPE_QUANT_Q8_0 ? (hd / ROPE_Q8_0_VALUES > 0 ? hd / ROPE_Q8_0_VALUES : 1) : hd;
        const int64_t pe = t->pe;
        t->count[0] = nb, t->count[1] = ns, t->count[2] = h;
        if (t->slotted) {
            st->n_slots = take_small(r, -1, 12);
            st->block_size = take_small(r, -1, 4);
            const int64_t bs = st->block_size > 0 ? st->block_size : 1;
            t->count[0] = st->n_slots > 0 ? (st->n_slots - 1) / bs + 1 : 0;
            t->count[1] = bs;
            switch (take(r, 1) % 3) {   /* a paged cache: NHD, HND, or other strides */
            case 0: t->os[0] = bs * h * pe, t->os[1] = h * pe, t->os[2] = pe; break;
            case 1: t->os[0] = h * bs * pe, t->os[1] = pe, t->os[2] = bs * pe; break;
            default: t->os[0] = take_stride(r, bs * h * pe), t->os[1] = take_stride(r, h * pe), t->os[2] = take_stride(r, pe); break;
            }
            st->slot_strides[0] = ns;
            st->slot_strides[1] = 1;
            if (take(r, 1) % 8 == 0)
                st->slot_strides[0] = 0; /* every batch row the same slots */
            const int unique = take(r, 1) % 2;
            const uint64_t step = 1 + 2 * (take(r, 1) % 4), off = take(r, 1);
            t->pshift = fault == 5 && ftensor == k ? 1 : 0;
            t->slotb = xmalloc(sizeof(int64_t) * (size_t)(n_tok > 0 ? n_tok : 1) + t->pshift);
            int64_t *sl = (int64_t *)(void *)((char *)t->slotb + t->pshift);
            for (int64_t i = 0; i < n_tok; i++) {
                const uint64_t v = next_bits(&state);
                int64_t slot = v % 8 == 0 ? -1 : v % 8 == 1 ? st->n_slots : v % 16 == 2 ? -2
                               : v % 64 == 3 ? INT64_MIN : st->n_slots > 0 ? (int64_t)((v >> 8) % (uint64_t)st->n_slots) : 0;
                if (unique && st->n_slots > 0) /* mostly distinct while there are slots enough */
                    slot = (int64_t)(((uint64_t)i * step + off) % (uint64_t)st->n_slots);
                memcpy((char *)sl + 8 * i, &slot, 8);
            }
            t->slots = t->pshift ? NULL : sl;
            st->slots = sl;
        } else {
            switch (take(r, 1) % 3) {
            case 0: t->os[0] = ns * h * pe, t->os[1] = h * pe, t->os[2] = pe; break;
            case 1: t->os[0] = h * ns * pe, t->os[1] = pe, t->os[2] = ns * pe; break;
            default: t->os[0] = take_stride(r, ns * h * pe), t->os[1] = take_stride(r, h * pe), t->os[2] = take_stride(r, pe); break;
            }
        }
        /* int8's scales: {a0, a1, head} natural, heads apart, or anything */
        const int64_t c1 = t->count[1] > 0 ? t->count[1] : 1;
        switch (take(r, 1) % 3) {
        case 0: t->ss[0] = c1 * h, t->ss[1] = h, t->ss[2] = 1; break;
        case 1: t->ss[0] = c1, t->ss[1] = 1, t->ss[2] = t->count[0] * c1; break;
        default: t->ss[0] = take_stride(r, c1 * h), t->ss[1] = take_stride(r, h), t->ss[2] = take_stride(r, 1); break;
        }
        memcpy(q->scale_strides, t->ss, sizeof t->ss);
        /* buffers of exactly the spans */
        const int64_t xc[3] = {nb, ns, h};
        int64_t xlo, xhi, olo, ohi, slo, shi;
        const int a = span(xc, t->xs, hd, &xlo, &xhi), b = span(t->count, t->os, pe, &olo, &ohi);
        const int c = span(t->count, t->ss, 1, &slo, &shi);
        if (a == SPAN_HUGE || b == SPAN_HUGE || c == SPAN_HUGE ||
            (xhi - xlo) * (int64_t)es + (ohi - olo) * (int64_t)t->oes + (shi - slo) * 4 > (1 << 19))
            continue; /* a caller could not have such buffers */
        t->xlo = a == SPAN_OVERFLOW ? 0 : xlo;
        t->xn = a == SPAN_OVERFLOW ? 1 : xhi - xlo;
        t->olo = b == SPAN_OVERFLOW ? 0 : olo;
        t->on = b == SPAN_OVERFLOW ? 1 : ohi - olo;
        t->slo = c == SPAN_OVERFLOW ? 0 : slo;
        t->sn = c == SPAN_OVERFLOW ? 1 : shi - slo;
        if (t->in_place)
            t->xn = 0; /* not read: a block of no bytes */
        t->xbytes = (size_t)t->xn * es;
        t->xshift = fault == 3 && ftensor == k ? 1 : 0;
        t->xb = xmalloc(t->xbytes + t->xshift);
        t->x0 = xmalloc(t->xbytes);
        for (int64_t i = 0; i < t->xn * (int64_t)es; i++)
            t->x0[i] = (uint8_t)next_bits(&state);
        ordinary_values(t->x0, t->xn, dtype, &state);
        t->oshift = fault == 4 && ftensor == k ? 1 : 0;
        t->ob = xmalloc((size_t)t->on * t->oes + t->oshift);
        t->out0 = xmalloc((size_t)t->on * t->oes);
        t->outr = xmalloc((size_t)t->on * t->oes);
        for (int64_t i = 0; i < t->on * (int64_t)t->oes; i++)
            t->out0[i] = (uint8_t)next_bits(&state);
        if (q->kind == ROPE_QUANT_NONE)
            ordinary_values(t->out0, t->on, odt, &state);
        else if (q->kind == ROPE_QUANT_Q8_0)   /* mostly ordinary d (2^-8 .. 2^-1), now and then any bits */
            for (int64_t e = 0; e < t->on; e++)
                if (next_bits(&state) % 8) {
                    const uint16_t d = (uint16_t)(0x1C00u + next_bits(&state) % 0x1C00u);
                    t->out0[e * ROPE_Q8_0_BYTES] = (uint8_t)(d & 0xFF);
                    t->out0[e * ROPE_Q8_0_BYTES + 1] = (uint8_t)(d >> 8);
                }
        if (q->kind == ROPE_QUANT_INT8) {
            t->sshift = fault == 2 && ftensor == k ? 1 : 0;
            t->sb = xmalloc((size_t)t->sn * sizeof(float) + t->sshift);
            t->sc0 = xmalloc((size_t)t->sn * sizeof(float));
            t->scr = xmalloc((size_t)t->sn * sizeof(float));
            for (int64_t i = 0; i < t->sn; i++) {
                const uint64_t v = next_bits(&state);
                float f = (float)((v >> 8) % 1000 + 1) / 8192.0f;
                if (v % 16 == 0) {
                    const uint32_t u = (uint32_t)(v >> 16);
                    memcpy(&f, &u, 4);
                }
                t->sc0[i] = f;
            }
            q->scales = fault == 1 && ftensor == k ? NULL : q_scales(t);
        } else if (take(r, 1) % 2) {
            t->sb = xmalloc(0); /* not read: a block of no bytes */
            q->scales = t->sb;
            t->sb = NULL;
        }
        if (take(r, 1) % 3 != 0 && st->norm != 0) {
            const int64_t nw = st->norm == ROPE_NORM_TOKEN ? h * hd : hd;
            t->w = xmalloc(sizeof(double) * (size_t)(nw > 0 ? nw : 1));
            for (int64_t i = 0; i < nw; i++)
                t->w[i] = weight_of(next_bits(&state));
            st->norm_weight = t->w;
        }
        t->ok = 1;
    }
    /* angles: offset or a position list; a table or on the fly */
    const int64_t half = rotary_dim > 0 ? rotary_dim / 2 : 0;
    fuzz_angles fa;
    take_angles(r, dtype, rotary_dim, ns, n_tok, &fa);
    rope_angles angles = fa.angles;
    int64_t *const pos = fa.pos;
    double *const wf = fa.wf;
    void *const cosb = fa.cosb;
    const size_t rsize = fa.rsize;
    const int64_t table_rows = fa.angles.table_rows;
    const int list = fa.list, otf = fa.otf;
    const rope_op op = {dtype, layout, inverse, nb, ns, head_dim, rotary_dim, threads};
    rope_tensor tensors[MAX_TENSORS];
    rope_stage stages[MAX_TENSORS];
    rope_quant quants[MAX_TENSORS];
    int all_ok = 1, all_zero = 1, refuse = n_tensors < 0;
    for (int k = 0; k < n_setup; k++) {
        quant_tensor *t = &T[k];
        const rope_quant *q = &t->q;
        const rope_stage *st = &t->st;
        all_ok &= t->ok;
        if (!t->ok)
            break;
        const uint8_t *x = t->in_place ? (fault == 6 && ftensor == k ? NULL : q_x(t))
                           : fault == 6 && ftensor == k ? NULL : q_x(t) - t->xlo * (int64_t)es;
        uint8_t *out = q_out(t) - t->olo * (int64_t)t->oes;
        const int out_is_x = fault == 7 && ftensor == k && !t->in_place && (t->slotted || q->kind != ROPE_QUANT_NONE);
        tensors[k] = (rope_tensor){out_is_x ? out : x, out, t->heads, {t->xs[0], t->xs[1], t->xs[2]},
                                   {t->os[0], t->os[1], t->os[2]}};
        stages[k] = *st;
        quants[k] = *q;
        if (q->kind == ROPE_QUANT_INT8 && q->scales)
            quants[k].scales = q->scales - t->slo;
        all_zero &= q->kind == 0 && q->in_place == 0;
        /* what rope_quant refuses, whatever else the call holds */
        const int kind_ok = q->kind >= ROPE_QUANT_NONE && q->kind <= ROPE_QUANT_Q8_0;
        refuse |= !kind_ok || (q->in_place != 0 && q->in_place != 1);
        refuse |= q->in_place && (!t->slotted || st->norm != 0 || st->copy != 0 || st->convert != 0);
        if (kind_ok && q->kind != ROPE_QUANT_NONE) {
            refuse |= dtype == ROPE_F64 || st->convert != 0 || head_dim > ROPE_MAX_STAGE_DIM;
            refuse |= q->kind == ROPE_QUANT_Q8_0 && head_dim % ROPE_Q8_0_VALUES != 0;
            refuse |= q->kind == ROPE_QUANT_FP8_E4M3 && !(isfinite(q->scale) && q->scale > 0);
            refuse |= q->kind == ROPE_QUANT_INT8 && t->heads > 0 && (!q->scales || t->sshift);
        }
        if (t->heads > 0 && ftensor == k) {
            refuse |= (fault == 3 || fault == 6 || out_is_x) && !t->in_place;
            refuse |= fault == 4 && q->kind == ROPE_QUANT_NONE && kind_ok;
            refuse |= fault == 5 && t->slotted;
        }
    }
    if (!all_ok)
        goto done; /* (a tensor's buffers could not be had: nothing to test) */
    const int null_quants = all_zero && take(r, 1) % 2;
    /* newest fields: scales laid in another buffer */
    const unsigned alias = (unsigned)(take(r, 1) % 7);
    const uint64_t where = take(r, 2);

    const int isa0 = rope_get_isa();
    int isas[MAX_ISAS];
    const int n_isas = other_isas(isas);
    int st0 = ROPE_OK;
    for (int i = 0; i <= n_isas; i++) {
        q_restore(T, n_setup);
        rope_set_isa(i ? isas[i - 1] : 0);
        const int st = rope_rotate_quantised(&op, tensors, stages, null_quants ? NULL : quants, n_tensors, &angles);
        check_status(st);
        if (i == 0) {
            st0 = st;
            if (refuse && st == ROPE_OK)
                abort(); /* a call breaking a rule of rope_quant was accepted */
        } else if (st != st0) {
            abort(); /* error decisions must not depend on the kernel */
        }
        if (st != ROPE_OK) {
            if (!q_untouched(T, n_setup))
                abort(); /* nothing written before an error */
            continue;
        }
        for (int k = 0; k < n_setup; k++) {
            quant_tensor *t = &T[k];
            if (memcmp(q_x(t), t->x0, t->xbytes) != 0)
                abort(); /* x is read only */
            if (i == 0) {
                memcpy(t->outr, q_out(t), (size_t)t->on * t->oes);
                if (t->sb)
                    memcpy(t->scr, q_scales(t), (size_t)t->sn * sizeof(float));
                continue;
            }
            if (t->heads == 0 || q_slots_repeat(t, nb, ns) || !rows_disjoint(t->count, t->os, t->pe) ||
                (t->kind == ROPE_QUANT_INT8 && !rows_disjoint(t->count, t->ss, 1)))
                continue;
            const int same = t->kind == ROPE_QUANT_NONE
                                 ? same_values(q_out(t), t->outr, t->on, t->st.convert ? t->st.out_dtype : dtype, t->oes)
                                 : memcmp(q_out(t), t->outr, (size_t)t->on * t->oes) == 0 &&
                                       (!t->sb || memcmp(q_scales(t), t->scr, (size_t)t->sn * sizeof(float)) == 0);
            if (!same)
                abort(); /* every kernel stores the scalar kernels' bits */
        }
    }
    rope_set_isa(0);
    if (st0 == ROPE_OK)
        for (int k = 0; k < n_setup; k++) {
            q_check_reached(&T[k], nb, ns);
            q_check_reference(&T[k], &op, &angles);
        }
    /* the scales of the first int8 tensor with heads laid in a buffer the
     * call reads while it writes, or writes */
    int ak = -1;
    for (int k = 0; k < n_setup && ak < 0; k++)
        if (T[k].kind == ROPE_QUANT_INT8 && T[k].heads > 0 && T[k].q.scales && !T[k].sshift && !null_quants)
            ak = k;
    if (alias && ak >= 0) {
        quant_tensor *t = &T[ak];
        uint8_t *host = NULL;
        size_t host_bytes = 0;
        int read = 1;   /* does the call read (or write) the host? */
        if (alias <= 2) {   /* its own out, or the next tensor's */
            const quant_tensor *o = &T[alias == 1 ? ak : (ak + 1) % n_setup];
            host = q_out(o);
            host_bytes = (size_t)o->on * o->oes;
            read = o->heads > 0;
        } else if (alias == 3) {   /* the slots of the first slotted tensor (their span) */
            for (int k = 0; k < n_setup && !host; k++)
                if (T[k].slotted && T[k].slots) {
                    host = (uint8_t *)T[k].slots;
                    host_bytes = sizeof(int64_t) * (size_t)(T[k].st.slot_strides[0] ? n_tok : ns);
                    read = T[k].heads > 0;
                }
        } else if (alias == 4) {
            host = (uint8_t *)pos;
            host_bytes = sizeof(int64_t) * (size_t)n_tok;
            read = list;
        } else if (alias == 5) {
            host = cosb;
            host_bytes = rsize * (size_t)(table_rows * half);
            read = !otf && half <= 4096;
        } else {
            host = (uint8_t *)wf;
            host_bytes = sizeof(double) * (size_t)half;
            read = otf && half <= 4096;
        }
        int64_t heads_total = 0;
        for (int k = 0; k < n_setup; k++)
            heads_total += T[k].heads;
        /* the scales' span starts 4-aligned inside the host: they meet. A
         * call that must accept them (the host not read, nothing to do)
         * writes them all: then they must fit in the host. */
        const int meet = read && n_tok > 0 && heads_total > 0;
        const size_t skip = host ? (4 - (uintptr_t)host % 4) % 4 : 0;   /* an out may sit one byte into its block */
        const size_t room = host_bytes > skip ? host_bytes - skip : 0, need = meet ? 1 : (size_t)t->sn * 4;
        if (host && room >= 4 && room >= need && t->sn > 0 && t->count[0] > 0 && t->count[1] > 0) {
            uint8_t *at = host + skip + 4 * (size_t)(where % ((room - need) / 4 + 1));
            rope_quant aq[MAX_TENSORS];
            memcpy(aq, quants, sizeof aq);
            aq[ak].scales = (float *)(void *)at - t->slo;
            q_restore(T, n_setup);
            uint8_t *saved = xmalloc(host_bytes);
            memcpy(saved, host, host_bytes);
            const int st = rope_rotate_quantised(&op, tensors, stages, aq, n_tensors, &angles);
            check_status(st);
            if (st0 == ROPE_OK ? st != (meet ? ROPE_E_OVERLAP : ROPE_OK) : st != st0)
                abort(); /* refused exactly when the scales meet what the call reads or writes */
            if (st != ROPE_OK && (!q_untouched(T, n_setup) || memcmp(host, saved, host_bytes) != 0))
                abort(); /* nothing written */
            memcpy(host, saved, host_bytes);
            free(saved);
        }
    }
    rope_set_isa(isa0);
done:
    for (int k = 0; k < MAX_TENSORS; k++) {
        quant_tensor *t = &T[k];
        free(t->xb); free(t->x0); free(t->ob); free(t->out0); free(t->outr);
        free(t->sb); free(t->sc0); free(t->scr);
        if (t->q.kind != ROPE_QUANT_INT8 && t->q.scales)
            free(t->q.scales);
        free(t->w);
        free(t->slotb);
    }
    release_angles(&fa);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    const uint64_t first = take(&r, 1);
    if (first == 0xB1)
        fuzz_big(&r);
    else if (first == 0xB2)
        fuzz_staged(&r);
    else if (first == 0xB3)
        fuzz_quantised(&r);
    else if (first % 4 == 0)
        fuzz_tables(&r);
    else
        fuzz_rotate(&r);
    return 0;
}
