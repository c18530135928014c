"""The table cache (pyrope/_table_cache.py): the window of cached cos/sin
rows, its bounds and growth, pickling, and the angles= choice of where
angles come from (cached rows, rows built for one call, on the fly): none
may change a single bit."""
import copy
import pickle
import threading

import numpy as np
import pytest

from pyrope import Rope, reference
from pyrope._engine.binding import ffi
from pyrope._engine.table_cache import MAX_TABLE_BYTES, MIN_ROWS, TableCache
from array_bits import bits

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


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
        want = rope.apply(x[:, :80], offset=start, angles="on_the_fly")
        for _ in range(2):   # a move waits until the calls it serves have computed its rows on the fly
            assert np.array_equal(bits(rope.apply(x[:, :80], offset=start)), bits(want))
        w = rope._tables.window
        assert w[0] <= start and start + 80 <= w[1] and w[1] - w[0] <= 100
        assert w[1] - 1 <= 2**31 - 1


def test_cache_window_math_at_the_edges():
    cache = TableCache(np.array([1.0, 0.5]), 1.0)
    cache.max_rows = 64
    w = cache.lookup(2**31 - 10, 2**31)
    assert w[1] == 2**31 and w[0] <= 2**31 - 10 and w[2].shape == (w[1] - w[0], 2)
    assert cache.lookup(-(2**31 - 1), -(2**31 - 1) + 5) is None    # a move: not paid for yet
    w = cache.lookup(-(2**31 - 1), -(2**31 - 1) + 5, tokens=64)
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


# ---- the window, against the reference ---------------------------------------------------

FREQS = np.array([1.0, 0.0123, 3.3e-5])
MAX_POS = 2**31 - 1


def ulps(got, exact):
    """|got - exact| in float32 ulps of the exact value."""
    e = np.frexp(exact)[1]
    ulp = np.ldexp(1.0, np.maximum(e - 24, -149))
    return np.abs(np.asarray(got, dtype=np.float64) - exact) / ulp


def assert_window_exact(w, inv_freq, scale):
    """Every row of window ``w`` is the correctly rounded scale * cos/sin of
    its position (reference: exact product, float64), and the template C
    reads points at these rows."""
    assert w.cos.shape == w.sin.shape == (w.stop - w.start, len(inv_freq))
    assert w.cos.dtype == w.sin.dtype == np.float32 and w.cos.flags.c_contiguous
    assert not w.cos.flags.writeable and not w.sin.flags.writeable
    c, s = reference.cos_sin(range(w.start, w.stop), [float(f) for f in inv_freq])
    assert ulps(w.cos, scale * np.array(c)).max() <= 0.5 + 1e-6
    assert ulps(w.sin, scale * np.array(s)).max() <= 0.5 + 1e-6
    a = w.angles
    assert (a.table_start, a.table_rows) == (w.start, w.stop - w.start)
    assert int(ffi.cast("uintptr_t", a.cos_table)) == w.cos.__array_interface__["data"][0]
    assert int(ffi.cast("uintptr_t", a.sin_table)) == w.sin.__array_interface__["data"][0]


@pytest.mark.parametrize("scale", [1.0, 0.75])
def test_windows_hold_the_reference_rows_as_they_grow_and_move(isa, scale):
    cache = TableCache(FREQS, scale)
    cache.max_rows = 256
    spans = [(0, 5), (60, 70), (-30, -20), (100, 200), (-40, 210), (1000, 1010), (990, 1000), (1250, 1300),
             (MAX_POS - 20, MAX_POS + 1), (MAX_POS - 300, MAX_POS - 290), (-MAX_POS, -MAX_POS + 3),
             (-5, 251)]
    previous = None
    for lo, hi in spans:
        kept = None if previous is None else (previous.cos.copy(), previous.sin.copy())
        w = cache.lookup(lo, hi, tokens=cache.max_rows)   # a call that pays for any move at once
        assert w is cache.window and w.start <= lo and hi <= w.stop, (lo, hi, w.start, w.stop)
        assert w.stop - w.start <= cache.max_rows and -MAX_POS <= w.start and w.stop <= MAX_POS + 1
        assert_window_exact(w, FREQS, scale)
        if kept is not None:           # a replaced window is never written: callers may still hold it
            assert np.array_equal(previous.cos, kept[0]) and np.array_equal(previous.sin, kept[1])
        assert cache.lookup(lo, hi) is w and cache.lookup(w.start, w.stop) is w   # inside: no rebuild
        previous = w


