/* The bandwidth yardstick: one in-place read+write pass over a buffer, split
 * over threads exactly as a rotation of the same bytes would be, with the
 * active instruction set's widest pass (the registry's `pass`). It is what
 * "at the memory-bandwidth limit" is measured against: a rotation that reads
 * and writes every byte once cannot beat it. */
#include "core/kernels.h"
#include "core/threads.h"

typedef struct {
    unsigned char *data;
    int64_t n_bytes;
    uint32_t mask;
    rope_pass_fn pass;
} pass_job;

static void pass_range(void *ctx, int64_t begin, int64_t end)
{
    /* items are 4-byte words (so the mask stays in phase); the job's last
     * item also takes the leftover bytes */
    const pass_job *j = (const pass_job *)ctx;
    int64_t n = 4 * (end - begin);
    if (4 * end >= j->n_bytes - 3)
        n = j->n_bytes - 4 * begin;
    j->pass(j->data + 4 * begin, n, j->mask);
}

int rope_bandwidth_pass(void *data, int64_t n_bytes, uint32_t xor_mask, int n_threads)
{
    if (n_bytes < 0)
        return ROPE_E_COUNT;
    if (n_bytes == 0)
        return ROPE_OK;
    if (!data)
        return ROPE_E_NULL;
    pass_job j = {(unsigned char *)data, n_bytes, xor_mask, rope_active_kernels()->pass};
    const int64_t words = n_bytes / 4 > 0 ? n_bytes / 4 : 1;
    rope_parallel_for(pass_range, &j, words, 2 * n_bytes, n_threads);
    return ROPE_OK;
}
