"""Rope.cache_write into quantised caches (int8, float8 e4m3fn, q8_0) and pyrope.dequantize.

What lands in a slot is compared with the engines' formulas written again
in numpy (tests/support/quant_formulas.py: int8 and float8 by their
definitions and ml_dtypes' conversion, q8_0 by the gguf package's own
quantiser) applied to pyrope's float32 rotation of the key (Rope.apply on
the key widened to float32, at its logical position): bit for bit. Values
are quantised from the values themselves, never rotated. Every other slot
keeps its bytes; refusals name the argument and write nothing."""
import ml_dtypes
import numpy as np
import pytest

import pyrope
import quant_formulas as qf
from pyrope import RMSNorm, Rope, RopeError

F8 = np.dtype(ml_dtypes.float8_e4m3fn)
BF16 = np.dtype(ml_dtypes.bfloat16)
KINDS = ("int8", "fp8", "q8_0")
SENTINEL = 0x5A


def rand(shape, dtype=np.float32, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def token_shape(blocks, bs, heads, layout):
    return (blocks, bs, heads) if layout == "NHD" else (blocks, heads, bs)


def make_cache(kind, blocks, bs, heads, dim, layout):
    last = dim // 32 if kind == "q8_0" else dim
    dtype = {"int8": np.int8, "fp8": F8, "q8_0": pyrope.Q8_0}[kind]
    c = np.empty(token_shape(blocks, bs, heads, layout) + (last,), dtype)
    c.view(np.uint8)[...] = SENTINEL
    return c


def make_scale(kind, blocks, bs, heads, layout, static=0.03):
    if kind == "int8":
        s = np.empty(token_shape(blocks, bs, heads, layout), np.float32)
        s.view(np.uint8)[...] = SENTINEL
        return s
    return static if kind == "fp8" else None


def per_slot(a, layout):
    """[num_slots, heads, ...] of a cache or a scales array in either layout."""
    if layout == "HND":
        a = np.swapaxes(a, 1, 2)
    return np.ascontiguousarray(a).reshape((-1,) + a.shape[2:])


def stored(kind, cache, scale, slots, layout):
    """(bits of the heads at slots, their int8 scales or None)."""
    heads = per_slot(cache, layout)[slots]
    b = np.ascontiguousarray(heads).view(np.uint8).reshape(heads.shape[:2] + (-1,))
    return b, per_slot(scale, layout)[slots] if kind == "int8" else None


def rotated32(rope, k, positions, norm=None):
    """pyrope's float32 rotation of k [T, heads, dim] (widened exactly) at positions [T]."""
    k32 = k.astype(np.float32)
    return rope.apply(k32[:, None], positions[:, None], norm=norm)[:, 0]


def slots_for(n, blocks, bs, seed=0):
    s = np.random.default_rng(seed).permutation(blocks * bs)[:n].astype(np.int64)
    s[3::7] = -1
    return s


def check_write(rope, kind, k, v, kc, vc, ks, vs, slots, layout, positions, norm=None):
    live = slots != -1
    want, want_s = qf.quantised(kind, rotated32(rope, k, positions, norm)[live], ks)
    got, got_s = stored(kind, kc, ks, slots[live], layout)
    assert np.array_equal(got, want)
    if kind == "int8":
        assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32))
    if v is not None:
        want, want_s = qf.quantised(kind, v.astype(np.float32)[live], vs)
        got, got_s = stored(kind, vc, vs, slots[live], layout)
        assert np.array_equal(got, want)
        if kind == "int8":
            assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32))
    # the other slots keep their bytes
    untouched = np.setdiff1d(np.arange(per_slot(kc, layout).shape[0]), slots[live])
    assert (np.ascontiguousarray(per_slot(kc, layout)[untouched]).view(np.uint8) == SENTINEL).all()
    if kind == "int8":
        assert (per_slot(ks, layout)[untouched].view(np.uint8) == SENTINEL).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("pairs", ["split_half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_write_matches_the_formulas(kind, layout, pairs, dtype):
    rope = Rope(head_dim=64, base=10000.0, layout=pairs)
    T, H, blocks, bs = 29, 3, 6, 8
    k, v = rand((T, H, 64), dtype, 1), rand((T, H, 64), dtype, 2)
    slots = slots_for(T, blocks, bs)
    pos = np.arange(T, dtype=np.int64) * 37 + 11
    kc, vc = make_cache(kind, blocks, bs, H, 64, layout), make_cache(kind, blocks, bs, H, 64, layout)
    ks, vs = make_scale(kind, blocks, bs, H, layout, 0.02), make_scale(kind, blocks, bs, H, layout, 0.05)
    out = rope.cache_write(k, v, kc, vc, slots, positions=pos, layout=layout, k_scale=ks, v_scale=vs)
    assert out[0] is kc and out[1] is vc
    check_write(rope, kind, k, v, kc, vc, ks, vs, slots, layout, pos)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("over", ["head", "token"])
def test_write_with_a_norm_and_partial_rotary(kind, over):
    rope = Rope(head_dim=128, base=500000.0, layout="split_half", rotary_dim=64)
    T, H, blocks, bs = 17, 2, 4, 8
    w = rand((128 if over == "head" else 2 * 128,), seed=5, scale=0.5) + 1
    norm = RMSNorm(w, eps=1e-6, over=over)
    k, v = rand((T, H, 128), seed=3), rand((T, H, 128), seed=4)
    slots = slots_for(T, blocks, bs, seed=2)
    pos = np.arange(T, dtype=np.int64) + 1000
    kc, vc = make_cache(kind, blocks, bs, H, 128, "NHD"), make_cache(kind, blocks, bs, H, 128, "NHD")
    ks, vs = make_scale(kind, blocks, bs, H, "NHD"), make_scale(kind, blocks, bs, H, "NHD")
    rope.cache_write(k, v, kc, vc, slots, positions=pos, norm=norm, k_scale=ks, v_scale=vs)
    check_write(rope, kind, k, v, kc, vc, ks, vs, slots, "NHD", pos, norm)


@pytest.mark.parametrize("kind", KINDS)
def test_keys_only_batched_and_offset(kind):
    rope = Rope(head_dim=64, base=10000.0, layout="interleaved")
    k = rand((2, 5, 2, 64), seed=7)
    slots = np.arange(10, dtype=np.int32).reshape(2, 5)[:, ::-1].copy()
    kc, ks = make_cache(kind, 3, 4, 2, 64, "NHD"), make_scale(kind, 3, 4, 2, "NHD")
    rope.cache_write(k, None, kc, None, slots, offset=40, k_scale=ks)
    pos = np.broadcast_to(np.arange(5) + 40, (2, 5)).reshape(-1)
    check_write(rope, kind, k.reshape(10, 2, 64), None, kc, None, ks, None, slots.reshape(-1).astype(np.int64),
                "NHD", pos)


# ---- the edges of the formulas: ties, zeros, saturation, non-finite values -------------

def head_write(kind, head, scale=1.0):
    """Quantise one head [dim] through cache_write at position 0 (the rotation is the identity there)."""
    rope = Rope(head_dim=head.size, base=10000.0, layout="split_half")
    kc, ks = make_cache(kind, 1, 1, 1, head.size, "NHD"), make_scale(kind, 1, 1, 1, "NHD", scale)
    rope.cache_write(head[None, None].astype(np.float32), None, kc, None, np.zeros(1, np.int64),
                     positions=np.zeros(1, np.int64), k_scale=ks)
    return kc.reshape(-1).view(np.uint8) if kind != "q8_0" else kc.view(np.uint8).reshape(-1), ks


def test_position_zero_is_the_identity():
    x = rand((64,), seed=9)
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    assert np.array_equal(rope.apply(x[None, None, None], offset=0)[0, 0, 0], x)


def test_int8_ties_to_even_and_zero_heads():
    head = np.zeros(32, np.float32)
    head[:6] = [127.0, 2.5, 3.5, -2.5, -0.5, 1.5]   # s = 1 exactly
    q, s = head_write("int8", head)
    assert s.reshape(-1)[0] == 1.0
    assert list(q[:6].view(np.int8)) == [127, 2, 4, -2, 0, 2]
    q, s = head_write("int8", np.zeros(32, np.float32))
    assert s.reshape(-1)[0] == 0.0 and not q.any()
    q, s = head_write("int8", -np.zeros(32, np.float32))
    assert not q.any()


def test_q8_0_ties_away_from_zero_as_ggml():
    head = np.zeros(32, np.float32)
    head[:6] = [127.0, 2.5, 3.5, -2.5, -0.5, 0.49999997]
    got, _ = head_write("q8_0", head)
    assert list(got[2:8].view(np.int8)) == [127, 3, 4, -3, -1, 0]
    assert np.array_equal(got, qf.q8_0(head[None])[0])


def test_fp8_saturates_and_rounds_to_even():
    head = np.array([1e6, -1e6, 448.0, 464.0, 2 ** -10, 2 ** -9 * 1.5, 3 * 2 ** -10, 0.0] * 4, np.float32)
    got, _ = head_write("fp8", head, 1.0)
    assert np.array_equal(got, qf.fp8(head, 1.0))
    assert got[0] == 0x7E and got[1] == 0xFE   # +-448, never NaN


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_heads_dequantise_to_nan(kind, bad):
    head = rand((64,), seed=11)
    head[5] = bad
    got, ks = head_write(kind, head, 0.5)
    # the rotation at position 0 spreads a non-finite value to its pair (x * 0 is NaN): value 37 too
    r = Rope(head_dim=64, base=10000.0, layout="split_half").apply(head[None, None, None], offset=0)[0, 0, 0]
    bad_values = ~np.isfinite(r)
    assert bad_values[5] and bad_values[37]
    cache = got.view(np.int8) if kind == "int8" else got.view(F8) if kind == "fp8" else got.view(pyrope.Q8_0)
    values = pyrope.dequantize(cache, scale=ks.reshape(-1) if kind == "int8" else 0.5 if kind == "fp8" else None)
    if kind == "fp8":   # a per-value format: only the bad values are lost (an infinity saturates)
        assert np.array_equal(got, qf.fp8(r, 0.5))
        assert (np.isnan(values[np.isnan(r)])).all()
    elif kind == "int8":   # one scale per head: the head dequantises to NaN, never a finite guess
        q, s = qf.int8(r[None])
        assert np.array_equal(got.view(np.int8), q[0]) and np.isnan(ks).all()
        assert np.isnan(values).all()
    else:   # one scale per block: each block holding a bad value dequantises to NaN
        assert np.isnan(values).all()   # values 5 and 37 lie in both blocks
        d = got.view(pyrope.Q8_0)["d"]   # an infinite amax is d itself, a NaN one the NaN
        assert list(np.isnan(d)) == [bool(np.isnan(r[:32]).any()), True] and not np.isfinite(d).any()
        assert not got.view(pyrope.Q8_0)["qs"].any()


def test_tiny_amax_follows_the_formulas():
    for amax in (1e-40, 1e-37, 2 ** -149):
        head = np.zeros(32, np.float32)
        head[0], head[1] = amax, -amax / 2
        q, s = head_write("int8", head)
        want_q, want_s = qf.int8(head[None])
        assert np.array_equal(q.view(np.int8), want_q[0]) and s.reshape(-1)[0] == want_s[0]
        got, _ = head_write("q8_0", head)
        assert np.array_equal(got, qf.q8_0_formula(head[None])[0])


def test_the_q8_0_formula_is_gguf_where_ggml_is_defined():
    x = rand((40, 128), seed=21)
    x[3] = 0
    x[4, :32] = 1e-30
    assert np.array_equal(qf.q8_0_formula(x), qf.q8_0(x))


# ---- dequantize ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_dequantize_each_kind(kind):
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    k = rand((9, 2, 64), seed=13)
    kc, ks = make_cache(kind, 2, 8, 2, 64, "NHD"), make_scale(kind, 2, 8, 2, "NHD", 0.04)
    slots = np.arange(9, dtype=np.int64)
    rope.cache_write(k, None, kc, None, slots, k_scale=ks)
    values = pyrope.dequantize(kc, scale=ks)
    assert values.dtype == np.float32 and values.shape == (2, 8, 2, 64)
    heads = per_slot(kc, "NHD")[:9]
    if kind == "int8":
        want = heads.astype(np.float32) * per_slot(ks, "NHD")[:9, :, None]
    elif kind == "fp8":
        want = heads.astype(np.float32) * np.float32(0.04)
    else:
        want = qf.q8_0_values(heads.view(np.uint8).reshape(9, 2, -1))
    assert np.array_equal(per_slot(values, "NHD")[:9], want)
    # within one quantisation step of the rotated keys
    exact = rotated32(rope, k, np.arange(9))
    step = {"int8": np.abs(exact).max(-1, keepdims=True) / 127 / 2 * 1.0001,
            "fp8": np.abs(exact) * 2.0 ** -4 + 2.0 ** -10 * 0.04,
            # q8_0: half a step of the block plus d's rounding to float16 (2**-11 of 127 steps)
            "q8_0": np.abs(exact).max(-1, keepdims=True) * (1 / 254 + 2.0 ** -11) * 1.001}[kind]
    assert (np.abs(per_slot(values, "NHD")[:9] - exact) <= step).all()


def test_dequantize_bytes_and_floats():
    blocks = np.zeros((3, 2), pyrope.Q8_0)
    blocks["d"] = 0.5
    blocks["qs"][...] = np.arange(32, dtype=np.int8)
    as_bytes = blocks.view(np.uint8).reshape(3, 68)
    assert np.array_equal(pyrope.dequantize(as_bytes), pyrope.dequantize(blocks))
    assert np.array_equal(pyrope.dequantize(blocks)[0, :32], np.arange(32, dtype=np.float32) * 0.5)
    f = rand((4, 8), np.float16)
    assert np.array_equal(pyrope.dequantize(f), f.astype(np.float32))


@pytest.mark.parametrize("call, match", [
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.int8)), "scale is required"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.int8), scale=np.zeros(2)), "float32"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.int8), scale=np.zeros(3, np.float32)), "broadcast"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), F8), scale=-1.0), "> 0"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.uint8)), "34 bytes"),
    (lambda: pyrope.dequantize(np.zeros((2, 1), pyrope.Q8_0), scale=1.0), "in its blocks"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.float32), scale=1.0), "goes with"),
    (lambda: pyrope.dequantize(np.zeros((2, 4), np.int32)), "cache"),
    (lambda: pyrope.dequantize(np.broadcast_to(np.zeros(1, np.int8), (10 ** 6, 10 ** 6)),
                               scale=np.float32(1)), "share memory"),
    (lambda: pyrope.dequantize([1, 2]), "array"),
])
def test_dequantize_refusals(call, match):
    with pytest.raises(RopeError, match=match):
        call()


