"""The direct path (``_direct`` in pyrope/rope.py): arrays the kernel can
address as they are (any strides with a contiguous last axis), with cached
table rows, go through a memoised kernel call; every result must be the
general path's (``angles="table"`` forces it: the same rows), bit for bit."""
import threading

import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._engine import plan as _plan
from array_bits import bits
from tolerance import assert_rotation_close, reference_rotation

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_direct_path_equals_general_path(isa, dtype, rng):
    # Contiguous arrays with offset= take the memoised direct path once rows are
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


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_direct_path_with_explicit_positions(isa, dtype, rng):
    # int64 C-contiguous positions take the direct path; int32 positions the general one.
    rope = Rope(32, layout="interleaved")
    x = rng.standard_normal((4, 1, 3, 32)).astype(dtype)          # ragged decode: one token each
    k = rng.standard_normal((4, 1, 1, 32)).astype(dtype)
    pos = np.array([[7], [300], [5000], [12]], dtype=np.int64)
    first = rope.apply(x, pos)                                     # general path, fills the cache
    assert np.array_equal(bits(rope.apply(x, pos)), bits(first))  # direct path
    assert np.array_equal(bits(first), bits(rope.apply(x, pos.astype(np.int32))))
    fq, fk = rope.apply_qk(x, k, pos)
    assert np.array_equal(bits(fq), bits(first))
    assert np.array_equal(bits(fk), bits(rope.apply(k, pos.astype(np.int32))))
    seq_pos = np.arange(3, dtype=np.int64) + 40                    # shape [seq], shared by the batch
    y = rng.standard_normal((2, 3, 2, 32)).astype(dtype)
    want = rope.apply(y, seq_pos.astype(np.int32))
    assert np.array_equal(bits(rope.apply(y, seq_pos)), bits(want))
    # Outside the cached rows: the direct path steps aside, the cache grows, the result is right.
    far = np.array([[10**9], [10**9 + 1], [3], [4]], dtype=np.int64)
    got = rope.apply(x, far)
    assert np.array_equal(bits(got), bits(rope.apply(x, far, angles="on_the_fly")))
    # Bad positions still raise, and nothing is written.
    keep = x.copy()
    with pytest.raises(ValueError, match="positions must lie within"):
        rope.apply(x, np.array([[0], [2**31], [0], [0]], dtype=np.int64), out=x)
    assert np.array_equal(bits(x), bits(keep))


# ---- which path ran (the ``paths`` spy of tests/engine/conftest.py) -------------------

GENERAL = {"angles": "table"}   # forces the general path, with the same cached rows


def strided(a):
    """The same values in a non-contiguous (but kernel-friendly) view: the
    direct path takes it as it is, since its strides are in the memo key."""
    big = np.zeros(a.shape[:-1] + (a.shape[-1] + 2,), a.dtype)
    view = big[..., 1:-1]
    view[...] = a
    assert not view.flags.c_contiguous and view.flags.aligned
    return view


def token_positions(kind, batch, n_seq, value):
    """Per-token positions [*batch, seq] of a call: ``value`` is the offset or
    the positions array (shape [seq] or [*batch, seq])."""
    if kind == "offset":
        return np.broadcast_to(value + np.arange(n_seq), batch + (n_seq,))
    return np.broadcast_to(value, batch + (n_seq,))


def call_kwargs(kind, value):
    return {"offset": value} if kind == "offset" else {"positions": value}


# ---- the memo ------------------------------------------------------------------------

