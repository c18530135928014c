/* A small persistent thread pool for splitting large calls.
 *
 * Workers are started lazily, the first time a call wants them, and then
 * sleep on a condition variable between jobs (after a short spin, so that
 * back-to-back calls such as q then k do not pay a wake-up each). A job is
 * cut into fixed chunks ("parts", several per thread) and published as one
 * atomic ticket (generation, part count, next part); the calling thread and
 * the workers claim parts from it with compare-and-swap,
 * so a part runs exactly once and a late worker can never claim a part of a
 * newer job. The caller claims parts too, so a job finishes even with no
 * worker at all; when another thread is already running a job the caller
 * simply does all parts itself. Which thread runs a part never changes its
 * result: parts are fixed ranges and the kernels compute each token alone.
 * After fork() the child starts with no workers (pthread_atfork).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Smallest share of one call's memory traffic (bytes read + written) worth a
 * thread. Measured on a 2-core Zen 3: a decode step (16x1x32x128 float32,
 * 512 KiB of traffic) takes ~5 us alone, and handing half of it to a worker
 * costs about that much when the other core is busy (e.g. with another
 * library's spinning pool), so calls below 1 MiB per thread stay alone. */
#define ROPE_MIN_PART_BYTES (1024 * 1024)
/* Chunks per thread: small enough that a late worker costs little. */
#define ROPE_CHUNKS_PER_THREAD 8
/* How long an idle worker spins before it sleeps. */
#define ROPE_SPIN_NS 50000

/* ticket = generation << 32 | n_parts << 16 | next part */
#define T_GEN(t) ((uint32_t)((t) >> 32))
#define T_PARTS(t) ((int)(((t) >> 16) & 0xFFFF))
#define T_NEXT(t) ((int)((t)&0xFFFF))

static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;    /* guards sleeping */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static _Atomic uint64_t g_ticket;
static _Atomic int g_remaining;      /* parts claimed by workers, not yet done */
static int g_n_workers;              /* guarded by g_busy */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The job of the current generation; written by the caller before the
 * ticket is published, read by a worker only after it claimed a part. */
static rope_task_fn g_fn;
static void *g_ctx;
static int64_t g_items;

static void run_part(int part, int n_parts)
{
    const int64_t b = (int64_t)((__int128)g_items * part / n_parts);
    const int64_t e = (int64_t)((__int128)g_items * (part + 1) / n_parts);
    if (e > b)
        g_fn(g_ctx, b, e);
}

/* Claim and run parts of generation gen until none is left. is_worker:
 * count the part in g_remaining (the caller waits for those). */
static void claim_parts(uint32_t gen, int is_worker)
{
    uint64_t t = atomic_load(&g_ticket);
    for (;;) {
        if (T_GEN(t) != gen || T_NEXT(t) >= T_PARTS(t))
            return;
        if (is_worker)
            atomic_fetch_add(&g_remaining, 1);
        if (atomic_compare_exchange_weak(&g_ticket, &t, t + 1)) {
            run_part(T_NEXT(t), T_PARTS(t));
            if (is_worker)
                atomic_fetch_sub(&g_remaining, 1);
            t = atomic_load(&g_ticket);
        } else if (is_worker) {
            atomic_fetch_sub(&g_remaining, 1);
        }
    }
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *worker_main(void *arg)
{
    (void)arg;
    uint32_t seen = T_GEN(atomic_load(&g_ticket));
    for (;;) {
        const int64_t until = now_ns() + ROPE_SPIN_NS;
        while (T_GEN(atomic_load(&g_ticket)) == seen && now_ns() < until)
            cpu_relax();
        pthread_mutex_lock(&g_mu);
        while (T_GEN(atomic_load(&g_ticket)) == seen)
            pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
        seen = T_GEN(atomic_load(&g_ticket));
        claim_parts(seen, 1);
    }
    return NULL;
}

static void atfork_prepare(void) { pthread_mutex_lock(&g_busy); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_busy); }
static void atfork_child(void)
{
    /* The workers did not survive the fork: start afresh. */
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_cv, NULL);
    atomic_store(&g_remaining, 0);
    g_n_workers = 0;
    pthread_mutex_unlock(&g_busy);
}

static void install_atfork(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Start workers until there are `want` (called with g_busy held). */
static void grow_pool(int want)
{
    while (g_n_workers < want) {
        pthread_t tid;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr))
            return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        const int err = pthread_create(&tid, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (err)
            return; /* fewer workers: the caller runs the remaining parts */
        g_n_workers++;
    }
}

int rope_threads_for(int64_t bytes, int64_t n_items, int n_threads)
{
    int64_t parts = bytes / ROPE_MIN_PART_BYTES;
    if (parts > n_threads)
        parts = n_threads;
    if (parts > n_items)
        parts = n_items;
    if (parts > ROPE_MAX_THREADS)
        parts = ROPE_MAX_THREADS;
    return parts < 1 ? 1 : (int)parts;
}

void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int n_threads)
{
    if (n_threads > ROPE_MAX_THREADS)
        n_threads = ROPE_MAX_THREADS;
    if (n_threads <= 1 || n_items <= 1 || pthread_mutex_trylock(&g_busy) != 0) {
        /* Alone: one range, the same elements in the same order per token. */
        if (n_items > 0)
            fn(ctx, 0, n_items);
        return;
    }
    int64_t n_parts = (int64_t)n_threads * ROPE_CHUNKS_PER_THREAD;
    if (n_parts > n_items)
        n_parts = n_items;
    pthread_once(&g_once, install_atfork);
    grow_pool(n_threads - 1);
    g_fn = fn;
    g_ctx = ctx;
    g_items = n_items;
    const uint32_t gen = T_GEN(atomic_load(&g_ticket)) + 1;
    pthread_mutex_lock(&g_mu);
    atomic_store(&g_ticket, ((uint64_t)gen << 32) | ((uint64_t)n_parts << 16));
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    claim_parts(gen, 0);
    /* Every part is claimed; wait for the workers still running theirs. */
    for (unsigned spins = 0; atomic_load(&g_remaining) != 0; spins++) {
        if (spins < 4096)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_unlock(&g_busy);
}
