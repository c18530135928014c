/* Internal: what the AVX-512 rotation kernels (rotate_avx512_*.c, one file
 * per storage type) share: the target attributes, the 16-bit storage
 * types' 16-lane conversions (which the stage kernels, stage_avx512.c, use
 * too), masks and the layouts' loops. The kernels are compiled
 * for these targets by function attributes (no global -m flags) and called
 * only after run-time detection (isa_avx512.c). Lane for lane they compute
 * the scalar formula of pair.h, y0 = fma(x0, c, -(x1 * s)),
 * y1 = fma(x1, c, x0 * s), so they match the scalar kernels bit for bit. */
#ifndef PYROPE_ROTATE_AVX512_H
#define PYROPE_ROTATE_AVX512_H

#include "core/kernels.h"
#include "scalar/pair.h"

#ifdef ROPE_HAVE_X86
#include <immintrin.h>

/* AVX-512 F, BW, VL and DQ, with the AVX2/FMA/F16C they extend. */
#define ROPE_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define ROPE_AVX512 __attribute__((target(ROPE_AVX512_TARGET)))
/* The same plus AVX512_BF16 (vcvtne2ps2bf16, vcvtneps2bf16). */
#define ROPE_AVX512BF16 __attribute__((target(ROPE_AVX512_TARGET ",avx512bf16")))

/* ---- added with the float16 and bfloat16 kernels ------------------------- */

/* Keep a vector in a register (any of the 32): stops the compiler from
 * folding a conversion into its store (the memory form of vcvtps2ph is
 * slower on Zen 4, measured). */
#define ROPE_ZMM_IN_REGISTER(v) __asm__("" : "+v"(v))

/* Pairs per chunk of a token's row duplicated on the stack ([c0 c0 c1 c1
 * ...]) by the interleaved float16 kernel for lengths it does not keep in
 * registers. */
#define ROPE_AVX512_CHUNK 512

/* The 16-bit storage types' 16-lane conversions, which the stage kernels
 * (stage_avx512.c) use too: float16 through F16C (round to nearest even,
 * the rounding of convert.h), whole and masked; bfloat16 widened by a word
 * permute, narrowed by the integer rounding of convert.h. */
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

ROPE_AVX512 static inline __m512 ld16_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
ROPE_AVX512 static inline __m512 ld16m_f16(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
ROPE_AVX512 static inline void st16_f16(uint16_t *p, __m512 v)
{
    __m256i h = _mm512_cvtps_ph(v, F16_RNE);
    ROPE_ZMM_IN_REGISTER(h); /* register form, then a plain store */
    _mm256_storeu_si256((__m256i *)p, h);
}
ROPE_AVX512 static inline void st16m_f16(uint16_t *p, __mmask16 m, __m512 v)
{
    __m256i h = _mm512_cvtps_ph(v, F16_RNE);
    ROPE_ZMM_IN_REGISTER(h);
    _mm256_mask_storeu_epi16(p, m, h);
}

/* Elements 0..15 (a) or 16..31 (b) of a vector of 32 as float32: each word
 * moved to the high half of a lane, the low half zeroed (one permute). */
ROPE_AVX512 static inline __m512 bf16_widen_a(__m512i v)
{
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                         7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, v));
}
ROPE_AVX512 static inline __m512 bf16_widen_b(__m512i v)
{
    const __m512i idx = _mm512_set_epi16(31, 0, 30, 0, 29, 0, 28, 0, 27, 0, 26, 0, 25, 0, 24, 0,
                                         23, 0, 22, 0, 21, 0, 20, 0, 19, 0, 18, 0, 17, 0, 16, 0);
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, v));
}

/* u + 0x7FFF + lsb: bfloat16 rounded to nearest even in the high half,
 * exactly as convert.h. 0x7FFF + lsb without a shift (shifts compete with
 * the conversions for the same pipes on Zen 4; 15% faster, measured):
 * (u & 0x10000) | 0x7FFF is 0x7FFF or 0x17FFF, its minimum with 0x8000 is
 * 0x7FFF + lsb. */
ROPE_AVX512 static inline __m512i bf16_round_hi(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i t = _mm512_ternarylogic_epi32(u, _mm512_set1_epi32(0x10000), _mm512_set1_epi32(0x7FFF),
                                                0xEA); /* (u & b) | c */
    return _mm512_add_epi32(u, _mm512_min_epu32(t, _mm512_set1_epi32(0x8000)));
}

/* 16 float32 to 16 bfloat16 in order (split-half tails, the stage
 * kernels' narrowing); tm: the words that will be stored. */
