/* quant_shift.c: pyrope's C API over the quantised KV cache of a llama.cpp-like layer.
 *
 * llama.cpp can keep its keys as ggml q8_0 blocks (--cache-type-k q8_0: per
 * 32 values a float16 scale d and 32 int8); the values here are int8 with a
 * float32 scale per (slot, head). The cache is paged: blocks of BLOCK_SIZE slots, handed to the sequence out of
 * order and found through its block table. One rope_rotate_quantised call
 * per forward step writes both:
 *   k  rotated and quantised into its slot as q8_0 (ROPE_QUANT_Q8_0);
 *   v  copied (copy = 1: never rotated) and quantised as int8, its scale
 *      written to v_scale (ROPE_QUANT_INT8).
 * The first step is a prefill of PROMPT tokens, then STEPS decode steps of
 * one token each. Then a context shift: the first DROP tokens are dropped
 * (their slots are free again) and every other key moves from its position
 * p to p - DROP, where it stays in its slot: one rope_rotate_quantised call
 * with in_place = 1 reads each key from its slot (x is not read),
 * dequantises it, rotates it by the position difference -DROP and
 * quantises it back (llama.cpp's K-shift). cos/sin are computed on the fly
 * from inv_freq (no table).
 *
 * Build against the installed Python package and run (docs/examples/README.md):
 *   cc -std=c11 -O2 quant_shift.c -o quant_shift -lm $(PKG_CONFIG_PATH="$(python3 -c 'import pyrope; print(pyrope.get_library_path())')/pkgconfig" pkg-config --cflags --libs pyrope)
 *   ./quant_shift
 *
 * Prints, floats as hex floats (%a, exact), bytes as hex digits (two per byte,
 * in memory order):
 *   inv_freq <HALF values>
 *   unwritten <byte> <scale>               what fills the caches (every byte) and v_scale at the start
 *   step <first position> <tokens>         before each step's vectors
 *   slot <position> <slot>                 where the token's k and v went
 *   k|v <position> <head> in <HEAD_DIM values>
 *   shift <dropped> <moved>                the context shift, then for each moved key:
 *   move <slot> <from position> <to position>
 *   k_cache <block> <row> <head> <K_BYTES bytes>       the whole caches, after the shift
 *   v_cache <block> <row> <head> <HEAD_DIM bytes>
 *   v_scale <block> <row> <head> <scale>
 * and last two "refused: ..." lines (a shift with a slot outside the cache,
 * and in_place without slots: each refused with nothing written).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pyrope.h>

enum { HEAD_DIM = 128, HALF = HEAD_DIM / 2, N_KV = 2, BLOCK_SIZE = 4, N_BLOCKS = 6,
       N_SLOTS = N_BLOCKS * BLOCK_SIZE, PROMPT = 7, STEPS = 3, N_TOKENS = PROMPT + STEPS, DROP = 4,
       /* a key head: HEAD_DIM / 32 q8_0 blocks of ROPE_Q8_0_BYTES bytes, back to back */
       K_BLOCKS = HEAD_DIM / ROPE_Q8_0_VALUES, K_BYTES = K_BLOCKS * ROPE_Q8_0_BYTES };
static const double BASE = 10000.0; /* LLaMA's rope_theta */
/* What fills the caches (every byte) and the value scales before anything is
 * written, and stays where nothing is. */
enum { UNWRITTEN_BYTE = 0xa5 };
static const float UNWRITTEN_SCALE = 99.0f;

/* The sequence's block table: its tokens [4i, 4i + 4) live in cache block
 * BLOCK_TABLE[i]. Blocks 0, 2 and 3 belong to other sequences. */
static const int64_t BLOCK_TABLE[] = {4, 1, 5};
_Static_assert(sizeof BLOCK_TABLE / sizeof BLOCK_TABLE[0] * BLOCK_SIZE >= N_TOKENS, "the block table is too short");
_Static_assert(0 < DROP && DROP < N_TOKENS, "the shift drops some tokens and keeps some");

/* The paged caches ("NHD": [N_BLOCKS][BLOCK_SIZE][N_KV][...]): q8_0 keys as
 * bytes, int8 values with a float32 scale per slot and head; and copies. */
static unsigned char k_cache[N_BLOCKS][BLOCK_SIZE][N_KV][K_BYTES], k_saved[N_BLOCKS][BLOCK_SIZE][N_KV][K_BYTES];
static int8_t v_cache[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM], v_saved[N_BLOCKS][BLOCK_SIZE][N_KV][HEAD_DIM];
static float v_scale[N_BLOCKS][BLOCK_SIZE][N_KV], v_scale_saved[N_BLOCKS][BLOCK_SIZE][N_KV];

/* out_strides of a slotted output are {block, slot in the block, head}, in
 * the elements the cache holds: q8_0 blocks for k, int8 for v; v_scale's
 * scale_strides count floats. */