def test_a_repeated_call_is_a_memo_hit(paths, rng):
    rope = Rope(32, layout="split_half", rotary_dim=24)
    x = rng.standard_normal((2, 3, 5, 4, 32)).astype(np.float32)
    paths.general_path(rope.apply, x, offset=3)       # no rows cached yet: planned, then the general path
    assert paths.planned == 1 and len(_plan.CALLS) == 1
    paths.direct(rope.apply, x, offset=3)             # rows cached: a memo hit
    assert paths.planned == 1 and len(_plan.CALLS) == 1
    (call,) = _plan.CALLS.values()
    assert (call.n_batch, call.n_seq, call.n_heads) == (6, 5, (4,))
    for kwargs in ({"offset": 7}, {"positions": np.arange(5) + 4}, {"offset": 4}):
        paths.direct(rope.apply, x + 1, **kwargs)    # other data, same shape: a hit
    assert paths.planned == 1 and len(_plan.CALLS) == 1 and _plan.CALLS[next(iter(_plan.CALLS))] is call
    # in place, into another array, another shape, strides, the inverse, q+k and the
    # other seq_axis are other entries, each planned once
    k = rng.standard_normal((2, 3, 5, 1, 32)).astype(np.float32)
    y = x.copy()
    for _ in range(3):
        paths.direct(rope.apply, y, offset=3, out=y)
        paths.direct(rope.apply, x, offset=3, out=np.empty_like(x))
        paths.direct(rope.apply, x[:1].copy(), offset=3)
        paths.direct(rope.apply, strided(x), offset=3)
        paths.direct(rope.apply, x, offset=3, inverse=True)
        paths.direct(rope.apply_qk, x, k, offset=3)
        paths.direct(rope.apply, x, offset=3, seq_axis=-2)
    assert paths.planned == 8 and len(_plan.CALLS) == 8
    # a second rope with the same layout, rotary_dim and head_dim shares the plans
    other = Rope(32, layout="split_half", rotary_dim=24, base=500.0)
    other.apply(x, offset=3, **GENERAL)               # fills its rows
    paths.direct(other.apply, x, offset=3)
    assert paths.planned == 8


def test_every_call_is_memoised_under_direct_key(rng):
    # apply and apply_qk key their memo entries with direct_key, the one definition.
    rope = Rope(16, layout="interleaved")
    x = rng.standard_normal((2, 3, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 3, 1, 16)).astype(np.float32)
    cache = np.zeros((2, 9, 4, 16), np.float32)
    kc = np.zeros((2, 9, 1, 16), np.float32)
    rope.apply(x, offset=0, **GENERAL)
    cases = [((x,), (x,), lambda: rope.apply(x, offset=0, out=x)),
             ((x,), (None,), lambda: rope.apply(x, offset=0)),
             ((x,), (cache[:, 3:6],), lambda: rope.apply(x, offset=0, out=cache[:, 3:6])),
             ((x, k), (x, k), lambda: rope.apply_qk(x, k, offset=0, out=(x, k))),
             ((x, k), (None, None), lambda: rope.apply_qk(x, k, offset=0)),
             ((x, k), (x, kc[:, 2:5]), lambda: rope.apply_qk(x, k, offset=0, out=(x, kc[:, 2:5]))),
             ((x, k), (cache[:, :3], kc[:, 2:5]), lambda: rope.apply_qk(x, k, offset=0, out=(cache[:, :3], kc[:, 2:5])))]
    for arrays, outs, run in cases:
        _plan.CALLS.clear()
        run()
        marks = [m for a, o in zip(arrays, outs) for m in (a, _plan.out_mark(a, o))]
        key = _plan.direct_key(rope._plan_tag, -3, False, *marks)
        assert list(_plan.CALLS) == [key] and _plan.CALLS[key] is not None


