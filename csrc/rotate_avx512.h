/* Internal: what the AVX-512 rotation kernels (rotate_avx512_*.c, one file
 * per storage type) share: the target attributes. The kernels are compiled
 * for these targets by function attributes (no global -m flags) and called
 * only after run-time detection (isa_avx512.c). Lane for lane they compute
 * the scalar formula of pair.h, y0 = fma(x0, c, -(x1 * s)),
 * y1 = fma(x1, c, x0 * s), so they match the scalar kernels bit for bit. */
#ifndef PYROPE_ROTATE_AVX512_H
#define PYROPE_ROTATE_AVX512_H

#include "kernels.h"
#include "pair.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

/* AVX-512 F, BW, VL and DQ, with the AVX2/FMA/F16C they extend. */
#define ROPE_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define ROPE_AVX512 __attribute__((target(ROPE_AVX512_TARGET)))
/* The same plus AVX512_BF16 (vcvtne2ps2bf16, vcvtneps2bf16). */
#define ROPE_AVX512BF16 __attribute__((target(ROPE_AVX512_TARGET ",avx512bf16")))

/* ---- added with the float32 and float64 kernels (rotate_avx512_f32.c,
 * rotate_avx512_f64.c): masks, and the layouts' loops written once for
 * both, for a storage type's vector kit: T the element (float, double), V
 * the vector (__m512, __m512d), P the intrinsics' suffix (ps, pd), L the
 * lanes per vector (16, 8), M the mask type (__mmask16, __mmask8), LANES
 * its rope_avx512_lanes16/8. ----------------------------------------------- */

/* Lanes [0, n) of a mask, n clamped to 0..16 (0..8): the lanes a masked
 * load or store touches. A disabled lane is neither read (no fault either)
 * nor written, so the last vector of a head never reaches past its pairs. */
static inline __mmask16 rope_avx512_lanes16(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
static inline __mmask8 rope_avx512_lanes8(int64_t n)
{
    return n >= 8 ? (__mmask8)0xFF : n <= 0 ? (__mmask8)0 : (__mmask8)((1u << n) - 1);
}

/* Keep a loaded vector in a register (any of the 32): stops the compiler
 * from folding its one load into two instructions that each read the same
 * bytes again, where a 64-byte load per cycle is what Zen 4 has. */
#define ROPE_IN_ZMM(v) __asm__("" : "+v"(v))

#define ROPE_AVX512_UNROLL _Pragma("GCC unroll 16")

/* CALL(F, NV) for a vector count nv of 1..8 known only at run time: each
 * case a copy of F's loops with its own count, fully unrolled. */
#define ROPE_AVX512_NV_SWITCH(nv, CALL, F)                                           \
    switch (nv) {                                                                    \
    case 1: CALL(F, 1); break;                                                       \
    case 2: CALL(F, 2); break;                                                       \
    case 3: CALL(F, 3); break;                                                       \
    case 4: CALL(F, 4); break;                                                       \
    case 5: CALL(F, 5); break;                                                       \
    case 6: CALL(F, 6); break;                                                       \
    case 7: CALL(F, 7); break;                                                       \
    default: CALL(F, 8); break;                                                      \
    }

/* Pairs pending per interleaved chunk whose permuted cos/sin sit on the
 * stack (the deinterleaving kernel, heads longer than the registers hold). */
#define ROPE_AVX512_IL_CHUNK 512

/* ---- split half ---------------------------------------------------------- */

/* Split half with the row in registers, NAME(x, y, x_sh, y_sh, n_heads, cos,
 * sin, n, off1, inverse, NV): pairs [0, n) of every head, a pair's second
 * coordinate off1 elements after its first, NV = ceil(n / L) <= 8 vectors
 * per half. The row's vectors (2 NV registers) are loaded once and stay in
 * registers while the heads go by; a half's last vector is masked to the
 * pairs. The inverse swaps fmsub and fmadd: with s' = -s, x1*s' = -(x1*s)
 * exactly (rounding to nearest is symmetric), so y0 = fma(x0, c, -(x1*s'))
 * = fmadd(x0, c, x1*s), y1 = fmsub(x1, c, x0*s): the bits of rotate.c. */
#define ROPE_AVX512_SH_HEADS_(T, V, P, L, M, FM0, FM1)                               \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                    \
        ROPE_AVX512_UNROLL for (int v = 0; v < NV; v++) {                            \
            const M m = v == NV - 1 ? mt : (M)-1;                                    \
            V a = _mm512_maskz_loadu_##P(m, x + L * v);                              \
            V b = _mm512_maskz_loadu_##P(m, x + off1 + L * v);                       \
            ROPE_IN_ZMM(a);                                                          \
            ROPE_IN_ZMM(b);                                                          \
            _mm512_mask_storeu_##P(y + L * v, m,                                     \
                                   _mm512_##FM0##_##P(a, c[v], _mm512_mul_##P(b, s[v]))); \
            _mm512_mask_storeu_##P(y + off1 + L * v, m,                              \
                                   _mm512_##FM1##_##P(b, c[v], _mm512_mul_##P(a, s[v]))); \
        }                                                                            \
    }
