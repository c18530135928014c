"""How far repeated Rope.shift_keys moves keys from the exact key, in every cache kind.

Keys written at ``p0`` are shifted K = 10 times along a random walk of the
window (every key by the same ``delta``, ``|delta|`` up to 8192) and compared
with the exact key at the final position (``Rope.apply`` in float64).

The bound, per coordinate, from the formulas (csrc/pyrope.h, "quantised
caches"). Each of the K + 1 stages (the write, then every shift) stores a
float32 value ``v`` with an error of at most ``h``, half a step, read from
what the stage stored:

- int8: ``s (1/2 + 2^-16)``, ``s = amax/127`` the head's stored scale (the
  float32 ``v / s`` and ``q * s`` add at most ``2 * 127 * 2^-24 s``);
- q8_0: ``d16 (1/2 + 127 * 2^-11 + 2^-15) / (1 - 2^-11)``, ``d16`` the
  block's float16 scale: ``q = roundf(v / d)`` is within ``d/2`` of ``v/d``,
  and storing ``d`` as float16 moves ``q * d`` by at most ``127 |d - d16|``
  with ``|d - d16| <= 2^-11 d``;
- float8 e4m3fn: ``scale * ulp(q) / 2 + 2^-22 |q * scale|``, ``ulp(q)`` the
  e4m3 spacing at and above the stored ``|q|`` (``2^(e - 3)``, ``e >= -6``;
  nothing is clamped: the keys stay far below ``448 * scale``);
- float32: 0 (the value is the stored one).

A shift rotates each pair ``(x0, x1)`` by the exact position difference, which
keeps the length of the pair's error vector: an error made at one stage
reaches each coordinate at the end with at most ``sqrt(h0^2 + h1^2)``, the
pair's half steps at that stage. pyrope's float32 rotation (correctly rounded
cos/sin, two products and a sum) adds at most ``3 * 2^-24 * r`` per
coordinate, below ``2^-21 r`` for the pair, ``r`` the pair's length. So

    |error| <= sum over the K + 1 stages of (sqrt(h0^2 + h1^2) + 2^-21 r).

And pyrope against llama.cpp (tests/support/ggml_shift.py, the same first
cache moved as ``build_rope_shift`` moves it): both make the same K + 1
roundings to the same grids and differ only in the rotation, pyrope's the
more exact, so pyrope's RMS error cannot exceed llama.cpp's by more than the
sampling noise of ``N = 32768`` values (about ``1/sqrt(N)`` relative): 10 %
is allowed. The float32 cache, where ggml's float32 angles show, must not be
worse than llama.cpp's at all.
"""
import math

import ml_dtypes
import numpy as np
import pytest

import ggml_shift
import pyrope
from pyrope import Rope

F8 = np.dtype(ml_dtypes.float8_e4m3fn)
T, H, D, BS = 64, 4, 128, 16
K = 10
P0, SPAN = 65536, 8192
FP8_SCALE = 1.0


def pairs(x, layout):
    h = x.shape[-1] // 2
    return (x[..., :h], x[..., h:]) if layout == "split_half" else (x[..., 0::2], x[..., 1::2])


def per_pair(x0, x1, layout, like):
    """Broadcast a value per pair back to both coordinates of ``like``'s shape."""
    out = np.empty(like.shape, np.float64)
    o0, o1 = pairs(out, layout)
    o0[...], o1[...] = x0, x1
    return out


def walk(rng):
    deltas = []
    for _ in range(K):
        d = 0
        while d == 0:
            d = int(rng.integers(-SPAN, SPAN + 1))
        deltas.append(d)
    return deltas


