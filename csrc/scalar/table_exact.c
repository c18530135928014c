/* Correctly rounded table entries: the slow path behind the fast kernels.
 *
 * The fast kernels (table.c, table_avx2.c) carry an error bound with each
 * double result and keep it only when every value within the bound rounds
 * to the same float32. The rare entries that fail that test (about one in
 * 2^17, and where cos or sin is tiny) come here: the same reduction carried
 * in double-double with 2/pi to about 2^-215, Taylor series to degree 28 in
 * double-double, and a correct rounding of the double-double result. Its
 * error, below 2^-100 |y| + 2^-118 |scale| (docs/ACCURACY.md), decides the
 * rounding unless the exact value lies closer than that to a midpoint
 * between two floats.
 */
#include <math.h>
#include <string.h>

#include "core/kernels.h"
#include "table_internal.h"

/* 2/pi as four doubles, to about 2^-215. */
static const double Q[4] = {0x1.45f306dc9c883p-1, -0x1.6b01ec5417056p-55,
                            -0x1.6447e493ad4cep-109, 0x1.e21c820ff28b2p-163};

/* (pi/2)^k / k! with signs, as double-doubles: sin(pi/2 f) = f sum SIN_DD[j] f^2j. */
static const double SIN_DD[14][2] = {
    {0x1.921fb54442d18p+0, 0x1.1a62633145c07p-54},
    {-0x1.4abbce625be53p-1, 0x1.05511c68476a8p-55},
    {0x1.466bc6775aae2p-4, -0x1.6dc0cbddb0fc3p-59},
    {-0x1.32d2cce62bd86p-8, 0x1.066847a026e69p-62},
    {0x1.50783487ee782p-13, -0x1.1be14e6e8854ap-67},
    {-0x1.e3074fde8871fp-19, -0x1.88ef203b0a336p-73},
    {0x1.e8f434d018d63p-25, 0x1.94682b2571263p-80},
    {-0x1.6fadb9f155744p-31, 0x1.bab97c50b4cd0p-85},
    {0x1.aaec32af93359p-38, 0x1.4fe55050e576ap-93},
    {-0x1.8a404211f9547p-45, -0x1.6d424c0620248p-103},
    {0x1.2877020d52cf0p-52, -0x1.c9db31d99b9a3p-106},
    {-0x1.7215f879e1ac9p-60, 0x1.a2cc59fc2e3e8p-114},
    {0x1.859c594ba4573p-68, 0x1.46446588874ecp-123},
    {-0x1.5e91aac4928dbp-76, 0x1.36e8311afce96p-130},
};

/* cos(pi/2 f) = sum COS_DD[j] f^2j. */
static const double COS_DD[15][2] = {
    {0x1.0000000000000p+0, 0x0.0p+0},
    {-0x1.3bd3cc9be45dep+0, -0x1.692b71366cc04p-54},
    {0x1.03c1f081b5ac4p-2, -0x1.32b33f87fc145p-56},
    {-0x1.55d3c7e3cbffap-6, 0x1.d582920937625p-65},
    {0x1.e1f506891babbp-11, -0x1.7362f495c096dp-68},
    {-0x1.a6d1f2a204a8cp-16, 0x1.5961232276df6p-70},
    {0x1.f9d38a3763cc3p-22, -0x1.c8a14c8bd6bc5p-76},
    {-0x1.b6e24f44b128fp-28, -0x1.6de1e0a0c23b9p-83},
    {0x1.20c62c2f2d7f5p-34, -0x1.5a3cd1a11c7a2p-88},
    {-0x1.2a0c591af8314p-41, -0x1.215803afbd5f8p-95},
    {0x1.ef6e308d6d1c4p-49, -0x1.c5f7779fbdd48p-103},
    {-0x1.52ae4120fde27p-56, 0x1.76dd247cd9002p-110},
    {0x1.838d8f4321800p-64, -0x1.453680e7f5659p-120},
    {-0x1.789d662bb5482p-72, -0x1.01d70ae199b04p-130},
    {0x1.3aab85bac2365p-80, -0x1.b618dab265a90p-135},
};

