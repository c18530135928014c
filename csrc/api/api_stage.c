/* rope_rotate_staged: rope_rotate with a stage per tensor -- a norm before
 * the rotation, a copy instead of it (values), another storage type or a
 * cache slot as the destination -- in one pass over the tokens; and
 * rope_rotate_quantised, the same with a quantised store per tensor (int8,
 * float8 e4m3, q8_0) or a cache read, rotated and stored back in place.
 *
 * Everything is checked before anything is written: the op, each tensor and
 * stage, every slot, every position; the outputs' spans (a slotted output's
 * whole cache) against what the call reads while it writes. A head that is
 * normalised or converted passes through a scratch row of its arithmetic
 * type (float or double): normalised (or widened) into it, rotated there by
 * the rotation kernel of that type, then stored to its destination's type,
 * rounded once. Widening is exact, so this equals one fused kernel that
 * computes in the arithmetic type and rounds once on store. A quantised
 * store quantises that float32 row (scalar/quant.c); an in-place read
 * dequantises the slot's head into it. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/angles.h"
#include "core/checks.h"
#include "core/threads.h"

/* The cache blocks a slotted output spans: ceil(n_slots / block_size). */
static int64_t n_blocks(const rope_stage *st)
{
    return st->n_slots == 0 ? 0 : (st->n_slots - 1) / st->block_size + 1;
}

/* What out holds: bytes per element and elements per head (a quantised
 * store's int8 or float8 bytes, q8_0 blocks; else the stored type's). */
static void out_geometry(const rope_op *op, const rope_stage *st, const rope_quant *q, int64_t *esize,
                         int64_t *per_head)
{
    *per_head = op->head_dim;
    if (q->kind == ROPE_QUANT_Q8_0) {
        *esize = ROPE_Q8_0_BYTES;
        *per_head = op->head_dim / ROPE_Q8_0_VALUES;
    } else {
        *esize = q->kind == ROPE_QUANT_NONE ? ROPE_ELEM_SIZE[st->out_dtype] : 1;
    }
}

/* The heads an output (or its scales) addresses: {blocks, slots in a block,
 * heads} of a cache, else {batch, seq, heads}. */
static void out_counts(const rope_op *op, const rope_tensor *t, const rope_stage *st, int64_t count[3])
{
    count[0] = st->slots ? n_blocks(st) : op->n_batch;
    count[1] = st->slots ? st->block_size : op->n_seq;
    count[2] = t->n_heads;
}

/* The byte span [lo, hi) of tensor t's output, or 0 when it overflows. */
static int out_span(const rope_op *op, const rope_tensor *t, const rope_stage *st, const rope_quant *q,
                    uintptr_t *lo, uintptr_t *hi)
{
    int64_t elo, ehi, count[3], esize, per_head;
    out_counts(op, t, st, count);
    out_geometry(op, st, q, &esize, &per_head);
    if (!rope_reach(count, t->out_strides, 3, per_head, &elo, &ehi))
        return 0;
    return rope_bytes(t->out, elo, ehi, esize, lo, hi);
}

/* The byte span [lo, hi) of an int8 quant's scales (empty without them). */
static int scale_span(const rope_op *op, const rope_tensor *t, const rope_stage *st, const rope_quant *q,
                      uintptr_t *lo, uintptr_t *hi)
{
    int64_t elo, ehi, count[3];
    *lo = *hi = 0;
    if (q->kind != ROPE_QUANT_INT8)
        return 1;
    out_counts(op, t, st, count);
    return rope_reach(count, q->scale_strides, 3, 1, &elo, &ehi) &&
           rope_bytes(q->scales, elo, ehi, sizeof(float), lo, hi);
}

/* How many weights a stage's norm reads (-1: more than int64 counts). */
static int64_t head_dim_weights(const rope_op *op, const rope_tensor *t, const rope_stage *st)
{
    int64_t n;
    if (st->norm != ROPE_NORM_TOKEN)
        return op->head_dim;
    return __builtin_mul_overflow(t->n_heads, op->head_dim, &n) ? -1 : n;
}

