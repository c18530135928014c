/* The bandwidth yardstick: one in-place read+write pass over a buffer, split
 * over threads exactly as a rotation of the same bytes would be. It is what
 * "at the memory-bandwidth limit" is measured against: a rotation that reads
 * and writes every byte once cannot beat it. */
#include "kernels.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>
#endif

typedef struct {
    unsigned char *data;
    int64_t n_bytes;
    uint32_t mask;
    int simd;
} pass_job;

#ifdef ROPE_HAVE_X86
__attribute__((target("avx2"))) static void pass_avx2(unsigned char *p, int64_t n, uint32_t mask)
{
    const __m256i m = _mm256_set1_epi32((int)mask);
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i *v = (__m256i *)(p + i);
        const __m256i a = _mm256_loadu_si256(v), b = _mm256_loadu_si256(v + 1);
        const __m256i c = _mm256_loadu_si256(v + 2), d = _mm256_loadu_si256(v + 3);
        _mm256_storeu_si256(v, _mm256_xor_si256(a, m));
        _mm256_storeu_si256(v + 1, _mm256_xor_si256(b, m));
        _mm256_storeu_si256(v + 2, _mm256_xor_si256(c, m));
        _mm256_storeu_si256(v + 3, _mm256_xor_si256(d, m));
    }
    for (; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}
#endif

static void pass_range(void *ctx, int64_t begin, int64_t end)
{
    /* items are 4-byte words; the job's last item also takes the leftover bytes */
    const pass_job *j = (const pass_job *)ctx;
    unsigned char *p = j->data + 4 * begin;
    int64_t n = 4 * (end - begin);
    if (4 * end >= j->n_bytes - 3)
        n = j->n_bytes - 4 * begin;
#ifdef ROPE_HAVE_X86
    if (j->simd) {
        pass_avx2(p, n, j->mask);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        p[i] ^= (unsigned char)(j->mask >> (8 * (i & 3)));
}

int rope_bandwidth_pass(void *data, int64_t n_bytes, uint32_t xor_mask, int n_threads)
{
    if (n_bytes < 0)
        return ROPE_E_COUNT;
    if (n_bytes == 0)
        return ROPE_OK;
    if (!data)
        return ROPE_E_NULL;
    pass_job j = {(unsigned char *)data, n_bytes, xor_mask, rope_get_isa() == ROPE_ISA_AVX2};
    const int64_t words = n_bytes / 4 > 0 ? n_bytes / 4 : 1;
    rope_parallel_for(pass_range, &j, words, rope_threads_for(2 * n_bytes, words, n_threads));
    return ROPE_OK;
}