def test_c_contiguous_arrays_share_a_plan_whatever_their_length_one_strides(paths, rng):
    # numpy gives an axis of length one any stride and still calls the array
    # C-contiguous; the kernel never steps along it, so the key holds the flag.
    rope = Rope(16, layout="split_half")
    x = rng.standard_normal((1, 3, 4, 16)).astype(np.float32)
    rope.apply(x, offset=5, **GENERAL)
    want = rope.apply(x, offset=5, **GENERAL)
    for batch_stride in (x.strides[0], 8, 3, -4096):
        odd = np.lib.stride_tricks.as_strided(x.copy(), x.shape, (batch_stride,) + x.strides[1:])
        assert odd.flags.c_contiguous
        got = paths.direct(rope.apply, odd, offset=5)
        assert np.array_equal(bits(got), bits(want))
        inplace = np.lib.stride_tricks.as_strided(x.copy(), x.shape, (batch_stride,) + x.strides[1:])
        assert paths.direct(rope.apply, inplace, offset=5, out=inplace) is inplace
        assert np.array_equal(bits(inplace), bits(want))
    assert paths.planned == 2   # a new result, in place


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
@pytest.mark.parametrize("kind", ["offset", "positions [seq]", "positions [*batch, seq]"])
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_direct_path_is_bit_identical_to_the_general_path(isa, paths, dtype, seq_axis, kind, layout, rng):
    rope = Rope(32, layout=layout, rotary_dim=24, base=2000.0)
    batch, n_seq = (2, 3), 5
    def shape(heads):
        return batch + ((n_seq, heads) if seq_axis == -3 else (heads, n_seq)) + (32,)
    q = rng.standard_normal(shape(3)).astype(dtype)
    k = rng.standard_normal(shape(1)).astype(dtype)
    if kind == "offset":
        value = 17
    elif kind == "positions [seq]":
        value = rng.integers(0, 60, size=n_seq)
    else:
        value = rng.integers(0, 60, size=batch + (n_seq,))
    kw = dict(call_kwargs(kind, value), seq_axis=seq_axis)
    paths.general_path(rope.apply, q, **kw, **GENERAL)     # fills the cache
    for inverse in (False, True):
        want = paths.general_path(rope.apply, q, inverse=inverse, **kw, **GENERAL)
        assert np.array_equal(bits(paths.direct(rope.apply, q, inverse=inverse, **kw)), bits(want))
        inplace = q.copy()
        assert paths.direct(rope.apply, inplace, inverse=inverse, out=inplace, **kw) is inplace
        assert np.array_equal(bits(inplace), bits(want))
        view = strided(q)                                  # strided, in place: direct too
        assert paths.direct(rope.apply, view, inverse=inverse, out=view, **kw) is view
        assert np.array_equal(bits(view), bits(want))
    want_q, want_k = paths.general_path(rope.apply_qk, q, k, **kw, **GENERAL)
    got_q, got_k = paths.direct(rope.apply_qk, q, k, **kw)
    assert np.array_equal(bits(got_q), bits(want_q)) and np.array_equal(bits(got_k), bits(want_k))
    q2, k2 = q.copy(), k.copy()
    got = paths.direct(rope.apply_qk, q2, k2, out=(q2, k2), **kw)
    assert got[0] is q2 and got[1] is k2
    assert np.array_equal(bits(q2), bits(want_q)) and np.array_equal(bits(k2), bits(want_k))
    # apply new, in place and strided in place, each with its inverse; apply_qk new and in place
    assert paths.planned == 8
    if np.dtype(dtype) == np.float32:  # and the values are the reference's
        pos = token_positions(kind, batch, n_seq, value)
        tok = got_q if seq_axis == -3 else np.swapaxes(got_q, -3, -2)
        src = q if seq_axis == -3 else np.swapaxes(q, -3, -2)
        for b in np.ndindex(batch):
            want = reference_rotation(rope, src[b], pos[b])
            assert_rotation_close(tok[b], want, src[b].astype(np.float64), 24, layout)


