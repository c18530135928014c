/* float64 cos/sin tables (scalar): entry (m, w) within about 1.5 ulp of
 * float64 of scale * cos(m*w), sin(m*w), the product m*w taken exactly.
 *
 * The reduction is table.c's (rope_turns and the same exact products), but
 * the quarter turns f are kept as a double-double (relative error about
 * 2^-104 while |f| > 2^-18, and absolute below 2^-121 anyway), and the angle
 * x = pi/2 f is formed in double-double too. sin and cos of xh + xl use the
 * classic kernels (leading term exact, correction for xl, Taylor polynomials
 * to degree 17 and 18: truncation below 2^-62 for |x| <= pi/4 + 2^-16), each
 * within about 0.8 ulp; the product by scale adds half an ulp.
 */
#include <math.h>

#include "pyrope.h"
#include "core/kernels.h"
#include "core/checks.h"
#include "scalar.h"
#include "table_internal.h"

static const double PIO2_H = 0x1.921fb54442d18p+0, PIO2_L = 0x1.1a62633145c07p-54;
/* (-1)^j / (2j+1)! and (-1)^j / (2j)!, rounded to double. */
static const double S3 = -0x1.5555555555555p-3, S5 = 0x1.1111111111111p-7,
                    S7 = -0x1.a01a01a01a01ap-13, S9 = 0x1.71de3a556c734p-19,
                    S11 = -0x1.ae64567f544e4p-26, S13 = 0x1.6124613a86d09p-33,
                    S15 = -0x1.ae7f3e733b81fp-41, S17 = 0x1.952c77030ad4ap-49;
static const double C4 = 0x1.5555555555555p-5, C6 = -0x1.6c16c16c16c17p-10,
                    C8 = 0x1.a01a01a01a01ap-16, C10 = -0x1.27e4fb7789f5cp-22,
                    C12 = 0x1.1eed8eff8d898p-29, C14 = -0x1.93974a8c07c9dp-37,
                    C16 = 0x1.ae7f3e733b81fp-45, C18 = -0x1.6827863b97d97p-53;

/* sin(x + y) for |x| <= pi/4, |y| <= ulp(x). */
static double kernel_sin(double x, double y)
{
    const double z = x * x, v = z * x;
    const double r = S5 + z * (S7 + z * (S9 + z * (S11 + z * (S13 + z * (S15 + z * S17)))));
    return x - ((z * (0.5 * y - v * r) - y) - v * S3);
}

/* cos(x + y) for |x| <= pi/4, |y| <= ulp(x). */
static double kernel_cos(double x, double y)
{
    const double z = x * x;
    const double r = z * (C4 + z * (C6 + z * (C8 + z * (C10 + z * (C12 + z * (C14 + z * (C16 + z * C18)))))));
    const double hz = 0.5 * z, w = 1.0 - hz;
    return w + (((1.0 - w) - hz) + (z * r - x * y));
}

static inline void two_sum(double a, double b, double *s, double *e)
{
    const double t = a + b, bb = t - a;
    *e = (a - (t - bb)) + (b - bb);
    *s = t;
}

/* cos and sin of m * w from the split of w (rope_turns). */
static void cos_sin_f64(double md, double t0, double t1, double t2, double *cos_out, double *sin_out)
{
    const double a = md * t0, b = fma(md, t0, -a);
    const double kk = a + ROPE_ROUND_MAGIC;
    const double u = a - (kk - ROPE_ROUND_MAGIC);
    const double c = md * t1, d = fma(md, t1, -c);
    const double e = md * t2;
    double g, gl, h, hl, fh, fl;
    two_sum(b, c, &g, &gl);
    two_sum(u, g, &h, &hl);                         /* exact */
    two_sum(h, hl + (gl + (d + e)), &fh, &fl);      /* quarter turns fh + fl */
    const double xh = PIO2_H * fh;
    const double xl = fma(PIO2_H, fh, -xh) + (PIO2_L * fh + PIO2_H * fl);
    double x, y;
    two_sum(xh, xl, &x, &y);                        /* pi/2 f = x + y */
    const double sn = kernel_sin(x, y), cs = kernel_cos(x, y);
    rope_quadrant(kk, cs, sn, cos_out, sin_out);
}

/* Rows for positions[p] (or start + p when positions is NULL): the float64
 * row builder of every instruction set (kernels.h), arguments checked. */
void rope_table_f64_scalar(const int64_t *positions, int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           double *cos_out, double *sin_out)
{
    double t0[ROPE_TURNS_CHUNK], t1[ROPE_TURNS_CHUNK], t2[ROPE_TURNS_CHUNK];
    for (int64_t i0 = 0; i0 < n_freq; i0 += ROPE_TURNS_CHUNK) {
        const int64_t nf = n_freq - i0 < ROPE_TURNS_CHUNK ? n_freq - i0 : ROPE_TURNS_CHUNK;
        for (int64_t i = 0; i < nf; i++)
            rope_turns(inv_freq[i0 + i], &t0[i], &t1[i], &t2[i]);
        for (int64_t p = 0; p < n_pos; p++) {
            const double md = (double)(positions ? positions[p] : start + p);
            double *crow = cos_out + p * n_freq + i0, *srow = sin_out + p * n_freq + i0;
            for (int64_t i = 0; i < nf; i++) {
                double c, s;
                cos_sin_f64(md, t0[i], t1[i], t2[i], &c, &s);
                crow[i] = scale * c;
                srow[i] = scale * s;
            }
        }
    }
}

int rope_cos_sin_f64(const int64_t *positions, int64_t n_pos,
                     const double *inv_freq, int64_t n_freq, double scale,
                     double *cos_out, double *sin_out)
{
    int st = rope_check_table_args(n_pos, inv_freq, n_freq, scale, (const float *)cos_out,
                                   (const float *)sin_out);
    if (st != ROPE_OK || n_pos == 0 || n_freq == 0)
        return st;
    if (!positions)
        return ROPE_E_NULL;
    if (!rope_aligned(positions, 8) || !rope_aligned(cos_out, 8) || !rope_aligned(sin_out, 8))
        return ROPE_E_ALIGN;
    st = rope_check_table_apart(positions, n_pos, inv_freq, n_freq, cos_out, sin_out, sizeof(double));
    if (st != ROPE_OK)
        return st;
    for (int64_t p = 0; p < n_pos; p++)
        if (!rope_position_ok(positions[p]))
            return ROPE_E_POSITION;
    rope_table_f64_scalar(positions, 0, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
    return ROPE_OK;
}
