/* ThreadSanitizer driver for the C core (`make tsan`); the test suite also
 * runs it without the sanitizer (tests/kernel/test_thread_pool.py).
 *
 * First, serially: the scalar kernels (registry entry 0) compute every
 * reference result on one thread, and each other supported instruction set
 * of the registry must reproduce them bit for bit, on one thread and split
 * over two and four (the size rule switched off, so every call is split and
 * wakes the pool; some parts must have run on a worker). Then the split
 * rule itself (threads.c), through the pool's counters: calls below the size
 * rule never reach the pool, spaced calls with less work left after their
 * first part than the wake-up threshold never wake it, a call with more does
 * split, so does a run of back-to-back calls, and the pool burns no CPU time
 * once idle. Then four application threads make the
 * same calls at the same time -- a single-tensor rotation (each call
 * spreading its work over the library's thread pool when it can have it), q
 * and k rotated in place in one call, sectioned positions (from a table and
 * on the fly), a staged call (q normalised and rotated in place, k
 * normalised, rotated and written to shuffled slots of a paged cache, v
 * copied to them: rope_rotate_staged with the stage kernels), a quantised
 * call (k rotated into shuffled slots of an int8 cache with a scale per
 * head, v copied into a q8_0 cache, and the keys of another int8 cache
 * shifted in place at shuffled slots: rope_rotate_quantised), and table
 * builds -- while a fifth keeps cycling through every
 * supported instruction set and switching the split rule on and off; every
 * result must still equal the reference. Built with -fsanitize=thread, any
 * data race in the pool, the dispatch choice or the kernels is reported and
 * fails the run. Exit 0: no race, identical results, the rule as described.
 *
 * The instruction sets come from the registry (rope_isa_count,
 * rope_isa_supported), so a new one is exercised without an edit here.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/kernels.h"
#include "core/threads.h"

#define SEQ 512
#define HEADS 8
#define KV_HEADS 2
#define DIM 128
#define HALF (DIM / 2)
#define N (SEQ * HEADS * DIM)
#define NK (SEQ * KV_HEADS * DIM)
#define COMP 3           /* position components of the sectioned calls */
#define OFFSET 100       /* first position of the offset calls */
#define ROWS (SEQ + 2 * OFFSET)
#define WORKERS 4
#define ROUNDS 4

static float q0[N], k0[NK];
static double inv_freq[HALF];
static float cos_tab[ROWS * HALF], sin_tab[ROWS * HALF]; /* positions 0..ROWS-1 */
static int64_t list_pos[SEQ], sect_pos[COMP * SEQ];
static int64_t slot_of[SEQ];    /* the staged call's cache slots: a permutation of 0..SEQ-1 */
static int64_t shift_slot[SEQ]; /* the in-place shift's slots: another permutation */
#define Q8_BLOCKS (DIM / ROPE_Q8_0_VALUES)   /* q8_0 blocks per head */
#define NQ8 (SEQ * KV_HEADS * Q8_BLOCKS * ROPE_Q8_0_BYTES)
static int8_t shift0[NK];               /* the int8 cache the shift starts from ... */
static float shift0_scales[SEQ * KV_HEADS];   /* ... and its scales */
static double norm_w[DIM];
static uint8_t pair_component[HALF];
static atomic_int stop;

/* Every call the driver makes, with its outputs. */
enum { C_ROTATE, C_QK_TABLE, C_SECT_OTF, C_SECT_TABLE, C_RANGE, C_LIST, C_STAGED, C_QUANT, N_CALLS };
static const char *const CALL_NAME[N_CALLS] = {
    "rotate (one tensor, on the fly)", "q+k in one call (table)", "q+k, sectioned (on the fly)",
    "q+k, sectioned (table)", "cos/sin range table", "cos/sin list table",
    "staged: q norm in place, k norm into cache slots, v copied",
    "quantised: k into int8 slots, v copied to q8_0, an int8 cache shifted in place"};

