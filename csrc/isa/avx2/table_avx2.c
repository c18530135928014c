/* AVX2 + FMA table kernel: four frequencies per vector, one position
 * broadcast across them. Lane for lane it performs the operations of the
 * scalar specification (table.c) in the same order, tier by tier: entries
 * are correctly rounded either way, so they are bit-identical to it. The
 * leftover frequencies and the undecided lanes run the scalar code.
 */
#include <math.h>

#include "core/kernels.h"
#include "scalar/table_internal.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

#define ROPE_AVX2 __attribute__((target("avx2,fma")))

/* rope_turns on four frequencies. */
ROPE_AVX2 static inline void turns4(__m256d w, __m256d *t0, __m256d *t1, __m256d *t2)
{
    const __m256d q0 = _mm256_set1_pd(ROPE_2_PI_0), q1 = _mm256_set1_pd(ROPE_2_PI_1);
    const __m256d p0 = _mm256_mul_pd(w, q0), e0 = _mm256_fmsub_pd(w, q0, p0);
    const __m256d p1 = _mm256_mul_pd(w, q1), e1 = _mm256_fmsub_pd(w, q1, p1);
    const __m256d p2 = _mm256_mul_pd(w, _mm256_set1_pd(ROPE_2_PI_2));
    const __m256d s = _mm256_add_pd(e0, p1);
    const __m256d bb = _mm256_sub_pd(s, e0);
    const __m256d x = _mm256_add_pd(_mm256_sub_pd(e0, _mm256_sub_pd(s, bb)),
                                    _mm256_sub_pd(p1, bb));
    *t0 = p0;
    *t1 = s;
    *t2 = _mm256_add_pd(x, _mm256_add_pd(e1, p2));
}

/* rope_cos_sin_turns on four frequencies. */
ROPE_AVX2 static inline void cos_sin4(__m256d md, __m256d t0, __m256d t1, __m256d t2,
                                      __m256d *cos_out, __m256d *sin_out)
{
    const __m256d magic = _mm256_set1_pd(ROPE_ROUND_MAGIC);
    const __m256d a = _mm256_mul_pd(md, t0), b = _mm256_fmsub_pd(md, t0, a);
    const __m256d kk = _mm256_add_pd(a, magic);
    const __m256d k = _mm256_sub_pd(kk, magic);
    const __m256d u = _mm256_sub_pd(a, k);
    const __m256d c = _mm256_mul_pd(md, t1), d = _mm256_fmsub_pd(md, t1, c);
    const __m256d e = _mm256_mul_pd(md, t2);
    const __m256d g = _mm256_add_pd(b, c);
    const __m256d gg = _mm256_sub_pd(g, b);
    const __m256d gl = _mm256_add_pd(_mm256_sub_pd(b, _mm256_sub_pd(g, gg)),
                                     _mm256_sub_pd(c, gg));
    const __m256d h = _mm256_add_pd(u, g);
    const __m256d f = _mm256_add_pd(h, _mm256_add_pd(gl, _mm256_add_pd(d, e)));

    const __m256d z = _mm256_mul_pd(f, f);
    __m256d ps = _mm256_fmadd_pd(z, _mm256_set1_pd(ROPE_S13), _mm256_set1_pd(ROPE_S11));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(ROPE_S9));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(ROPE_S7));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(ROPE_S5));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(ROPE_S3));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(ROPE_S1));
    const __m256d sn = _mm256_mul_pd(f, ps);
    __m256d pc = _mm256_fmadd_pd(z, _mm256_set1_pd(ROPE_C14), _mm256_set1_pd(ROPE_C12));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(ROPE_C10));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(ROPE_C8));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(ROPE_C6));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(ROPE_C4));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(ROPE_C2));
    const __m256d cs = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(1.0));

    /* Quadrant q = k mod 4: swap when q is odd; cos negative for q = 1, 2;
     * sin negative for q = 2, 3 (sign bits placed by shifting q). */
    const __m256i q = _mm256_and_si256(_mm256_castpd_si256(kk), _mm256_set1_epi64x(3));
    const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
    const __m256d swap = _mm256_castsi256_pd(
        _mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
    const __m256d neg_c = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), 62));
    const __m256d neg_s = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_and_si256(q, two), 62));
    const __m256d co = _mm256_xor_pd(_mm256_blendv_pd(cs, sn, swap), neg_c);
    const __m256d so = _mm256_xor_pd(_mm256_blendv_pd(sn, cs, swap), neg_s);
    *cos_out = co;
    *sin_out = so;
}

/* rope_certify_f32 on four lanes of cos and four of sin: returns the mask of
 * lanes (bit j: cos, bit j+4: sin) whose bound decides the rounding; their
 * float32 values go to crow and srow (+0 for zero, unless the caller's bound
 * never certifies a zero: nonzero_bound). */