/* Check one tensor's quant (already copied) against its stage and the op. */
static int check_quant(const rope_op *op, const rope_tensor *t, const rope_stage *st, const rope_quant *q)
{
    if (q->kind < ROPE_QUANT_NONE || q->kind >= ROPE_N_QUANTS || (q->in_place != 0 && q->in_place != 1))
        return ROPE_E_STAGE;
    if (q->in_place && (!st->slots || st->norm != ROPE_NORM_NONE || st->copy || st->convert))
        return ROPE_E_STAGE;
    if (q->kind == ROPE_QUANT_NONE)
        return ROPE_OK;
    if (ROPE_WIDE_ROWS[op->dtype] || st->convert)
        return ROPE_E_STAGE;
    if (op->head_dim > ROPE_MAX_STAGE_DIM || (q->kind == ROPE_QUANT_Q8_0 && op->head_dim % ROPE_Q8_0_VALUES))
        return ROPE_E_DIM;
    if (q->kind == ROPE_QUANT_FP8_E4M3 && !(isfinite(q->scale) && q->scale > 0))
        return ROPE_E_VALUE;
    if (q->kind == ROPE_QUANT_INT8 && t->n_heads > 0) {
        if (!q->scales)
            return ROPE_E_NULL;
        if (!rope_aligned(q->scales, sizeof(float)))
            return ROPE_E_ALIGN;
    }
    return ROPE_OK;
}

/* Check one tensor and its stage and quant (already copied) against the op. */
static int check_staged(const rope_op *op, const rope_tensor *t, const rope_stage *st, const rope_quant *q)
{
    if ((st->copy != 0 && st->copy != 1) || (st->convert != 0 && st->convert != 1))
        return ROPE_E_STAGE;
    if (st->norm != ROPE_NORM_NONE && st->norm != ROPE_NORM_HEAD && st->norm != ROPE_NORM_TOKEN)
        return ROPE_E_STAGE;
    if (st->norm != ROPE_NORM_NONE && (st->copy || !isfinite(st->norm_eps) || !(st->norm_eps > 0)))
        return ROPE_E_STAGE;
    const int wide = ROPE_WIDE_ROWS[op->dtype];
    const int out_dtype = st->out_dtype;   /* already the op's unless convert */
    if (out_dtype < 0 || out_dtype >= ROPE_N_DTYPES)
        return ROPE_E_DTYPE;
    if (wide && out_dtype != ROPE_F64 && out_dtype != ROPE_F32)
        return ROPE_E_STAGE;
    if (t->n_heads < 0)
        return ROPE_E_COUNT;
    if ((st->norm != ROPE_NORM_NONE || out_dtype != op->dtype) && op->head_dim > ROPE_MAX_STAGE_DIM)
        return ROPE_E_DIM;
    const int quant_status = check_quant(op, t, st, q);
    if (quant_status != ROPE_OK)
        return quant_status;
    if (t->n_heads == 0)
        return ROPE_OK;
    if ((!q->in_place && !t->x) || !t->out)
        return ROPE_E_NULL;
    int64_t oelem, per_head;
    out_geometry(op, st, q, &oelem, &per_head);
    const int64_t xelem = ROPE_ELEM_SIZE[op->dtype];
    int64_t lo, hi;
    const int64_t tokens[3] = {op->n_batch, op->n_seq, t->n_heads};
    if (!q->in_place && !rope_reach(tokens, t->x_strides, 3, op->head_dim, &lo, &hi))
        return ROPE_E_OVERFLOW;
    if (st->slots) {
        if (st->n_slots < 0 || st->block_size < 1)
            return ROPE_E_COUNT;
        const int64_t n2[2] = {op->n_batch, op->n_seq};
        uintptr_t slo, shi;
        if (!rope_reach(n2, st->slot_strides, 2, 1, &lo, &hi) ||
            !rope_bytes(st->slots, lo, hi, sizeof(int64_t), &slo, &shi))
            return ROPE_E_OVERFLOW;
        if (!rope_aligned(st->slots, sizeof(int64_t)))
            return ROPE_E_ALIGN;
        if (!q->in_place && (const void *)t->out == t->x)
            return ROPE_E_OVERLAP;
    }
    uintptr_t blo, bhi;
    if (!out_span(op, t, st, q, &blo, &bhi) || !scale_span(op, t, st, q, &blo, &bhi))
        return ROPE_E_OVERFLOW;
    /* q8_0 blocks are bytes to C (their float16 is copied, never loaded) */
    const size_t oalign = q->kind == ROPE_QUANT_NONE ? (size_t)oelem : 1;
    if ((!q->in_place && !rope_aligned(t->x, (size_t)xelem)) || !rope_aligned(t->out, oalign))
        return ROPE_E_ALIGN;
    if (q->in_place)
        return ROPE_OK;   /* no norm: nothing more to check */
    if ((const void *)t->out == t->x && (q->kind != ROPE_QUANT_NONE || out_dtype != op->dtype ||
                                         memcmp(t->x_strides, t->out_strides, sizeof t->x_strides)))
        return ROPE_E_OVERLAP;
    if (st->norm != ROPE_NORM_NONE && st->norm_weight) {
        int64_t n = head_dim_weights(op, t, st);
        if (n < 0 || !rope_bytes(st->norm_weight, 0, n, sizeof(double), &blo, &bhi))
            return ROPE_E_OVERFLOW;
        if (!rope_aligned(st->norm_weight, sizeof(double)))
            return ROPE_E_ALIGN;
    }
    return ROPE_OK;
}

