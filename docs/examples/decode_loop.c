/* decode_loop.c: pyrope's C API in the decode loop of an inference engine.
 *
 * A prompt of PROMPT tokens is in the KV cache already; each decode step makes
 * one token's query (N_Q heads) and key (N_KV heads), and one rope_rotate call
 * rotates the query in place and writes the rotated key into the token's slot
 * of the cache. cos/sin come from a table built once for every slot
 * (rope_cos_sin_range_f32). At the end, the last key is rotated again with
 * angles computed on the fly (no table): the same bits.
 *
 * Build against the installed Python package and run (docs/examples/README.md):
 *   cc -std=c11 -O2 decode_loop.c -o decode_loop -lm $(PKG_CONFIG_PATH="$(python3 -c 'import pyrope; print(pyrope.get_library_path())')/pkgconfig" pkg-config --cflags --libs pyrope)
 *   ./decode_loop
 *
 * Prints every input and rotated vector, one per line:
 *   k <position> <head> in|out <HEAD_DIM values>   (out: the cache slot)
 *   q <position> <head> in|out <HEAD_DIM values>
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pyrope.h>

enum { HEAD_DIM = 64, HALF = HEAD_DIM / 2, N_Q = 4, N_KV = 2, MAX_SEQ = 1024, PROMPT = 1000, STEPS = 8 };
static const double BASE = 10000.0;

/* Every call returns a status: stop with its message on the first failure. */
#define CHECK(call)                                                                  \
    do {                                                                             \
        int status_ = (call);                                                        \
        if (status_ != ROPE_OK) {                                                    \
            fprintf(stderr, "%s failed: %s\n", #call, rope_strerror(status_));       \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Stand-in for the model's projections (q = h Wq, k = h Wk): values in [-1, 1). */
static void fill(float *v, int n, uint32_t *state)
{
    for (int i = 0; i < n; i++) {
        *state ^= *state << 13, *state ^= *state >> 17, *state ^= *state << 5;
        v[i] = (float)(*state / 2147483648.0 - 1.0);
    }
}

static void print_vector(char name, int64_t position, int head, const char *what, const float *v)
{
    printf("%c %lld %d %s", name, (long long)position, head, what);
    for (int d = 0; d < HEAD_DIM; d++)
        printf(" %.9g", v[d]);
    printf("\n");
}

int main(void)
{
    /* The library loaded must have this header's ABI and be at least as new. */
    if (rope_abi_version() != ROPE_ABI_VERSION || rope_version() < ROPE_VERSION) {
        fprintf(stderr, "libpyrope %d (ABI %d) is older than this program's header %d (ABI %d)\n",
                rope_version(), rope_abi_version(), ROPE_VERSION, ROPE_ABI_VERSION);
        return 1;
    }
    printf("pyrope %d.%d.%d (ABI %d), instruction set %s\n", rope_version() / 10000, rope_version() / 100 % 100,
           rope_version() % 100, rope_abi_version(), rope_isa_name(rope_get_isa()));

    /* The rope: split-half pairs (HF, GPT-NeoX), theta_i = BASE^(-2i/HEAD_DIM). */
    double inv_freq[HALF];
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = pow(BASE, -2.0 * i / HEAD_DIM);
    printf("inv_freq");
    for (int i = 0; i < HALF; i++)
        printf(" %.17g", inv_freq[i]);
    printf("\n");

    /* cos/sin for every slot of the cache, once: rows [MAX_SEQ][HALF]. */
    float *cos_table = malloc(sizeof(float) * MAX_SEQ * HALF);
    float *sin_table = malloc(sizeof(float) * MAX_SEQ * HALF);
    float *k_cache = calloc((size_t)MAX_SEQ * N_KV * HEAD_DIM, sizeof(float)); /* [MAX_SEQ][N_KV][HEAD_DIM] */
    if (!cos_table || !sin_table || !k_cache) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    CHECK(rope_cos_sin_range_f32(0, MAX_SEQ, inv_freq, HALF, 1.0, cos_table, sin_table));

    /* What every step computes: one token of float32 heads, rotated forward. */
    rope_op op = {.dtype = ROPE_F32, .layout = ROPE_SPLIT_HALF, .inverse = 0, .n_batch = 1, .n_seq = 1,
                  .head_dim = HEAD_DIM, .rotary_dim = HEAD_DIM, .n_threads = 1};
    float q[N_Q * HEAD_DIM], k[N_KV * HEAD_DIM], q_in[N_Q * HEAD_DIM];
    uint32_t state = 2463534242u;

    for (int64_t pos = PROMPT; pos < PROMPT + STEPS; pos++) {
        fill(q, N_Q * HEAD_DIM, &state);
        fill(k, N_KV * HEAD_DIM, &state);
        memcpy(q_in, q, sizeof q);
        /* strides in elements {batch, seq, head}; the key goes to slot pos */
        rope_tensor tensors[2] = {
            {.x = q, .out = q, .n_heads = N_Q,
             .x_strides = {N_Q * HEAD_DIM, N_Q * HEAD_DIM, HEAD_DIM},
             .out_strides = {N_Q * HEAD_DIM, N_Q * HEAD_DIM, HEAD_DIM}},
            {.x = k, .out = k_cache + pos * N_KV * HEAD_DIM, .n_heads = N_KV,
             .x_strides = {N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
             .out_strides = {MAX_SEQ * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}},
        };
        rope_angles angles = {.source = ROPE_POS_OFFSET, .offset = pos, .cos_table = cos_table,
                              .sin_table = sin_table, .table_start = 0, .table_rows = MAX_SEQ,
                              .inv_freq = inv_freq, .scale = 1.0};
        CHECK(rope_rotate(&op, tensors, 2, &angles));

        for (int h = 0; h < N_KV; h++) {
            print_vector('k', pos, h, "in", k + h * HEAD_DIM);
            print_vector('k', pos, h, "out", k_cache + (pos * N_KV + h) * HEAD_DIM);
        }
        for (int h = 0; h < N_Q; h++) {
            print_vector('q', pos, h, "in", q_in + h * HEAD_DIM);
            print_vector('q', pos, h, "out", q + h * HEAD_DIM);
        }
    }

    /* The last key again, angles on the fly from inv_freq (no table): the same bits. */
    int64_t last = PROMPT + STEPS - 1;
    float k_fly[N_KV * HEAD_DIM];
    rope_tensor key = {.x = k, .out = k_fly, .n_heads = N_KV,
                       .x_strides = {N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
                       .out_strides = {N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}};
    rope_angles fly = {.source = ROPE_POS_OFFSET, .offset = last, .inv_freq = inv_freq, .scale = 1.0};
    CHECK(rope_rotate(&op, &key, 1, &fly));
    int same = memcmp(k_fly, k_cache + last * N_KV * HEAD_DIM, sizeof k_fly) == 0;
    printf("on-the-fly angles give the table's bits: %s\n", same ? "yes" : "no");

    /* A bad call is refused with a status, before anything is written. */
    rope_angles past = {.source = ROPE_POS_OFFSET, .offset = MAX_SEQ, .cos_table = cos_table,
                        .sin_table = sin_table, .table_rows = MAX_SEQ, .scale = 1.0};
    int status = rope_rotate(&op, &key, 1, &past);
    printf("position %d with a %d-row table: %s\n", MAX_SEQ, MAX_SEQ, rope_strerror(status));

    free(cos_table);
    free(sin_table);
    free(k_cache);
    return same ? 0 : 1;
}
