"""Rope.shift_keys: keys moved to new positions inside a paged cache, in place.

A float cache must get the bits pyrope.cache.rerotate gives the same keys
gathered out of it. A quantised cache must hold the engines' formulas
(tests/support/quant_formulas.py) applied to: the stored key dequantised
(numpy, gguf), rotated by the position difference (rerotate in float32),
and quantised again. Slots not listed, and -1 entries, keep their bytes."""
import ml_dtypes
import numpy as np
import pytest

import pyrope
import quant_formulas as qf
from pyrope import Rope

F8 = np.dtype(ml_dtypes.float8_e4m3fn)
BF16 = np.dtype(ml_dtypes.bfloat16)


def rand(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)


def per_slot(a, layout):
    if layout == "HND":
        a = np.swapaxes(a, 1, 2)
    return np.ascontiguousarray(a).reshape((-1,) + a.shape[2:])


def setup(kind, layout, dtype=np.float32, pairs="split_half", yarn=False, T=23, seed=0):
    # yarn: an attention factor of 1.14, which a shift must not apply again
    scaling = pyrope.Yarn(factor=4.0, original_max_position_embeddings=512) if yarn else None
    rope = Rope(head_dim=64, base=10000.0, layout=pairs, scaling=scaling)
    H, blocks, bs = 2, 5, 8
    shape = (blocks, bs, H) if layout == "NHD" else (blocks, H, bs)
    dt = {"int8": np.int8, "fp8": F8, "q8_0": pyrope.Q8_0}.get(kind, dtype)
    cache = np.zeros(shape + ((2,) if kind == "q8_0" else (64,)), dt)
    scale = np.zeros(shape, np.float32) if kind == "int8" else 0.02 if kind == "fp8" else None
    slots = np.random.default_rng(seed).permutation(blocks * bs)[:T].astype(np.int64)
    pos = np.arange(T, dtype=np.int64) + 100
    filler = rand((blocks * bs, H, 64), dtype if kind == "float" else np.float32, seed + 1)
    everyone = np.arange(blocks * bs, dtype=np.int64)
    rope.cache_write(filler, None, cache, None, everyone, positions=everyone + 7, layout=layout, k_scale=scale)
    k = rand((T, H, 64), dtype if kind == "float" else np.float32, seed + 2)
    rope.cache_write(k, None, cache, None, slots, positions=pos, layout=layout, k_scale=scale)
    return rope, cache, scale, slots, pos


def dequantised(kind, cache, scale, slots, layout):
    heads = per_slot(cache, layout)[slots]
    if kind == "int8":
        return heads.astype(np.float32) * per_slot(scale, layout)[slots][..., None]
    if kind == "fp8":
        return heads.astype(np.float32) * np.float32(scale)
    return qf.q8_0_values(heads.view(np.uint8).reshape(heads.shape[:2] + (-1,)))


def stored_bits(cache, slots, layout):
    heads = per_slot(cache, layout)[slots]
    return np.ascontiguousarray(heads).view(np.uint8).reshape(heads.shape[:2] + (-1,))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
