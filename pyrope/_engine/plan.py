"""The planner: arrays, outputs and positions -> what one kernel call needs.

The kernel sees every tensor as ``[batch][seq][heads][head_dim]`` with
element strides on the first three axes and a contiguous, aligned last axis.
The planner turns what the user passed into such views without copying where
it can (``seq_axis=-2`` swaps two axes, batch dimensions merge when their
strides nest) and into a *copy plan* where it cannot (a copy of a source, a
rotation into a temporary written back afterwards). It also decides what
overlapping arguments mean: results are as if nothing overlapped, or a
``ValueError`` names the two arguments. No C here: ``launcher`` runs plans.

Plans of contiguous arrays are memoised by shape (:func:`direct_call`), so a
repeated decode call costs a dict lookup, not a plan.
"""
import builtins
import math

import numpy as np

from . import dtypes as _dtypes, launcher as _launcher, stages as _stages
from .checks import checked_positions, positions_array, too_large
from ..errors import ValueError


# ---- views ---------------------------------------------------------------------

def token_view(a, seq_axis):
    """``a`` as ``[*batch, seq, heads, head_dim]`` (a view)."""
    return a if seq_axis == -3 else np.swapaxes(a, -3, -2)


def kernel_friendly(a):
    """Can the kernel address ``a`` directly? Contiguous last axis, and data
    aligned to the element size (C forbids misaligned float pointers; such
    views, e.g. a byte-offset buffer, go through an aligned copy)."""
    item = a.itemsize
    return a.strides[-1] == item and a.flags.aligned and all(s % item == 0 for s in a.strides)


def as_4d(a):
    """View ``[*batch, seq, heads, dim]`` as ``[B, seq, heads, dim]`` without
    copying, or None when the batch strides do not nest."""
    if a.ndim == 4:
        return a
    if a.ndim == 3:
        return a[None]
    batch = a.shape[:-3]
    n = int(np.prod(batch, dtype=np.int64))
    dims = [(size, stride) for size, stride in zip(batch, a.strides[:-3]) if size != 1]
    for (_, stride_outer), (size_inner, stride_inner) in zip(dims, dims[1:]):
        if stride_outer != stride_inner * size_inner:
            return None
    stride = dims[-1][1] if dims else 0
    return np.lib.stride_tricks.as_strided(a, (n,) + a.shape[-3:], (stride,) + a.strides[-3:],
                                           writeable=a.flags.writeable)


