/* Public entry points for rotation: check every argument and every position
 * before anything is written, then run the chosen token kernel over token
 * ranges, split across threads by size. */
#include <string.h>

#include "pyrope.h"
#include "kernels.h"

/* Largest element offset reached by [n_batch][n_seq][n_heads][extent] under
 * strides (sb, ss, sh), which may be negative: fails on int64 overflow. */
static int span_ok(int64_t n_batch, int64_t n_seq, int64_t n_heads, int64_t extent,
                   int64_t sb, int64_t ss, int64_t sh)
{
    const int64_t n[3] = {n_batch, n_seq, n_heads};
    const int64_t s[3] = {sb, ss, sh};
    int64_t lo = 0, hi = extent;
    for (int k = 0; k < 3; k++) {
        int64_t reach;
        if (__builtin_mul_overflow(n[k] - 1, s[k], &reach))
            return 0;
        if (reach < 0) {
            if (__builtin_add_overflow(lo, reach, &lo))
                return 0;
        } else if (__builtin_add_overflow(hi, reach, &hi)) {
            return 0;
        }
    }
    return 1;
}

/* Is every token's position inside [lo, lo + rows)? (rows < 0: only the
 * +-ROPE_MAX_POSITION range is checked, for the on-the-fly path.) */
static int positions_ok(const int64_t *positions, int64_t p_sb, int64_t p_ss,
                        int64_t offset, int64_t n_batch, int64_t n_seq,
                        int64_t lo, int64_t rows)
{
    if (!positions) {
        int64_t last;
        if (__builtin_add_overflow(offset, n_seq - 1, &last))
            return 0;
        if (rows < 0)
            return rope_position_ok(offset) && rope_position_ok(last);
        return offset >= lo && (uint64_t)last - (uint64_t)lo < (uint64_t)rows;
    }
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t s = 0; s < n_seq; s++) {
            const int64_t pos = positions[b * p_sb + s * p_ss];
            if (rows < 0 ? !rope_position_ok(pos)
                         : pos < lo || (uint64_t)pos - (uint64_t)lo >= (uint64_t)rows)
                return 0;
        }
    return 1;
}

/* One array to rotate: x into out, with element strides. */
typedef struct {
    const char *x;
    char *out;
    int64_t n_heads;
    int64_t x_sb, x_ss, x_sh, o_sb, o_ss, o_sh;
} tensor;

/* Everything a token range needs; read-only while threads run. */
typedef struct {
    tensor t[2];
    int n_tensors, inverse;
    rope_rot_fn rot;
    rope_table_f32_fn table;
    int64_t n_seq, head_dim, rotary_dim, half, elem;
    const int64_t *positions;
    int64_t p_sb, p_ss, offset;
    const float *cos_table, *sin_table;
    int64_t table_start;
    const double *inv_freq;
    double scale;
} job;

/* Rotate tokens [begin, end) (token = b * n_seq + s) of every tensor. */
static void rotate_range(void *ctx, int64_t begin, int64_t end)
{
    const job *j = (const job *)ctx;
    float otf_cos[ROPE_MAX_OTF_HALF], otf_sin[ROPE_MAX_OTF_HALF];
    const size_t tail_bytes = (size_t)((j->head_dim - j->rotary_dim) * j->elem);
    int64_t b = begin / j->n_seq, s = begin % j->n_seq - 1;
    for (int64_t tok = begin; tok < end; tok++) {
        if (++s == j->n_seq) { /* next batch row: no division per token */
            s = 0;
            b++;
        }
        const int64_t pos = j->positions ? j->positions[b * j->p_sb + s * j->p_ss] : j->offset + s;
        const float *c, *sn;
        if (!j->cos_table) {
            /* One row, shared by every head of this token. */
            j->table(&pos, 0, 1, j->inv_freq, j->half, j->scale, otf_cos, otf_sin);
            c = otf_cos;
            sn = otf_sin;
        } else {
            const int64_t r = (int64_t)((uint64_t)pos - (uint64_t)j->table_start);
            c = j->cos_table + r * j->half;
            sn = j->sin_table + r * j->half;
        }
        for (int k = 0; k < j->n_tensors; k++) {
            const tensor *t = &j->t[k];
            const char *xv = t->x + (b * t->x_sb + s * t->x_ss) * j->elem;
            char *ov = t->out + (b * t->o_sb + s * t->o_ss) * j->elem;
            j->rot(xv, ov, t->x_sh, t->o_sh, t->n_heads, c, sn, j->half, j->inverse);
            if (tail_bytes && (const char *)ov != xv)
                for (int64_t h = 0; h < t->n_heads; h++)
                    memcpy(ov + (h * t->o_sh + j->rotary_dim) * j->elem,
                           xv + (h * t->x_sh + j->rotary_dim) * j->elem, tail_bytes);
        }
    }
}

