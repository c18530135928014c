"""float16 and bfloat16 stores at the edges of their ranges, every kernel.

The SIMD kernels narrow float32 results with instructions whose documented
behaviour differs from the specification at the edges: AVX512_BF16's
vcvtne2ps2bf16 treats float32 subnormals as zero, while the specification
(convert.h) rounds them to nearest even into bfloat16 subnormals (or up into
the normal range). These tests pin the stored bits there, for each
instruction set against the scalar kernel and against an independent
conversion of the float32 result:

- rows (cos, sin) chosen freely through explicit tables, with pairs
  (x0, x1) = (1, 0): the kernel's float32 results are then exactly
  y0 = cos and y1 = sin (or -sin), so every float32 bit pattern we list is
  stored through the kernel's own narrowing;
- data times powers of two (exact products, one rounding into float32
  subnormals by the fused multiply-add, then one to the storage type);
- random tiny data against random rows (scalar kernel as the reference);
- NaN rows and NaN/infinite data (scalar bits; NaN-ness for the converters).

Every half length below runs the kernels' register path (64) and their
general loops with masked tails, both layouts, in place and into another
array, forward and inverse.
"""
import ml_dtypes
import numpy as np
import pytest

import pyrope
from kernel_api import c_rotate

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
LAYOUTS = ["interleaved", "split_half"]
HALVES = [1, 3, 16, 17, 31, 32, 33, 40, 64, 70, 600]
SEQ, HEADS = 3, 2


def u16(a):
    return np.ascontiguousarray(a).view(np.uint16)


def same_bits_or_both_nan(a, b):
    """Bit for bit, except that two NaNs may differ in sign and payload (the
    project's rule: x86 SIMD and scalar code negate and propagate NaNs
    differently, e.g. -(0 * inf))."""
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return np.array_equal(u16(a)[~nan], u16(b)[~nan])


def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def rotate(x, cos, sin, layout, inverse=False, in_place=False):
    """Rotate x [seq, heads, 2*half] with rows cos/sin [seq, half] (token s, row s)."""
    out = x if in_place else np.full_like(x, 7)
    table = (np.ascontiguousarray(cos, np.float32), np.ascontiguousarray(sin, np.float32), 0)
    status = c_rotate([(x[None], out[None])], layout, x.shape[-1], inverse=inverse, table=table)
    assert status == 0
    return out


def unit_pairs(dtype, half, layout):
    """x0 = 1, x1 = 0 for every pair: the float32 results are the rows themselves."""
    x = np.zeros((SEQ, HEADS, 2 * half), dtype=dtype)
    if layout == "interleaved":
        x[..., 0::2] = 1
    else:
        x[..., :half] = 1
    return x


def unit_results(cos, sin, inverse):
    """float32 (y0, y1) of the pair (1, 0), [seq, 1, half]: y0 = cos - 0 * s and
    y1 = 0 * cos + s (s = -sin for the inverse) are exact sums in float32, so
    numpy computes what the fused multiply-adds do (signed zeros, 0 * inf)."""
    s = -sin if inverse else sin
    zero = np.float32(0)
    with np.errstate(invalid="ignore"):
        return (cos + -(zero * s))[:, None, :], (zero * cos + s)[:, None, :]


def assert_stored(got, f32, reference):
    """got holds reference(f32) bit for bit where f32 is a number, NaN where it is NaN."""
    f32 = np.broadcast_to(f32, got.shape)
    nan = np.isnan(f32)
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(u16(got)[~nan], reference(f32[~nan]))


def split_pairs(y, half, layout):
    """(y0, y1) of every pair, [seq, heads, half] each."""
    if layout == "interleaved":
        return y[..., 0::2], y[..., 1::2]
    return y[..., :half], y[..., half:]


def rows_from(values, half):
    """[SEQ, half] rows cycling through values (each value used at least once when it fits)."""
    n = SEQ * half
    return np.resize(values, n).reshape(SEQ, half)


def run_every_way(isa, x, cos, sin, layout):
    """{(inverse, in_place): result} for this ISA, after checking each against scalar bit for bit."""
    results = {}
    for inverse in (False, True):
        for in_place in (False, True):
            got = rotate(x.copy(), cos, sin, layout, inverse, in_place)
            with pyrope.forced_isa("scalar"):
                want = rotate(x.copy(), cos, sin, layout, inverse, in_place)
            assert same_bits_or_both_nan(got, want), (isa, layout, inverse, in_place)
            results[inverse, in_place] = got
    return results


