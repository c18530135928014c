/* One thread against two, on the shapes a decode step and a prefill rotate,
 * with the idle gaps a backend leaves between calls (it calls rope between
 * matmuls), so that the split rule and the pool's wake-up (csrc/core/threads.c)
 * can be re-measured on any machine:
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/thread_split.c $(find csrc -name '*.c') -lm -o build/thread_split
 *   build/thread_split [repetitions=41] [isa=best] [sections=sti]
 *
 * isa is a name from the registry ("scalar", "avx2", ...) or its number:
 * a slower or faster kernel moves the break-even of a split.
 * sections: s = the split table, t = the first calls after an idle gap,
 * i = CPU time of the process over an idle second after a burst of calls.
 *
 * Split table: every case is rotated in place (split half, positions from
 * 1000 on for decode, from 0 for prefill, a float32 table) by three
 * contenders, all on the same data: "1" (n_threads 1), "2" (n_threads 2,
 * the library's rule) and "2!" (n_threads 2 with the rule off: every call
 * is split, waking the pool if it sleeps, and losses do not stop it). Each
 * case is warmed 10 ms per contender; then each repetition sleeps `gap`
 * before every timed call (gap 0: runs 8 calls back to back and takes
 * their mean, so a run's first calls, which find the pool asleep, count)
 * and rotates the order of the contenders. Printed:
 * the traffic (bytes read + written), median and 90th percentile per
 * contender (us), the median and 90th percentile of the per-repetition
 * ratios to "1" (below 1: faster than one thread), and what the rule did
 * with contender "2"'s calls: the share it split, the wake-ups of a sleeping
 * worker, and the splits it judged lost (each makes the pool back off).
 * The machine is shared: run it twice, and read the 90th percentiles as the
 * noise of the other processes (a worker preempted while it holds a part
 * makes the caller wait).
 *
 * First calls: after sleeping `gap`, ten calls back to back, each timed;
 * the median over repetitions of each call's time, for the yardstick
 * (rope_bandwidth_pass over the same bytes, one thread: the machine's own
 * slow start) and the rotation on one thread, on two by the rule and on two
 * always; for a decode call (1 MiB) and a prefill k (4 MiB). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/kernels.h"
#include "core/threads.h"
#include "timing.h"

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void idle_us(double us)
{
    if (us <= 0)
        return;
    struct timespec t = {(time_t)(us / 1e6), (long)((us - (time_t)(us / 1e6) * 1e6) * 1e3)};
    nanosleep(&t, NULL);
}

#define MAX_REPS 401
#define N_CONT 3
#define TABLE_ROWS 4096
#define HEAD_DIM 128
#define HALF 64

typedef struct {
    const char *name;
    int64_t batch, seq, heads;
} shape;

static const shape SHAPES[] = {
    {"decode 64x1x32", 64, 1, 32},
    {"decode 16x1x32", 16, 1, 32},
    {"prefill k 1x2048x8", 1, 2048, 8},
    {"prefill q 1x2048x32", 1, 2048, 32},
};

static float *g_cos, *g_sin;

/* One in-place rotation of x (shape sh, dtype) on up to n_threads. */
static int rotate(const shape *sh, int dtype, void *x, int n_threads)
{
    const int64_t offset = sh->seq == 1 ? 1000 : 0;
    const rope_op op = {dtype, ROPE_SPLIT_HALF, 0, sh->batch, sh->seq, HEAD_DIM, HEAD_DIM, n_threads};
    const int64_t st[3] = {sh->seq * sh->heads * HEAD_DIM, sh->heads * HEAD_DIM, HEAD_DIM};
    const rope_tensor t = {x, x, sh->heads, {st[0], st[1], st[2]}, {st[0], st[1], st[2]}};
    const rope_angles a = {.source = ROPE_POS_OFFSET, .offset = offset, .cos_table = g_cos,
                           .sin_table = g_sin, .table_rows = TABLE_ROWS, .scale = 1.0};
    return rope_rotate(&op, &t, 1, &a);
}

