"""The paged-cache write: rotate keys (after their norm) at their positions and
write them, with values, into the slots of a paged KV cache, in one C call.

``Rope.cache_write`` comes here with ndarrays (tensors have crossed the edge).
The rope is an argument, never imported: its angle policy (``_token_positions``,
``_angles_for``) says where cos/sin come from, as on the general path.

A cache is ``[num_blocks, block_size, kv_heads, head_dim]`` ("NHD") or
``[num_blocks, kv_heads, block_size, head_dim]`` ("HND"), of floats or
quantised (``quantised.py``: int8 with a scale per slot and head, float8
e4m3 with a static scale, q8_0 blocks on the last axis); token t goes to
slot ``slot_mapping[t]`` = block * block_size + offset (-1: skipped). A slot
is a place, never a position: keys turn by their positions (``offset +
arange(seq)`` or ``positions``), whatever slot they land in. Everything is
checked before anything is written; C checks every slot again.
"""
import math

import numpy as np

from . import dtypes as _dtypes, plan as _plan, quantised as _quant, stages as _stages
from .checks import MAX_POSITION, as_float_array, as_int, positions_array
from .direct import may_share
from .launcher import Call
from ..errors import TypeError, ValueError

LAYOUTS = ("NHD", "HND")
_ndarray = np.ndarray
_SMALL = 64   # token counts up to this check their slots in Python lists, above it in numpy


def _cache_form(layout):
    return ("[num_blocks, block_size, kv_heads, head_dim]" if layout == "NHD"
            else "[num_blocks, kv_heads, block_size, head_dim]")


