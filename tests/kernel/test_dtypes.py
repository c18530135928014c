"""float16, bfloat16 and float64 storage: accuracy, rounding, special values.

Error bounds, derived from the float32 one in tolerance.py. With
M = |x0| + |x1| of the pair and f the attention factor:

- float16 / bfloat16 widen exactly to float32, so the float32 result y32 is
  within E32 = 4 * 2**-23 * |f| * M of the exact rotation (tolerance.py).
  Storing rounds y32 to nearest once: within u * |y32| (u = 2**-11 for
  float16, 2**-8 for bfloat16), plus half the smallest float16 subnormal
  (2**-25) where the result is subnormal. |y32| <= |exact| + E32, so
      |y - exact| <= E32 + u * (|exact| + E32) + 2**-25.
- float64 computes in float64 with float64 table entries (with e = 2**-52):
  each entry is within 1.5 ulp <= 1.5 e relative of the exact scale * cos/sin
  (table_f64.c), and the kernel rounds one product and one fused multiply-add
  (<= 0.5 e * |x1 s| + 0.5 e * |y| <= e * M): |y - exact| <= 2.5 e * |f| * M.
  The reference (pyrope.reference in float64) rounds cos/sin (~1 ulp), the
  factor, two products and a sum: within 3 e * |f| * M. So
  |y - want| <= 5.5 e * |f| * M; we allow F64_ULPS = 6 (measured: 1.43).
"""
import numpy as np
import pytest

import pyrope
from pyrope import Rope
from array_bits import bits
from kernel_api import c_rotate
from tolerance import EPS32, F64_ULPS, pair_magnitudes, reference_rotation

import ml_dtypes  # noqa: E402 - the test extra installs it
BF16 = np.dtype(ml_dtypes.bfloat16)
LAYOUTS = ["interleaved", "split_half"]
DTYPES = [np.dtype(np.float16), BF16, np.dtype(np.float64)]
UNIT = {np.dtype(np.float16): 2.0**-11, BF16: 2.0**-8}


def assert_close_for_dtype(got, want, x, rotary_dim, layout, dtype, factor=1.0):
    mag = pair_magnitudes(x.astype(np.float64), rotary_dim, layout) * abs(factor)
    if dtype == np.float64:
        bound = F64_ULPS * 2.0**-52 * mag + 1e-300
    else:
        e32 = 4 * EPS32 * mag
        bound = e32 + UNIT[dtype] * (np.abs(want) + e32) + 2.0**-25
    err = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (dtype, worst, err[worst], bound[worst])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernel_vs_reference(isa, dtype, layout, rng):
    for case in range(4):
        head_dim = int(rng.integers(1, 70)) * 2
        rotary_dim = head_dim if case % 2 else int(rng.integers(1, head_dim // 2 + 1)) * 2
        rope = Rope(head_dim, layout=layout, base=float(10 ** rng.uniform(2, 6)), rotary_dim=rotary_dim)
        positions = rng.integers(-2**31 + 1, 2**31, size=3)
        x = (rng.standard_normal((3, 2, head_dim)) * 10 ** rng.uniform(-2, 2)).astype(dtype)
        for inverse in (False, True):
            got = rope.apply(x, positions, inverse=inverse)
            assert got.dtype == dtype
            want = reference_rotation(rope, x, positions, inverse)
            assert_close_for_dtype(got, want, x, rotary_dim, layout, dtype)
            assert np.array_equal(bits(got[..., rotary_dim:]), bits(x[..., rotary_dim:]))


def _special_values(rng, dtype, shape):
    """Wide-range values: tiny (subnormal results), huge (overflow), zeros, infinities."""
    mags = 10.0 ** rng.uniform(-9, 5, size=shape) if dtype != np.float64 else 10.0 ** rng.uniform(-300, 300, size=shape)
    v = rng.choice([-1.0, 1.0], size=shape) * mags
    flat = v.reshape(-1)
    flat[::17] = 0.0
    flat[5::29] = np.inf
    flat[7::31] = -np.inf
    if dtype == np.float16:
        flat[3::13] = 65504.0
    with np.errstate(over="ignore"):  # beyond float16's range: infinities, on purpose
        return v.astype(dtype)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32)] + DTYPES, ids=lambda d: d.name)
