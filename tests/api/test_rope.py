"""The Rope object: its resolved numbers and its immutability."""
import numpy as np
import pytest

from pyrope import Rope, reference


@pytest.mark.parametrize("dim", [2, 8, 64, 128, 130, 512])
@pytest.mark.parametrize("base", [10.0, 1e4, 5e5, 1e6, 1e7])
def test_inv_freq_matches_reference(dim, base):
    rope = Rope(dim, layout="split_half", base=base)
    want = np.array(reference.pair_frequencies(dim, base))  # correctly rounded
    assert rope.inv_freq.dtype == np.float64 and rope.inv_freq.shape == (dim // 2,)
    ulps = np.abs(rope.inv_freq - want) / np.spacing(want)
    assert np.max(ulps) <= 8, np.max(ulps)


def test_partial_rotary_dim_uses_its_own_exponent():
    rope = Rope(64, layout="interleaved", rotary_dim=16, base=1e4)
    want = np.array(reference.pair_frequencies(16, 1e4))
    np.testing.assert_allclose(rope.inv_freq, want, rtol=1e-15)
    assert (rope.head_dim, rope.rotary_dim, rope.layout) == (64, 16, "interleaved")


def test_seed_frequency_table():
    # d=8, b=10000: omega = 1, 0.1, 0.01, 0.001 (the second seed's table).
    np.testing.assert_allclose(Rope(8, layout="split_half").inv_freq, [1, 0.1, 0.01, 0.001], rtol=1e-15)


def test_rope_is_immutable():
    rope = Rope(8, layout="split_half")
    with pytest.raises(ValueError):
        rope.inv_freq[0] = 2.0
    with pytest.raises(AttributeError):
        rope.layout = "interleaved"
    with pytest.raises(AttributeError):
        rope.something_new = 1
    assert rope.attention_factor == 1.0
    assert "split_half" in repr(rope) and "head_dim=8" in repr(rope)
