"""Every overlap among q, k, q_out and k_out: the result is as if nothing
overlapped, or a ValueError names the two arguments. Results never depend on
the thread count."""
import tracemalloc

import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._engine import plan as _plan
from array_bits import bits

ROPE = Rope(8, layout="split_half", base=100.0)
SHAPE = (2, 3, 2, 8)     # [batch, seq, heads, head_dim]
POS = np.array([[3, 9, 4], [0, 2, 7]])


def _buffer(rng, heads=6):
    return rng.standard_normal((2, 3, heads, 8)).astype(np.float32)


# Each scenario builds (q, k, out) from one buffer B [2, 3, 6, 8] (heads 0..5)
# and, where needed, a second buffer C; heads a..a+2 of B are q or k.
def _scenarios():
    def heads(buf, a):
        return buf[:, :, a:a + 2]

    yield "separate in place", lambda B, C: (heads(B, 0), heads(B, 2), (heads(B, 0), heads(B, 2))), None
    yield "out swapped (k, q)", lambda B, C: (heads(B, 0), heads(B, 2), (heads(B, 2), heads(B, 0))), None
    yield "q_out is k, k_out fresh", lambda B, C: (heads(B, 0), heads(B, 2), (heads(B, 2), heads(C, 0))), None
    yield "k_out is q, q_out fresh", lambda B, C: (heads(B, 0), heads(B, 2), (heads(C, 0), heads(B, 0))), None
    yield "q_out overlaps k", lambda B, C: (heads(B, 0), heads(B, 3), (heads(B, 2), heads(C, 0))), None
    yield "k_out overlaps q", lambda B, C: (heads(B, 1), heads(B, 4), (heads(C, 0), heads(B, 0))), None
    yield "q_out overlaps q (shifted)", lambda B, C: (heads(B, 0), heads(B, 3), (heads(B, 1), heads(C, 0))), None
    yield "k_out overlaps both inputs", lambda B, C: (heads(B, 0), heads(B, 2), (heads(C, 0), heads(B, 1))), None
    yield "inputs overlap, fresh outs", lambda B, C: (heads(B, 0), heads(B, 1), None), None
    yield "inputs overlap, outs elsewhere", lambda B, C: (heads(B, 0), heads(B, 1), (heads(C, 0), heads(C, 2))), None
    yield "q in place, k into q's old heads", lambda B, C: (heads(B, 0), heads(B, 2), (heads(B, 0), heads(B, 4))), None
    yield "out=(o, o)", lambda B, C: (heads(B, 0), heads(B, 2), (heads(C, 0), heads(C, 0))), r"out\[0\] and out\[1\] overlap"
    yield "outs overlap partly", lambda B, C: (heads(B, 0), heads(B, 2), (heads(C, 0), heads(C, 1))), \
        r"out\[0\] and out\[1\] overlap"
    yield "inputs overlap, in place", lambda B, C: (heads(B, 0), heads(B, 1), (heads(B, 0), heads(B, 1))), \
        r"out\[0\] and out\[1\] overlap"
    yield "q is k", lambda B, C: (heads(B, 0), heads(B, 0), None), r"q and k must be different arrays"
    yield "q is k, in place", lambda B, C: (heads(B, 0), heads(B, 0), (heads(B, 0), heads(B, 0))), \
        r"q and k must be different arrays"
    yield "k is a view of q's memory", lambda B, C: (heads(B, 0), B[:, :, :2][...], None), \
        r"q and k must be different arrays"


SCENARIOS = list(_scenarios())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
@pytest.mark.parametrize("positions", [None, POS], ids=["offset", "positions"])
def test_apply_qk_overlaps(isa, scenario, positions, rng):
    _, build, error = scenario
    B, C = _buffer(rng), _buffer(rng)
    q, k, out = build(B, C)
    q0, k0 = q.copy(), k.copy()
    B0, C0 = B.copy(), C.copy()
    kw = dict(offset=5) if positions is None else dict(positions=positions)
    if error:
        with pytest.raises(ValueError, match=error) as info:
            ROPE.apply_qk(q, k, out=out, **kw)
        assert isinstance(info.value, pyrope.RopeError)
        assert np.array_equal(bits(B), bits(B0)) and np.array_equal(bits(C), bits(C0))  # nothing written
        return
    want_q, want_k = ROPE.apply(q0, **kw), ROPE.apply(k0, **kw)
    got_q, got_k = ROPE.apply_qk(q, k, out=out, **kw)
    assert np.array_equal(bits(got_q), bits(want_q))
    assert np.array_equal(bits(got_k), bits(want_k))
    if out is not None:
        assert got_q is out[0] and got_k is out[1]
        assert np.array_equal(bits(out[0]), bits(want_q)) and np.array_equal(bits(out[1]), bits(want_k))
    else:
        assert np.array_equal(bits(B), bits(B0))  # inputs untouched


@pytest.mark.parametrize("shift", [1, -1, 3])
def test_apply_out_partially_overlapping_x(isa, shift, rng):
    B = _buffer(rng, heads=8)
    x = B[:, :, 2:4]
    out = B[:, :, 2 + shift:4 + shift]
    want = ROPE.apply(x.copy(), POS)
    got = ROPE.apply(x, POS, out=out)
    assert got is out and np.array_equal(bits(got), bits(want))