/* Every slot of a slotted stage is -1 or within the cache. */
static int slots_ok(const rope_op *op, const rope_stage *st)
{
    for (int64_t b = 0; b < op->n_batch; b++)
        for (int64_t s = 0; s < op->n_seq; s++) {
            const int64_t k = st->slots[b * st->slot_strides[0] + s * st->slot_strides[1]];
            if (k != -1 && (k < 0 || k >= st->n_slots))
                return 0;
        }
    return 1;
}

/* Does any output (a tensor's out, an int8 quant's scales) meet what the
 * call reads while it writes -- the angles' positions and rows, each
 * stage's weights and slots -- or do scales meet any out? */
static int outputs_apart(const rope_op *op, const rope_tensor *t, const rope_stage *st, const rope_quant *q,
                         int n_tensors, const rope_angles *a, int64_t half, int wide)
{
    uintptr_t lo[3], hi[3];
    const int n = rope_angles_reads(a, op->n_batch, op->n_seq, half, wide, lo, hi);
    if (n < 0)
        return ROPE_E_OVERFLOW;
    for (int k = 0; k < n_tensors; k++) {
        if (t[k].n_heads == 0)
            continue;
        uintptr_t olo[2], ohi[2];   /* out, and its scales (empty without) */
        if (!out_span(op, &t[k], &st[k], &q[k], &olo[0], &ohi[0]) ||
            !scale_span(op, &t[k], &st[k], &q[k], &olo[1], &ohi[1]))
            return ROPE_E_OVERFLOW;
        for (int w = 0; w < 2; w++) {
            for (int i = 0; i < n; i++)
                if (rope_ranges_meet(olo[w], ohi[w], lo[i], hi[i]))
                    return ROPE_E_OVERLAP;
            for (int r = 0; r < n_tensors; r++) {
                if (t[r].n_heads == 0)
                    continue;
                uintptr_t rlo, rhi;
                int64_t elo, ehi;
                if (st[r].norm_weight && st[r].norm != ROPE_NORM_NONE) {
                    if (!rope_bytes(st[r].norm_weight, 0, head_dim_weights(op, &t[r], &st[r]), sizeof(double),
                                    &rlo, &rhi))
                        return ROPE_E_OVERFLOW;
                    if (rope_ranges_meet(olo[w], ohi[w], rlo, rhi))
                        return ROPE_E_OVERLAP;
                }
                if (st[r].slots) {
                    const int64_t n2[2] = {op->n_batch, op->n_seq};
                    if (!rope_reach(n2, st[r].slot_strides, 2, 1, &elo, &ehi) ||
                        !rope_bytes(st[r].slots, elo, ehi, sizeof(int64_t), &rlo, &rhi))
                        return ROPE_E_OVERFLOW;
                    if (rope_ranges_meet(olo[w], ohi[w], rlo, rhi))
                        return ROPE_E_OVERLAP;
                }
                if (w == 0) {   /* this out against every tensor's scales */
                    if (!scale_span(op, &t[r], &st[r], &q[r], &rlo, &rhi))
                        return ROPE_E_OVERFLOW;
                    if (rope_ranges_meet(olo[0], ohi[0], rlo, rhi))
                        return ROPE_E_OVERLAP;
                }
            }
        }
    }
    return ROPE_OK;
}

