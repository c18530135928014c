/* A small persistent thread pool for splitting large calls, and the rule
 * that decides which calls it takes.
 *
 * Workers are started lazily, then wait for jobs: first spinning for
 * ROPE_SPIN_NS after their last job (so back-to-back calls find them
 * awake), then asleep on a condition variable. A job is cut into fixed
 * chunks ("parts", several per thread) and published as one atomic ticket
 * (generation, first and last unclaimed part): the caller claims parts from
 * the front and starts at once, workers claim from the back, each with
 * compare-and-swap, so a part runs exactly once, a late worker finds
 * nothing left (never a part of a newer job), and a job finishes even with
 * no worker at all. When another thread is already running a job the caller
 * simply runs its call alone. Which thread runs a part never changes its
 * result: parts are fixed ranges and the kernels compute each token alone.
 * After fork() the child starts with no workers (pthread_atfork).
 *
 * The rule. Measured on the 2-vCPU KVM guest this was developed on (AMD
 * EPYC, CPUID family 25 model 17; tests/c/thread_split.c prints the
 * figures for any machine):
 * - Waking a sleeping worker costs the caller 5-20 us (futex wake-up of a
 *   halted vCPU; a raw futex saves 0-5 us of that, too little to leave the
 *   portable condition variable), and after an idle gap of 1 ms or more the
 *   scheduler places the woken worker on the caller's own CPU in 52-59 of
 *   60 trials, where it can only take turns with the caller (forcing it onto
 *   the other vCPU took 2-4 ms). Splitting every 1 MiB decode call
 *   (64x1x32x128 float32) that way made it 1.24-2.2x slower than one thread
 *   after gaps of 1-10 ms, and the first call after such a gap took 77-99 us
 *   against 15: the worker ran every part on the caller's CPU, then spun
 *   there. So a sleeping worker is woken only for a call of ROPE_COLD_BYTES
 *   of traffic or more (at the yardstick's rate, which no kernel beats, at
 *   least ~250 us of work, where the wake-up is a few percent), or at the
 *   ROPE_BURST_CALLS+1-th split-sized call in a row that starts within
 *   ROPE_SPIN_NS of the previous one's end (one wake-up, then the worker
 *   is found spinning). A worker that finds itself on the caller's CPU
 *   yields instead of taking parts.
 * - With the worker awake (spinning), a split pays from ~5 us of one-thread
 *   work: 16x1x32x128 float32 (512 KiB of traffic, 3.8 us) was 1.22x slower
 *   on two threads, its 16-bit twins (256 KiB, 5.8 us) 0.81x, and
 *   64x1x32x128 float32 (2 MiB, 15 us) 0.65-0.75x. ROPE_HOT_BYTES of
 *   traffic per thread is over 5 us even at the yardstick's rate (2 MiB in
 *   11 us), so faster kernels do not make the smallest split a loss.
 * - On this shared machine the other vCPU is often busy with other
 *   processes; a worker that is preempted or slow makes the caller wait.
 *   So every split is judged: if the caller's publishing and waiting cost
 *   more than the worker's parts saved (at the caller's pace per part), the
 *   pool backs off -- split-sized calls run alone for ROPE_BACKOFF_MIN_NS,
 *   doubled after each further loss up to ROPE_BACKOFF_MAX_NS. With the
 *   load average at 5-13, two threads then timed within 0.96-1.03x of one
 *   in the median on every decode and prefill case, at gaps of 0, 1 and
 *   10 ms.
 * - The slow start after an idle gap is the machine's: after 2-100 ms
 *   asleep the first call takes 30-60 us instead of 15 (1 MiB), and 200-400
 *   instead of 85-140 us over the next 2-3 calls for 4 MiB, on one thread as
 *   on two and for the yardstick alike; a 1 ms arithmetic loop first does
 *   not shorten it (it is no clock ramp), a read pass over the data takes the
 *   first call's share itself: the data has to come back into the caches.
 *   What the pool added to it (the wake-up, the worker beside the caller)
 *   is gone: the first calls after a gap run alone unless they are large.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Traffic (bytes read + written) per thread below which a call is not split
 * even when a worker is awake. */
