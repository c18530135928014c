/* Single-process timing of the rotation kernels on prefill and decode
 * shapes, with the bandwidth yardstick over the same bytes timed in the same
 * repetition, for iterating on the rotation kernels (csrc/isa/<name>/) without the Python layer or
 * the peers; one run can time several instruction sets side by side on the
 * same data:
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/rotate_speed.c $(find csrc -name '*.c') -lm -o build/rotate_speed
 *   build/rotate_speed [threads=1] [repetitions=41] [byte offset=0] [isas=best]
 *                      [dtypes=float32,float16,bfloat16] [shapes=all]
 *
 * isas is a name from the registry ("scalar", "avx2", ...) or its number, a
 * comma-separated list of them, or "all" (every supported one); dtypes a
 * list of storage-type names or "all"; shapes a list of the shapes below or
 * "all". The usage message lists what this build knows.
 *
 * Shapes ([batch, seq, heads, head_dim], float32 rows of a table):
 *   prefill_q 1x2048x32x128, prefill_k 1x2048x8x128 (positions 0..2047),
 *   decode16 16x1x32x128, decode64 64x1x32x128 (every token at position 1000).
 * Both layouts, full rotary, in place. A decode call is a few microseconds:
 * each timed sample repeats the call (the same count for every contender of
 * a case), so decode data stays in cache, as between a model's layers.
 *
 * The byte offset places the data that far past a 64-byte boundary (numpy
 * puts large arrays 16 bytes past a page).
 *
 * "in L1" is the same call with a sequence (decode: batch) stride of 0:
 * every token rotates the same one token's heads (4-16 KiB, held in L1)
 * while the table rows are read as usual, on one thread (two threads on one
 * token would write the same bytes). Where the real call takes about as
 * long as that, the memory costs nothing extra: the instructions are the
 * limit. (It is no strict bound: rotating the same bytes again and again is
 * itself a few percent slower for float16 than streaming, measured.)
 *
 * Method: every repetition times each instruction set in turn, the order
 * rotated from one repetition to the next, each set's yardstick (its own
 * widest pass) right before its kernels; all contenders run for about 10 ms
 * before the first repetition of a case. Printed: medians (microseconds per
 * call), the fraction of the yardstick (median of the per-repetition ratios
 * yardstick time / kernel time) and, with several sets, each set's speed
 * relative to the first one named: the median of the per-repetition ratios
 * (first set's time / this set's time), with their interquartile range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyrope.h"
#include "timing.h"

#define MAX_REPS 1001
#define MAX_ISAS 8


typedef struct {
    const char *name;
    int64_t batch, seq, heads, position; /* position < 0: positions 0..seq-1 */
} shape;