/* The most tensors one staged call takes (q, k and v are three): their
 * descriptors and stages are copied before anything is written. */
#define MAX_STAGED_TENSORS 64

/* Heads whose sums of squares are taken together (stage_token). */
#define HEAD_GROUP 8

/* 1 / sqrt(mean + eps) of the 8 lanes' sum over n elements. */
static double inverse_rms(const double acc[8], int64_t n, double eps)
{
    const double l0 = acc[0] + acc[4], l1 = acc[1] + acc[5], l2 = acc[2] + acc[6], l3 = acc[3] + acc[7];
    const double sum = (l0 + l2) + (l1 + l3);
    return 1.0 / sqrt(sum / (double)n + eps);
}

typedef struct {
    const rope_op *op;
    const rope_tensor *t;
    const rope_stage *st;
    int n_tensors;
    const rope_angles *angles;
    const rope_kernels *kern;
    rope_row_maker make;
    int64_t half, elem;
    atomic_int *missed, *slot_missed;
    const rope_quant *q;
    int dup_rows;   /* some tensor's norm_rot is interleaved: each token's row duplicated for it */
} job;

/* A tensor's one-pass norm path (kernels.h), NULL where its heads compose
 * the three kernels: a norm, rotating the whole head (head_dim a multiple
 * of 16), stored unquantised. */
static rope_norm_rot_fn norm_rot_of(const rope_kernels *kern, const rope_op *op, const rope_stage *st,
                                    const rope_quant *q)
{
    if (st->norm == ROPE_NORM_NONE || q->in_place || q->kind != ROPE_QUANT_NONE || st->copy ||
        op->rotary_dim != op->head_dim || op->head_dim % 16 != 0)
        return NULL;
    return kern->norm_rot[op->dtype][st->out_dtype][op->layout];
}

/* One tensor's heads of one token through its stage and quant: from xv
 * (in place: ov itself) to ov (elements of oelem bytes, out_geometry's), an
 * int8 quant's scales at sv; dc/ds the token's row duplicated (j->dup_rows)
 * or NULL. */