ROPE_AVX512 static inline __m256i bf16_narrow16_int(__m512 v, __mmask16 tm)
{
    (void)tm;
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_round_hi(v), 16));
}
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

/* Pairs in the next part of a head with `left` pairs to go, parts of at
 * most `most` pairs, so that no part but a whole head has fewer than L
 * pairs: a part's last vector can then end at its last pair (below). */
#define ROPE_AVX512_PART(left, most, L)                                              \
    ((left) <= (most) ? (left) : (left) - (most) < (L) ? (most) - (L) : (most))

/* Calls the AVX2 kernels do faster (Zen 4, measured), which an AVX-512
 * entry hands over to them:
 *  - split half, heads of fewer than L pairs so close together that the
 *    head after next is read while this head's masked stores are in flight
 *    (below: 2 x_sh < half + L; 2-3x slower at head_dim 2-10, measured);
 *  - split half, heads of more than 8 L pairs, not a whole number of
 *    vectors: one half of every head is then off a 64-byte boundary
 *    throughout, and a 64-byte access there always straddles two cache
 *    lines where a 32-byte one does every other time (0.6-0.8x, measured);
 *  - interleaved, heads of at most L/2 pairs with 2 x_sh < L (the same as
 *    the first). */
#define ROPE_AVX512_SH_TO_AVX2(half, x_sh, L)                                        \
    (((half) < (L) && (x_sh) < ((half) + (L) + 1) / 2) || ((half) > 8 * (L) && (half) % (L)))
#define ROPE_AVX512_IL_TO_AVX2(half, x_sh, L) (2 * (half) <= (L) && (x_sh) < ((L) + 1) / 2)
/* (2 x_sh < S as x_sh < (S + 1) / 2: a call of one head may give any head
 * stride, INT64_MIN too, which doubled would overflow.) */

/* Pairs per interleaved chunk whose permuted cos/sin sit on the stack (the
 * deinterleaving kernel, heads longer than the registers hold). */
#define ROPE_AVX512_IL_CHUNK 512

/* ---- split half ---------------------------------------------------------- */

/* The last vector of a head's pairs, where they are not a whole number of
 * vectors: never a masked vector reaching past the pairs, because its
 * store and the next load of those bytes (the other coordinate, the next
 * head) would overlap in address, and a load overlapping a store still in
 * flight waits for it to retire (Zen 4: a head of 40 pairs 4x slower than
 * AVX2, measured). Instead the last vector ends at the last pair and
 * overlaps the one before it: it is read before that one is written and
 * written after it, with the same values for the lanes both hold (the same
 * inputs, the same formula), so in place stays exact. Only a part of fewer
 * than L pairs takes one masked vector. */

/* Split half with the row in registers, NAME(x, y, x_sh, y_sh, n_heads, cos,
 * sin, n, off1, inverse, NV): pairs [0, n) of every head, a pair's second
 * coordinate off1 elements after its first, NV = ceil(n / L) <= 8 vectors
 * per half, the last one at n - L (above; masked if NV == 1). The row's
 * vectors (2 NV registers) are loaded once and stay in registers while the
 * heads go by. The inverse swaps fmsub and fmadd: with s' = -s,
 * x1*s' = -(x1*s) exactly (rounding to nearest is symmetric), so
 * y0 = fma(x0, c, -(x1*s')) = fmadd(x0, c, x1*s), y1 = fmsub(x1, c, x0*s):
 * the bits of rotate.c. */
#define ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, X0, X1, C, S, M0, M1)                   \
    do {                                                                             \
        _mm512_mask_storeu_##P(y + (M0), M1, _mm512_##FM0##_##P(X0, C, _mm512_mul_##P(X1, S))); \
        _mm512_mask_storeu_##P(y + off1 + (M0), M1,                                  \
                               _mm512_##FM1##_##P(X1, C, _mm512_mul_##P(X0, S)));    \
    } while (0)
