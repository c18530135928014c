/* paged_write.c: pyrope's C API in the attention step of a Qwen3-like layer.
 *
 * Qwen3 normalises each head of q and k (RMSNorm with a learned weight, the
 * "QK-norm") right before the rotation, and keeps its keys and values in a
 * paged KV cache: blocks of BLOCK_SIZE slots, handed to the sequence out of
 * order and found through its block table. One rope_rotate_staged call per
 * forward step does all of it in one pass over the tokens:
 *   q  normalised and rotated in place (for attention);
 *   k  normalised, rotated and written into its cache slot;
 *   v  copied into its cache slot (copy = 1: never normalised nor rotated).
 * The first step is a prefill of PROMPT tokens, then STEPS decode steps of one
 * token each. cos/sin are computed on the fly from inv_freq (no table; a
 * table as in decode_loop.c gives the same bits).
 *
 * Build against the installed Python package and run (docs/examples/README.md):
 *   cc -std=c11 -O2 paged_write.c -o paged_write -lm $(PKG_CONFIG_PATH="$(python3 -c 'import pyrope; print(pyrope.get_library_path())')/pkgconfig" pkg-config --cflags --libs pyrope)
 *   ./paged_write
 *
 * Prints, floats as hex floats (%a, exact):
 *   inv_freq <HALF values>, eps <value>, q_norm|k_norm <HEAD_DIM weights>, unwritten <value>
 *   step <first position> <tokens>                  before each step's vectors
 *   slot <position> <slot>                          where the token's k and v went
 *   q <position> <head> in|out <HEAD_DIM values>    (out: normalised and rotated)
 *   k|v <position> <head> in <HEAD_DIM values>
 *   k_cache|v_cache <block> <row> <head> <HEAD_DIM values>   the whole caches, at the end
 * and last "refused: ..." (a call with a slot outside the cache, refused with
 * nothing written).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pyrope.h>

enum { HEAD_DIM = 128, HALF = HEAD_DIM / 2, N_Q = 4, N_KV = 2, BLOCK_SIZE = 4, N_BLOCKS = 6,
       N_SLOTS = N_BLOCKS * BLOCK_SIZE, PROMPT = 6, STEPS = 4, N_TOKENS = PROMPT + STEPS };
static const double BASE = 1000000.0; /* Qwen3's rope_theta */
static const double EPS = 1e-6;       /* Qwen3's rms_norm_eps */
/* What fills the cache before anything is written (and stays where nothing is). */
static const float UNWRITTEN = 99.0f;

/* The sequence's block table: its tokens [4i, 4i + 4) live in cache block
 * BLOCK_TABLE[i]. Blocks 0, 2 and 5 belong to other sequences. */
static const int64_t BLOCK_TABLE[] = {3, 1, 4};
_Static_assert(sizeof BLOCK_TABLE / sizeof BLOCK_TABLE[0] * BLOCK_SIZE >= N_TOKENS, "the block table is too short");

/* The paged caches, [N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM] ("NHD"), and a copy. */
static float k_cache[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM], v_cache[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM];
static float k_saved[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM], v_saved[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM];

