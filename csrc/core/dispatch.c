/* Run-time dispatch: the registry of instruction sets and which one runs.
 *
 * REGISTRY lists the instruction sets in priority order; each entry (its
 * own folder, isa/<name>/; the scalar one in scalar/) says whether the CPU
 * and OS can run it and which kernels it replaces. The best supported one is chosen on first use and published
 * atomically; rope_set_isa may force another (the scalar kernels always
 * work). This file holds the only mutable globals of the library besides
 * the thread pool: the ISA choice and the kernel tables, built once.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "pyrope.h"
#include "core/kernels.h"
#include "scalar/scalar.h"

/* ---- the registry -------------------------------------------------------- */

/* The entries, each defined in its own folder on every platform (supported()
 * is 0 where it cannot run), in priority order: the best supported one wins.
 * An entry with a base builds on it: its kernel table starts as a copy of
 * the base's (else of the scalar one), and it is supported only where its
 * base is (which REGISTRY lists before it). Nothing outside an instruction
 * set's folder but this list names it. */
extern const rope_isa rope_isa_scalar;       /* scalar/isa_scalar.c */
extern const rope_isa rope_isa_avx2;         /* isa/avx2/ */
extern const rope_isa rope_isa_avx512;       /* isa/avx512/ */
extern const rope_isa rope_isa_avx512bf16;   /* isa/avx512/ */
extern const rope_isa rope_isa_neon;         /* isa/neon/ */
extern const rope_isa rope_isa_neonbf16;     /* isa/neon/ */

static const struct {
    const rope_isa *isa, *base;
} REGISTRY[] = {
    {&rope_isa_scalar, NULL},
    {&rope_isa_avx2, NULL},
    {&rope_isa_avx512, &rope_isa_avx2},
    {&rope_isa_avx512bf16, &rope_isa_avx512},
    {&rope_isa_neon, NULL},
    {&rope_isa_neonbf16, &rope_isa_neon},
};
#define N_ISA ((int)(sizeof REGISTRY / sizeof REGISTRY[0]))

int rope_isa_base(int isa)
{
    if (isa >= 0 && isa < N_ISA)
        for (int b = 0; b < isa; b++)
            if (REGISTRY[b].isa == REGISTRY[isa].base)
                return b;
    return -1;
}

const char *rope_isa_features(int isa)
{
    return isa >= 0 && isa < N_ISA ? REGISTRY[isa].isa->features : NULL;
}

/* ---- kernel tables, built once ------------------------------------------- */

static rope_kernels g_tables[N_ISA];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (int i = 0; i < N_ISA; i++) {
        const int base = rope_isa_base(i);
        g_tables[i] = base >= 0 ? g_tables[base] : rope_scalar_kernels;
        if (REGISTRY[i].isa->override)
            REGISTRY[i].isa->override(&g_tables[i]);
    }
}

/* ---- the choice ---------------------------------------------------------- */

int rope_isa_count(void) { return N_ISA; }

const char *rope_isa_name(int isa)
{
    return isa >= 0 && isa < N_ISA ? REGISTRY[isa].isa->name : NULL;
}

/* The base first: an entry's own check may rely on it (AVX-512's XGETBV
 * needs the OSXSAVE that AVX2's check finds). */
int rope_isa_supported(int isa)
{
    if (isa < 0 || isa >= N_ISA)
        return 0;
    const int base = rope_isa_base(isa);
    if (REGISTRY[isa].base && !rope_isa_supported(base))
        return 0;
    return REGISTRY[isa].isa->supported();
}

static _Atomic int g_isa = -1; /* -1: not chosen yet */

static int best_isa(void)
{
    for (int i = N_ISA - 1; i > 0; i--)
        if (rope_isa_supported(i))
            return i;
    return 0;
}

int rope_get_isa(void)
{
    int isa = atomic_load(&g_isa);
    if (isa < 0) {
        int expected = -1;
        atomic_compare_exchange_strong(&g_isa, &expected, best_isa());
        isa = atomic_load(&g_isa);
    }
    return isa;
}

int rope_set_isa(int isa)
{
    if (!rope_isa_supported(isa))
        return ROPE_E_ISA;
    atomic_store(&g_isa, isa);
    return ROPE_OK;
}

const rope_kernels *rope_active_kernels(void)
{
    pthread_once(&g_tables_once, build_tables);
    return &g_tables[rope_get_isa()];
}

const rope_kernels *rope_isa_kernels(int isa)
{
    if (isa < 0 || isa >= N_ISA)
        return NULL;
    pthread_once(&g_tables_once, build_tables);
    return &g_tables[isa];
}

/* ---- storage types ------------------------------------------------------- */

#define ROPE_DTYPE_NAME_(code, sfx, T, A, name) [code] = name,
static const char *const DTYPE_NAMES[ROPE_N_DTYPES] = {ROPE_STORAGE_TYPES(ROPE_DTYPE_NAME_)};

int rope_dtype_count(void) { return ROPE_N_DTYPES; }

const char *rope_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < ROPE_N_DTYPES ? DTYPE_NAMES[dtype] : NULL;
}

int rope_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < ROPE_N_DTYPES ? (int)ROPE_ELEM_SIZE[dtype] : 0;
}

/* ---- status -------------------------------------------------------------- */

const char *rope_strerror(int status)
{
    switch (status) {
    case ROPE_OK: return "success";
    case ROPE_E_NULL: return "a required pointer is NULL";
    case ROPE_E_DIM: return "head_dim and rotary_dim must be even with 0 < rotary_dim <= head_dim";
    case ROPE_E_LAYOUT: return "layout must be interleaved or split_half";
    case ROPE_E_DTYPE: return "the storage type is not supported";
    case ROPE_E_COUNT: return "a count is negative or out of range";
    case ROPE_E_POSITION: return "a position lies outside the table or the supported range";
    case ROPE_E_OVERFLOW: return "a size or index computation would overflow";
    case ROPE_E_ISA: return "the instruction set is not supported by this CPU or OS";
    case ROPE_E_VALUE: return "a frequency or the scale is not finite or out of range";
    case ROPE_E_OVERLAP: return "an output overlaps what the call reads (x at its start with other strides, "
                                "or the positions, tables, frequencies or descriptors)";
    case ROPE_E_ALIGN: return "a pointer is not aligned to its element type";
    case ROPE_E_SOURCE: return "the position source or its pair-to-component map is invalid";
    case ROPE_E_SLOT: return "a cache slot lies outside the cache";
    case ROPE_E_STAGE: return "a stage or quant is invalid (kind, norm, eps, type conversion, in_place without slots or with a norm or copy)";
    default: return "unknown status";
    }
}