#define ROPE_AVX512_SH_HEADS_(T, V, P, L, M, FM0, FM1)                               \
    if (NV == 1) { /* one masked vector a half: next head read before this one is written */ \
        V a = _mm512_maskz_loadu_##P(mt, x), b = _mm512_maskz_loadu_##P(mt, x + off1); \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            const int more = h + 1 < n_heads;                                        \
            const T *xn = more ? x + x_sh : x;                                       \
            V an = _mm512_maskz_loadu_##P(more ? mt : 0, xn); /* no lane: no access */ \
            V bn = _mm512_maskz_loadu_##P(more ? mt : 0, xn + off1);                 \
            ROPE_IN_ZMM(an);                                                         \
            ROPE_IN_ZMM(bn);                                                         \
            ROPE_PREFETCH(x, rope_prefetch_heads(x_sh, 4));                                       \
            ROPE_PREFETCH(x + off1, rope_prefetch_heads(x_sh, 4));                                \
            ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, a, b, c[0], s[0], 0, mt);           \
            a = an;                                                                  \
            b = bn;                                                                  \
        }                                                                            \
    } else                                                                           \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            V at = _mm512_loadu_##P(x + last), bt = _mm512_loadu_##P(x + off1 + last); \
            ROPE_IN_ZMM(at);                                                         \
            ROPE_IN_ZMM(bt);                                                         \
            ROPE_AVX512_UNROLL for (int v = 0; v < NV - 1; v++) {                    \
                V a = _mm512_loadu_##P(x + L * v), b = _mm512_loadu_##P(x + off1 + L * v); \
                ROPE_IN_ZMM(a);                                                      \
                ROPE_IN_ZMM(b);                                                      \
                ROPE_PREFETCH(x + L * v, rope_prefetch_heads(x_sh, 4));                           \
                ROPE_PREFETCH(x + off1 + L * v, rope_prefetch_heads(x_sh, 4));                    \
                ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, a, b, c[v], s[v], L * v, (M)-1); \
            }                                                                        \
            ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, at, bt, c[NV - 1], s[NV - 1], last, (M)-1); \
        }
#define ROPE_AVX512_SH_ROWS(NAME, T, V, P, L, M, LANES)                              \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int64_t off1, int inverse, const int NV)            \
    {                                                                                \
        const int64_t last = NV == 1 ? 0 : n - L; /* the last vector's first pair */ \
        const M mt = NV == 1 ? LANES(n) : (M)-1;  /* and its lanes */                \
        V c[8], s[8];                                                                \
        ROPE_AVX512_UNROLL for (int v = 0; v < NV; v++) {                            \
            c[v] = _mm512_maskz_loadu_##P(mt, cos + (v < NV - 1 ? L * v : last));    \
            s[v] = _mm512_maskz_loadu_##P(mt, sin + (v < NV - 1 ? L * v : last));    \
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
                ROPE_PREFETCH(xa + L * j, 8 * half);                          \
                ROPE_PREFETCH(xa + half + L * j, 8 * half);                   \
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
 * longer heads head by head with the row read along (every head is read
 * once, front to back: streamed data keeps its order). */
#define ROPE_AVX512_SH(NAME, ROWS, FLAT, T, V, P, L, M)                              \
    ROPE_AVX512 static void NAME(const T *x, T *y, int64_t x_sh, int64_t y_sh,       \
                                 int64_t n_heads, const T *cos, const T *sin,        \
                                 int64_t half, int inverse)                          \
    {                                                                                \
        const int64_t mis = (int64_t)((uintptr_t)x & 63) / (int64_t)sizeof(T);       \
        if (mis && half % L == 0 && half <= 8 * L && x_sh == 2 * half && y_sh == 2 * half) { \
            ROPE_AVX512_NV_SWITCH(half / L, ROPE_AVX512_SH_FLAT_, FLAT)              \
        } else if (half <= 8 * L) {                                                  \
            ROPE_AVX512_NV_SWITCH((half + L - 1) / L, ROPE_AVX512_SH_ALL_, ROWS)     \
        } else if (!inverse) { /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */              \
            ROPE_AVX512_SH_LONG_(T, V, P, L, M, fmsub, fmadd)                        \
        } else {               /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */              \
            ROPE_AVX512_SH_LONG_(T, V, P, L, M, fmadd, fmsub)                        \
        }                                                                            \
    }
#define ROPE_AVX512_SH_FLAT_(F, NVH) F(x, y, n_heads, cos, sin, half, mis, inverse, NVH)
#define ROPE_AVX512_SH_ALL_(F, NV) F(x, y, x_sh, y_sh, n_heads, cos, sin, half, half, inverse, NV)
/* Heads longer than the registers hold: head by head, the row read again
 * with each vector (a 64-byte load a cycle leaves room for it beside the
 * store every two), two vectors an iteration (5-10% faster than one). The
 * vectors between the first and the last start on 64-byte boundaries of x
 * (of x1 as well when half is a multiple of L); the first (pairs 0..) and
 * the last (pairs half - L..) overlap their neighbours: read first,
 * written last. */
#define ROPE_AVX512_SH_LONG_(T, V, P, L, M, FM0, FM1)                                \
    {                                                                                \
        const int64_t last = half - L, off1 = half;                                  \
        V ct = _mm512_loadu_##P(cos + last), st = _mm512_loadu_##P(sin + last);      \
        V ch = _mm512_loadu_##P(cos), sh = _mm512_loadu_##P(sin);                    \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            const int64_t m0 = (int64_t)((uintptr_t)x & 63) / (int64_t)sizeof(T);    \
            V ah = _mm512_loadu_##P(x), bh = _mm512_loadu_##P(x + off1);             \
            V at = _mm512_loadu_##P(x + last), bt = _mm512_loadu_##P(x + off1 + last); \
            ROPE_IN_ZMM(ah);                                                         \
            ROPE_IN_ZMM(bh);                                                         \
            ROPE_IN_ZMM(at);                                                         \
            ROPE_IN_ZMM(bt);                                                         \
            _Pragma("GCC unroll 2") for (int64_t i = L - m0; i < last; i += L) {     \
                V c = _mm512_loadu_##P(cos + i), s = _mm512_loadu_##P(sin + i);      \
                V a = _mm512_loadu_##P(x + i), b = _mm512_loadu_##P(x + off1 + i);   \
                ROPE_IN_ZMM(c);                                                      \
                ROPE_IN_ZMM(s);                                                      \
                ROPE_IN_ZMM(a);                                                      \
                ROPE_IN_ZMM(b);                                                      \
                ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, a, b, c, s, i, (M)-1);          \
            }                                                                        \
            ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, ah, bh, ch, sh, 0, (M)-1);          \
            ROPE_AVX512_SH_STEP_(V, P, FM0, FM1, at, bt, ct, st, last, (M)-1);       \
        }                                                                            \
    }