def new_cache(kind):
    shape = (T // BS, BS, H)
    if kind == "q8_0":
        return np.zeros(shape + (D // 32,), pyrope.Q8_0), None
    dtype = {"int8": np.int8, "fp8": F8, "float32": np.float32}[kind]
    scale = np.zeros(shape, np.float32) if kind == "int8" else FP8_SCALE if kind == "fp8" else None
    return np.zeros(shape + (D,), dtype), scale


def values(kind, cache, scale):
    v = cache if kind == "float32" else pyrope.dequantize(cache, scale=scale)
    return np.asarray(v, np.float64).reshape(T, H, D)


def half_steps(kind, cache, scale):
    """``h`` of every stored value (the docstring's formulas), float64 ``[T, H, D]``."""
    if kind == "int8":
        s = np.asarray(scale, np.float64).reshape(T, H, 1)
        return np.broadcast_to(s * (0.5 + 2.0 ** -16), (T, H, D))
    if kind == "q8_0":
        d16 = np.abs(cache["d"].astype(np.float64)).reshape(T, H, D // 32, 1)
        h = d16 * (0.5 + 127 * 2.0 ** -11 + 2.0 ** -15) / (1 - 2.0 ** -11) + 127 * 2.0 ** -25
        return np.broadcast_to(h, (T, H, D // 32, 32)).reshape(T, H, D)
    if kind == "fp8":
        q = np.abs(cache.astype(np.float64)).reshape(T, H, D)
        e = np.maximum(np.floor(np.log2(np.where(q > 0, q, 1.0))), -6)
        e = np.where(q > 0, e, -6)
        return FP8_SCALE * np.exp2(e - 3) / 2 + 2.0 ** -22 * q * FP8_SCALE
    return np.zeros((T, H, D))


def stage_bound(kind, cache, scale, layout):
    """One stage's term: ``sqrt(h0^2 + h1^2) + 2^-21 r`` per coordinate."""
    h = half_steps(kind, cache, scale)
    h0, h1 = pairs(h, layout)
    v0, v1 = pairs(values(kind, cache, scale), layout)
    term = np.hypot(h0, h1) + 2.0 ** -21 * np.hypot(v0, v1)
    return per_pair(term, term, layout, h)


@pytest.mark.parametrize("kind", ["int8", "fp8", "q8_0", "float32"])
@pytest.mark.parametrize("base, layout", [(500000.0, "interleaved"), (10000.0, "split_half")])
def test_ten_shifts_stay_within_the_rounding_bound(kind, base, layout):
    rng = np.random.default_rng(11)
    k = rng.standard_normal((T, H, D)).astype(np.float32)
    deltas = walk(rng)
    rope = Rope(head_dim=D, base=base, layout=layout)
    slots = np.arange(T, dtype=np.int64)
    t = np.arange(T, dtype=np.int64)
    cache, scale = new_cache(kind)
    rope.cache_write(k, None, cache, None, slots, positions=P0 + t, k_scale=scale)
    bound = stage_bound(kind, cache, scale, layout)
    ggml = ggml_shift.KShift(kind, cache, scale, T, H, FP8_SCALE)
    start = P0
    for delta in deltas:
        rope.shift_keys(cache, slots, start + t, start + delta + t, k_scale=scale)
        ggml.shift(delta, base, layout)
        start += delta
        bound = bound + stage_bound(kind, cache, scale, layout)
    exact = rope.apply(k.astype(np.float64)[None], positions=(start + t)[None])[0]
    bound = bound + 2.0 ** -40 * np.abs(exact).max()   # the float64 reference's own error
    err = values(kind, cache, scale) - exact
    worst = np.unravel_index(np.argmax(np.abs(err) / bound), err.shape)
    assert np.all(np.abs(err) <= bound), (
        f"{kind}: error {err[worst]:.3g} at {worst} above the bound {bound[worst]:.3g}")

    theirs = np.asarray(ggml.values(), np.float64) - exact
    rms, rms_theirs = math.sqrt(np.mean(err ** 2)), math.sqrt(np.mean(theirs ** 2))
    if kind == "float32":
        assert np.abs(err).max() <= np.abs(theirs).max() and rms <= rms_theirs
    else:
        assert rms <= 1.1 * rms_theirs, f"{kind}: RMS {rms:.3g} against llama.cpp's {rms_theirs:.3g}"


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
def test_ggml_emulation_rotates_by_nearly_the_exact_angle(layout):
    """The emulated ggml rope is the exact rotation but for its float32 angle:
    ``theta_i`` is the position times ``powf(base, -2/d)`` (within ``2^-23``
    relative) multiplied ``i`` times, each product rounded (``2^-24``), so
    ``|theta_i - p w_i| <= 3 i 2^-24 |p| w_i``; cosf/sinf within ``2^-23``, the
    rotation's roundings ``3 * 2^-24``: a coordinate is off by at most
    ``r (|dtheta_i| + 2^-23 + 3 * 2^-24)``, r the pair's length."""
    base = 500000.0
    rope = Rope(head_dim=D, base=base, layout=layout)
    x = np.random.default_rng(3).standard_normal((16, H, D)).astype(np.float32)
    pos = np.array([0, 1, -1, 7, 100, 4095, -8192, 65536, 131071, 2 ** 20, -(2 ** 22), 5, 9, 12345, 3, 2])
    got = ggml_shift.rope_f32(x, pos, base, layout).astype(np.float64)
    exact = rope.apply(x.astype(np.float64)[None], positions=pos[None])[0]
    w = rope.inv_freq
    i = np.arange(D // 2)
    dtheta = 3 * i * 2.0 ** -24 * np.abs(pos)[:, None, None] * w
    x0, x1 = pairs(x.astype(np.float64), layout)
    r = np.hypot(x0, x1)
    b = r * (dtheta + 2.0 ** -23 + 3 * 2.0 ** -24) * (1 + 2.0 ** -20)
    bound = per_pair(b, b, layout, got)
    assert np.all(np.abs(got - exact) <= bound)
