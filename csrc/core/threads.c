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
 * The rule: a call gets at most one thread per ROPE_HOT_BYTES of traffic;
 * workers that are awake take parts at once; sleeping ones are woken only
 * when the work left after the caller's first part, at the caller's pace,
 * is ROPE_WAKE_NS or more, or at the ROPE_BURST_CALLS+1-th split-sized call
 * in a row that starts within ROPE_SPIN_NS of the previous one's end (one
 * wake-up, then the worker is found spinning); with no worker awake, a call
 * that at the caller's last pace cannot leave that much work is not even
 * published (the check then costs 0.4-0.8% of a 1-2 MiB call instead of
 * 1.4-2.8%); splits that do not pay make the pool back off. Measured on the 2-vCPU KVM guest this was developed on
 * (AMD EPYC, CPUID family 25 model 17), shared with other jobs; ratios are
 * two threads / one, medians of interleaved repetitions;
 * tests/c/thread_split.c prints them for any machine.
 * - Waking a sleeping worker costs the caller 5-20 us (the futex wake-up of
 *   a halted vCPU; a raw futex measured 5.6-16 us, the condition variable
 *   9-22 us, too close to leave the portable one), and after an idle gap of
 *   1 ms or more the scheduler put the woken worker on the caller's own CPU
 *   in 52-60 of 60 trials (after 0-100 us: 0 of 60), where it can only take
 *   turns with the caller; pinning it to the other vCPU then took 0.05 ms
 *   (after 1 ms asleep) to 1.9 ms (after 10 ms) to get it running there.
 *   Waking the worker for every 1 MiB decode call (64x1x32x128 float32), as
 *   the pool did before, made it 1.24-1.27x slower than one thread after
 *   1 ms gaps and 2.2x after 10 ms; the first calls after such a gap took
 *   77-99 us against 15 (the worker ran all 16 parts on the caller's CPU,
 *   then spun there). Wake-ups at the start of every call still lost at
 *   every size up to 16 MiB of traffic after 1-10 ms gaps (1.02-6.5x). A
 *   wake-up decided by the work left follows the kernel's speed: with a
 *   200 us threshold and the AVX2 kernels, decode calls (4-35 us) never woke
 *   the pool, prefills of q (0.5-1.3 ms) took 0.38-0.68x after 1 ms gaps and
 *   0.90-1.04x after 10 ms, but prefills of k (140-400 us), whose wake-ups
 *   after 10 ms gaps mostly lost, 1.06-1.09x there, hence 500 us; with the
 *   scalar kernels (45x slower) 64x1x32x128 (0.7-0.9 ms) took 0.56-0.59x
 *   after 1 ms gaps. A worker that finds itself on the caller's CPU sleeps
 *   instead of spinning. On an Intel Xeon guest (KVM, 2 vCPUs, family 6
 *   model 167, AVX2 kernels) the 500 us threshold left prefills of k
 *   (200-550 us) on one thread, where a split after 1 ms gaps took
 *   0.35-0.49x (0.89-0.98x by the rule) and after 10 ms gaps 0.99-1.05x;
 *   at 150 us the rule splits them: 0.37-0.46x after 1 ms gaps, 0.45-0.53x
 *   back to back (0.59-0.90x before), 1.00-1.06x after 10 ms gaps (a lost
 *   split backs off), decode calls (4-45 us) still never wake the pool.
 * - With the worker spinning on the other CPU, a split pays from about
 *   1 us of one-thread work: float32 decode shapes of 128 KiB, 256 KiB,
 *   512 KiB, 1 MiB and 2 MiB of traffic took 1.02, 0.88, 0.74, 0.62 and
 *   0.53x; the yardstick (the fastest any kernel can be) 1.12x at 256 KiB,
 *   0.84x at 512 KiB, 0.69x at 1 MiB. ROPE_HOT_BYTES per thread keeps every
 *   split at 1 MiB or more, so faster kernels cannot make it a loss (slower
 *   ones leave some gain unused: 16x1x32x128 on the scalar kernels, 170 us,
 *   stays on one thread).
 * - A worker that is preempted or slow (the other vCPU busy with other
 *   processes, the worker beside the caller) makes the caller wait. So every
 *   split is judged: if the caller's publishing, waking and waiting cost
 *   more than the worker's parts saved (at the caller's own pace per part),
 *   the pool backs off for ROPE_BACKOFF_MIN_NS, doubled after each further
 *   loss in a row up to ROPE_BACKOFF_MAX_NS: from every split if the worker
 *   was awake (the other CPU is busy), from wake-ups only if the split woke
 *   it (a woken worker is often placed beside the caller, while one that is
 *   awake anyway still helps). What remains is the tail: a worker preempted
 *   while it holds a part keeps the caller waiting until it runs again
 *   (under load, the 90th percentile of a split prefill of q reached 2-5 ms
 *   against 1.3-1.8 ms on one thread).
 * - The slow start after an idle gap is the machine's: after 2-100 ms
 *   asleep the first call takes 20-60 us instead of 15 (1 MiB), and a 4 MiB
 *   call stays slow for 2-3 calls (e.g. 460, 270, 180 us against 140), on
 *   one thread as on two and for the yardstick alike. A 1 ms arithmetic
 *   loop first does not shorten it (no clock ramp); a read pass over the
 *   data takes the first call's share itself: the data has to come back
 *   into the caches. What the pool added to it is gone: after a gap, small
 *   calls run alone and large ones wake the pool only once their first part
 *   is done; a run of back-to-back calls pays one wake-up, at its third.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "pyrope.h"