#ifndef ROPE_HOT_BYTES
#define ROPE_HOT_BYTES (1024 * 1024)
#endif
/* Traffic of a call worth waking a sleeping worker for. */
#ifndef ROPE_COLD_BYTES
#define ROPE_COLD_BYTES (32 * 1024 * 1024)
#endif
/* Consecutive split-sized calls, each starting within ROPE_SPIN_NS of the
 * end of the one before, after which a sleeping worker is woken anyway: a
 * run of back-to-back calls pays one wake-up and then finds it spinning. */
#ifndef ROPE_BURST_CALLS
#define ROPE_BURST_CALLS 2
#endif
/* Chunks per thread: small enough that a late worker costs little. */
#ifndef ROPE_CHUNKS_PER_THREAD
#define ROPE_CHUNKS_PER_THREAD 8
#endif
/* How long an idle worker spins before it sleeps. */
#ifndef ROPE_SPIN_NS
#define ROPE_SPIN_NS 50000
#endif
/* After a split that did not pay, split-sized calls run alone for this
 * long, doubled after each further loss up to the maximum. */
#define ROPE_BACKOFF_MIN_NS 1000000
#define ROPE_BACKOFF_MAX_NS 256000000
/* How often a spinning worker checks that it is not keeping the caller's
 * CPU from it (it sleeps if so). */
#define ROPE_SPIN_CHECK_NS 2000

/* ticket = generation << 32 | front << 16 | back: parts front..back-1 of
 * the job of that generation are unclaimed. */
#define T_GEN(t) ((uint32_t)((t) >> 32))
#define T_FRONT(t) ((int)(((t) >> 16) & 0xFFFF))
#define T_BACK(t) ((int)((t)&0xFFFF))
_Static_assert(ROPE_MAX_THREADS * ROPE_CHUNKS_PER_THREAD <= 0xFFFF, "parts fit the ticket");

/* Claimed by every part (and polled by spinning workers) on one cache line;
 * what a worker's part updates on another, the pool's state on a third. */
static _Alignas(64) _Atomic uint64_t g_ticket;
static _Alignas(64) _Atomic int g_remaining; /* parts claimed by workers, not yet done */
static _Alignas(64) _Atomic int g_workers;   /* started */
static _Atomic int g_sleepers;               /* asleep on g_cv, or about to be */
static _Atomic int g_caller_cpu = -1;        /* CPU the last job was published from */
static _Atomic int64_t g_hot_bytes = ROPE_HOT_BYTES, g_cold_bytes = ROPE_COLD_BYTES;

static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   /* guards sleeping */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Guarded by g_busy: when the last split-sized call ended, and how many
 * such calls in a row started soon after the one before. */
static int64_t g_last_end;
static int g_burst;
/* Guarded by g_busy: split-sized calls run alone until g_backoff_until
 * after a split that did not pay; g_backoff_ns is the next back-off. */
static int64_t g_backoff_until, g_backoff_ns = ROPE_BACKOFF_MIN_NS;
static _Atomic int g_feedback = 1;
static int64_t g_stats[ROPE_THREAD_STATS]; /* guarded by g_busy */

/* The job of the current generation; written by the caller before the
 * ticket is published, read by a worker only after it claimed a part. */
static rope_task_fn g_fn;
static void *g_ctx;
static int64_t g_items;
static int g_parts;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Is this thread on the CPU the last job was published from? The scheduler
 * may place a woken worker beside its waker; spinning there would keep the
 * caller from its CPU. */
static int beside_caller(void)
{
#ifdef __linux__
    const int cpu = sched_getcpu();
    return cpu >= 0 && cpu == atomic_load_explicit(&g_caller_cpu, memory_order_relaxed);
#else
    return 0;
#endif
}

static void run_part(int part)
{
    const int64_t b = (int64_t)((__int128)g_items * part / g_parts);
    const int64_t e = (int64_t)((__int128)g_items * (part + 1) / g_parts);
    if (e > b)
        g_fn(g_ctx, b, e);
}

/* The caller: claim parts of generation gen from the front until none is
 * left; returns how many it ran. */
static int caller_parts(uint32_t gen)
{
    int ran = 0;
    uint64_t t = atomic_load(&g_ticket);
    while (T_GEN(t) == gen && T_FRONT(t) < T_BACK(t)) {
        if (atomic_compare_exchange_weak(&g_ticket, &t, t + (1u << 16))) {
            run_part(T_FRONT(t));
            ran++;
            t = atomic_load(&g_ticket);
        }
    }
    return ran;
}