ROPE_AVX2 static inline int certify_store8(__m256d yc, __m256d bc, __m256d ys, __m256d bs,
                                           float *crow, float *srow, int nonzero_bound)
{
    const __m256 lo = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(ys, bs)),
                                      _mm256_cvtpd_ps(_mm256_sub_pd(yc, bc)));
    const __m256 hi = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_add_pd(ys, bs)),
                                      _mm256_cvtpd_ps(_mm256_add_pd(yc, bc)));
    /* = float(y) where lo == hi */
    const __m256 out = nonzero_bound ? lo : _mm256_add_ps(lo, _mm256_setzero_ps());
    _mm_storeu_ps(crow, _mm256_castps256_ps128(out));
    _mm_storeu_ps(srow, _mm256_extractf128_ps(out, 1));
    return _mm256_movemask_ps(_mm256_cmp_ps(lo, hi, _CMP_EQ_OQ));
}

/* Scale, certify and store four direct entries (tier 2 of table.c); lanes
 * the bound cannot decide are rounded in double-double. */
ROPE_AVX2 static inline void direct_store(int64_t m, __m256d md, __m256d t0, __m256d c, __m256d s,
                                          __m256d vscale, double scale, const double *w,
                                          float *crow, float *srow)
{
    const __m256d sign = _mm256_set1_pd(-0.0), rel = _mm256_set1_pd(ROPE_DIRECT_REL);
    const __m256d yc = _mm256_mul_pd(vscale, c), ys = _mm256_mul_pd(vscale, s);
    const __m256d err = _mm256_mul_pd(
        _mm256_andnot_pd(sign, _mm256_mul_pd(vscale, _mm256_mul_pd(md, t0))),
        _mm256_set1_pd(ROPE_DIRECT_ABS));
    const int ok = certify_store8(
        yc, _mm256_add_pd(_mm256_mul_pd(_mm256_andnot_pd(sign, yc), rel), err),
        ys, _mm256_add_pd(_mm256_mul_pd(_mm256_andnot_pd(sign, ys), rel), err),
        crow, srow, 0);
    if (ok != 0xFF)   /* rare */
        for (int l = 0; l < 4; l++)
            if (!((ok >> l) & (ok >> (l + 4)) & 1))
                rope_cos_sin_correct_f32(m, w[l], scale, &crow[l], &srow[l]);
}

/* The dense range of table.c (table_range), four frequencies per vector. */
ROPE_AVX2 static void table_range4(int64_t start, int64_t n_pos, const double *inv_freq,
                                   int64_t n_freq, double scale, float *cos_out, float *sin_out)
{
    double t0[ROPE_RANGE_CHUNK], t1[ROPE_RANGE_CHUNK], t2[ROPE_RANGE_CHUNK];
    double bc[ROPE_RANGE_BLOCK][ROPE_RANGE_CHUNK], bs[ROPE_RANGE_BLOCK][ROPE_RANGE_CHUNK];
    double ac[ROPE_RANGE_CHUNK], as[ROPE_RANGE_CHUNK];
    const int64_t nb = n_pos < ROPE_RANGE_BLOCK ? n_pos : ROPE_RANGE_BLOCK;
    const __m256d vscale = _mm256_set1_pd(scale);
    const __m256d bound = _mm256_set1_pd(fmax(fabs(scale) * ROPE_RANGE_ABS, 0x1p-140));
    const int unscaled = scale == 1.0;
    for (int64_t i0 = 0; i0 < n_freq; i0 += ROPE_RANGE_CHUNK) {
        const int64_t nf = n_freq - i0 < ROPE_RANGE_CHUNK ? n_freq - i0 : ROPE_RANGE_CHUNK;
        const int64_t nv = nf & ~(int64_t)3;
        for (int64_t i = 0; i < nv; i += 4) {
            __m256d a, b, c;
            turns4(_mm256_loadu_pd(inv_freq + i0 + i), &a, &b, &c);
            _mm256_storeu_pd(t0 + i, a);
            _mm256_storeu_pd(t1 + i, b);
            _mm256_storeu_pd(t2 + i, c);
            for (int64_t r = 0; r < nb; r++) {
                __m256d cr, sr;
                cos_sin4(_mm256_set1_pd((double)r), a, b, c, &cr, &sr);
                _mm256_storeu_pd(&bc[r][i], cr);
                _mm256_storeu_pd(&bs[r][i], sr);
            }
        }
        for (int64_t i = nv; i < nf; i++) {
            rope_turns(inv_freq[i0 + i], &t0[i], &t1[i], &t2[i]);
            for (int64_t r = 0; r < nb; r++)
                rope_cos_sin_turns((double)r, t0[i], t1[i], t2[i], &bc[r][i], &bs[r][i]);
        }
        for (int64_t a = 0; a < n_pos; a += ROPE_RANGE_BLOCK) {
            const __m256d ma = _mm256_set1_pd((double)(start + a));
            for (int64_t i = 0; i < nv; i += 4) {
                __m256d c, s;
                cos_sin4(ma, _mm256_loadu_pd(t0 + i), _mm256_loadu_pd(t1 + i),
                         _mm256_loadu_pd(t2 + i), &c, &s);
                _mm256_storeu_pd(ac + i, c);
                _mm256_storeu_pd(as + i, s);
            }
            for (int64_t i = nv; i < nf; i++)
                rope_cos_sin_turns((double)(start + a), t0[i], t1[i], t2[i], &ac[i], &as[i]);
            for (int64_t b = 0; b < nb && a + b < n_pos; b++) {
                float *crow = cos_out + (a + b) * n_freq + i0;
                float *srow = sin_out + (a + b) * n_freq + i0;
                for (int64_t i = 0; i < nv; i += 4) {
                    const __m256d ca = _mm256_loadu_pd(ac + i), sa = _mm256_loadu_pd(as + i);
                    const __m256d cb = _mm256_loadu_pd(&bc[b][i]), sb = _mm256_loadu_pd(&bs[b][i]);
                    __m256d yc = _mm256_fmsub_pd(ca, cb, _mm256_mul_pd(sa, sb));
                    __m256d ys = _mm256_fmadd_pd(sa, cb, _mm256_mul_pd(ca, sb));
                    if (!unscaled) {   /* scale 1: the product is exact, skip it */
                        yc = _mm256_mul_pd(vscale, yc);
                        ys = _mm256_mul_pd(vscale, ys);
                    }
                    /* The bound is at least 2^-140: zeros are never certified here. */
                    const int ok = certify_store8(yc, bound, ys, bound, crow + i, srow + i, 1);
                    if (ok != 0xFF) {   /* rare: undecided lanes take the next tier */
                        const int bad = ~(ok & (ok >> 4));
                        for (int l = 0; l < 4; l++)
                            if ((bad >> l) & 1)
                                rope_entry_f32(start + a + b, inv_freq[i0 + i + l], t0[i + l],
                                               t1[i + l], t2[i + l], scale, &crow[i + l],
                                               &srow[i + l]);
                    }
                }
                for (int64_t i = nv; i < nf; i++) {
                    const double c = fma(ac[i], bc[b][i], -(as[i] * bs[b][i]));
                    const double s = fma(as[i], bc[b][i], ac[i] * bs[b][i]);
                    const double yc = scale * c, ys = scale * s;
                    const double bound = fmax(fabs(scale) * ROPE_RANGE_ABS, 0x1p-140);
                    if (!rope_certify_f32(yc, bound, &crow[i]) ||
                        !rope_certify_f32(ys, bound, &srow[i]))
                        rope_entry_f32(start + a + b, inv_freq[i0 + i], t0[i], t1[i], t2[i],
                                       scale, &crow[i], &srow[i]);
                }
            }
        }
    }
}

