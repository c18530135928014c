"""Quantised caches: which kind a cache is, its scales, and the ``rope_quant`` fields.

A cache written by ``Rope.cache_write`` or moved by ``Rope.shift_keys`` may
hold, instead of floats (pyrope.h's ``rope_quant`` has the formulas):

- ``int8`` values with a float32 scale per (slot, head), in a ``k_scale``/
  ``v_scale`` array of the cache's token shape that the call writes;
- ``float8_e4m3fn`` values (ml_dtypes' dtype; torch's ``float8_e4m3fn``)
  with one static scale per cache (``k_scale``/``v_scale`` a number, default
  1.0 as in vLLM);
- ggml ``q8_0`` blocks: the last axis holds ``head_dim // 32`` blocks of
  :data:`Q8_0` (or their 34 bytes each, as uint8: torch has no structured
  dtypes), the scales inside the blocks.

This module reads a cache's kind and checks what goes with it; the C call
gets the kind, the static scale and the scales' pointer and strides.
"""
import builtins
import math
import sys

import numpy as np

from .binding import Q8_0_BYTES, Q8_0_VALUES, QUANT_KINDS
from . import plan as _plan
from ..errors import TypeError, ValueError

#: ggml's ``block_q8_0``: a float16 scale ``d`` and 32 int8 values, 34 bytes, unaligned.
Q8_0 = np.dtype([("d", np.float16), ("qs", np.int8, (Q8_0_VALUES,))])
assert Q8_0.itemsize == Q8_0_BYTES

NONE, INT8, FP8, Q8 = (QUANT_KINDS[k] for k in (None, "int8", "float8_e4m3fn", "q8_0"))
NAMES = {code: name for name, code in QUANT_KINDS.items() if name}
_INT8 = np.dtype(np.int8)
_UINT8 = np.dtype(np.uint8)


def float8_e4m3fn():
    """ml_dtypes' float8_e4m3fn dtype when ml_dtypes is loaded (an array of it
    exists only then), else None."""
    module = sys.modules.get("ml_dtypes")
    return None if module is None else np.dtype(module.float8_e4m3fn)


def kind_of(cache):
    """The ``ROPE_QUANT_*`` kind of an ndarray cache by its dtype (NONE: a float
    cache, or a dtype the float checks refuse). A uint8 cache is q8_0 bytes."""
    dtype = cache.dtype
    if dtype == _INT8:
        return INT8
    if dtype == Q8_0 or dtype == _UINT8:
        return Q8
    if dtype.itemsize == 1 and dtype == float8_e4m3fn():
        return FP8
    return NONE


def as_blocks(name, cache, head_dim):
    """A q8_0 cache as :data:`Q8_0` blocks ``[..., head_dim // 32]`` (a uint8 one
    viewed so, its last axis ``head_dim // 32 * 34`` contiguous bytes), else a
    ValueError naming ``name``."""
    if head_dim % Q8_0_VALUES:
        raise ValueError(f"{name}: a q8_0 cache holds heads in blocks of {Q8_0_VALUES} values, "
                         f"head_dim={head_dim} is not a multiple of {Q8_0_VALUES}")
    if cache.dtype == Q8_0:
        return cache
    want = head_dim // Q8_0_VALUES * Q8_0_BYTES
    if cache.ndim < 1 or cache.shape[-1] != want:
        raise ValueError(f"{name}: a uint8 cache holds q8_0 blocks, {want} bytes per head "
                         f"(head_dim={head_dim} / {Q8_0_VALUES} blocks of {Q8_0_BYTES}), got shape {cache.shape}")
    try:
        return cache.view(Q8_0)   # needs a contiguous last axis
    except builtins.ValueError:
        raise ValueError(f"{name}: a q8_0 cache's last axis must be contiguous bytes, got strides "
                         f"{cache.strides}") from None


def static_scale(name, scale):
    """A float8 cache's static scale as a float32 value (None: 1.0, vLLM's
    default), finite and > 0, else a TypeError/ValueError naming ``name``."""
    if scale is None:
        return 1.0
    if isinstance(scale, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number (a float8 cache's static scale), got {scale!r}")
    try:
        arr = np.asarray(scale)
    except Exception:   # an object numpy cannot read
        arr = None
    if arr is None or arr.dtype.kind not in "iuf" or arr.size != 1:
        raise TypeError(f"{name} must be one number (a float8 cache's static scale), got "
                        f"{type(scale).__name__}{'' if arr is None else f' of shape {arr.shape}'}")
    value = float(np.float32(arr.reshape(())))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0 as a float32 (a float8 cache's static scale), got {scale!r}")
    return value


def scale_array(name, scales, token_shape, layout):
    """An int8 cache's scales: a writable float32 ndarray of the cache's token
    shape (``[num_blocks, block_size, kv_heads]`` NHD, ``[num_blocks,
    kv_heads, block_size]`` HND), aligned; its element strides as C takes
    them, {block, slot in the block, head}. Else a TypeError/ValueError
    naming ``name``."""
    form = "[num_blocks, block_size, kv_heads]" if layout == "NHD" else "[num_blocks, kv_heads, block_size]"
    if scales is None:
        raise TypeError(f"{name} is required with an int8 cache: a float32 array {form} {token_shape} that the "
                        f"call fills with each head's scale")
    if not isinstance(scales, np.ndarray):
        raise TypeError(f"{name} must be a float32 array {form} {token_shape}, got {type(scales).__name__}")
    if scales.dtype != np.float32:
        raise TypeError(f"{name} must be float32 (one scale per slot and head), got {scales.dtype}")
    if scales.shape != token_shape:
        raise ValueError(f"{name} must have the cache's token shape {form} {token_shape}, got {scales.shape}")
    if not scales.flags.writeable:
        raise ValueError(f"{name} is read-only (the call writes each head's scale)")
    if scales.size == 0:
        return scales, (0, 0, 0)
    if not scales.flags.aligned or any(s % 4 for s in scales.strides):
        raise ValueError(f"{name} (strides {scales.strides}) must have aligned float32 elements")
    if _plan.self_overlapping(scales):
        raise ValueError(f"{name} has elements that overlap each other (a zero or overlapping stride)")
    s = [st // 4 for st in scales.strides]
    return scales, ((s[0], s[1], s[2]) if layout == "NHD" else (s[0], s[2], s[1]))


def quant_fields(kind, in_place=False, scale=1.0, scale_strides=(0, 0, 0)):
    """The ``rope_quant`` fields of one tensor but the scales' pointer."""
    return dict(kind=kind, in_place=1 if in_place else 0, scale=scale if kind == FP8 else 0.0,
                scale_strides=list(scale_strides))
