"""Error bounds for float32 rotation, derived once and used by every test.

A rotated coordinate is fma(x0, c, -(x1*s)) with float32 tables c, s each
within 1 ulp (<= 2**-23 relative) of the exact value: the table errors
contribute <= 2**-23 * (|x0| + |x1|), the rounded product and the fma one more
half-ulp each of at most |x0| + |x1|. So |error| <= 3 * 2**-23 * (|x0| + |x1|)
times the attention factor; we allow 4 * 2**-23 to stay clear of the bound.
"""
import numpy as np

from pyrope import reference

EPS32 = 2.0**-23
# float64 kernel vs reference, in 2**-52 * |f| * M (derived in tests/kernel/test_dtypes.py's notes)
F64_ULPS = 6
WORST = {}  # largest relative error seen per (isa, layout): printed after the run


def pair_magnitudes(x, rotary_dim, layout):
    """|x0| + |x1| of the pair each coordinate belongs to (0 past rotary_dim)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    mag = np.zeros_like(x)
    half = rotary_dim // 2
    if layout == "interleaved":
        s = x[..., 0:rotary_dim:2] + x[..., 1:rotary_dim:2]
        mag[..., 0:rotary_dim:2] = s
        mag[..., 1:rotary_dim:2] = s
    else:
        s = x[..., :half] + x[..., half:rotary_dim]
        mag[..., :half] = s
        mag[..., half:rotary_dim] = s
    return mag


def assert_rotation_close(got, want, x, rotary_dim, layout, factor=1.0):
    """got (float32) within the derived bound of want (float64 reference)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.size == 0:
        return 0.0
    bound = 4 * EPS32 * abs(factor) * pair_magnitudes(x, rotary_dim, layout) + 1e-37
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"error {err[worst]:.3g} exceeds bound {bound[worst]:.3g} at {worst}: "
        f"got {got[worst]!r}, want {want[worst]!r}")
    return float(np.max(err / np.maximum(bound / 4 / EPS32, 1e-300)))


def reference_rotation(rope, x, positions, inverse=False):
    """float64 exact rotation of [seq, heads, dim] x (any float dtype) at
    per-token positions, by the standard-library reference."""
    x64 = np.asarray(x).astype(np.float64)
    out = np.empty(x64.shape, dtype=np.float64)
    inv_freq = [float(w) for w in rope.inv_freq]
    for s, pos in enumerate(positions):
        for h in range(x64.shape[1]):
            out[s, h] = reference.rotate_with_inv_freq(
                [float(v) for v in x64[s, h]], int(pos), inv_freq, layout=rope.layout,
                inverse=inverse, attention_factor=rope.attention_factor)
    return out