@pytest.mark.parametrize("kind", ["offset", "positions [seq]", "positions [*batch, seq]"])
def test_a_position_outside_the_cached_rows_falls_back_and_grows_the_cache(isa, paths, kind, rng):
    rope = Rope(16, layout="interleaved", rotary_dim=12)
    x = rng.standard_normal((3, 4, 2, 16)).astype(np.float32)
    paths.general_path(rope.apply, x, offset=0)
    paths.direct(rope.apply, x, offset=0)
    old = rope._tables.window
    assert old.start <= 0 and old.stop < 5000
    if kind == "offset":
        value = 5000
    elif kind == "positions [seq]":
        value = np.array([1, 2, 5000, 3])
    else:
        value = np.array([[0, 1, 2, 3], [4, 5000, 6, 7], [8, 9, 10, 11]])
    kw = call_kwargs(kind, value)
    pos = token_positions(kind, (3,), 4, value)
    want = rope.apply(x, angles="on_the_fly", **kw)               # no rows at all
    inplace = x.copy()
    paths.general_path(rope.apply, inplace, out=inplace, **kw)    # C wrote nothing before the fallback
    assert np.array_equal(bits(inplace), bits(want))
    w = rope._tables.window
    assert w is not old and w.start <= pos.min() and pos.max() < w.stop
    assert w.stop - w.start <= rope._tables.max_rows
    assert np.array_equal(bits(paths.direct(rope.apply, x, **kw)), bits(want))   # now inside: direct
    got_q, got_k = paths.direct(rope.apply_qk, x, x[:, :, :1].copy(), **kw)
    assert np.array_equal(bits(got_q), bits(want)) and np.array_equal(bits(got_k), bits(want[:, :, :1]))
    for b in range(3):
        assert_rotation_close(want[b], reference_rotation(rope, x[b], pos[b]), x[b], 12, "interleaved")


def test_changing_the_thread_count_between_calls_keeps_every_bit(isa, paths, threads, rng):
    # Large enough that 2..4 threads split the call (as in test_thread_pool).
    rope = Rope(64, layout="split_half", rotary_dim=56)
    q = rng.standard_normal((4, 509, 8, 64)).astype(np.float32)
    k = rng.standard_normal((4, 509, 2, 64)).astype(np.float32)
    pos = rng.integers(0, 600, size=(4, 509))
    pyrope.set_num_threads(1)
    want = paths.general_path(rope.apply, q, pos, **GENERAL)
    want_qk = paths.general_path(rope.apply_qk, q, k, offset=11, **GENERAL)
    calls = None
    for n in (1, 4, 2, 3, 1, 4):
        pyrope.set_num_threads(n)
        assert np.array_equal(bits(paths.direct(rope.apply, q, pos)), bits(want))
        got_q, got_k = paths.direct(rope.apply_qk, q, k, offset=11)
        assert np.array_equal(bits(got_q), bits(want_qk[0])) and np.array_equal(bits(got_k), bits(want_qk[1]))
        if calls is None:
            calls = dict(_plan.CALLS)
        assert _plan.CALLS == calls          # the same memoised Calls every time
        for call in calls.values():          # whose descriptors C read carry this count
            assert call._local.bound[0].n_threads == n
    assert paths.planned == 2


