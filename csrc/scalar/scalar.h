/* Internal: the scalar kernels, the specification every instruction set
 * must match bit for bit (rotate.c, table.c, table_f64.c), and the scalar
 * registry entry (isa_scalar.c), whose kernel table is where every other
 * entry's starts. */
#ifndef PYROPE_SCALAR_H
#define PYROPE_SCALAR_H

#include "core/kernels.h"

/* The scalar kernels (rotate.c, table.c, table_f64.c), one rotation
 * kernel per (layout, storage type): rope_rot_{il,sh}_<suffix>_scalar. */
#define ROPE_DECLARE_SCALAR_ROT_(code, sfx, T, A, name)                         \
    void rope_rot_il_##sfx##_scalar(ROPE_ROT_PARAMS);                          \
    void rope_rot_sh_##sfx##_scalar(ROPE_ROT_PARAMS);
ROPE_STORAGE_TYPES(ROPE_DECLARE_SCALAR_ROT_)
/* The stage kernels (stage.c), per storage type. */
#define ROPE_DECLARE_SCALAR_STAGE_(code, sfx, T, A, name)                       \
    void rope_sumsq_##sfx##_scalar(const void *x, int64_t n, double acc[8]);   \
    void rope_normalise_##sfx##_scalar(const void *x, int64_t n, double inv,   \
                                       const double *w, void *out);            \
    void rope_widen_##sfx##_scalar(const void *x, int64_t n, void *out);       \
    void rope_narrow_float_##sfx##_scalar(const void *in, int64_t n, void *out);
ROPE_STORAGE_TYPES(ROPE_DECLARE_SCALAR_STAGE_)
void rope_narrow_double_f32_scalar(const void *in, int64_t n, void *out);
void rope_duplicate_row_scalar(const float *cos, const float *sin, int64_t half, float *dup_cos, float *dup_sin);
void rope_narrow_double_f64_scalar(const void *in, int64_t n, void *out);
/* The quantisers (quant.c), per ROPE_QUANT_* kind. */
#define ROPE_DECLARE_SCALAR_QUANT_(kind)                                        \
    void rope_quantise_##kind##_scalar(const float *in, int64_t n, void *out, float *scale); \
    void rope_dequantise_##kind##_scalar(const void *in, int64_t n, float scale, float *out);
ROPE_DECLARE_SCALAR_QUANT_(int8)
ROPE_DECLARE_SCALAR_QUANT_(fp8)
ROPE_DECLARE_SCALAR_QUANT_(q8_0)
#undef ROPE_DECLARE_SCALAR_QUANT_
void rope_table_f32_scalar(ROPE_TABLE_PARAMS);
void rope_table_f64_scalar(ROPE_TABLE_F64_PARAMS);

/* The scalar entry of the registry and its kernel table. */
extern const rope_isa rope_isa_scalar;
extern const rope_kernels rope_scalar_kernels;

#endif
