/* cos/sin tables: the scalar specification.
 *
 * Entry (m, w) is the float32 nearest to scale * cos(m*w) (and sin), where
 * the angle m*w is the exact product (never rounded to a double): tables
 * are correctly rounded, so every path and instruction set gives the same
 * bits. Three tiers, each keeping its result only when its error bound
 * decides the rounding (rope_certify_f32):
 *   1. dense ranges (positions == NULL): angle addition from two rows of
 *      tier 2, e^{i(s+aB+b)w} = e^{i(s+aB)w} e^{ibw}, a few flops per entry;
 *   2. direct: the angle in quarter turns, f = m*w*2/pi, with
 *      - per frequency, t = w*2/pi held as t0 + t1 + t2 (about 155 bits),
 *        built from a triple-double 2/pi with exact products (fma);
 *      - per entry, m*t0 = a + b and m*t1 = c + d exactly (m has at most
 *        31 bits, an exact double), the quadrant k = nearest integer to a,
 *        and f = (a - k) + b + c + d + m*t2 summed so that its error stays
 *        below 2^-52 |f| + 2^-150 |a|: relative accuracy even when m*w lies
 *        extremely close to a multiple of pi/2;
 *      - cos(pi/2 f), sin(pi/2 f) for |f| <= 1/2 + 2^-17 by Taylor
 *        polynomials (relative truncation error below 2^-44), the quadrant
 *        k mod 4, and the product with scale;
 *   3. the rare undecided entries (about 1 in 2^17): table_exact.c.
 * Only +, -, *, fma and the magic-constant rounding are used, in this order,
 * so the AVX2 kernel (table_avx2.c) reproduces the tiers lane for lane.
 * Error analysis: docs/ACCURACY.md. Callers keep |m| <= 2^31 - 1, |w| <= 4.
 */
#include <math.h>

#include "core/kernels.h"
#include "scalar.h"
#include "table_internal.h"

void rope_turns(double w, double *t0, double *t1, double *t2)
{
    const double p0 = w * ROPE_2_PI_0, e0 = fma(w, ROPE_2_PI_0, -p0);
    const double p1 = w * ROPE_2_PI_1, e1 = fma(w, ROPE_2_PI_1, -p1);
    const double p2 = w * ROPE_2_PI_2;
    /* two-sum: e0 + p1 = s + x exactly */
    const double s = e0 + p1;
    const double bb = s - e0;
    const double x = (e0 - (s - bb)) + (p1 - bb);
    *t0 = p0;
    *t1 = s;
    *t2 = x + (e1 + p2);
}

void rope_cos_sin_turns(double md, double t0, double t1, double t2,
                        double *cos_out, double *sin_out)
{
    const double a = md * t0, b = fma(md, t0, -a);  /* m*t0 = a + b */
    const double kk = a + ROPE_ROUND_MAGIC;         /* k = nearest integer to a */
    const double k = kk - ROPE_ROUND_MAGIC;
    const double u = a - k;                         /* exact, |u| <= 1/2 */
    const double c = md * t1, d = fma(md, t1, -c);  /* m*t1 = c + d */
    const double e = md * t2;
    /* two-sum: b + c = g + gl exactly (both can be 2^-18; they may cancel u) */
    const double g = b + c;
    const double gg = g - b;
    const double gl = (b - (g - gg)) + (c - gg);
    const double h = u + g;
    const double f = h + (gl + (d + e));            /* quarter turns, |f| <= 1/2 + 2^-17 */

    const double z = f * f;
    double ps = fma(z, ROPE_S13, ROPE_S11);
    ps = fma(z, ps, ROPE_S9);
    ps = fma(z, ps, ROPE_S7);
    ps = fma(z, ps, ROPE_S5);
    ps = fma(z, ps, ROPE_S3);
    ps = fma(z, ps, ROPE_S1);
    const double sn = f * ps;                       /* sin(pi/2 f) */
    double pc = fma(z, ROPE_C14, ROPE_C12);
    pc = fma(z, pc, ROPE_C10);
    pc = fma(z, pc, ROPE_C8);
    pc = fma(z, pc, ROPE_C6);
    pc = fma(z, pc, ROPE_C4);
    pc = fma(z, pc, ROPE_C2);
    const double cs = fma(z, pc, 1.0);              /* cos(pi/2 f) */

    rope_quadrant(kk, cs, sn, cos_out, sin_out);
}