static size_t shape_bytes(const shape *sh, int dtype)
{
    return (size_t)(sh->batch * sh->seq * sh->heads * HEAD_DIM) * (size_t)rope_dtype_size(dtype);
}

static void *filled(size_t n)
{
    unsigned char *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        exit(1);
    for (size_t i = 0; i + 1 < n; i += 2) { /* 1.06 as float16/bfloat16/float32 halves */
        p[i] = 0x3c;
        p[i + 1] = 0x3c;
    }
    return p;
}

/* What the library's rule did with contender "2"'s calls. */
static int64_t g_rule[ROPE_THREAD_STATS];

/* Contender c's call: 0 one thread, 1 two by the rule, 2 two always. */
static double timed_call(int c, const shape *sh, int dtype, void *x)
{
    int64_t before[ROPE_THREAD_STATS], after[ROPE_THREAD_STATS];
    if (c == 2)
        rope_threads_set_rule(0, 0, 0);
    rope_threads_stats(before);
    const double t0 = now_us();
    if (rotate(sh, dtype, x, c == 0 ? 1 : 2) != ROPE_OK)
        exit(1);
    const double t = now_us() - t0;
    rope_threads_stats(after);
    rope_threads_set_rule(-1, -1, 1);
    if (c == 1)
        for (int i = 0; i < ROPE_THREAD_STATS; i++)
            g_rule[i] += after[i] - before[i];
    return t;
}

/* Calls back to back per repetition at gap 0. */
#define RUN 8

static void split_table(int reps)
{
    static double t[N_CONT][MAX_REPS], ratio[N_CONT][MAX_REPS];
    const int dtypes[3] = {ROPE_F32, ROPE_F16, ROPE_BF16};
    const double gaps[3] = {0, 1000, 10000};
    printf("\n1 vs 2 threads, in place, split half; us per call: median / 90th percentile of %d "
           "(gap 0: runs of %d calls back to back); ratio to 1 thread: median / 90th percentile\n",
           reps, RUN);
    printf("%-20s %-8s %6s %8s %15s %15s %15s %13s %13s  %s\n", "case", "dtype", "gap", "traffic",
           "1", "2", "2!", "2/1", "2!/1", "2: split wakes lost");
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++)
        for (int d = 0; d < 3; d++) {
            const shape *sh = &SHAPES[s];
            const size_t n = shape_bytes(sh, dtypes[d]);
            void *x = filled(n);
            for (int g = 0; g < 3; g++) {
                for (int c = 0; c < N_CONT; c++) /* warm: data in cache, pool started */
                    for (double t0 = now_us(); now_us() - t0 < 10000;)
                        timed_call(c, sh, dtypes[d], x);
                memset(g_rule, 0, sizeof g_rule);
                const int run = gaps[g] == 0 ? RUN : 1;
                for (int r = 0; r < reps; r++)
                    for (int k = 0; k < N_CONT; k++) {
                        const int c = (r + k) % N_CONT;
                        idle_us(gaps[g]);
                        t[c][r] = 0;
                        for (int i = 0; i < run; i++)
                            t[c][r] += timed_call(c, sh, dtypes[d], x) / run;
                    }
                for (int r = 0; r < reps; r++)
                    for (int c = 1; c < N_CONT; c++)
                        ratio[c][r] = t[c][r] / t[0][r];
                printf("%-20s %-8s %5.0fus %5zuKiB", sh->name, rope_dtype_name(dtypes[d]), gaps[g], 2 * n >> 10);
                for (int c = 0; c < N_CONT; c++) {
                    const double m = quantile(t[c], reps, 0.5), p = quantile(t[c], reps, 0.9);
                    printf(" %7.1f/%7.1f", m, p);
                }
                for (int c = 1; c < N_CONT; c++) {
                    const double m = quantile(ratio[c], reps, 0.5), p = quantile(ratio[c], reps, 0.9);
                    printf(" %6.2f/%6.2f", m, p);
                }
                printf("   %3d%% %3d %3d\n", (int)(100 * g_rule[ROPE_STAT_SPLIT] / (reps * run)),
                       (int)g_rule[ROPE_STAT_WAKES], (int)g_rule[ROPE_STAT_LOSSES]);
                fflush(stdout);
            }
            free(x);
        }
}

