"""Cached keys under a changed position rule: re-rotation and conversion.

Keys in a KV cache were rotated when written, so the position they were
rotated at and the frequency rule are part of the cache state.

- :func:`rerotate` moves cached keys to new positions (context shifting,
  dropping tokens from the middle of a cache): the angle difference is an
  exact integer position delta, so one rotation by ``to - from`` in place is
  exact and never re-derives the unrotated key.
- :func:`convert_keys` moves cached keys from one frequency rule to another
  (dynamic NTK growing its base, LongRoPE switching short to long factors):
  un-rotate with the old rule, rotate with the new one.

Neither repairs anything but the keys of the layer they are applied to.
Hidden states of later layers were computed by attention under the old rule
(and, after a shift, with the dropped tokens visible); their keys and values
differ from a fresh prefill under the new rule whatever angle they are
turned to. Converting keys therefore fixes layer 0 exactly and every other
layer only approximately: re-prefill when exactness matters, and compare
with ``pyrope.testing`` before trusting a conversion.
"""
from ._ops import rekey as _rekey
from .rope import Rope

__all__ = ["rerotate", "convert_keys"]


def rerotate(rope, k, from_positions, to_positions, *, seq_axis=-3):
    """Rotate cached keys ``k`` from ``from_positions`` to ``to_positions``, in place.

    - ``k``: keys (any dtype `apply` accepts) already rotated by ``rope`` at ``from_positions``,
      ``[*batch, seq, heads, head_dim]`` (``seq_axis=-3``) or
      ``[*batch, heads, seq, head_dim]`` (``seq_axis=-2``); written in place.
    - ``from_positions``, ``to_positions``: integer arrays ``[seq]`` or
      ``[*batch, seq]`` (broadcast against each other); for a sectioned rope
      also ``[k, seq]`` or ``[k, *batch, seq]``, each component moved by its
      own delta.

    One pass: each key turns by ``(to - from) * inv_freq``, an exact integer
    position delta, with the rope's attention factor applied once (the
    keys already carry it). ``|to - from|`` must stay within 2**31 - 1
    (``ROPE_MAX_POSITION``).
    Returns ``k``. See the module notes: this fixes this layer's keys only.
    ``k`` and the positions may be CPU torch tensors or DLPack objects
    (rotated in their own storage; not differentiable: a ``k`` that requires
    grad, with grad enabled, is a ``ValueError``).
    """
    if isinstance(rope, Rope):   # its method (which torch.compile traces into pyrope's op)
        return rope.rerotate(k, from_positions, to_positions, seq_axis=seq_axis)
    return _rekey.rerotate(Rope, rope, k, from_positions, to_positions, seq_axis=seq_axis)


def convert_keys(rope, k, positions, to_rope, *, seq_axis=-3, out=None):
    """Keys rotated by ``rope`` at ``positions``, re-expressed under ``to_rope``.

    ``to_rope`` must have the same ``head_dim`` and ``layout`` (a layout
    change is a weight permutation: see ``pyrope.layout``); ``rotary_dim``,
    frequencies and attention factor may differ. ``out=None`` returns a new
    array, ``out=k`` converts in place. Two passes: un-rotate under the old
    rule (factor kept), rotate under the new one with the factor ratio.
    Exact for this layer's keys only (see the module notes). Tensors and
    DLPack objects as in :func:`rerotate`; a new result has k's type.
    """
    return _rekey.convert_keys(Rope, rope, k, positions, to_rope, seq_axis=seq_axis, out=out)
