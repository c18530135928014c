"""Rope.prepare / Rope.prepare_qk: the examples of docs/BACKENDS.md run, results
bit for bit those of apply (and within the bound of the reference), no plan
per call, clear errors for arrays that do not match the plan, the general
path for what the plan does not cover."""
import os
import threading

import ml_dtypes
import numpy as np
import pytest

from pyrope import Rope
from pyrope.rope import PreparedRotation
import readme_blocks
from array_bits import bits
from tolerance import assert_rotation_close, reference_rotation

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
GENERAL = {"angles": "table"}


# ---- docs/BACKENDS.md ------------------------------------------------------------------

# the sections this test runs; "A decode step over a paged cache" is tests/interop/test_decode_step.py's
SECTIONS = ("## `out=` a slice of the cache", "## Prepared calls")


def backends_blocks():
    return [b.text for b in readme_blocks.fenced_blocks(os.path.join(ROOT, "docs", "BACKENDS.md"))
            if b.language == "python" and b.section in SECTIONS]


def test_the_backends_page_runs_and_its_caches_hold_the_reference(isa):
    blocks = backends_blocks()
    assert len(blocks) == 2
    ns = {}
    exec(blocks[0], ns)
    rope = ns["rope"]
    gen = np.random.default_rng(0)                     # the draws of the first block
    k0 = gen.standard_normal((2, 1, 2, 64)).astype(np.float32)
    q0 = gen.standard_normal((2, 1, 8, 64)).astype(np.float32)
    for b in range(2):
        want5 = reference_rotation(rope, k0[b], [5])
        assert_rotation_close(ns["k_cache"][b, 5:6], want5, k0[b], 64, "split_half")
        assert_rotation_close(ns["k_cache_hm"][b, :, 5:6].transpose(1, 0, 2), want5, k0[b], 64, "split_half")
        assert_rotation_close(ns["k_cache"][b, 6:7], reference_rotation(rope, k0[b], [6]), k0[b], 64, "split_half")
        assert_rotation_close(ns["q"][b], reference_rotation(rope, q0[b], [6]), q0[b], 64, "split_half")
    untouched = np.ones(32, bool)
    untouched[[5, 6]] = False
    assert not ns["k_cache"][:, untouched].any() and not ns["k_cache_hm"][:, :, untouched].any()

    exec(blocks[1], ns)                                # the decode loop, and its own check
    assert isinstance(ns["step"], PreparedRotation)
    gen = np.random.default_rng(1)
    for pos in range(32):
        gen.standard_normal((2, 1, 8, 64))
        k_raw = gen.standard_normal((2, 1, 2, 64)).astype(np.float32)
        if pos % 7 == 0:
            for b in range(2):
                assert_rotation_close(ns["k_cache"][b, pos:pos + 1], reference_rotation(rope, k_raw[b], [pos]),
                                      k_raw[b], 64, "split_half")


# ---- the same bits as apply ------------------------------------------------------------

def layouts(seq_axis, rng, dtype):
    """q, k, and caches with slots of 3 tokens, in the layout of seq_axis."""
    if seq_axis == -3:
        q = rng.standard_normal((2, 3, 4, 16)).astype(dtype)
        k = rng.standard_normal((2, 3, 1, 16)).astype(dtype)
        qc, kc = np.zeros((2, 12, 4, 16), dtype), np.zeros((2, 12, 1, 16), dtype)
        slot = lambda c, p: c[:, p:p + 3]     # noqa: E731
    else:
        q = rng.standard_normal((2, 4, 3, 16)).astype(dtype)
        k = rng.standard_normal((2, 1, 3, 16)).astype(dtype)
        qc, kc = np.zeros((2, 4, 12, 16), dtype), np.zeros((2, 1, 12, 16), dtype)
        slot = lambda c, p: c[:, :, p:p + 3]  # noqa: E731
    return q, k, qc, kc, slot


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
@pytest.mark.parametrize("inverse", [False, True])
def test_prepared_apply_equals_apply(isa, paths, dtype, seq_axis, inverse, rng):
    rope = Rope(16, layout="split_half", rotary_dim=12, base=700.0)
    x, _, cache, _, slot = layouts(seq_axis, rng, dtype)
    rope.apply(x, offset=0, seq_axis=seq_axis, **GENERAL)
    into = rope.prepare(x, out=slot(cache, 0), seq_axis=seq_axis, inverse=inverse)
    fresh = rope.prepare(x, seq_axis=seq_axis, inverse=inverse)
    y = x.copy()
    in_place = rope.prepare(y, out=y, seq_axis=seq_axis, inverse=inverse)
    planned, general = paths.planned, paths.general
    for p in (0, 4, 9):
        want = rope.apply(x, offset=20 + p, seq_axis=seq_axis, inverse=inverse, **GENERAL)
        assert into(x, out=slot(cache, p), offset=20 + p) is not None
        assert np.array_equal(bits(slot(cache, p)), bits(want))
        assert np.array_equal(bits(fresh(x, offset=20 + p)), bits(want))
        y[...] = x
        assert in_place(y, out=y, offset=20 + p) is y and np.array_equal(bits(y), bits(want))
        pos = np.arange(3) + 20 + p                      # positions [seq] and [batch, seq]
        assert np.array_equal(bits(fresh(x, positions=pos)), bits(want))
        assert np.array_equal(bits(fresh(x, positions=np.stack([pos, pos]))), bits(want))
    assert paths.planned == planned                     # no plan per call...
    assert paths.general == general + 3                 # ...and no general path but the references


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
def test_prepared_apply_qk_equals_apply_qk(isa, paths, dtype, seq_axis, rng):
    rope = Rope(16, layout="interleaved", base=900.0)
    q, k, qc, kc, slot = layouts(seq_axis, rng, dtype)
    rope.apply_qk(q, k, offset=0, seq_axis=seq_axis, **GENERAL)
    q2 = q.copy()
    step = rope.prepare_qk(q2, k, out=(q2, slot(kc, 0)), seq_axis=seq_axis)
    both = rope.prepare_qk(q, k, out=(slot(qc, 0), slot(kc, 0)), seq_axis=seq_axis)
    fresh = rope.prepare_qk(q, k, seq_axis=seq_axis)
    planned, general = paths.planned, paths.general
    for p in (0, 5, 9):
        want_q, want_k = rope.apply_qk(q, k, offset=p, seq_axis=seq_axis, **GENERAL)
        q2[...] = q
        got = step(q2, k, out=(q2, slot(kc, p)), offset=p)
        assert got[0] is q2 and np.array_equal(bits(q2), bits(want_q))
        assert np.array_equal(bits(slot(kc, p)), bits(want_k))
        both(q, k, out=(slot(qc, p), slot(kc, p)), offset=p)
        assert np.array_equal(bits(slot(qc, p)), bits(want_q)) and np.array_equal(bits(slot(kc, p)), bits(want_k))
        got = fresh(q, k, positions=np.arange(3) + p)
        assert np.array_equal(bits(got[0]), bits(want_q)) and np.array_equal(bits(got[1]), bits(want_k))
    assert paths.planned == planned and paths.general == general + 3