@pytest.mark.parametrize("pairs", ["split_half", "interleaved"])
def test_float_cache_gives_rerotate_bits(layout, dtype, pairs):
    rope, cache, _, slots, pos = setup("float", layout, dtype, pairs, yarn=True)
    gathered = per_slot(cache, layout)[slots].copy()
    new = pos - 61
    pyrope.cache.rerotate(rope, gathered[None], pos[None], new[None])
    others = np.setdiff1d(np.arange(per_slot(cache, layout).shape[0]), slots)
    before = per_slot(cache, layout)[others].copy()
    assert rope.shift_keys(cache, slots, pos, new, layout=layout) is cache
    assert np.array_equal(stored_bits(cache, slots, layout), np.ascontiguousarray(gathered).view(np.uint8).reshape(
        gathered.shape[:2] + (-1,)))
    assert np.array_equal(per_slot(cache, layout)[others].view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize("kind", ["int8", "fp8", "q8_0"])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_quantised_cache_dequantise_rotate_requantise(kind, layout):
    rope, cache, scale, slots, pos = setup(kind, layout, yarn=True)
    new = pos * 3 - 17
    deq = dequantised(kind, cache, scale, slots, layout)
    rot = pyrope.cache.rerotate(rope, deq[None].copy(), pos[None], new[None])[0]   # float32, factor 1
    want, want_s = qf.quantised(kind, rot, scale)
    others = np.setdiff1d(np.arange(per_slot(cache, layout).shape[0]), slots)
    before = stored_bits(cache, others, layout).copy()
    rope.shift_keys(cache, slots, pos, new, layout=layout, k_scale=scale)
    assert np.array_equal(stored_bits(cache, slots, layout), want)
    if kind == "int8":
        assert np.array_equal(per_slot(scale, layout)[slots].view(np.uint32), want_s.view(np.uint32))
    assert np.array_equal(stored_bits(cache, others, layout), before)


def test_padding_broadcast_positions_and_batches():
    rope, cache, scale, slots, pos = setup("int8", "NHD")
    s2 = slots[:20].reshape(2, 10).copy()
    s2[1, 4] = -1
    kept = stored_bits(cache, np.array([s2[1, 4]]) if s2[1, 4] >= 0 else slots[19:20], "NHD")
    gathered_from = pos[:20].reshape(2, 10)
    deq = dequantised("int8", cache, scale, s2[s2 != -1], "NHD")
    rot = pyrope.cache.rerotate(rope, deq[None].copy(), gathered_from[s2 != -1][None],
                                gathered_from[s2 != -1][None] - 5)[0]
    want, _ = qf.quantised("int8", rot, scale)
    skipped = slots[:20].reshape(2, 10)[1, 4]
    skipped_before = stored_bits(cache, np.array([skipped]), "NHD").copy()
    rope.shift_keys(cache, s2, gathered_from, gathered_from - 5, k_scale=scale)
    assert np.array_equal(stored_bits(cache, s2[s2 != -1], "NHD"), want)
    assert np.array_equal(stored_bits(cache, np.array([skipped]), "NHD"), skipped_before)
    del kept
    # one difference for every key: a scalar from and to positions broadcast
    rope, cache, _, slots, pos = setup("float", "NHD")
    g = per_slot(cache, "NHD")[slots].copy()
    pyrope.cache.rerotate(rope, g[None], np.full((1, slots.size), 9), np.full((1, slots.size), 2))
    rope.shift_keys(cache, slots, 9, 2)
    assert np.array_equal(per_slot(cache, "NHD")[slots].view(np.uint8), g.view(np.uint8))


def test_repeated_shifts_stay_within_quantisation_error():
    """Shifting back and forth: the error against keys quantised once at their final position stays small."""
    rope = Rope(head_dim=64, base=10000.0, layout="split_half")
    k = rand((16, 2, 64), seed=4)
    cache = np.zeros((2, 8, 2, 2), pyrope.Q8_0)
    slots = np.arange(16, dtype=np.int64)
    rope.cache_write(k, None, cache, None, slots, offset=50)
    for _ in range(10):
        rope.shift_keys(cache, slots, np.arange(16) + 50, np.arange(16) + 10)
        rope.shift_keys(cache, slots, np.arange(16) + 10, np.arange(16) + 50)
    once = rope.apply(k[None], offset=50)[0]
    got = pyrope.dequantize(cache).reshape(16, 2, 64)
    amax = np.abs(once).max()
    assert np.abs(got - once).max() < 0.05 * amax   # 20 requantisations of a 127-step grid


@pytest.mark.parametrize("call, exc, match", [
    (lambda r, c, s, sl, p: r.shift_keys(c, sl, p, p + 2 ** 31, k_scale=s), pyrope.errors.ValueError, "within"),
    (lambda r, c, s, sl, p: r.shift_keys(c, np.r_[sl[:2], sl[:1]], p[:3], p[:3], k_scale=s), pyrope.errors.ValueError,
     "twice"),
    (lambda r, c, s, sl, p: r.shift_keys(c, sl, p[:3], p[:3], k_scale=s), pyrope.errors.ValueError, "from_positions must"),
    (lambda r, c, s, sl, p: r.shift_keys(c, sl, p, p, layout="BHD", k_scale=s), pyrope.errors.ValueError, "layout"),
    (lambda r, c, s, sl, p: r.shift_keys(c, sl * 100, p, p, k_scale=s), pyrope.errors.ValueError, "slot_mapping"),
    (lambda r, c, s, sl, p: r.shift_keys(c, 3, 1, 2, k_scale=s), pyrope.errors.ValueError, "scalar"),
    (lambda r, c, s, sl, p: r.shift_keys(c, sl, p, p), pyrope.errors.TypeError, "k_scale is required"),
    (lambda r, c, s, sl, p: r.shift_keys(c.astype(np.int16), sl, p, p), pyrope.errors.TypeError, "k_cache"),
    (lambda r, c, s, sl, p: r.shift_keys([1], sl, p, p), pyrope.errors.TypeError, "k_cache"),
])
def test_refusals_write_nothing(call, exc, match):
    rope, cache, scale, slots, pos = setup("int8", "NHD")
    before, sbefore = cache.copy(), scale.copy()
    with pytest.raises(exc, match=match):
        call(rope, cache, scale, slots, pos)
    assert np.array_equal(cache, before) and np.array_equal(scale, sbefore)


def test_sectioned_rope_refused():
    rope = Rope(head_dim=64, base=10000.0, layout="split_half", mrope_section=[8, 12, 12])
    cache = np.zeros((2, 4, 2, 64), np.float32)
    with pytest.raises(pyrope.errors.ValueError, match="sectioned"):
        rope.shift_keys(cache, np.arange(3), np.arange(3), np.arange(3))


def test_torch_caches():
    torch = pytest.importorskip("torch")
    rope, cache, scale, slots, pos = setup("int8", "NHD")
    tc, ts = torch.from_numpy(cache.copy()), torch.from_numpy(scale.copy())
    rope.shift_keys(cache, slots, pos, pos + 4, k_scale=scale)
    v = tc._version
    assert rope.shift_keys(tc, torch.from_numpy(slots), torch.from_numpy(pos), torch.from_numpy(pos + 4),
                           k_scale=ts) is tc
    assert tc._version > v
    assert np.array_equal(tc.numpy(), cache) and np.array_equal(ts.numpy(), scale)
    rope, cache, scale, slots, pos = setup("fp8", "NHD")
    tc = torch.from_numpy(cache.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    rope.shift_keys(cache, slots, pos, pos - 3, k_scale=scale)
    rope.shift_keys(tc, slots, pos, pos - 3, k_scale=torch.tensor(scale))
    assert np.array_equal(tc.view(torch.uint8).numpy(), cache.view(np.uint8))