/* Every call returns a status: stop with its message on the first failure. */
#define CHECK(call)                                                                  \
    do {                                                                             \
        int status_ = (call);                                                        \
        if (status_ != ROPE_OK) {                                                    \
            fprintf(stderr, "%s failed: %s\n", #call, rope_strerror(status_));       \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Stand-in for the model's projections (q = h Wq, ...): values in [-1, 1). */
static void fill(float *v, int n, uint32_t *state)
{
    for (int i = 0; i < n; i++) {
        *state ^= *state << 13, *state ^= *state >> 17, *state ^= *state << 5;
        v[i] = (float)(*state / 2147483648.0 - 1.0);
    }
}

/* The cache slot of the token at a position: block * BLOCK_SIZE + row. */
static int64_t slot_of(int64_t position)
{
    return BLOCK_TABLE[position / BLOCK_SIZE] * BLOCK_SIZE + position % BLOCK_SIZE;
}

static void print_floats(const float *v, int n)
{
    for (int i = 0; i < n; i++)
        printf(" %a", (double)v[i]);
    printf("\n");
}

static void print_doubles(const char *name, const double *v, int n)
{
    printf("%s", name);
    for (int i = 0; i < n; i++)
        printf(" %a", v[i]);
    printf("\n");
}

static void print_cache(const char *name, float cache[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM])
{
    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++) {
                printf("%s %d %d %d", name, b, r, h);
                print_floats(cache[b][r][h], HEAD_DIM);
            }
}

int main(void)
{
    /* The library loaded must have this header's ABI and be at least as new. */
    if (rope_abi_version() != ROPE_ABI_VERSION || rope_version() < ROPE_VERSION) {
        fprintf(stderr, "libpyrope %d (ABI %d) is older than this program's header %d (ABI %d)\n",
                rope_version(), rope_abi_version(), ROPE_VERSION, ROPE_ABI_VERSION);
        return 1;
    }

    /* The rope: split-half pairs (HF, Qwen3), theta_i = BASE^(-2i/HEAD_DIM). */
    double inv_freq[HALF];
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = pow(BASE, -2.0 * i / HEAD_DIM);
    print_doubles("inv_freq", inv_freq, HALF);
    printf("eps %a\n", EPS);

    /* The learned weights of q_norm and k_norm, [HEAD_DIM] each (shared by every
     * head): stand-ins near 1, multiples of 1/64 as a bfloat16 checkpoint holds them. */
    double q_weight[HEAD_DIM], k_weight[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; d++) {
        q_weight[d] = (48 + (d * 7) % 33) / 64.0;
        k_weight[d] = (40 + (d * 5) % 49) / 64.0;
    }
    print_doubles("q_norm", q_weight, HEAD_DIM);
    print_doubles("k_norm", k_weight, HEAD_DIM);

    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++)
                for (int d = 0; d < HEAD_DIM; d++)
                    k_cache[b][r][h][d] = v_cache[b][r][h][d] = UNWRITTEN;
    printf("unwritten %a\n", (double)UNWRITTEN);

    /* One step's tokens, [tokens][heads][HEAD_DIM] float32 (at most PROMPT tokens). */
    static float q[PROMPT][N_Q][HEAD_DIM], q_in[PROMPT][N_Q][HEAD_DIM];
    static float k[PROMPT][N_KV][HEAD_DIM], v[PROMPT][N_KV][HEAD_DIM];
    int64_t slots[PROMPT];
    uint32_t state = 2463534242u;

    for (int64_t first = 0, n = PROMPT; first < N_TOKENS; first += n, n = 1) {
        fill(&q[0][0][0], (int)n * N_Q * HEAD_DIM, &state);
        fill(&k[0][0][0], (int)n * N_KV * HEAD_DIM, &state);
        fill(&v[0][0][0], (int)n * N_KV * HEAD_DIM, &state);
        memcpy(q_in, q, sizeof q);
        for (int64_t t = 0; t < n; t++)
            slots[t] = slot_of(first + t);

        /* The tokens first .. first + n - 1 of one sequence: n_batch 1, n_seq n. */
        rope_op op = {.dtype = ROPE_F32, .layout = ROPE_SPLIT_HALF, .inverse = 0, .n_batch = 1, .n_seq = n,
                      .head_dim = HEAD_DIM, .rotary_dim = HEAD_DIM, .n_threads = 1};
        /* Strides in elements {batch, seq, head}; a slotted output's are
         * {block, row in block, head}: [N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM].
         * (An HND cache, [N_BLOCKS][N_KV][BLOCK_SIZE][HEAD_DIM], would be
         * {N_KV * BLOCK_SIZE * HEAD_DIM, HEAD_DIM, BLOCK_SIZE * HEAD_DIM}.) */
        rope_tensor tensors[3] = {
            {.x = q, .out = q, .n_heads = N_Q,
             .x_strides = {n * N_Q * HEAD_DIM, N_Q * HEAD_DIM, HEAD_DIM},
             .out_strides = {n * N_Q * HEAD_DIM, N_Q * HEAD_DIM, HEAD_DIM}},
            {.x = k, .out = k_cache, .n_heads = N_KV,
             .x_strides = {n * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
             .out_strides = {BLOCK_SIZE * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}},
            {.x = v, .out = v_cache, .n_heads = N_KV,
             .x_strides = {n * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
             .out_strides = {BLOCK_SIZE * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}},
        };
        /* Token s goes to slot slots[s] (slot_strides {batch, seq}); fields left
         * out are zero: rotate (copy = 0), store the op's float32 (convert = 0). */
        rope_stage stages[3] = {
            {.norm = ROPE_NORM_HEAD, .norm_weight = q_weight, .norm_eps = EPS},
            {.norm = ROPE_NORM_HEAD, .norm_weight = k_weight, .norm_eps = EPS,
             .slots = slots, .slot_strides = {n, 1}, .n_slots = N_SLOTS, .block_size = BLOCK_SIZE},
            {.copy = 1, .norm = ROPE_NORM_NONE,
             .slots = slots, .slot_strides = {n, 1}, .n_slots = N_SLOTS, .block_size = BLOCK_SIZE},
        };
        /* Positions first + s; a slot is a place, the position says the angle. */
        rope_angles angles = {.source = ROPE_POS_OFFSET, .offset = first, .inv_freq = inv_freq, .scale = 1.0};
        CHECK(rope_rotate_staged(&op, tensors, stages, 3, &angles));

        printf("step %lld %lld\n", (long long)first, (long long)n);
        for (int64_t t = 0; t < n; t++) {
            long long pos = (long long)(first + t);
            printf("slot %lld %lld\n", pos, (long long)slots[t]);
            for (int h = 0; h < N_Q; h++) {
                printf("q %lld %d in", pos, h);
                print_floats(q_in[t][h], HEAD_DIM);
                printf("q %lld %d out", pos, h);
                print_floats(q[t][h], HEAD_DIM);
            }
            for (int h = 0; h < N_KV; h++) {
                printf("k %lld %d in", pos, h);
                print_floats(k[t][h], HEAD_DIM);
                printf("v %lld %d in", pos, h);
                print_floats(v[t][h], HEAD_DIM);
            }
        }
    }
    print_cache("k_cache", k_cache);
    print_cache("v_cache", v_cache);

    /* A bad call is refused with a status, before anything is written: the
     * last token again, with the slot past the cache's end for its value. */
    memcpy(k_saved, k_cache, sizeof k_cache);
    memcpy(v_saved, v_cache, sizeof v_cache);
    int64_t good = slot_of(N_TOKENS - 1), bad = N_SLOTS;
    rope_op op = {.dtype = ROPE_F32, .layout = ROPE_SPLIT_HALF, .n_batch = 1, .n_seq = 1, .head_dim = HEAD_DIM,
                  .rotary_dim = HEAD_DIM, .n_threads = 1};
    rope_tensor kv[2] = {
        {.x = k, .out = k_cache, .n_heads = N_KV, .x_strides = {N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
         .out_strides = {BLOCK_SIZE * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}},
        {.x = v, .out = v_cache, .n_heads = N_KV, .x_strides = {N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
         .out_strides = {BLOCK_SIZE * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}},
    };
    rope_stage kv_stages[2] = {
        {.norm = ROPE_NORM_HEAD, .norm_weight = k_weight, .norm_eps = EPS,
         .slots = &good, .slot_strides = {1, 1}, .n_slots = N_SLOTS, .block_size = BLOCK_SIZE},
        {.copy = 1, .slots = &bad, .slot_strides = {1, 1}, .n_slots = N_SLOTS,
         .block_size = BLOCK_SIZE},
    };
    rope_angles last = {.source = ROPE_POS_OFFSET, .offset = N_TOKENS - 1, .inv_freq = inv_freq, .scale = 1.0};
    int status = rope_rotate_staged(&op, kv, kv_stages, 2, &last);
    int untouched = memcmp(k_saved, k_cache, sizeof k_cache) == 0 && memcmp(v_saved, v_cache, sizeof v_cache) == 0;
    printf("refused: slot %d of a %d-slot cache: %s; caches untouched: %s\n", N_SLOTS, N_SLOTS,
           rope_strerror(status), untouched ? "yes" : "no");
    return status == ROPE_E_SLOT && untouched ? 0 : 1;
}