def test_growth_at_least_doubles_and_refuses_wide_spans():
    cache = TableCache(FREQS, 1.0)
    cache.max_rows = 4096
    windows = []
    for p in range(3000):                                   # decode forwards, one token a step
        w = cache.lookup(p, p + 1)
        if not windows or w is not windows[-1]:
            windows.append(w)
    sizes = [w.stop - w.start for w in windows]
    assert sizes[0] == MIN_ROWS and len(windows) <= 8        # 64 * 2**6 > 3000: O(log n) rebuilds
    for a, b in zip(sizes, sizes[1:]):
        assert b >= min(2 * a, cache.max_rows)
    for w, nxt in zip(windows, windows[1:]):
        assert nxt.start == w.start                          # grown forwards, slack ahead
    back = TableCache(FREQS, 1.0)
    back.max_rows = 4096
    windows = []
    for p in range(0, -1500, -1):                            # and backwards
        w = back.lookup(p, p + 1)
        assert w.start <= p < w.stop
        if not windows or w is not windows[-1]:
            windows.append(w)
    assert len(windows) <= 7
    for w, nxt in zip(windows, windows[1:]):
        assert nxt.stop == w.stop and nxt.stop - nxt.start >= 2 * (w.stop - w.start)   # slack behind
    w = cache.window
    assert cache.lookup(0, cache.max_rows + 1) is None and cache.window is w
    # exactly the bound fits; a call of that many tokens pays for its move at once
    assert cache.lookup(10**6, 10**6 + cache.max_rows, tokens=cache.max_rows) is not None


@pytest.mark.parametrize("half", [1, 3, 64, 550, 1 << 20])
def test_the_bound_is_32_mib_of_rows(half):
    cache = TableCache(np.linspace(1.0, 1e-4, half), 1.0)
    rows = cache.max_rows
    assert MAX_TABLE_BYTES == 32 << 20
    if rows > MIN_ROWS:
        assert rows * half * 4 * 2 <= MAX_TABLE_BYTES < (rows + 1) * half * 4 * 2   # cos + sin, float32
    else:
        assert rows == MIN_ROWS and MIN_ROWS * half * 8 >= MAX_TABLE_BYTES