typedef struct {
    float *q, *k, *out;     /* q and k rotate in place; out: the one-tensor call */
    float *cos, *sin;       /* table builds */
    float *kc, *vc;         /* the staged call's caches, [SEQ / 4 blocks][4][KV_HEADS][DIM] */
    int8_t *k8, *sh8;       /* the quantised call's int8 caches (k; the shifted one) ... */
    float *k8s, *sh8s;      /* ... their scales, one per head */
    unsigned char *vq;      /* and its q8_0 cache of v */
} results;

static int alloc_results(results *r)
{
    r->q = malloc(sizeof q0);
    r->k = malloc(sizeof k0);
    r->out = malloc(sizeof q0);
    r->cos = malloc(sizeof cos_tab);
    r->sin = malloc(sizeof sin_tab);
    r->kc = malloc(sizeof k0);
    r->vc = malloc(sizeof k0);
    r->k8 = malloc(sizeof shift0);
    r->sh8 = malloc(sizeof shift0);
    r->k8s = malloc(sizeof shift0_scales);
    r->sh8s = malloc(sizeof shift0_scales);
    r->vq = malloc(NQ8);
    return r->q && r->k && r->out && r->cos && r->sin && r->kc && r->vc && r->k8 && r->sh8 && r->k8s && r->sh8s &&
           r->vq;
}

static void free_results(results *r)
{
    free(r->q); free(r->k); free(r->out); free(r->cos); free(r->sin); free(r->kc); free(r->vc);
    free(r->k8); free(r->sh8); free(r->k8s); free(r->sh8s); free(r->vq);
}

static rope_tensor contiguous(const float *x, float *out, int64_t heads)
{
    const rope_tensor t = {x, out, heads, {SEQ * heads * DIM, heads * DIM, DIM},
                           {SEQ * heads * DIM, heads * DIM, DIM}};
    return t;
}