#include "threads.h"

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
#define ROPE_HOT_BYTES (512 * 1024)
#endif
/* Work left, at the caller's pace over its first part, worth waking a
 * sleeping worker for. */
#ifndef ROPE_WAKE_NS
#define ROPE_WAKE_NS 150000
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
/* After a split that did not pay, splits of its kind (g_backoff) are not
 * tried for this long, doubled after each further loss in a row up to the
 * maximum. */
#define ROPE_BACKOFF_MIN_NS 1000000
#define ROPE_BACKOFF_MAX_NS 64000000
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
static _Atomic int64_t g_hot_bytes = ROPE_HOT_BYTES, g_wake_ns = ROPE_WAKE_NS;

static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   /* guards sleeping */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Guarded by g_busy: when the last split-sized call ended, and how many
 * such calls in a row started soon after the one before. */
static int64_t g_last_end;
static int g_burst;
/* Guarded by g_busy: the caller's pace, ns per KiB of traffic, in the last
 * split-sized call it ran without help. */
static int64_t g_pace;
/* Guarded by g_busy: after a split that did not pay, splits of its kind are
 * not tried before `until`; `ns` is the next back-off. HOT: splits among
 * awake workers (a loss stops every split: the other CPU is busy); WAKE:
 * splits that woke a worker (a loss stops wake-ups, often placed beside the
 * caller, while a worker that is awake anyway still helps). */
enum { HOT, WAKE };
static struct {
    int64_t until, ns;
} g_backoff[2] = {{0, ROPE_BACKOFF_MIN_NS}, {0, ROPE_BACKOFF_MIN_NS}};
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
    g_pace = 0;
    for (int k = HOT; k <= WAKE; k++) {
        g_backoff[k].until = 0;
        g_backoff[k].ns = ROPE_BACKOFF_MIN_NS;
    }
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

void rope_threads_set_rule(int64_t hot_bytes, int64_t wake_ns, int feedback)
{
    atomic_store(&g_hot_bytes, hot_bytes < 0 ? ROPE_HOT_BYTES : hot_bytes);
    atomic_store(&g_wake_ns, wake_ns < 0 ? ROPE_WAKE_NS : wake_ns);
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

/* Wake the sleeping workers, starting up to `want` first (g_busy held). */
static void wake_workers(int want, uint32_t gen)
{
    pthread_once(&g_once, install_atfork);
    grow_pool(want, gen - 1);
    if (atomic_load(&g_sleepers) > 0) {
        /* Through g_mu: a worker between its check and its wait sees the
         * new ticket or gets the broadcast. */
        pthread_mutex_lock(&g_mu);
        pthread_mutex_unlock(&g_mu);
        pthread_cond_broadcast(&g_cv);
        g_stats[ROPE_STAT_WAKES]++;
    }
}

/* Publish fn over n_items as parts for n threads (g_busy held) and run them
 * from the front, waking the pool first if wake_ns is 0, or after the first
 * part if the rest would take wake_ns or more at that pace (wake_ns < 0:
 * never). *kind: HOT if only awake workers could help, WAKE if the call woke
 * the pool, -1 if no worker could help (the caller then ran the rest at
 * once). Returns whether the split saved time: the workers' parts at the
 * caller's own pace per part, against what the caller spent publishing,
 * waking and waiting for them. */
static int run_job(rope_task_fn fn, void *ctx, int64_t n_items, int n, int64_t wake_ns,
                   uint32_t gen, int *kind)
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
    *kind = atomic_load(&g_workers) > atomic_load(&g_sleepers) ? HOT : -1;
    if (wake_ns == 0) {
        wake_workers(n - 1, gen);
        *kind = WAKE;
    }
    const int64_t t1 = now_ns();
    int64_t waking = t1 - t0, mid_wake = 0;
    int own = 0;
    uint64_t t = atomic_load(&g_ticket);
    while (T_GEN(t) == gen && T_FRONT(t) < T_BACK(t)) {
        if (!atomic_compare_exchange_weak(&g_ticket, &t, t + (1u << 16)))
            continue;
        run_part(T_FRONT(t));
        t = atomic_load(&g_ticket);
        if (++own > 1 || *kind == WAKE || T_FRONT(t) >= T_BACK(t))
            continue;
        /* After the first part: is the rest worth a wake-up? */
        const int64_t b = now_ns();
        if (wake_ns > 0 && (b - t1) * (T_BACK(t) - T_FRONT(t)) >= wake_ns &&
            (atomic_load(&g_sleepers) > 0 || atomic_load(&g_workers) < n - 1)) {
            wake_workers(n - 1, gen);
            *kind = WAKE;
            mid_wake = now_ns() - b;
        } else if (*kind < 0) {
            /* Nobody is coming: the rest in one range, one claim. */
            const uint64_t all = (t & ~((uint64_t)0xFFFF << 16)) | (uint64_t)T_BACK(t) << 16;
            if (atomic_compare_exchange_strong(&g_ticket, &t, all)) {
                fn(ctx, (int64_t)((__int128)n_items * T_FRONT(t) / parts),
                   (int64_t)((__int128)n_items * T_BACK(t) / parts));
                break;
            }
        }
    }
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
    if (*kind < 0)
        return 1;
    g_stats[ROPE_STAT_SPLIT]++;
    g_stats[ROPE_STAT_WORKER_PARTS] += parts - own;
    if (own == 0)
        return 0; /* the caller was kept from its parts: no gain to count on */
    const double pace = (double)(t2 - t1 - mid_wake) / own; /* the caller's, per part */
    return pace * (double)(parts - own) > (double)(waking + mid_wake + t3 - t2);
}