# ---- refusals: named, nothing written ----------------------------------------------------

def refusal_setup(kind="int8"):
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    k, v = rand((4, 2, 64)), rand((4, 2, 64), seed=1)
    kc, vc = make_cache(kind, 2, 4, 2, 64, "NHD"), make_cache(kind, 2, 4, 2, 64, "NHD")
    ks, vs = make_scale(kind, 2, 4, 2, "NHD"), make_scale(kind, 2, 4, 2, "NHD")
    return rope, k, v, kc, vc, ks, vs, np.arange(4, dtype=np.int64)


def assert_refused(exc, match, fn, *arrays):
    before = [np.ascontiguousarray(a).view(np.uint8).copy() for a in arrays]
    with pytest.raises(exc, match=match):
        fn()
    for a, b in zip(arrays, before):
        assert np.array_equal(np.ascontiguousarray(a).view(np.uint8), b)


def test_int8_needs_its_scales():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("int8")
    assert_refused(pyrope.errors.TypeError, "k_scale is required", lambda: rope.cache_write(
        k, v, kc, vc, slots, v_scale=vs), kc, vc, vs)
    assert_refused(pyrope.errors.TypeError, "v_scale must be float32", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=ks, v_scale=vs.astype(np.float64)), kc, vc, ks)
    assert_refused(pyrope.errors.ValueError, "k_scale must have the cache's token shape", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=ks[:1], v_scale=vs), kc, vc, vs)
    ro = ks.copy()
    ro.flags.writeable = False
    assert_refused(pyrope.errors.ValueError, "k_scale is read-only", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=ro, v_scale=vs), kc, vc, vs)
    assert_refused(pyrope.errors.ValueError, "overlap", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=ks, v_scale=ks), kc, vc, ks)
    # scales inside the cache's own memory
    buf = np.zeros(2 * 4 * 2 * 64, np.int8)
    inside = buf[:64].view(np.float32)[:16].reshape(2, 4, 2)
    assert_refused(pyrope.errors.ValueError, "overlap", lambda: rope.cache_write(
        k, None, buf.reshape(2, 4, 2, 64), None, slots, k_scale=inside), buf)


