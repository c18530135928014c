/* Internal: the thread pool's interface (threads.c). Not part of the public
 * API. */
#ifndef PYROPE_THREADS_H
#define PYROPE_THREADS_H

#include <stdint.h>

/* rope_parallel_for runs fn(ctx, begin, end) over n_items, whose memory
 * traffic (bytes read + written) is `bytes`, on the calling thread plus up to n_threads - 1 pool workers, as many as the size
 * rule gives it (threads.c): small calls, and calls that would have to wake
 * a sleeping worker for less than it saves, run on the calling thread. The
 * items are cut into fixed contiguous chunks (several per thread) that
 * threads claim one at a time, so a worker the OS is slow to schedule only
 * means the others take more chunks; which thread runs a chunk never changes
 * what it computes. It falls back to the calling thread alone when the pool
 * is busy (another call is using it) or cannot start threads. */
typedef void (*rope_task_fn)(void *ctx, int64_t begin, int64_t end);
void rope_parallel_for(rope_task_fn fn, void *ctx, int64_t n_items, int64_t bytes, int n_threads);

/* Timing and tests only: the size rule's traffic per thread (0: every call
 * of two or more items splits), the work left after a call's first part
 * worth waking the pool for, in ns (0: wake it as every call starts), each
 * negative for the default, and whether splits that did not pay stop
 * splitting for a while (the default: yes). */
void rope_threads_set_rule(int64_t hot_bytes, int64_t wake_ns, int feedback);
/* Timing only: counts since the start (threads.c). */
enum {
    ROPE_STAT_CALLS,        /* calls the size rule would split */
    ROPE_STAT_SPLIT,        /* calls split */
    ROPE_STAT_WAKES,        /* wake-ups of sleeping workers */
    ROPE_STAT_WORKER_PARTS, /* parts run by workers */
    ROPE_STAT_LOSSES,       /* splits that cost more than they saved */
    ROPE_STAT_BACKED_OFF,   /* calls run alone after such a loss */
    ROPE_THREAD_STATS
};
void rope_threads_stats(int64_t out[ROPE_THREAD_STATS]);

#endif