void rope_entry_f32(int64_t m, double w, double t0, double t1, double t2, double scale,
                    float *cos_out, float *sin_out)
{
    double c, s;
    const double md = (double)m;
    rope_cos_sin_turns(md, t0, t1, t2, &c, &s);
    const double yc = scale * c, ys = scale * s;
    const double abs_err = fabs(scale * (md * t0)) * ROPE_DIRECT_ABS;
    if (!rope_certify_f32(yc, fabs(yc) * ROPE_DIRECT_REL + abs_err, cos_out) ||
        !rope_certify_f32(ys, fabs(ys) * ROPE_DIRECT_REL + abs_err, sin_out))
        rope_cos_sin_correct_f32(m, w, scale, cos_out, sin_out);
}

/* Dense range by angle addition: e^{i(s+aB+b)w} = e^{i(s+aB)w} * e^{ibw},
 * both rows from the fast direct evaluation (unrounded doubles). */
static void table_range(int64_t start, int64_t n_pos, const double *inv_freq,
                        int64_t n_freq, double scale, float *cos_out, float *sin_out)
{
    double t0[ROPE_RANGE_CHUNK], t1[ROPE_RANGE_CHUNK], t2[ROPE_RANGE_CHUNK];
    double bc[ROPE_RANGE_BLOCK][ROPE_RANGE_CHUNK], bs[ROPE_RANGE_BLOCK][ROPE_RANGE_CHUNK];
    double ac[ROPE_RANGE_CHUNK], as[ROPE_RANGE_CHUNK];
    const int64_t nb = n_pos < ROPE_RANGE_BLOCK ? n_pos : ROPE_RANGE_BLOCK;
    /* At least 2^-140, so that a zero is never certified by this tier. */
    const double bound = fmax(fabs(scale) * ROPE_RANGE_ABS, 0x1p-140);
    for (int64_t i0 = 0; i0 < n_freq; i0 += ROPE_RANGE_CHUNK) {
        const int64_t nf = n_freq - i0 < ROPE_RANGE_CHUNK ? n_freq - i0 : ROPE_RANGE_CHUNK;
        for (int64_t i = 0; i < nf; i++) {
            rope_turns(inv_freq[i0 + i], &t0[i], &t1[i], &t2[i]);
            for (int64_t b = 0; b < nb; b++)
                rope_cos_sin_turns((double)b, t0[i], t1[i], t2[i], &bc[b][i], &bs[b][i]);
        }
        for (int64_t a = 0; a < n_pos; a += ROPE_RANGE_BLOCK) {
            for (int64_t i = 0; i < nf; i++)
                rope_cos_sin_turns((double)(start + a), t0[i], t1[i], t2[i], &ac[i], &as[i]);
            for (int64_t b = 0; b < nb && a + b < n_pos; b++) {
                float *crow = cos_out + (a + b) * n_freq + i0;
                float *srow = sin_out + (a + b) * n_freq + i0;
                for (int64_t i = 0; i < nf; i++) {
                    const double c = fma(ac[i], bc[b][i], -(as[i] * bs[b][i]));
                    const double s = fma(as[i], bc[b][i], ac[i] * bs[b][i]);
                    const double yc = scale * c, ys = scale * s;
                    if (!rope_certify_f32(yc, bound, &crow[i]) ||
                        !rope_certify_f32(ys, bound, &srow[i]))
                        rope_entry_f32(start + a + b, inv_freq[i0 + i], t0[i], t1[i], t2[i],
                                       scale, &crow[i], &srow[i]);
                }
            }
        }
    }
}

void rope_table_f32_scalar(const int64_t *positions, int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out)
{
    if (!positions) {
        table_range(start, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
        return;
    }
    double t0[ROPE_TURNS_CHUNK], t1[ROPE_TURNS_CHUNK], t2[ROPE_TURNS_CHUNK];
    /* Frequencies in chunks: the quarter-turn split of each is made once. */
    for (int64_t i0 = 0; i0 < n_freq; i0 += ROPE_TURNS_CHUNK) {
        const int64_t nf = n_freq - i0 < ROPE_TURNS_CHUNK ? n_freq - i0 : ROPE_TURNS_CHUNK;
        for (int64_t i = 0; i < nf; i++)
            rope_turns(inv_freq[i0 + i], &t0[i], &t1[i], &t2[i]);
        for (int64_t p = 0; p < n_pos; p++) {
            const int64_t m = positions[p];
            float *crow = cos_out + p * n_freq + i0;
            float *srow = sin_out + p * n_freq + i0;
            for (int64_t i = 0; i < nf; i++)
                rope_entry_f32(m, inv_freq[i0 + i], t0[i], t1[i], t2[i], scale, &crow[i], &srow[i]);
        }
    }
}