# ---- float32 patterns around the bfloat16 subnormal range ----------------------

def bf16_edge_bits(rng):
    """float32 bit patterns whose bfloat16 rounding is delicate, both signs."""
    fixed = [
        0x00000000, 0x00000001, 0x00007FFF, 0x00008000, 0x00008001,  # below half the smallest bf16
        0x00010000, 0x00018000, 0x00028000, 0x00038000,              # ties: to even
        0x00017FFF, 0x00018001, 0x0001FFFF,
        0x003F8000, 0x00408000, 0x007F7FFF, 0x007F8000, 0x007F8001,  # round up into the normal range
        0x007FFFFF, 0x00800000, 0x00808000, 0x00818000, 0x00800001,  # smallest normals
        0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7F8000, 0x7F7FFFFF,  # normal ties, overflow to inf
        0x7F800000,
    ]
    sub = rng.integers(1, 0x00800000, size=400, dtype=np.uint32)           # any subnormal
    ties = (rng.integers(0, 0x80, size=100, dtype=np.uint32) << 16) | 0x8000  # subnormal ties
    bits = np.concatenate([np.array(fixed, np.uint32), sub, ties])
    return np.concatenate([bits, bits | np.uint32(0x80000000)])


def bf16_reference(values):
    """bfloat16 bits of float32 values: ml_dtypes' conversion, and for the
    subnormal range a separate rounding on the 2**-133 grid (np.rint: ties to even)."""
    want = u16(np.asarray(values, np.float32).astype(BF16)).copy()
    v = values.astype(np.float64)
    tiny = np.abs(v) < 2.0**-126
    m = np.rint(np.abs(v[tiny]) * 2.0**133).astype(np.uint16)  # 128 is the smallest normal, 0x0080
    sign = np.where(np.signbit(v[tiny]), 0x8000, 0).astype(np.uint16)
    assert np.array_equal(want[tiny], m | sign)
    return want


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", HALVES)
def test_bfloat16_stores_float32_results_around_subnormals(isa, layout, half, rng):
    values = f32_from_bits(rng.permutation(bf16_edge_bits(rng)))
    x = unit_pairs(BF16, half, layout)
    # every pattern through cos and through sin, in several row positions
    for shift in range(0, len(values), SEQ * half):
        part = np.roll(values, -shift)
        cos, sin = rows_from(part, half), rows_from(np.roll(part, 7), half)
        for (inverse, _), y in run_every_way(isa, x, cos, sin, layout).items():
            for got, f32 in zip(split_pairs(y, half, layout), unit_results(cos, sin, inverse)):
                assert_stored(got, f32, bf16_reference)
        if shift > 4 * SEQ * half:
            break


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", [17, 64])
def test_bfloat16_products_rounded_into_subnormals(isa, layout, half, rng):
    # x0 * 2**-k is exact in float64; the kernel rounds it once into float32
    # (often subnormal) and once into bfloat16: numpy does the same two steps.
    n = SEQ * HEADS * 2 * half
    x = (rng.uniform(1, 2, n) * rng.choice([-1, 1], n)).astype(np.float32).astype(BF16)
    x = x.reshape(SEQ, HEADS, 2 * half)
    k = rng.integers(118, 150, size=(SEQ, half))
    cos = np.ldexp(np.ones((SEQ, half)), -k).astype(np.float32)
    sin = np.zeros((SEQ, half), np.float32)
    for (inverse, _), y in run_every_way(isa, x, cos, sin, layout).items():
        y0, y1 = split_pairs(y, half, layout)
        x0, x1 = split_pairs(x, half, layout)
        for got, xs in ((y0, x0), (y1, x1)):
            f32 = (xs.astype(np.float64) * np.ldexp(1.0, -k)[:, None, :]).astype(np.float32)
            assert np.array_equal(u16(got), bf16_reference(f32)), (isa, layout, half, inverse)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", [5, 32, 64, 70])
