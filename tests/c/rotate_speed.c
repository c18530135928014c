/* Single-process timing of the rotation kernels on the prefill shapes, with
 * the bandwidth yardstick over the same bytes timed in the same repetition
 * (medians, microseconds), for iterating on csrc/rotate_avx2_*.c without the
 * Python layer or the peers:
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/rotate_speed.c csrc/[a-z]*.c -lm -o build/rotate_speed
 *   build/rotate_speed [threads=1] [repetitions=41] [byte offset=0] [isa=best]
 *
 * isa is a name from the registry ("scalar", "avx2", ...) or its number;
 * the usage message lists the ones this build knows.
 *
 * The byte offset places the data that far past a 64-byte boundary (numpy
 * puts large arrays 16 bytes past a page). Everything rotates in place.
 *
 * "in L1" is the same call with a sequence stride of 0: every token
 * rotates the same one token's heads (4-16 KiB, held in L1) while the table
 * rows are read as usual, on one thread (two threads on one token would
 * write the same bytes). Where the real call takes about as long as that,
 * the memory costs nothing extra: the instructions are the limit. (It is no
 * strict bound: rotating the same bytes again and again is itself a few
 * percent slower for float16 than streaming, measured.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyrope.h"

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MAX_REPS 1001

/* The instruction set named (or numbered) arg, or -1. */
static int isa_from_arg(const char *arg)
{
    for (int i = 0; i < rope_isa_count(); i++)
        if (strcmp(arg, rope_isa_name(i)) == 0)
            return i;
    char *end;
    const long i = strtol(arg, &end, 10);
    return *arg && !*end && i >= 0 && i < rope_isa_count() ? (int)i : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: rotate_speed [threads] [repetitions 1..%d] [byte offset 0..64, multiple of 4] [isa]\n"
                    "isa:", MAX_REPS);
    for (int i = 0; i < rope_isa_count(); i++)
        fprintf(stderr, " %d=%s%s", i, rope_isa_name(i), rope_isa_supported(i) ? "" : " (not supported here)");
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    int reps = argc > 2 ? atoi(argv[2]) : 41;
    const int offset = argc > 3 ? atoi(argv[3]) : 0;
    if (argc > 4 && rope_set_isa(isa_from_arg(argv[4])) != ROPE_OK) {
        fprintf(stderr, "isa %s is not supported here\n", argv[4]);
        usage();
        return 2;
    }
    if (reps < 1 || reps > MAX_REPS || offset < 0 || offset > 64 || offset % 4) {
        usage();
        return 2;
    }
    const int64_t seq = 2048, head_dim = 128, half = 64;
    double inv_freq[64];
    for (int i = 0; i < half; i++)
        inv_freq[i] = __builtin_pow(10000.0, -2.0 * i / head_dim);
    float *cos = malloc(seq * half * sizeof(float)), *sin = malloc(seq * half * sizeof(float));
    if (!cos || !sin || rope_cos_sin_range_f32(0, seq, inv_freq, half, 1.0, cos, sin) != ROPE_OK)
        return 1;
    static double t[5][MAX_REPS];
    const int64_t heads[2] = {32, 8};
    const char *shape[2] = {"prefill_q", "prefill_k"};
    const int dtypes[3] = {ROPE_F32, ROPE_F16, ROPE_BF16};
    printf("isa %s, threads %d, offset %d bytes, medians of %d (us)\n", rope_isa_name(rope_get_isa()), threads, offset, reps);
    for (int s = 0; s < 2; s++) {
        const size_t n = (size_t)seq * heads[s] * head_dim;
        unsigned char *base = aligned_alloc(64, n * 4 + 128);
        if (!base)
            return 1;
        unsigned char *x = base + offset;
        for (int d = 0; d < 3; d++) {
            const size_t esize = (size_t)rope_dtype_size(dtypes[d]);
            /* the table rows of positions 0..seq-1; strides {batch, seq, head} */
            const rope_angles angles = {.source = ROPE_POS_OFFSET, .cos_table = cos, .sin_table = sin,
                                        .table_rows = seq, .scale = 1.0};
            rope_tensor streamed = {x, x, heads[s], {0, heads[s] * head_dim, head_dim},
                                    {0, heads[s] * head_dim, head_dim}};
            rope_tensor in_l1 = {x, x, heads[s], {0, 0, head_dim}, {0, 0, head_dim}};
            for (size_t i = 0; i < n * esize; i += 2) { /* 1.06 as float16/bfloat16/float32 halves */
                x[i] = 0x3c;
                x[i + 1] = 0x3c;
            }
            for (int r = 0; r < reps; r++) {
                double t0 = now_us();
                rope_bandwidth_pass(x, (int64_t)(n * esize), 0x80008000u, threads);
                t[0][r] = now_us() - t0;
                for (int layout = 0; layout < 2; layout++) {
                    const rope_op op = {dtypes[d], layout, 0, 1, seq, head_dim, head_dim, threads};
                    const rope_op op1 = {dtypes[d], layout, 0, 1, seq, head_dim, head_dim, 1};
                    t0 = now_us();
                    if (rope_rotate(&op, &streamed, 1, &angles) != ROPE_OK)
                        return 1;
                    t[1 + layout][r] = now_us() - t0;
                    t0 = now_us(); /* in L1: sequence stride 0, one thread */
                    if (rope_rotate(&op1, &in_l1, 1, &angles) != ROPE_OK)
                        return 1;
                    t[3 + layout][r] = now_us() - t0;
                }
            }
            for (int k = 0; k < 5; k++)
                qsort(t[k], reps, sizeof(double), by_value);
            const double y = t[0][reps / 2], il = t[1][reps / 2], sh = t[2][reps / 2];
            const double cil = t[3][reps / 2], csh = t[4][reps / 2];
            printf("%-9s %-8s yardstick %7.1f  interleaved %7.1f (%.2f; in L1 %6.1f)"
                   "  split_half %7.1f (%.2f; in L1 %6.1f)\n",
                   shape[s], rope_dtype_name(dtypes[d]), y, il, y / il, cil, sh, y / sh, csh);
        }
        free(base);
    }
    free(cos);
    free(sin);
    return 0;
}
