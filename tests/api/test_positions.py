"""Packed (varlen) positions and the three partial-rotary conventions,
against per-sequence calls and an independent float64 numpy rotation."""
import numpy as np
import pytest

import pyrope
from pyrope.positions import (PartialRotary, apply_varlen, proportional_inv_freq,
                              sequence_ids, varlen_positions)

EPS32 = 2.0**-23


def np_rotate(x, positions, pairs, freqs):
    """float64 rotation of coordinate pairs ``pairs[i] = (a, b)`` by ``positions * freqs[i]``."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    pos = np.asarray(positions, dtype=np.float64).reshape(-1, *([1] * (x.ndim - 2)))
    for (a, b), w in zip(pairs, freqs):
        ang = pos * w
        c, s = np.cos(ang), np.sin(ang)
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., a] * s + x[..., b] * c
    return out


def assert_close32(got, want, x):
    atol = 8 * EPS32 * float(np.max(np.abs(x)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=atol)


def test_varlen_positions_restart_and_offsets():
    cu = np.array([0, 3, 3, 7, 8])
    assert varlen_positions(cu).tolist() == [0, 1, 2, 0, 1, 2, 3, 0]
    assert varlen_positions(cu, offsets=[10, 5, 100, 7]).tolist() == [10, 11, 12, 100, 101, 102, 103, 7]
    assert sequence_ids(cu).tolist() == [0, 0, 0, 2, 2, 2, 2, 3]
    assert varlen_positions([0]).size == 0


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("with_offsets", [False, True])
def test_apply_varlen_equals_per_sequence_calls(rng, layout, with_offsets):
    rope = pyrope.Rope(32, layout=layout, rotary_dim=24)
    cu = np.array([0, 5, 6, 6, 19, 40])
    offsets = np.array([0, 4096, 3, 17, 2**31 - 30]) if with_offsets else None
    x = rng.standard_normal((40, 3, 32)).astype(np.float32)
    before = x.copy()
    got = apply_varlen(rope, x, cu, offsets)
    np.testing.assert_array_equal(x, before)  # out of place leaves x alone
    for s in range(len(cu) - 1):
        seg = x[cu[s]:cu[s + 1]]
        want = rope.apply(seg, offset=0 if offsets is None else int(offsets[s]))
        # same positions, same kernel: identical bits
        np.testing.assert_array_equal(got[cu[s]:cu[s + 1]].view(np.uint32), want.view(np.uint32))
    inplace = x.copy()
    assert apply_varlen(rope, inplace, cu, offsets, out=inplace) is inplace
    np.testing.assert_array_equal(inplace.view(np.uint32), got.view(np.uint32))
    back = apply_varlen(rope, got, cu, offsets, inverse=True)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-5)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: varlen_positions([1, 3]), ValueError, "must start at 0"),
    (lambda: varlen_positions([0, 3, 2]), ValueError, "non-decreasing"),
    (lambda: varlen_positions([[0, 3]]), ValueError, "1-D"),
    (lambda: varlen_positions([0.0, 3.0]), TypeError, "cu_seqlens must be an integer array"),
    (lambda: varlen_positions([0, 3], offsets=[1, 2]), ValueError, "offsets must have shape"),
    (lambda: varlen_positions([0, 3], offsets=[2**31 - 2]), ValueError, "offsets\\[0\\] \\+ length - 1"),
    (lambda: apply_varlen(pyrope.Rope(8, layout="split_half"), np.zeros((4, 1, 8), np.float32), [0, 3]),
     ValueError, "cu_seqlens\\[-1\\]=3"),
    (lambda: apply_varlen(pyrope.Rope(8, layout="split_half"), [[[0.0] * 8]], [0, 1]), TypeError,
     "x must be a numpy.ndarray"),
    (lambda: apply_varlen("rope", np.zeros((3, 1, 8), np.float32), [0, 3]), TypeError, "rope must be"),
])
def test_varlen_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def convention_pairs(convention, layout, head_dim, r, base, off=0):
    """(pairs, freqs) straight from each convention's definition."""
    if convention == "prefix":
        n, span, exp_over = r // 2, r, r
    elif convention == "proportional":
        n, span, exp_over = head_dim // 2, head_dim, head_dim
    else:
        n, span, exp_over = r // 2, r, r
    if layout == "interleaved":
        pairs = [(off + 2 * i, off + 2 * i + 1) for i in range(n)]
    else:
        pairs = [(off + i, off + i + span // 2) for i in range(n)]
    freqs = [base ** (-2.0 * i / exp_over) if i < r // 2 else 0.0 for i in range(n)]
    return pairs, freqs


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("convention, off", [("prefix", 0), ("proportional", 0), ("offset", 0), ("offset", 6)])
def test_partial_conventions_match_their_definition(rng, layout, convention, off):
    head_dim, r, base = 32, 16, 10000.0
    pr = PartialRotary(head_dim, r, convention=convention, layout=layout, base=base, dim_offset=off)
    x = rng.standard_normal((2, 7, 3, head_dim)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 500, 70000, 2**20], [5, 9, 13, 17, 21, 25, 29]])
    got = pr.apply(x, positions)
    pairs, freqs = convention_pairs(convention, layout, head_dim, r, base, off)
    want = np.stack([np_rotate(x[b], positions[b], pairs, freqs) for b in range(2)])
    assert_close32(got, want, x)
    untouched = sorted(set(range(head_dim)) - {c for p, w in zip(pairs, freqs) if w for c in p})
    np.testing.assert_array_equal(got[..., untouched], x[..., untouched])
    out = np.full_like(x, np.nan)
    assert pr.apply(x, positions, out=out) is out
    np.testing.assert_array_equal(out, got)


def test_conventions_really_differ(rng):
    """Same head_dim and rotary share, three different functions: mixing them up is visible
    (``offset`` at dim_offset 0 is ``prefix`` by definition, so take a real offset)."""
    x = rng.standard_normal((4, 1, 32)).astype(np.float32)
    outs = [PartialRotary(32, 16, convention=c, layout="split_half", dim_offset=o).apply(x, offset=3)
            for c, o in (("prefix", 0), ("proportional", 0), ("offset", 8))]
    for i in range(3):
        for j in range(i + 1, 3):
            assert np.max(np.abs(outs[i] - outs[j])) > 0.1


def test_proportional_frequencies():
    inv = proportional_inv_freq(16, 8, 10000.0)
    want = [10000.0 ** (-2 * i / 16) for i in range(4)] + [0.0] * 4
    np.testing.assert_allclose(inv, want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(convention="suffix", layout="split_half"), "convention must be one of"),
    (dict(convention="prefix", layout="split_half", dim_offset=2), "only for convention='offset'"),
    (dict(convention="offset", layout="split_half", dim_offset=20), "dim_offset \\+ rotary_dim"),
])
def test_partial_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PartialRotary(32, 16, **kwargs)


