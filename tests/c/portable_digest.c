/* Digest of the scalar kernels' outputs for fixed inputs (`make check-aarch64`).
 *
 * Tables (float32 position list and dense range, float64), rotations in
 * float32, float16 and bfloat16, both layouts, both directions, partial
 * rotary; then sectioned positions (three components per token, as in
 * multimodal RoPE, with a contiguous and an interleaved pair-to-component
 * map) from tables and on the fly, in float32, bfloat16 and float64, q and
 * k in one call: each step's running FNV-1a digest is printed. The scalar
 * kernels use only IEEE operations with fixed roundings (no contraction, own
 * polynomials), so every platform must print the same lines; the target
 * compares this machine's output with an aarch64 build run under qemu.
 * Then every storage type of the list (ROPE_STORAGE_TYPES, whatever its
 * size), one line each ("type <name>"): values stored as the scalar kernels
 * store them (rope_st_<sfx>), both layouts and directions, partial rotary,
 * angles on the fly; the lines before them are those of the fixed cases.
 * Inputs are finite: IEEE leaves NaN signs and payloads to the platform. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include "pyrope.h"
#include "scalar/pair.h"

/* Value v rounded to storage type dtype (any of the list), as the scalar
 * kernels store it. */
#define STORE_(code, sfx, T, A, name) \
    case code: { T t; rope_st_##sfx(&t, (A)v); memcpy(p, &t, sizeof t); break; }
static void store_value(int dtype, unsigned char *p, double v) { switch (dtype) { ROPE_STORAGE_TYPES(STORE_) } }
#undef STORE_

static uint64_t h = 1469598103934665603ULL;
static void mark(const char *t) { printf("%s %016llx\n", t, (unsigned long long)h); }
static void mix(const void *p, size_t n) { const unsigned char *c = p; for (size_t i = 0; i < n; i++) { h ^= c[i]; h *= 1099511628211ULL; } }

enum { P = 300, F = 64, D = 128, S = 40, H = 3, KH = 2, C = 3 };

/* x -> y, [1][S][heads][D] contiguous. */
static rope_tensor tensor(const void *x, void *y, int64_t heads)
{
    rope_tensor t = {x, y, heads, {S * heads * D, heads * D, D}, {S * heads * D, heads * D, D}};
    return t;
}

int main(void) {
    if (rope_set_isa(0) != ROPE_OK) return 9; /* 0: the scalar specification */
    static double w[F]; static int64_t pos[P];
    static float c[P * F], s[P * F];
    for (int i = 0; i < F; i++) w[i] = pow(500000.0, -2.0 * i / D);
    for (int i = 0; i < P; i++) pos[i] = (int64_t)((i * 2654435761u) % 2147483647u) - (i % 7 == 0 ? 1000000 : 0);
    mix(w, sizeof w); mark("w");
    if (rope_cos_sin_f32(pos, P, w, F, 1.0, c, s)) return 1;
    mix(c, sizeof c); mix(s, sizeof s);
    mark("list");
    if (rope_cos_sin_range_f32(123456, P, w, F, 1.2079441541679836, c, s)) return 2;
    mix(c, sizeof c); mix(s, sizeof s);
    mark("range");
    static double cd[P * F], sd[P * F];
    if (rope_cos_sin_f64(pos, P, w, F, 1.0, cd, sd)) return 3;
    mix(cd, sizeof cd); mix(sd, sizeof sd);
    mark("f64");
    static float x[S * H * D], y[S * H * D];
    static uint16_t xh[S * H * D], yh[S * H * D];
    unsigned r = 1;
    for (int i = 0; i < S * H * D; i++) { r = r * 1103515245u + 12345u; x[i] = (float)(r >> 8) / 8388608.0f - 1.0f; xh[i] = (uint16_t)((r >> 9) & 0xBFFF); }
    for (int layout = 0; layout < 2; layout++)
        for (int inv = 0; inv < 2; inv++) {
            rope_op op = {ROPE_F32, layout, inv, 1, S, D, D - 2 * layout * 5, 1};
            rope_tensor t = tensor(x, y, H);
            rope_angles list = {.source = ROPE_POS_LIST, .positions = pos, .strides = {0, 1, 0},
                                .inv_freq = w, .scale = 1.0};
            if (rope_rotate(&op, &t, 1, &list)) return 4;
            mix(y, sizeof y); mark("f32rot");
            for (int dt = ROPE_F16; dt <= ROPE_BF16; dt++) {
                rope_op oph = {dt, layout, inv, 1, S, D, D, 1};
                rope_tensor th = tensor(xh, yh, H);
                rope_angles offset = {.source = ROPE_POS_OFFSET, .offset = 77, .inv_freq = w, .scale = 1.0};
                if (rope_rotate(&oph, &th, 1, &offset)) return 5;
                mix(yh, sizeof yh); mark(dt == ROPE_F16 ? "f16" : "bf16");
            }
        }

    /* Sectioned positions: C components per token, stored planar
     * ([C][S], as multimodal models keep them); a table over [0, P) for the
     * tabled calls, positions up to ~2^31 for the on-the-fly ones. */
    static int64_t spos[C * S], bigpos[C * S];
    for (int i = 0; i < C * S; i++) {
        spos[i] = (int64_t)((i * 40503u) % P);
        bigpos[i] = (int64_t)((i * 2246822519u) % 2147483647u) - (i % 5 == 0 ? 2147483000 : 0);
    }
    if (rope_cos_sin_range_f32(0, P, w, F, 1.0, c, s)) return 6;
    {
        static int64_t run[P];
        for (int i = 0; i < P; i++) run[i] = i;
        if (rope_cos_sin_f64(run, P, w, F, 1.0, cd, sd)) return 11;
    }
    uint8_t maps[2][F];
    for (int i = 0; i < F; i++) {
        maps[0][i] = (uint8_t)(i < 16 ? 0 : i < 40 ? 1 : 2); /* contiguous sections */
        maps[1][i] = (uint8_t)(i % C);                        /* interleaved */
    }
    static float xk[S * KH * D], yk[S * KH * D];
    static uint16_t xkh[S * KH * D], ykh[S * KH * D];
    static double xd[S * H * D], yd[S * H * D], xkd[S * KH * D], ykd[S * KH * D];
    for (int i = 0; i < S * KH * D; i++) { r = r * 1103515245u + 12345u; xk[i] = (float)(r >> 8) / 8388608.0f - 1.0f; xkh[i] = (uint16_t)((r >> 9) & 0xBFFF); xkd[i] = (double)xk[i] * (1.0 + 0x1p-40); }
    for (int i = 0; i < S * H * D; i++) xd[i] = (double)x[i] * (1.0 - 0x1p-40);
    for (int map = 0; map < 2; map++)
        for (int otf = 0; otf < 2; otf++)
            for (int layout = 0; layout < 2; layout++) {
                rope_angles a = {.source = ROPE_POS_SECTIONS, .positions = otf ? bigpos : spos,
                                 .strides = {0, 1, S}, .n_components = C, .pair_component = maps[map],
                                 .cos_table = otf ? NULL : c, .sin_table = otf ? NULL : s,
                                 .table_start = 0, .table_rows = P, .inv_freq = w, .scale = 0.75};
                rope_op op = {ROPE_F32, layout, layout, 1, S, D, D, 1};
                rope_tensor qk[2] = {tensor(x, y, H), tensor(xk, yk, KH)};
                if (rope_rotate(&op, qk, 2, &a)) return 7;
                mix(y, sizeof y); mix(yk, sizeof yk); mark(otf ? "sect_otf_f32" : "sect_tab_f32");
                op.dtype = ROPE_BF16;
                rope_tensor qkh[2] = {tensor(xh, yh, H), tensor(xkh, ykh, KH)};
                if (rope_rotate(&op, qkh, 2, &a)) return 8;
                mix(yh, sizeof yh); mix(ykh, sizeof ykh); mark(otf ? "sect_otf_bf16" : "sect_tab_bf16");
                op.dtype = ROPE_F64; /* float64 data reads float64 rows */
                if (!otf) {
                    a.cos_table = cd;
                    a.sin_table = sd;
                }
                rope_tensor qkd[2] = {tensor(xd, yd, H), tensor(xkd, ykd, KH)};
                if (rope_rotate(&op, qkd, 2, &a)) return 10;
                mix(yd, sizeof yd); mix(ykd, sizeof ykd); mark(otf ? "sect_otf_f64" : "sect_tab_f64");
            }
    printf("%016llx\n", (unsigned long long)h);

    /* Every storage type of the list. */
    static unsigned char xb[S * H * D * 8], yb[S * H * D * 8];
    for (int dt = 0; dt < rope_dtype_count(); dt++) {
        const int es = rope_dtype_size(dt);
        if (es > 8) return 12;
        for (int i = 0; i < S * H * D; i++) { r = r * 1103515245u + 12345u; store_value(dt, xb + i * es, (double)(r >> 8) / 8388608.0 - 1.0); }
        for (int layout = 0; layout < 2; layout++)
            for (int inv = 0; inv < 2; inv++) {
                rope_op op = {dt, layout, inv, 1, S, D, D - 2 * layout * 5, 1};
                rope_tensor t = tensor(xb, yb, H);
                rope_angles offset = {.source = ROPE_POS_OFFSET, .offset = 1000 + 77 * inv, .inv_freq = w, .scale = 1.25};
                if (rope_rotate(&op, &t, 1, &offset)) return 13;
                mix(yb, (size_t)S * H * D * es);
            }
        printf("type %s %016llx\n", rope_dtype_name(dt), (unsigned long long)h);
    }
    return 0;
}
