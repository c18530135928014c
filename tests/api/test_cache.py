"""Re-rotation and frequency-rule conversion of cached keys, against the
standard-library reference rotating the raw keys directly at the target."""
import numpy as np
import pytest

import pyrope
from pyrope import reference
from pyrope._ops.explicit import explicit_rope
from tolerance import EPS32, pair_magnitudes


def ref_rotate(x, positions, inv_freq, layout, factor=1.0):
    """Reference rotation of x [seq, heads, dim] (float64 result), token s at positions[s]."""
    out = np.empty(x.shape, dtype=np.float64)
    for s in range(x.shape[0]):
        for h in range(x.shape[1]):
            out[s, h] = reference.rotate_with_inv_freq(
                [float(v) for v in x[s, h]], int(positions[s]), [float(w) for w in inv_freq],
                layout=layout, attention_factor=factor)
    return out


def assert_two_pass_close(got, want, raw, rotary_dim, layout, factor=1.0):
    """Two float32 rotations in a row: at most twice the single-rotation bound."""
    bound = 8 * EPS32 * abs(factor) * pair_magnitudes(raw, rotary_dim, layout) + 1e-30
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= bound), f"max error/bound {np.max(err / bound):.3g}"


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("factor", [1.0, 1.25])
def test_rerotate_matches_direct_rotation_at_target(rng, layout, factor, isa):
    rope = explicit_rope(pyrope.Rope, 16, layout=layout, inv_freq=pyrope.Rope(16, layout=layout, rotary_dim=12).inv_freq,
                         attention_factor=factor)
    raw = rng.standard_normal((9, 2, 16)).astype(np.float32)
    src = np.array([0, 1, 2, 50, 51, 52, 4000, 2**30, 7])
    dst = np.array([0, 0, 1, 3, 4, 5, 9, 2**30 + 2**29, 2**31 - 1])
    cached = rope.apply(raw, positions=src)
    got = rope.rerotate(cached, src, dst)
    assert got is cached
    assert_two_pass_close(cached, ref_rotate(raw, dst, rope.inv_freq, layout, factor), raw, 12, layout, factor)


def test_rerotate_batched_heads_first_and_shift_keeps_scores(rng):
    """Shifting the whole context by T keeps every q.k score (relative positions)."""
    rope = pyrope.Rope(32, layout="split_half")
    raw_k = rng.standard_normal((2, 4, 10, 32)).astype(np.float32)   # [batch, heads, seq, dim]
    q = rng.standard_normal((2, 4, 1, 32)).astype(np.float32)
    pos = np.array([np.arange(10), np.arange(10) + 100])
    k = rope.apply(raw_k, positions=pos, seq_axis=-2)
    score_before = np.einsum("bhqd,bhkd->bhk", rope.apply(q, positions=pos[:, -1:] + 1, seq_axis=-2),
                             k.astype(np.float64))
    shift = 12345
    rope.rerotate(k, pos, pos + shift, seq_axis=-2)
    score_after = np.einsum("bhqd,bhkd->bhk", rope.apply(q, positions=pos[:, -1:] + 1 + shift, seq_axis=-2),
                            k.astype(np.float64))
    scale = np.linalg.norm(q) * np.max(np.linalg.norm(raw_k, axis=-1))
    np.testing.assert_allclose(score_after, score_before, rtol=0, atol=64 * EPS32 * scale)


@pytest.mark.parametrize("call, exc, match", [
    (lambda r, k: r.rerotate(k, [0, 1, 2], [0, 1]), ValueError, "must broadcast"),
    (lambda r, k: r.rerotate(k, [0, 1, 2], [0, 1, 2**31]), ValueError, "to_positions must lie within"),
    (lambda r, k: r.rerotate(k, [-2**31 + 1, 0, 0], [2**31 - 1, 0, 0]), ValueError, "to_positions - from_positions"),
    (lambda r, k: r.rerotate(k, [0, 1], [1, 2]), ValueError, "positions must have shape"),
    (lambda r, k: r.rerotate(k, [0.0, 1, 2], [0, 1, 2]), TypeError, "from_positions must be an integer"),
    (lambda r, k: r.rerotate(k.astype(np.int32), [0, 1, 2], [0, 1, 2]), TypeError, "dtype float32"),
    (lambda r, k: r.convert_keys(k, [0, 1, 2], pyrope.Rope(8, layout="interleaved")), ValueError, "to_rope.layout"),
    (lambda r, k: r.convert_keys(k, [0, 1, 2], pyrope.Rope(16, layout="split_half")), ValueError, "to_rope.head_dim"),
    (lambda r, k: r.convert_keys(k, [0, 1, 2], "rope"), TypeError, "to_rope must be"),
    (lambda r, k: r.convert_keys(k, [0, 1], pyrope.Rope(8, layout="split_half")), ValueError, "positions"),
])
def test_bad_input_leaves_keys_untouched(rng, call, exc, match):
    rope = pyrope.Rope(8, layout="split_half")
    k = rng.standard_normal((3, 2, 8)).astype(np.float32)
    before = k.copy()
    with pytest.raises(exc, match=match):
        call(rope, k)
    np.testing.assert_array_equal(k, before)


def test_rerotate_read_only():
    k = np.zeros((3, 1, 8), np.float32)
    k.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pyrope.Rope(8, layout="split_half").rerotate(k, [0, 1, 2], [1, 2, 3])


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("mode", ["new", "inplace", "out"])
def test_convert_keys_equals_rotation_under_new_rule(rng, layout, mode, isa):
    """Dynamic-NTK-style base growth plus a LongRoPE-style factor change."""
    old = pyrope.Rope(16, layout=layout, base=10000.0, rotary_dim=12)
    new = explicit_rope(pyrope.Rope, 16, layout=layout, attention_factor=1.2,
                        inv_freq=pyrope.Rope(16, layout=layout, base=80000.0).inv_freq)
    raw = rng.standard_normal((7, 3, 16)).astype(np.float32)
    positions = np.array([0, 1, 5, 300, 4096, 70000, 2**31 - 1])
    cached = old.apply(raw, positions=positions)
    before = cached.copy()
    if mode == "new":
        got = old.convert_keys(cached, positions, new)
        np.testing.assert_array_equal(cached, before)
    elif mode == "inplace":
        got = old.convert_keys(cached, positions, new, out=cached)
        assert got is cached
    else:
        out = np.empty_like(cached)
        got = old.convert_keys(cached, positions, new, out=out)
        assert got is out
        np.testing.assert_array_equal(cached, before)
    want = ref_rotate(raw, positions, new.inv_freq, layout, 1.2)
    assert_two_pass_close(got, want, raw, 16, layout, 1.2)


def test_convert_keys_from_scaled_rule_divides_the_old_factor(rng):
    old = explicit_rope(pyrope.Rope, 8, layout="split_half", inv_freq=[1.0, 0.1], attention_factor=1.5)
    new = pyrope.Rope(8, layout="split_half", rotary_dim=4)
    raw = rng.standard_normal((4, 1, 8)).astype(np.float32)
    positions = np.arange(4) * 1000
    got = old.convert_keys(old.apply(raw, positions=positions), positions, new)
    assert_two_pass_close(got, ref_rotate(raw, positions, new.inv_freq, "split_half"), raw, 4, "split_half", 1.5)