#define ROPE_AVX512_SH_ROWS(NAME, T, V, P, L, M, LANES)                              \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int64_t off1, int inverse, const int NV)            \
    {                                                                                \
        const M mt = LANES(n - L * (NV - 1));                                        \
        V c[8], s[8];                                                                \
        ROPE_AVX512_UNROLL for (int v = 0; v < NV; v++) {                            \
            const M m = v == NV - 1 ? mt : (M)-1;                                    \
            c[v] = _mm512_maskz_loadu_##P(m, cos + L * v);                           \
            s[v] = _mm512_maskz_loadu_##P(m, sin + L * v);                           \
        }                                                                            \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            ROPE_AVX512_SH_HEADS_(T, V, P, L, M, fmsub, fmadd)                       \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            ROPE_AVX512_SH_HEADS_(T, V, P, L, M, fmadd, fmsub)                       \
    }

/* Split half, a token's heads back to back (x_sh == y_sh == 2 half), half
 * = L NVH (NVH <= 8) and x mis elements past a 64-byte boundary (numpy puts
 * large arrays 16 bytes past one; a 64-byte access across two cache lines
 * costs a quarter more, Zen 4, measured): NAME(x, y, n_heads, cos, sin,
 * half, mis, inverse, NVH). The token is read and written as one run of
 * aligned vectors, each once, its first and last masked to the token. In a
 * head (aligned base xa = its start - mis) vectors A_j = xa + L j and
 * B_j = xa + half + L j hold, lane for lane, the two coordinates of the
 * same pairs (L j - mis + l): for j >= 1 they are the split-half step with
 * the row rotated by mis lanes (vpermt2ps/vpermt2pd, indices ROT(mis):
 * L - mis .. 2L - 1 - mis over two neighbouring row vectors). A_0 and B_0
 * straddle parts: lanes from mis on are pairs 0.. as usual (A_0 first,
 * B_0 second coordinates); below mis A_0 holds the previous head's last
 * second coordinates (partner: that head's B_0) and B_0 this head's last
 * first coordinates (partner: the next head's A_0). Those two take the
 * partner by a blend and the sign of s per lane (x1 * -s = -(x1 * s)
 * exactly, so y0 = fma(x0, c, -(x1 * s)) as specified); the previous B_0
 * and the next A_0 ride along in registers as loaded, so in place is safe:
 * no vector is stored before its last use as loaded. Rows in registers:
 * 2 NVH + 2. */
