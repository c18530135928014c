"""The C kernels (every ISA) against the standard-library reference.

Inputs are float32; the reference rotates their exact values in double
precision with exactly reduced angles, so the only error left is the
kernel's, checked against the bound derived in tolerance.py.
"""
import numpy as np
import pytest

from pyrope import Rope, reference
from tolerance import WORST, assert_rotation_close, reference_rotation

LAYOUTS = ["interleaved", "split_half"]


def _record(isa, layout, rel):
    key = (isa, layout)
    WORST[key] = max(WORST.get(key, 0.0), rel)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", range(12))
def test_random_dims_bases_positions(isa, layout, case, rng):
    # Even dims 2..512, including every non-multiple of the SIMD width.
    head_dim = int(rng.integers(1, 257)) * 2
    rotary_dim = head_dim if case % 3 else int(rng.integers(1, head_dim // 2 + 1)) * 2
    base = float(10 ** rng.uniform(1, 7))
    rope = Rope(head_dim, layout=layout, base=base, rotary_dim=rotary_dim)
    n_seq, n_heads = 3, 2
    positions = rng.integers(0, 2**20 + 1, size=n_seq)
    x = (rng.standard_normal((n_seq, n_heads, head_dim)) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
    got = rope.apply(x, positions)
    want = reference_rotation(rope, x, positions)
    _record(isa, layout, assert_rotation_close(got, want, x, rotary_dim, layout))
    # The unrotated tail is copied bit for bit.
    assert np.array_equal(got[..., rotary_dim:].view(np.uint32), x[..., rotary_dim:].view(np.uint32))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("position", [0, 1, 2**24 - 1, 2**24 + 1, 2**30, 2**31 - 1, -1, -(2**31 - 1)])
def test_extreme_positions(isa, layout, position, rng):
    rope = Rope(64, layout=layout, base=500000.0)
    x = rng.standard_normal((1, 4, 64)).astype(np.float32)
    got = rope.apply(x, [position])
    want = reference_rotation(rope, x, [position])
    _record(isa, layout, assert_rotation_close(got, want, x, 64, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_small_dim_and_tail(isa, layout, rng):
    # Every rotary_dim 2..34 in head dims up to 40: all vector tails of 4 and 8 lanes.
    for head_dim in range(2, 41, 2):
        for rotary_dim in range(2, min(head_dim, 34) + 1, 2):
            rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
            x = rng.standard_normal((2, 1, head_dim)).astype(np.float32)
            pos = [7, 1000]
            got = rope.apply(x, pos)
            want = reference_rotation(rope, x, pos)
            _record(isa, layout, assert_rotation_close(got, want, x, rotary_dim, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inverse_matches_reference(isa, layout, rng):
    rope = Rope(24, layout=layout, base=1e6)
    x = rng.standard_normal((4, 3, 24)).astype(np.float32)
    pos = [5, 99, 123456, 2**31 - 1]
    got = rope.apply(x, pos, inverse=True)
    want = reference_rotation(rope, x, pos, inverse=True)
    assert_rotation_close(got, want, x, 24, layout)


def test_cos_sin_matches_reference(isa):
    rope = Rope(128, layout="split_half", base=1e7)
    positions = [0, 1, 3, 4095, 2**24 - 1, 2**24 + 1, 131071, 10**6, 2**31 - 1, -17]
    cos, sin = rope.cos_sin(positions)
    want_cos, want_sin = reference.cos_sin(positions, [float(w) for w in rope.inv_freq])
    for got, want in ((cos, np.array(want_cos)), (sin, np.array(want_sin))):
        ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got - want) <= ulp), np.max(np.abs(got - want) / ulp)


def test_every_isa_agrees_with_scalar_bit_for_bit(isa, rng):
    import pyrope
    for layout in LAYOUTS:
        for head_dim in (2, 6, 8, 14, 16, 18, 64, 80, 126, 128, 256):
            rope = Rope(head_dim, layout=layout, base=1e4, rotary_dim=head_dim - 2 * (head_dim > 8))
            x = rng.standard_normal((3, 5, head_dim)).astype(np.float32) * 100
            pos = rng.integers(-2**31 + 1, 2**31, size=3)
            got = (rope.apply(x, pos), rope.apply(x, pos, inverse=True))
            with pyrope.forced_isa("scalar"):
                spec = (rope.apply(x, pos), rope.apply(x, pos, inverse=True))
            for a, b in zip(got, spec):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (isa, layout, head_dim)
