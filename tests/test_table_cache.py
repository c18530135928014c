"""The table cache (pyrope/_table_cache.py): the window of cached cos/sin
rows, its bounds and growth, pickling, and the angles= choice of where
angles come from (cached rows, rows built for one call, on the fly): none
may change a single bit."""
import numpy as np
import pytest

from pyrope import Rope
from pyrope._table_cache import TableCache

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    return np.ascontiguousarray(a).view(UINT[a.dtype.itemsize])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_angles_sources_are_bit_identical(isa, dtype, layout, rng):
    rope = Rope(48, layout=layout, base=5e5, rotary_dim=40)
    x = rng.standard_normal((2, 9, 3, 48)).astype(dtype)
    for kwargs in ({"offset": 123456}, {"positions": rng.integers(-2**31 + 1, 2**31, size=(2, 9))},
                   {"positions": np.arange(9) * 1000}):
        got = [rope.apply(x, angles=a, **kwargs) for a in ("auto", "table", "on_the_fly")]
        assert np.array_equal(bits(got[0]), bits(got[1])) and np.array_equal(bits(got[0]), bits(got[2]))
        qk = [rope.apply_qk(x, x[:, :, :1], angles=a, **kwargs) for a in ("auto", "table", "on_the_fly")]
        for a, b in zip(qk[0] + qk[1], qk[2] + qk[2]):
            assert np.array_equal(bits(a), bits(b))


def test_angles_must_be_known():
    rope = Rope(8, layout="split_half")
    with pytest.raises(ValueError, match="angles must be one of 'auto', 'table', 'on_the_fly', got 'fast'"):
        rope.apply(np.ones((1, 1, 8), np.float32), angles="fast")


def test_wide_heads_never_go_on_the_fly(rng):
    # rotary_dim/2 = 550 exceeds the kernel's on-the-fly row: auto builds rows instead.
    rope = Rope(1100, layout="split_half")
    x = rng.standard_normal((2, 1, 1100)).astype(np.float32)
    pos = [0, 2**31 - 1]  # wider than the cache: no cached window
    got = rope.apply(x, pos)
    for s in range(2):
        assert np.array_equal(bits(got[s]), bits(rope.apply(x[s:s + 1], pos[s:s + 1], angles="table")[0]))
    with pytest.raises(ValueError, match="angles='on_the_fly' needs rotary_dim <= 1024, got rotary_dim=1100"):
        rope.apply(x, pos, angles="on_the_fly")


def test_decode_steps_equal_one_prefill(rng):
    # The cache grows step by step; every row must equal the one a prefill builds.
    rope = Rope(64, layout="split_half")
    x = rng.standard_normal((1, 300, 4, 64)).astype(np.float32)
    steps = np.concatenate([rope.apply(x[:, s:s + 1], offset=s) for s in range(300)], axis=1)
    fresh = Rope(64, layout="split_half").apply(x, angles="on_the_fly")
    assert np.array_equal(bits(steps), bits(fresh))
    window = rope._tables.window
    assert window[0] <= 0 and window[1] >= 300 and window[1] - window[0] <= 1024  # doubled, not per step


def test_cache_is_bounded_and_wide_spans_go_on_the_fly(rng, monkeypatch):
    rope = Rope(16, layout="interleaved")
    monkeypatch.setattr(rope._tables, "max_rows", 100)
    x = rng.standard_normal((1, 150, 2, 16)).astype(np.float32)
    wide = rope.apply(x, offset=1000)                     # 150 rows > bound: on the fly
    assert rope._tables.window is None
    assert np.array_equal(bits(wide), bits(rope.apply(x, offset=1000, angles="table")))
    for start in (0, 50, 10**6, 2**31 - 1 - 80):          # windows move, never exceed the bound
        rope.apply(x[:, :80], offset=start)
        w = rope._tables.window
        assert w[0] <= start and start + 80 <= w[1] and w[1] - w[0] <= 100
        assert w[1] - 1 <= 2**31 - 1


def test_cache_window_math_at_the_edges():
    cache = TableCache(np.array([1.0, 0.5]), 1.0)
    cache.max_rows = 64
    w = cache.lookup(2**31 - 10, 2**31)
    assert w[1] == 2**31 and w[0] <= 2**31 - 10 and w[2].shape == (w[1] - w[0], 2)
    w = cache.lookup(-(2**31 - 1), -(2**31 - 1) + 5)
    assert w[0] == -(2**31 - 1)
    assert cache.lookup(0, 65) is None


def test_rope_with_cached_rows_pickles_and_copies(rng):
    import copy
    import pickle
    rope = Rope(16, layout="interleaved", rotary_dim=12)
    x = rng.standard_normal((1, 5, 2, 16)).astype(np.float32)
    want = rope.apply(x, offset=9)  # fills the cache
    for clone in (pickle.loads(pickle.dumps(rope)), copy.deepcopy(rope), copy.copy(rope)):
        assert clone.layout == "interleaved" and clone.rotary_dim == 12
        assert np.array_equal(bits(clone.apply(x, offset=9)), bits(want))