#define ROPE_AVX512_SH_FLAT(NAME, T, V, P, L, M, LANES, ROT)                         \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t n_heads, const T *cos, const T *sin, int64_t half, \
        int64_t mis, int inverse, const int NVH)                                     \
    {                                                                                \
        const T *xa = (const T *)((uintptr_t)x - sizeof(T) * (uintptr_t)mis);        \
        T *ya = (T *)((uintptr_t)y - sizeof(T) * (uintptr_t)mis);                    \
        const __m512i rot = ROT(mis);                                                \
        const M low = LANES(mis), high = (M)~low;                                    \
        const V neg = _mm512_set1_##P(-0.0);                                         \
        V c[8], s[8];                                                                \
        ROPE_AVX512_UNROLL for (int j = 0; j < NVH; j++) {                           \
            /* entries (L j - mis + l) mod half: the end of vector j-1, then j */    \
            const int p = (j + NVH - 1) % NVH;                                       \
            c[j] = _mm512_permutex2var_##P(_mm512_loadu_##P(cos + L * p), rot,       \
                                           _mm512_loadu_##P(cos + L * j));           \
            s[j] = _mm512_permutex2var_##P(_mm512_loadu_##P(sin + L * p), rot,       \
                                           _mm512_loadu_##P(sin + L * j));           \
            if (inverse)                                                             \
                s[j] = _mm512_xor_##P(s[j], neg);                                    \
        }                                                                            \
        /* A_0, B_0: first coordinates (A_0 from mis, B_0 below it) take -s */       \
        const V sa = _mm512_mask_xor_##P(s[0], high, s[0], neg);                     \
        const V sb = _mm512_mask_xor_##P(s[0], low, s[0], neg);                      \
        V behind = _mm512_setzero_##P();        /* the previous head's B_0 */        \
        V a0 = _mm512_maskz_loadu_##P(high, xa); /* this head's A_0 */               \
        M first = high;                                                              \
        for (int64_t q = 0; q < n_heads; q++, xa += 2 * half, ya += 2 * half) {      \
            const V b0 = _mm512_loadu_##P(xa + half);                                \
            const V a1 = _mm512_maskz_loadu_##P(q + 1 < n_heads ? (M)-1 : low, xa + 2 * half); \
            ROPE_AVX512_UNROLL for (int j = 1; j < NVH; j++) {                       \
                V a = _mm512_loadu_##P(xa + L * j), b = _mm512_loadu_##P(xa + half + L * j); \
                ROPE_IN_ZMM(a);                                                      \
                ROPE_IN_ZMM(b);                                                      \
                /* y0 = x0*c - x1*s, y1 = x1*c + x0*s (s negated: the inverse) */    \
                _mm512_storeu_##P(ya + L * j, _mm512_fmsub_##P(a, c[j], _mm512_mul_##P(b, s[j]))); \
                _mm512_storeu_##P(ya + half + L * j,                                 \
                                  _mm512_fmadd_##P(b, c[j], _mm512_mul_##P(a, s[j]))); \
            }                                                                        \
            const V pa = _mm512_mask_blend_##P(high, behind, b0);                    \
            const V pb = _mm512_mask_blend_##P(low, a0, a1);                         \
            _mm512_mask_storeu_##P(ya, first, _mm512_fmadd_##P(a0, c[0], _mm512_mul_##P(pa, sa))); \
            _mm512_storeu_##P(ya + half, _mm512_fmadd_##P(b0, c[0], _mm512_mul_##P(pb, sb))); \
            behind = b0;                                                             \
            a0 = a1;                                                                 \
            first = (M)-1;                                                           \
        }                                                                            \
        /* lanes below mis of the last A_0: the last head's last second coordinates */ \
        _mm512_mask_storeu_##P(ya, low, _mm512_fmadd_##P(a0, c[0], _mm512_mul_##P(behind, sa))); \
    }

/* The split-half kernel NAME(x, y, x_sh, y_sh, n_heads, cos, sin, half,
 * inverse) over ROWS (ROPE_AVX512_SH_ROWS) and FLAT (ROPE_AVX512_SH_FLAT):
 * heads of up to 8 L pairs with the row in registers, a token's heads as
 * one aligned run where x is off a 64-byte boundary and the heads allow it;
 * longer heads head by head, 8 L pairs at a time with that part of the
 * row loaded again for each head (every head is read once, front to back:
 * streamed data keeps its order). */
#define ROPE_AVX512_SH(NAME, ROWS, FLAT, T, L)                                       \
    ROPE_AVX512 static void NAME(const T *x, T *y, int64_t x_sh, int64_t y_sh,       \
                                 int64_t n_heads, const T *cos, const T *sin,        \
                                 int64_t half, int inverse)                          \
    {                                                                                \
        const int64_t mis = (int64_t)((uintptr_t)x & 63) / (int64_t)sizeof(T);       \
        if (mis && half % L == 0 && half <= 8 * L && x_sh == 2 * half && y_sh == 2 * half) { \
            ROPE_AVX512_NV_SWITCH(half / L, ROPE_AVX512_SH_FLAT_, FLAT)              \
        } else if (half <= 8 * L) {                                                  \
            ROPE_AVX512_NV_SWITCH((half + L - 1) / L, ROPE_AVX512_SH_ALL_, ROWS)     \
        } else {                                                                     \
            for (int64_t h = 0; h < n_heads; h++)                                    \
                for (int64_t i = 0; i < half; i += 8 * L) {                          \
                    const int64_t n = half - i < 8 * L ? half - i : 8 * L;           \
                    ROPE_AVX512_NV_SWITCH((n + L - 1) / L, ROPE_AVX512_SH_PART_, ROWS) \
                }                                                                    \
        }                                                                            \
    }
#define ROPE_AVX512_SH_FLAT_(F, NVH) F(x, y, n_heads, cos, sin, half, mis, inverse, NVH)
#define ROPE_AVX512_SH_ALL_(F, NV) F(x, y, x_sh, y_sh, n_heads, cos, sin, half, half, inverse, NV)
#define ROPE_AVX512_SH_PART_(F, NV)                                                  \
    F(x + h * x_sh + i, y + h * y_sh + i, 0, 0, 1, cos + i, sin + i, n, half, inverse, NV)

/* ---- interleaved --------------------------------------------------------- */