def test_scales_that_do_not_belong():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("q8_0")
    assert_refused(pyrope.errors.TypeError, "k_scale: a q8_0 cache keeps its scales", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=1.0), kc, vc)
    fc = np.zeros((2, 4, 2, 64), np.float32)
    assert_refused(pyrope.errors.TypeError, "k_scale goes with an int8 or float8", lambda: rope.cache_write(
        k, None, fc, None, slots, k_scale=1.0), fc)
    assert_refused(pyrope.errors.TypeError, "v_scale goes with a v_cache", lambda: rope.cache_write(
        k, None, kc, None, slots, v_scale=1.0), kc)


@pytest.mark.parametrize("scale, exc, match", [
    (0.0, pyrope.errors.ValueError, "> 0"), (-1.0, pyrope.errors.ValueError, "> 0"),
    (float("nan"), pyrope.errors.ValueError, "finite"), (float("inf"), pyrope.errors.ValueError, "finite"),
    (1e-50, pyrope.errors.ValueError, "> 0"), (1e40, pyrope.errors.ValueError, "finite"),
    (True, pyrope.errors.TypeError, "number"), ("1", pyrope.errors.TypeError, "number"),
    (np.ones(2, np.float32), pyrope.errors.TypeError, "one number"),
])
def test_fp8_static_scale_checked(scale, exc, match):
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("fp8")
    assert_refused(exc, match, lambda: rope.cache_write(k, v, kc, vc, slots, k_scale=scale), kc, vc)


