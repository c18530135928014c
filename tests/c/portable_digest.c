/* Digest of the scalar kernels' outputs for fixed inputs (`make check-aarch64`).
 *
 * Tables (float32 position list and dense range, float64), rotations in
 * float32, float16 and bfloat16, both layouts, both directions, partial
 * rotary: each step's running FNV-1a digest is printed. The scalar kernels
 * use only IEEE operations with fixed roundings (no contraction, own
 * polynomials), so every platform must print the same lines; the target
 * compares this machine's output with an aarch64 build run under qemu.
 * Inputs are finite: IEEE leaves NaN signs and payloads to the platform. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include "pyrope.h"

static uint64_t h = 1469598103934665603ULL;
static void mark(const char *t) { printf("%s %016llx\n", t, (unsigned long long)h); }
static void mix(const void *p, size_t n) { const unsigned char *c = p; for (size_t i = 0; i < n; i++) { h ^= c[i]; h *= 1099511628211ULL; } }

int main(void) {
    rope_set_isa(ROPE_ISA_SCALAR);
    enum { P = 300, F = 64, D = 128, S = 40, H = 3 };
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
            if (rope_rotate(ROPE_F32, layout, inv, x, y, 1, S, H, D, D - 2 * layout * 5, (int64_t)S * H * D, H * D, D, (int64_t)S * H * D, H * D, D,
                            pos, 0, 1, 0, NULL, NULL, 0, 0, w, 1.0, 1)) return 4;
            mix(y, sizeof y); mark("f32rot");
            for (int dt = ROPE_F16; dt <= ROPE_BF16; dt++) {
                if (rope_rotate(dt, layout, inv, xh, yh, 1, S, H, D, D, (int64_t)S * H * D, H * D, D, (int64_t)S * H * D, H * D, D,
                                NULL, 0, 0, 77, NULL, NULL, 0, 0, w, 1.0, 1)) return 5;
                mix(yh, sizeof yh); mark(dt == ROPE_F16 ? "f16" : "bf16");
            }
        }
    printf("%016llx\n", (unsigned long long)h);
    return 0;
}