static void stage_token(const job *j, const rope_tensor *t, const rope_stage *st, const rope_quant *q,
                        int64_t oelem, const char *xv, char *ov, float *sv, const void *c, const void *sn,
                        const float *dc, const float *ds, void *row)
{
    const rope_op *op = j->op;
    const rope_kernels *kern = j->kern;
    const int64_t head_dim = op->head_dim, half = j->half, elem = j->elem;
    const int out_dtype = st->out_dtype;
    const int quantised = q->kind != ROPE_QUANT_NONE;
    const int inverse = op->inverse != 0;
    if (q->in_place && !quantised) {   /* a float cache's keys, rotated where they are */
        kern->rot[op->dtype][op->layout](ov, ov, t->out_strides[2], t->out_strides[2], t->n_heads, c, sn, half,
                                         inverse);
        return;
    }
    if (st->norm == ROPE_NORM_NONE && out_dtype == op->dtype && !quantised) {
        if (!st->copy) {
            j->kern->rot[op->dtype][op->layout](xv, ov, t->x_strides[2], t->out_strides[2], t->n_heads, c, sn,
                                                 half, inverse);
            const size_t tail = (size_t)((head_dim - op->rotary_dim) * elem);
            if (tail && (const char *)ov != xv)
                for (int64_t h = 0; h < t->n_heads; h++)
                    memcpy(ov + (h * t->out_strides[2] + op->rotary_dim) * elem,
                           xv + (h * t->x_strides[2] + op->rotary_dim) * elem, tail);
        } else if ((const char *)ov != xv) {
            if (t->x_strides[2] == head_dim && t->out_strides[2] == head_dim)   /* heads back to back: one copy */
                memcpy(ov, xv, (size_t)(t->n_heads * head_dim * elem));
            else
                for (int64_t h = 0; h < t->n_heads; h++)
                    memcpy(ov + h * t->out_strides[2] * elem, xv + h * t->x_strides[2] * elem,
                           (size_t)(head_dim * elem));
        }
        return;
    }
    /* The general case: each head into the row of its arithmetic type (normalised,
     * widened, or -- in place -- dequantised from its slot), rotated there (values:
     * not), then stored: narrowed to its type, or quantised (an int8 head's scale
     * to sv). A quantised store's row is float (float64 data are refused). */
    const int wide = ROPE_WIDE_ROWS[op->dtype];
    const rope_rot_fn rot = kern->rot[wide ? ROPE_F64 : ROPE_F32][op->layout];
    const rope_convert_fn narrow = wide ? kern->narrow_double[out_dtype] : kern->narrow_float[out_dtype];
    const rope_quantise_fn quantise = kern->quantise[q->kind];
    /* the norm path in one pass where the instruction set has it, against
     * the row as its layout takes it */
    const rope_norm_rot_fn norm_rot = norm_rot_of(kern, op, st, q);
    const float *nc = op->layout == ROPE_INTERLEAVED ? dc : (const float *)c;
    const float *ns = op->layout == ROPE_INTERLEAVED ? ds : (const float *)sn;
    double inv = 1.0;
    if (st->norm == ROPE_NORM_TOKEN) {
        double acc[8] = {0};
        for (int64_t h = 0; h < t->n_heads; h++)
            kern->sumsq[op->dtype](xv + h * t->x_strides[2] * elem, head_dim, acc);
        inv = inverse_rms(acc, t->n_heads * head_dim, st->norm_eps);
    }
    /* Per-head norms: the sums of squares of a group of heads first, then
     * their inverses, then the heads. Each sum is a chain of dependent adds
     * (head_dim / 8 of them per lane); side by side, the chains of a group
     * run at once instead of each head's waiting for the one before it
     * (measured: bfloat16 heads of 128 about 15% faster, AVX-512). The
     * arithmetic of each head is unchanged. */
    double inv_head[HEAD_GROUP];
    for (int64_t h = 0; h < t->n_heads; h++) {
        const char *xh = q->in_place ? NULL : xv + h * t->x_strides[2] * elem;   /* in place: x is not read */
        if (st->norm == ROPE_NORM_HEAD) {
            const int64_t g = h % HEAD_GROUP;
            if (g == 0) {
                const int64_t n = t->n_heads - h < HEAD_GROUP ? t->n_heads - h : HEAD_GROUP;
                double acc[HEAD_GROUP][8];
                memset(acc, 0, sizeof acc);
                for (int64_t k = 0; k < n; k++)
                    kern->sumsq[op->dtype](xh + k * t->x_strides[2] * elem, head_dim, acc[k]);
                for (int64_t k = 0; k < n; k++)
                    inv_head[k] = inverse_rms(acc[k], head_dim, st->norm_eps);
            }
            inv = inv_head[g];
        }
        char *oh = ov + h * t->out_strides[2] * oelem;
        float *sh = q->kind == ROPE_QUANT_INT8 ? sv + h * q->scale_strides[2] : NULL;
        float scale = q->kind == ROPE_QUANT_FP8_E4M3 ? q->scale : sh && q->in_place ? *sh : 0.0f;
        if (q->in_place) {
            kern->dequantise[q->kind](oh, head_dim, scale, (float *)row);
        } else if (st->norm != ROPE_NORM_NONE) {
            const double *w = st->norm_weight;
            if (w && st->norm == ROPE_NORM_TOKEN)
                w += h * head_dim;
            if (norm_rot) {
                norm_rot(xh, head_dim, inv, w, nc, ns, inverse, oh);
                continue;
            }
            kern->normalise[op->dtype](xh, head_dim, inv, w, row);
        } else {
            kern->widen[op->dtype](xh, head_dim, row);
        }
        if (!st->copy)
            rot(row, row, 0, 0, 1, c, sn, half, inverse);
        if (!quantised) {
            narrow(row, head_dim, oh);
            continue;
        }
        quantise((const float *)row, head_dim, oh, &scale);
        if (sh)
            *sh = scale;
    }
}