def test_prepared_calls_shared_between_threads(rng):
    rope = Rope(32, layout="split_half")
    xs = [rng.standard_normal((2, 1, 4, 32)).astype(np.float32) for _ in range(6)]
    cache = np.zeros((2, 240, 4, 32), np.float32)
    rope.apply(xs[0], offset=0, **GENERAL)
    rope.apply(xs[0], offset=200, **GENERAL)
    step = rope.prepare(xs[0], out=cache[:, :1])
    start = threading.Barrier(6)

    def work(i):
        start.wait()
        for j in range(40):
            slot = i * 40 + j
            step(xs[i], out=cache[:, slot:slot + 1], offset=slot)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(6):
        want = rope.apply(np.repeat(xs[i], 40, axis=1), offset=i * 40, **GENERAL)
        assert np.array_equal(cache[:, i * 40:(i + 1) * 40], want)


# ---- what the plan does not cover: the general path, same bits -------------------------------

def test_outside_the_plan_the_general_path_gives_the_same_bits(isa, paths, rng):
    rope = Rope(16, layout="split_half", rotary_dim=8)
    x = rng.standard_normal((2, 3, 2, 16)).astype(np.float32)
    cache = np.zeros((2, 10, 2, 16), np.float32)
    step = rope.prepare(x, out=cache[:, 0:3])
    # no rows cached yet, then a position far outside them: the general path grows them
    for offset in (4, 10**6):
        general = paths.general
        step(x, out=cache[:, 1:4], offset=offset)
        assert paths.general == general + 1
        assert np.array_equal(cache[:, 1:4], rope.apply(x, offset=offset, angles="on_the_fly"))
    # a misaligned output of the prepared strides: rotated in a copy, written back
    raw = np.zeros(cache.nbytes + 4, np.uint8)
    shifted = raw[2:2 + cache.nbytes].view(np.float32).reshape(cache.shape)
    step(x, out=shifted[:, 2:5], offset=4)
    assert np.array_equal(shifted[:, 2:5], rope.apply(x, offset=4, **GENERAL))
    # an output overlapping x: as if nothing overlapped
    buf = np.zeros((2, 10, 2, 16), np.float32)
    src = buf.reshape(-1)[:x.size].reshape(x.shape)      # contiguous, over buf[0, :6]
    src[...] = x
    general = paths.general
    step(src, out=buf[:, 1:4], offset=4)                  # buf[0, 1:4] overlaps src
    assert paths.general == general + 1
    assert np.array_equal(buf[:, 1:4], rope.apply(x, offset=4, **GENERAL))
    # positions in another form (int32, [batch, seq] broadcast from [1, seq])
    step(x, out=cache[:, 5:8], positions=np.array([[4, 5, 6]], np.int32))
    assert np.array_equal(cache[:, 5:8], rope.apply(x, offset=4, **GENERAL))


# ---- errors ----------------------------------------------------------------------------

