/* rope_rotate: check the op, every tensor and every position before anything
 * is written, then run the chosen token kernel over token ranges, split
 * across threads by size. One cos/sin row per token (angles.c) serves every
 * head of every tensor of the call. */
#include <stdatomic.h>
#include <string.h>

#include "core/angles.h"
#include "core/checks.h"
#include "core/threads.h"

/* Does [n_batch][n_seq][n_heads][extent] under strides (sb, ss, sh), which
 * may be negative, stay within int64 element offsets? (An empty array reaches
 * nothing, whatever its strides.) */
static int span_ok(int64_t n_batch, int64_t n_seq, int64_t n_heads, int64_t extent,
                   const int64_t s[3])
{
    const int64_t n[3] = {n_batch, n_seq, n_heads};
    int64_t lo, hi;
    return rope_reach(n, s, 3, extent, &lo, &hi);
}

static int check_tensor(const rope_tensor *t, const rope_op *op, size_t esize)
{
    if (t->n_heads < 0)
        return ROPE_E_COUNT;
    if (t->n_heads == 0)
        return ROPE_OK;
    if (!t->x || !t->out)
        return ROPE_E_NULL;
    if (!span_ok(op->n_batch, op->n_seq, t->n_heads, op->head_dim, t->x_strides) ||
        !span_ok(op->n_batch, op->n_seq, t->n_heads, op->head_dim, t->out_strides))
        return ROPE_E_OVERFLOW;
    if (!rope_aligned(t->x, esize) || !rope_aligned(t->out, esize))
        return ROPE_E_ALIGN;
    if ((const void *)t->out == t->x && memcmp(t->x_strides, t->out_strides, sizeof t->x_strides))
        return ROPE_E_OVERLAP;
    return ROPE_OK;
}

/* Everything a token range needs; read-only while threads run, but for
 * the flag a token without a row raises. */
typedef struct {
    const rope_op *op;
    const rope_tensor *t;
    int n_tensors;
    const rope_angles *angles;
    rope_rot_fn rot;
    rope_row_maker make;
    int64_t half, elem;
    atomic_int *missed;
} job;

/* Rotate tokens [begin, end) (token = b * n_seq + s) of every tensor. */
static void rotate_range(void *ctx, int64_t begin, int64_t end)
{
    const job *j = (const job *)ctx;
    /* Loop invariants in locals whose address never escapes: the kernel call
     * is opaque, so fields read through j would be reloaded every token. */
    const rope_angles angles = *j->angles;
    const rope_rot_fn rot = j->rot;
    const rope_row_maker make = j->make;
    const int64_t half = j->half, elem = j->elem, n_seq = j->op->n_seq;
    const int64_t rotary_dim = j->op->rotary_dim;
    const size_t tail_bytes = (size_t)((j->op->head_dim - rotary_dim) * elem);
    const int inverse = j->op->inverse != 0, n_tensors = j->n_tensors;
    double scratch[ROPE_ROW_SCRATCH];
    int64_t b = begin / n_seq, s = begin % n_seq - 1;
    for (int64_t tok = begin; tok < end; tok++) {
        if (++s == n_seq) { /* next batch row: no division per token */
            s = 0;
            b++;
        }
        const void *c, *sn;
        if (!rope_token_row(&angles, make, half, b, s, scratch, &c, &sn)) {
            /* a position changed since the check (another thread wrote it):
             * the token is left as it is, and the call fails */
            atomic_store_explicit(j->missed, 1, memory_order_relaxed);
            continue;
        }
        for (int k = 0; k < n_tensors; k++) {
            const rope_tensor *t = &j->t[k];
            if (t->n_heads == 0)
                continue;
            const char *xv = (const char *)t->x + (b * t->x_strides[0] + s * t->x_strides[1]) * elem;
            char *ov = (char *)t->out + (b * t->out_strides[0] + s * t->out_strides[1]) * elem;
            rot(xv, ov, t->x_strides[2], t->out_strides[2], t->n_heads, c, sn, half, inverse);
            if (tail_bytes && (const char *)ov != xv)
                for (int64_t h = 0; h < t->n_heads; h++)
                    memcpy(ov + (h * t->out_strides[2] + rotary_dim) * elem,
                           xv + (h * t->x_strides[2] + rotary_dim) * elem, tail_bytes);
        }
    }
}

/* Does an output share a byte with anything else the call reads while it
 * writes: the angles' positions, rows or frequencies, or the tensor
 * descriptors? Each range is the span [lowest byte, highest byte] of its
 * elements; gaps between them count. (x of one tensor and the out of
 * another are the caller's to keep apart, pyrope.h: they change values,
 * never an address.) Returns ROPE_OK, ROPE_E_OVERLAP or ROPE_E_OVERFLOW. */
