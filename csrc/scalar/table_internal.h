/* Internal: what the table files (table.c, table_avx2.c, table_exact.c,
 * table_f64.c) share: the split of 2/pi, the rounding magic, the Taylor
 * coefficients, chunk sizes, the error bounds of the fast evaluation, the
 * quadrant and certify helpers, and the declarations of table.c's and
 * table_exact.c's internal functions. Values derived in docs/ACCURACY.md. */
#ifndef PYROPE_TABLE_INTERNAL_H
#define PYROPE_TABLE_INTERNAL_H

#include <stdint.h>
#include <string.h>

/* 2/pi = ROPE_2_PI_0 + ROPE_2_PI_1 + ROPE_2_PI_2 to about 2^-161. */
#define ROPE_2_PI_0 0x1.45f306dc9c883p-1
#define ROPE_2_PI_1 (-0x1.6b01ec5417056p-55)
#define ROPE_2_PI_2 (-0x1.6447e493ad4cep-109)

/* x + 1.5*2^52 - 1.5*2^52 rounds |x| < 2^51 to the nearest integer (ties
 * to even) and leaves that integer mod 2^51 in the low significand bits. */
#define ROPE_ROUND_MAGIC 0x1.8p52

/* Taylor coefficients of sin(pi/2 f) = f * sum S_j f^(j-1) and
 * cos(pi/2 f) = sum C_j f^j: (+-)(pi/2)^j / j!, rounded to double. */
#define ROPE_S1 0x1.921fb54442d18p+0
#define ROPE_S3 (-0x1.4abbce625be53p-1)
#define ROPE_S5 0x1.466bc6775aae2p-4
#define ROPE_S7 (-0x1.32d2cce62bd86p-8)
#define ROPE_S9 0x1.50783487ee782p-13
#define ROPE_S11 (-0x1.e3074fde8871fp-19)
#define ROPE_S13 0x1.e8f434d018d63p-25
#define ROPE_C2 (-0x1.3bd3cc9be45dep+0)
#define ROPE_C4 0x1.03c1f081b5ac4p-2
#define ROPE_C6 (-0x1.55d3c7e3cbffap-6)
#define ROPE_C8 0x1.e1f506891babbp-11
#define ROPE_C10 (-0x1.a6d1f2a204a8cp-16)
#define ROPE_C12 0x1.f9d38a3763cc3p-22
#define ROPE_C14 (-0x1.b6e24f44b128fp-28)

/* Frequencies handled per pass: their quarter-turn splits live on the stack. */
#define ROPE_TURNS_CHUNK 256

/* Dense ranges by angle addition: row start + a*B + b is the product of the
 * rows for start + a*B and for b (B = ROPE_RANGE_BLOCK), for
 * ROPE_RANGE_CHUNK frequencies at a time (2 * B * chunk doubles of stack). */
#define ROPE_RANGE_BLOCK 32
#define ROPE_RANGE_CHUNK 64

/* Error bounds of the fast double results y (docs/ACCURACY.md), each with
 * room for the rounding of y +- bound:
 *   direct (rope_cos_sin_turns, scaled): |y| * REL + |scale * m * t0| * ABS;
 *   angle addition (scaled):             max(|scale| * RANGE_ABS, 2^-140);
 *   the floor 2^-140 keeps that tier from ever certifying a zero. */
#define ROPE_DIRECT_REL 0x1.1p-44
#define ROPE_DIRECT_ABS 0x1p-150
#define ROPE_RANGE_ABS 0x1.01p-43

/* cos and sin of k*pi/2 + a from cs = cos a, sn = sin a: k mod 4 sits in
 * the low bits of kk's significand (kk = ROPE_ROUND_MAGIC + k). */
static inline void rope_quadrant(double kk, double cs, double sn,
                                 double *cos_out, double *sin_out)
{
    uint64_t bits;
    memcpy(&bits, &kk, sizeof bits);
    switch (bits & 3) {
    case 0: *cos_out = cs;  *sin_out = sn;  break;
    case 1: *cos_out = -sn; *sin_out = cs;  break;
    case 2: *cos_out = -cs; *sin_out = -sn; break;
    default: *cos_out = sn; *sin_out = -cs; break;
    }
}

/* If every value within bound of y rounds to the same float32 (so the exact
 * value does too: rounding is monotonic), store it (+0 for zero) and
 * return 1; else return 0. */
static inline int rope_certify_f32(double y, double bound, float *out)
{
    if ((float)(y - bound) != (float)(y + bound))
        return 0;
    *out = (float)y + 0.0f;
    return 1;
}

/* w * 2/pi as t0 + t1 + t2 (table.c). */
void rope_turns(double w, double *t0, double *t1, double *t2);

/* cos and sin (double, before scaling) of m * w, from m as a double and the
 * split of w (table.c): the fast evaluation, within ROPE_DIRECT_* bounds. */
void rope_cos_sin_turns(double md, double t0, double t1, double t2,
                        double *cos_out, double *sin_out);

/* One correctly rounded entry from the fast evaluation, or else from
 * rope_cos_sin_correct_f32 (table.c). */
void rope_entry_f32(int64_t m, double w, double t0, double t1, double t2, double scale,
                    float *cos_out, float *sin_out);

/* Correctly rounded float32 scale*cos(m w), scale*sin(m w) in double-double
 * (table_exact.c): slow, for the entries the fast bounds cannot decide. */
void rope_cos_sin_correct_f32(int64_t m, double w, double scale, float *cos_out, float *sin_out);

#endif
