/* Run-time dispatch: the registry of instruction sets and which one runs.
 *
 * REGISTRY lists the instruction sets in priority order; each entry (its
 * own file) says whether the CPU and OS can run it and which scalar kernels
 * it replaces. The best supported one is chosen on first use and published
 * atomically; rope_set_isa may force another (the scalar kernels always
 * work). This file holds the only mutable globals of the library besides
 * the thread pool: the ISA choice and the kernel tables, built once.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "pyrope.h"
#include "kernels.h"

/* ---- the registry -------------------------------------------------------- */

/* The entries, each defined in its own file on every platform (supported()
 * is 0 where it cannot run), in priority order: the best supported one wins. */
extern const rope_isa rope_isa_scalar;   /* below */
extern const rope_isa rope_isa_avx2;     /* isa_avx2.c */
extern const rope_isa rope_isa_avx512;       /* isa_avx512.c */
extern const rope_isa rope_isa_avx512bf16;   /* isa_avx512.c */
extern const rope_isa rope_isa_neon;         /* isa_neon.c */
extern const rope_isa rope_isa_neonbf16;     /* isa_neon.c */

static const rope_isa *const REGISTRY[] = {
    &rope_isa_scalar,
    &rope_isa_avx2,
    &rope_isa_avx512,
    &rope_isa_avx512bf16,
    &rope_isa_neon,
    &rope_isa_neonbf16,
};
#define N_ISA ((int)(sizeof REGISTRY / sizeof REGISTRY[0]))

/* ---- the scalar entry: the specification ------------------------------- */

static int scalar_supported(void) { return 1; }

static void pass_scalar(unsigned char *p, int64_t n, uint32_t mask)
{
    for (int64_t i = 0; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}

const rope_isa rope_isa_scalar = {"scalar", scalar_supported, NULL};

#define ROPE_SCALAR_ROW_(code, sfx, T, A, name) \
    [code] = {rope_rot_il_##sfx##_scalar, rope_rot_sh_##sfx##_scalar},

static const rope_kernels SCALAR_KERNELS = {
    .rot = {ROPE_STORAGE_TYPES(ROPE_SCALAR_ROW_)},
    .table_f32 = rope_table_f32_scalar,
    .table_f64 = rope_table_f64_scalar,
    .pass = pass_scalar,
};

/* ---- kernel tables, built once ------------------------------------------- */

static rope_kernels g_tables[N_ISA];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (int i = 0; i < N_ISA; i++) {
        g_tables[i] = SCALAR_KERNELS;
        if (REGISTRY[i]->override)
            REGISTRY[i]->override(&g_tables[i]);
    }
}

/* ---- the choice ---------------------------------------------------------- */

int rope_isa_count(void) { return N_ISA; }

const char *rope_isa_name(int isa)
{
    return isa >= 0 && isa < N_ISA ? REGISTRY[isa]->name : NULL;
}

int rope_isa_supported(int isa)
{
    return isa >= 0 && isa < N_ISA && REGISTRY[isa]->supported();
}

static _Atomic int g_isa = -1; /* -1: not chosen yet */

static int best_isa(void)
{
    for (int i = N_ISA - 1; i > 0; i--)
        if (REGISTRY[i]->supported())
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
    default: return "unknown status";
    }
}