static int outputs_apart(const rope_op *op, const rope_tensor *t, int n_tensors, const rope_angles *a,
                         int64_t half, int wide, int64_t esize)
{
    uintptr_t lo[4], hi[4];
    int n = rope_angles_reads(a, op->n_batch, op->n_seq, half, wide, lo, hi);
    if (n < 0 || !rope_bytes(t, 0, n_tensors, (int64_t)sizeof(rope_tensor), &lo[n], &hi[n]))
        return ROPE_E_OVERFLOW;
    n++;
    for (int k = 0; k < n_tensors; k++) {
        if (t[k].n_heads == 0)
            continue;
        const int64_t count[3] = {op->n_batch, op->n_seq, t[k].n_heads};
        int64_t elo, ehi;
        uintptr_t olo, ohi;
        if (!rope_reach(count, t[k].out_strides, 3, op->head_dim, &elo, &ehi) ||
            !rope_bytes(t[k].out, elo, ehi, esize, &olo, &ohi))
            return ROPE_E_OVERFLOW;
        for (int i = 0; i < n; i++)
            if (rope_ranges_meet(olo, ohi, lo[i], hi[i]))
                return ROPE_E_OVERLAP;
    }
    return ROPE_OK;
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

int rope_rotate(const rope_op *given_op, const rope_tensor *tensors, int n_tensors,
                const rope_angles *angles)
{
    if (!given_op)
        return ROPE_E_NULL;
    /* Read once: the descriptors may lie in memory the call writes. The
     * threads read this copy, the angles' copy and the tensors, which
     * outputs_apart keeps out of every output. */
    const rope_op o = *given_op, *op = &o;
    const int op_status = rope_check_op(op);
    if (op_status != ROPE_OK)
        return op_status;
    if (n_tensors < 0)
        return ROPE_E_COUNT;
    if (n_tensors > 0 && !tensors)
        return ROPE_E_NULL;
    const size_t esize = (size_t)ROPE_ELEM_SIZE[op->dtype];
    int64_t heads_total = 0;
    for (int k = 0; k < n_tensors; k++) {
        const int st = check_tensor(&tensors[k], op, esize);
        if (st != ROPE_OK)
            return st;
        if (__builtin_add_overflow(heads_total, tensors[k].n_heads, &heads_total))
            return ROPE_E_OVERFLOW;
    }
    int64_t n_tokens;
    if (__builtin_mul_overflow(op->n_batch, op->n_seq, &n_tokens))
        return ROPE_E_OVERFLOW;
    if (n_tokens == 0 || heads_total == 0)
        return ROPE_OK; /* nothing to do: no pointer is dereferenced */
    const int64_t half = op->rotary_dim / 2;
    const int wide = ROPE_WIDE_ROWS[op->dtype];
    rope_angles a;
    uint8_t map[ROPE_MAX_OTF_HALF];
    int st = rope_angles_take(angles, &a, map, op->n_batch, op->n_seq, half, wide);
    if (st != ROPE_OK)
        return st;
    st = outputs_apart(op, tensors, n_tensors, &a, half, wide, (int64_t)esize);
    if (st != ROPE_OK)
        return st;

    const rope_kernels *kern = rope_active_kernels();
    atomic_int missed = 0;
    const job j = {op, tensors, n_tensors, &a, kern->rot[op->dtype][op->layout],
                   {kern->table_f32, kern->table_f64, wide}, half, (int64_t)esize, &missed};
    /* Traffic: every element read once and written once. */
    const int64_t bytes = sat_product(n_tokens, heads_total, op->head_dim, 2 * j.elem);
    rope_parallel_for(rotate_range, (void *)&j, n_tokens, bytes, op->n_threads);
    return atomic_load(&missed) ? ROPE_E_POSITION : ROPE_OK;
}

int rope_rotate_at(const rope_op *op, rope_tensor *tensors, int n_tensors, const rope_angles *angles,
                   uintptr_t x0, uintptr_t out0, uintptr_t x1, uintptr_t out1)
{
    if (!tensors)
        return ROPE_E_NULL;
    if (n_tensors != 1 && n_tensors != 2)
        return ROPE_E_COUNT;
    tensors[0].x = (const void *)x0;
    tensors[0].out = (void *)out0;
    if (n_tensors == 2) {
        tensors[1].x = (const void *)x1;
        tensors[1].out = (void *)out1;
    }
    return rope_rotate(op, tensors, n_tensors, angles);
}