/* Tokens [begin, end) (token = b * n_seq + s) of every tensor. */
static void staged_range(void *ctx, int64_t begin, int64_t end)
{
    const job *j = (const job *)ctx;
    const rope_angles angles = *j->angles;
    const int64_t half = j->half, elem = j->elem, n_seq = j->op->n_seq;
    double scratch[ROPE_ROW_SCRATCH];
    _Alignas(64) double row[ROPE_MAX_STAGE_DIM];
    _Alignas(64) float dup[2][ROPE_MAX_STAGE_DIM];   /* j->dup_rows: cos, sin */
    int64_t oelem[MAX_STAGED_TENSORS];   /* each out's element bytes, once per range */
    for (int k = 0; k < j->n_tensors; k++) {
        int64_t per_head;
        out_geometry(j->op, &j->st[k], &j->q[k], &oelem[k], &per_head);
    }
    int64_t b = begin / n_seq, s = begin % n_seq - 1;
    for (int64_t tok = begin; tok < end; tok++) {
        if (++s == n_seq) {
            s = 0;
            b++;
        }
        const void *c, *sn;
        if (!rope_token_row(&angles, j->make, half, b, s, scratch, &c, &sn)) {
            atomic_store_explicit(j->missed, 1, memory_order_relaxed);
            continue;
        }
        if (j->dup_rows)
            j->kern->duplicate_row((const float *)c, (const float *)sn, half, dup[0], dup[1]);
        for (int k = 0; k < j->n_tensors; k++) {
            const rope_tensor *t = &j->t[k];
            const rope_stage *st = &j->st[k];
            const rope_quant *q = &j->q[k];
            if (t->n_heads == 0)
                continue;
            int64_t a0 = b, a1 = s;   /* what addresses out (and scales) */
            char *ov;
            if (st->slots) {
                /* read once into a local, checked before it makes an address */
                const int64_t slot = *(const volatile int64_t *)&st->slots[b * st->slot_strides[0] +
                                                                           s * st->slot_strides[1]];
                if (slot == -1)
                    continue;
                if (slot < 0 || slot >= st->n_slots) {
                    atomic_store_explicit(j->slot_missed, 1, memory_order_relaxed);
                    continue;
                }
                a0 = slot / st->block_size;
                a1 = slot % st->block_size;
            }
            ov = (char *)t->out + (a0 * t->out_strides[0] + a1 * t->out_strides[1]) * oelem[k];
            const char *xv = q->in_place ? ov : (const char *)t->x + (b * t->x_strides[0] + s * t->x_strides[1]) * elem;
            float *sv = q->kind == ROPE_QUANT_INT8 ? q->scales + a0 * q->scale_strides[0] + a1 * q->scale_strides[1]
                                                   : NULL;
            stage_token(j, t, st, q, oelem[k], xv, ov, sv, c, sn, j->dup_rows ? dup[0] : NULL,
                        j->dup_rows ? dup[1] : NULL, row);
        }
    }
}


int rope_rotate_staged(const rope_op *given_op, const rope_tensor *given_t, const rope_stage *given_st,
                       int n_tensors, const rope_angles *angles)
{
    return rope_rotate_quantised(given_op, given_t, given_st, NULL, n_tensors, angles);
}

