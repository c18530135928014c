"""Token positions beyond ``offset`` and ``[*batch, seq]``: packed batches and
the named partial-rotary conventions.

Packed ("varlen") batches put several sequences end to end in one
``[total_tokens, heads, head_dim]`` array, with ``cu_seqlens`` marking where
each starts (flash-attn, vLLM). Positions are logical: they restart at each
sequence start, or continue from a per-sequence offset (the sequence's
cached prefix length), never the index in the packed array.

Partial rotary embeddings come in three conventions that rotate different
coordinates at different speeds; a checkpoint is right under exactly one:

- ``"prefix"`` (HF ``partial_rotary_factor``, vLLM, ONNX
  ``rotary_embedding_dim``): the first ``rotary_dim`` coordinates rotate,
  split-half pairs are ``(i, i + rotary_dim/2)``, frequencies
  ``base ** (-2i / rotary_dim)``. This is ``Rope(head_dim, rotary_dim=r)``.
- ``"proportional"`` (HF v5): pairs span the whole head (``(i, i + head_dim/2)``
  in split-half), frequencies ``base ** (-2i / head_dim)``, and pairs at or
  past ``rotary_dim/2`` get frequency zero (they do not turn).
- ``"offset"`` (llama.cpp ``n_offs``-style slices): coordinates
  ``dim_offset .. dim_offset + rotary_dim`` rotate as a rope of dimension
  ``rotary_dim`` (frequencies over ``rotary_dim``); the rest are untouched.
"""
import numpy as np

from ._checks import MAX_POSITION, as_even_dim, as_int, as_positions
from ._explicit import explicit_rope
from .errors import TypeError, ValueError
from .rope import Rope

CONVENTIONS = ("prefix", "proportional", "offset")


def _as_cu_seqlens(cu_seqlens):
    cu = as_positions("cu_seqlens", cu_seqlens)
    if cu.ndim != 1 or cu.size < 1:
        raise ValueError(f"cu_seqlens must be a 1-D integer array [n_seqs + 1], got shape {cu.shape}")
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got cu_seqlens[0]={int(cu[0])}")
    steps = np.diff(cu)
    if np.any(steps < 0):
        i = int(np.argmax(steps < 0))
        raise ValueError(f"cu_seqlens must be non-decreasing, got {int(cu[i])} then {int(cu[i + 1])} at index {i}")
    return cu


def varlen_positions(cu_seqlens, offsets=None):
    """Per-token positions int64 ``[cu_seqlens[-1]]`` of a packed batch.

    ``cu_seqlens``: integer ``[n_seqs + 1]``, starting at 0, non-decreasing
    (sequence ``s`` is tokens ``cu_seqlens[s]:cu_seqlens[s+1]``).
    ``offsets``: ``None`` (each sequence starts at position 0) or integer
    ``[n_seqs]``, the position of each sequence's first packed token (its
    cached prefix length when prefilling a continuation). Raises
    ``ValueError`` naming the argument for malformed input or positions past
    +-(2**31 - 1).
    """
    cu = _as_cu_seqlens(cu_seqlens)
    n_seqs = cu.size - 1
    lengths = np.diff(cu)
    if offsets is None:
        off = np.zeros(n_seqs, dtype=np.int64)
    else:
        off = as_positions("offsets", offsets)
        if off.shape != (n_seqs,):
            raise ValueError(f"offsets must have shape [n_seqs]=({n_seqs},) to match cu_seqlens, got {off.shape}")
    last = off + np.maximum(lengths - 1, 0)
    if n_seqs and np.any(last > MAX_POSITION):
        s = int(np.argmax(last > MAX_POSITION))
        raise ValueError(f"offsets[{s}] + length - 1 must stay within {MAX_POSITION}, got {int(last[s])}")
    total = int(cu[-1])
    # position of token t in sequence s: offsets[s] + (t - cu[s])
    starts = np.repeat(off - cu[:-1], lengths)
    return np.arange(total, dtype=np.int64) + starts


def sequence_ids(cu_seqlens):
    """int64 ``[total_tokens]``: the index of the sequence each packed token belongs to."""
    cu = _as_cu_seqlens(cu_seqlens)
    return np.repeat(np.arange(cu.size - 1, dtype=np.int64), np.diff(cu))


def apply_varlen(rope, x, cu_seqlens, offsets=None, *, out=None, inverse=False):
    """Rotate a packed ``[total_tokens, heads, head_dim]`` array by logical positions.

    Equivalent to rotating each sequence ``x[cu[s]:cu[s+1]]`` with
    ``rope.apply(..., offset=offsets[s])`` (0 without offsets), in one call.
    ``out``/``inverse`` as in :meth:`pyrope.Rope.apply`.
    """
    if not isinstance(rope, Rope):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    positions = varlen_positions(cu_seqlens, offsets)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 3:
        raise ValueError(f"x must be a packed [total_tokens, heads, head_dim] array, got shape {x.shape}")
    if x.shape[0] != positions.size:
        raise ValueError(f"x.shape[0] must equal cu_seqlens[-1]={positions.size} (total tokens), got {x.shape[0]}")
    return rope.apply(x, positions=positions, out=out, inverse=inverse)