/* Interleaved with the row duplicated in registers, NAME(x, y, x_sh, y_sh,
 * n_heads, cos, sin, n, inverse, NV): pairs [0, n) of every head, NV =
 * ceil(2n / L) <= 8 vectors of L/2 pairs. The row's cos and sin duplicated
 * to pair order (c0 c0 c1 c1 ...) stay in registers, 2 NV at most 16: per
 * row vector one vpermps/vpermpd to ORDER (ROPE_AVX512_IL_WIDE) and the
 * in-lane unpcklps/unpckhps of it with itself, which do not compete with
 * the FMAs. A vector v becomes fmaddsub(v, C, SWAP(v) * S), SWAP exchanging
 * the two coordinates of each pair (vpermilps/vpermilpd, in-lane too): even
 * lanes x0*c - x1*s, odd lanes x1*c + x0*s, one rounded product and one
 * fused multiply-add each, as specified. The inverse takes fmsubadd: with
 * s' = -s, x1*s' = -(x1*s) exactly, so fma(x0, c, -(x1*s')) = x0*c + x1*s
 * in one rounding. */
#define ROPE_AVX512_IL_HEADS_(V, P, L, M, FM, SWAP)                                  \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                    \
        ROPE_AVX512_UNROLL for (int v = 0; v < NV; v++) {                            \
            const M m = v == NV - 1 ? mt : (M)-1;                                    \
            V a = _mm512_maskz_loadu_##P(m, x + L * v);                              \
            ROPE_IN_ZMM(a);                                                          \
            _mm512_mask_storeu_##P(y + L * v, m,                                     \
                                   _mm512_##FM##_##P(a, C[v], _mm512_mul_##P(SWAP(a), S[v]))); \
        }                                                                            \
    }
#define ROPE_AVX512_IL_ROWS(NAME, T, V, P, L, M, LANES, ORDER, SWAP)                 \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int inverse, const int NV)                          \
    {                                                                                \
        const __m512i order = ORDER;                                                 \
        V C[8], S[8];                                                                \
        ROPE_AVX512_UNROLL for (int k = 0; 2 * k < NV; k++) {                        \
            const M m = LANES(n - L * k);                                            \
            const V cv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, cos + L * k)); \
            const V sv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, sin + L * k)); \
            C[2 * k] = _mm512_unpacklo_##P(cv, cv);                                  \
            S[2 * k] = _mm512_unpacklo_##P(sv, sv);                                  \
            if (2 * k + 1 < NV) {                                                    \
                C[2 * k + 1] = _mm512_unpackhi_##P(cv, cv);                          \
                S[2 * k + 1] = _mm512_unpackhi_##P(sv, sv);                          \
            }                                                                        \
        }                                                                            \
        const M mt = LANES(2 * n - L * (NV - 1));                                    \
        if (!inverse) /* even lanes x0*c - x1*s, odd lanes x1*c + x0*s */            \
            ROPE_AVX512_IL_HEADS_(V, P, L, M, fmaddsub, SWAP)                        \
        else          /* even lanes x0*c + x1*s, odd lanes x1*c - x0*s */            \
            ROPE_AVX512_IL_HEADS_(V, P, L, M, fmsubadd, SWAP)                        \
    }

/* Interleaved heads longer than the duplicated row's registers: L pairs
 * (two vectors a, b) per step, separated into first and second coordinates
 * by shuffles within 128-bit lanes (shufps/shufpd EVEN and ODD; unpcklps/
 * unpckhps put them back), which leave the pairs in an order of their own,
 * ORDER; the row is permuted to it (vpermps/vpermpd) once per call and
 * shared by every head, so a step is the split-half computation on the
 * separated coordinates. A head's last step is masked to its pairs. */
#define ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, K, MA, MB, CV, SV)        \
    do {                                                                             \
        V va = _mm512_maskz_loadu_##P(MA, x + 2 * L * (K));                          \
        V vb = _mm512_maskz_loadu_##P(MB, x + 2 * L * (K) + L);                      \
        ROPE_IN_ZMM(va);                                                             \
        ROPE_IN_ZMM(vb);                                                             \
        const V e = _mm512_shuffle_##P(va, vb, EVEN), o = _mm512_shuffle_##P(va, vb, ODD); \
        const V y0 = _mm512_##FM0##_##P(e, CV, _mm512_mul_##P(o, SV));               \
        const V y1 = _mm512_##FM1##_##P(o, CV, _mm512_mul_##P(e, SV));               \
        _mm512_mask_storeu_##P(y + 2 * L * (K), MA, _mm512_unpacklo_##P(y0, y1));    \
        _mm512_mask_storeu_##P(y + 2 * L * (K) + L, MB, _mm512_unpackhi_##P(y0, y1)); \
    } while (0)

