"""Keys moved inside a paged cache: ``Rope.shift_keys``.

llama.cpp's K-shift (after a context shift or a removed prefix) moves cached
keys to new positions. Here it is one C pass over the listed slots: each
key is read where it lies (a quantised one dequantised to float32), rotated
by the exact position difference ``to - from`` with attention factor 1 (the
key already carries the factor), and stored back to its slot (requantised:
an int8 head's scale is recomputed). A float cache gets the bits
``pyrope.cache.rerotate`` gives its keys gathered.

Below ``pyrope.rope``: the Rope class is an argument (to build the unit
twin), never imported.
"""
import builtins

import numpy as np

from .._engine import paged as _paged, plan as _plan, quantised as _quant, stages as _stages
from .._engine.checks import MAX_POSITION, POSITION_LIMIT, checked_positions, positions_array
from .._engine.launcher import Call
from .._interop.edge import entry
from ..errors import TypeError, ValueError
from .explicit import unit_twin


def _heads(k_cache, layout):
    """kv_heads of a 4-D cache by its layout (the cache check names a wrong shape)."""
    if getattr(k_cache, "ndim", None) != 4:
        return 0
    return k_cache.shape[2] if layout == "NHD" else k_cache.shape[1]


@entry(inputs=("k_cache", "k_scale"), positions=("slot_mapping", "from_positions", "to_positions"),
       written=("k_cache", "k_scale"), like="", data=False, name="Rope.shift_keys")
def shift_keys(rope_class, rope, k_cache, slot_mapping, from_positions, to_positions, layout="NHD", k_scale=None):
    """``Rope.shift_keys`` (``rope_class``: the Rope class ``rope`` must be)."""
    if not isinstance(rope, rope_class):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    if not isinstance(layout, str) or layout not in _paged.LAYOUTS:
        raise ValueError(f"layout must be 'NHD' ([num_blocks, block_size, kv_heads, head_dim]) or 'HND' "
                         f"([num_blocks, kv_heads, block_size, head_dim]), got {layout!r}")
    if rope.mrope_section is not None:
        raise ValueError("shift_keys moves each key by one position difference; a sectioned (multimodal) rope "
                         "turns its pairs by several position components: gather the keys and use "
                         "pyrope.cache.rerotate")
    if not isinstance(k_cache, np.ndarray):
        raise TypeError(f"k_cache must be an array (a paged cache), got {type(k_cache).__name__}")
    kind = _quant.kind_of(k_cache)
    # what C computes in: a quantised key's float32, a float key's own type
    op_dtype = np.dtype(np.float32) if kind != _quant.NONE else k_cache.dtype
    blocks, block_size, strides, kind, cache = _paged._check_cache(
        "k_cache", k_cache, op_dtype, _heads(k_cache, layout), rope.head_dim, layout)
    quant, scales = _paged._quant_of("k_scale", kind, cache, k_scale, layout)
    if kind != _quant.NONE:   # dequantised into a row of at most ROPE_MAX_STAGE_DIM values
        _stages.check_stage_dim("k_cache", rope.head_dim)
    if scales is not None and _plan.overlap(cache, scales):
        raise ValueError("k_scale and k_cache overlap: the scales would overwrite the keys")
    slots_in = positions_array("slot_mapping", slot_mapping)
    if slots_in.ndim == 0:
        raise ValueError("slot_mapping must list the slots to move ([n] or [*batch, n]), got a scalar")
    n_slots = blocks * block_size
    slots = _paged._slots(slots_in, slots_in.shape, n_slots)
    src = positions_array("from_positions", from_positions)
    dst = positions_array("to_positions", to_positions)
    for name, p in (("from_positions", src), ("to_positions", dst)):
        try:
            fits = np.broadcast_shapes(p.shape, slots_in.shape) == slots_in.shape
        except builtins.ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name} must have slot_mapping's shape {slots_in.shape} (or broadcast to it), "
                             f"got {p.shape}")
    src = checked_positions("from_positions", src)
    dst = checked_positions("to_positions", dst)
    delta = np.broadcast_to(dst - src, slots_in.shape)
    if delta.size and int(np.max(np.abs(delta))) > MAX_POSITION:
        raise ValueError(f"to_positions - from_positions must lie within {POSITION_LIMIT}, got "
                         f"{int(delta.reshape(-1)[np.argmax(np.abs(delta))])}")
    if not slots.size or not cache.size or not (slots != -1).any():
        return k_cache
    delta = np.ascontiguousarray(delta, dtype=np.int64).reshape(slots.shape)
    twin = unit_twin(rope_class, rope)
    n_batch, n_seq = slots.shape
    place = (n_slots, block_size, (n_seq, 1))
    kv_heads = _heads(cache, layout)
    first = _plan._first_element(cache)
    call = Call(op_dtype, twin.layout, False, n_batch, n_seq, twin.head_dim, twin.rotary_dim,
                [(kv_heads, strides, strides)], [(first, first)], [_stages.fields(None, True, None, place)],
                [dict(quant, in_place=1)])
    template, c_positions, keep = twin._angles_for(delta, 0, n_seq, "auto", op_dtype)
    c_positions = _plan.positions_apart(c_positions, (cache,) if scales is None else (cache, scales))
    call.launch((cache,), (cache,), template, c_positions, 0, "Rope.shift_keys", _plan.position_strides(c_positions),
                None, False, ((_stages.NULL, slots, scales),))
    del keep   # the rows the template pointed into lived until here
    return k_cache

