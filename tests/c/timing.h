/* What the measuring programs of tests/c share (rotate_speed.c,
 * kernel_cycles.c, stage_cycles.c, thread_split.c): the monotonic clock,
 * quantiles of repeated samples, the core clock measured from a dependent
 * chain, and instruction sets named on the command line. Header-only: each
 * program is one file compiled against the C core. */
#ifndef PYROPE_TESTS_TIMING_H
#define PYROPE_TESTS_TIMING_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyrope.h"

static inline double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static inline int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of v[0..n), the nearest rank; sorts v. */
static inline double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof(double), by_value);
    return v[(int)(q * (n - 1) + 0.5)];
}

/* The median of v[0..n) (the mean of the middle two for even n); sorts v. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Cycles per second of this core now, from a chain of dependent
 * operations of known latency: integer multiplies on x86-64 (3 cycles on
 * every core since Nehalem and Zen), adds on aarch64 (1 cycle), so turbo
 * and a virtual machine's clock do not matter. */
static inline double core_hz(void)
{
    const long n = 2000000;
    unsigned long v = 3;
    const double t0 = now_us();
    for (long i = 0; i < n; i++) {
#if defined(__x86_64__)
        __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(v));
#elif defined(__aarch64__)
        __asm__ volatile("add %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\t"
                         "add %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\t"
                         "add %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0" : "+r"(v));
#endif
    }
    return 12.0 * n / ((now_us() - t0) * 1e-6);
}

/* The instruction set named (or numbered) arg, or -1. */
static inline int isa_from_arg(const char *arg)
{
    for (int i = 0; i < rope_isa_count(); i++)
        if (strcmp(arg, rope_isa_name(i)) == 0)
            return i;
    char *end;
    const long i = strtol(arg, &end, 10);
    return *arg && !*end && i >= 0 && i < rope_isa_count() ? (int)i : -1;
}

/* Whether isas ("all", or a comma-separated list of names) names isa. */
static inline int isa_listed(const char *isas, int isa)
{
    if (strcmp(isas, "all") == 0)
        return 1;
    const char *name = rope_isa_name(isa);
    const size_t len = strlen(name);
    for (const char *hit = strstr(isas, name); hit; hit = strstr(hit + 1, name))
        if ((hit == isas || hit[-1] == ',') && (hit[len] == 0 || hit[len] == ','))
            return 1;
    return 0;
}

#endif
