"""Re-rotation and conversion of cached keys: the work of :mod:`pyrope.cache`.

Below ``pyrope.rope`` (which calls it for ``Rope.rerotate``/``convert_keys``)
and ``pyrope.cache`` (the public face, whose docstrings say what these do):
the Rope class to check against and build twins of is an argument, so this
module imports neither.
"""
import builtins

import numpy as np

from .._engine import dtypes as _dtypes
from .._interop.edge import entry
from .._engine.checks import (MAX_POSITION, POSITION_LIMIT, as_float_array, as_int, checked_positions,
                              positions_array, scale_problem)
from .explicit import explicit_rope, unit_twin
from .._engine.sections import is_sectioned
from ..errors import TypeError, ValueError


def _token_shape(rope, k, seq_axis):
    """``(batch_shape, n_seq)`` of keys ``k``, checked under the name the caller
    gave them (the rotations below would call them ``x``)."""
    as_float_array("k", k, _dtypes.accepted_dtypes(k), _dtypes.accepted_names)
    if k.ndim < 3:
        raise ValueError(f"k must have at least 3 dims ([seq, heads, head_dim] or with batch dims), got shape {k.shape}")
    if k.shape[-1] != rope.head_dim:
        raise ValueError(f"k.shape[-1] must equal head_dim={rope.head_dim}, got shape {k.shape}")
    if isinstance(seq_axis, (bool, np.bool_)) or as_int("seq_axis", seq_axis) not in (-3, -2):
        raise ValueError(f"seq_axis must be -3 ([..., seq, heads, dim]) or -2 ([..., heads, seq, dim]), "
                         f"got {seq_axis!r}")
    return k.shape[:-3], k.shape[int(seq_axis)]


@entry(inputs=("k",), positions=("from_positions", "to_positions"), written=("k",), name="pyrope.cache.rerotate")
def rerotate(rope_class, rope, k, from_positions, to_positions, *, seq_axis=-3):
    """:func:`pyrope.cache.rerotate` (``rope_class``: the Rope class ``rope`` must be)."""
    if not isinstance(rope, rope_class):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    batch_shape, n_seq = _token_shape(rope, k, seq_axis)
    # Shapes first, values next, the delta last: nothing is made larger than k's tokens.
    src = positions_array("from_positions", from_positions)
    dst = positions_array("to_positions", to_positions)
    try:
        shape = np.broadcast_shapes(src.shape, dst.shape)
    except builtins.ValueError:
        raise ValueError(f"from_positions {src.shape} and to_positions {dst.shape} must broadcast "
                         f"to one shape") from None
    sectioned = rope.mrope_section is not None and is_sectioned(
        np.broadcast_to(src, shape), len(rope.mrope_section), batch_shape)
    lead = shape[1:-1] if sectioned else shape[:-1]
    if not shape or shape[-1] != n_seq or not _broadcasts(lead, batch_shape):
        raise ValueError(f"from_positions and to_positions must have shape [seq] or [*batch, seq] with "
                         f"seq={n_seq} and batch {tuple(batch_shape)} of k {k.shape}, got {shape}")
    src = checked_positions("from_positions", src)
    dst = checked_positions("to_positions", dst)
    delta = dst - src
    if delta.size and int(np.max(np.abs(delta))) > MAX_POSITION:
        raise ValueError(f"to_positions - from_positions must lie within {POSITION_LIMIT}, got "
                         f"{int(delta.reshape(-1)[np.argmax(np.abs(delta))])}")
    if not k.flags.writeable:
        raise ValueError("k is read-only (rerotate works in place)")
    return unit_twin(rope_class, rope).apply(k, positions=delta, seq_axis=seq_axis, out=k)


@entry(inputs=("k",), out="out", positions=("positions",), name="pyrope.cache.convert_keys")
def convert_keys(rope_class, rope, k, positions, to_rope, *, seq_axis=-3, out=None):
    """:func:`pyrope.cache.convert_keys` (``rope_class``: the Rope class ``rope`` and ``to_rope`` must be)."""
    if not isinstance(rope, rope_class):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    if not isinstance(to_rope, rope_class):
        raise TypeError(f"to_rope must be a pyrope.Rope, got {type(to_rope).__name__}")
    if to_rope.head_dim != rope.head_dim:
        raise ValueError(f"to_rope.head_dim must equal head_dim={rope.head_dim}, got {to_rope.head_dim}")
    if to_rope.layout != rope.layout:
        raise ValueError(f"to_rope.layout must equal layout={rope.layout!r}, got {to_rope.layout!r}: "
                         f"a layout change permutes the projection weights (pyrope.layout), not cached keys")
    # attention factors are > 0 (Resolved refuses 0), so the ratio is defined
    ratio = to_rope.attention_factor / rope.attention_factor
    why = scale_problem(ratio)
    if why is not None:
        raise ValueError(f"to_rope.attention_factor / rope.attention_factor = {to_rope.attention_factor!r} / "
                         f"{rope.attention_factor!r} = {ratio!r} (the factor the conversion applies) {why}")
    _token_shape(rope, k, seq_axis)
    if out is not None and out is not k:
        as_float_array("out", out, (k.dtype,))
        if out.shape != k.shape:
            raise ValueError(f"out must have the shape of k {k.shape}, got {out.shape}")
        if not out.flags.writeable:
            raise ValueError("out is read-only")
    forward = to_rope if ratio == to_rope.attention_factor else explicit_rope(
        rope_class, to_rope.head_dim, layout=to_rope.layout, inv_freq=to_rope.inv_freq, attention_factor=ratio,
        rule="conversion", mrope_section=to_rope.mrope_section, mrope_interleaved=to_rope.mrope_interleaved)
    # The first pass validates k and positions, into a new array: an out given
    # (k itself too) is written once, by the second pass, so an interrupt
    # between the passes leaves it untouched.
    tmp = unit_twin(rope_class, rope).apply(k, positions=positions, seq_axis=seq_axis, inverse=True)
    return forward.apply(tmp, positions=positions, seq_axis=seq_axis, out=tmp if out is None else out)


def _broadcasts(shape, batch_shape):
    """Do positions with leading dims ``shape`` broadcast to ``batch_shape``?"""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(batch_shape)) == tuple(batch_shape)
    except builtins.ValueError:
        return False
