/* Core cycles per element of each stage and quantiser kernel of the fused
 * calls (rope_rotate_staged, rope_rotate_quantised), called directly on
 * one head held in L1, as stage_token (csrc/api/api_stage.c) calls them:
 * what docs/ARCHITECTURE.md sets beside each kernel's instruction floor.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc \
 *      tests/c/stage_cycles.c $(find csrc -name '*.c') -lm -o build/stage_cycles
 *   build/stage_cycles [isas=all] [head_dim=128] [repetitions=21]
 *
 * Per storage type: sumsq (a head's sum of squares), normalise with and
 * without weights (into the row of the arithmetic type), widen, narrow
 * (from the row: float for the float arithmetic types, double for
 * float64); for the float types the norm path of a head with weights as
 * three kernels (normalise, the rotation of the row, narrow) and, where
 * the instruction set has it, in one pass (norm_rot), split half and
 * interleaved ("il", norm_rot given the row duplicated); per
 * quantised kind: quantise from and dequantise into a float row. The
 * clock is timing.h's core_hz, taken right before each contender's warm-up
 * (as in kernel_cycles.c); every repetition times each contender in turn,
 * the order rotated, after about 10 ms of warm-up (0.5 ms between
 * repetitions); printed: the medians of cycles per element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels.h"
#include "scalar/convert.h"
#include "timing.h"

enum { MAX_DIM = 1024, MAX_REPS = 101, MAX_CONTENDERS = 256 };
enum { SUMSQ, NORM_W, NORM, WIDEN, NARROW, COMPOSED, NORM_ROT, COMPOSED_IL, NORM_ROT_IL, QUANT, DEQUANT, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"sumsq", "normalise+w", "normalise", "widen", "narrow",
                                                "norm+rot+narrow", "norm_rot", "norm+rot+narrow il",
                                                "norm_rot il", "quantise", "dequantise"};
static const char *const QUANT_NAMES[ROPE_N_QUANTS] = {"", "int8", "float8_e4m3", "q8_0"};

typedef struct {
    int isa, kind, type; /* type: a storage type, or a quantised kind for QUANT and DEQUANT */
    double cycles[MAX_REPS];
} contender;

/* The data: one head of the storage type, its row, weights, and its
 * quantised bytes: values of about unit size in every type (no subnormal:
 * those would time the CPU's slow path for them, not the kernel). */
enum { REGION = 3 * 4096 }; /* a region per array, each placed a different 640 bytes past a page: a
                             * load would otherwise wait on an unrelated store 4 KiB away */
static _Alignas(4096) unsigned char g_pool[6 * REGION];
#define g_x (g_pool)
#define g_q (g_pool + REGION + 640)
#define g_row ((double *)(void *)(g_pool + 2 * REGION + 1280))
#define g_w ((double *)(void *)(g_pool + 3 * REGION + 1920))
#define g_cos ((float *)(void *)(g_pool + 4 * REGION + 2560))
#define g_sin ((float *)(void *)(g_pool + 5 * REGION + 3200))

/* x as storage type dtype (quantisers: float32 rows), the float row, the
 * weights and a table row of n / 2 entries. */
static void fill(int64_t n, int dtype)
{
    float *rowf = (float *)g_row;
    for (int64_t i = 0; i < n; i++) {
        const double v = 0.25 + fabs(sin(0.7 * (double)i)) * (i % 2 ? -2.0 : 2.0);
        switch (dtype) {
        case ROPE_F16: ((uint16_t *)g_x)[i] = rope_f32_to_f16((float)v); break;
        case ROPE_BF16: ((uint16_t *)g_x)[i] = rope_f32_to_bf16((float)v); break;
        case ROPE_F64: ((double *)g_x)[i] = v; break;
        default: ((float *)g_x)[i] = (float)v; break;
        }
        g_w[i] = 1.0 + 0.01 * (double)(i % 7);
        rowf[i] = (float)v;
    }
    for (int64_t i = 0; i < n; i++) { /* split half reads the first n / 2 */
        g_cos[i] = (float)cos(0.3 + (double)(i / 2) / (double)n);
        g_sin[i] = (float)sin(0.3 + (double)(i / 2) / (double)n);
    }
}