/* Make call `which` into r with up to n_threads threads: ROPE_OK or a status. */
static int run_call(int which, results *r, int n_threads)
{
    const rope_op op = {ROPE_F32, ROPE_SPLIT_HALF, 0, 1, SEQ, DIM, DIM, n_threads};
    const rope_angles otf = {.source = ROPE_POS_OFFSET, .offset = OFFSET, .inv_freq = inv_freq, .scale = 1.0};
    const rope_angles list_table = {.source = ROPE_POS_LIST, .positions = list_pos, .strides = {0, 1, 0},
                                    .cos_table = cos_tab, .sin_table = sin_tab, .table_rows = ROWS};
    rope_angles sect = {.source = ROPE_POS_SECTIONS, .positions = sect_pos, .strides = {0, 1, SEQ},
                        .n_components = COMP, .pair_component = pair_component,
                        .inv_freq = inv_freq, .scale = 1.0};
    rope_tensor qk[2] = {contiguous(r->q, r->q, HEADS), contiguous(r->k, r->k, KV_HEADS)};
    switch (which) {
    case C_ROTATE: {
        const rope_tensor t = contiguous(q0, r->out, HEADS);
        return rope_rotate(&op, &t, 1, &otf);
    }
    case C_QK_TABLE:
    case C_SECT_OTF:
    case C_SECT_TABLE:
        memcpy(r->q, q0, sizeof q0);
        memcpy(r->k, k0, sizeof k0);
        if (which == C_SECT_TABLE) {
            sect.cos_table = cos_tab;
            sect.sin_table = sin_tab;
            sect.table_rows = ROWS;
        }
        return rope_rotate(&op, qk, 2, which == C_QK_TABLE ? &list_table : &sect);
    case C_STAGED: {
        memcpy(r->q, q0, sizeof q0);
        const rope_tensor t[3] = {contiguous(r->q, r->q, HEADS),
                                  {k0, r->kc, KV_HEADS, {0, KV_HEADS * DIM, DIM}, {4 * KV_HEADS * DIM, KV_HEADS * DIM, DIM}},
                                  {k0, r->vc, KV_HEADS, {0, KV_HEADS * DIM, DIM}, {4 * KV_HEADS * DIM, KV_HEADS * DIM, DIM}}};
        const rope_stage st[3] = {
            {.norm = ROPE_NORM_HEAD, .norm_weight = norm_w, .norm_eps = 1e-6},
            {.norm = ROPE_NORM_TOKEN, .norm_eps = 1e-5, .slots = slot_of, .slot_strides = {0, 1}, .n_slots = SEQ,
             .block_size = 4},
            {.copy = 1, .slots = slot_of, .slot_strides = {0, 1}, .n_slots = SEQ, .block_size = 4}};
        return rope_rotate_staged(&op, t, st, 3, &list_table);
    }
    case C_QUANT: {
        /* k and v into [SEQ / 4 blocks][4][KV_HEADS] caches (int8 bytes; q8_0
         * blocks, Q8_BLOCKS a head), and an int8 cache [blocks][KV_HEADS][4]
         * (HND) whose keys move by the tokens' positions, in place */
        memcpy(r->sh8, shift0, sizeof shift0);
        memcpy(r->sh8s, shift0_scales, sizeof shift0_scales);
        const rope_tensor t[3] = {
            {k0, r->k8, KV_HEADS, {0, KV_HEADS * DIM, DIM}, {4 * KV_HEADS * DIM, KV_HEADS * DIM, DIM}},
            {k0, r->vq, KV_HEADS, {0, KV_HEADS * DIM, DIM}, {4 * KV_HEADS * Q8_BLOCKS, KV_HEADS * Q8_BLOCKS, Q8_BLOCKS}},
            {NULL, r->sh8, KV_HEADS, {0, 0, 0}, {KV_HEADS * 4 * DIM, DIM, 4 * DIM}}};
        const rope_stage st[3] = {
            {.slots = slot_of, .slot_strides = {0, 1}, .n_slots = SEQ, .block_size = 4},
            {.copy = 1, .slots = slot_of, .slot_strides = {0, 1}, .n_slots = SEQ, .block_size = 4},
            {.slots = shift_slot, .slot_strides = {0, 1}, .n_slots = SEQ, .block_size = 4}};
        const rope_quant qt[3] = {
            {.kind = ROPE_QUANT_INT8, .scales = r->k8s, .scale_strides = {4 * KV_HEADS, KV_HEADS, 1}},
            {.kind = ROPE_QUANT_Q8_0},
            {.kind = ROPE_QUANT_INT8, .in_place = 1, .scales = r->sh8s, .scale_strides = {KV_HEADS * 4, 1, 4}}};
        return rope_rotate_quantised(&op, t, st, qt, 3, &list_table);
    }
    case C_RANGE:
        return rope_cos_sin_range_f32(OFFSET, SEQ, inv_freq, HALF, 1.0, r->cos, r->sin);
    default:
        return rope_cos_sin_f32(list_pos, SEQ, inv_freq, HALF, 1.0, r->cos, r->sin);
    }
}

/* Does r hold the outputs of call `which` that want holds? */
static int same(int which, const results *r, const results *want)
{
    switch (which) {
    case C_ROTATE:
        return memcmp(r->out, want->out, sizeof q0) == 0;
    case C_STAGED:
        return memcmp(r->q, want->q, sizeof q0) == 0 && memcmp(r->kc, want->kc, sizeof k0) == 0 &&
               memcmp(r->vc, want->vc, sizeof k0) == 0;
    case C_QUANT:
        return memcmp(r->k8, want->k8, sizeof shift0) == 0 && memcmp(r->k8s, want->k8s, sizeof shift0_scales) == 0 &&
               memcmp(r->vq, want->vq, NQ8) == 0 && memcmp(r->sh8, want->sh8, sizeof shift0) == 0 &&
               memcmp(r->sh8s, want->sh8s, sizeof shift0_scales) == 0;
    case C_RANGE:
    case C_LIST:
        return memcmp(r->cos, want->cos, SEQ * HALF * sizeof(float)) == 0 &&
               memcmp(r->sin, want->sin, SEQ * HALF * sizeof(float)) == 0;
    default:
        return memcmp(r->q, want->q, sizeof q0) == 0 && memcmp(r->k, want->k, sizeof k0) == 0;
    }
}