def proportional_inv_freq(head_dim, rotary_dim, base=10000.0):
    """float64 ``[head_dim // 2]``: ``base ** (-2i / head_dim)`` for pairs
    ``i < rotary_dim / 2`` and 0 (no rotation) for the rest."""
    head_dim = as_even_dim("head_dim", head_dim)
    rotary_dim = as_even_dim("rotary_dim", rotary_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim ({head_dim}), got {rotary_dim}")
    # Written out here, independent of pyrope.scaling (whose Proportional rule
    # is tested to agree): exponents over the whole head.
    inv = 1.0 / (float(base) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    inv[rotary_dim // 2:] = 0.0
    return inv


class PartialRotary:
    """A RoPE that rotates part of each head under one named convention.

    ``PartialRotary(head_dim, rotary_dim, *, convention, layout, base=10000.0, dim_offset=0)``
    with ``convention`` one of ``"prefix"``, ``"proportional"``, ``"offset"``
    (see the module docstring). ``dim_offset`` is only for ``"offset"``.
    ``.rope`` is the underlying :class:`pyrope.Rope` (for ``"offset"`` it
    has ``head_dim=rotary_dim`` and acts on the slice); ``.apply`` and
    ``.apply_qk`` take whole heads.
    """

    def __init__(self, head_dim, rotary_dim, *, convention, layout, base=10000.0, dim_offset=0):
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        head_dim = as_even_dim("head_dim", head_dim)
        rotary_dim = as_even_dim("rotary_dim", rotary_dim)
        dim_offset = as_int("dim_offset", dim_offset)
        if convention != "offset" and dim_offset != 0:
            raise ValueError(f"dim_offset is only for convention='offset', got dim_offset={dim_offset} "
                             f"with convention={convention!r}")
        if dim_offset < 0 or dim_offset + rotary_dim > head_dim:
            raise ValueError(f"dim_offset + rotary_dim must lie within head_dim={head_dim}, got "
                             f"dim_offset={dim_offset}, rotary_dim={rotary_dim}")
        self.head_dim, self.rotary_dim, self.convention = head_dim, rotary_dim, convention
        self.dim_offset = dim_offset
        if convention == "prefix":
            self.rope = Rope(head_dim, layout=layout, base=base, rotary_dim=rotary_dim)
        elif convention == "proportional":
            self.rope = explicit_rope(head_dim, layout=layout, rule="proportional",
                                      inv_freq=proportional_inv_freq(head_dim, rotary_dim, base))
        else:
            self.rope = Rope(rotary_dim, layout=layout, base=base)

    def __repr__(self):
        return (f"PartialRotary(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
                f"convention={self.convention!r}, layout={self.rope.layout!r}, dim_offset={self.dim_offset})")

    def apply(self, x, positions=None, *, offset=0, seq_axis=-3, out=None, inverse=False):
        """Rotate whole heads ``x`` (``[..., head_dim]``); arguments as :meth:`pyrope.Rope.apply`."""
        if self.convention != "offset":
            return self.rope.apply(x, positions, offset=offset, seq_axis=seq_axis, out=out, inverse=inverse)
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x.shape[-1] must equal head_dim={self.head_dim}, got shape {x.shape}")
        lo, hi = self.dim_offset, self.dim_offset + self.rotary_dim
        # Rotate the slice out of place first: every check runs before we write.
        rotated = self.rope.apply(x[..., lo:hi], positions, offset=offset, seq_axis=seq_axis, inverse=inverse)
        if out is None:
            out = x.copy()
        else:
            if not isinstance(out, np.ndarray) or out.dtype != x.dtype:
                raise TypeError(f"out must be an ndarray of x's dtype {x.dtype}, got "
                                f"{getattr(out, 'dtype', type(out).__name__)}")
            if out.shape != x.shape:
                raise ValueError(f"out must have the shape of x {x.shape}, got {out.shape}")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
            if out is not x:
                out[...] = x
        out[..., lo:hi] = rotated
        return out

    def apply_qk(self, q, k, positions=None, *, offset=0, seq_axis=-3):
        """Rotate queries and keys at the same positions; returns ``(q_rot, k_rot)``."""
        return (self.apply(q, positions, offset=offset, seq_axis=seq_axis),
                self.apply(k, positions, offset=offset, seq_axis=seq_axis))