int rope_rotate_quantised(const rope_op *given_op, const rope_tensor *given_t, const rope_stage *given_st,
                          const rope_quant *given_q, int n_tensors, const rope_angles *angles)
{
    if (!given_st && !given_q)
        return rope_rotate(given_op, given_t, n_tensors, angles);
    if (!given_st)
        return ROPE_E_NULL;
    if (!given_op)
        return ROPE_E_NULL;
    const rope_op o = *given_op, *op = &o;
    const int op_status = rope_check_op(op);
    if (op_status != ROPE_OK)
        return op_status;
    if (n_tensors < 0 || n_tensors > MAX_STAGED_TENSORS)
        return ROPE_E_COUNT;
    if (n_tensors > 0 && !given_t)
        return ROPE_E_NULL;
    rope_tensor t[MAX_STAGED_TENSORS];
    rope_stage st[MAX_STAGED_TENSORS];
    memcpy(t, given_t, (size_t)n_tensors * sizeof *t);
    rope_quant q[MAX_STAGED_TENSORS];
    memcpy(st, given_st, (size_t)n_tensors * sizeof *st);
    if (given_q)
        memcpy(q, given_q, (size_t)n_tensors * sizeof *q);
    else
        memset(q, 0, (size_t)n_tensors * sizeof *q);
    for (int k = 0; k < n_tensors; k++)   /* the op's storage type, once, for every use below */
        if (!st[k].convert)
            st[k].out_dtype = op->dtype;
    int64_t heads_total = 0;
    for (int k = 0; k < n_tensors; k++) {
        const int status = check_staged(op, &t[k], &st[k], &q[k]);
        if (status != ROPE_OK)
            return status;
        if (__builtin_add_overflow(heads_total, t[k].n_heads, &heads_total))
            return ROPE_E_OVERFLOW;
    }
    int64_t n_tokens;
    if (__builtin_mul_overflow(op->n_batch, op->n_seq, &n_tokens))
        return ROPE_E_OVERFLOW;
    if (n_tokens == 0 || heads_total == 0)
        return ROPE_OK;
    const int64_t half = op->rotary_dim / 2;
    const int wide = ROPE_WIDE_ROWS[op->dtype];
    rope_angles a;
    uint8_t map[ROPE_MAX_OTF_HALF];
    int status = rope_angles_take(angles, &a, map, op->n_batch, op->n_seq, half, wide);
    if (status != ROPE_OK)
        return status;
    for (int k = 0; k < n_tensors; k++)
        if (t[k].n_heads > 0 && st[k].slots && !slots_ok(op, &st[k]))
            return ROPE_E_SLOT;
    status = outputs_apart(op, t, st, q, n_tensors, &a, half, wide);
    if (status != ROPE_OK)
        return status;

    const rope_kernels *kern = rope_active_kernels();
    atomic_int missed = 0, slot_missed = 0;
    int dup_rows = 0;
    for (int k = 0; k < n_tensors; k++)
        dup_rows |= op->layout == ROPE_INTERLEAVED && t[k].n_heads > 0 && norm_rot_of(kern, op, &st[k], &q[k]);
    const job j = {op, t, st, n_tensors, &a, kern, {kern->table_f32, kern->table_f64, wide}, half,
                   ROPE_ELEM_SIZE[op->dtype], &missed, &slot_missed, q, dup_rows};
    int64_t per_token = 0; /* bytes read and written per token, saturating */
    for (int k = 0; k < n_tensors; k++) {
        int64_t bytes, oelem, per_head;
        out_geometry(op, &st[k], &q[k], &oelem, &per_head);
        if (__builtin_mul_overflow(t[k].n_heads, op->head_dim * ROPE_ELEM_SIZE[op->dtype] + per_head * oelem,
                                   &bytes) ||
            __builtin_add_overflow(per_token, bytes, &per_token))
            per_token = INT64_MAX;
    }
    int64_t bytes;
    if (__builtin_mul_overflow(n_tokens, per_token, &bytes))
        bytes = INT64_MAX;
    rope_parallel_for(staged_range, (void *)&j, n_tokens, bytes, op->n_threads);
    if (atomic_load(&missed))
        return ROPE_E_POSITION;
    return atomic_load(&slot_missed) ? ROPE_E_SLOT : ROPE_OK;
}