/* ---- interleaved --------------------------------------------------------- */

/* Interleaved with the row duplicated in registers, NAME(x, y, x_sh, y_sh,
 * n_heads, cos, sin, n, inverse, NV): pairs [0, n) of every head, NV =
 * ceil(2n / L) <= 8 vectors of L/2 pairs, the last one at pair n - L/2
 * (see split half; masked if NV == 1). The row's cos and sin duplicated to
 * pair order (c0 c0 c1 c1 ...) stay in registers, 2 NV at most 16: per row
 * vector one vpermps/vpermpd to ORDER (ROPE_AVX512_IL_WIDE) and the in-lane
 * unpcklps/unpckhps of it with itself, which do not compete with the FMAs.
 * A vector v becomes fmaddsub(v, C, SWAP(v) * S), SWAP exchanging the two
 * coordinates of each pair (vpermilps/vpermilpd, in-lane too): even lanes
 * x0*c - x1*s, odd lanes x1*c + x0*s, one rounded product and one fused
 * multiply-add each, as specified. The inverse takes fmsubadd: with
 * s' = -s, x1*s' = -(x1*s) exactly, so fma(x0, c, -(x1*s')) = x0*c + x1*s
 * in one rounding. */
#define ROPE_AVX512_IL_STEP1_(P, FM, SWAP, A, CV, SV, OFF, MASK)                     \
    _mm512_mask_storeu_##P(y + (OFF), MASK,                                          \
                           _mm512_##FM##_##P(A, CV, _mm512_mul_##P(SWAP(A), SV)))
#define ROPE_AVX512_IL_HEADS_(V, P, L, M, FM, SWAP)                                  \
    if (NV == 1) { /* one masked vector: next head read before this one is written */ \
        V a = _mm512_maskz_loadu_##P(mt, x);                                         \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            const int more = h + 1 < n_heads; /* no lane: no access */               \
            V an = _mm512_maskz_loadu_##P(more ? mt : 0, more ? x + x_sh : x);       \
            ROPE_IN_ZMM(an);                                                         \
            ROPE_PREFETCH(x, rope_prefetch_heads(x_sh, 4));                                       \
            ROPE_AVX512_IL_STEP1_(P, FM, SWAP, a, C[0], S[0], 0, mt);                \
            a = an;                                                                  \
        }                                                                            \
    } else                                                                           \
        for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                \
            V at = _mm512_loadu_##P(x + 2 * last);                                   \
            ROPE_IN_ZMM(at);                                                         \
            ROPE_AVX512_UNROLL for (int v = 0; v < NV - 1; v++) {                    \
                V a = _mm512_loadu_##P(x + L * v);                                   \
                ROPE_IN_ZMM(a);                                                      \
                ROPE_PREFETCH(x + L * v, rope_prefetch_heads(x_sh, 4));                           \
                ROPE_AVX512_IL_STEP1_(P, FM, SWAP, a, C[v], S[v], L * v, (M)-1);     \
            }                                                                        \
            ROPE_AVX512_IL_STEP1_(P, FM, SWAP, at, C[NV - 1], S[NV - 1], 2 * last, (M)-1); \
        }
