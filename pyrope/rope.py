"""``Rope``: a resolved rotary position embedding and the calls that apply it.

A ``Rope`` is immutable once built: its layout, head_dim, rotary_dim,
float64 inverse frequencies and attention factor define one position function.
"""
import builtins

import numpy as np

from . import _kernel
from ._checks import (MAX_POSITION, as_base, as_even_dim, as_float_array, as_int,
                      as_layout, as_positions)
from .config import rope_arguments_from_hf_config
from .contract import fingerprint as _fingerprint
from .contract import make_contract, resolved_from_contract
from .errors import TypeError, ValueError
from ._kernel import DTYPE_CODES, ffi, lib
from ._table_cache import TableCache
from .scaling import resolve

_MISSING = object()
_ACCEPTED_DTYPES = _kernel.ACCEPTED_DTYPES
ANGLES = ("auto", "table", "on_the_fly")


class Rope:
    """Rotary position embedding for one attention configuration.

    ``Rope(head_dim, *, layout, base=10000.0, rotary_dim=None, scaling=None)``

    - ``head_dim``: size of one query/key head (positive, even).
    - ``layout``: required, ``"split_half"`` (HF, GPT-NeoX: pairs (i, i + r/2))
      or ``"interleaved"`` (GPT-J, Meta: pairs (2i, 2i + 1)). Weights trained
      for one layout give wrong scores, silently, under the other.
    - ``base``: the frequency base b, ``omega_i = b ** (-2i / rotary_dim)``.
    - ``rotary_dim``: the rotated prefix of each head (default ``head_dim``);
      the coordinates past it are never touched.
    - ``scaling``: a frequency rule: ``None`` for the plain rule, a
      transformers-style dict (``{"rope_type": "yarn", "factor": 4.0, ...}``),
      a rule object from ``pyrope.scaling`` or a resolved rule
      (see ``pyrope.scaling.resolve``).

    ``Rope.from_hf_config`` builds one from a model's ``config.json``;
    ``rope.contract()`` states what it computes, ``rope.fingerprint`` hashes
    that, and ``Rope.from_contract`` rebuilds the identical rope.
    """

    __slots__ = ("_head_dim", "_rotary_dim", "_layout", "_base", "_inv_freq",
                 "_attention_factor", "_resolved", "_fingerprint", "_tables")

    def __init__(self, head_dim, *, layout=_MISSING, base=10000.0, rotary_dim=None, scaling=None):
        if layout is _MISSING:
            raise TypeError(
                "layout is required: pass layout='split_half' (HF, GPT-NeoX) or "
                "layout='interleaved' (GPT-J, Meta); mixing them up corrupts scores silently")
        head_dim = as_even_dim("head_dim", head_dim)
        layout = as_layout(layout)
        base = as_base(base)
        rotary_dim = head_dim if rotary_dim is None else as_even_dim("rotary_dim", rotary_dim)
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim must be at most head_dim ({head_dim}), got {rotary_dim}")
        resolved = resolve(scaling, head_dim=head_dim, rotary_dim=rotary_dim, base=base)
        inv_freq = resolved.inv_freq  # Resolved holds it float64, C-contiguous, read-only
        self._head_dim = head_dim
        self._rotary_dim = 2 * inv_freq.shape[0]
        self._layout = layout
        self._base = base
        self._inv_freq = inv_freq
        self._attention_factor = float(resolved.attention_factor)
        self._resolved = resolved
        self._fingerprint = None
        self._tables = TableCache(inv_freq, self._attention_factor)  # rows served so far

    @classmethod
    def from_hf_config(cls, config, *, layout="split_half", seq_len=None, layer_type=None):
        """The Rope of a transformers model config.

        ``config``: a dict, a path to ``config.json`` (or its folder), or a
        transformers config object; both the transformers-4 (``rope_scaling``)
        and transformers-5 (``rope_parameters``) styles are read.
        ``layout``: ``"split_half"`` for transformers checkpoints (their
        ``rotate_half``); pass ``"interleaved"`` for GPT-J/Meta-style weights.
        ``seq_len``: current length, for dynamic NTK and LongRoPE, whose
        frequencies depend on it. ``layer_type``: the entry of a per-layer-type
        ``rope_parameters``. See ``pyrope.config.rope_arguments_from_hf_config``.
        """
        args = rope_arguments_from_hf_config(config, seq_len=seq_len, layer_type=layer_type)
        return cls(**args, layout=layout)

    @classmethod
    def from_contract(cls, contract):
        """Rebuild the Rope a contract describes (``rope.contract()``, possibly via JSON).

        The frequencies and attention factor are the contract's, bit for bit;
        the result has the same fingerprint. Raises ``ValueError`` naming the
        key of a malformed contract.
        """
        layout, head_dim, resolved = resolved_from_contract(contract)
        base = resolved.params.get("base", 10000.0)  # informational: inv_freq is taken as is
        return cls(head_dim, layout=layout, base=base, rotary_dim=resolved.rotary_dim, scaling=resolved)

    def contract(self):
        """JSON-serialisable dict of everything that defines this position function.

        Keys: format, layout, head_dim, rotary_dim, inv_freq (float.hex strings,
        exact), attention_factor (float.hex), rule, params, original_window,
        target_window. See ``pyrope.contract``.
        """
        return make_contract(layout=self._layout, head_dim=self._head_dim, resolved=self._resolved)

    @property
    def fingerprint(self):
        """SHA-256 hex digest of the contract's canonical form: equal exactly when
        two ropes compute the same position function (cached keys may be shared)."""
        if self._fingerprint is None:
            self._fingerprint = _fingerprint(self.contract())
        return self._fingerprint

    # ---- the contract ------------------------------------------------------

    head_dim = property(lambda self: self._head_dim, doc="Size of one head.")
    rotary_dim = property(lambda self: self._rotary_dim, doc="Rotated coordinates per head.")
    layout = property(lambda self: self._layout, doc="'split_half' or 'interleaved'.")
    base = property(lambda self: self._base, doc="The frequency base given at construction.")
    inv_freq = property(lambda self: self._inv_freq,
                        doc="float64 [rotary_dim // 2] angular frequencies (read-only).")
    attention_factor = property(lambda self: self._attention_factor,
                                doc="Factor multiplying cos and sin (1.0 without scaling).")

    def __repr__(self):
        return (f"Rope(head_dim={self._head_dim}, layout={self._layout!r}, base={self._base!r}, "
                f"rotary_dim={self._rotary_dim}, rule={self._resolved.rule!r}, "
                f"attention_factor={self._attention_factor!r})")

    # ---- tables ------------------------------------------------------------

    def cos_sin(self, positions, dtype=np.float32):
        """``(cos, sin)`` tables for integer ``positions``.

        Shape ``positions.shape + (rotary_dim // 2,)``; entry ``[..., i]`` is
        ``attention_factor * cos(position * inv_freq[i])`` (and sin), with the
        angle taken as the exact product. ``dtype`` float32 (default): correctly
        rounded at any position up to 2**31 - 1; float64: within 4 ulp
        (docs/ACCURACY.md). No duplicated halves: layouts share tables.
        """
        pos = as_positions("positions", positions)
        flat = np.ascontiguousarray(pos.reshape(-1))
        try:
            kind = None if dtype is None else np.dtype(dtype)
        except builtins.TypeError:
            kind = None
        if kind != np.float32 and kind != np.float64:
            raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
        cos, sin = _kernel.cos_sin_table(flat, self._inv_freq, self._attention_factor, kind)
        shape = pos.shape + (self._rotary_dim // 2,)
        return cos.reshape(shape), sin.reshape(shape)

    def _table_for(self, positions, offset, n_seq, angles="auto"):
        """Angles for one call: ``(table, c_positions)`` where ``table`` is
        ``(cos, sin, first position)`` or None (C computes each token's row on
        the fly) and ``c_positions`` the positions to hand to C.

        ``auto`` and ``table`` use the Rope's cached rows when the positions
        span at most the cache bound; wider spans are computed on the fly
        (``auto``, when rotary_dim/2 fits the kernel's on-the-fly row) or get
        rows built for this call only."""
        otf_ok = self._rotary_dim // 2 <= lib.ROPE_MAX_OTF_HALF
        if angles == "on_the_fly":
            if not otf_ok:
                raise ValueError(f"angles='on_the_fly' needs rotary_dim <= {2 * lib.ROPE_MAX_OTF_HALF}, "
                                 f"got rotary_dim={self._rotary_dim}; use angles='auto' or 'table'")
            return None, positions
        if positions is None:
            lo, hi = offset, offset + n_seq
        else:
            lo, hi = int(positions.min()), int(positions.max()) + 1
        window = self._tables.lookup(lo, hi)
        if window is not None:
            return (window[2], window[3], window[0]), positions
        if angles == "auto" and otf_ok:
            return None, positions
        if positions is None:
            cos, sin = _kernel.cos_sin_range(offset, n_seq, self._inv_freq, self._attention_factor)
            return (cos, sin, offset), None
        # Sparse positions (packed sequences far apart): one row per token.
        flat = np.ascontiguousarray(positions.reshape(-1))
        cos, sin = _kernel.cos_sin_table(flat, self._inv_freq, self._attention_factor)
        rows = np.arange(flat.size, dtype=np.int64).reshape(positions.shape)
        return (cos, sin, 0), rows

    # ---- rotation ----------------------------------------------------------

    def apply(self, x, positions=None, *, offset=0, seq_axis=-3, out=None, inverse=False,
              angles="auto"):
        """Rotate query or key vectors by their positions.

        - ``x``: ndarray ``[*batch, seq, heads, head_dim]`` (``seq_axis=-3``,
          the default; ``[seq, heads, head_dim]`` has no batch) or
          ``[*batch, heads, seq, head_dim]`` (``seq_axis=-2``). Any strides.
          dtype float32, float16, bfloat16 (``ml_dtypes.bfloat16``) or float64;
          the result has x's dtype. float16/bfloat16 are computed in float32
          and rounded to nearest even once; float64 is computed in float64.
        - ``positions``: ``None`` for ``offset + arange(seq)`` (decode with a KV
          cache passes ``offset=`` the cache length), or integer positions of
          shape ``[seq]`` or ``[*batch, seq]`` (left padding, packed sequences).
        - ``out``: ``None`` returns a new array; ``out=x`` rotates in place;
          another array of x's shape and dtype receives the result.
        - ``inverse``: rotate by minus the angle (undoes ``apply``).
        - ``angles``: where cos/sin come from. ``"auto"`` (default) uses the
          float32 rows this Rope keeps for the positions it has served (grown
          on demand, at most 32 MiB) and computes rows on the fly, token by
          token inside the kernel, when the positions span more than that;
          ``"table"`` always uses rows from a table (cached, or built for this
          call); ``"on_the_fly"`` never builds or reads a table. All three give
          bit-identical results.

        Returns the rotated array (``out`` when given). Coordinates past
        ``rotary_dim`` are copied unchanged. Large calls run on up to
        ``pyrope.get_num_threads()`` threads with identical results. Raises
        ``TypeError``/``ValueError`` naming the argument before anything is
        written.
        """
        if angles == "auto" and (out is None or out is x) and (
                positions is None or type(positions) is np.ndarray):
            done = _fast_apply(self, x, positions, offset, seq_axis, out, inverse)
            if done is not None:
                return done
        job = _Job(self, positions, offset, seq_axis, angles)
        job.add("x", x, out, "out")
        return job.run(inverse)[0]

    def apply_qk(self, q, k, positions=None, *, offset=0, seq_axis=-3, out=None, angles="auto"):
        """Rotate queries and keys at the same positions; returns ``(q_rot, k_rot)``.

        ``q`` and ``k`` share dtype, batch and sequence shape and may differ in
        head count (grouped-query attention). ``out`` is ``None`` or a pair
        ``(q_out, k_out)``; ``out=(q, k)`` rotates both in place. One pass:
        each token's cos/sin row is read once for both. Values are never
        rotated: pass only q and k. See :meth:`apply` for the rest.
        """
        if angles == "auto" and (positions is None or type(positions) is np.ndarray) and (
                out is None or (type(out) is tuple and len(out) == 2 and out[0] is q and out[1] is k)):
            done = _fast_apply_qk(self, q, k, positions, offset, seq_axis, out is not None)
            if done is not None:
                return done
        if out is None:
            q_out = k_out = None
        elif isinstance(out, (tuple, list)) and len(out) == 2:
            q_out, k_out = out
        else:
            raise TypeError(f"out must be None or a pair (q_out, k_out), got {type(out).__name__}")
        job = _Job(self, positions, offset, seq_axis, angles)
        job.add("q", q, q_out, "out[0]")
        as_float_array("k", k, (q.dtype,))
        job.add("k", k, k_out, "out[1]")
        if not _same_tokens(q, k, job.seq_axis):
            raise ValueError(f"q and k must share batch and sequence dims, got shapes {q.shape} and {k.shape}")
        return tuple(job.run(False))

    # ---- cached keys (pyrope.cache) ------------------------------------------

    def rerotate(self, k, from_positions, to_positions, *, seq_axis=-3):
        """Move keys this rope rotated at ``from_positions`` to ``to_positions``,
        in place, in one pass (context shifting). Returns ``k``.

        Fixes this layer's cached keys only: see :func:`pyrope.cache.rerotate`.
        """
        from .cache import rerotate
        return rerotate(self, k, from_positions, to_positions, seq_axis=seq_axis)

    def convert_keys(self, k, positions, to_rope, *, seq_axis=-3, out=None):
        """Re-express keys this rope rotated at ``positions`` under ``to_rope``'s
        frequency rule (dynamic NTK, LongRoPE short to long) without re-prefill.

        Fixes this layer's keys, not hidden states computed under the old rule:
        see :func:`pyrope.cache.convert_keys`.
        """
        from .cache import convert_keys
        return convert_keys(self, k, positions, to_rope, seq_axis=seq_axis, out=out)


class _Job:
    """One validated call: arrays to rotate, their outputs and the positions."""

    def __init__(self, rope, positions, offset, seq_axis, angles="auto"):
        self.rope = rope
        if isinstance(seq_axis, (bool, np.bool_)) or as_int("seq_axis", seq_axis) not in (-3, -2):
            raise ValueError(f"seq_axis must be -3 ([..., seq, heads, dim]) or -2 ([..., heads, seq, dim]), got {seq_axis!r}")
        if not isinstance(angles, str) or angles not in ANGLES:
            raise ValueError(f"angles must be one of {', '.join(map(repr, ANGLES))}, got {angles!r}")
        self.angles = angles
        self.seq_axis = int(seq_axis)
        self.offset = as_int("offset", offset)
        self.positions = positions
        if positions is not None and self.offset != 0:
            raise ValueError(f"pass either positions or offset, not both (offset={self.offset})")
        self.items = []

    def add(self, name, x, out, out_name):
        rope = self.rope
        as_float_array(name, x, _ACCEPTED_DTYPES, _kernel.ACCEPTED_NAMES)
        if x.ndim < 3:
            raise ValueError(f"{name} must have at least 3 dims ([seq, heads, head_dim] or with batch dims), "
                             f"got shape {x.shape}")
        if x.shape[-1] != rope.head_dim:
            raise ValueError(f"{name}.shape[-1] must equal head_dim={rope.head_dim}, got shape {x.shape}")
        if out is not None:
            as_float_array(out_name, out, (x.dtype,))
            if out.shape != x.shape:
                raise ValueError(f"{out_name} must have the shape of {name} {x.shape}, got {out.shape}")
            if not out.flags.writeable:
                raise ValueError(f"{out_name} is read-only")
        self.items.append((name, x, out))

    def _positions_2d(self, batch_shape, n_seq):
        """Positions as int64 [B or 1, seq] (or None for offset mode)."""
        if self.positions is None:
            if self.offset < -MAX_POSITION or self.offset + max(n_seq - 1, 0) > MAX_POSITION:
                raise ValueError(f"offset + seq must stay within +-{MAX_POSITION}, got offset={self.offset}, seq={n_seq}")
            return None
        pos = as_positions("positions", self.positions)
        if pos.ndim == 0 or pos.shape[-1] != n_seq:
            raise ValueError(f"positions must have shape [seq] or [*batch, seq] with seq={n_seq}, got {pos.shape}")
        if pos.ndim == 1:
            return np.ascontiguousarray(pos.reshape(1, n_seq))
        try:
            full = np.broadcast_to(pos, tuple(batch_shape) + (n_seq,))
        except builtins.ValueError:
            raise ValueError(f"positions shape {pos.shape} does not match batch {tuple(batch_shape)} "
                             f"and seq {n_seq}") from None
        return np.ascontiguousarray(full.reshape(int(np.prod(batch_shape, dtype=np.int64)), n_seq))

    def run(self, inverse):
        rope = self.rope
        views = []
        batch_shape = n_seq = None
        for name, x, out in self.items:
            tok = x if self.seq_axis == -3 else np.swapaxes(x, -3, -2)   # [*batch, seq, heads, dim]
            if batch_shape is None:
                batch_shape, n_seq = tok.shape[:-3], tok.shape[-3]
            results = out if out is not None else np.empty_like(x)
            views.append((tok, results))
        positions = self._positions_2d(batch_shape, n_seq)
        outputs = [r for _, r in views]
        if all(t.size == 0 for t, _ in views):  # no token or no head: no angles to look up
            return outputs
        # An array with zero heads next to one with some (q without heads) goes
        # to C like any other: C skips a tensor with no heads, pointers unread.
        table, c_positions = rope._table_for(positions, self.offset, n_seq, self.angles)
        if len(self.items) == 2 and _rotate_pair(
                rope, self.items, outputs, self.seq_axis, inverse, c_positions, self.offset, table):
            return outputs
        for (_, x, out), result in zip(self.items, outputs):
            _rotate_any(rope, x, result, self.seq_axis, inverse, c_positions, self.offset, table)
        return outputs


def _same_tokens(q, k, seq_axis):
    """Do q and k (at least 3-D) share their batch and sequence dims?"""
    if seq_axis == -3:   # [*batch, seq, heads, dim]
        return q.shape[:-2] == k.shape[:-2]
    return q.shape[:-3] == k.shape[:-3] and q.shape[-2] == k.shape[-2]


# ---- the fast path: repeated calls on contiguous arrays -----------------------
#
# Decode calls are tiny: the Python around the C call is most of their cost.
# For the common case (C-contiguous array, offset= or int64 positions of shape
# [seq] or [*batch, seq], cached table rows, result new or in place) a
# per-shape plan holds the counts and strides, so a call is a dict lookup, a
# window check and one C call. C checks every position against the cached
# rows before writing; a miss there, or anything else, returns None and takes
# the general, fully checked path (which grows the cache).

_PLANS = {}
_LAYOUT_CODES = _kernel.LAYOUTS


def _plan(x, seq_axis):
    """(dtype code, batch, seq, heads, element strides b/s/h) for C-contiguous x, or None."""
    key = (x.shape, x.dtype, seq_axis)
    plan = _PLANS.get(key)
    if plan is None:
        code = DTYPE_CODES.get(x.dtype)
        if code is None or x.ndim < 3 or x.size == 0 or type(seq_axis) is not int or seq_axis not in (-3, -2):
            return None
        *batch, a, b, d = x.shape
        n_batch = int(np.prod(batch, dtype=np.int64))
        if seq_axis == -3:   # [*batch, seq, heads, dim]
            plan = (code, n_batch, a, b, a * b * d, b * d, d)
        else:                # [*batch, heads, seq, dim]
            plan = (code, n_batch, b, a, a * b * d, d, b * d)
        if len(_PLANS) >= 512:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _fast_positions(window, positions, x, n_seq, offset):
    """(pointer, batch stride, seq stride) of explicit positions the fast path can
    hand to C as they are (int64, C-contiguous, shape [seq] or exactly
    [*batch, seq]), (NULL, 0, 0) for offset mode within the cached ``window``,
    or None for anything else (no window yet, offsets outside it, other arrays)."""
    if window is None:
        return None
    if positions is None:
        if offset < window[0] or offset + n_seq > window[1]:
            return None
        return ffi.NULL, 0, 0
    if (offset != 0 or positions.dtype != np.int64 or not positions.flags.c_contiguous
            or not positions.flags.aligned or positions.size == 0):
        return None
    if positions.shape == (n_seq,):
        return ffi.from_buffer("int64_t[]", positions), 0, 1
    batch = x.shape[:-3]
    if positions.shape == batch + (n_seq,):
        return ffi.from_buffer("int64_t[]", positions), n_seq, 1
    return None


def _fast_apply(rope, x, positions, offset, seq_axis, out, inverse):
    if (type(x) is not np.ndarray or type(offset) is not int or not x.flags.c_contiguous
            or not x.flags.aligned):
        return None
    plan = _plan(x, seq_axis)
    if plan is None or x.shape[-1] != rope._head_dim:
        return None
    code, n_batch, n_seq, n_heads, sb, ss, sh = plan
    w = rope._tables.window
    pos = _fast_positions(w, positions, x, n_seq, offset)
    if pos is None:
        return None
    if out is None:
        result = np.empty_like(x)
    elif x.flags.writeable:
        result = x
    else:
        return None
    tables = rope._tables
    status = lib.rope_rotate(
        code, _LAYOUT_CODES[rope._layout], 1 if inverse else 0, ffi.from_buffer(x), ffi.from_buffer(result),
        n_batch, n_seq, n_heads, rope._head_dim, rope._rotary_dim, sb, ss, sh, sb, ss, sh,
        pos[0], pos[1], pos[2], offset, w[4], w[5], w[0], w[1] - w[0],
        tables.inv_freq_ptr, rope._attention_factor, _kernel.NUM_THREADS)
    if status:
        if status == lib.ROPE_E_POSITION:  # a position outside the cached rows: C wrote
            return None                    # nothing; the general path grows the cache
        _kernel.check_status(status, "apply")
    return result


def _fast_apply_qk(rope, q, k, positions, offset, seq_axis, in_place):
    if (type(q) is not np.ndarray or type(k) is not np.ndarray or type(offset) is not int
            or not q.flags.c_contiguous or not k.flags.c_contiguous or q.dtype != k.dtype
            or not q.flags.aligned or not k.flags.aligned):
        return None
    pq, pk = _plan(q, seq_axis), _plan(k, seq_axis)
    if pq is None or pk is None or q.shape[-1] != rope._head_dim or k.shape[-1] != rope._head_dim:
        return None
    if not _same_tokens(q, k, seq_axis):
        return None
    code, n_batch, n_seq, qh, qb, qs, qhs = pq
    kh, kb, ks, khs = pk[3:]
    w = rope._tables.window
    pos = _fast_positions(w, positions, q, n_seq, offset)
    if pos is None:
        return None
    if in_place:
        if not (q.flags.writeable and k.flags.writeable) or np.shares_memory(q, k):
            return None
        q_out, k_out = q, k
    else:
        q_out, k_out = np.empty_like(q), np.empty_like(k)
    tables = rope._tables
    status = lib.rope_rotate_qk(
        code, _LAYOUT_CODES[rope._layout], 0,
        ffi.from_buffer(q), ffi.from_buffer(q_out), qh, qb, qs, qhs, qb, qs, qhs,
        ffi.from_buffer(k), ffi.from_buffer(k_out), kh, kb, ks, khs, kb, ks, khs,
        n_batch, n_seq, rope._head_dim, rope._rotary_dim,
        pos[0], pos[1], pos[2], offset, w[4], w[5], w[0], w[1] - w[0],
        tables.inv_freq_ptr, rope._attention_factor, _kernel.NUM_THREADS)
    if status:
        if status == lib.ROPE_E_POSITION:
            return None
        _kernel.check_status(status, "apply_qk")
    return q_out, k_out


# ---- the general path -----------------------------------------------------------

def _same_memory(a, b):
    """True when ``b`` is exactly ``a``'s memory: same first element and strides."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides)


def _prepare(x, result, seq_axis):
    """Kernel views (src, dst) of x and its result as [*batch, seq, heads, dim], or None
    when the kernel cannot address them directly (then _rotate_any copies)."""
    in_place = result is x or _same_memory(x, result)
    if not in_place and np.shares_memory(x, result):
        return None
    src = x if seq_axis == -3 else np.swapaxes(x, -3, -2)
    dst = src if in_place else (result if seq_axis == -3 else np.swapaxes(result, -3, -2))
    if not (_kernel.kernel_friendly(src) and _kernel.kernel_friendly(dst)):
        return None
    if src.ndim == 3:
        return src[None], dst[None]
    s4, d4 = _merge_batch(src), _merge_batch(dst)
    if s4 is None or d4 is None:
        return None
    return s4, d4


def _rotate_pair(rope, items, outputs, seq_axis, inverse, positions, offset, table):
    """q and k in one C call (each table row read once) when both map to plain
    4-D views and do not overlap each other; False when they do not."""
    (_, q, _), (_, k, _) = items
    q_res, k_res = outputs
    pq, pk = _prepare(q, q_res, seq_axis), _prepare(k, k_res, seq_axis)
    if pq is None or pk is None:
        return False
    for a in (q, q_res):
        for b in (k, k_res):
            if np.shares_memory(a, b):
                return False
    _kernel.rotate_qk(pq[0], pq[1], pk[0], pk[1], rope.layout, inverse, rope.rotary_dim, positions,
                      offset, table, rope.inv_freq, rope.attention_factor)
    return True


def _rotate_any(rope, x, result, seq_axis, inverse, positions, offset, table):
    """Rotate ``x`` into ``result`` whatever their strides, via the C kernel."""
    in_place = result is x or _same_memory(x, result)
    if not in_place and np.shares_memory(x, result):
        x = x.copy()  # partial overlap: behave as if out did not overlap x
    src = x if seq_axis == -3 else np.swapaxes(x, -3, -2)
    dst = result if seq_axis == -3 else np.swapaxes(result, -3, -2)
    if in_place:
        dst = src
    # The kernel wants a contiguous last axis and aligned, whole-element
    # strides; anything else goes through a contiguous copy (documented).
    if not _kernel.kernel_friendly(dst):
        tmp = np.array(src, order="C")  # a fresh, aligned copy
        _rotate_batched(rope, tmp, tmp, inverse, positions, offset, table)
        dst[...] = tmp
        return
    if not _kernel.kernel_friendly(src):
        src = np.array(src, order="C")
    _rotate_batched(rope, src, dst, inverse, positions, offset, table)


def _rotate_batched(rope, src, dst, inverse, positions, offset, table):
    """Collapse the batch dims of [*batch, seq, heads, dim] views into one axis
    when strides allow, else loop over the leading batch axis."""
    n_batch_dims = src.ndim - 3
    if n_batch_dims == 0:
        _kernel.rotate(src[None], dst[None], rope.layout, inverse, rope.rotary_dim,
                       positions, offset, table, rope.inv_freq, rope.attention_factor)
        return
    s4, d4 = _merge_batch(src), _merge_batch(dst)
    if s4 is not None and d4 is not None:
        _kernel.rotate(s4, d4, rope.layout, inverse, rope.rotary_dim, positions, offset, table,
                       rope.inv_freq, rope.attention_factor)
        return
    # Unmergeable batch strides: one leading index at a time.
    inner = int(np.prod(src.shape[1:-3], dtype=np.int64))
    for i in range(src.shape[0]):
        pos_i = positions
        if positions is not None and positions.shape[0] != 1:
            pos_i = positions[i * inner:(i + 1) * inner]
        _rotate_batched(rope, src[i], dst[i], inverse, pos_i, offset, table)


def _merge_batch(a):
    """View [*batch, seq, heads, dim] as [B, seq, heads, dim] without copying, or None."""
    batch = a.shape[:-3]
    n = int(np.prod(batch, dtype=np.int64))
    dims = [(size, stride) for size, stride in zip(batch, a.strides[:-3]) if size != 1]
    stride = dims[-1][1] if dims else 0
    for (size_outer, stride_outer), (size_inner, stride_inner) in zip(dims, dims[1:]):
        if stride_outer != stride_inner * size_inner:
            return None
    return np.lib.stride_tricks.as_strided(a, (n,) + a.shape[-3:], (stride,) + a.strides[-3:],
                                           writeable=a.flags.writeable)