def test_a_rope_never_caches_more_than_the_bound(rng):
    rope = Rope(128, layout="split_half")
    bound = rope._tables.max_rows
    x = rng.standard_normal((1, 1, 1, 128)).astype(np.float32)
    for offset in (0, bound - 1, 3 * bound, bound // 2, 10**9):
        for _ in range(MIN_ROWS):   # moves wait for MIN_ROWS tokens computed on the fly
            rope.apply(x, offset=offset)
            w = rope._tables.window
            assert w.cos.nbytes + w.sin.nbytes <= MAX_TABLE_BYTES
        assert w.start <= offset < w.stop


def test_table_caches_pickle_and_copy_empty():
    cache = TableCache(FREQS, 0.75)
    cache.max_rows = 128
    w = cache.lookup(5, 9)
    for clone in (pickle.loads(pickle.dumps(cache)), copy.deepcopy(cache), copy.copy(cache)):
        assert clone.window is None and clone.max_rows == TableCache(FREQS, 0.75).max_rows
        got = clone.lookup(5, 9)
        assert got is not w and got.start <= 5 and 9 <= got.stop
        assert_window_exact(got, FREQS, 0.75)
    assert cache.window is w                                   # the original keeps its rows


def test_concurrent_lookups_all_get_covering_exact_windows(rng):
    cache = TableCache(FREQS, 1.0)
    cache.max_rows = 512
    c, s = reference.cos_sin(range(-600, 2600), [float(f) for f in FREQS])
    exact_c, exact_s = np.array(c), np.array(s)
    spans = [[(int(lo), int(lo) + int(n)) for lo, n in zip(rng.integers(-600, 2000, 60), rng.integers(1, 100, 60))]
             for _ in range(8)]
    failures = []
    start = threading.Barrier(8)

    def work(mine):
        start.wait()
        for lo, hi in mine:
            w = cache.lookup(lo, hi, tokens=512)   # moves at once, as often as the spans ask
            rows = slice(lo - w.start, hi - w.start)
            if not (w.start <= lo and hi <= w.stop and w.stop - w.start <= 512
                    and ulps(w.cos[rows], exact_c[lo + 600:hi + 600]).max() <= 0.5 + 1e-6
                    and ulps(w.sin[rows], exact_s[lo + 600:hi + 600]).max() <= 0.5 + 1e-6):
                failures.append((lo, hi, w.start, w.stop))

    ts = [threading.Thread(target=work, args=(mine,)) for mine in spans]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures


# ---- no thrash: calls alternating between distant ranges -------------------------------------

def count_rows_built(monkeypatch):
    """Rows the table cache builds from now on (every window is built by
    ``tables.cos_sin_range``), as a list of row counts."""
    from pyrope._engine import tables as _tables
    built, real = [], _tables.cos_sin_range

    def counting(start, n_pos, *args, **kwargs):
        built.append(n_pos)
        return real(start, n_pos, *args, **kwargs)
    monkeypatch.setattr(_tables, "cos_sin_range", counting)
    return built


@pytest.mark.parametrize("spans", [
    ([0, 40000], [100000, 140000]),        # two tokens each, spans that need a 32 MiB window
    ([0, 40000], [30000, 70000]),          # overlapping wide spans, together past the bound
    ([5], [10**6]),                        # one token each, far apart
    ([5, 6, 7, 8], [2**31 - 9, 2**31 - 8, 2**31 - 7, 2**31 - 6]),
])
def test_alternating_ranges_do_not_rebuild_a_table_per_call(rng, monkeypatch, spans):
    rope = Rope(128, layout="split_half")
    bound = rope._tables.max_rows   # 65536 rows of 64 pairs: 32 MiB
    n = len(spans[0])
    x = rng.standard_normal((n, 2, 128)).astype(np.float32)
    want = [rope.apply(x, p, angles="on_the_fly") for p in spans]
    built = count_rows_built(monkeypatch)
    calls = 400
    for i in range(calls):
        got = rope.apply(x, spans[i % 2])
        assert np.array_equal(bits(got), bits(want[i % 2]))
    # the first window, then at most as many rows as the calls computed on the fly
    assert built[0] <= bound and sum(built) - built[0] <= calls * n, (len(built), sum(built))


def test_a_decode_past_a_full_window_slides_it(rng, monkeypatch):
    rope = Rope(128, layout="split_half")
    bound = rope._tables.max_rows
    x = rng.standard_normal((1, 2, 128)).astype(np.float32)
    rope.apply(np.zeros((bound, 1, 128), np.float32), offset=0)   # a window at the bound: [0, bound)
    assert (rope._tables.window.start, rope._tables.window.stop) == (0, bound)
    built = count_rows_built(monkeypatch)
    for p in range(bound, bound + 200):                           # decode on past its end
        assert np.array_equal(bits(rope.apply(x, offset=p)), bits(rope.apply(x, offset=p, angles="on_the_fly")))
    w = rope._tables.window
    assert w.start <= bound + 199 < w.stop and sum(built) <= 4 * MIN_ROWS   # moved once, then grew