#define ROPE_AVX512_IL_ROWS(NAME, T, V, P, L, M, LANES, ORDER, SWAP)                 \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int inverse, const int NV)                          \
    {                                                                                \
        const __m512i order = ORDER;                                                 \
        const int64_t last = NV == 1 ? 0 : n - L / 2; /* the last vector's first pair */ \
        const M mt = NV == 1 ? LANES(2 * n) : (M)-1;   /* and its lanes */           \
        V C[8], S[8];                                                                \
        /* a whole number of vectors: the last one is no different */               \
        const int whole = NV > 1 && 2 * n == L * NV;                                 \
        ROPE_AVX512_UNROLL for (int k = 0; 2 * k < NV; k++) {                        \
            if (2 * k == NV - 1 && !whole)                                           \
                break;                                                               \
            const M m = LANES(n - L * k);                                            \
            const V cv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, cos + L * k)); \
            const V sv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, sin + L * k)); \
            C[2 * k] = _mm512_unpacklo_##P(cv, cv);                                  \
            S[2 * k] = _mm512_unpacklo_##P(sv, sv);                                  \
            if (2 * k + 1 < NV - 1 || (2 * k + 1 == NV - 1 && whole)) {              \
                C[2 * k + 1] = _mm512_unpackhi_##P(cv, cv);                          \
                S[2 * k + 1] = _mm512_unpackhi_##P(sv, sv);                          \
            }                                                                        \
        }                                                                            \
        if (!whole) { /* pairs last .. last + L/2 - 1 (NV == 1: 0 .. n - 1) */       \
            const M m = LANES(NV == 1 ? n : L / 2);                                  \
            const V cv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, cos + last)); \
            const V sv = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, sin + last)); \
            C[NV - 1] = _mm512_unpacklo_##P(cv, cv);                                 \
            S[NV - 1] = _mm512_unpacklo_##P(sv, sv);                                 \
        }                                                                            \
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
 * separated coordinates. A head's last step ends at its last pair (see
 * split half; masked only for fewer than L pairs). */
#define ROPE_AVX512_IL_LOAD_(V, P, L, VA, VB, PAIR, MA, MB)                          \
    V VA = _mm512_maskz_loadu_##P(MA, x + 2 * (PAIR));                               \
    V VB = _mm512_maskz_loadu_##P(MB, x + 2 * (PAIR) + L);                           \
    ROPE_IN_ZMM(VA);                                                                 \
    ROPE_IN_ZMM(VB)
#define ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, VA, VB, PAIR, MA, MB, CV, SV) \
    do {                                                                             \
        const V e = _mm512_shuffle_##P(VA, VB, EVEN), o = _mm512_shuffle_##P(VA, VB, ODD); \
        const V y0 = _mm512_##FM0##_##P(e, CV, _mm512_mul_##P(o, SV));               \
        const V y1 = _mm512_##FM1##_##P(o, CV, _mm512_mul_##P(e, SV));               \
        _mm512_mask_storeu_##P(y + 2 * (PAIR), MA, _mm512_unpacklo_##P(y0, y1));     \
        _mm512_mask_storeu_##P(y + 2 * (PAIR) + L, MB, _mm512_unpackhi_##P(y0, y1)); \
    } while (0)

/* NAME(x, y, x_sh, y_sh, n_heads, cos, sin, n, inverse, NS): pairs [0, n)
 * of every head in NS = ceil(n / L) <= 8 steps, the permuted row in 2 NS
 * registers. */
#define ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, FM0, FM1)                   \
    for (int64_t h = 0; h < n_heads; h++, x += x_sh, y += y_sh) {                    \
        ROPE_AVX512_IL_LOAD_(V, P, L, at, bt, last, ma, mb);                         \
        ROPE_AVX512_UNROLL for (int k = 0; k < NS - 1; k++) {                        \
            ROPE_AVX512_IL_LOAD_(V, P, L, a, b, L * k, (M)-1, (M)-1);                \
            ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, a, b, L * k, (M)-1, (M)-1, c[k], s[k]); \
        }                                                                            \
        ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, at, bt, last, ma, mb, c[NS - 1], \
                             s[NS - 1]);                                             \
    }
