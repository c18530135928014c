"""ONNX ``RotaryEmbedding`` (opset 23) on the pyrope kernel, and converters
between the cos/sin table formats backends already hold.

Table formats (``r`` = rotary_dim, ``h = r/2``):

- half width ``[..., h]``: ONNX caches, flash-attn, ``Rope.cos_sin``;
- HF duplicated ``[..., r]``: ``cat(freqs, freqs)`` halves (split-half
  models) or ``repeat_interleave(freqs, 2)`` (interleaved models);
- vLLM ``cos_sin_cache`` ``[max_pos, r]``: ``cat(cos_half, sin_half)``.
"""
import builtins

import numpy as np

from ._engine import binding as _binding, dtypes as _dtypes, launcher as _launcher, tables as _tables, plan as _plan
from ._interop.edge import entry
from ._engine.checks import MAX_POSITION, as_float_array, as_int, positions_array, too_large
from .errors import TypeError, ValueError, shown

_DUMMY_FREQ = np.zeros(1, dtype=np.float64)  # the kernel ignores inv_freq when given tables
(_DUMMY_FREQ_PTR,) = _binding.float_pointers(_DUMMY_FREQ)


def _flag(name, value, allowed):
    value = as_int(name, value)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value}")
    return value


def _c_aligned(a):
    """``a`` if C-contiguous and aligned, else a copy that is (np.require, without its cost)."""
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def _onnx_types(value):
    """The op's types T that this process serves, for checking ``value``:
    float32, float16, and bfloat16 once ml_dtypes is loaded (the kernel's
    storage types but float64)."""
    return tuple(d for d in _dtypes.accepted_dtypes(value) if d != np.float64)


def _type_names():
    """The op's types T for messages, named as :func:`_dtypes.accepted_names` names them."""
    return _dtypes.accepted_names(without=("float64",))


def _input_array(value):
    """``input`` as an ndarray of one of the op's types T (float64 is not one)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        raise TypeError(f"input must have dtype {_type_names()} (ONNX RotaryEmbedding's types T), got float64: "
                        f"cast it to float32, or rotate float64 with Rope.apply")
    return as_float_array("input", value, _onnx_types(value), accepted=_type_names)


def _cache_array(name, value, dtype):
    """A cache of the input's type ``dtype``: the op has one type T for all three."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    if value.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype.name} (native byte order) like input (ONNX "
                        f"RotaryEmbedding has one type T for input, cos_cache and sin_cache), got "
                        f"{value.dtype.str} ({value.dtype})")
    return value