def test_arrays_that_do_not_match_the_plan_are_refused_naming_them(rng):
    rope = Rope(8, layout="interleaved")
    x = rng.standard_normal((2, 1, 2, 8)).astype(np.float32)
    cache = np.zeros((2, 6, 2, 8), np.float32)
    into = rope.prepare(x, out=cache[:, 0:1])
    y = x.copy()
    in_place = rope.prepare(y, out=y)
    fresh = rope.prepare(x)
    qk = rope.prepare_qk(x, x[:, :, :1].copy(), out=(None, cache[:, 0:1, :1]))
    keep = cache.copy()
    bad = [
        (lambda: into(x.astype(np.float64), out=cache[:, 1:2], offset=1), ValueError, r"^x must have the shape"),
        (lambda: into(x[:, :, :1], out=cache[:, 1:2], offset=1), ValueError, r"x must have the shape, strides"),
        (lambda: into(np.asfortranarray(x), out=cache[:, 1:2], offset=1), ValueError, "strides"),
        (lambda: into(list(x), out=cache[:, 1:2], offset=1), TypeError, "x must be a numpy.ndarray"),
        (lambda: into(x, out=cache[:, 1:3], offset=1), ValueError, r"out must have the shape"),
        (lambda: into(x, out=cache.copy()[:, 1:2].copy(), offset=1), ValueError, r"out must have .* strides"),
        (lambda: into(x, out=None, offset=1), TypeError, "out must be a numpy.ndarray"),
        (lambda: into(x, out=cache[:, 1:2], offset=1.0), TypeError, "offset must be an integer"),
        (lambda: into(x, out=cache[:, 1:2], offset=True), TypeError, "offset must be an integer"),
        (lambda: in_place(y.copy(), out=y, offset=1), ValueError, "prepared to rotate x in place: pass out=x"),
        (lambda: in_place(y, offset=1), ValueError, "prepared to rotate x in place"),
        (lambda: fresh(x, out=x, offset=1), ValueError, "prepared to return a new x: pass out=None"),
        (lambda: qk(x, x[:, :, :1].copy(), out=(x, cache[:, 1:2, :1]), offset=1), ValueError,
         r"prepared to return a new q: pass out\[0\]=None"),
        (lambda: qk(x, x[:, :, :1].copy(), out=cache[:, 1:2], offset=1), TypeError, "out must be None or a pair"),
        (lambda: qk(x, x[:, :, :1].astype(np.float16), out=(None, cache[:, 1:2, :1]), offset=1), ValueError,
         r"^k must have the shape, strides and dtype"),
        (lambda: into(x, out=cache[:, 1:2], offset=2**31), ValueError, "offset"),
        (lambda: into(x, out=cache[:, 1:2], positions=np.array([2**40])), ValueError, "positions must lie within"),
        (lambda: into(x, cache[:, 1:2], cache[:, 2:3]), TypeError, "positional argument"),
    ]
    for call, error, message in bad:
        with pytest.raises(error, match=message):
            call()
    ro = cache[:, 1:2]
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        into(x, out=ro, offset=1)
    assert np.array_equal(cache, keep)


def test_prepare_refuses_what_it_cannot_plan(rng):
    rope = Rope(8, layout="split_half")
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    wide = np.zeros((2, 3, 2, 16), np.float32)
    cases = [
        (lambda: rope.prepare(x, out=wide[..., ::2]), ValueError, r"cannot prepare this rotation: out .* needs a copy"),
        (lambda: rope.prepare(wide[..., ::2]), ValueError, r"cannot prepare this rotation: x .* needs a copy"),
        (lambda: rope.prepare(np.zeros((2, 0, 2, 8), np.float32)), ValueError, "x is empty"),
        (lambda: rope.prepare(x, seq_axis=-1), ValueError, "seq_axis must be -3"),
        (lambda: rope.prepare(x, seq_axis=-3.0), TypeError, "seq_axis must be an integer"),
        (lambda: rope.prepare(x.astype(np.int32)), TypeError, "x must have dtype"),
        (lambda: rope.prepare(x[..., :6]), ValueError, "head_dim"),
        (lambda: rope.prepare(x, out=x[:, :2]), ValueError, "out must have the shape of x"),
        (lambda: rope.prepare(x, inverse="yes"), TypeError, "inverse must be True or False"),
        (lambda: rope.prepare_qk(x, x[:, :2].copy()), ValueError, "q and k must share batch and sequence dims"),
        (lambda: rope.prepare_qk(x, x.astype(np.float64)), TypeError, "k must have dtype float32"),
        (lambda: rope.prepare_qk(x, x.copy(), out=x), TypeError, "out must be None or a pair"),
        (lambda: rope.prepare(x, out=np.lib.stride_tricks.as_strided(wide, x.shape, (0, 0, 0, 4))), ValueError,
         "out has elements that overlap each other"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


def test_repr_names_the_plan():
    rope = Rope(8, layout="split_half")
    x = np.zeros((2, 1, 2, 8), np.float32)
    cache = np.zeros((2, 5, 2, 8), np.float32)
    text = repr(rope.prepare(x, out=cache[:, :1]))
    assert "shape (2, 1, 2, 8)" in text and "into out strides (320, 64, 32, 4)" in text
    assert "in place" in repr(rope.prepare(x, out=x)) and "new array" in repr(rope.prepare(x))
