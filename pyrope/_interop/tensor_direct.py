"""The direct path for CPU torch tensors: a decode call by the tensors' data pointers.

``Rope.apply(x, offset=t, out=x)`` (or ``out=None`` on a contiguous x) and
``Rope.apply_qk(q, k, offset=t, out=(q, k))`` on plain CPU torch tensors, the
calls a decode loop makes, skip the edge's numpy views (``Tensor.numpy()``
alone costs more than the rest of the call): the memoised ``Call`` of the
same shapes, strides and dtype (``plan.direct_key``, which arrays made it
when the edge first took such tensors) is launched with the tensors' data
pointers, which are their first elements as an array view's are. Anything
else -- no plan yet, grad to record, another device or layout, positions, a
norm, torch tracing the call, a launch C declines -- returns None, and the
edge takes the call, so the results never depend on the path.

Nothing here imports torch: :func:`learn` is told it when the edge first
converts a tensor; until then no object is a :data:`TENSOR`.
"""
import numpy as np

from .._engine import plan as _plan

TENSOR = None     # torch.Tensor, once a tensor has crossed the edge
_DTYPES = {}      # torch dtype -> numpy dtype of the views the plans were made for (views.py's)
_bump = None      # bumps the version counters of a list of tensors, as torch's in-place ops do
_is_compiling = None
_grad_enabled = None
_FLOAT64 = np.dtype(np.float64)
_UNPLANNED = _plan.UNPLANNED
_C_ORDER = _plan.C_ORDER
_CALLS = _plan.CALLS
_FRESH = _plan.FRESH


def learn(torch, dtypes):
    """Take calls on ``torch``'s tensors from now on; ``dtypes``: the edge's map of
    torch dtypes to numpy's, which it fills as dtypes arrive (bfloat16 with its
    first tensor)."""
    global TENSOR, _bump, _is_compiling, _grad_enabled, _DTYPES
    _DTYPES = dtypes
    # the public increment_version wraps this (a tuple check, 2x the cost); fall back to it
    _bump = getattr(torch._C, "_increment_version", None) or torch.autograd.graph.increment_version
    _is_compiling, _grad_enabled = torch.compiler.is_compiling, torch.is_grad_enabled
    TENSOR = torch.Tensor


def _view_key(t):
    """``(numpy dtype, strides as plan.direct_key holds them)`` of plain CPU tensor
    ``t``, or None. Other layouts need no check of their own: their strides
    (sparse), shape (nested) or data pointer (mkldnn, functorch's wrappers)
    raise RuntimeError, which the callers take as None."""
    if not t.is_cpu or (t.requires_grad and _grad_enabled()):
        return None
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        return None
    if t.is_contiguous():
        return dtype, _C_ORDER
    size = dtype.itemsize
    return dtype, tuple(s * size for s in t.stride())


def _rows(rope, dtype):
    """The rows the rope's memoised calls of ``dtype`` read (None: none yet)."""
    return (rope._tables if dtype is not _FLOAT64 else rope._rows_for(dtype)).window


def apply(rope, x, offset, seq_axis, out, inverse):
    """``rope.apply(x, offset=offset, out=out)`` (out: x or None) on tensor ``x``
    by pointers, or None."""
    if _is_compiling():
        return None
    try:
        view = _view_key(x)
        if view is None:
            return None
        dtype, strides = view
        if out is None:
            if strides is not _C_ORDER:   # a new result laid out as the plan's (np.empty) only when contiguous
                return None
            call = _CALLS.get((x.shape, strides, _FRESH, dtype, seq_axis, inverse, rope._plan_tag))
        else:
            call = _CALLS.get((x.shape, strides, None, dtype, seq_axis, inverse, rope._plan_tag))
        if call is None or call is _UNPLANNED:
            return None
        rows = _rows(rope, dtype)
        if rows is None:
            return None
        if out is None:
            result = x.new_empty(x.shape)
            p, q = x.data_ptr(), result.data_ptr()
        else:
            result = x
            p = q = x.data_ptr()
    except RuntimeError:   # not a strided tensor with storage
        return None
    if not call.launch_at(rows.angles, offset, "Rope.apply", p, q):
        return None
    if out is not None:
        _bump([x])
    return result


def apply_qk(rope, q, k, offset, seq_axis, out):
    """``rope.apply_qk(q, k, offset=offset, out=(q, k))`` on tensors by pointers, or None."""
    if _is_compiling() or type(k) is not TENSOR or type(out) is not tuple or len(out) != 2 \
            or out[0] is not q or out[1] is not k:
        return None
    try:
        qv, kv = _view_key(q), _view_key(k)
        if qv is None or kv is None or qv[0] is not kv[0]:
            return None
        call = _CALLS.get((q.shape, qv[1], None, k.shape, kv[1], None, qv[0], seq_axis, False, rope._plan_tag))
        if call is None or call is _UNPLANNED:
            return None
        rows = _rows(rope, qv[0])
        if rows is None:
            return None
        pq, pk = q.data_ptr(), k.data_ptr()
    except RuntimeError:   # not strided tensors with storage
        return None
    if not call.launch_at(rows.angles, offset, "Rope.apply_qk", pq, pq, pk, pk):
        return None
    _bump([q, k])
    return q, k