@entry(inputs=("input", "cos_cache", "sin_cache"), positions=("position_ids",))
def onnx_rotary_embedding(input, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                          rotary_embedding_dim=0, num_heads=0):
    """ONNX ``RotaryEmbedding`` (opset 23); returns a new array of the input's type.

    - ``input``: ``[batch, num_heads, seq, head_size]`` or ``[batch, seq, hidden]``
      (then ``num_heads`` is required and ``head_size = hidden / num_heads``),
      of one of the op's types T: float32, float16 or bfloat16 (an
      ``ml_dtypes.bfloat16`` array). float64 is not one of them and is refused.
    - ``cos_cache``, ``sin_cache``: of the input's type, ``[max_pos, rotary_dim/2]``
      indexed by ``position_ids`` (int ``[batch, seq]``), or ``[batch, seq, rotary_dim/2]``
      when ``position_ids`` is None.
    - ``interleaved``: 0 rotates pairs ``(i, i + r/2)``, 1 pairs ``(2i, 2i+1)``.
    - ``rotary_embedding_dim``: 0 for the whole head, else the rotated prefix.

    Each pair becomes ``(x0*cos - x1*sin, x0*sin + x1*cos)`` with the caller's
    tables used as given, by the kernel's formula (with a Rope's own caches,
    :func:`onnx_caches`, float32 results equal ``Rope.apply`` bit for bit).
    float16 and bfloat16 are computed like the rest of pyrope: input and
    caches widened exactly to float32, the rotation in float32, one rounding
    to the input's type on store, so each result is the exact value of the
    formula on the stored values rounded to nearest, but where that value
    lies within float32 error of a tie (the ONNX reference op computes in T
    and rounds three times). The input is read in its own type, never
    copied to float32. Position ids outside ``[0, max_pos)`` raise
    ``ValueError`` (the ONNX reference would wrap negative ones silently);
    caches of another type than the input raise ``TypeError``.
    """
    x = _input_array(input)
    cos_cache = _cache_array("cos_cache", cos_cache, x.dtype)
    sin_cache = _cache_array("sin_cache", sin_cache, x.dtype)
    interleaved = _flag("interleaved", interleaved, (0, 1))
    rotary_embedding_dim = as_int("rotary_embedding_dim", rotary_embedding_dim)
    num_heads = as_int("num_heads", num_heads)
    if x.ndim == 4:
        batch, heads, seq, head = x.shape
        if num_heads not in (0, heads):
            raise ValueError(f"num_heads must be 0 or input.shape[1]={heads} for 4-D input, got {num_heads}")
        tok = np.swapaxes(x, 1, 2)                      # [batch, seq, heads, head] view
    elif x.ndim == 3:
        batch, seq, hidden = x.shape
        if num_heads <= 0:
            raise ValueError(f"num_heads must be positive for 3-D input [batch, seq, hidden], got {num_heads}")
        if hidden % num_heads:
            raise ValueError(f"input hidden size {hidden} must be divisible by num_heads={num_heads}")
        heads, head = num_heads, hidden // num_heads
        tok = x.reshape(batch, seq, heads, head) if x.flags.c_contiguous else \
            np.ascontiguousarray(x).reshape(batch, seq, heads, head)
    else:
        raise ValueError(f"input must be 4-D [batch, num_heads, seq, head_size] or 3-D [batch, seq, hidden], "
                         f"got shape {x.shape}")
    rot = head if rotary_embedding_dim == 0 else rotary_embedding_dim
    if rot <= 0 or rot % 2 or rot > head or head % 2:
        raise ValueError(f"rotary_embedding_dim must be 0 or even and at most head_size={head} (head_size even), "
                         f"got {rotary_embedding_dim}")
    half = rot // 2
    if cos_cache.shape != sin_cache.shape:
        raise ValueError(f"cos_cache and sin_cache must have the same shape, got {cos_cache.shape} and "
                         f"{sin_cache.shape}")
    if position_ids is not None:
        pos = positions_array("position_ids", position_ids)
        if pos.shape != (batch, seq):
            raise ValueError(f"position_ids must have shape [batch, seq]=({batch}, {seq}), got {pos.shape}")
        if cos_cache.ndim != 2 or cos_cache.shape[1] != half:
            raise ValueError(f"cos_cache must be [max_pos, rotary_dim/2={half}] with position_ids, got "
                             f"{cos_cache.shape}")
        max_pos = cos_cache.shape[0]
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= max_pos):
            bad = int(pos.min()) if int(pos.min()) < 0 else int(pos.max())
            raise ValueError(f"position_ids must lie in [0, max_pos={max_pos}) of the caches, got {bad}")
        rows = pos.astype(np.int64)        # a new C-contiguous array, as C reads it
        cos_t, sin_t = cos_cache, sin_cache
    else:
        if cos_cache.shape != (batch, seq, half):
            raise ValueError(f"cos_cache must be [batch, seq, rotary_dim/2]=({batch}, {seq}, {half}) without "
                             f"position_ids, got {cos_cache.shape}")
        rows = np.arange(batch * seq, dtype=np.int64).reshape(batch, seq)
        cos_t, sin_t = cos_cache.reshape(batch * seq, half), sin_cache.reshape(batch * seq, half)
    if x.dtype != np.float32:
        # 16-bit types rotate against float32 rows: widen (exactly) only the
        # rows this call reads when that is fewer than the whole cache
        if position_ids is not None and rows.size < cos_t.shape[0]:
            cos_t, sin_t = cos_t[rows.ravel()], sin_t[rows.ravel()]
            rows = np.arange(rows.size, dtype=np.int64).reshape(rows.shape)
        cos_t, sin_t = cos_t.astype(np.float32), sin_t.astype(np.float32)
    # C refuses misaligned pointers: a byte-offset buffer is copied, like a strided one
    cos_t, sin_t = _c_aligned(cos_t), _c_aligned(sin_t)
    out = np.empty(x.shape, dtype=x.dtype)
    out_tok = np.swapaxes(out, 1, 2) if x.ndim == 4 else out.reshape(batch, seq, heads, head)
    if out.size == 0:
        return out
    layout = "interleaved" if interleaved else "split_half"
    cos_ptr, sin_ptr = _binding.float_pointers(cos_t, sin_t)
    template = _launcher.angle_template(_DUMMY_FREQ_PTR, 1.0, (cos_ptr, sin_ptr, 0, cos_t.shape[0]))
    # the planner's memoised Call for these shapes and strides: a repeated
    # (decode) call is a lookup, not a plan; the launcher falls back (nothing
    # written) for what it cannot take, e.g. a misaligned input
    rope_key = (layout, rot, head)
    key = _plan.direct_key(_plan.plan_tag(rope_key), -3, False, tok, out_tok.strides)
    call = _plan.CALLS.get(key, _plan.UNPLANNED)
    if call is _plan.UNPLANNED:
        call = _plan.direct_call(key, (tok,), -3, False, rope_key, (out_tok,))
    if call is not None and call.launch((tok,), (out_tok,), template, rows, 0, "onnx_rotary_embedding"):
        return out
    plan = _plan.plan_rotation([("input", tok, out_tok, "output")], -3, layout, False, rot)
    plan.run(template, rows, 0, "onnx_rotary_embedding")
    return out