static results want[N_CALLS]; /* the scalar kernels' results, one thread */

static void *worker(void *arg)
{
    const int id = (int)(intptr_t)arg;
    results r;
    long bad = 0;
    if (!alloc_results(&r))
        return (void *)(intptr_t)-1;
    for (int round = 0; round < ROUNDS; round++)
        for (int c = 0; c < N_CALLS; c++) {
            const int which = (c + id) % N_CALLS; /* the workers make different calls at once */
            const int threads = 1 + (id + round) % 3;
            bad += run_call(which, &r, threads) != ROPE_OK || !same(which, &r, &want[which]);
        }
    free_results(&r);
    return (void *)(intptr_t)bad;
}

/* Cycle through every supported instruction set, and switch the size rule
 * off and on, until told to stop. */
static void *isa_switcher(void *arg)
{
    long *switches = arg;
    for (int isa = 0; !atomic_load(&stop); isa = (isa + 1) % rope_isa_count()) {
        if (rope_isa_supported(isa) && rope_set_isa(isa) == ROPE_OK)
            ++*switches;
        if (isa == 0)
            rope_threads_set_rule(*switches % 2 ? 0 : -1, *switches % 2 ? 0 : -1, 1);
    }
    rope_threads_set_rule(-1, -1, 1);
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    const struct timespec t = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static int64_t stat_now(int which)
{
    int64_t s[ROPE_THREAD_STATS];
    rope_threads_stats(s);
    return s[which];
}

/* An in-place rotation of x, seq tokens of HEADS heads, on up to n_threads. */
static int rotate_in_place(float *x, int64_t seq, int n_threads)
{
    const rope_op op = {ROPE_F32, ROPE_SPLIT_HALF, 0, 1, seq, DIM, DIM, n_threads};
    const rope_tensor t = {x, x, HEADS, {seq * HEADS * DIM, HEADS * DIM, DIM}, {seq * HEADS * DIM, HEADS * DIM, DIM}};
    const rope_angles a = {.source = ROPE_POS_OFFSET, .offset = OFFSET, .inv_freq = inv_freq, .scale = 1.0};
    return rope_rotate(&op, &t, 1, &a);
}

/* The split rule, through the pool's counters; the number of failures. */
static int check_rule(void)
{
    int bad = 0;
    const int64_t small_seq = 32; /* 256 KiB of traffic: below one thread per 512 KiB */
    float *x = calloc((size_t)SEQ * HEADS * DIM, sizeof(float)); /* SEQ: 4 MiB of traffic */
    if (!x)
        return 1;
    rope_threads_set_rule(-1, -1, 0); /* the default rule, without the back-off */
    int64_t before = stat_now(ROPE_STAT_CALLS);
    for (int i = 0; i < 20; i++)
        bad += rotate_in_place(x, small_seq, 4) != ROPE_OK;
    if (stat_now(ROPE_STAT_CALLS) != before) {
        fprintf(stderr, "threads_race: a call below the size rule reached the pool\n");
        bad++;
    }
    rope_threads_set_rule(-1, 1000000000, 0); /* wake for 1 s of work left: never here */
    before = stat_now(ROPE_STAT_WAKES);
    for (int i = 0; i < 10; i++) { /* 1 ms apart: no run of back-to-back calls */
        sleep_s(1e-3);
        bad += rotate_in_place(x, SEQ, 2) != ROPE_OK;
    }
    if (stat_now(ROPE_STAT_WAKES) != before) {
        fprintf(stderr, "threads_race: spaced calls with little work left woke the pool\n");
        bad++;
    }
    rope_threads_set_rule(-1, 1, 0); /* wake for any work left after the first part */
    sleep_s(1e-3);
    before = stat_now(ROPE_STAT_SPLIT);
    bad += rotate_in_place(x, SEQ, 2) != ROPE_OK;
    if (stat_now(ROPE_STAT_SPLIT) != before + 1) {
        fprintf(stderr, "threads_race: a call with work left after its first part was not split\n");
        bad++;
    }
    rope_threads_set_rule(-1, 1000000000, 0);
    sleep_s(1e-3);
    before = stat_now(ROPE_STAT_SPLIT);
    for (int i = 0; i < 50; i++) /* back to back */
        bad += rotate_in_place(x, SEQ, 2) != ROPE_OK;
    if (stat_now(ROPE_STAT_SPLIT) == before) {
        fprintf(stderr, "threads_race: 50 back-to-back calls of 4 MiB were never split\n");
        bad++;
    }
    /* idle: the workers spin briefly after a job, then sleep */
    sleep_s(0.01);
    const double c0 = cpu_s(), t0 = now_s();
    sleep_s(0.2);
    const double used = cpu_s() - c0, wall = now_s() - t0;
    if (used > 0.02) {
        fprintf(stderr, "threads_race: %.1f ms of CPU time in %.0f ms idle\n", used * 1e3, wall * 1e3);
        bad++;
    }
    rope_threads_set_rule(-1, -1, 1);
    free(x);
    return bad;
}

int main(void)
{
    unsigned seed = 12345;
    for (int i = 0; i < N; i++)
        q0[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < NK; i++)
        k0[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = 1.0 / pow(10000.0, 2.0 * i / DIM);
    /* positions: runs long enough for the dense-range table kernel, with
     * scattered ones between them */
    for (int i = 0; i < SEQ; i++)
        list_pos[i] = i % 160 < 100 ? OFFSET + i : (int64_t)((i * 7919u) % ROWS);
    for (int c = 0; c < COMP; c++)
        for (int i = 0; i < SEQ; i++)
            sect_pos[c * SEQ + i] = c == 0 ? i : (int64_t)((i * (c + 3u) + 17u * c) % ROWS);
    for (int i = 0; i < HALF; i++)
        pair_component[i] = (uint8_t)(i < 16 ? 0 : i < 40 ? 1 : 2);
    for (int i = 0; i < SEQ; i++)
        slot_of[i] = (int64_t)((i * 389u + 7u) % SEQ);   /* 389 is prime to 512: a permutation */
    for (int i = 0; i < DIM; i++)
        norm_w[i] = 0.5 + (double)i / DIM;
    for (int i = 0; i < SEQ; i++)
        shift_slot[i] = (int64_t)((i * 131u + 300u) % SEQ);   /* 131 is prime to 512 */
    for (int i = 0; i < NK; i++)
        shift0[i] = (int8_t)((int)(((seed = seed * 1103515245u + 12345u) >> 16) % 255u) - 127);
    for (int i = 0; i < SEQ * KV_HEADS; i++)
        shift0_scales[i] = (float)(((seed = seed * 1103515245u + 12345u) >> 16) % 1000u + 1u) / 65536.0f;

    if (rope_set_isa(-1) != ROPE_E_ISA || rope_set_isa(rope_isa_count()) != ROPE_E_ISA ||
        !rope_isa_supported(0) || rope_isa_name(0) == NULL || rope_isa_name(rope_isa_count()) != NULL) {
        fprintf(stderr, "threads_race: the instruction-set registry misbehaves\n");
        return 2;
    }
    /* The references: scalar kernels, one thread (the table first: the
     * tabled calls read it). */
    if (rope_set_isa(0) != ROPE_OK ||
        rope_cos_sin_range_f32(0, ROWS, inv_freq, HALF, 1.0, cos_tab, sin_tab) != ROPE_OK)
        return 2;
    for (int c = 0; c < N_CALLS; c++)
        if (!alloc_results(&want[c]) || run_call(c, &want[c], 1) != ROPE_OK) {
            fprintf(stderr, "threads_race: %s failed\n", CALL_NAME[c]);
            return 2;
        }
    if (memcmp(want[C_QUANT].sh8, shift0, sizeof shift0) == 0 ||
        memcmp(want[C_QUANT].sh8s, shift0_scales, sizeof shift0_scales) == 0) {
        fprintf(stderr, "threads_race: the in-place shift left its cache as it was\n");
        return 2;
    }
    if (memcmp(want[C_RANGE].cos, cos_tab + OFFSET * HALF, SEQ * HALF * sizeof(float)) != 0) {
        fprintf(stderr, "threads_race: a table's rows depend on where the range starts\n");
        return 2;
    }

    /* Every supported instruction set, serially, against the scalar results,
     * every call split. */
    long bad = 0;
    rope_threads_set_rule(0, 0, 0);
    results r;
    if (!alloc_results(&r))
        return 2;
    printf("threads_race: instruction sets:");
    for (int isa = 0; isa < rope_isa_count(); isa++) {
        printf(" %s%s", rope_isa_name(isa), rope_isa_supported(isa) ? "" : " (not supported here)");
        if (!rope_isa_supported(isa))
            continue;
        if (rope_set_isa(isa) != ROPE_OK || rope_get_isa() != isa)
            return 2;
        for (int c = 0; c < N_CALLS; c++)
            for (int threads = 1; threads <= 4; threads *= 2)
                if (run_call(c, &r, threads) != ROPE_OK || !same(c, &r, &want[c])) {
                    fprintf(stderr, "\nthreads_race: %s on %s with %d threads differs from scalar\n",
                            CALL_NAME[c], rope_isa_name(isa), threads);
                    bad++;
                }
    }
    printf("\n");
    /* Until a worker has run parts (a loaded machine may keep it off a CPU
     * for a while), for at most 10 s. */
    for (const double t0 = now_s(); stat_now(ROPE_STAT_WORKER_PARTS) == 0 && now_s() - t0 < 10;)
        if (run_call(C_ROTATE, &r, 2) != ROPE_OK || !same(C_ROTATE, &r, &want[C_ROTATE]))
            bad++;
    int64_t st[ROPE_THREAD_STATS];
    rope_threads_stats(st);
    printf("threads_race: %ld split calls, %ld parts run by workers\n", (long)st[ROPE_STAT_SPLIT],
           (long)st[ROPE_STAT_WORKER_PARTS]);
    if (st[ROPE_STAT_WORKER_PARTS] == 0) {
        fprintf(stderr, "threads_race: no part ever ran on a worker\n");
        bad++;
    }
    rope_threads_set_rule(-1, -1, 1);
    free_results(&r);
    bad += check_rule();

    /* The same calls concurrently, while the instruction set keeps changing. */
    long switches = 0;
    pthread_t t[WORKERS], sw;
    pthread_create(&sw, NULL, isa_switcher, &switches);
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < WORKERS; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        bad += (long)(intptr_t)ret < 0 ? 1000000 : (long)(intptr_t)ret;
    }
    atomic_store(&stop, 1);
    pthread_join(sw, NULL);
    for (int c = 0; c < N_CALLS; c++)
        free_results(&want[c]);
    printf("threads_race: %ld mismatches in %d concurrent calls (%d kinds) over %ld instruction-set switches\n",
           bad, WORKERS * ROUNDS * N_CALLS, N_CALLS, switches);
    return bad ? 1 : 0;
}
