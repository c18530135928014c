"""``RMSNorm``: the QK-norm that Qwen3, Gemma 3 and OLMo 2 apply to q and k
right before the rotation, fused into it.

A ``RMSNorm`` is a description, not a computation: pass it to
``Rope.apply(..., norm=)``, ``Rope.apply_qk(..., q_norm=, k_norm=)`` or
``Rope.cache_write(..., norm=)`` and the kernel normalises each head (or each
token's heads) and rotates it in the same pass over memory.

What the kernel computes, for a group of n values x (one head, or all heads
of a token): ``inv = 1 / sqrt(sum(x^2) / n + eps)`` and ``y = x * (inv * w)``,
in float64, rounded once to float32 (float64 for float64 data), then rotated
as ``apply`` rotates and rounded once to the storage type. The sum of squares
runs in a fixed order (csrc/scalar/stage.c), so every instruction set gives
the same bits. transformers computes the same in float32 (Qwen3:
``weight * (x * rsqrt(mean(x^2) + eps))``; Gemma 3: ``* (1 + weight)``),
which agrees within float32 rounding (tests/api/test_norm.py).
"""
import builtins
import math

import numpy as np

from ._interop.views import as_array, is_foreign
from .errors import TypeError, ValueError

OVER = ("head", "token")
MAX_WEIGHTS = 1 << 24   # over="token": heads * head_dim; 16M weights is 128 MiB as float64


def _weights(weight):
    """``weight`` as a 1-D ndarray of a float dtype (numpy, ml_dtypes, torch or
    DLPack), refused naming ``weight``."""
    if is_foreign(weight):
        torch = getattr(type(weight), "__module__", "").startswith("torch")
        if torch and hasattr(weight, "detach"):   # an nn.Parameter: its values, not its graph
            weight = weight.detach()
        weight = as_array("weight", weight)
    elif not isinstance(weight, np.ndarray):
        try:
            weight = np.asarray(weight)
        except (builtins.ValueError, builtins.TypeError) as e:
            raise TypeError(f"weight must be an array of floats, got {type(weight).__name__} ({e})") from None
    if weight.dtype.kind != "f" and weight.dtype.name != "bfloat16":
        raise TypeError(f"weight must have a float dtype (float16, bfloat16, float32, float64), "
                        f"got {weight.dtype}")
    if weight.ndim != 1 or weight.size == 0:
        raise ValueError(f"weight must be a non-empty 1-D array ([head_dim], or [heads * head_dim] with "
                         f"over='token'), got shape {weight.shape}")
    if weight.size > MAX_WEIGHTS:   # a broadcast view's length is not its memory: bound the copy
        raise ValueError(f"weight has {weight.size} values, more than a norm can use ({MAX_WEIGHTS}: "
                         f"heads * head_dim of the largest call)")
    wide = weight.astype(np.float64)
    if not np.isfinite(wide).all():
        bad = int(np.flatnonzero(~np.isfinite(wide))[0])
        raise ValueError(f"weight must be finite, got {wide[bad]!r} at index {bad}")
    return weight, wide