static const shape SHAPES[] = {
    {"prefill_q", 1, 2048, 32, -1},
    {"prefill_k", 1, 2048, 8, -1},
    {"decode16", 16, 1, 32, 1000},
    {"decode64", 64, 1, 32, 1000},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static void usage(void)
{
    fprintf(stderr, "usage: rotate_speed [threads] [repetitions 1..%d]"
                    " [byte offset 0..64, multiple of 4] [isa[,isa...]|all]"
                    " [dtype[,dtype...]|all] [shape[,shape...]|all]\nisa:", MAX_REPS);
    for (int i = 0; i < rope_isa_count(); i++)
        fprintf(stderr, " %d=%s%s", i, rope_isa_name(i),
                rope_isa_supported(i) ? "" : " (not supported here)");
    fprintf(stderr, "\ndtype:");
    for (int d = 0; d < rope_dtype_count(); d++)
        fprintf(stderr, " %s", rope_dtype_name(d));
    fprintf(stderr, "\nshape:");
    for (int s = 0; s < N_SHAPES; s++)
        fprintf(stderr, " %s", SHAPES[s].name);
    fprintf(stderr, "\n");
}

/* Items of a comma-separated list, each looked up by find (-1: unknown),
 * into out[max]; "all" takes every index 0..n_all-1 that ok() accepts.
 * Returns the count, or -1 on an unknown or unsupported item. */
static int parse_list(const char *arg, int (*find)(const char *), int (*ok)(int), int n_all,
                      int *out, int max)
{
    int n = 0;
    if (strcmp(arg, "all") == 0) {
        for (int i = 0; i < n_all && n < max; i++)
            if (ok(i))
                out[n++] = i;
        return n;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int i = find(tok);
        if (i < 0 || !ok(i) || n == max)
            return -1;
        out[n++] = i;
    }
    return n;
}

static int dtype_from_arg(const char *arg)
{
    for (int d = 0; d < rope_dtype_count(); d++)
        if (strcmp(arg, rope_dtype_name(d)) == 0)
            return d;
    return -1;
}
static int shape_from_arg(const char *arg)
{
    for (int s = 0; s < N_SHAPES; s++)
        if (strcmp(arg, SHAPES[s].name) == 0)
            return s;
    return -1;
}
static int any(int i) { return i >= 0; }

/* Everything one timed sample needs. */
typedef struct {
    rope_op op;
    rope_tensor t;
    const rope_angles *angles;
} call;

static int run(const call *c, int inner)
{
    for (int k = 0; k < inner; k++)
        if (rope_rotate(&c->op, &c->t, 1, c->angles) != ROPE_OK)
            return 0;
    return 1;
}

/* Samples per repetition and instruction set: the yardstick, then per
 * layout the real call and the in-L1 one. */
enum { T_YARD, T_IL, T_SH, T_IL_L1, T_SH_L1, N_T };
static const char *const T_NAMES[N_T] = {"yardstick", "interleaved", "split_half",
                                         "interleaved in L1", "split_half in L1"};

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int reps = argc > 2 ? atoi(argv[2]) : 41;
    const int offset = argc > 3 ? atoi(argv[3]) : 0;
    int isas[MAX_ISAS], n_isa = 1, dtypes[16], n_dtypes = 3;
    int shapes[N_SHAPES], n_shapes = N_SHAPES;
    isas[0] = rope_get_isa();
    dtypes[0] = ROPE_F32, dtypes[1] = ROPE_F16, dtypes[2] = ROPE_BF16;
    for (int s = 0; s < N_SHAPES; s++)
        shapes[s] = s;
    if (argc > 4 && (n_isa = parse_list(argv[4], isa_from_arg, rope_isa_supported,
                                        rope_isa_count(), isas, MAX_ISAS)) < 1) {
        fprintf(stderr, "isa %s is unknown or not supported here\n", argv[4]);
        usage();
        return 2;
    }
    if ((argc > 5 && (n_dtypes = parse_list(argv[5], dtype_from_arg, any, rope_dtype_count(),
                                            dtypes, 16)) < 1) ||
        (argc > 6 && (n_shapes = parse_list(argv[6], shape_from_arg, any, N_SHAPES, shapes,
                                            N_SHAPES)) < 1) ||
        reps < 1 || reps > MAX_REPS || offset < 0 || offset > 64 || offset % 4) {
        usage();
        return 2;
    }

    /* table rows of positions 0..2047, float and double */
    const int64_t rows = 2048, head_dim = 128, half = 64;
    double inv_freq[64];
    for (int i = 0; i < half; i++)
        inv_freq[i] = __builtin_pow(10000.0, -2.0 * i / head_dim);
    float *cos = malloc(rows * half * sizeof(float)), *sin = malloc(rows * half * sizeof(float));
    double *cosd = malloc(rows * half * sizeof(double));
    double *sind = malloc(rows * half * sizeof(double));
    int64_t *pos = malloc(rows * sizeof(int64_t));
    if (!cos || !sin || !cosd || !sind || !pos)
        return 1;
    for (int64_t p = 0; p < rows; p++)
        pos[p] = p;
    if (rope_cos_sin_range_f32(0, rows, inv_freq, half, 1.0, cos, sin) != ROPE_OK ||
        rope_cos_sin_f64(pos, rows, inv_freq, half, 1.0, cosd, sind) != ROPE_OK)
        return 1;

    static double t[MAX_ISAS][N_T][MAX_REPS];
    static double ratio[MAX_REPS];
    printf("threads %d, offset %d bytes, %d repetitions; medians (us per call)\n", threads, offset,
           reps);
    for (int si = 0; si < n_shapes; si++) {
        const shape *sp = &SHAPES[shapes[si]];
        const size_t n = (size_t)(sp->batch * sp->seq * sp->heads * head_dim);
        unsigned char *base = aligned_alloc(64, n * 8 + 128);
        if (!base)
            return 1;
        unsigned char *x = base + offset;
        for (int di = 0; di < n_dtypes; di++) {
            const int dtype = dtypes[di];
            const size_t esize = (size_t)rope_dtype_size(dtype);
            const int wide = dtype == ROPE_F64;
            const rope_angles angles = {.source = ROPE_POS_OFFSET,
                                        .offset = sp->position < 0 ? 0 : sp->position,
                                        .cos_table = wide ? (const void *)cosd : cos,
                                        .sin_table = wide ? (const void *)sind : sin,
                                        .table_rows = rows, .scale = 1.0};
            /* strides {batch, seq, head}; in L1: the token stride 0 */
            const int64_t tok = sp->heads * head_dim;
            const int64_t st[3] = {sp->seq * tok, tok, head_dim};
            const int64_t st1[3] = {0, 0, head_dim};
            call calls[4]; /* [layout][in L1] */
            for (int layout = 0; layout < 2; layout++)
                for (int l1 = 0; l1 < 2; l1++) {
                    call *c = &calls[2 * layout + l1];
                    c->op = (rope_op){dtype, layout, 0, sp->batch, sp->seq, head_dim, head_dim,
                                      l1 ? 1 : threads};
                    c->t = (rope_tensor){x, x, sp->heads, {0}, {0}};
                    memcpy(c->t.x_strides, l1 ? st1 : st, sizeof st);
                    memcpy(c->t.out_strides, l1 ? st1 : st, sizeof st);
                    c->angles = &angles;
                }
            /* 1.06 as float16/bfloat16/float32 halves (float64: a tiny normal) */
            for (size_t i = 0; i < n * esize; i += 2) {
                x[i] = 0x3c;
                x[i + 1] = 0x3c;
            }
            const int64_t bytes = (int64_t)(n * esize);
            /* calls per sample: ~300 us or more for the fastest set, the same
             * count for every contender */
            double t0, once = 1e30;
            for (int i = 0; i < n_isa; i++) {
                rope_set_isa(isas[i]);
                t0 = now_us();
                if (!run(&calls[0], 1))
                    return 1;
                const double d = now_us() - t0;
                once = d < once ? d : once;
            }
            const int inner = once >= 300 ? 1 : (int)(300 / (once > 1 ? once : 1)) + 1;
            /* warm every contender up for about 10 ms */
            for (int i = 0; i < n_isa; i++) {
                rope_set_isa(isas[i]);
                for (t0 = now_us(); now_us() - t0 < 10e3 / n_isa;)
                    for (int k = 0; k < 4; k++)
                        if (!run(&calls[k], inner) ||
                            rope_bandwidth_pass(x, bytes, 0x80008000u, threads) != ROPE_OK)
                            return 1;
            }
            for (int r = 0; r < reps; r++)
                for (int j = 0; j < n_isa; j++) {
                    const int i = (r + j) % n_isa;
                    rope_set_isa(isas[i]);
                    t0 = now_us();
                    for (int k = 0; k < inner; k++)
                        rope_bandwidth_pass(x, bytes, 0x80008000u, threads);
                    t[i][T_YARD][r] = (now_us() - t0) / inner;
                    for (int layout = 0; layout < 2; layout++)
                        for (int l1 = 0; l1 < 2; l1++) {
                            t0 = now_us();
                            if (!run(&calls[2 * layout + l1], inner))
                                return 1;
                            t[i][(l1 ? T_IL_L1 : T_IL) + layout][r] = (now_us() - t0) / inner;
                        }
                }
            for (int i = 0; i < n_isa; i++) {
                double fr[2], med[N_T];
                for (int layout = 0; layout < 2; layout++) {
                    for (int r = 0; r < reps; r++)
                        ratio[r] = t[i][T_YARD][r] / t[i][T_IL + layout][r];
                    fr[layout] = quantile(ratio, reps, 0.5);
                }
                for (int k = 0; k < N_T; k++) {
                    double v[MAX_REPS];
                    memcpy(v, t[i][k], (size_t)reps * sizeof(double));
                    med[k] = quantile(v, reps, 0.5);
                }
                printf("%-9s %-8s %-10s yardstick %7.1f  interleaved %7.1f (%.2f; in L1 %6.1f)"
                       "  split_half %7.1f (%.2f; in L1 %6.1f)\n",
                       sp->name, rope_dtype_name(dtype), rope_isa_name(isas[i]), med[T_YARD],
                       med[T_IL], fr[0], med[T_IL_L1], med[T_SH], fr[1], med[T_SH_L1]);
            }
            for (int i = 1; i < n_isa; i++) {
                printf("%-9s %-8s %s / %s speed:", sp->name, rope_dtype_name(dtype),
                       rope_isa_name(isas[i]), rope_isa_name(isas[0]));
                for (int k = T_IL; k < N_T; k++) {
                    for (int r = 0; r < reps; r++)
                        ratio[r] = t[0][k][r] / t[i][k][r];
                    const double q1 = quantile(ratio, reps, 0.25), q3 = quantile(ratio, reps, 0.75);
                    const double med = quantile(ratio, reps, 0.5);
                    printf("  %s %.2f [%.2f-%.2f]", T_NAMES[k], med, q1, q3);
                }
                printf("\n");
            }
        }
        free(base);
    }
    free(cos);
    free(sin);
    free(cosd);
    free(sind);
    free(pos);
    return 0;
}
