"""Threads, the table cache and the angles= choice: none may change a single bit."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pyrope
from pyrope import Rope, _kernel
from pyrope._table_cache import TableCache

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    return np.ascontiguousarray(a).view(UINT[a.dtype.itemsize])


@pytest.fixture
def threads():
    """Restore the thread count after the test."""
    before = pyrope.get_num_threads()
    yield
    pyrope.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_thread_counts_are_bit_identical(isa, threads, dtype, layout, rng):
    # Large enough (>= 1 MiB of traffic per thread, even for 16-bit types) that
    # 2..4 threads really split the call; 4 * 509 tokens do not split evenly.
    rope = Rope(64, layout=layout, rotary_dim=56)
    x = rng.standard_normal((4, 509, 8, 64)).astype(dtype)
    k = rng.standard_normal((4, 509, 2, 64)).astype(dtype)
    pos = rng.integers(0, 5000, size=(4, 509))
    results = []
    for n in (1, 2, 3, 4):
        pyrope.set_num_threads(n)
        inplace = x.copy()
        rope.apply(inplace, offset=11, out=inplace)
        results.append([rope.apply(x, pos), rope.apply(x, pos, angles="on_the_fly"),
                        inplace, *rope.apply_qk(x, k, offset=3)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(bits(a), bits(b))


def test_set_num_threads_checks_its_argument(threads):
    pyrope.set_num_threads(3)
    assert pyrope.get_num_threads() == 3
    for bad, exc in ((0, ValueError), (65, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="n must be"):
            pyrope.set_num_threads(bad)
    assert pyrope.get_num_threads() == 3


def test_num_threads_from_environment():
    code = "import pyrope; print(pyrope.get_num_threads())"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYROPE_NUM_THREADS="3", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr
    env["PYROPE_NUM_THREADS"] = "lots"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode != 0 and "PYROPE_NUM_THREADS" in out.stderr


@pytest.mark.parametrize("n_threads", [1, 2, 4])
def test_bandwidth_pass_reads_and_writes_every_byte(isa, n_threads, rng):
    for n in (0, 1, 3, 4, 129, 3 << 20):
        a = rng.integers(0, 256, size=n, dtype=np.uint8)
        keep = a.copy()
        _kernel.bandwidth_pass(a, 0, n_threads)
        assert np.array_equal(a, keep)
        _kernel.bandwidth_pass(a, 0xA5C30F81, n_threads)
        mask = np.resize(np.array([0x81, 0x0F, 0xC3, 0xA5], np.uint8), n)
        assert np.array_equal(a, keep ^ mask)


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


def test_concurrent_calls_from_python_threads(rng):
    rope = Rope(32, layout="split_half")
    xs = [rng.standard_normal((1, 64, 4, 32)).astype(np.float32) for _ in range(8)]
    offsets = [0, 5000, 64, 100000, 7, 2**30, 128, 3]
    want = [Rope(32, layout="split_half").apply(x, offset=o, angles="on_the_fly") for x, o in zip(xs, offsets)]
    got = [None] * 8

    def work(i):
        for _ in range(20):
            got[i] = rope.apply(xs[i], offset=offsets[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for a, b in zip(got, want):
        assert np.array_equal(bits(a), bits(b))


def test_works_without_ml_dtypes():
    # ml_dtypes is an extra: without it pyrope imports and rotates the other dtypes.
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, pyrope\n"
            "r = pyrope.Rope(8, layout='split_half')\n"
            "y = r.apply(np.ones((2, 1, 8), np.float16), offset=3)\n"
            "assert y.dtype == np.float16 and np.isfinite(y).all()\n"
            "try:\n"
            "    r.apply(np.ones((2, 1, 8), np.int8))\n"
            "except TypeError as e:\n"
            "    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert "bfloat16 needs the ml_dtypes package" in out.stdout


def test_rope_with_cached_rows_pickles_and_copies(rng):
    import copy
    import pickle
    rope = Rope(16, layout="interleaved", rotary_dim=12)
    x = rng.standard_normal((1, 5, 2, 16)).astype(np.float32)
    want = rope.apply(x, offset=9)  # fills the cache
    for clone in (pickle.loads(pickle.dumps(rope)), copy.deepcopy(rope), copy.copy(rope)):
        assert clone.layout == "interleaved" and clone.rotary_dim == 12
        assert np.array_equal(bits(clone.apply(x, offset=9)), bits(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_fast_path_equals_general_path(isa, dtype, rng):
    # Contiguous arrays with offset= take the per-shape fast path once rows are
    # cached; the same data through a strided view takes the general path.
    rope = Rope(32, layout="split_half", rotary_dim=24)
    for seq_axis, shape in ((-3, (2, 5, 3, 32)), (-2, (2, 3, 5, 32))):
        q = rng.standard_normal(shape).astype(dtype)
        k_shape = (2, 5, 1, 32) if seq_axis == -3 else (2, 1, 5, 32)   # one k head
        k = rng.standard_normal(k_shape).astype(dtype)
        rope.apply(q, offset=40, seq_axis=seq_axis)          # fills the cache
        slow_q = rope.apply(np.asfortranarray(q), offset=40, seq_axis=seq_axis)
        slow_k = rope.apply(np.asfortranarray(k), offset=40, seq_axis=seq_axis)
        assert np.array_equal(bits(rope.apply(q, offset=40, seq_axis=seq_axis)), bits(slow_q))
        fq, fk = rope.apply_qk(q, k, offset=40, seq_axis=seq_axis)
        assert np.array_equal(bits(fq), bits(slow_q)) and np.array_equal(bits(fk), bits(slow_k))
        q2, k2 = q.copy(), k.copy()
        rope.apply_qk(q2, k2, offset=40, seq_axis=seq_axis, out=(q2, k2))
        assert np.array_equal(bits(q2), bits(slow_q)) and np.array_equal(bits(k2), bits(slow_k))
        back = rope.apply(fq, offset=40, seq_axis=seq_axis, inverse=True)
        assert np.array_equal(bits(back), bits(rope.apply(np.asfortranarray(fq), offset=40,
                                                          seq_axis=seq_axis, inverse=True)))


def test_pool_survives_fork():
    # A child forked after the pool started has no workers: it must start its
    # own (or run alone), never wait for the parent's.
    code = ("import os, numpy as np, pyrope\n"
            "pyrope.set_num_threads(2)\n"
            "r = pyrope.Rope(64, layout='split_half')\n"
            "x = np.ones((4, 512, 8, 64), np.float32)\n"
            "want = r.apply(x, offset=5)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    ok = np.array_equal(r.apply(x, offset=5), want)\n"
            "    os._exit(0 if ok else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print('child', os.waitstatus_to_exitcode(status))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=root, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "child 0", (out.stdout, out.stderr)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_fast_path_with_explicit_positions(isa, dtype, rng):
    # int64 C-contiguous positions take the fast path; int32 positions the general one.
    rope = Rope(32, layout="interleaved")
    x = rng.standard_normal((4, 1, 3, 32)).astype(dtype)          # ragged decode: one token each
    k = rng.standard_normal((4, 1, 1, 32)).astype(dtype)
    pos = np.array([[7], [300], [5000], [12]], dtype=np.int64)
    first = rope.apply(x, pos)                                     # general path, fills the cache
    assert np.array_equal(bits(rope.apply(x, pos)), bits(first))  # fast path
    assert np.array_equal(bits(first), bits(rope.apply(x, pos.astype(np.int32))))
    fq, fk = rope.apply_qk(x, k, pos)
    assert np.array_equal(bits(fq), bits(first))
    assert np.array_equal(bits(fk), bits(rope.apply(k, pos.astype(np.int32))))
    seq_pos = np.arange(3, dtype=np.int64) + 40                    # shape [seq], shared by the batch
    y = rng.standard_normal((2, 3, 2, 32)).astype(dtype)
    want = rope.apply(y, seq_pos.astype(np.int32))
    assert np.array_equal(bits(rope.apply(y, seq_pos)), bits(want))
    # Outside the cached rows: the fast path steps aside, the cache grows, the result is right.
    far = np.array([[10**9], [10**9 + 1], [3], [4]], dtype=np.int64)
    got = rope.apply(x, far)
    assert np.array_equal(bits(got), bits(rope.apply(x, far, angles="on_the_fly")))
    # Bad positions still raise, and nothing is written.
    keep = x.copy()
    with pytest.raises(ValueError, match="positions must lie within"):
        rope.apply(x, np.array([[0], [2**31], [0], [0]], dtype=np.int64), out=x)
    assert np.array_equal(bits(x), bits(keep))