ROPE_AVX2 void rope_table_f32_avx2(const int64_t *positions, int64_t start, int64_t n_pos,
                                   const double *inv_freq, int64_t n_freq, double scale,
                                   float *cos_out, float *sin_out)
{
    if (!positions) {
        table_range4(start, n_pos, inv_freq, n_freq, scale, cos_out, sin_out);
        return;
    }
    double t0[ROPE_TURNS_CHUNK], t1[ROPE_TURNS_CHUNK], t2[ROPE_TURNS_CHUNK];
    const __m256d vscale = _mm256_set1_pd(scale);
    for (int64_t i0 = 0; i0 < n_freq; i0 += ROPE_TURNS_CHUNK) {
        const int64_t nf = n_freq - i0 < ROPE_TURNS_CHUNK ? n_freq - i0 : ROPE_TURNS_CHUNK;
        const int64_t nv = nf & ~(int64_t)3;
        for (int64_t i = 0; i < nv; i += 4) {
            __m256d a, b, c;
            turns4(_mm256_loadu_pd(inv_freq + i0 + i), &a, &b, &c);
            _mm256_storeu_pd(t0 + i, a);
            _mm256_storeu_pd(t1 + i, b);
            _mm256_storeu_pd(t2 + i, c);
        }
        for (int64_t i = nv; i < nf; i++)
            rope_turns(inv_freq[i0 + i], &t0[i], &t1[i], &t2[i]);
        for (int64_t p = 0; p < n_pos; p++) {
            const int64_t m = positions[p];
            const __m256d md = _mm256_set1_pd((double)m);
            float *crow = cos_out + p * n_freq + i0;
            float *srow = sin_out + p * n_freq + i0;
            for (int64_t i = 0; i < nv; i += 4) {
                const __m256d v0 = _mm256_loadu_pd(t0 + i);
                __m256d c, s;
                cos_sin4(md, v0, _mm256_loadu_pd(t1 + i), _mm256_loadu_pd(t2 + i), &c, &s);
                direct_store(m, md, v0, c, s, vscale, scale, inv_freq + i0 + i, crow + i, srow + i);
            }
            for (int64_t i = nv; i < nf; i++)
                rope_entry_f32(m, inv_freq[i0 + i], t0[i], t1[i], t2[i], scale, &crow[i], &srow[i]);
        }
    }
}

#endif