/* n1 * n2 * n3 * n4, saturating at INT64_MAX (only sizes the split). */
static int64_t sat_product(int64_t n1, int64_t n2, int64_t n3, int64_t n4)
{
    int64_t r;
    if (__builtin_mul_overflow(n1, n2, &r) || __builtin_mul_overflow(r, n3, &r) ||
        __builtin_mul_overflow(r, n4, &r))
        return INT64_MAX;
    return r;
}

static int rotate_tensors(int dtype, int layout, int inverse, tensor *t, int n_tensors,
                          int64_t n_batch, int64_t n_seq, int64_t head_dim, int64_t rotary_dim,
                          const int64_t *positions, int64_t p_sb, int64_t p_ss, int64_t offset,
                          const float *cos_table, const float *sin_table,
                          int64_t table_start, int64_t table_rows,
                          const double *inv_freq, double scale, int n_threads)
{
    if (dtype < ROPE_F32 || dtype > ROPE_F64)
        return ROPE_E_DTYPE;
    if (layout != ROPE_INTERLEAVED && layout != ROPE_SPLIT_HALF)
        return ROPE_E_LAYOUT;
    if (head_dim <= 0 || rotary_dim <= 0 || rotary_dim > head_dim ||
        (rotary_dim & 1) || (head_dim & 1))
        return ROPE_E_DIM;
    if (n_batch < 0 || n_seq < 0 || table_rows < 0)
        return ROPE_E_COUNT;
    int64_t heads_total = 0;
    for (int k = 0; k < n_tensors; k++) {
        if (t[k].n_heads < 0)
            return ROPE_E_COUNT;
        heads_total += t[k].n_heads;
    }
    if (n_batch == 0 || n_seq == 0 || heads_total == 0)
        return ROPE_OK; /* nothing to do: no pointer is dereferenced */
    const int64_t half = rotary_dim / 2;
    const int on_the_fly = !cos_table && !sin_table;
    if (on_the_fly ? !inv_freq : (!cos_table || !sin_table))
        return ROPE_E_NULL;
    const size_t esize = (size_t)ROPE_ELEM_SIZE[dtype];
    if (!rope_aligned(positions, 8) || !rope_aligned(inv_freq, 8) ||
        !rope_aligned(cos_table, 4) || !rope_aligned(sin_table, 4))
        return ROPE_E_ALIGN;
    for (int k = 0; k < n_tensors; k++) {
        if (t[k].n_heads == 0)
            continue;
        if (!t[k].x || !t[k].out)
            return ROPE_E_NULL;
        if (!span_ok(n_batch, n_seq, t[k].n_heads, head_dim, t[k].x_sb, t[k].x_ss, t[k].x_sh) ||
            !span_ok(n_batch, n_seq, t[k].n_heads, head_dim, t[k].o_sb, t[k].o_ss, t[k].o_sh))
            return ROPE_E_OVERFLOW;
        if (!rope_aligned(t[k].x, esize) || !rope_aligned(t[k].out, esize))
            return ROPE_E_ALIGN;
        if ((const void *)t[k].out == (const void *)t[k].x &&
            (t[k].o_sb != t[k].x_sb || t[k].o_ss != t[k].x_ss || t[k].o_sh != t[k].x_sh))
            return ROPE_E_OVERLAP;
    }
    if (positions && !span_ok(n_batch, n_seq, 1, 1, p_sb, p_ss, 0))
        return ROPE_E_OVERFLOW;
    if (on_the_fly) {
        if (half > ROPE_MAX_OTF_HALF)
            return ROPE_E_DIM;
        const float probe = 0.0f; /* the check wants output pointers: none written */
        const int st = rope_check_table_args(1, inv_freq, half, scale, &probe, &probe);
        if (st != ROPE_OK)
            return st;
        if (!positions_ok(positions, p_sb, p_ss, offset, n_batch, n_seq, 0, -1))
            return ROPE_E_POSITION;
    } else {
        int64_t table_entries;
        if (__builtin_mul_overflow(table_rows, half, &table_entries))
            return ROPE_E_OVERFLOW;
        if (!positions_ok(positions, p_sb, p_ss, offset, n_batch, n_seq,
                          table_start, table_rows))
            return ROPE_E_POSITION;
    }

    const rope_kernels *kern = rope_active_kernels();
    job j;
    memset(&j, 0, sizeof j);
    int n = 0;
    for (int k = 0; k < n_tensors; k++)
        if (t[k].n_heads > 0)
            j.t[n++] = t[k];
    j.n_tensors = n;
    j.inverse = inverse != 0;
    j.rot = kern->rot[dtype][layout];
    j.table = kern->table_f32;
    j.n_seq = n_seq;
    j.head_dim = head_dim;
    j.rotary_dim = rotary_dim;
    j.half = half;
    j.elem = (int64_t)esize;
    j.positions = positions;
    j.p_sb = p_sb;
    j.p_ss = p_ss;
    j.offset = offset;
    j.cos_table = on_the_fly ? NULL : cos_table;
    j.sin_table = on_the_fly ? NULL : sin_table;
    j.table_start = table_start;
    j.inv_freq = inv_freq;
    j.scale = scale;

    const int64_t n_tokens = n_batch * n_seq; /* fits: span_ok checked it */
    /* Traffic: every element read once and written once. */
    const int64_t bytes = sat_product(n_tokens, heads_total, head_dim, 2 * j.elem);
    rope_parallel_for(rotate_range, &j, n_tokens, rope_threads_for(bytes, n_tokens, n_threads));
    return ROPE_OK;
}

