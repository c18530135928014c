/* The scalar entry of the instruction-set registry: the specification,
 * always supported, and its kernel table, which every other entry's starts
 * from (rope_scalar_kernels): the scalar rotation kernels of every storage
 * type in the list (rotate.c), the tables (table.c, table_f64.c), the stage
 * kernels (stage.c), the quantisers (quant.c) and the yardstick's byte-wise pass. */
#include "scalar.h"

static int scalar_supported(void) { return 1; }

static void pass_scalar(unsigned char *p, int64_t n, uint32_t mask)
{
    for (int64_t i = 0; i < n; i++)
        p[i] ^= (unsigned char)(mask >> (8 * (i & 3)));
}

const rope_isa rope_isa_scalar = {"scalar", scalar_supported, NULL, ""};

#define ROPE_SCALAR_ROW_(code, sfx, T, A, name) \
    [code] = {rope_rot_il_##sfx##_scalar, rope_rot_sh_##sfx##_scalar},

#define ROPE_SCALAR_STAGES_(code, sfx, T, A, name) [code] = rope_sumsq_##sfx##_scalar,
#define ROPE_SCALAR_NORMS_(code, sfx, T, A, name) [code] = rope_normalise_##sfx##_scalar,
#define ROPE_SCALAR_WIDEN_(code, sfx, T, A, name) [code] = rope_widen_##sfx##_scalar,
#define ROPE_SCALAR_NARROW_(code, sfx, T, A, name) [code] = rope_narrow_float_##sfx##_scalar,

const rope_kernels rope_scalar_kernels = {
    .rot = {ROPE_STORAGE_TYPES(ROPE_SCALAR_ROW_)},
    .sumsq = {ROPE_STORAGE_TYPES(ROPE_SCALAR_STAGES_)},
    .normalise = {ROPE_STORAGE_TYPES(ROPE_SCALAR_NORMS_)},
    .widen = {ROPE_STORAGE_TYPES(ROPE_SCALAR_WIDEN_)},
    .narrow_float = {ROPE_STORAGE_TYPES(ROPE_SCALAR_NARROW_)},
    .narrow_double = {[ROPE_F32] = rope_narrow_double_f32_scalar, [ROPE_F64] = rope_narrow_double_f64_scalar},
    .duplicate_row = rope_duplicate_row_scalar,
    .quantise = {[ROPE_QUANT_INT8] = rope_quantise_int8_scalar, [ROPE_QUANT_FP8_E4M3] = rope_quantise_fp8_scalar,
                 [ROPE_QUANT_Q8_0] = rope_quantise_q8_0_scalar},
    .dequantise = {[ROPE_QUANT_INT8] = rope_dequantise_int8_scalar,
                   [ROPE_QUANT_FP8_E4M3] = rope_dequantise_fp8_scalar,
                   [ROPE_QUANT_Q8_0] = rope_dequantise_q8_0_scalar},
    .table_f32 = rope_table_f32_scalar,
    .table_f64 = rope_table_f64_scalar,
    .pass = pass_scalar,
};