def test_every_isa_bit_identical_to_scalar_every_tail(isa, dtype, rng):
    # Head dims 2..80 and, for each, rotary dims covering every vector tail ...
    for layout in LAYOUTS:
        # ... and heads wider than the kernels' 512-pair stack chunks.
        for head_dim in list(range(2, 81, 2)) + [1100]:
            rotary_dims = sorted({head_dim, max(2, head_dim - 2), 2 * (head_dim // 4) or 2, 2})
            for rotary_dim in rotary_dims:
                rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim, base=1e4)
                x = _special_values(rng, dtype, (2, 3, head_dim))
                pos = [int(rng.integers(0, 2**31 - 1)), int(rng.integers(-2**31 + 1, 0))]
                got = (rope.apply(x, pos), rope.apply(x, pos, inverse=True))
                with pyrope.forced_isa("scalar"):
                    spec = (rope.apply(x, pos), rope.apply(x, pos, inverse=True))
                for a, b in zip(got, spec):
                    assert np.array_equal(bits(a), bits(b)), (isa, dtype, layout, head_dim, rotary_dim)


def _rotate_with_table(x, cos, sin, layout):
    """Rotate [seq, 1, 2] x with explicit float32 rows cos/sin [seq, 1] (token s uses row s)."""
    out = np.empty_like(x)
    table = (np.ascontiguousarray(cos, np.float32), np.ascontiguousarray(sin, np.float32), 0)
    assert c_rotate([(x[None], out[None])], layout, 2, table=table) == 0
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float16_overflow_to_inf(isa, layout):
    # 65504 (the largest float16) rotated by 45 degrees: y1 = 65504 * sqrt(2) > 65520 -> +inf.
    c = np.float32(np.cos(np.pi / 4))
    x = np.array([[[65504.0, 65504.0]], [[-65504.0, -65504.0]]], dtype=np.float16)
    y = _rotate_with_table(x, np.full((2, 1), c), np.full((2, 1), c), layout)
    assert y[0, 0, 1] == np.inf and y[1, 0, 1] == -np.inf
    # y0 = fma(x0, c, -(x1 * s)): only the rounding of x1 * s remains, << 1 float16 ulp at 65504
    assert abs(float(y[0, 0, 0])) <= 65504 * 2.0**-23 and abs(float(y[1, 0, 0])) <= 65504 * 2.0**-23
    # The same through apply: any angle with cos + sin > 65520/65504 overflows.
    rope = Rope(2, layout=layout)  # inv_freq = 1: angle = position (1 rad)
    got = rope.apply(np.array([[[65504.0, 65504.0]]], np.float16), [1])
    assert got[0, 0, 1] == np.inf and np.isfinite(got[0, 0, 0])


@pytest.mark.parametrize("dtype", [np.dtype(np.float32)] + DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nan_propagates_within_its_pair(isa, dtype, layout):
    rope = Rope(16, layout=layout)
    x = np.ones((2, 3, 16), dtype=dtype)
    bad = 5  # pair (4, 5) interleaved, (5, 13) split half
    x[:, :, bad] = np.nan
    partner = bad - 1 if layout == "interleaved" else bad + 8
    y = rope.apply(x, [3, 1000]).astype(np.float64)
    assert np.all(np.isnan(y[..., [bad, partner]]))
    others = [i for i in range(16) if i not in (bad, partner)]
    assert np.all(np.isfinite(y[..., others]))


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_store_rounding_matches_independent_conversion(isa, dtype, layout, rng):
    # The 16-bit kernels compute exactly the float32 kernel's value and round it
    # once, to nearest even: compare with numpy's (float16) and ml_dtypes'
    # (bfloat16) own conversion of the float32 result.
    n = 4096
    x = (rng.standard_normal((n, 1, 2)) * 10 ** rng.uniform(-6, 4, size=(n, 1, 1))).astype(dtype)
    cos = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    sin = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    got = _rotate_with_table(x, cos, sin, layout)
    wide = _rotate_with_table(x.astype(np.float32), cos, sin, layout)
    want = wide.astype(dtype)
    finite = np.isfinite(wide)
    assert np.array_equal(bits(got)[finite], bits(want)[finite])
    assert np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(wide))


def test_ties_round_to_even(isa):
    # bfloat16 keeps 8 significant bits: 1 + 2**-8 lies half-way between 1 and
    # 1 + 2**-7 and must round to 1 (even); 1 + 3 * 2**-8 rounds to 1 + 2**-6.
    x = np.array([[[1.0, 1.0]], [[1.0, 1.0 + 2.0**-7]]], dtype=BF16)
    # y1 = fma(x1, c, x0 * s) with c = 1, s = 2**-8: x1 + 2**-8, exact in float32.
    y = _rotate_with_table(x, np.ones((2, 1)), np.full((2, 1), 2.0**-8), "interleaved")
    assert float(y[0, 0, 1]) == 1.0
    assert float(y[1, 0, 1]) == 1.0 + 2.0**-6
    h = np.array([[[1.0, 1.0]], [[1.0, 1.0 + 2.0**-10]]], dtype=np.float16)
    y = _rotate_with_table(h, np.ones((2, 1)), np.full((2, 1), 2.0**-11), "interleaved")
    assert float(y[0, 0, 1]) == 1.0 and float(y[1, 0, 1]) == 1.0 + 2.0**-9


@pytest.mark.parametrize("dtype", [np.dtype(np.float32)] + DTYPES, ids=lambda d: d.name)
def test_in_place_and_qk_for_every_dtype(dtype, rng):
    rope = Rope(64, layout="split_half", rotary_dim=48)
    q = rng.standard_normal((2, 5, 4, 64)).astype(dtype)
    k = rng.standard_normal((2, 5, 2, 64)).astype(dtype)
    want_q, want_k = rope.apply(q, offset=7), rope.apply(k, offset=7)
    got_q, got_k = rope.apply_qk(q, k, offset=7)
    assert np.array_equal(bits(got_q), bits(want_q)) and np.array_equal(bits(got_k), bits(want_k))
    rope.apply_qk(q, k, offset=7, out=(q, k))
    assert np.array_equal(bits(q), bits(want_q)) and np.array_equal(bits(k), bits(want_k))


def test_dtype_errors_list_the_accepted_dtypes():
    rope = Rope(8, layout="split_half")
    for bad in (np.int32, np.complex64, ">f2"):
        with pytest.raises(TypeError) as info:
            rope.apply(np.ones((1, 1, 8), dtype=bad))
        assert "float32, float16, bfloat16 (ml_dtypes), float64" in str(info.value)
    with pytest.raises(TypeError, match="k must have dtype float16"):
        rope.apply_qk(np.ones((1, 1, 8), np.float16), np.ones((1, 1, 8), BF16))
    with pytest.raises(TypeError, match="out must have dtype bfloat16"):
        rope.apply(np.ones((1, 1, 8), BF16), out=np.ones((1, 1, 8), np.float32))