# ---- table formats -------------------------------------------------------------

def _pair(cos, sin):
    cos, sin = np.asarray(cos), np.asarray(sin)
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {cos.shape} and {sin.shape}")
    if cos.ndim < 1:
        raise ValueError("cos and sin must have a last (frequency) axis")
    return cos, sin


def from_hf(cos, sin, *, style="halves"):
    """HF duplicated tables ``[..., rotary_dim]`` -> half width ``(cos, sin)`` ``[..., rotary_dim/2]``.

    ``style="halves"``: ``cat(t, t)`` (split-half models, HF ``rotate_half``);
    ``style="repeat"``: ``repeat_interleave(t, 2)`` (interleaved models).
    Raises ``ValueError`` when the two copies differ: such tables are not of
    the stated style.
    """
    cos, sin = _pair(cos, sin)
    width = cos.shape[-1]
    if width % 2:
        raise ValueError(f"HF tables must have an even last axis (rotary_dim), got {width}")
    out = []
    for name, t in (("cos", cos), ("sin", sin)):
        if style == "halves":
            a, b = t[..., :width // 2], t[..., width // 2:]
        elif style == "repeat":
            a, b = t[..., 0::2], t[..., 1::2]
        else:
            raise ValueError(f"style must be 'halves' or 'repeat', got {style!r}")
        if not np.array_equal(a, b):
            raise ValueError(f"{name} is not a duplicated table of style {style!r}: its two copies differ")
        out.append(np.ascontiguousarray(a))
    return tuple(out)


def to_hf(cos, sin, *, style="halves"):
    """Half-width ``(cos, sin)`` -> HF duplicated tables (``style`` as in :func:`from_hf`)."""
    cos, sin = _pair(cos, sin)
    if style == "halves":
        return np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    if style == "repeat":
        return np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    raise ValueError(f"style must be 'halves' or 'repeat', got {style!r}")


def from_vllm(cos_sin_cache):
    """vLLM ``cos_sin_cache`` ``[max_pos, rotary_dim]`` (``cat(cos, sin)``) -> half-width ``(cos, sin)``."""
    c = np.asarray(cos_sin_cache)
    if c.ndim != 2 or c.shape[1] % 2:
        raise ValueError(f"cos_sin_cache must be [max_pos, rotary_dim] with rotary_dim even, got {c.shape}")
    h = c.shape[1] // 2
    return np.ascontiguousarray(c[:, :h]), np.ascontiguousarray(c[:, h:])


def to_vllm(cos, sin):
    """Half-width ``(cos, sin)`` ``[max_pos, rotary_dim/2]`` -> vLLM ``cat(cos, sin)`` cache."""
    cos, sin = _pair(cos, sin)
    if cos.ndim != 2:
        raise ValueError(f"cos and sin must be [max_pos, rotary_dim/2], got {cos.shape}")
    return np.concatenate([cos, sin], axis=-1)


def onnx_caches(rope, max_pos):
    """The rope's ``(cos_cache, sin_cache)`` for positions ``0..max_pos-1`` (ONNX format)."""
    from .rope import Rope   # rope imports this module
    if not isinstance(rope, Rope):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    max_pos = as_int("max_pos", max_pos)
    if not 0 < max_pos <= MAX_POSITION + 1:
        raise ValueError(f"max_pos must be positive and at most {MAX_POSITION + 1} (positions "
                         f"0..max_pos-1 within ROPE_MAX_POSITION), got {shown(max_pos)}")
    # the caches' size before the positions: np.arange(2**31) alone is 16 GiB
    half = rope.rotary_dim // 2
    try:
        _tables.empty_tables(max_pos, half, np.float32)   # untouched memory: costs nothing if it exists
    except (MemoryError, builtins.ValueError):
        raise too_large("max_pos", (max_pos, half), np.float32, "the cos and sin caches") from None
    return rope.cos_sin(np.arange(max_pos, dtype=np.int64))
