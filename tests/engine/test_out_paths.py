"""apply(x, out=y) and apply_qk(q, k, out=(q_out, k_out)) into strided views of
a KV cache: the values (the reference, and the general path's bits), the
cache bytes outside the slice, the memo hit on successive slots, overlapping
arguments and bad outputs."""
import threading

import ml_dtypes
import numpy as np
import pytest

from pyrope import Rope
from pyrope._engine import plan as _plan
from array_bits import bits
from tolerance import assert_rotation_close, reference_rotation

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
GENERAL = {"angles": "table"}   # the general path (planner), with the same cached rows


def garbage(shape, dtype, rng):
    """Cache contents that no rotation produces by accident (NaNs included)."""
    raw = rng.integers(0, 256, size=(int(np.prod(shape)) * np.dtype(dtype).itemsize,), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def tokens(a, seq_axis):
    """[*batch, seq, heads, dim] view of ``a``."""
    return a if seq_axis == -3 else np.swapaxes(a, -3, -2)


def check_against_reference(rope, got, x, positions, seq_axis):
    """float32/float64 results within the derived bound of the reference
    (positions [*batch, seq]); 16-bit types are held to the general path's bits."""
    g, s = tokens(got, seq_axis), tokens(x, seq_axis)
    for b in np.ndindex(s.shape[:-3]):
        want = reference_rotation(rope, s[b], positions[b])
        assert_rotation_close(g[b].astype(np.float64), want, s[b].astype(np.float64), rope.rotary_dim,
                              rope.layout, rope.attention_factor)


# ---- out= into a slice of a cache --------------------------------------------------------

CACHES = {
    # name: (seq_axis, cache shape, slice of the cache holding n tokens at p)
    "[batch, seq, heads, dim], cache[:, p:p+n]": (-3, (2, 12, 3, 16), lambda c, p, n: c[:, p:p + n]),
    "[batch, heads, seq, dim], cache[:, :, p:p+n]": (-2, (2, 3, 12, 16), lambda c, p, n: c[:, :, p:p + n]),
    "[layer, batch, seq, heads, dim], cache[1, :, p:p+n]": (-3, (3, 2, 12, 3, 16),
                                                            lambda c, p, n: c[1, :, p:p + n]),
    "[seq, heads, dim] without batch, cache[p:p+n]": (-3, (12, 3, 16), lambda c, p, n: c[p:p + n]),
    "heads reversed, cache[:, p:p+n, ::-1]": (-3, (2, 12, 3, 16), lambda c, p, n: c[:, p:p + n, ::-1]),
    "seq reversed, cache[:, ::-1][:, p:p+n]": (-3, (2, 12, 3, 16), lambda c, p, n: c[:, ::-1][:, p:p + n]),
    "every other head of a wider cache": (-3, (2, 12, 6, 16), lambda c, p, n: c[:, p:p + n, ::2]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("cache_kind", list(CACHES))
@pytest.mark.parametrize("layout,rotary_dim", [("split_half", 16), ("interleaved", 16), ("split_half", 10),
                                               ("interleaved", 6)])
def test_apply_into_a_cache_slice(isa, paths, dtype, cache_kind, layout, rotary_dim, rng):
    seq_axis, cache_shape, window = CACHES[cache_kind]
    rope = Rope(16, layout=layout, rotary_dim=rotary_dim, base=500.0)
    cache = garbage(cache_shape, dtype, rng)
    n = 2
    x = rng.standard_normal(window(cache, 0, n).shape).astype(dtype)
    rope.apply(x, offset=0, **GENERAL)                               # rows cached
    for step, p in enumerate((3, 5, 9)):
        before = cache.copy()
        want = rope.apply(x, offset=40 + p, seq_axis=seq_axis, **GENERAL)
        out = window(cache, p, n)
        got = rope.apply(x, offset=40 + p, seq_axis=seq_axis, out=out)
        assert got is out
        assert np.array_equal(bits(out), bits(want))
        # the tail past rotary_dim is x's, copied
        assert np.array_equal(bits(out[..., rotary_dim:]), bits(x[..., rotary_dim:]))
        # nothing outside the slice moved
        mask = np.ones(cache.shape, bool)
        window(mask, p, n)[...] = False
        assert np.array_equal(bits(cache)[mask], bits(before)[mask])
        if np.dtype(dtype).itemsize >= 4:
            tok = tokens(x, seq_axis)
            pos = np.broadcast_to(40 + p + np.arange(n), tok.shape[:-2])
            check_against_reference(rope, got, x, pos, seq_axis)
    assert paths.general == 1 + 3    # the first call and the three references; every out= call direct


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
def test_non_contiguous_x_into_a_cache_slice(isa, paths, dtype, seq_axis, rng):
    # x: every other head of a wider buffer, inside a longer head (the last axis stays contiguous)
    rope = Rope(16, layout="split_half", rotary_dim=12)
    big = rng.standard_normal((2, 4, 6, 20)).astype(dtype)          # [batch, seq or heads, ...]
    if seq_axis == -3:
        view = lambda b: b[:, :, ::2, 2:18]    # noqa: E731  [2, 4 seq, 3 heads, 16]
        cache = garbage((2, 9, 3, 16), dtype, rng)
        out = cache[:, 2:6]
    else:
        view = lambda b: b[:, ::2, :, 2:18]    # noqa: E731  [2, 2 heads, 6 seq, 16]
        cache = garbage((2, 2, 9, 16), dtype, rng)
        out = cache[:, :, 2:8]
    x = view(big)
    assert not x.flags.c_contiguous and x.strides[-1] == x.itemsize
    rope.apply(np.ascontiguousarray(x), offset=0, seq_axis=seq_axis, **GENERAL)
    want = rope.apply(np.ascontiguousarray(x), offset=7, seq_axis=seq_axis, **GENERAL)
    general = paths.general
    for _ in range(2):
        assert rope.apply(x, offset=7, seq_axis=seq_axis, out=out) is out
        assert np.array_equal(bits(out), bits(want))
        x_in_place = view(big.copy())                       # in place on a strided x too
        assert rope.apply(x_in_place, offset=7, seq_axis=seq_axis, out=x_in_place) is x_in_place
        assert np.array_equal(bits(x_in_place), bits(want))
        fresh = rope.apply(x, offset=7, seq_axis=seq_axis)
        assert np.array_equal(bits(fresh), bits(want)) and not np.shares_memory(fresh, big)
    assert paths.general == general


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
@pytest.mark.parametrize("outs", ["q in place, k into the cache", "both into caches", "both new"])
def test_apply_qk_into_cache_slices(isa, paths, dtype, seq_axis, outs, rng):
    rope = Rope(16, layout="interleaved", rotary_dim=12, base=3000.0)
    if seq_axis == -3:
        q = rng.standard_normal((3, 2, 4, 16)).astype(dtype)
        k = rng.standard_normal((3, 2, 1, 16)).astype(dtype)
        qc, kc = garbage((3, 10, 4, 16), dtype, rng), garbage((3, 10, 1, 16), dtype, rng)
        slot = lambda c, p: c[:, p:p + 2]   # noqa: E731
    else:
        q = rng.standard_normal((3, 4, 2, 16)).astype(dtype)
        k = rng.standard_normal((3, 1, 2, 16)).astype(dtype)
        qc, kc = garbage((3, 4, 10, 16), dtype, rng), garbage((3, 1, 10, 16), dtype, rng)
        slot = lambda c, p: c[:, :, p:p + 2]   # noqa: E731
    rope.apply_qk(q, k, offset=0, seq_axis=seq_axis, **GENERAL)
    for p in (0, 4, 8):
        want_q, want_k = rope.apply_qk(q, k, offset=100 + p, seq_axis=seq_axis, **GENERAL)
        keep_q, keep_k = qc.copy(), kc.copy()
        general = paths.general
        if outs == "q in place, k into the cache":
            q2 = q.copy()
            got = rope.apply_qk(q2, k, offset=100 + p, seq_axis=seq_axis, out=(q2, slot(kc, p)))
            assert got[0] is q2 and np.array_equal(bits(q2), bits(want_q))
            assert np.array_equal(bits(slot(kc, p)), bits(want_k))
        elif outs == "both into caches":
            got = rope.apply_qk(q, k, offset=100 + p, seq_axis=seq_axis, out=(slot(qc, p), slot(kc, p)))
            assert np.array_equal(bits(slot(qc, p)), bits(want_q))
            assert np.array_equal(bits(slot(kc, p)), bits(want_k))
        else:
            got = rope.apply_qk(q, k, offset=100 + p, seq_axis=seq_axis)
            assert np.array_equal(bits(got[0]), bits(want_q)) and np.array_equal(bits(got[1]), bits(want_k))
        assert paths.general == general, "took the general path"
        for cache, before in ((qc, keep_q), (kc, keep_k)):
            mask = np.ones(cache.shape, bool)
            if not (cache is qc and outs != "both into caches") and outs != "both new":
                slot(mask, p)[...] = False
            assert np.array_equal(bits(cache)[mask], bits(before)[mask])
    assert paths.planned == 1                  # one plan, every slot
    if np.dtype(dtype) == np.float32:
        pos = np.broadcast_to(108 + np.arange(2), (3, 2))
        check_against_reference(rope, got[1], k, pos, seq_axis)


@pytest.mark.parametrize("kind", ["positions [seq]", "positions [batch, seq]", "offset"])
def test_positions_and_offsets_into_a_cache(isa, paths, kind, rng):
    # A ragged decode batch: each sequence at its own position, written to its own slot column.
    rope = Rope(32, layout="split_half", rotary_dim=24)
    cache = garbage((4, 16, 2, 32), np.float32, rng)
    x = rng.standard_normal((4, 3, 2, 32)).astype(np.float32)
    if kind == "positions [seq]":
        kw, pos = {"positions": np.array([7, 2, 40])}, np.broadcast_to([7, 2, 40], (4, 3))
    elif kind == "positions [batch, seq]":
        p = rng.integers(0, 60, size=(4, 3))
        kw, pos = {"positions": p}, p
    else:
        kw, pos = {"offset": 21}, np.broadcast_to(21 + np.arange(3), (4, 3))
    rope.apply(x, offset=0, **GENERAL)                # rows for 0..63
    want = rope.apply(x, **kw, **GENERAL)
    before = paths.general
    out = cache[:, 5:8]
    assert rope.apply(x, **kw, out=out) is out
    assert np.array_equal(bits(out), bits(want))
    assert paths.general == before
    check_against_reference(rope, out, x, pos, -3)
    # positions outside the kept rows: the general path grows them, same bits as on the fly
    far = {"positions": np.full((4, 3), 10**6) + np.arange(3)} if kind != "offset" else {"offset": 10**6}
    keep = cache.copy()
    got = rope.apply(x, **far, out=cache[:, 9:12])
    assert np.array_equal(bits(got), bits(rope.apply(x, **far, angles="on_the_fly")))
    assert np.array_equal(bits(cache[:, :9]), bits(keep[:, :9])) and np.array_equal(bits(cache[:, 12:]), bits(keep[:, 12:]))


def test_successive_slots_hit_the_memo(paths, rng):
    # The pointer moves every step; shapes and strides do not: one plan each.
    rope = Rope(64, layout="split_half")
    q = rng.standard_normal((4, 1, 8, 64)).astype(np.float32)
    k = rng.standard_normal((4, 1, 2, 64)).astype(np.float32)
    kc = np.zeros((4, 50, 2, 64), np.float32)
    vc = np.zeros((4, 2, 50, 64), np.float32)                  # the other layout
    rope.apply(q, offset=0, **GENERAL)
    general = paths.general
    for pos in range(50):
        rope.apply(k, offset=pos, out=kc[:, pos:pos + 1])
        rope.apply(k.transpose(0, 2, 1, 3), offset=pos, seq_axis=-2, out=vc[:, :, pos:pos + 1])
        rope.apply_qk(q, k, offset=pos, out=(q, kc[:, pos:pos + 1]))
    assert paths.general == general and paths.planned == 3 and len(_plan.CALLS) == 3
    want = rope.apply(np.repeat(k, 50, axis=1), offset=0, **GENERAL)      # token s at position s
    assert np.array_equal(kc, want)
    assert np.array_equal(vc, rope.apply(np.repeat(k, 50, axis=1).transpose(0, 2, 1, 3), offset=0,
                                         seq_axis=-2, **GENERAL))


def test_python_threads_writing_slots_of_one_cache(rng):
    rope = Rope(32, layout="interleaved")
    xs = [rng.standard_normal((2, 1, 4, 32)).astype(np.float32) for _ in range(6)]
    cache = np.zeros((2, 6 * 40, 4, 32), np.float32)
    rope.apply(xs[0], offset=0, **GENERAL)
    rope.apply(xs[0], offset=300, **GENERAL)            # rows 0..363 cached
    start = threading.Barrier(6)

    def work(i):
        start.wait()
        for j in range(40):
            slot = i * 40 + j
            rope.apply(xs[i], offset=slot, out=cache[:, slot:slot + 1])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(6):
        want = rope.apply(np.repeat(xs[i], 40, axis=1), offset=i * 40, **GENERAL)
        assert np.array_equal(cache[:, i * 40:(i + 1) * 40], want)


# ---- overlaps: correct results or the general path's refusal ---------------------------------

def test_out_overlapping_x_is_as_if_nothing_overlapped(isa, paths, rng):
    rope = Rope(8, layout="split_half")
    buf = rng.standard_normal((2, 6, 3, 8)).astype(np.float32)
    rope.apply(buf[:, :3].copy(), offset=0, **GENERAL)
    cases = [
        (lambda b: b[:, 0:3], lambda b: b[:, 1:4]),            # shifted by one token
        (lambda b: b[:, 1:4], lambda b: b[:, 0:3]),
        (lambda b: b[:, 0:3], lambda b: b[:, 0:3, ::-1]),      # the same tokens, heads reversed
        (lambda b: b[:, 0:3, :2], lambda b: b[:, 0:3, 1:]),    # heads shifted
        (lambda b: b[:, ::2], lambda b: b[:, 1::2]),           # interleaved tokens: bounds meet, bytes do not
    ]
    for make_x, make_out in cases:
        b = buf.copy()
        x, out = make_x(b), make_out(b)
        want = rope.apply(x.copy(), offset=5, **GENERAL)
        mask = np.ones(b.shape, bool)
        make_out(mask)[...] = False
        keep = b.copy()
        assert rope.apply(x, offset=5, out=out) is out
        assert np.array_equal(out, want)
        assert np.array_equal(b[mask], keep[mask])
    assert paths.general == 1 + 2 * len(cases)   # each overlap (and each want): the planner decided


def test_out_whose_elements_overlap_is_refused_with_nothing_written(rng):
    rope = Rope(8, layout="split_half")
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    rope.apply(x, offset=0)
    rope.apply(x, offset=0)
    buf = np.zeros((2, 3, 8), np.float32)
    out = np.lib.stride_tricks.as_strided(buf, (2, 3, 2, 8), buf.strides[:2] + (0, 4))   # both heads at once
    with pytest.raises(ValueError, match="out has elements that overlap each other"):
        rope.apply(x, offset=0, out=out)
    assert not buf.any()


# ---- bad outputs ----------------------------------------------------------------------------

def test_bad_outputs_raise_naming_out(rng):
    rope = Rope(8, layout="interleaved")
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    rope.apply(x, offset=0)
    rope.apply(x, offset=0)
    cache = np.zeros((2, 5, 2, 8), np.float32)
    ro = cache[:, 1:4]
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        rope.apply(x, offset=0, out=ro)
    with pytest.raises(TypeError, match="out must have dtype float32"):
        rope.apply(x, offset=0, out=cache.astype(np.float64)[:, 1:4])
    with pytest.raises(ValueError, match=r"out must have the shape of x \(2, 3, 2, 8\)"):
        rope.apply(x, offset=0, out=cache[:, 1:3])
    with pytest.raises(TypeError, match="out must be a numpy.ndarray"):
        rope.apply(x, offset=0, out=[0.0])
    with pytest.raises(ValueError, match=r"out\[1\] is read-only"):
        rope.apply_qk(x, x[:, :, :1].copy(), offset=0, out=(None, ro[:, :, :1]))
    assert not cache.any()


def test_outputs_the_kernel_cannot_address_are_written_back(rng):
    # A misaligned slice, a non-contiguous last axis: the general path rotates a
    # copy and writes it back; bits as in place.
    rope = Rope(8, layout="split_half")
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    rope.apply(x, offset=0)
    want = rope.apply(x, offset=2, **GENERAL)
    raw = np.zeros(2 * 3 * 2 * 8 * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(2, 3, 2, 8)
    wide = np.zeros((2, 3, 2, 16), np.float32)
    for out in (misaligned, wide[..., ::2]):
        for _ in range(2):
            assert rope.apply(x, offset=2, out=out) is out
            assert np.array_equal(out, want)
    assert not wide[..., 1::2].any()