/* One call of contender c's kernel on the head of n elements. */
static void call(const contender *c, int64_t n)
{
    const rope_kernels *k = rope_isa_kernels(c->isa);
    double acc[8] = {0};
    float scale = 0.05f;
    switch (c->kind) {
    case SUMSQ:
        k->sumsq[c->type](g_x, n, acc);
        __asm__ volatile("" : : "r"(acc) : "memory");
        break;
    case NORM_W:
        k->normalise[c->type](g_x, n, 0.9, g_w, g_row);
        break;
    case NORM:
        k->normalise[c->type](g_x, n, 0.9, NULL, g_row);
        break;
    case WIDEN:
        k->widen[c->type](g_x, n, g_row);
        break;
    case NARROW:
        (ROPE_WIDE_ROWS[c->type] ? k->narrow_double : k->narrow_float)[c->type](g_row, n, g_x);
        break;
    case COMPOSED: /* what stage_token does per head without norm_rot, with weights */
    case COMPOSED_IL: {
        const int layout = c->kind == COMPOSED ? ROPE_SPLIT_HALF : ROPE_INTERLEAVED;
        k->normalise[c->type](g_x, n, 0.9, g_w, g_row);
        k->rot[ROPE_F32][layout](g_row, g_row, 0, 0, 1, g_cos, g_sin, n / 2, 0);
        k->narrow_float[c->type](g_row, n, g_q);
        break;
    }
    case NORM_ROT:
    case NORM_ROT_IL:
        k->norm_rot[c->type][c->type][c->kind == NORM_ROT ? ROPE_SPLIT_HALF : ROPE_INTERLEAVED](
            g_x, n, 0.9, g_w, g_cos, g_sin, 0, g_q);
        break;
    case QUANT:
        k->quantise[c->type]((const float *)g_row, n, g_q, &scale);
        break;
    case DEQUANT:
        k->dequantise[c->type](g_q, n, scale, (float *)g_row);
        break;
    }
}

int main(int argc, char **argv)
{
    const char *isas = argc > 1 ? argv[1] : "all";
    const int64_t n = argc > 2 ? atoll(argv[2]) : 128;
    int reps = argc > 3 ? atoi(argv[3]) : 21;
    if (n < 32 || n > MAX_DIM || n % 32 || reps < 1) {
        fprintf(stderr, "usage: %s [isas=all] [head_dim=128, a multiple of 32 up to %d] [repetitions=21]\n",
                argv[0], MAX_DIM);
        return 2;
    }
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    static contender cs[MAX_CONTENDERS];
    int nc = 0;
    for (int isa = 0; isa < rope_isa_count(); isa++) {
        if (!isa_listed(isas, isa) || !rope_isa_supported(isa))
            continue;
        for (int kind = 0; kind < N_KINDS; kind++) {
            const int quant = kind == QUANT || kind == DEQUANT;
            for (int t = quant ? 1 : 0; t < (quant ? ROPE_N_QUANTS : ROPE_N_DTYPES); t++)
                if (nc < MAX_CONTENDERS &&
                    !((kind == COMPOSED || kind == NORM_ROT || kind == COMPOSED_IL || kind == NORM_ROT_IL) &&
                      ROPE_WIDE_ROWS[t]) &&
                    !(kind == NORM_ROT && !rope_isa_kernels(isa)->norm_rot[t][t][ROPE_SPLIT_HALF]) &&
                    !(kind == NORM_ROT_IL && !rope_isa_kernels(isa)->norm_rot[t][t][ROPE_INTERLEAVED]))
                    cs[nc++] = (contender){isa, kind, t, {0}};
        }
    }
    if (nc == 0) {
        fprintf(stderr, "no supported instruction set named %s\n", isas);
        return 2;
    }
    const int64_t calls = 20000 / n + 1; /* about 10 us of work a sample */
    printf("one head of %lld elements, in L1; %d repetitions of %lld calls\n", (long long)n, reps,
           (long long)calls);
    for (int r = -1; r < reps; r++)
        for (int i = 0; i < nc; i++) {
            contender *c = &cs[(i + (r < 0 ? 0 : r)) % nc];
            fill(n, c->kind == QUANT || c->kind == DEQUANT ? ROPE_F32 : c->type);
            /* a quantised head to dequantise, as the cache holds it */
            const rope_kernels *k = rope_isa_kernels(0);
            if (c->kind == DEQUANT) {
                float s = 0.05f;
                k->quantise[c->type]((const float *)g_row, n, g_q, &s);
            }
            const double hz = core_hz();
            const double warm_until = now_us() + (r < 0 ? 10000 : 500);
            while (now_us() < warm_until)
                call(c, n);
            const double t0 = now_us();
            for (int64_t j = 0; j < calls; j++)
                call(c, n);
            const double t = (now_us() - t0) * 1e-6;
            if (r >= 0)
                c->cycles[r] = t * hz / (double)(calls * n);
        }
    for (int i = 0; i < nc; i++) {
        const contender *c = &cs[i];
        const int quant = c->kind == QUANT || c->kind == DEQUANT;
        printf("%-11s %-12s %-12s %.3f cycles/element\n", rope_isa_name(c->isa), KIND_NAMES[c->kind],
               quant ? QUANT_NAMES[c->type] : rope_dtype_name(c->type), median(cs[i].cycles, reps));
    }
    return 0;
}