def test_tiny_bfloat16_data_matches_scalar(isa, layout, half, rng):
    # Random data near the bottom of the range against random rows: results
    # fall below 2**-126, many cancel, some round up into the normal range.
    for scale_exp in (-140, -128, -120):
        n = SEQ * HEADS * 2 * half
        x = (rng.standard_normal(n) * 2.0**scale_exp).astype(np.float32).astype(BF16)
        x = x.reshape(SEQ, HEADS, 2 * half)
        angles = rng.uniform(-np.pi, np.pi, (SEQ, half))
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        run_every_way(isa, x, cos, sin, layout)
        # and normal data against rows with subnormal entries
        x = rng.standard_normal((SEQ, HEADS, 2 * half)).astype(np.float32).astype(BF16)
        tiny = (rng.standard_normal((SEQ, half)) * 2.0**-135).astype(np.float32)
        run_every_way(isa, x, tiny, tiny[::-1].copy(), layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", [16, 64])
def test_bfloat16_nan_rows_and_nan_data_match_scalar(isa, layout, half, rng):
    # NaN rows whose low payload bits are set (a caller's table): the scalar
    # rounding carries some of them into the sign or past it (0x7FFFFFFF ->
    # 0x8000, 0xFFFFFFFF -> 0x0000). Only cos holds NaNs, so both pair
    # results propagate that one NaN (quieted) in scalar and SIMD code alike.
    nan_bits = [0x7FC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFFC0FFFF, 0x7FFF8000]
    x = unit_pairs(BF16, half, layout)
    cos = rows_from(f32_from_bits(nan_bits + [0x3F800000]), half)
    sin = rows_from(f32_from_bits([0x3F000000, 0xBF400000]), half)  # no zero result: no fix-up
    for (inverse, _), y in run_every_way(isa, x, cos, sin, layout).items():
        y0, y1 = split_pairs(y, half, layout)
        carried = np.isin(cos.view(np.uint32), [0x7FFFFFFF, 0xFFFFFFFF, 0x7FFF8000])[:, None, :]
        assert not np.isnan(y0.astype(np.float32)[np.broadcast_to(carried, y0.shape)]).any()
    # NaN and infinite data (signalling NaNs too) make quiet NaNs whose low
    # bits are zero.
    specials = np.array([0x7FC0, 0xFFC0, 0x7F81, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x3F80], np.uint16)
    x = rng.choice(specials, size=(SEQ, HEADS, 2 * half)).view(BF16)
    angles = rng.uniform(-np.pi, np.pi, (SEQ, half))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    for (inverse, _), y in run_every_way(isa, x, cos, sin, layout).items():
        wide = rotate(x.astype(np.float32), cos, sin, layout, inverse)
        assert np.array_equal(np.isnan(y.astype(np.float32)), np.isnan(wide))


# ---- float16 ------------------------------------------------------------------------

def f16_edge_values(rng):
    """float32 values whose float16 rounding is delicate: subnormal ties, the
    normal boundary, overflow, both signs."""
    sub = 2.0**-24
    fixed = [0.0, sub / 2, sub / 2 * 1.0000001, sub, 1.5 * sub, 2.5 * sub, 3.5 * sub,
             1023.5 * sub, 1023.75 * sub, 2.0**-14, 2.0**-14 * (1 + 2.0**-11),
             1 + 2.0**-11, 1 + 3 * 2.0**-11, 65504.0, 65519.0, 65519.99, 65520.0, 1e30, np.inf]
    rand_sub = rng.uniform(0, 2.0**-14, 300)
    rand_ties = (rng.integers(0, 1024, 100) + 0.5) * sub
    v = np.concatenate([np.array(fixed), rand_sub, rand_ties]).astype(np.float32)
    return np.concatenate([v, -v])


def f16_reference(values):
    with np.errstate(over="ignore"):  # beyond 65520: infinity, on purpose
        return u16(values.astype(F16))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", HALVES)
def test_float16_stores_float32_results_at_the_edges(isa, layout, half, rng):
    values = rng.permutation(f16_edge_values(rng))
    x = unit_pairs(F16, half, layout)
    cos, sin = rows_from(values, half), rows_from(np.roll(values, 11), half)
    for (inverse, _), y in run_every_way(isa, x, cos, sin, layout).items():
        for got, f32 in zip(split_pairs(y, half, layout), unit_results(cos, sin, inverse)):
            assert_stored(got, f32, f16_reference)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("half", [7, 64])
def test_float16_nan_and_subnormal_data_match_scalar(isa, layout, half, rng):
    specials = np.array([0x7E00, 0xFE00, 0x7C01, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x3C00, 0x7BFF],
                        np.uint16)
    x = rng.choice(specials, size=(SEQ, HEADS, 2 * half)).view(F16)
    angles = rng.uniform(-np.pi, np.pi, (SEQ, half))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    run_every_way(isa, x, cos, sin, layout)