typedef struct { double h, l; } dd;

static inline dd two_sum(double a, double b)
{
    const double s = a + b, bb = s - a;
    return (dd){s, (a - (s - bb)) + (b - bb)};
}

static inline dd fast_two_sum(double a, double b)  /* |a| >= |b| or a == 0 */
{
    const double s = a + b;
    return (dd){s, b - (s - a)};
}

static inline dd two_prod(double a, double b)
{
    const double p = a * b;
    return (dd){p, fma(a, b, -p)};
}

static inline dd dd_mul(dd a, dd b)
{
    const dd p = two_prod(a.h, b.h);
    return fast_two_sum(p.h, p.l + (a.h * b.l + a.l * b.h));
}

static inline dd dd_add(dd a, dd b)
{
    const dd s = two_sum(a.h, b.h);
    return fast_two_sum(s.h, s.l + (a.l + b.l));
}

/* float32 nearest to h + l (|l| <= half an ulp of h), ties to even. */
static float round_dd_f32(double h, double l)
{
    const float r = (float)h;
    if (l == 0.0)
        return r;
    /* Only an h exactly halfway between two floats needs l: then the float
     * on l's side of h is the answer. */
    const double h2 = nextafter(h, l > 0 ? INFINITY : -INFINITY);
    const float r2 = (float)h2;
    if (r2 == r)
        return r;
    const double mid = ((double)r + (double)r2) * 0.5;  /* exact */
    return h == mid ? r2 : r;
}

void rope_cos_sin_correct_f32(int64_t m, double w, double scale, float *cos_out, float *sin_out)
{
    const double md = (double)m;
    /* m * w * 2/pi = a + (terms below 2^-19), each term an exact product. */
    double t[7];
    dd p;
    p = two_prod(w, Q[0]); t[0] = p.h; t[1] = p.l;
    p = two_prod(w, Q[1]); t[2] = p.h; t[3] = p.l;
    p = two_prod(w, Q[2]); t[4] = p.h; t[5] = p.l;
    t[6] = w * Q[3];
    const dd a = two_prod(md, t[0]);
    const double kk = a.h + ROPE_ROUND_MAGIC;
    const double u = a.h - (kk - ROPE_ROUND_MAGIC);   /* exact, |u| <= 1/2 */
    /* The small terms, summed with their rounding errors kept aside. */
    double s = a.l, comp = 0.0;
    for (int j = 1; j < 7; j++) {
        const dd q = two_prod(md, t[j]);
        dd r = two_sum(s, q.h);
        s = r.h;
        comp += r.l + q.l;
    }
    dd f = two_sum(u, s);
    f = fast_two_sum(f.h, f.l + comp);                 /* quarter turns */

    const dd z = dd_mul(f, f);
    dd ps = {SIN_DD[13][0], SIN_DD[13][1]};
    for (int j = 12; j >= 0; j--)
        ps = dd_add(dd_mul(ps, z), (dd){SIN_DD[j][0], SIN_DD[j][1]});
    dd sn = dd_mul(ps, f);
    dd pc = {COS_DD[14][0], COS_DD[14][1]};
    for (int j = 13; j >= 0; j--)
        pc = dd_add(dd_mul(pc, z), (dd){COS_DD[j][0], COS_DD[j][1]});

    uint64_t bits;
    memcpy(&bits, &kk, sizeof bits);
    dd c, sv;
    switch (bits & 3) {
    case 0: c = pc; sv = sn; break;
    case 1: c = (dd){-sn.h, -sn.l}; sv = pc; break;
    case 2: c = (dd){-pc.h, -pc.l}; sv = (dd){-sn.h, -sn.l}; break;
    default: c = sn; sv = (dd){-pc.h, -pc.l}; break;
    }
    const dd ys = dd_mul((dd){scale, 0.0}, sv);
    const dd yc = dd_mul((dd){scale, 0.0}, c);
    *cos_out = round_dd_f32(yc.h, yc.l) + 0.0f;        /* + 0: zeros are +0 */
    *sin_out = round_dd_f32(ys.h, ys.l) + 0.0f;
}