#define ROPE_AVX512_IL_SEP_ROWS(NAME, T, V, P, L, M, LANES, ORDER, EVEN, ODD)        \
    ROPE_AVX512 static inline __attribute__((always_inline)) void NAME(              \
        const T *x, T *y, int64_t x_sh, int64_t y_sh, int64_t n_heads, const T *cos, \
        const T *sin, int64_t n, int inverse, const int NS)                          \
    {                                                                                \
        const __m512i order = ORDER;                                                 \
        const int64_t last = NS == 1 ? 0 : n - L;  /* the last step's first pair */  \
        const M ma = NS == 1 ? LANES(2 * n) : (M)-1, mb = NS == 1 ? LANES(2 * n - L) : (M)-1; \
        V c[8], s[8];                                                                \
        ROPE_AVX512_UNROLL for (int k = 0; k < NS; k++) {                            \
            const M m = NS == 1 ? LANES(n) : (M)-1;                                  \
            const int64_t i = k < NS - 1 ? L * k : last;                             \
            c[k] = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, cos + i)); \
            s[k] = _mm512_permutexvar_##P(order, _mm512_maskz_loadu_##P(m, sin + i)); \
        }                                                                            \
        if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                       \
            ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, fmsub, fmadd)           \
        else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                       \
            ROPE_AVX512_IL_SEP_HEADS_(V, P, L, M, EVEN, ODD, fmadd, fmsub)           \
    }

/* NAME(x, y, x_sh, y_sh, n_heads, cos, sin, half, inverse): heads of up to
 * 8 L pairs through SEP (ROPE_AVX512_IL_SEP_ROWS); longer ones in chunks of
 * up to ROPE_AVX512_IL_CHUNK pairs (ROPE_AVX512_PART: at least L) whose
 * permuted row sits on the stack, the heads one after the other within a
 * chunk. */
#define ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, FM0, FM1)              \
    for (int64_t h = 0; h < n_heads; h++) {                                          \
        const T *x = xv + h * x_sh + 2 * i0;                                         \
        T *y = yv + h * y_sh + 2 * i0;                                               \
        ROPE_AVX512_IL_LOAD_(V, P, L, at, bt, n - L, (M)-1, (M)-1);                  \
        for (int64_t k = 0; k < steps - 1; k++) {                                    \
            V c = _mm512_loadu_##P(tc + L * k), s = _mm512_loadu_##P(ts + L * k);    \
            ROPE_IN_ZMM(c);                                                          \
            ROPE_IN_ZMM(s);                                                          \
            ROPE_AVX512_IL_LOAD_(V, P, L, a, b, L * k, (M)-1, (M)-1);                \
            ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, a, b, L * k, (M)-1, (M)-1, c, s); \
        }                                                                            \
        ROPE_AVX512_IL_STEP_(V, P, L, EVEN, ODD, FM0, FM1, at, bt, n - L, (M)-1, (M)-1, ct, st); \
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
        for (int64_t i0 = 0, n; i0 < half; i0 += n) {                                \
            n = ROPE_AVX512_PART(half - i0, ROPE_AVX512_IL_CHUNK, L);                \
            const int64_t steps = (n + L - 1) / L; /* the last at pair n - L */      \
            for (int64_t k = 0; k < steps - 1; k++) {                                \
                _mm512_storeu_##P(tc + L * k, _mm512_permutexvar_##P(                \
                    order, _mm512_loadu_##P(cos + i0 + L * k)));                     \
                _mm512_storeu_##P(ts + L * k, _mm512_permutexvar_##P(                \
                    order, _mm512_loadu_##P(sin + i0 + L * k)));                     \
            }                                                                        \
            const V ct = _mm512_permutexvar_##P(order, _mm512_loadu_##P(cos + i0 + n - L)); \
            const V st = _mm512_permutexvar_##P(order, _mm512_loadu_##P(sin + i0 + n - L)); \
            if (!inverse) /* y0 = x0*c - x1*s, y1 = x1*c + x0*s */                   \
                ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, fmsub, fmadd)  \
            else          /* y0 = x0*c + x1*s, y1 = x1*c - x0*s */                   \
                ROPE_AVX512_IL_CHUNK_HEADS_(T, V, P, L, M, EVEN, ODD, fmadd, fmsub)  \
        }                                                                            \
    }

#endif /* ROPE_HAVE_X86 */

#endif
