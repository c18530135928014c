/* cos/sin tables: the scalar specification.
 *
 * Entry (m, w) is scale * cos(m*w) and scale * sin(m*w), rounded once to
 * float32. The angle is never rounded before reduction:
 *   1. m*w = hi + lo exactly (hi = m*w rounded, lo = fma(m, w, -hi)),
 *      since m has at most 32 significant bits;
 *   2. k = nearest integer to hi * 2/pi, and r = (hi + lo) - k*pi/2 in
 *      double-double, with pi/2 split Cody-Waite style into three 20-bit
 *      parts (k * part is exact for |k| < 2^33) and a 53-bit tail, so r is
 *      known to about 2^-100 relative even when m*w lies close to a multiple
 *      of pi/2;
 *   3. sin and cos of r = rh + rl from libm on rh, corrected to first order
 *      in rl (rl*rl is below double rounding), then the quadrant k mod 4.
 * The double result is within about 1 ulp of double, so after the final
 * rounding the float32 entry is within 1 ulp of float32 (docs/ACCURACY.md).
 * Callers keep |m| <= 2^31 - 1 and |w| <= 4, so |m*w| < 2^33.
 */
#include <math.h>

#include "kernels.h"

/* pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_4 to about 2^-113. */
static const double PIO2_1 = 0x1.921fa00000000p+0;
static const double PIO2_2 = 0x1.5444200000000p-20;
static const double PIO2_3 = 0x1.a308c00000000p-41;
static const double PIO2_4 = 0x1.313198a2e0370p-61;
static const double TWO_OVER_PI = 0x1.45f306dc9c883p-1;

/* a + b = s + e exactly (Knuth's two-sum). */
static inline void two_sum(double a, double b, double *s, double *e)
{
    const double t = a + b;
    const double bb = t - a;
    *e = (a - (t - bb)) + (b - bb);
    *s = t;
}

/* (h, l) - b as a renormalised double-double. */
static inline void dd_sub(double *h, double *l, double b)
{
    double s, e;
    two_sum(*h, -b, &s, &e);
    e += *l;
    two_sum(s, e, h, l);
}

/* cos and sin of the exact product m * w. */
static void exact_cos_sin(int64_t m, double w, double *c_out, double *s_out)
{
    const double md = (double)m;            /* exact: |m| < 2^53 */
    const double hi = md * w;
    const double lo = fma(md, w, -hi);      /* m*w = hi + lo exactly */
    const double k = nearbyint(hi * TWO_OVER_PI);
    double rh = hi - k * PIO2_1;            /* exact (Sterbenz) */
    double rl = 0.0;
    two_sum(rh, lo, &rh, &rl);
    dd_sub(&rh, &rl, k * PIO2_2);           /* k * part exact: 20-bit parts */
    dd_sub(&rh, &rl, k * PIO2_3);
    dd_sub(&rh, &rl, k * PIO2_4);
    const double sr = sin(rh), cr = cos(rh);
    const double s = sr + rl * cr;          /* sin(rh + rl), first order */
    const double c = cr - rl * sr;
    /* Quadrant: k mod 4 without converting a huge double to a narrow int. */
    const int64_t q = (int64_t)k & 3;
    switch (q) {
    case 0: *c_out = c;  *s_out = s;  break;
    case 1: *c_out = -s; *s_out = c;  break;
    case 2: *c_out = -c; *s_out = -s; break;
    default: *c_out = s; *s_out = -c; break;
    }
}

void rope_table_f32_scalar(const int64_t *positions, int64_t start, int64_t n_pos,
                           const double *inv_freq, int64_t n_freq, double scale,
                           float *cos_out, float *sin_out)
{
    for (int64_t p = 0; p < n_pos; p++) {
        const int64_t m = positions ? positions[p] : start + p;
        float *crow = cos_out + p * n_freq;
        float *srow = sin_out + p * n_freq;
        for (int64_t i = 0; i < n_freq; i++) {
            double c, s;
            exact_cos_sin(m, inv_freq[i], &c, &s);
            crow[i] = (float)(scale * c);
            srow[i] = (float)(scale * s);
        }
    }
}