#define FIRST 10

/* The first FIRST calls after each gap, for the shape sh (float32). */
static void first_calls_of(const shape *sh, int reps)
{
    const size_t n = shape_bytes(sh, ROPE_F32);
    void *x = filled(n);
    static double t[4][FIRST][MAX_REPS];
    const double gaps[4] = {0, 2000, 10000, 100000};
    const char *names[4] = {"yardstick 1", "rope 1", "rope 2", "rope 2!"};
    printf("\nfirst %d calls after an idle gap (%s, float32, in place); us, medians of %d\n", FIRST,
           sh->name, reps);
    for (int g = 0; g < 4; g++) {
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 4; k++) {
                const int c = (r + k) % 4;
                idle_us(gaps[g]);
                for (int i = 0; i < FIRST; i++) {
                    if (c == 0) {
                        const double t0 = now_us();
                        rope_bandwidth_pass(x, (int64_t)n, 0, 1);
                        t[c][i][r] = now_us() - t0;
                    } else {
                        t[c][i][r] = timed_call(c - 1, sh, ROPE_F32, x);
                    }
                }
            }
        for (int c = 0; c < 4; c++) {
            printf("gap %6.0fus %-12s", gaps[g], names[c]);
            for (int i = 0; i < FIRST; i++)
                printf(" %6.1f", quantile(t[c][i], reps, 0.5));
            printf("\n");
        }
        fflush(stdout);
    }
    free(x);
}

static void first_calls(int reps)
{
    if (reps > 15)
        reps = 15; /* 100 ms gaps: keep the run short */
    first_calls_of(&SHAPES[0], reps);
    first_calls_of(&SHAPES[2], reps);
}

static void idle_cpu(void)
{
    const shape *sh = &SHAPES[0];
    const size_t n = shape_bytes(sh, ROPE_F32);
    void *x = filled(n);
    printf("\nCPU time of the process (both threads) over an idle second after 1000 calls:\n");
    for (int c = 1; c < 3; c++) {
        for (int i = 0; i < 1000; i++)
            timed_call(c, sh, ROPE_F32, x);
        const double c0 = cpu_ms(), t0 = now_us();
        idle_us(1e6);
        printf("  after %-8s %.2f ms CPU in %.0f ms\n", c == 1 ? "rope 2" : "rope 2!", cpu_ms() - c0,
               (now_us() - t0) / 1e3);
    }
    free(x);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 41;
    const char *sections = argc > 3 ? argv[3] : "sti";
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: thread_split [repetitions 1..%d] [isa] [sections of sti]\n", MAX_REPS);
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "best") && rope_set_isa(isa_from_arg(argv[2])) != ROPE_OK) {
        fprintf(stderr, "isa %s is not supported here\n", argv[2]);
        return 2;
    }
    double inv_freq[HALF];
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = __builtin_pow(10000.0, -2.0 * i / HEAD_DIM);
    g_cos = malloc(TABLE_ROWS * HALF * sizeof(float));
    g_sin = malloc(TABLE_ROWS * HALF * sizeof(float));
    if (!g_cos || !g_sin ||
        rope_cos_sin_range_f32(0, TABLE_ROWS, inv_freq, HALF, 1.0, g_cos, g_sin) != ROPE_OK)
        return 1;
    printf("isa %s\n", rope_isa_name(rope_get_isa()));
    if (strchr(sections, 's'))
        split_table(reps);
    if (strchr(sections, 't'))
        first_calls(reps);
    if (strchr(sections, 'i'))
        idle_cpu();
    return 0;
}