def element_strides(a4):
    """Strides in elements of the first three axes of a 4-D view; 0 for axes of length 1."""
    item = a4.itemsize
    return tuple(0 if n == 1 else s // item for n, s in zip(a4.shape[:3], a4.strides[:3]))


# ---- overlap -------------------------------------------------------------------

def same_memory(a, b):
    """Is ``b`` exactly ``a``'s memory: same first element, strides and shape?"""
    return a is b or (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                      and a.strides == b.strides and a.shape == b.shape)


def overlap(a, b):
    """Do ``a`` and ``b`` share a byte?"""
    return np.may_share_memory(a, b) and np.shares_memory(a, b)


_ENUMERATE_LIMIT = 1 << 24   # differences one tangled view may list; beyond: treated as overlapping
_REACH_LIMIT = 1 << 63       # bytes a listed view may span (int64 arithmetic); no memory holds more
_LISTED = {}                 # (shape, strides, itemsize) -> the decision of a view that was listed
_MAX_LISTED = 64


def self_overlapping(a):
    """Do two elements of ``a`` share a byte (zero or tangled strides)?

    Decided from shape, strides and itemsize alone, exactly. Two elements
    share a byte when their index difference ``d`` (not all zero, ``|d_i| <
    n_i``) has ``|sum(d_i * s_i)| < itemsize``; signs of strides do not matter.
    Without building an array, over the axes longer than one sorted by
    ``|stride|`` (O(ndim log ndim)):

    - a stride below the itemsize (0 included): neighbours on that axis overlap;
    - two strides less than an itemsize apart (equal ones too): a step along
      one, a step back along the other;
    - the largest stride steps past everything the others reach: its copies
      of the rest are apart, so drop it; every axis dropped: apart;
    - more elements than the reach holds, one itemsize each (in units of the
      strides' gcd): two must overlap.

    Only views none of these decides (tangled) list differences, by
    :func:`_listed_overlap`: at most about half the element count and mostly
    far fewer, where a rotation touches every element. The
    decision is kept (:data:`_LISTED`), so the direct path's check and the
    general path's after it list once. A view that would list more than
    :data:`_ENUMERATE_LIMIT` differences, or spans 2**63 bytes or more, cannot
    be shown apart: treated as overlapping."""
    if a.size == 0:
        return False   # no element (whatever the other axes' lengths)
    item = a.itemsize
    axes = sorted((abs(s), n) for n, s in zip(a.shape, a.strides) if n > 1)
    if not axes:
        return False
    if axes[0][0] < item:
        return True    # neighbours on that axis share a byte (a zero stride: all of it)
    for (s, _), (t, _) in zip(axes, axes[1:]):
        if t - s < item:   # sorted, so adjacent strides are the closest pairs
            return True
    reach = item + sum(s * (n - 1) for s, n in axes)   # bytes from the first element's start to the last's end
    while axes:   # whether the rest overlaps decides; the nested view drops every axis
        s, n = axes[-1]
        below = reach - s * (n - 1)
        if s < below:
            break
        axes.pop()
        reach = below
    if len(axes) < 2:
        return False   # one axis left, with a stride of at least the itemsize
    # Offsets are multiples of the gcd: apart, each next one is at least
    # ceil(item / unit) units on, so the count must fit the reach.
    unit = math.gcd(*(s for s, _ in axes))
    if (math.prod(n for _, n in axes) - 1) * -(-item // unit) > (reach - item) // unit:
        return True
    if reach >= _REACH_LIMIT:
        return True    # cannot be shown apart: treated as overlapping
    key = (a.shape, a.strides, item)
    found = _LISTED.get(key)
    if found is None:
        found = _listed_overlap(axes, item)
        if len(_LISTED) >= _MAX_LISTED:
            _LISTED.clear()
        _LISTED[key] = found
    return found


def _steps(axes):
    """How many positive differences :func:`_differences` lists for ``axes``."""
    return (math.prod(2 * n - 1 for _, n in axes) - 1) // 2


def _differences(axes):
    """``|sum(d_i * s_i)|`` for every index difference ``d`` of ``axes``
    ``[(stride, n)]`` but zero, one of each pair ``d, -d``: int64, unordered.
    (The box of differences is symmetric and C-ordered, so its second half
    past the centre, ``d = 0``, holds one of each pair.)"""
    diffs = np.zeros(1, np.int64)
    for s, n in axes:
        diffs = (diffs[:, None] + np.arange(1 - n, n, dtype=np.int64) * s).reshape(-1)
    return np.abs(diffs[diffs.size // 2 + 1:])


def _near_steps(q, stride, n, item):
    """Is some value of ``q`` less than ``item`` from ``d * stride``, ``1 <= d < n``?
    (The nearest such multiple is the floor or the ceiling of q / stride, clipped.)"""
    d = q // stride
    below = np.clip(d, 1, n - 1) * stride
    above = np.clip(d + 1, 1, n - 1) * stride
    return bool(np.any((np.abs(q - below) < item) | (np.abs(above - q) < item)))


def _near_sorted(q, p, item):
    """Is some value of ``q`` less than ``item`` from a value of sorted ``p``?"""
    i = np.searchsorted(p, q)
    below, above = p[np.maximum(i - 1, 0)], p[np.minimum(i, p.size - 1)]
    return bool(np.any((np.abs(q - below) < item) | (np.abs(above - q) < item)))


def _sides(axes):
    """Split ``axes`` (two or more) into the two sides :func:`_listed_overlap`
    lists least for: the longest axis alone against the rest, or halves of
    about equal count of differences (greedy, longest first)."""
    longest = max(range(len(axes)), key=lambda i: axes[i][1])
    alone = ([axes[longest]], axes[:longest] + axes[longest + 1:])
    halves = ([], [])
    for axis in sorted(axes, key=lambda axis: -axis[1]):
        smaller = min(halves, key=lambda side: math.prod(2 * n - 1 for _, n in side))
        smaller.append(axis)
    return min(alone, halves, key=_listed_count)


def _listed_count(sides):
    """How many differences :func:`_listed_overlap` lists for ``sides``: none
    for a side of one axis (its multiples are reckoned, not listed), unless
    both are: then the shorter one's steps."""
    a, b = sides
    if len(a) == len(b) == 1:
        return min(a[0][1], b[0][1]) - 1
    return sum(_steps(side) for side in sides if len(side) > 1)


def _listed_overlap(axes, item):
    """Do two elements overlap, for ``axes`` ``[(|stride|, n)]`` no cheap test
    of :func:`self_overlapping` decided? Exact, meeting in the middle.

    Split the axes into two sides A and B; an index difference is ``(d_A,
    d_B)``, and elements overlap iff some nonzero one has ``|u + v| < item``
    (u, v: the two sides' sums). With ``d_B = 0`` that is A overlapping
    itself (a listed difference below the itemsize), with ``d_A = 0`` B; else
    it is some positive difference ``p`` of one side within ``item`` of a
    positive ``q`` of the other (both sides are symmetric in ``d -> -d``).
    So each side lists its positive differences (a side of one axis needs
    none: they are its stride's multiples) and one list is searched for the
    other's values: ``prod(2 n_i - 1) // 2`` over each listed side, which
    for balanced sides is far below the element count and never above about
    half of it (the sides are chosen for the shortest listing). A listing
    longer than :data:`_ENUMERATE_LIMIT` is not made: treated as overlapping."""
    a, b = _sides(axes)
    if _listed_count((a, b)) > _ENUMERATE_LIMIT:
        return True   # cannot be shown apart: treated as overlapping
    if len(a) == len(b) == 1:
        (s, n), (t, m) = sorted(a + b, key=lambda axis: axis[1])
        return _near_steps(np.arange(1, n, dtype=np.int64) * s, t, m, item)
    if len(b) == 1:
        a, b = b, a
    q = _differences(b)
    if q.min() < item:
        return True
    if len(a) == 1:
        return _near_steps(q, *a[0], item)
    p = _differences(a)
    if p.min() < item:
        return True
    if p.size > q.size:
        p, q = q, p
    p.sort()
    return _near_sorted(q, p, item)


def resolve_overlaps(items):
    """Decide what overlapping arguments mean, before anything is written.

    ``items``: ``[(name, x, out, out_name)]`` with ``out`` None (a fresh
    result) or a validated array of x's shape and dtype (``out is x``: in
    place). Refused, with a ``ValueError`` naming both arguments: the same
    array as two inputs, two outputs that overlap, an output whose elements
    overlap each other. Handled as if nothing overlapped: an input that an
    output (other than its own in-place self) overlaps is read from a copy.
    Returns the sources to read, one per item."""
    for i, (name, x, _, _) in enumerate(items):
        for other, y, _, _ in items[i + 1:]:
            if same_memory(x, y):
                raise ValueError(f"{name} and {other} must be different arrays, got the same memory twice "
                                 f"(pass each tensor once)")
    written = [(out_name, out) for _, _, out, out_name in items if out is not None]
    for i, (name, out) in enumerate(written):
        if self_overlapping(out):
            raise ValueError(f"{name} has elements that overlap each other (a zero or overlapping stride), "
                             f"so it cannot hold a result; pass a plain array")
        for other, out2 in written[i + 1:]:
            if overlap(out, out2):
                raise ValueError(f"{name} and {other} overlap: one result would overwrite the other")
    sources = []
    for name, x, out, _ in items:
        own_in_place = out is not None and same_memory(x, out)
        clobbered = any(overlap(w, x) for _, w in written if not (own_in_place and w is out))
        sources.append(x.copy() if clobbered else x)
    return sources


def positions_apart(positions, results):
    """``positions`` as C may read them while it writes ``results``: a copy
    when one of those shares their bounds, so the rotation is as if nothing
    overlapped (C reads a position again as it uses it, and refuses
    positions within an output's span, gaps included: the bounds numpy
    compares here)."""
    for result in results:
        if np.may_share_memory(positions, result):
            return positions.copy()
    return positions


# ---- positions ---------------------------------------------------------------------

def _broadcasts_to(shape, target):
    """Whether an array of ``shape`` broadcasts to exactly ``target`` (no extra dims)."""
    try:
        return len(shape) <= len(target) and np.broadcast_shapes(shape, target) == target
    except builtins.ValueError:
        return False


def positions_2d(positions, batch_shape, n_seq, materialize=True):
    """Positions as a C-contiguous, aligned int64 ``[B or 1, seq]`` array.

    Shapes are checked before any value is read, so a call's work is bounded
    by its arrays, whatever positions it is given; positions the same for
    every batch row stay one row (read with batch stride 0). ``materialize``
    False: check only and return None (a call with nothing to rotate)."""
    pos = positions_array("positions", positions)
    if pos.ndim == 0 or pos.shape[-1] != n_seq:
        raise ValueError(f"positions must have shape [seq] or [*batch, seq] with seq={n_seq}, got {pos.shape}")
    target = tuple(batch_shape) + (n_seq,)
    if pos.ndim > 1 and not _broadcasts_to(pos.shape, target):
        raise ValueError(f"positions shape {pos.shape} does not match batch {tuple(batch_shape)} "
                         f"and seq {n_seq}")
    pos = checked_positions("positions", pos)
    if not materialize:
        return None
    if math.prod(pos.shape[:-1]) == 1:   # one row for every batch row
        return np.require(pos.reshape(1, n_seq), np.int64, ("C", "A"))
    full = np.broadcast_to(pos, target)
    return np.require(full.reshape(math.prod(batch_shape), n_seq), np.int64, ("C", "A"))


def section_positions(positions, k, batch_shape, n_seq, materialize=True):
    """Sectioned positions ``[k, seq]`` or ``[k, *batch, seq]`` as a C-contiguous,
    aligned int64 ``[k, B or 1, seq]`` array (shapes checked first, as in
    :func:`positions_2d`; ``materialize`` False: check only, return None)."""
    pos = positions_array("positions", positions)
    if pos.shape[-1] != n_seq:
        raise ValueError(f"positions must have shape [{k}, seq] or [{k}, *batch, seq] with seq={n_seq} "
                         f"(one row per position component), got {pos.shape}")
    inner = pos.shape[1:-1]
    target = (k,) + (tuple(batch_shape) if inner else ()) + (n_seq,)
    if not _broadcasts_to(pos.shape, target):
        raise ValueError(f"positions shape {pos.shape} does not match {k} components, batch "
                         f"{tuple(batch_shape)} and seq {n_seq}")
    pos = checked_positions("positions", pos)
    if not materialize:
        return None
    rows = math.prod(batch_shape) if inner else 1
    return np.require(np.broadcast_to(pos, target).reshape(k, rows, n_seq), np.int64, ("C", "A"))


def position_strides(positions):
    """(batch, seq, component) element strides of a :func:`positions_2d`
    ``[B or 1, seq]`` or :func:`section_positions` ``[k, B or 1, seq]`` array."""
    rows, n_seq = positions.shape[-2:]
    component = rows * n_seq if positions.ndim == 3 else 0
    return (0 if rows == 1 else n_seq, 1, component)


# ---- the plan ----------------------------------------------------------------------

class Plan:
    """What one C call needs: kernel views, the descriptors, and the copies.

    ``buffers``: ``[(x4, out4)]`` 4-D kernel views (``out4 is x4``: in place);
    ``write_back``: ``[(dst, tmp)]`` to copy after the call; ``outputs``: what
    the caller returns; ``call``: the ``_launcher.Call``."""

    __slots__ = ("buffers", "write_back", "outputs", "call", "batch_shape", "n_seq", "stage_data")

    def run(self, template, positions, offset, where, sections=None):
        """Rotate with the angles of ``template`` (``_launcher.angle_template``) at
        ``positions`` (a :func:`positions_2d` array, or None for ``offset + s``),
        then write back what was rotated in a temporary. Returns the outputs."""
        strides = (0, 0, 0) if positions is None else position_strides(positions)
        sources, results = zip(*self.buffers)
        if positions is not None:
            positions = positions_apart(positions, results)
        self.call.launch(sources, results, template, positions, offset, where, strides, sections, False,
                         self.stage_data)
        if self.write_back:
            commit(self.write_back)
        return self.outputs


def _copy(dst, src):
    """One numpy copy (C, never interrupted part way); a name tests can replace."""
    dst[...] = src


def commit(write_back):
    """Copy each temporary of ``write_back`` ``[(dst, tmp)]`` to its destination:
    every one of them, even when an interrupt (KeyboardInterrupt, raised
    between two copies) cuts the loop short: copies are idempotent, so they
    are all made again before the interrupt goes on. A call's visible
    results are thus all written or all untouched."""
    try:
        for dst, tmp in write_back:
            _copy(dst, tmp)
    except BaseException:
        for dst, tmp in write_back:
            _copy(dst, tmp)
        raise


def _empty_like(name, a):
    """``np.empty_like(a)``; one too large to allocate is a ValueError naming ``name``."""
    try:
        return np.empty_like(a)
    except (MemoryError, builtins.ValueError):
        raise too_large(name, a.shape, a.dtype) from None


def _c_copy(name, a):
    """A C-contiguous copy of ``a`` (a temporary), refused as :func:`_empty_like` refuses."""
    try:
        return np.array(a, order="C")
    except (MemoryError, builtins.ValueError):
        raise too_large(name, a.shape, a.dtype, "a contiguous copy") from None


def plan_rotation(items, seq_axis, layout, inverse, rotary_dim, norms=None):
    """Plan the rotation of validated ``items`` ``[(name, x, out, out_name)]``
    (arrays of one dtype sharing batch and sequence dims; see
    :func:`resolve_overlaps`) at the same positions; ``norms``: None, or per
    item None or the ``(over, scale, eps)`` of the norm it takes first
    (``stages.fields``), checked by the caller.

    All or nothing: C writes every result in one call; a result it cannot
    address is rotated in a contiguous temporary and written back after the
    call (one numpy copy on this thread), and then every result the caller
    can see (``out=`` arrays, x in place) is too, so an interrupt between the
    call and the copies leaves them all untouched (:func:`commit` makes the
    copies themselves all or nothing). A new result (``out=None``) is never
    seen unless the call returns, so C writes it directly."""
    sources = resolve_overlaps(items)
    plan = Plan()
    plan.buffers, plan.write_back, plan.outputs = [], [], []
    direct = []   # (index, d_tok) of results the caller sees that C would write directly
    for (name, x, out, _), src in zip(items, sources):
        result = out if out is not None else _empty_like(name, x)
        in_place = out is not None and src is x and same_memory(x, out)
        s_tok, d_tok = token_view(src, seq_axis), token_view(result, seq_axis)
        s4 = as_4d(s_tok) if kernel_friendly(s_tok) else None
        d4 = s4 if in_place else (as_4d(d_tok) if kernel_friendly(d_tok) else None)
        if d4 is None:
            # The result cannot be addressed: rotate a contiguous copy in place
            # and write it back.
            tmp = _c_copy(name, s_tok)
            s4 = d4 = as_4d(tmp)
            plan.write_back.append((d_tok, tmp))
        else:
            if s4 is None:
                s4 = as_4d(_c_copy(name, s_tok))
            if out is not None:
                direct.append((len(plan.buffers), d_tok))
        plan.buffers.append((s4, d4))
        plan.outputs.append(result)
    if plan.write_back:
        for i, d_tok in direct:   # staged too (see above): C reads the source, writes a temporary
            tmp = _staging(items[i][3], d_tok)
            plan.buffers[i] = (plan.buffers[i][0], as_4d(tmp))
            plan.write_back.append((d_tok, tmp))
    first = plan.buffers[0][0]
    plan.batch_shape = token_view(items[0][1], seq_axis).shape[:-3]
    plan.n_seq = first.shape[1]
    staged = norms is not None and any(n is not None for n in norms)
    plan.stage_data = [(_stages.weight_pointer(n), None) for n in norms] if staged else None
    plan.call = _launcher.Call(first.dtype, layout, inverse, first.shape[0], first.shape[1], first.shape[3],
                               rotary_dim, [(s.shape[2], element_strides(s), element_strides(d))
                                            for s, d in plan.buffers],
                               [(_first_element(s), _first_element(d)) for s, d in plan.buffers],
                               [_stages.fields(n) for n in norms] if staged else None)
    return plan


def _staging(name, d_tok):
    """An uninitialised C-contiguous array shaped like result view ``d_tok``."""
    try:
        return np.empty(d_tok.shape, d_tok.dtype)
    except (MemoryError, builtins.ValueError):
        raise too_large(name, d_tok.shape, d_tok.dtype, "a temporary") from None


# ---- the memo: repeated calls on the same shapes and strides --------------------------------

CALLS = {}             # direct_key -> Call, or None: these arrays take the general path
UNPLANNED = object()   # CALLS.get's default: not planned yet
FRESH = "fresh"        # a key's output mark: the result is a new array (not a strides tuple)
_MAX_CALLS = 512


def same_tokens(q, k, seq_axis):
    """Do q and k (at least 3-D) share their batch and sequence dims?"""
    if seq_axis == -3:   # [*batch, seq, heads, dim]
        return q.shape[:-2] == k.shape[:-2]
    return q.shape[:-3] == k.shape[:-3] and q.shape[-2] == k.shape[-2]


def out_mark(x, out):
    """What a memo key records of an output: None (``out is x``: in place),
    :data:`FRESH` (``out`` None: a new array) or ``out.strides``."""
    return None if out is x else FRESH if out is None else out.strides


def plan_tag(rope_key):
    """``rope_key`` (layout, rotary_dim, head_dim) as memo keys hold it: one
    string, whose hash Python keeps (a tuple's is recomputed every lookup)."""
    layout, rotary_dim, head_dim = rope_key
    return f"{layout}/{rotary_dim}/{head_dim}"


C_ORDER = "C"   # a key's strides of a C-contiguous array


def direct_key(tag, seq_axis, inverse, x, mark, k=None, k_mark=None):
    """The memo key of :func:`direct_call`, the one definition every caller
    uses: the array's (q's) shape and strides and its output's ``mark``
    (:func:`out_mark`), k's and ``k_mark`` for a call of q and k, the dtype,
    the options, and ``tag`` (:func:`plan_tag` of the rope's layout,
    rotary_dim and head_dim). No pointer enters it: a decode loop writing
    into successive slots of a cache hits the same entry every step.

    The strides of a C-contiguous array are :data:`C_ORDER`: such arrays of
    one shape and dtype are planned alike whatever strides numpy gives their
    axes of length one (the kernel never steps along those, and the planner
    reads none of them), and the flag costs a decode call less than the
    strides tuple (it is built, hashed and compared every call)."""
    if k is None:
        return (x.shape, C_ORDER if x.flags.c_contiguous else x.strides, mark, x.dtype, seq_axis, inverse, tag)
    return (x.shape, C_ORDER if x.flags.c_contiguous else x.strides, mark,
            k.shape, C_ORDER if k.flags.c_contiguous else k.strides, k_mark, x.dtype, seq_axis, inverse, tag)


def fresh_result(x):
    """The new array the direct path returns for ``x`` (``out=None``): C-contiguous
    for C-contiguous ``x``, else laid out like x (``np.empty_like``)."""
    return np.empty(x.shape, x.dtype) if x.flags.c_contiguous else np.empty_like(x)


def _first_element(a):
    """How the direct path reaches ``a``'s first element as a buffer: None (``a``
    is C-contiguous: its own buffer) or the index of its first head
    ``a[0, ..., 0, :]`` (contiguous, since the last axis is)."""
    return None if a.flags.c_contiguous else (0,) * (a.ndim - 1)


def _addressable(a):
    """Can the kernel address ``a`` from its first element, whatever the data
    pointer? (Contiguous last axis, strides that are element multiples on the
    axes longer than one, the only ones the kernel steps along.) The
    pointer's alignment is checked per call, by C."""
    item = a.itemsize
    return a.strides[-1] == item and all(s % item == 0 for n, s in zip(a.shape, a.strides) if n != 1)


def plan_direct(arrays, outs, seq_axis, inverse, rope_key, norms=None):
    """``(call, None)``: the ``_launcher.Call`` for ``arrays`` (one per tensor,
    validated as the general path validates them) written to ``outs`` (per
    tensor: the array itself for in place, None for a new array from
    :func:`fresh_result`, or an array of its shape and dtype); or ``(None,
    reason)`` when the arrays need the general path, ``reason`` a phrase
    naming the array. Depends on shapes, strides and dtypes only, never on
    pointers: overlaps *between* arrays and pointer alignment are the
    caller's to check per call (the direct path does, C checks alignment).
    ``norms``: None, or per array the ``(over, scale, eps)`` of its norm or
    None (a staged Call: each launch gives the weights)."""
    first = arrays[0]
    layout, rotary_dim, head_dim = rope_key
    names = ("x",) if len(arrays) == 1 else ("q", "k")
    if seq_axis not in (-3, -2):
        return None, f"seq_axis {seq_axis!r} is not -3 or -2"
    if not _dtypes.stores(first.dtype):
        return None, f"{names[0]} has dtype {first.dtype}, which the kernel lacks"
    for name, a in zip(names, arrays):
        if a.ndim < 3 or a.shape[-1] != head_dim or a.dtype != first.dtype:
            return None, f"{name} has shape {a.shape} and dtype {a.dtype}"
        if not a.size:
            return None, f"{name} is empty (shape {a.shape})"
        if not same_tokens(first, a, seq_axis):
            return None, f"q and k have other tokens (shapes {first.shape} and {a.shape})"
    tensors, firsts = [], []
    for i, (name, x, out) in enumerate(zip(names, arrays, outs)):
        out_name = "out" if len(arrays) == 1 else f"out[{i}]"
        try:
            result = fresh_result(x) if out is None else out
        except (MemoryError, builtins.ValueError):   # the general path names the argument
            return None, f"a new array for {name} of shape {x.shape} cannot be allocated"
        for what, a in ((name, x), (out_name, result)):
            if not _addressable(a):
                return None, (f"{what} (strides {a.strides}) needs a copy: its last axis is not contiguous "
                              f"or a stride is not a whole number of {a.itemsize}-byte elements")
        if out is not None and self_overlapping(result):   # written twice: refused by the general path
            return None, f"{name if out is x else out_name} has elements that overlap each other"
        v, w = as_4d(token_view(x, seq_axis)), as_4d(token_view(result, seq_axis))
        if v is None or w is None:
            return None, (f"{name if v is None else out_name} has batch dims whose strides do not merge "
                          f"into one (shape {x.shape}, strides {(x if v is None else result).strides})")
        tensors.append((v.shape[2], element_strides(v), element_strides(w)))
        firsts.append((_first_element(x), _first_element(result)))
    v = as_4d(token_view(first, seq_axis))
    stages = None if norms is None else [_stages.fields(n) for n in norms]
    return _launcher.Call(first.dtype, layout, inverse, v.shape[0], v.shape[1], v.shape[3], rotary_dim, tensors,
                          firsts, stages), None


def direct_call(key, arrays, seq_axis, inverse, rope_key, outs=None, norms=None):
    """The memoised :func:`plan_direct` of ``arrays`` and ``outs`` (None: every
    array in place), or None when they need the general path (a seq_axis
    other than -3 or -2, fewer than 3 dims, empty, another head size or a
    dtype the kernel lacks, q and k of other dtypes or tokens, a last axis
    that is not contiguous, strides that are not element multiples, batch
    dims that do not merge, a written array whose elements overlap each
    other, which the general path refuses).

    Planned once per ``key`` (from :func:`direct_key`); callers look
    ``CALLS[key]`` up first (refusals are kept too, as None), so a repeated
    call is a dict lookup."""
    call, _ = plan_direct(arrays, arrays if outs is None else outs, seq_axis, inverse, rope_key, norms)
    if len(CALLS) >= _MAX_CALLS:
        CALLS.clear()
    CALLS[key] = call
    return call