/* A worker: claim parts of generation gen from the back until none is
 * left, counting each in g_remaining (the caller waits for those). */
static void worker_parts(uint32_t gen)
{
    uint64_t t = atomic_load(&g_ticket);
    while (T_GEN(t) == gen && T_FRONT(t) < T_BACK(t)) {
        atomic_fetch_add(&g_remaining, 1);
        if (atomic_compare_exchange_weak(&g_ticket, &t, t - 1)) {
            run_part(T_BACK(t) - 1);
            atomic_fetch_sub(&g_remaining, 1);
            t = atomic_load(&g_ticket);
        } else {
            atomic_fetch_sub(&g_remaining, 1);
        }
    }
}

/* Wait for a generation other than seen and return it: spin for
 * ROPE_SPIN_NS, unless (or until) this thread shares the CPU of the
 * caller, then sleep until a caller wakes the pool. */
static uint32_t next_job(uint32_t seen)
{
    const int64_t start = now_ns();
    int64_t check = start - ROPE_SPIN_CHECK_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            const uint32_t gen = T_GEN(atomic_load(&g_ticket));
            if (gen != seen)
                return gen;
            cpu_relax();
        }
        const int64_t t = now_ns();
        if (t - start >= ROPE_SPIN_NS)
            break;
        if (t - check >= ROPE_SPIN_CHECK_NS) {
            check = t;
            if (beside_caller())
                break;
        }
    }
    pthread_mutex_lock(&g_mu);
    atomic_fetch_add(&g_sleepers, 1);
    while (T_GEN(atomic_load(&g_ticket)) == seen)
        pthread_cond_wait(&g_cv, &g_mu);
    atomic_fetch_sub(&g_sleepers, 1);
    pthread_mutex_unlock(&g_mu);
    return T_GEN(atomic_load(&g_ticket));
}

static void *worker_main(void *arg)
{
    uint32_t gen = (uint32_t)(uintptr_t)arg; /* the generation before its first job */
    for (;;) {
        gen = next_job(gen);
        worker_parts(gen);
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
    atomic_store(&g_workers, 0);
    atomic_store(&g_sleepers, 0);
    g_burst = 0;
    g_backoff_until = 0;
    g_backoff_ns = ROPE_BACKOFF_MIN_NS;
    pthread_mutex_unlock(&g_busy);
}

static void install_atfork(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Start workers until there are `want` (called with g_busy held); each
 * starts waiting for a generation after gen. */
static void grow_pool(int want, uint32_t gen)
{
    while (atomic_load(&g_workers) < want) {
        pthread_t tid;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr))
            return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        const int err = pthread_create(&tid, &attr, worker_main, (void *)(uintptr_t)gen);
        pthread_attr_destroy(&attr);
        if (err)
            return; /* fewer workers: the caller runs the remaining parts */
        atomic_fetch_add(&g_workers, 1);
    }
}

void rope_threads_set_rule(int64_t hot_bytes, int64_t cold_bytes, int feedback)
{
    atomic_store(&g_hot_bytes, hot_bytes < 0 ? ROPE_HOT_BYTES : hot_bytes);
    atomic_store(&g_cold_bytes, cold_bytes < 0 ? ROPE_COLD_BYTES : cold_bytes);
    atomic_store(&g_feedback, feedback != 0);
}

void rope_threads_stats(int64_t out[ROPE_THREAD_STATS])
{
    pthread_mutex_lock(&g_busy);
    for (int i = 0; i < ROPE_THREAD_STATS; i++)
        out[i] = g_stats[i];
    pthread_mutex_unlock(&g_busy);
}

/* Threads the size rule allows `bytes` of traffic over n_items. */
static int threads_by_size(int64_t bytes, int64_t n_items, int n_threads)
{
    const int64_t per = atomic_load_explicit(&g_hot_bytes, memory_order_relaxed);
    int64_t n = per > 0 ? bytes / per : INT64_MAX;
    if (n > n_threads)
        n = n_threads;
    if (n > n_items)
        n = n_items;
    if (n > ROPE_MAX_THREADS)
        n = ROPE_MAX_THREADS;
    return n < 1 ? 1 : (int)n;
}

/* Run fn over n_items on the caller and n - 1 workers (g_busy held; wake:
 * wake sleeping workers). Returns whether the split saved time: the
 * workers' parts at the caller's own pace per part, against what the caller
 * spent publishing and waiting for them. */