class RMSNorm:
    """Root-mean-square normalisation of q or k before the rotation.

    ``RMSNorm(weight=None, *, eps=1e-6, unit_offset=False, over="head")``

    - ``weight``: the learned scale, ``[head_dim]`` (``over="head"``: one
      norm per head, shared by all heads; Qwen3, Gemma 3) or ``[heads *
      head_dim]`` (``over="token"``: one norm across all heads of a token;
      OLMo 2). Any float dtype, numpy, ml_dtypes or torch (an
      ``nn.Parameter`` is read as its values); copied here, so later changes
      to it are not seen. ``None``: no scale.
    - ``eps``: added to the mean square, finite and > 0.
    - ``unit_offset``: scale by ``1 + weight`` (Gemma 3), the sum taken in
      float32 as Gemma's module takes it (in float64 for float64 data).
    - ``over``: ``"head"`` or ``"token"``.

    Refusals are ``TypeError``/``ValueError`` naming the argument; a weight
    whose length does not fit the call's heads is refused by the call,
    naming the norm argument.
    """

    __slots__ = ("_weight", "_eps", "_unit_offset", "_over", "_scale32", "_scale64")

    def __init__(self, weight=None, *, eps=1e-6, unit_offset=False, over="head"):
        if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)):
            raise TypeError(f"eps must be a float, got {type(eps).__name__}")
        eps = float(eps)
        if not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"eps must be finite and > 0, got {eps!r}")
        if unit_offset is not True and unit_offset is not False:
            if not isinstance(unit_offset, np.bool_):
                raise TypeError(f"unit_offset must be True or False, got {unit_offset!r}")
            unit_offset = bool(unit_offset)
        if not isinstance(over, str) or over not in OVER:
            raise ValueError(f"over must be 'head' or 'token', got {over!r}")
        if unit_offset and weight is None:
            raise ValueError("unit_offset=True scales by 1 + weight: pass the weight")
        self._eps, self._unit_offset, self._over = eps, unit_offset, over
        if weight is None:
            self._weight = self._scale32 = self._scale64 = None
            return
        given, wide = _weights(weight)
        self._weight = wide
        self._weight.flags.writeable = False
        if unit_offset:
            # Gemma 3: (1.0 + weight.float()) in float32; float64 data keep float64
            with np.errstate(over="ignore"):   # a weight beyond float32 is refused below
                scale32 = (np.float32(1) + given.astype(np.float32)).astype(np.float64)
            scale64 = 1.0 + wide
        else:
            scale32 = scale64 = wide
        if not (np.isfinite(scale32).all() and np.isfinite(scale64).all()):
            raise ValueError("weight: 1 + weight overflows float32")
        self._scale32 = np.ascontiguousarray(scale32)
        self._scale64 = np.ascontiguousarray(scale64)
        for a in (self._scale32, self._scale64):
            a.flags.writeable = False

    @property
    def weight(self):
        """The weight as given, in float64 (read-only), or None."""
        return self._weight

    @property
    def eps(self):
        return self._eps

    @property
    def unit_offset(self):
        return self._unit_offset

    @property
    def over(self):
        return self._over

    def __repr__(self):
        weight = "None" if self._weight is None else f"<{self._weight.size} weights>"
        return f"RMSNorm({weight}, eps={self._eps!r}, unit_offset={self._unit_offset}, over={self._over!r})"

    def __reduce__(self):
        return (_rebuild, (self._weight, self._eps, self._unit_offset, self._over))

    def stage(self, name, dtype, head_dim, n_heads):
        """What the kernel takes for arrays of ``dtype`` with ``n_heads`` heads
        of ``head_dim``: ``(over, scale, eps)``, ``scale`` the float64 weights
        it multiplies by (None: 1). A weight of another length is a
        ``ValueError`` naming ``name`` (the call's norm argument)."""
        scale = self._scale64 if dtype == np.float64 else self._scale32
        if scale is not None:
            want = head_dim if self._over == "head" else n_heads * head_dim
            if scale.size != want:
                what = "[head_dim]" if self._over == "head" else "[heads * head_dim]"
                raise ValueError(f"{name}.weight must have {what} = {want} values for over={self._over!r}, "
                                 f"got {scale.size}")
        return self._over, scale, self._eps


def _rebuild(weight, eps, unit_offset, over):
    return RMSNorm(weight, eps=eps, unit_offset=unit_offset, over=over)


def as_norm(name, norm):
    """``norm`` if it is None or a :class:`RMSNorm`, else a ``TypeError`` naming ``name``."""
    if norm is None or isinstance(norm, RMSNorm):
        return norm
    raise TypeError(f"{name} must be a pyrope.RMSNorm or None, got {type(norm).__name__}")
