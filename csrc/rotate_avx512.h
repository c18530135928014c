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

/* ---- added with the float16 and bfloat16 kernels ------------------------- */

/* Keep a vector in a register (any of the 32): stops the compiler from
 * folding a conversion into its store (the memory form of vcvtps2ph is
 * slower on Zen 4, measured). */
#define ROPE_ZMM_IN_REGISTER(v) __asm__("" : "+v"(v))

/* Pairs per chunk of a token's row duplicated on the stack ([c0 c0 c1 c1
 * ...]) by the interleaved float16 kernel for lengths it does not keep in
 * registers. */
#define ROPE_AVX512_CHUNK 512

#endif /* ROPE_HAVE_X86 */

#endif