def test_fp8_scale_from_arrays_and_default():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("fp8")
    rope.cache_write(k, v, kc, vc, slots, k_scale=np.array([0.25], np.float32), v_scale=np.float64(0.5))
    a, b = kc.copy(), vc.copy()
    rope.cache_write(k, v, kc, vc, slots, k_scale=0.25, v_scale=0.5)
    assert np.array_equal(a.view(np.uint8), kc.view(np.uint8)) and np.array_equal(b.view(np.uint8), vc.view(np.uint8))
    rope.cache_write(k, None, kc, None, slots)   # vLLM's default scale, 1.0
    check_write(rope, "fp8", k, None, kc, None, 1.0, None, slots, "NHD", np.arange(4))


def test_shapes_and_types_refused():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("q8_0")
    assert_refused(pyrope.errors.TypeError, "float64 data", lambda: rope.cache_write(
        k.astype(np.float64), None, kc, None, slots), kc)
    bad = np.zeros((2, 4, 2, 3), pyrope.Q8_0)
    assert_refused(pyrope.errors.ValueError, "q8_0 blocks", lambda: rope.cache_write(k, None, bad, None, slots), bad)
    rope48 = Rope(head_dim=48, base=10000.0, layout="split_half")
    b48 = np.zeros((2, 4, 2, 48 * 34 // 32), np.uint8)
    assert_refused(pyrope.errors.ValueError, "multiple of 32", lambda: rope48.cache_write(
        rand((4, 2, 48)), None, b48, None, slots), b48)
    wrong = np.zeros((2, 4, 2, 67), np.uint8)
    assert_refused(pyrope.errors.ValueError, "68 bytes per head", lambda: rope.cache_write(
        k, None, wrong, None, slots), wrong)
    i8 = np.zeros((2, 4, 2, 64), np.int8)
    mixed = np.zeros((2, 4, 2, 64), F8)
    ks8 = np.zeros((2, 4, 2), np.float32)
    rope.cache_write(k, v, i8, mixed, slots, k_scale=ks8, v_scale=0.1)   # kinds may differ between k and v
    assert_refused(pyrope.errors.ValueError, "slot_mapping holds slot 1 twice", lambda: rope.cache_write(
        k, v, i8, mixed, np.array([0, 1, 1, 2]), k_scale=ks8, v_scale=0.1), i8, mixed, ks8)


def test_uint8_bytes_are_q8_0_blocks():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("q8_0")
    kb = np.full((2, 4, 2, 68), SENTINEL, np.uint8)
    rope.cache_write(k, v, kc, vc, slots)
    out = rope.cache_write(k, None, kb, None, slots)
    assert out[0] is kb
    assert np.array_equal(kb.view(pyrope.Q8_0).view(np.uint8), kc.view(np.uint8))


def test_torch_caches():
    torch = pytest.importorskip("torch")
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    k, v = torch.randn(6, 2, 64), torch.randn(6, 2, 64)
    slots = torch.tensor([5, 0, 3, -1, 7, 2])
    kc = torch.zeros(2, 4, 2, 64, dtype=torch.float8_e4m3fn)
    vc = torch.zeros(2, 4, 2, 64, dtype=torch.int8)
    vs = torch.zeros(2, 4, 2)
    before = vs._version
    out = rope.cache_write(k, v, kc, vc, slots, k_scale=torch.tensor(0.05), v_scale=vs)
    assert out[0] is kc and out[1] is vc and vs._version > before
    s = slots.numpy()
    live = s != -1
    want = qf.fp8(rotated32(rope, k.numpy(), np.arange(6))[live], 0.05)
    assert np.array_equal(kc.view(torch.uint8).numpy().reshape(8, 2, 64)[s[live]], want)
    q, sc = qf.int8(v.numpy()[live])
    assert np.array_equal(vc.numpy().reshape(8, 2, 64)[s[live]], q)
    assert np.array_equal(vs.numpy().reshape(8, 2)[s[live]], sc)
    values = pyrope.dequantize(kc, scale=0.05)
    assert isinstance(values, torch.Tensor) and values.dtype == torch.float32
    kb = torch.zeros(2, 4, 2, 68, dtype=torch.uint8)
    rope.cache_write(k, None, kb, None, slots)
    want = qf.q8_0(rotated32(rope, k.numpy(), np.arange(6))[live])
    assert np.array_equal(kb.numpy().reshape(8, 2, 68)[s[live]], want)


# ---- the memoised decode write: the general path's bits and refusals -------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_decode_writes_take_the_general_paths_bits(kind):
    """A decode step through the memo (C-contiguous k, v) and the same step through the general
    path (k, v as strided views) store the same bytes; a changed static scale is not reused."""
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    k, v = rand((16, 2, 64), seed=31), rand((16, 2, 64), seed=32)
    slots = np.arange(16, dtype=np.int64) * 3
    pos = np.arange(16, dtype=np.int64) * 5 + 1
    results = []
    for contiguous in (True, False, True):
        kk = k if contiguous else np.concatenate([k, k], axis=-1)[..., :64]
        vv = v if contiguous else np.concatenate([v, v], axis=-1)[..., :64]
        kc, vc = make_cache(kind, 8, 8, 2, 64, "NHD"), make_cache(kind, 8, 8, 2, 64, "NHD")
        ks, vs = make_scale(kind, 8, 8, 2, "NHD", 0.02), make_scale(kind, 8, 8, 2, "NHD", 0.04)
        for _ in range(2):   # the second call hits the memo
            rope.cache_write(kk, vv, kc, vc, slots, positions=pos, k_scale=ks, v_scale=vs)
        results.append([np.ascontiguousarray(a).view(np.uint8).copy() for a in (kc, vc)] +
                       ([ks.copy(), vs.copy()] if kind == "int8" else []))
        check_write(rope, kind, k, v, kc, vc, ks, vs, slots, "NHD", pos)
    for a, b in zip(results[0], results[1]):
        assert np.array_equal(a, b)
    if kind == "fp8":   # another static scale after the memo planned one
        kc, vc = make_cache(kind, 8, 8, 2, 64, "NHD"), make_cache(kind, 8, 8, 2, 64, "NHD")
        rope.cache_write(k, v, kc, vc, slots, positions=pos, k_scale=0.5, v_scale=0.25)
        check_write(rope, kind, k, v, kc, vc, 0.5, 0.25, slots, "NHD", pos)


def test_decode_write_refusals_after_the_memo_planned():
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("int8")
    rope.cache_write(k, v, kc, vc, slots, k_scale=ks, v_scale=vs)
    rope.cache_write(k, v, kc, vc, slots, k_scale=ks, v_scale=vs)
    ro = ks.copy()
    ro.flags.writeable = False
    assert_refused(pyrope.errors.ValueError, "k_scale is read-only", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=ro, v_scale=vs), kc, vc, vs)
    both = np.zeros((2, 2, 4, 2), np.float32)   # k_scale and v_scale in one buffer, overlapping
    assert_refused(pyrope.errors.ValueError, "overlap", lambda: rope.cache_write(
        k, v, kc, vc, slots, k_scale=both[0], v_scale=both[0]), kc, vc)
    assert_refused(pyrope.errors.ValueError, "slot_mapping holds slot 2 twice", lambda: rope.cache_write(
        k, v, kc, vc, np.array([0, 2, 2, 3]), k_scale=ks, v_scale=vs), kc, vc, ks, vs)


# ---- every instruction set, through the public calls ---------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_every_instruction_set_stores_the_same_bytes(kind):
    """cache_write and shift_keys under each ISA this CPU runs give the formulas' bytes (the
    kernels are compared one by one in tests/c/kernels_identical.c; this is the whole call),
    on heads with ties, zeros, a NaN and huge values mixed in."""
    rope = Rope(head_dim=96, base=10000.0, layout="interleaved")
    k, v = rand((21, 3, 96), seed=41), rand((21, 3, 96), seed=42, scale=300.0)
    k[2, 1] = 0
    k[5, 0, 7] = np.nan
    v[3, 2, :6] = [127.0, 2.5, -2.5, 0.5, 1e30, -1e-30]
    slots = np.random.default_rng(3).permutation(48)[:21].astype(np.int64)
    pos = np.arange(21, dtype=np.int64) * 13
    stored = {}
    for isa in pyrope.supported_isas():
        with pyrope.forced_isa(isa):
            kc, vc = make_cache(kind, 6, 8, 3, 96, "NHD"), make_cache(kind, 6, 8, 3, 96, "NHD")
            ks, vs = make_scale(kind, 6, 8, 3, "NHD", 0.05), make_scale(kind, 6, 8, 3, "NHD", 2.0)
            rope.cache_write(k, v, kc, vc, slots, positions=pos, k_scale=ks, v_scale=vs)
            rope.shift_keys(kc, slots, pos, pos - 7, k_scale=ks)
            stored[isa] = [np.ascontiguousarray(a).view(np.uint8).copy() for a in (kc, vc)] + (
                [ks.view(np.uint8).copy(), vs.view(np.uint8).copy()] if kind == "int8" else [])
    for isa, arrays in stored.items():
        assert all(np.array_equal(a, b) for a, b in zip(arrays, stored["scalar"])), isa
    want_v, _ = qf.quantised(kind, v.astype(np.float32), 2.0)   # and the values are the formulas'
    assert np.array_equal(stored["scalar"][1].reshape(48, 3, -1)[slots], want_v)


def test_the_memo_keeps_no_cache_alive():
    """A decode write's plan is memoised; the caches and scales of the call that planned it are not."""
    import gc
    import weakref
    rope, k, v, kc, vc, ks, vs, slots = refusal_setup("int8")
    rope.cache_write(k, v, kc, vc, slots, k_scale=ks, v_scale=vs)
    refs = [weakref.ref(a) for a in (kc, vc, ks, vs)]
    del kc, vc, ks, vs
    gc.collect()
    assert all(r() is None for r in refs)