#define K_STRIDES {BLOCK_SIZE * N_KV * K_BLOCKS, N_KV * K_BLOCKS, K_BLOCKS}
#define V_STRIDES {BLOCK_SIZE * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM}
#define SCALE_STRIDES {BLOCK_SIZE * N_KV, N_KV, 1}

/* Every call returns a status: stop with its message on the first failure. */
#define CHECK(call)                                                                  \
    do {                                                                             \
        int status_ = (call);                                                        \
        if (status_ != ROPE_OK) {                                                    \
            fprintf(stderr, "%s failed: %s\n", #call, rope_strerror(status_));       \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Stand-in for the model's projections (k = h Wk, ...): values in [-1, 1). */
static void fill(float *v, int n, uint32_t *state)
{
    for (int i = 0; i < n; i++) {
        *state ^= *state << 13, *state ^= *state >> 17, *state ^= *state << 5;
        v[i] = (float)(*state / 2147483648.0 - 1.0);
    }
}

/* The cache slot of the token at a position: block * BLOCK_SIZE + row. A slot
 * is a place; it stays the token's when the shift changes its position. */
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

static void print_bytes(const void *p, int n)
{
    const unsigned char *b = (const unsigned char *)p;
    printf(" ");
    for (int i = 0; i < n; i++)
        printf("%02x", b[i]);
    printf("\n");
}

static void save_caches(void)
{
    memcpy(k_saved, k_cache, sizeof k_cache);
    memcpy(v_saved, v_cache, sizeof v_cache);
    memcpy(v_scale_saved, v_scale, sizeof v_scale);
}

static int caches_untouched(void)
{
    return memcmp(k_saved, k_cache, sizeof k_cache) == 0 && memcmp(v_saved, v_cache, sizeof v_cache) == 0 &&
           memcmp(v_scale_saved, v_scale, sizeof v_scale) == 0;
}

int main(void)
{
    /* The library loaded must have this header's ABI and be at least as new. */
    if (rope_abi_version() != ROPE_ABI_VERSION || rope_version() < ROPE_VERSION) {
        fprintf(stderr, "libpyrope %d (ABI %d) is older than this program's header %d (ABI %d)\n",
                rope_version(), rope_abi_version(), ROPE_VERSION, ROPE_ABI_VERSION);
        return 1;
    }

    /* The rope: adjacent pairs (llama.cpp's "normal" rope; GGUF's LLaMA
     * weights are permuted for it), theta_i = BASE^(-2i/HEAD_DIM). */
    double inv_freq[HALF];
    printf("inv_freq");
    for (int i = 0; i < HALF; i++) {
        inv_freq[i] = pow(BASE, -2.0 * i / HEAD_DIM);
        printf(" %a", inv_freq[i]);
    }
    printf("\n");

    memset(k_cache, UNWRITTEN_BYTE, sizeof k_cache);
    memset(v_cache, UNWRITTEN_BYTE, sizeof v_cache);
    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++)
                v_scale[b][r][h] = UNWRITTEN_SCALE;
    printf("unwritten %02x %a\n", (unsigned)UNWRITTEN_BYTE, (double)UNWRITTEN_SCALE);

    /* One step's tokens, [tokens][heads][HEAD_DIM] float32 (at most PROMPT tokens). */
    static float k[PROMPT][N_KV][HEAD_DIM], v[PROMPT][N_KV][HEAD_DIM];
    int64_t slots[PROMPT];
    uint32_t state = 2463534242u;

    for (int64_t first = 0, n = PROMPT; first < N_TOKENS; first += n, n = 1) {
        fill(&k[0][0][0], (int)n * N_KV * HEAD_DIM, &state);
        fill(&v[0][0][0], (int)n * N_KV * HEAD_DIM, &state);
        for (int64_t t = 0; t < n; t++)
            slots[t] = slot_of(first + t);

        /* The tokens first .. first + n - 1 of one sequence: n_batch 1, n_seq n.
         * The op's dtype is the inputs' (float32; float16 and bfloat16 too):
         * a quantised store rounds the float32 value once. */
        rope_op op = {.dtype = ROPE_F32, .layout = ROPE_INTERLEAVED, .n_batch = 1, .n_seq = n,
                      .head_dim = HEAD_DIM, .rotary_dim = HEAD_DIM, .n_threads = 1};
        rope_tensor tensors[2] = {
            {.x = k, .out = k_cache, .n_heads = N_KV, .x_strides = {n * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
             .out_strides = K_STRIDES},
            {.x = v, .out = v_cache, .n_heads = N_KV, .x_strides = {n * N_KV * HEAD_DIM, N_KV * HEAD_DIM, HEAD_DIM},
             .out_strides = V_STRIDES},
        };
        /* Token s goes to slot slots[s] (slot_strides {batch, seq}). */
        rope_stage stages[2] = {
            {.slots = slots, .slot_strides = {n, 1}, .n_slots = N_SLOTS, .block_size = BLOCK_SIZE},
            {.copy = 1, .slots = slots, .slot_strides = {n, 1}, .n_slots = N_SLOTS, .block_size = BLOCK_SIZE},
        };
        /* k as q8_0 (its scales inside its blocks), v as int8 with each
         * head's scale at v_scale[block][row][head]. */
        rope_quant quants[2] = {
            {.kind = ROPE_QUANT_Q8_0},
            {.kind = ROPE_QUANT_INT8, .scales = &v_scale[0][0][0], .scale_strides = SCALE_STRIDES},
        };
        /* Positions first + s; attention factor 1 (scale). */
        rope_angles angles = {.source = ROPE_POS_OFFSET, .offset = first, .inv_freq = inv_freq, .scale = 1.0};
        CHECK(rope_rotate_quantised(&op, tensors, stages, quants, 2, &angles));

        printf("step %lld %lld\n", (long long)first, (long long)n);
        for (int64_t t = 0; t < n; t++) {
            long long pos = (long long)(first + t);
            printf("slot %lld %lld\n", pos, (long long)slots[t]);
            for (int h = 0; h < N_KV; h++) {
                printf("k %lld %d in", pos, h);
                print_floats(k[t][h], HEAD_DIM);
                printf("v %lld %d in", pos, h);
                print_floats(v[t][h], HEAD_DIM);
            }
        }
    }

    /* The context shift: positions 0 .. DROP - 1 are dropped, the keys at
     * DROP .. N_TOKENS - 1 move to 0 .. N_TOKENS - 1 - DROP in their slots.
     * Each token's position is the difference new - old: a key rotated at
     * p, then by -DROP, is the key rotated at p - DROP. The angles'
     * scale is 1 whatever the layer's attention factor: the stored key
     * carries that factor already. Values do not move. */
    enum { MOVED = N_TOKENS - DROP };
    int64_t shift_slots[MOVED], delta[MOVED];
    for (int64_t t = 0; t < MOVED; t++) {
        shift_slots[t] = slot_of(DROP + t);
        delta[t] = t - (DROP + t);   /* to - from */
    }
    rope_op shift_op = {.dtype = ROPE_F32, .layout = ROPE_INTERLEAVED, .n_batch = 1, .n_seq = MOVED,
                        .head_dim = HEAD_DIM, .rotary_dim = HEAD_DIM, .n_threads = 1};
    /* in_place: x is not read, each key is read from its slot of out. */
    rope_tensor keys = {.x = NULL, .out = k_cache, .n_heads = N_KV, .out_strides = K_STRIDES};
    rope_stage at_slots = {.slots = shift_slots, .slot_strides = {MOVED, 1}, .n_slots = N_SLOTS,
                           .block_size = BLOCK_SIZE};
    rope_quant requantised = {.kind = ROPE_QUANT_Q8_0, .in_place = 1};
    rope_angles by_delta = {.source = ROPE_POS_LIST, .positions = delta, .strides = {MOVED, 1},
                            .inv_freq = inv_freq, .scale = 1.0};
    CHECK(rope_rotate_quantised(&shift_op, &keys, &at_slots, &requantised, 1, &by_delta));
    printf("shift %d %d\n", DROP, MOVED);
    for (int64_t t = 0; t < MOVED; t++)
        printf("move %lld %lld %lld\n", (long long)shift_slots[t], (long long)(DROP + t), (long long)t);

    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++) {
                printf("k_cache %d %d %d", b, r, h);
                print_bytes(k_cache[b][r][h], K_BYTES);
            }
    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++) {
                printf("v_cache %d %d %d", b, r, h);
                print_bytes(v_cache[b][r][h], HEAD_DIM);
            }
    for (int b = 0; b < N_BLOCKS; b++)
        for (int r = 0; r < BLOCK_SIZE; r++)
            for (int h = 0; h < N_KV; h++)
                printf("v_scale %d %d %d %a\n", b, r, h, (double)v_scale[b][r][h]);

    /* Bad calls are refused with a status, before anything is written: the
     * shift again, its last slot past the cache's end (the keys before it
     * are not moved either); and in_place without slots (a key is read
     * from its slot: without slots there is none). */
    save_caches();
    shift_slots[MOVED - 1] = N_SLOTS;
    int status = rope_rotate_quantised(&shift_op, &keys, &at_slots, &requantised, 1, &by_delta);
    int untouched = caches_untouched();
    printf("refused: shift to slot %d of a %d-slot cache: %s; caches untouched: %s\n", N_SLOTS, N_SLOTS,
           rope_strerror(status), untouched ? "yes" : "no");
    int ok = status == ROPE_E_SLOT && untouched;

    rope_stage no_slots = {0};
    status = rope_rotate_quantised(&shift_op, &keys, &no_slots, &requantised, 1, &by_delta);
    untouched = caches_untouched();
    printf("refused: in_place without slots: %s; caches untouched: %s\n", rope_strerror(status),
           untouched ? "yes" : "no");
    return ok && status == ROPE_E_STAGE && untouched ? 0 : 1;
}