def _zero_stride(shape):
    base = np.zeros(8, np.float32)
    return np.lib.stride_tricks.as_strided(base, shape, (0, 0, 0, 4), writeable=True)


def _tangled(shape):
    # heads overlap by half a head: element strides (.., 4) over 8-element heads
    base = np.zeros(400, np.float32)
    return np.lib.stride_tricks.as_strided(base, shape, (4 * 4 * 3 * 2, 4 * 4 * 2, 4 * 4, 4), writeable=True)


@pytest.mark.parametrize("make", [_zero_stride, _tangled], ids=["zero stride", "tangled heads"])
def test_self_overlapping_destination_is_refused(make, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    out = make(SHAPE)
    before = bits(out).copy()
    with pytest.raises(ValueError, match=r"out has elements that overlap each other"):
        ROPE.apply(x, out=out)
    with pytest.raises(ValueError, match=r"out has elements that overlap each other"):
        ROPE.apply(out, out=out)                       # in place on itself
    k = rng.standard_normal(SHAPE).astype(np.float32)
    with pytest.raises(ValueError, match=r"out\[1\] has elements that overlap each other"):
        ROPE.apply_qk(x, k, out=(np.empty_like(x), out))
    assert np.array_equal(bits(out), before)


def test_the_issue_zero_stride_out_is_refused_without_listing():
    # Issue 21: a 16384x8x128 out with a zero token stride took a second to
    # refuse, listing and sorting every element offset (twice). A zero stride
    # on a long axis decides it from shape and strides: same error, and
    # nothing allocated near the array's size (the listing was 128 MiB).
    shape = (16384, 8, 128)
    rope = Rope(128, layout="split_half")
    buf = np.empty((1, 8, 128), np.float32)
    out = np.lib.stride_tricks.as_strided(buf, shape, (0,) + buf.strides[1:])
    x = np.broadcast_to(np.ones(128, np.float32), shape)          # 64 MiB of x in 512 bytes
    k = np.broadcast_to(np.ones(128, np.float32), shape)
    q_out = np.empty(shape, np.float32)
    tracemalloc.start()
    try:
        with pytest.raises(pyrope.errors.ValueError, match=r"^out has elements that overlap each other"):
            rope.apply(x, out=out)
        with pytest.raises(pyrope.errors.ValueError, match=r"^out\[1\] has elements that overlap each other"):
            rope.apply_qk(x, k, out=(q_out, out))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_a_tangled_out_is_listed_once_per_call(monkeypatch):
    # Token and head strides of 12 and 9 heads' worth cross (3 tokens on is
    # 4 heads on): only a listing shows it. The direct path's check and the
    # general path's after it share one listing.
    rope = Rope(8, layout="split_half")
    shape, strides = (6, 8, 8), (12 * 32, 9 * 32, 4)
    out = np.lib.stride_tricks.as_strided(np.zeros(1000, np.float32), shape, strides)
    x = np.ones(shape, np.float32)
    counts = {"checks": 0, "listings": 0}
    check, listing = _plan.self_overlapping, _plan._listed_overlap
    monkeypatch.setattr(_plan, "self_overlapping",
                        lambda a: counts.update(checks=counts["checks"] + 1) or check(a))
    monkeypatch.setattr(_plan, "_listed_overlap",
                        lambda *a: counts.update(listings=counts["listings"] + 1) or listing(*a))
    monkeypatch.setattr(_plan, "_LISTED", {})
    monkeypatch.setattr(_plan, "CALLS", {})
    with pytest.raises(pyrope.errors.ValueError, match=r"^out has elements that overlap each other"):
        rope.apply(x, out=out)
    assert counts == {"checks": 2, "listings": 1}      # checked by both paths, listed once


def test_overlapping_reads_are_fine(rng):
    # A broadcast (zero-stride, read-only) source is only read.
    row = rng.standard_normal(8).astype(np.float32)
    x = np.broadcast_to(row, SHAPE)
    got = ROPE.apply(x, POS)
    want = ROPE.apply(np.ascontiguousarray(x), POS)
    assert np.array_equal(bits(got), bits(want))


def test_views_that_interleave_without_overlap_are_accepted(rng):
    # Even and odd heads of one buffer: strides cross, bytes do not.
    B = _buffer(rng, heads=4)
    q, k = B[:, :, 0::2], B[:, :, 1::2]
    want = ROPE.apply(q.copy(), POS), ROPE.apply(k.copy(), POS)
    got = ROPE.apply_qk(q, k, POS, out=(q, k))
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s[2] is None], ids=lambda s: s[0])
def test_overlap_results_do_not_depend_on_thread_count(scenario):
    # 2048 tokens of 2 heads x 128: 2 MiB of traffic per tensor, split across threads.
    _, build, _ = scenario
    big = Rope(128, layout="interleaved")
    results = []
    default = pyrope.get_num_threads()
    for n in (1, 2, 3, 4):
        B = np.random.default_rng(1).standard_normal((1, 2048, 6, 128)).astype(np.float32)
        C = np.random.default_rng(2).standard_normal(B.shape).astype(np.float32)
        q, k, out = build(B, C)
        pyrope.set_num_threads(n)
        try:
            got = big.apply_qk(q, k, offset=7, out=out)
        finally:
            pyrope.set_num_threads(default)
        results.append([bits(g).copy() for g in got])
    for r in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(r, results[0]))