def test_offset_convention_checks_before_writing(rng):
    pr = PartialRotary(16, 8, convention="offset", layout="interleaved", dim_offset=4)
    x = rng.standard_normal((3, 1, 16)).astype(np.float32)
    out = np.zeros_like(x)
    with pytest.raises(ValueError, match="positions"):
        pr.apply(x, positions=[0, 1], out=out)
    assert not out.any()
    with pytest.raises(TypeError, match="out must be an ndarray of x's dtype float32"):
        pr.apply(x, positions=[0, 1, 2], out=np.zeros((3, 1, 16)))
    with pytest.raises(ValueError, match="out must have the shape of x"):
        pr.apply(x, positions=[0, 1, 2], out=np.zeros((3, 2, 16), np.float32))
    with pytest.raises(TypeError, match="x must be a numpy.ndarray"):
        pr.apply([[0.0] * 16], positions=[0])
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pr.apply(x, positions=[0, 1, 2], out=ro)


@pytest.mark.parametrize("head_dim, r", [(32, 16), (64, 16), (16, 16)])
def test_proportional_agrees_with_the_scaling_rule(head_dim, r):
    """Two independent writings of HF v5 'proportional': the convention helper and pyrope.scaling."""
    rule = pyrope.Rope(head_dim, layout="split_half", base=10000.0,
                       scaling=pyrope.Proportional(partial_rotary_factor=r / head_dim))
    pr = PartialRotary(head_dim, r, convention="proportional", layout="split_half", base=10000.0)
    np.testing.assert_allclose(pr.rope.inv_freq, rule.inv_freq, rtol=1e-15, atol=0)
