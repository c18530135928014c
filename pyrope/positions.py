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

Text+image sequences (Qwen2-VL's multimodal RoPE, M-RoPE) carry three
position components per token (temporal, height, width):
``multimodal_positions`` computes them from the segment layout.
"""
import builtins
import math
import numbers
import operator

import numpy as np

from ._rules import correctly_rounded as _correctly_rounded
from ._engine.checks import MAX_POSITION, allocate, as_bool, as_even_dim, as_int, as_positions, refuse_masked, too_large
from ._ops.explicit import explicit_rope
from ._interop.edge import entry
from .errors import TypeError, ValueError
from .rope import Rope

CONVENTIONS = ("prefix", "proportional", "offset")
MULTIMODAL_KINDS = ("text", "image", "video")


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


def _varlen_checked(cu_seqlens, offsets):
    """``(cu, offsets, lengths)`` of a packed batch, every check made and
    nothing allocated beyond the size of the arguments themselves."""
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
    return cu, off, lengths


def _varlen_built(cu, off, lengths):
    """The positions of checked ``_varlen_checked`` arguments: one int64 array
    of ``cu[-1]`` tokens, and nothing else as large."""
    total = int(cu[-1])
    positions = allocate("cu_seqlens", (total,), np.int64, f"the positions of cu_seqlens[-1]={total} tokens")
    if total:
        # position of token t in sequence s: offsets[s] + (t - cu[s]), built as
        # the running sum of its steps: +1 within a sequence, a jump at each start
        positions.fill(1)
        keep = lengths > 0
        starts, first, ends = cu[:-1][keep], off[keep], (off + lengths - 1)[keep]
        positions[starts] = first - np.concatenate(([0], ends[:-1]))
        np.cumsum(positions, out=positions)
    return positions


@entry(inputs=(), positions=("cu_seqlens", "offsets"), like="")
def varlen_positions(cu_seqlens, offsets=None):
    """Per-token positions int64 ``[cu_seqlens[-1]]`` of a packed batch.

    ``cu_seqlens``: integer ``[n_seqs + 1]``, starting at 0, non-decreasing
    (sequence ``s`` is tokens ``cu_seqlens[s]:cu_seqlens[s+1]``).
    ``offsets``: ``None`` (each sequence starts at position 0) or integer
    ``[n_seqs]``, the position of each sequence's first packed token (its
    cached prefix length when prefilling a continuation). Raises
    ``ValueError`` naming the argument for malformed input or positions past
    +-(2**31 - 1). The result is the only array as large as the token count.
    """
    return _varlen_built(*_varlen_checked(cu_seqlens, offsets))


@entry(inputs=(), positions=("cu_seqlens",), like="")
def sequence_ids(cu_seqlens):
    """int64 ``[total_tokens]``: the index of the sequence each packed token belongs to."""
    cu = _as_cu_seqlens(cu_seqlens)
    try:
        return np.repeat(np.arange(cu.size - 1, dtype=np.int64), np.diff(cu))
    except (builtins.MemoryError, builtins.ValueError):
        raise too_large("cu_seqlens", (int(cu[-1]),), np.int64, "the sequence ids") from None


def _multimodal_sizes(i, segment):
    """``(kind, sizes)`` of ``segments[i]``, checked: text ``(n,)``, image/video ``(t, h, w)``."""
    where = f"segments[{i}]"
    if not isinstance(segment, (tuple, list)):
        raise TypeError(f"{where} must be a tuple ('text', n) or (kind, t, h, w), got "
                        f"{type(segment).__name__} {segment!r}")
    if not segment:
        raise ValueError(f"{where} must be ('text', n) or (kind, t, h, w), got an empty {type(segment).__name__}")
    kind = segment[0]
    if not isinstance(kind, str) or kind not in MULTIMODAL_KINDS:
        raise ValueError(f"{where} must start with a kind in {MULTIMODAL_KINDS}, got {kind!r} in {segment!r}")
    names = ("n",) if kind == "text" else ("t", "h", "w")
    if len(segment) != 1 + len(names):
        form = "('text', n)" if kind == "text" else f"({kind!r}, t, h, w)"
        raise ValueError(f"{where} must be {form} ({1 + len(names)} items), got {len(segment)} items: {segment!r}")
    sizes = []
    for name, value in zip(names, segment[1:]):
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where} size {name} must be an integer, got a bool in {segment!r}")
        try:
            value = operator.index(value)
        except builtins.TypeError:
            raise TypeError(f"{where} size {name} must be an integer, got {type(value).__name__} "
                            f"{value!r} in {segment!r}") from None
        if value < 1:
            raise ValueError(f"{where} size {name} must be positive, got {value} in {segment!r}")
        sizes.append(value)
    return kind, sizes


def multimodal_positions(segments):
    """Qwen2-VL's 3-D (M-RoPE) positions of a text+image/video sequence.

    ``segments``: a sequence of ``("text", n)`` (``n`` text tokens) and
    ``("image", t, h, w)`` / ``("video", t, h, w)`` (one image or video of
    ``t * h * w`` tokens; ``t, h, w`` are the grid sizes the language model
    sees, after the spatial merge: transformers' ``image_grid_thw`` row is
    ``(t, h * spatial_merge_size, w * spatial_merge_size)``). Sizes are
    positive Python/numpy integers.

    Returns ``(positions, next_position)``: ``positions`` is int64
    ``[3, n_tokens]`` (rows: temporal, height, width), ``next_position`` an
    int, the position of the first decoded token on all three components
    (decode token ``k`` after the prompt is at ``next_position + k`` on each).

    The rule, as transformers 5.24.0's ``Qwen2VLModel.get_rope_index`` (with
    ``get_vision_position_ids``) computes it, starting at ``p = 0``:

    - text of ``n`` tokens: ``p, p+1, ..., p+n-1`` on all three rows; then
      ``p += n``.
    - image or video ``(t, h, w)``, tokens in ``t, h, w`` row-major order:
      token ``(i, j, k)`` is at ``(p + i, p + j, p + k)``; then
      ``p += max(h, w)``, the largest *spatial* grid size. ``t`` does not
      advance ``p``: with ``t > max(h, w)`` the following text reuses
      temporal positions of the last frames, as in transformers.
    - ``next_position = max(positions) + 1`` (0 for no tokens), the largest
      position over all tokens and rows plus one: transformers' ``rope_deltas
      + n_tokens`` (it stores ``rope_deltas = max + 1 - n_tokens`` and decodes
      at ``cache_length + rope_deltas``). After trailing text that is one past
      its last token, after a trailing image or video ``p_start + max(t, h,
      w)``, unless an earlier segment's frames (``t > max(h, w)``) reach
      further.

    Videos follow Qwen2-VL's own rule, the image rule above: one temporal
    step per grid frame (``time_interval = 1``). Qwen2.5-VL's
    ``second_per_grid_t * tokens_per_second`` temporal scaling and Qwen3-VL's
    timestamped frames are not computed here.

    Two vision segments with no text between are placed one after the other
    (``p`` advancing in between). transformers cannot compute that input: it
    groups consecutive tokens of one modality, so two adjacent images become
    one group and it fails; Qwen2-VL prompts always put
    ``<|vision_end|>``/``<|vision_start|>`` text tokens between them.

    Raises ``TypeError``/``ValueError`` naming ``segments[i]`` and showing
    the segment for a non-tuple segment, an unknown kind, a wrong number of
    items, a size that is a bool, float or other non-integer, or a size < 1;
    ``ValueError`` when a position would exceed ``2**31 - 1``.
    """
    if isinstance(segments, (str, bytes)) or not hasattr(segments, "__iter__"):
        raise TypeError(f"segments must be a sequence of ('text', n) / (kind, t, h, w) tuples, got "
                        f"{type(segments).__name__} {segments!r}")
    try:
        segments = list(segments)
    except builtins.TypeError:   # a 0-d array has __iter__ but no items
        raise TypeError(f"segments must be a sequence of ('text', n) / (kind, t, h, w) tuples, got "
                        f"{type(segments).__name__} {segments!r:.200}") from None
    checked = [_multimodal_sizes(i, segment) for i, segment in enumerate(segments)]
    # Walk the layout once without allocating, so a position past the kernel's
    # range is refused before anything is built, and count the tokens.
    start, top, n_tokens = 0, -1, 0
    for i, (kind, sizes) in enumerate(checked):
        if kind == "text":
            top = max(top, start + sizes[0] - 1)
            start += sizes[0]
        else:
            t, h, w = sizes
            top = max(top, start + max(t, h, w) - 1)
            start += max(h, w)
        n_tokens += math.prod(sizes)
        if top > MAX_POSITION:
            raise ValueError(f"segments[{i}] {segments[i]!r} places positions up to {top}, past {MAX_POSITION}")
    # The result is the only array as large as the token count: each segment
    # is written into its columns.
    positions = allocate("segments", (3, n_tokens), np.int64, f"the positions of {n_tokens} tokens")
    start = column = 0
    for kind, sizes in checked:
        n = math.prod(sizes)
        block = positions[:, column:column + n]
        if kind == "text":
            block[...] = np.arange(start, start + n, dtype=np.int64)
            start += n
        else:
            t, h, w = sizes
            grid = block.reshape(3, t, h, w)   # a view: each row's columns are contiguous
            grid[0] = np.arange(start, start + t, dtype=np.int64)[:, None, None]
            grid[1] = np.arange(start, start + h, dtype=np.int64)[None, :, None]
            grid[2] = np.arange(start, start + w, dtype=np.int64)[None, None, :]
            start += max(h, w)
        column += n
    return positions, top + 1   # the largest position + 1 (0 for no tokens)


@entry(inputs=("x",), out="out", positions=("cu_seqlens", "offsets"), adjoint="inverse")
def apply_varlen(rope, x, cu_seqlens, offsets=None, *, out=None, inverse=False):
    """Rotate a packed ``[total_tokens, heads, head_dim]`` array by logical positions.

    Equivalent to rotating each sequence ``x[cu[s]:cu[s+1]]`` with
    ``rope.apply(..., offset=offsets[s])`` (0 without offsets), in one call.
    ``out``/``inverse`` as in :meth:`pyrope.Rope.apply`, torch tensors,
    DLPack objects and autograd included.
    """
    if not isinstance(rope, Rope):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    inverse = as_bool("inverse", inverse)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 3:
        raise ValueError(f"x must be a packed [total_tokens, heads, head_dim] array, got shape {x.shape}")
    cu, off, lengths = _varlen_checked(cu_seqlens, offsets)
    if x.shape[0] != int(cu[-1]):   # before the positions are made: they are x.shape[0] long
        raise ValueError(f"x.shape[0] must equal cu_seqlens[-1]={int(cu[-1])} (total tokens), got {x.shape[0]}")
    return rope.apply(x, positions=_varlen_built(cu, off, lengths), out=out, inverse=inverse)


def proportional_inv_freq(head_dim, rotary_dim, base=10000.0):
    """float64 ``[head_dim // 2]``: ``base ** (-2i / head_dim)`` for pairs
    ``i < rotary_dim / 2`` and 0 (no rotation) for the rest."""
    head_dim = as_even_dim("head_dim", head_dim)
    rotary_dim = as_even_dim("rotary_dim", rotary_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim ({head_dim}), got {rotary_dim}")
    base = _checked_base(base)
    # exponents over the whole head, each power correctly rounded (pyrope.scaling's
    # Proportional rule is tested to agree)
    inv = np.array(_correctly_rounded.pair_frequencies(base, head_dim), dtype=np.float64)
    inv[rotary_dim // 2:] = 0.0
    return inv


def _checked_base(base):
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a real number, got {base!r}")
    base = float(base)
    if not 0.0 < base < math.inf:
        raise ValueError(f"base must be a finite number > 0, got {base!r}")
    return base


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
        if not isinstance(convention, str) or convention not in CONVENTIONS:
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
            self.rope = explicit_rope(Rope, head_dim, layout=layout, rule="proportional",
                                      inv_freq=proportional_inv_freq(head_dim, rotary_dim, base))
        else:
            self.rope = Rope(rotary_dim, layout=layout, base=base)

    def __repr__(self):
        return (f"PartialRotary(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
                f"convention={self.convention!r}, layout={self.rope.layout!r}, dim_offset={self.dim_offset})")

    @entry(inputs=("x",), out="out", positions=("positions",), adjoint="inverse")
    def apply(self, x, positions=None, *, offset=0, seq_axis=-3, out=None, inverse=False):
        """Rotate whole heads ``x`` (``[..., head_dim]``); arguments as :meth:`pyrope.Rope.apply`,
        torch tensors, DLPack objects and autograd included."""
        if self.convention != "offset":
            return self.rope.apply(x, positions, offset=offset, seq_axis=seq_axis, out=out, inverse=inverse)
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x.shape[-1] must equal head_dim={self.head_dim}, got shape {x.shape}")
        lo, hi = self.dim_offset, self.dim_offset + self.rotary_dim
        if out is not None:
            refuse_masked("out", out)
            if not isinstance(out, np.ndarray) or out.dtype != x.dtype:
                raise TypeError(f"out must be an ndarray of x's dtype {x.dtype}, got "
                                f"{getattr(out, 'dtype', type(out).__name__)}")
            if out.shape != x.shape:
                raise ValueError(f"out must have the shape of x {x.shape}, got {out.shape}")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        # Rotate the slice out of place first: every check runs before we write,
        # and out is then written by one numpy copy (an interrupt leaves it untouched).
        rotated = self.rope.apply(x[..., lo:hi], positions, offset=offset, seq_axis=seq_axis, inverse=inverse)
        if out is x:
            x[..., lo:hi] = rotated
            return x
        result = np.concatenate((x[..., :lo], rotated, x[..., hi:]), axis=-1)
        if out is None:
            return result
        out[...] = result
        return out

    def apply_qk(self, q, k, positions=None, *, offset=0, seq_axis=-3):
        """Rotate queries and keys at the same positions; returns ``(q_rot, k_rot)``."""
        return (self.apply(q, positions, offset=offset, seq_axis=seq_axis),
                self.apply(k, positions, offset=offset, seq_axis=seq_axis))