/* NAME(x, y, x_sh, y_sh, n_heads, cos, sin, n, inverse, NS): pairs [0, n)
 * of every head in NS = ceil(n / L) <= 8 steps, the permuted row in 2 NS
 * registers. */
#define ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, FM0, FM1)                   \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh)                      \
        ROPE_AVX512_UNROLL for (int k = 0; k < NS; k++)                              \
            ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, k, k == NS - 1 ? ma : (M)-1, \
                                 k == NS - 1 ? mb : (M)-1, c[k], s[k]);
#define ROPE_AVX512_IL_SEP_ROWS(NAME, T, V, P, L, M, LANES, ORDER, EVEN, ODD)        \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int inverse, const int NS)                          \
    {                                                                                \
        const __m512i order = ORDER;                                                 \
        V c[8], s[8];                                                                \
        ROPE_AVX512_UNROLL for (int k = 0; k < NS; k++) {                            \
            const M m = LANES(n - L * k);                                            \
            c[k] = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, cos + L * k)); \
            s[k] = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, sin + L * k)); \
        }                                                                            \
        /* the last step's pairs: 2 (n - L (NS - 1)) lanes over a and b */           \
        const int64_t left = 2 * (n - L * (NS - 1));                                 \
        const M ma = LANES(left), mb = LANES(left - L);                              \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, fmsub, fmadd)           \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, fmadd, fmsub)           \
    }

/* NAME(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse): heads of up to
 * 8 L pairs through SEP (ROPE_AVX512_IL_SEP_ROWS); longer ones in chunks of
 * ROPE_AVX512_IL_CHUNK pairs whose permuted row sits on the stack, the
 * heads one after the other within a chunk. */
#define ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, FM0, FM1)              \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const T *x = xv + h * x_sh + 2 * i0;                                         \
        T *y = yv + h * y_sh + 2 * i0;                                               \
        for (int64_t k = 0; k < steps; k++) {                                        \
            V c = _mm512_loadu_##P(tc + L * k), s = _mm512_loadu_##P(ts + L * k);    \
            ROPE_IN_ZMM(c);                                                          \
            ROPE_IN_ZMM(s);                                                          \
            ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, k, k == steps - 1 ? ma : (M)-1, \
                                 k == steps - 1 ? mb : (M)-1, c, s);                 \
        }                                                                            \
    }
#define ROPE_AVX512_IL_SEP_(SEP, NS) SEP(xv, yv, x_sh, y_sh, n_heads, cos, sin, half, inverse, NS)
#define ROPE_AVX512_IL_WIDE(NAME, SEP, T, V, P, L, M, LANES, ORDER, EVEN, ODD)       \
    ROPE_AVX512 static void NAME(const T *xv, T *yv, int64_t x_sh, int64_t y_sh,     \
                                 int64_t n_heads, const T *cos, const T *sin,        \
                                 int64_t half, int inverse)                          \
    {                                                                                \
        if (half <= 8 * L) {                                                         \
            ROPE_AVX512_NV_SWITCH((half + L - 1) / L, ROPE_AVX512_IL_SEP_, SEP)      \
            return;                                                                  \
        }                                                                            \
        T tc[ROPE_AVX512_IL_CHUNK], ts[ROPE_AVX512_IL_CHUNK];                        \
        const __m512i order = ORDER;                                                 \
        for (int64_t i0 = 0; i0 < half; i0 += ROPE_AVX512_IL_CHUNK) {                \
            const int64_t n = half - i0 < ROPE_AVX512_IL_CHUNK ? half - i0 : ROPE_AVX512_IL_CHUNK; \
            const int64_t steps = (n + L - 1) / L;                                   \
            for (int64_t k = 0; k < steps; k++) {                                    \
                const M m = LANES(n - L * k);                                        \
                _mm512_storeu_##P(tc + L * k, _mm512_permutexvar_##P(                \
                    order, _mm512_maskz_loadu_##P(m, cos + i0 + L * k)));            \
                _mm512_storeu_##P(ts + L * k, _mm512_permutexvar_##P(                \
                    order, _mm512_maskz_loadu_##P(m, sin + i0 + L * k)));            \
            }                                                                        \
            const int64_t left = 2 * (n - L * (steps - 1));                          \
            const M ma = LANES(left), mb = LANES(left - L);                          \
            if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                   \
                ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, fmsub, fmadd)  \
            else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                   \
                ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, fmadd, fmsub)  \
        }                                                                            \
    }

#endif /* ROPE_HAVE_X86 */

#endif