def _check_cache(name, cache, data_dtype, kv_heads, head_dim, layout):
    """``(num_blocks, block_size, out element strides (block, slot, head), quant
    kind, the cache as C addresses it)`` of a cache (a uint8 q8_0 cache as
    ``Q8_0`` blocks)."""
    kind = _quant.kind_of(cache)
    dim = head_dim
    if kind == _quant.NONE:
        as_float_array(name, cache, _dtypes.accepted_dtypes(cache), _dtypes.accepted_names)
        if data_dtype == np.float64 and cache.dtype not in (np.float64, np.float32):
            raise TypeError(f"{name}: float64 data are written to a float64 or float32 cache, got {cache.dtype}")
    else:
        if data_dtype == np.float64:
            raise TypeError(f"{name}: a {_quant.NAMES[kind]} cache quantises float32 arithmetic: float64 data are "
                            f"written to a float64 or float32 cache")
        if kind == _quant.Q8:
            cache = _quant.as_blocks(name, cache, head_dim)
            dim = head_dim // _quant.Q8_0_VALUES
    if cache.ndim != 4:
        raise ValueError(f"{name} must be a 4-D cache {_cache_form(layout)} (layout={layout!r}), "
                         f"got shape {cache.shape}")
    blocks, a, b, last = cache.shape
    heads, block_size = (b, a) if layout == "NHD" else (a, b)
    if heads != kv_heads or last != dim:
        what = f"head_dim={head_dim}" if kind != _quant.Q8 else f"head_dim // 32 = {dim} q8_0 blocks"
        raise ValueError(f"{name} must be {_cache_form(layout)} with kv_heads={kv_heads} and {what} "
                         f"(layout={layout!r}), got shape {cache.shape}")
    if not cache.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if cache.size == 0:   # no slot (numpy gives such arrays any strides): every token must be -1
        return blocks, block_size, (0, 0, 0), kind, cache
    if not _plan.kernel_friendly(cache):
        raise ValueError(f"{name} (strides {cache.strides}) must have a contiguous last axis and aligned "
                         f"elements: a cache is written in place, never through a copy")
    if _plan.self_overlapping(cache):
        raise ValueError(f"{name} has elements that overlap each other (a zero or overlapping stride)")
    s = [st // cache.itemsize for st in cache.strides]
    strides = (s[0], s[1], s[2]) if layout == "NHD" else (s[0], s[2], s[1])
    return blocks, block_size, strides, kind, cache


def _quant_of(name, kind, cache, scale, layout):
    """``(rope_quant fields, int8 scales or None)`` of a cache of quant ``kind``
    and its ``k_scale``/``v_scale`` argument (``name``), checked."""
    if kind == _quant.NONE:
        if scale is not None:
            raise TypeError(f"{name} goes with an int8 or float8_e4m3fn cache; a {cache.dtype} cache stores "
                            f"values as they are (got {type(scale).__name__})")
        return _quant.quant_fields(kind), None
    if kind == _quant.Q8:
        if scale is not None:
            raise TypeError(f"{name}: a q8_0 cache keeps its scales in its blocks (pass None), "
                            f"got {type(scale).__name__}")
        return _quant.quant_fields(kind), None
    if kind == _quant.FP8:
        return _quant.quant_fields(kind, scale=_quant.static_scale(name, scale)), None
    scales, strides = _quant.scale_array(name, scale, cache.shape[:3], layout)
    return _quant.quant_fields(kind, scale_strides=strides), scales


def _source(name, x):
    """``x`` as the kernel reads it, ``[B, seq, heads, dim]``: a view, or a contiguous copy."""
    if _plan.kernel_friendly(x):
        x4 = _plan.as_4d(x)
        if x4 is not None:
            return x4
    return _plan.as_4d(_plan._c_copy(name, x))


def _slots(slot_mapping, token_shape, n_slots):
    """``slot_mapping`` as a C-contiguous int64 ``[B, seq]`` copy, each slot in
    range or -1 and none twice, else a ValueError naming it."""
    arr = positions_array("slot_mapping", slot_mapping)
    if arr.shape != token_shape:
        raise ValueError(f"slot_mapping must have k's token shape {token_shape} (k without its last two axes), "
                         f"got {arr.shape}")
    if _plan.self_overlapping(arr):
        # every token needs a slot of its own (or -1): a broadcast map is all padding or all one slot,
        # and its length would set the work, not its memory
        raise ValueError(f"slot_mapping (shape {arr.shape}, strides {arr.strides}) has elements that share "
                         f"memory, a broadcast view: pass one slot per token")
    n = arr.size
    # a decode step's few slots are checked in Python ints (fewer numpy calls); a
    # larger map, or a small one that fails, by numpy, which also says what is wrong
    if n <= _SMALL and _listed_ok(arr.ravel().tolist(), n_slots):
        return arr.astype(np.int64, order="C").reshape(math.prod(token_shape[:-1]), token_shape[-1])
    if n and (int(arr.max()) >= n_slots or int(arr.min()) < -1):
        bad = arr[(arr >= n_slots) | (arr < -1)].flat[0]
        raise ValueError(f"slot_mapping must hold slots in [0, {n_slots}) (num_blocks * block_size) or -1 "
                         f"(skip the token), got {int(bad)}")
    slots = arr.astype(np.int64, order="C").reshape(math.prod(token_shape[:-1]), token_shape[-1])
    valid = np.sort(slots[slots != -1], kind="stable")
    if valid.size > 1 and (valid[1:] == valid[:-1]).any():
        flat = slots[slots != -1]
        values, counts = np.unique(flat, return_counts=True)
        raise ValueError(f"slot_mapping holds slot {int(values[counts > 1][0])} twice: two tokens cannot share "
                         f"a cache slot")
    return slots


class Layout:
    """What a write depends on but its pointers: the checked shapes, strides and
    dtypes of k, v and the caches, the norm's stage, the caches' quants, and
    the Call for sources laid out as ``k4``/``v4`` (built by :meth:`call`)."""

    __slots__ = ("kv_heads", "n_slots", "block_size", "k_strides", "v_strides", "stage", "token_shape",
                 "k_dtype", "k_cache_dtype", "v_cache_dtype", "small", "k_cache", "v_cache", "k_quant", "v_quant",
                 "k_scales", "v_scales", "quantised")

    def call(self, rope, k4, v4, k_cache, v_cache):
        """The staged ``Call`` writing ``k4`` (and ``v4``: values, or None) into the caches."""
        n_seq = self.token_shape[-1]
        slot_strides = (0 if k4.shape[0] == 1 else n_seq, 1)
        place = (self.n_slots, self.block_size, slot_strides)
        tensors = [(self.kv_heads, _plan.element_strides(k4), self.k_strides)]
        firsts = [(_plan._first_element(k4), _plan._first_element(k_cache))]
        k_type = None if self.k_quant["kind"] else self.k_cache_dtype
        stages = [_stages.fields(self.stage, True, k_type, place)]
        quants = [self.k_quant]
        if v4 is not None:
            tensors.append((self.kv_heads, _plan.element_strides(v4), self.v_strides))
            firsts.append((_plan._first_element(v4), _plan._first_element(v_cache)))
            v_type = None if self.v_quant["kind"] else self.v_cache_dtype
            stages.append(_stages.fields(None, False, v_type, place))
            quants.append(self.v_quant)
        return Call(self.k_dtype, rope.layout, False, k4.shape[0], n_seq, rope.head_dim, rope.rotary_dim, tensors,
                    firsts, stages, quants if self.quantised else None)


def _layout(rope, k, v, k_cache, v_cache, norm, layout, k_scale=None, v_scale=None):
    """The :class:`Layout` of a write, every check that needs no pointer made
    (TypeError/ValueError naming the argument)."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be 'NHD' ([num_blocks, block_size, kv_heads, head_dim]) or 'HND' "
                         f"([num_blocks, kv_heads, block_size, head_dim]), got {layout!r}")
    as_float_array("k", k, _dtypes.accepted_dtypes(k), _dtypes.accepted_names)
    head_dim = rope.head_dim
    if k.ndim < 3 or k.shape[-1] != head_dim:
        raise ValueError(f"k must be [tokens, kv_heads, head_dim] or [*batch, seq, kv_heads, head_dim] with "
                         f"head_dim={head_dim}, got shape {k.shape}")
    if (v is None) != (v_cache is None):
        raise ValueError(f"v and v_cache go together: got v {'None' if v is None else 'an array'} and v_cache "
                         f"{'None' if v_cache is None else 'an array'}")
    if v is not None:
        as_float_array("v", v, (k.dtype,))
        if v.shape != k.shape:
            raise ValueError(f"v must have k's shape {k.shape}, got {v.shape}")
    w = Layout()
    w.kv_heads = kv_heads = k.shape[-2]
    blocks, w.block_size, w.k_strides, k_kind, w.k_cache = _check_cache("k_cache", k_cache, k.dtype, kv_heads,
                                                                         head_dim, layout)
    w.k_quant, w.k_scales = _quant_of("k_scale", k_kind, w.k_cache, k_scale, layout)
    w.v_strides = w.v_cache_dtype = w.v_cache = w.v_scales = None
    w.v_quant = _quant.quant_fields(_quant.NONE)
    if v_cache is None and v_scale is not None:
        raise TypeError(f"v_scale goes with a v_cache (v_cache is None), got {type(v_scale).__name__}")
    if v_cache is not None:
        v_blocks, v_block_size, w.v_strides, v_kind, w.v_cache = _check_cache("v_cache", v_cache, k.dtype, kv_heads,
                                                                              head_dim, layout)
        if (v_blocks, v_block_size) != (blocks, w.block_size):
            raise ValueError(f"v_cache must have k_cache's shape in blocks and block size ({blocks}, "
                             f"{w.block_size}), got shape {v_cache.shape}")
        w.v_quant, w.v_scales = _quant_of("v_scale", v_kind, w.v_cache, v_scale, layout)
        w.v_cache_dtype = w.v_cache.dtype
    w.quantised = bool(w.k_quant["kind"] or w.v_quant["kind"])
    w.stage = None
    if norm is not None:
        _stages.check_stage_dim("norm", head_dim)
        w.stage = norm.stage("norm", k.dtype, head_dim, kv_heads)
    elif k_cache.dtype != k.dtype or (v_cache is not None and v_cache.dtype != k.dtype):
        _stages.check_stage_dim("k_cache" if k_cache.dtype != k.dtype else "v_cache", head_dim)
    w.n_slots = blocks * w.block_size
    w.token_shape = k.shape[:-2]
    w.k_dtype, w.k_cache_dtype = k.dtype, w.k_cache.dtype
    return w


def _apart(k, v, k_cache, v_cache, k_scales=None, v_scales=None):
    """Refuse caches (and int8 scales) that overlap each other, or k or v
    (ValueError naming both)."""
    if v_cache is not None and _plan.overlap(k_cache, v_cache):
        raise ValueError("k_cache and v_cache overlap: one cache would overwrite the other")
    for name, x in (("k", k), ("v", v)):
        for cname, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
            if x is not None and cache is not None and _plan.overlap(x, cache):
                raise ValueError(f"{name} and {cname} overlap: the write would change what it reads")
    for sname, scales in (("k_scale", k_scales), ("v_scale", v_scales)):
        if scales is None:
            continue
        for name, x in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("k_scale", k_scales)):
            if x is not None and name != sname and _plan.overlap(x, scales):
                raise ValueError(f"{sname} and {name} overlap: the scales would overwrite what the call reads or "
                                 f"writes")


def cache_write(rope, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout, where, k_scale=None,
                v_scale=None):
    """``Rope.cache_write`` on ndarrays, planned in full (:func:`direct` is the
    memoised path for decode-shaped calls); ``norm``: a ``pyrope.RMSNorm`` or
    None. Returns ``(k_cache, v_cache)``."""
    w = _layout(rope, k, v, k_cache, v_cache, norm, layout, k_scale, v_scale)
    _apart(k, v, w.k_cache, w.v_cache, w.k_scales, w.v_scales)
    slots = _slots(slot_mapping, w.token_shape, w.n_slots)
    batch_shape, n_seq = w.token_shape[:-1], w.token_shape[-1]
    offset = as_int("offset", offset)
    if positions is not None and offset != 0:
        raise ValueError(f"pass either positions or offset, not both (offset={offset})")
    if positions is None and (offset < -MAX_POSITION or offset + max(n_seq - 1, 0) > MAX_POSITION):
        raise ValueError(f"offset + seq must stay within +-{MAX_POSITION}, got offset={offset}, seq={n_seq}")
    empty = k.size == 0 or w.n_slots == 0   # no token, or every slot -1 (checked above)
    sections = None
    if positions is not None:
        positions, sections = rope._token_positions(positions, batch_shape, n_seq, not empty)
    if empty:
        return k_cache, v_cache
    k4 = _source("k", k)
    v4 = None if v is None else _source("v", v)
    call = w.call(rope, k4, v4, w.k_cache, w.v_cache)
    sources, results = (k4,) if v is None else (k4, v4), (w.k_cache,) if v is None else (w.k_cache, w.v_cache)
    template, c_positions, keep = rope._angles_for(positions, offset, n_seq, "auto", k.dtype)
    strides = (0, 0, 0) if c_positions is None else _plan.position_strides(c_positions)
    if c_positions is not None:
        c_positions = _plan.positions_apart(c_positions, results)
    call.launch(sources, results, template, c_positions, offset, where, strides, sections, False,
                _stage_data(w.stage, slots, v is not None, (w.k_scales, w.v_scales) if w.quantised else None))
    del keep   # the rows the template pointed into lived until here
    return k_cache, v_cache


def _listed_ok(listed, n_slots):
    """Are the slots in list ``listed`` each -1 or in [0, n_slots), none twice?"""
    if not listed:
        return True
    skipped = listed.count(-1)
    return (max(listed) < n_slots and min(listed) >= -1
            and len(set(listed)) == len(listed) - skipped + (skipped > 0))


def _stage_data(stage, slots, with_values, scales=None):
    """The launch's stage data: k's norm weights and slots, and v's slots; a
    quantised write's ``scales`` ``(k's, v's)``, int8 scales arrays or None."""
    k_data, v_data = (_stages.weight_pointer(stage), slots), (_stages.NULL, slots)
    if scales is not None:
        k_data, v_data = k_data + scales[:1], v_data + scales[1:]
    return (k_data, v_data) if with_values else (k_data,)


# ---- the memo: a decode step's repeated writes -----------------------------------------------

_WRITES = {}   # key -> (Layout, Call) or None (the general path plans these)
_MAX_WRITES = 256


def _scale_key(scale):
    """What a plan depends on of a k_scale/v_scale: nothing (None), an int8
    scales array's form, or a float8 cache's static value (in the Call)."""
    if scale is None:
        return None
    if type(scale) is _ndarray:
        return (scale.shape, scale.strides, scale.dtype)
    return ("static", scale)


def direct(rope, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout, where, k_scale=None,
           v_scale=None):
    """The write through the memo, or False (nothing written): the general path
    decides. For C-contiguous ndarrays k and v (None with v_cache None),
    ndarray caches and slot_mapping, an int offset, positions None or an
    ndarray, and scales None, ndarrays or Python numbers (the caller checks
    the types)."""
    norm_key = None if norm is None else (norm.over, norm.eps, norm.weight is None)
    key = (k.shape, k.dtype, k_cache.shape, k_cache.strides, k_cache.dtype,
           None if v_cache is None else (v.shape, v.dtype, v_cache.shape, v_cache.strides, v_cache.dtype),
           slot_mapping.shape, slot_mapping.dtype, layout, norm_key, rope._plan_tag,
           _scale_key(k_scale), _scale_key(v_scale))
    planned = _WRITES.get(key, _UNPLANNED)
    if planned is _UNPLANNED:
        planned = _plan_direct(key, rope, k, v, k_cache, v_cache, slot_mapping, norm, layout, k_scale, v_scale)
    if planned is None:
        return False
    w, call = planned
    if w.quantised:   # the scales: planned alike; they must keep out of every other array
        for scales in (k_scale, v_scale):
            if type(scales) is _ndarray and (may_share(scales, k) or may_share(scales, k_cache) or (
                    v_cache is not None and (may_share(scales, v) or may_share(scales, v_cache)))):
                return False
        if type(k_scale) is _ndarray and type(v_scale) is _ndarray and may_share(k_scale, v_scale):
            return False
    # this call's norm: planned alike (kind, eps, a weight or none), its own weights
    stage = None if norm is None else norm.stage("norm", k.dtype, k.shape[-1], w.kv_heads)
    # overlaps by byte bounds: any that might share a byte go to the general path
    if may_share(k, k_cache) or (v_cache is not None and (
            may_share(k, v_cache) or may_share(v, k_cache) or may_share(v, v_cache) or may_share(k_cache, v_cache))):
        return False
    rows = rope._rows_for(np.float64).window if call.wide else rope._tables.window
    if rows is None:
        return False
    if w.small:   # a decode step: checked in Python ints
        if not _listed_ok((slot_mapping if slot_mapping.ndim == 1 else slot_mapping.ravel()).tolist(), w.n_slots):
            return False   # out of range or twice: the general path names it
        slots = slot_mapping if slot_mapping.dtype is _INT64 and slot_mapping.flags.c_contiguous else (
            slot_mapping.astype(np.int64))
    else:
        slots = _slots(slot_mapping, w.token_shape, w.n_slots)
    # k and v themselves: C-contiguous, their buffers are the planned [B, seq, heads, dim] views
    scales = ((k_scale if type(k_scale) is _ndarray else None, v_scale if type(v_scale) is _ndarray else None)
              if w.quantised else None)   # a float8 cache's static scale is in the Call
    return call.launch((k,) if v is None else (k, v), (k_cache,) if v is None else (k_cache, v_cache), rows.angles,
                       positions, offset, where, None, None, True, _stage_data(stage, slots, v is not None, scales))


def _plan_direct(key, rope, k, v, k_cache, v_cache, slot_mapping, norm, layout, k_scale, v_scale):
    """Plan and memoise a direct write (None: the general path takes these);
    refusals raise, as the general path would raise them."""
    planned = None
    if k.size and k_cache.size and k.ndim in (3, 4) and slot_mapping.dtype.kind in "iu":
        w = _layout(rope, k, v, k_cache, v_cache, norm, layout, k_scale, v_scale)
        # caches as given (a uint8 q8_0 cache, viewed as blocks per call, takes the general path)
        if slot_mapping.shape == w.token_shape and w.k_cache is k_cache and (v_cache is None or w.v_cache is v_cache):
            w.small = slot_mapping.size <= _SMALL
            planned = (w, w.call(rope, _plan.as_4d(k), None if v is None else _plan.as_4d(v), k_cache, v_cache))
            # the memo keeps the plan, never the first call's arrays: each call brings its own
            w.k_cache = w.v_cache = w.k_scales = w.v_scales = None
    if len(_WRITES) >= _MAX_WRITES:
        _WRITES.clear()
    _WRITES[key] = planned
    return planned


_UNPLANNED = object()
_INT64 = np.dtype(np.int64)