/* A split of kind k saved time or not: back off from that kind, longer
 * after each loss in a row. */
static void judge(int k, int saved, int64_t end)
{
    if (saved) {
        g_backoff[k].ns = ROPE_BACKOFF_MIN_NS;
        return;
    }
    g_backoff[k].until = end + g_backoff[k].ns;
    g_backoff[k].ns = g_backoff[k].ns * 2 > ROPE_BACKOFF_MAX_NS ? ROPE_BACKOFF_MAX_NS : g_backoff[k].ns * 2;
    g_stats[ROPE_STAT_LOSSES]++;
}

void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int64_t bytes, int n_threads)
{
    if (n_items <= 0)
        return;
    const int n = threads_by_size(bytes, n_items, n_threads);
    if (n <= 1 || pthread_mutex_trylock(&g_busy) != 0) {
        /* Alone: one range, the same elements in the same order per token. */
        fn(ctx, 0, n_items);
        return;
    }
    const int64_t start = now_ns();
    g_stats[ROPE_STAT_CALLS]++;
    g_burst = start - g_last_end < ROPE_SPIN_NS ? g_burst + 1 : 0;
    const int feedback = atomic_load_explicit(&g_feedback, memory_order_relaxed);
    int64_t wake_ns = atomic_load_explicit(&g_wake_ns, memory_order_relaxed);
    if (g_burst >= ROPE_BURST_CALLS)
        wake_ns = 0;
    if (feedback && start < g_backoff[HOT].until) {
        g_stats[ROPE_STAT_BACKED_OFF]++;
        fn(ctx, 0, n_items);
        g_last_end = now_ns();
        pthread_mutex_unlock(&g_busy);
        return;
    }
    if (feedback && start < g_backoff[WAKE].until) {
        wake_ns = -1; /* split only among workers that are awake */
        g_stats[ROPE_STAT_BACKED_OFF]++;
    }
    const int before = atomic_load(&g_workers);
    int kind = -1, saved = 0;
    if (wake_ns != 0 && before == atomic_load(&g_sleepers) &&
        (wake_ns < 0 || g_pace < wake_ns / 4 / ((bytes >> 10) + 1))) {
        /* No worker awake, and at the last pace this call will not leave
         * enough work for a wake-up: alone, without publishing it. */
        fn(ctx, 0, n_items);
    } else {
        saved = run_job(fn, ctx, n_items, n, wake_ns, T_GEN(atomic_load(&g_ticket)) + 1, &kind);
    }
    g_last_end = now_ns();
    if (kind < 0)
        g_pace = (g_last_end - start) / ((bytes >> 10) + 1);
    else if (atomic_load(&g_workers) == before) /* a new thread's start is no measure */
        judge(kind, saved, g_last_end);
    pthread_mutex_unlock(&g_busy);
}
