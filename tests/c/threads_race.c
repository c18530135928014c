/* ThreadSanitizer driver for the C core (`make tsan`).
 *
 * Four application threads call rope_rotate (each spreading its work over
 * the library's thread pool), rope_rotate_qk and the table functions at the
 * same time, while a fifth keeps switching the instruction set; every result
 * must equal the one computed serially beforehand. Built with
 * -fsanitize=thread, any data race in the pool, the dispatch choice or the
 * kernels is reported and fails the run. Exit 0: no race, identical results.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyrope.h"

#define SEQ 512
#define HEADS 8
#define KV_HEADS 2
#define DIM 128
#define HALF (DIM / 2)
#define N (SEQ * HEADS * DIM)
#define NK (SEQ * KV_HEADS * DIM)
#define ROUNDS 6

static float q0[N], k0[NK], q_want[N], k_want[NK];
static float cos_want[SEQ * HALF], sin_want[SEQ * HALF];
static double inv_freq[HALF];
static atomic_int stop;

static int rotate_q(const float *in, float *out, int n_threads)
{
    return rope_rotate(ROPE_F32, ROPE_SPLIT_HALF, 0, in, out, 1, SEQ, HEADS, DIM, DIM,
                       (int64_t)N, HEADS * DIM, DIM, (int64_t)N, HEADS * DIM, DIM,
                       NULL, 0, 0, 100, NULL, NULL, 0, 0, inv_freq, 1.0, n_threads);
}

static int rotate_qk(float *q, float *k, int n_threads)
{
    return rope_rotate_qk(ROPE_F32, ROPE_SPLIT_HALF, 0,
                          q, q, HEADS, (int64_t)N, HEADS * DIM, DIM, (int64_t)N, HEADS * DIM, DIM,
                          k, k, KV_HEADS, (int64_t)NK, KV_HEADS * DIM, DIM, (int64_t)NK,
                          KV_HEADS * DIM, DIM,
                          1, SEQ, DIM, DIM, NULL, 0, 0, 100, NULL, NULL, 0, 0,
                          inv_freq, 1.0, n_threads);
}

static void *worker(void *arg)
{
    const int id = (int)(intptr_t)arg;
    float *q = malloc(sizeof q0), *k = malloc(sizeof k0), *out = malloc(sizeof q0);
    float *c = malloc(sizeof cos_want), *s = malloc(sizeof sin_want);
    long bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        const int threads = 1 + (id + round) % 3;
        bad += rotate_q(q0, out, threads) != ROPE_OK || memcmp(out, q_want, sizeof q0) != 0;
        memcpy(q, q0, sizeof q0);
        memcpy(k, k0, sizeof k0);
        bad += rotate_qk(q, k, threads) != ROPE_OK || memcmp(q, q_want, sizeof q0) != 0 ||
               memcmp(k, k_want, sizeof k0) != 0;
        bad += rope_cos_sin_range_f32(100, SEQ, inv_freq, HALF, 1.0, c, s) != ROPE_OK ||
               memcmp(c, cos_want, sizeof cos_want) != 0 || memcmp(s, sin_want, sizeof sin_want) != 0;
    }
    free(q); free(k); free(out); free(c); free(s);
    return (void *)(intptr_t)bad;
}

static void *isa_switcher(void *arg)
{
    (void)arg;
    int flip = 0;
    while (!atomic_load(&stop)) {
        rope_set_isa(flip ? ROPE_ISA_AVX2 : ROPE_ISA_SCALAR); /* ignored if unsupported */
        flip = !flip;
    }
    return NULL;
}

int main(void)
{
    unsigned seed = 12345;
    for (int i = 0; i < N; i++)
        q0[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < NK; i++)
        k0[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = 1.0 / __builtin_pow(10000.0, 2.0 * i / DIM);
    /* Serial results first, one thread. */
    memcpy(k_want, k0, sizeof k0);
    if (rotate_q(q0, q_want, 1) != ROPE_OK)
        return 2;
    static float qq[N];
    memcpy(qq, q0, sizeof q0);
    if (rotate_qk(qq, k_want, 1) != ROPE_OK || memcmp(qq, q_want, sizeof q0) != 0)
        return 3;
    if (rope_cos_sin_range_f32(100, SEQ, inv_freq, HALF, 1.0, cos_want, sin_want) != ROPE_OK)
        return 4;

    pthread_t t[4], sw;
    pthread_create(&sw, NULL, isa_switcher, NULL);
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    long bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)(intptr_t)r;
    }
    atomic_store(&stop, 1);
    pthread_join(sw, NULL);
    printf("threads_race: %ld mismatches in %d calls\n", bad, 4 * ROUNDS * 3);
    return bad ? 1 : 0;
}