static int run_split(rope_task_fn fn, void *ctx, int64_t n_items, int n, int wake, uint32_t gen)
{
    int64_t parts = (int64_t)n * ROPE_CHUNKS_PER_THREAD;
    if (parts > n_items)
        parts = n_items;
    const int64_t t0 = now_ns();
    g_fn = fn;
    g_ctx = ctx;
    g_items = n_items;
    g_parts = (int)parts;
#ifdef __linux__
    atomic_store_explicit(&g_caller_cpu, sched_getcpu(), memory_order_relaxed);
#endif
    atomic_store(&g_ticket, ((uint64_t)gen << 32) | (uint64_t)parts);
    if (wake && atomic_load(&g_sleepers) > 0) {
        /* Through g_mu: a worker between its check and its wait sees the
         * new ticket or gets the broadcast. */
        pthread_mutex_lock(&g_mu);
        pthread_mutex_unlock(&g_mu);
        pthread_cond_broadcast(&g_cv);
        g_stats[ROPE_STAT_WAKES]++;
    }
    const int64_t t1 = now_ns();
    const int own = caller_parts(gen);
    const int64_t t2 = now_ns();
    /* Every part is claimed; wait for the workers still running theirs
     * (yielding soon: a worker preempted on this CPU needs it back). */
    for (unsigned spins = 0; atomic_load(&g_remaining) != 0; spins++) {
        if (spins < 64)
            cpu_relax();
        else
            sched_yield();
    }
    const int64_t t3 = now_ns();
    g_stats[ROPE_STAT_SPLIT]++;
    g_stats[ROPE_STAT_WORKER_PARTS] += parts - own;
    if (own == 0)
        return 0; /* the caller was kept from its parts: no gain to count on */
    return (double)(t2 - t1) / own * (double)(parts - own) > (double)(t1 - t0 + t3 - t2);
}

void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int64_t bytes, int n_threads)
{
    if (n_items <= 0)
        return;
    int n = threads_by_size(bytes, n_items, n_threads);
    if (n <= 1 || pthread_mutex_trylock(&g_busy) != 0) {
        /* Alone: one range, the same elements in the same order per token. */
        fn(ctx, 0, n_items);
        return;
    }
    const int64_t start = now_ns();
    g_stats[ROPE_STAT_CALLS]++;
    g_burst = start - g_last_end < ROPE_SPIN_NS ? g_burst + 1 : 0;
    const int feedback = atomic_load_explicit(&g_feedback, memory_order_relaxed);
    const int wake = bytes >= atomic_load_explicit(&g_cold_bytes, memory_order_relaxed) ||
                     g_burst >= ROPE_BURST_CALLS;
    const uint32_t gen = T_GEN(atomic_load(&g_ticket)) + 1;
    if (feedback && start < g_backoff_until) {
        n = 1;
        g_stats[ROPE_STAT_BACKED_OFF]++;
    }
    int grew = 0;
    if (n > 1 && wake) {
        pthread_once(&g_once, install_atfork);
        const int before = atomic_load(&g_workers);
        grow_pool(n - 1, gen - 1);
        grew = atomic_load(&g_workers) != before;
    }
    const int awake = atomic_load(&g_workers) - (wake ? 0 : atomic_load(&g_sleepers));
    if (n > 1 + awake)
        n = 1 + awake;
    if (n <= 1) {
        fn(ctx, 0, n_items);
        g_last_end = now_ns();
    } else {
        const int saved = run_split(fn, ctx, n_items, n, wake, gen);
        g_last_end = now_ns();
        if (saved || grew) { /* a new thread's start is no measure of a split */
            g_backoff_ns = ROPE_BACKOFF_MIN_NS;
        } else {
            /* The split cost more than it saved (the other CPU is busy, a
             * worker was slow to come or was placed beside the caller):
             * run alone for a while, longer after each loss in a row. */
            g_backoff_until = g_last_end + g_backoff_ns;
            g_backoff_ns = g_backoff_ns * 2 > ROPE_BACKOFF_MAX_NS ? ROPE_BACKOFF_MAX_NS : g_backoff_ns * 2;
            g_stats[ROPE_STAT_LOSSES]++;
        }
    }
    pthread_mutex_unlock(&g_busy);
}