int rope_rotate(int dtype, int layout, int inverse,
                const void *x, void *out,
                int64_t n_batch, int64_t n_seq, int64_t n_heads,
                int64_t head_dim, int64_t rotary_dim,
                int64_t x_sb, int64_t x_ss, int64_t x_sh,
                int64_t o_sb, int64_t o_ss, int64_t o_sh,
                const int64_t *positions, int64_t p_sb, int64_t p_ss,
                int64_t offset,
                const float *cos_table, const float *sin_table,
                int64_t table_start, int64_t table_rows,
                const double *inv_freq, double scale,
                int n_threads)
{
    tensor t = {(const char *)x, (char *)out, n_heads, x_sb, x_ss, x_sh, o_sb, o_ss, o_sh};
    return rotate_tensors(dtype, layout, inverse, &t, 1, n_batch, n_seq, head_dim, rotary_dim,
                          positions, p_sb, p_ss, offset, cos_table, sin_table, table_start,
                          table_rows, inv_freq, scale, n_threads);
}

int rope_rotate_qk(int dtype, int layout, int inverse,
                   const void *q, void *q_out, int64_t q_heads,
                   int64_t q_sb, int64_t q_ss, int64_t q_sh,
                   int64_t qo_sb, int64_t qo_ss, int64_t qo_sh,
                   const void *k, void *k_out, int64_t k_heads,
                   int64_t k_sb, int64_t k_ss, int64_t k_sh,
                   int64_t ko_sb, int64_t ko_ss, int64_t ko_sh,
                   int64_t n_batch, int64_t n_seq, int64_t head_dim, int64_t rotary_dim,
                   const int64_t *positions, int64_t p_sb, int64_t p_ss,
                   int64_t offset,
                   const float *cos_table, const float *sin_table,
                   int64_t table_start, int64_t table_rows,
                   const double *inv_freq, double scale,
                   int n_threads)
{
    tensor t[2] = {
        {(const char *)q, (char *)q_out, q_heads, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh},
        {(const char *)k, (char *)k_out, k_heads, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh},
    };
    return rotate_tensors(dtype, layout, inverse, t, 2, n_batch, n_seq, head_dim, rotary_dim,
                          positions, p_sb, p_ss, offset, cos_table, sin_table, table_start,
                          table_rows, inv_freq, scale, n_threads);
}
