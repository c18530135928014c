"""Quantised KV caches: ggml's q8_0 block type and :func:`dequantize`.

``Rope.cache_write`` rotates keys in float32 and quantises them once, into
an ``int8`` cache (a float32 scale per slot and head), a float8 e4m3fn one
(a static scale per cache, vLLM's ``kv_cache_dtype="fp8"``) or a q8_0 one
(llama.cpp's ``--cache-type-k q8_0``); ``Rope.shift_keys`` moves keys inside
them. :func:`dequantize` reads any of them back as float32, by the formulas
the engines use (docs/ACCURACY.md, "Quantised caches").
"""
import numpy as np

from ._engine import plan as _plan, quantised as _quant
from ._engine.checks import as_float_array
from ._engine import dtypes as _dtypes
from ._interop.edge import entry
from .errors import TypeError, ValueError

__all__ = ["Q8_0", "dequantize"]

#: ggml's ``block_q8_0`` as a numpy dtype: ``("d", float16)``, ``("qs", int8, 32)``; 34 bytes, unaligned.
Q8_0 = _quant.Q8_0


@entry(inputs=("cache", "scale"), data=False, name="pyrope.dequantize")
def dequantize(cache, *, scale=None):
    """The float32 values a cache holds (a new array; the input's type: torch in, torch out).

    - ``int8``: ``q * scale``, ``scale`` the float32 scales that
      ``cache_write`` wrote (the cache's shape without its last axis, or
      anything broadcasting to it); required.
    - float8 e4m3fn (``ml_dtypes.float8_e4m3fn``, torch ``float8_e4m3fn``):
      ``value * scale``, ``scale`` the cache's static scale (default 1.0).
    - q8_0: blocks of :data:`Q8_0` on the last axis (or their bytes as
      uint8, a multiple of 34 per row): ``qs * d`` (ggml's
      ``dequantize_row_q8_0``), ``[..., blocks * 32]``; ``scale`` None.
    - a float cache: its values as float32 (``scale`` None).

    Each value is one float32 product, as the engines compute it.
    """
    if not isinstance(cache, np.ndarray):
        raise TypeError(f"cache must be an array, got {type(cache).__name__}")
    if cache.size and _plan.self_overlapping(cache):
        raise ValueError(f"cache (shape {cache.shape}, strides {cache.strides}) has elements that share memory, "
                         f"a broadcast view: dequantize a cache, not a view that repeats one")
    kind = _quant.kind_of(cache)
    if kind == _quant.INT8:
        if scale is None:
            raise TypeError("scale is required for an int8 cache: the float32 scales its write filled in "
                            "(the cache's shape without the last axis)")
        s = np.asarray(scale)
        if s.dtype != np.float32:
            raise TypeError(f"scale must be float32 (the scales an int8 write fills in), got {s.dtype}")
        try:
            np.broadcast_shapes(s.shape, cache.shape[:-1])
        except Exception:
            raise ValueError(f"scale must broadcast to the cache's shape without its last axis "
                             f"{cache.shape[:-1]}, got {s.shape}") from None
        return cache.astype(np.float32) * s[..., None]
    if kind == _quant.FP8:
        value = np.float32(_quant.static_scale("scale", scale))
        return cache.astype(np.float32) * value
    if kind == _quant.Q8:
        if scale is not None:
            raise TypeError(f"scale: a q8_0 cache keeps its scales in its blocks (pass None), "
                            f"got {type(scale).__name__}")
        blocks = cache
        if cache.dtype != Q8_0:
            if cache.ndim < 1 or cache.shape[-1] % _quant.Q8_0_BYTES:
                raise ValueError(f"cache: a uint8 q8_0 cache holds blocks of {_quant.Q8_0_BYTES} bytes on its last "
                                 f"axis, got shape {cache.shape}")
            blocks = _quant.as_blocks("cache", cache, cache.shape[-1] // _quant.Q8_0_BYTES * _quant.Q8_0_VALUES)
        values = blocks["qs"].astype(np.float32) * blocks["d"].astype(np.float32)[..., None]
        return values.reshape(blocks.shape[:-1] + (blocks.shape[-1] * _quant.Q8_0_VALUES,)) if blocks.ndim else values
    if scale is not None:
        raise TypeError(f"scale goes with an int8 or float8_e4m3fn cache, got a {cache.dtype} cache")
    as_float_array("cache", cache, _dtypes.accepted_dtypes(cache), _dtypes.accepted_names)
    return cache.astype(np.float32)
