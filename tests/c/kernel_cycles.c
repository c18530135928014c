/* Core cycles per element of each rotation kernel, called directly on one
 * token's heads held in L1: what docs/ARCHITECTURE.md sets beside each
 * kernel's instruction floor. No dispatch, no per-call checks, no table
 * lookup: the kernel's own loop, as the floor counts it.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/kernel_cycles.c $(find csrc -name '*.c') -lm -o build/kernel_cycles
 *   build/kernel_cycles [isas=all] [heads=8] [head_dim=128] [repetitions=21] [byte offset=0]
 *
 * The core clock is measured, not read (timing.h's core_hz, a chain of
 * dependent operations of known latency), right before each contender's
 * warm-up, so turbo and a virtual machine's clock do not matter (a chain of
 * dependent 256-bit FMAs gives the same clock: no slower clock for vector
 * code on the Intel Xeon, family 6 model 167, this was written on), and
 * the vector units are warm when the timed calls start (with the 6 ms of
 * integer multiplies between warm-up and timing they read 3-5% slower).
 * Every repetition times each contender in turn, the order rotated, after
 * about 10 ms of warm-up (0.5 ms between repetitions); printed: the
 * medians of cycles per element (and per head). x is placed `offset` bytes past a 64-byte boundary (numpy puts
 * large arrays 16 bytes past a page). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels.h"
#include "timing.h"

enum { MAX_CONTENDERS = 64, MAX_REPS = 101 };

typedef struct {
    int isa, dtype, layout;
    rope_rot_fn rot;
    double cycles[MAX_REPS];
} contender;

int main(int argc, char **argv)
{
    const char *isas = argc > 1 ? argv[1] : "all";
    const int64_t heads = argc > 2 ? atoll(argv[2]) : 8, head_dim = argc > 3 ? atoll(argv[3]) : 128;
    int reps = argc > 4 ? atoi(argv[4]) : 21;
    const int64_t offset = argc > 5 ? atoll(argv[5]) : 0;
    if (heads < 1 || head_dim < 2 || head_dim % 2 || heads * head_dim > (1 << 16) || reps < 1 ||
        offset < 0 || offset >= 64 || offset % 8) {
        fprintf(stderr, "usage: %s [isas=all] [heads=8] [head_dim=128] [repetitions=21] [offset=0, 0..56 by 8]\n",
                argv[0]);
        return 2;
    }
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    const int64_t half = head_dim / 2, n = heads * head_dim;
    /* twice the token: the kernels prefetch a few heads on, which in a real
     * call are the next token's (mapped memory, as here) */
    unsigned char *buf = aligned_alloc(64, (size_t)(2 * n * 8 + 128));
    double *cos = aligned_alloc(64, (size_t)half * 8 + 64), *sin = aligned_alloc(64, (size_t)half * 8 + 64);
    float *cosf_ = aligned_alloc(64, (size_t)half * 4 + 64), *sinf_ = aligned_alloc(64, (size_t)half * 4 + 64);
    if (!buf || !cos || !sin || !cosf_ || !sinf_)
        return 1;
    for (int64_t i = 0; i < half; i++) {
        /* a rotation (cos^2 + sin^2 = 1: the values neither grow nor decay to subnormals) */
        cos[i] = cosl(0.3 + (double)i / (double)half);
        sin[i] = sinl(0.3 + (double)i / (double)half);
        cosf_[i] = (float)cos[i];
        sinf_[i] = (float)sin[i];
    }

    static contender cs[MAX_CONTENDERS];
    int nc = 0;
    for (int isa = 0; isa < rope_isa_count(); isa++) {
        if (!isa_listed(isas, isa) || !rope_isa_supported(isa))
            continue;
        for (int dt = 0; dt < ROPE_N_DTYPES; dt++)
            for (int layout = 0; layout < 2 && nc < MAX_CONTENDERS; layout++)
                cs[nc++] = (contender){isa, dt, layout, rope_isa_kernels(isa)->rot[dt][layout], {0}};
    }
    if (nc == 0) {
        fprintf(stderr, "no supported instruction set named %s\n", isas);
        return 2;
    }

    /* calls per sample: about 20 us of work at 0.2 ns per element */
    const int64_t calls = 100000 / n + 1;
    printf("one token of %lld heads x %lld, in L1, x at +%lld bytes; %d repetitions of %lld calls\n",
           (long long)heads, (long long)head_dim, (long long)offset, reps, (long long)calls);
    for (int r = -1; r < reps; r++) {
        for (int k = 0; k < nc; k++) {
            contender *c = &cs[(k + (r < 0 ? 0 : r)) % nc];
            const int64_t esize = ROPE_ELEM_SIZE[c->dtype];
            unsigned char *x = buf + offset;
            for (int64_t i = 0; i < n * esize; i++)
                x[i] = (unsigned char)(0x3C + (i % 3)); /* small finite values in every type */
            const void *cv = ROPE_WIDE_ROWS[c->dtype] ? (const void *)cos : (const void *)cosf_;
            const void *sv = ROPE_WIDE_ROWS[c->dtype] ? (const void *)sin : (const void *)sinf_;
            const double hz = core_hz();
            const double warm_until = now_us() + (r < 0 ? 10000 : 500);
            while (now_us() < warm_until)
                c->rot(x, x, head_dim, head_dim, heads, cv, sv, half, r & 1);
            const double t0 = now_us();
            for (int64_t i = 0; i < calls; i++) /* alternate directions: the values stay bounded */
                c->rot(x, x, head_dim, head_dim, heads, cv, sv, half, (int)(i & 1));
            const double t = (now_us() - t0) * 1e-6;
            if (r >= 0)
                c->cycles[r] = t * hz / (double)(calls * n);
        }
    }
    for (int k = 0; k < nc; k++) {
        const double m = median(cs[k].cycles, reps);
        printf("%-11s %-9s %-11s %.4f cycles/element  %6.1f cycles/head\n", rope_isa_name(cs[k].isa),
               rope_dtype_name(cs[k].dtype), cs[k].layout == ROPE_INTERLEAVED ? "interleaved" : "split_half",
               m, m * (double)head_dim);
    }
    free(buf);
    free(cos);
    free(sin);
    free(cosf_);
    free(sinf_);
    return 0;
}