def test_python_threads_sharing_one_memoised_call_get_serial_results(paths, rng):
    rope = Rope(32, layout="split_half", base=5e4)
    shape = (2, 16, 4, 32)
    rope.apply(np.zeros(shape, np.float32), offset=0, **GENERAL)
    rope.apply(np.zeros(shape, np.float32), offset=700, **GENERAL)  # rows for 0..715 cached
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(8)]
    kinds = [{"offset": 0}, {"positions": rng.integers(0, 700, size=16)}, {"offset": 300},
             {"positions": rng.integers(0, 700, size=(2, 16))}, {"offset": 690},
             {"positions": np.arange(16) * 40}, {"offset": 5}, {"positions": rng.integers(0, 700, size=(2, 16))}]
    want = [rope.apply(x, **kw, **GENERAL) for x, kw in zip(xs, kinds)]
    want_inv = [rope.apply(x, inverse=True, **kw, **GENERAL) for x, kw in zip(xs, kinds)]
    paths.direct(rope.apply, xs[0], offset=0)
    paths.direct(rope.apply, xs[0], offset=0, inverse=True)
    y = xs[0].copy()
    paths.direct(rope.apply, y, offset=0, out=y)
    assert len(_plan.CALLS) == 3
    calls = dict(_plan.CALLS)
    general = paths.general
    got, got_inv, got_inplace = [None] * 8, [None] * 8, [None] * 8
    start = threading.Barrier(8)

    def work(i):
        start.wait()
        for _ in range(40):
            got[i] = rope.apply(xs[i], **kinds[i])
            got_inv[i] = rope.apply(xs[i], inverse=True, **kinds[i])
            y = xs[i].copy()
            got_inplace[i] = rope.apply(y, out=y, **kinds[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert paths.general == general and _plan.CALLS == calls   # every call was a memo hit
    for i in range(8):
        assert np.array_equal(bits(got[i]), bits(want[i]))
        assert np.array_equal(bits(got_inplace[i]), bits(want[i]))
        assert np.array_equal(bits(got_inv[i]), bits(want_inv[i]))


def test_contiguous_q_and_k_sharing_memory_get_the_general_path_decisions(isa, paths, rng):
    # Two C-contiguous arrays over one buffer: the direct path must step aside
    # so that overlaps are refused or resolved as the planner decides.
    rope = Rope(16, layout="split_half")
    buf = rng.standard_normal(2 * 320).astype(np.float32)
    q = buf[:320].reshape(2, 5, 2, 16)
    k = buf[160:480].reshape(2, 5, 2, 16)                  # overlaps q's second half
    assert q.flags.c_contiguous and k.flags.c_contiguous
    rope.apply(q.copy(), offset=2)
    rope.apply(q.copy(), offset=2)                         # rows cached
    want_q, want_k = rope.apply(q.copy(), offset=2), rope.apply(k.copy(), offset=2)
    got_q, got_k = paths.general_path(rope.apply_qk, q, k, offset=2)
    assert np.array_equal(bits(got_q), bits(want_q)) and np.array_equal(bits(got_k), bits(want_k))
    keep = buf.copy()
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] overlap"):
        paths.general_path(rope.apply_qk, q, k, offset=2, out=(q, k))
    with pytest.raises(ValueError, match="q and k must be different arrays"):
        paths.general_path(rope.apply_qk, q, q, offset=2)
    with pytest.raises(ValueError, match="q and k must be different arrays"):
        paths.general_path(rope.apply_qk, q, q, offset=2, out=(q, q))
    assert np.array_equal(bits(buf), bits(keep))


# ---- bugs of the old fast path --------------------------------------------------------

@pytest.mark.parametrize("bad", [-3.0, -2.0, np.float64(-3.0)], ids=["-3.0", "-2.0", "np.float64(-3.0)"])
def test_a_float_seq_axis_is_refused_even_once_an_int_plan_is_cached(bad, rng):
    # The old per-shape plan cache was keyed by seq_axis, and -3.0 == -3: a
    # float seq_axis was refused on a first call but accepted once an int
    # plan for that shape was cached.
    rope = Rope(16, layout="split_half")
    rope.apply(np.zeros((1, 2, 16), np.float32), offset=0)        # rows cached, not this shape
    x = rng.standard_normal((2, 3, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 3, 4, 16)).astype(np.float32)
    good = int(bad)
    calls = [lambda: rope.apply(x, seq_axis=bad), lambda: rope.apply(x, seq_axis=bad, out=x),
             lambda: rope.apply_qk(x, k, seq_axis=bad), lambda: rope.apply_qk(x, k, seq_axis=bad, out=(x, k))]
    first = []
    for call in calls:
        with pytest.raises(TypeError, match="seq_axis must be an integer") as e:
            call()
        first.append(str(e.value))
    keep = x.copy(), k.copy()
    for _ in range(2):                                            # int plans for this shape
        rope.apply(x, seq_axis=good)
        rope.apply_qk(x, k, seq_axis=good)
        rope.apply(x.copy(), seq_axis=good, out=x.copy())
    for call, message in zip(calls, first):
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == message
    assert np.array_equal(bits(x), bits(keep[0])) and np.array_equal(bits(k), bits(keep[1]))


def misaligned(a):
    """A C-contiguous copy of ``a`` whose data starts one byte past an aligned address."""
    a = np.asarray(a)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    view = raw[1:].view(a.dtype).reshape(a.shape)
    view[...] = a
    assert view.flags.c_contiguous and not view.flags.aligned
    return view


@pytest.mark.parametrize("cached", [False, True], ids=["no rows cached", "rows cached"])
@pytest.mark.parametrize("shape", [(4,), (3, 4)], ids=["[seq]", "[batch, seq]"])
def test_misaligned_positions_and_arrays_are_copied_not_refused(isa, cached, shape, rng):
    # The old code refused contiguous but misaligned int64 positions with an
    # anonymous "a pointer is not aligned" error, while it copied a misaligned x.
    rope = Rope(16, layout="split_half", rotary_dim=12)
    x = rng.standard_normal((3, 4, 2, 16)).astype(np.float32)
    k = rng.standard_normal((3, 4, 1, 16)).astype(np.float32)
    pos = rng.integers(0, 50, size=shape)
    if cached:
        rope.apply(x, offset=0)
        rope.apply(x, offset=0)
    bad_pos = misaligned(pos.astype(np.int64))
    want = rope.apply(x, pos)
    want_k = rope.apply(k, pos)
    full = np.broadcast_to(pos, (3, 4))
    for b in range(3):
        assert_rotation_close(want[b], reference_rotation(rope, x[b], full[b]), x[b], 12, "split_half")
    assert np.array_equal(bits(rope.apply(x, bad_pos)), bits(want))
    got_q, got_k = rope.apply_qk(x, k, bad_pos)
    assert np.array_equal(bits(got_q), bits(want)) and np.array_equal(bits(got_k), bits(want_k))
    y = x.copy()
    rope.apply(y, bad_pos, out=y)
    assert np.array_equal(bits(y), bits(want))
    bad_x = misaligned(x)
    assert np.array_equal(bits(rope.apply(bad_x, pos)), bits(want))
    assert np.array_equal(bits(rope.apply(bad_x, bad_pos)), bits(want))
    rope.apply(bad_x, bad_pos, out=bad_x)
    assert np.array_equal(bits(bad_x), bits(want))
    # positions in any other integer layout give the same bits
    for other in (pos.astype(np.int32), pos.astype(">i8"), np.repeat(pos, 2, axis=-1)[..., ::2]):
        assert np.array_equal(bits(rope.apply(x, other)), bits(want))


def test_arrays_the_direct_path_refuses_are_planned_once(monkeypatch, rng):
    # A refusal (here: no tokens) is memoised too, so the general path is
    # taken at once on the next call instead of planning again.
    rope = Rope(8, layout="split_half")
    rope.apply(rng.standard_normal((1, 2, 8)).astype(np.float32))     # rows cached
    planned = []
    real = _plan.direct_call
    monkeypatch.setattr(_plan, "direct_call", lambda *a: planned.append(a[0]) or real(*a))
    x = np.ones((0, 3, 2, 8), np.float32)
    for _ in range(4):
        assert rope.apply(x).shape == x.shape
    assert len(planned) == 1 and _plan.CALLS[planned[0]] is None


@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
def test_inverse_accepts_bools_on_both_paths(flag, rng):
    rope = Rope(8, layout="interleaved")
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    rope.apply(x)                                                  # rows cached: direct path
    direct = rope.apply(x, offset=1, inverse=flag)
    general = rope.apply(x, offset=1, inverse=flag, angles="table")
    want = rope.apply(x, offset=1, inverse=bool(flag), angles="on_the_fly")
    assert np.array_equal(direct, want) and np.array_equal(general, want)
