"""Rope.cache_write: keys normalised and rotated at their positions, written with
their values into the slots of a paged cache, in one pass.

What lands in a slot is compared with an independent computation: the key
rotated by Rope.apply at its logical position (whose own accuracy
tests/kernel checks against the reference) and cast once to the cache's type
by numpy, the value copied bit for bit; every other slot is untouched. A slot
is a place, not a position: keys in shuffled slots carry their positions.
Refusals name the argument and write nothing."""
import ml_dtypes
import numpy as np
import pytest

import pyrope
from pyrope import RMSNorm, Rope, RopeError

BF16 = np.dtype(ml_dtypes.bfloat16)
SENTINEL = 0x5A   # every byte of a fresh cache: a slot left alone keeps it


def rand(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)


def cache(blocks, block_size, heads, dim, dtype, layout):
    shape = (blocks, block_size, heads, dim) if layout == "NHD" else (blocks, heads, block_size, dim)
    c = np.empty(shape, dtype)
    c.view(np.uint8)[...] = SENTINEL
    return c


def slots_view(c, layout):
    """[num_slots, heads, dim] view of a cache (slot = block * block_size + offset)."""
    if layout == "HND":
        c = c.transpose(0, 2, 1, 3)
    return c.reshape(-1, c.shape[2], c.shape[3]) if layout == "NHD" else np.ascontiguousarray(c).reshape(
        -1, c.shape[2], c.shape[3])


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def block_table_slots(n_tokens, block_size, blocks, seed=0):
    """Slots of n_tokens through a shuffled block table, with a -1 (padding) every 5th token."""
    order = np.random.default_rng(seed).permutation(blocks)
    s = np.array([order[t // block_size] * block_size + t % block_size for t in range(n_tokens)], np.int64)
    s[4::5] = -1
    return s


def check(rope, k, v, kc, vc, slots, layout, positions, norm=None):
    """Every written slot holds apply(k, norm) at its position, cast once; v as given; the rest untouched."""
    k2 = k.reshape(-1, *k.shape[-2:])
    pos = np.broadcast_to(positions, k.shape[:-2]).reshape(-1)
    want_k = rope.apply(k2[:, None], pos[:, None], norm=norm)[:, 0]   # each token alone, at its position
    flat = slots.reshape(-1)
    written = flat != -1
    ks = slots_view(kc, layout)
    assert np.array_equal(bits(ks[flat[written]]), bits(want_k[written].astype(kc.dtype)))
    others = np.setdiff1d(np.arange(ks.shape[0]), flat[written])
    assert np.all(bits(ks[others]) == SENTINEL)
    if v is not None:
        vs = slots_view(vc, layout)
        assert np.array_equal(bits(vs[flat[written]]), bits(v.reshape(-1, *v.shape[-2:])[written].astype(vc.dtype)))
        assert np.all(bits(vs[others]) == SENTINEL)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("rope_layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("with_norm", [False, True])
def test_prefill_through_a_shuffled_block_table(layout, rope_layout, with_norm):
    rope = Rope(64, layout=rope_layout, rotary_dim=48)
    T, H, bs, blocks = 37, 2, 4, 12
    k, v = rand((T, H, 64), seed=1), rand((T, H, 64), seed=2)
    kc, vc = cache(blocks, bs, H, 64, np.float32, layout), cache(blocks, bs, H, 64, np.float32, layout)
    slots = block_table_slots(T, bs, blocks).astype(np.int32)
    norm = RMSNorm(np.linspace(0.5, 1.5, 64), eps=1e-5) if with_norm else None
    got = rope.cache_write(k, v, kc, vc, slots, offset=100, norm=norm, layout=layout)
    assert got[0] is kc and got[1] is vc
    check(rope, k, v, kc, vc, slots, layout, 100 + np.arange(T), norm)


def test_decode_batch_with_positions_and_batch_dims():
    rope = Rope(32, layout="split_half")
    B, S, H = 3, 2, 4
    k, v = rand((B, S, H, 32), seed=3), rand((B, S, H, 32), seed=4)
    kc, vc = cache(8, 4, H, 32, np.float32, "NHD"), cache(8, 4, H, 32, np.float32, "NHD")
    slots = np.array([[5, 6], [17, -1], [30, 0]])
    positions = np.array([[9, 10], [3, 4], [1000, 1001]])
    rope.cache_write(k, v, kc, vc, slots, positions=positions)
    check(rope, k, v, kc, vc, slots, "NHD", positions)
    # the same keys at other positions in other slots: each turns by its own position
    kc2, vc2 = cache(8, 4, H, 32, np.float32, "NHD"), cache(8, 4, H, 32, np.float32, "NHD")
    rope.cache_write(k, v, kc2, vc2, slots[::-1].copy(), positions=positions[::-1].copy())
    assert not np.array_equal(bits(kc2), bits(kc))
    check(rope, k, v, kc2, vc2, slots[::-1], "NHD", positions[::-1])


@pytest.mark.parametrize("k_dtype, cache_dtype", [
    (np.float32, np.float16), (np.float32, BF16), (np.float32, np.float64), (np.float16, np.float32),
    (BF16, BF16), (np.float64, np.float32), (np.float64, np.float64), (np.float16, BF16)])
def test_the_cache_may_store_another_type_rounded_once(k_dtype, cache_dtype):
    rope = Rope(16, layout="interleaved")
    k, v = rand((9, 2, 16), k_dtype, 5), rand((9, 2, 16), k_dtype, 6)
    kc, vc = cache(3, 4, 2, 16, cache_dtype, "HND"), cache(3, 4, 2, 16, cache_dtype, "HND")
    slots = np.array([0, 1, 2, 3, 4, 5, 6, 7, 11])
    rope.cache_write(k, v, kc, vc, slots, layout="HND")
    if np.dtype(k_dtype) in (np.dtype(np.float16), BF16):
        # the rotation's float32 value, rounded once to the cache type
        want = rope.apply(k.astype(np.float32))
        ks = slots_view(kc, "HND")
        assert np.array_equal(bits(ks[slots]), bits(want.astype(cache_dtype)))
        assert np.array_equal(bits(slots_view(vc, "HND")[slots]), bits(v.astype(np.float32).astype(cache_dtype)))
    else:
        check(rope, k, v, kc, vc, slots, "HND", np.arange(9))


def test_keys_only_and_every_isa_gives_the_same_bits():
    rope = Rope(128, layout="split_half")
    norm = RMSNorm(np.linspace(-1, 1, 8 * 128), over="token")
    k = rand((70, 8, 128), BF16, 7)                     # more than 64 tokens: numpy's duplicate check
    slots = np.random.default_rng(0).permutation(200)[:70]
    results = []
    for isa in pyrope.supported_isas():
        kc = cache(25, 8, 8, 128, BF16, "NHD")
        with pyrope.forced_isa(isa):
            assert rope.cache_write(k, None, kc, None, slots, norm=norm) == (kc, None)
        results.append(bits(kc))
    assert all(np.array_equal(r, results[0]) for r in results)
    want = rope.apply(k, norm=norm)
    assert np.array_equal(bits(slots_view(kc, "NHD")[slots]), bits(want))


def test_empty_and_all_padding_write_nothing():
    rope = Rope(16, layout="split_half")
    kc = cache(2, 4, 1, 16, np.float32, "NHD")
    rope.cache_write(np.zeros((0, 1, 16), np.float32), None, kc, None, np.zeros(0, np.int64))
    rope.cache_write(rand((3, 1, 16)), None, kc, None, np.full(3, -1))
    assert np.all(bits(kc) == SENTINEL)


def test_strided_keys_are_read_through_a_copy():
    rope = Rope(16, layout="split_half")
    wide = rand((5, 2, 32))
    k = wide[..., ::2]
    kc = cache(2, 4, 2, 16, np.float32, "NHD")
    rope.cache_write(k, None, kc, None, np.array([7, 0, 3, 2, 1]))
    check(rope, k, None, kc, None, np.array([7, 0, 3, 2, 1]), "NHD", np.arange(5))


def refused(error, words, *args, **kw):
    rope = Rope(16, layout="split_half")
    k, v = rand((4, 2, 16), seed=8), rand((4, 2, 16), seed=9)
    kc, vc = cache(2, 4, 2, 16, np.float32, "NHD"), cache(2, 4, 2, 16, np.float32, "NHD")
    call = dict(k=k, v=v, k_cache=kc, v_cache=vc, slot_mapping=np.array([0, 1, 2, 3]))
    for name, value in kw.items():
        call[name] = value(call) if callable(value) else value
    rest = {n: call.pop(n) for n in list(call) if n in ("positions", "offset", "norm", "layout")}
    with pytest.raises(error, match=words) as e:
        rope.cache_write(call["k"], call["v"], call["k_cache"], call["v_cache"], call["slot_mapping"], **rest)
    assert isinstance(e.value, RopeError)
    for c in (kc, vc):
        assert np.all(bits(c) == SENTINEL)


@pytest.mark.parametrize("kw, error, words", [
    (dict(slot_mapping=np.array([0, 1, 8, 2])), ValueError, r"slot_mapping.*\[0, 8\).*got 8"),
    (dict(slot_mapping=np.array([0, -2, 1, 2])), ValueError, "slot_mapping.*got -2"),
    (dict(slot_mapping=np.array([0, 1, 1, 2])), ValueError, "slot_mapping holds slot 1 twice"),
    (dict(slot_mapping=np.array([0, 1, 2])), ValueError, "slot_mapping must have k's token shape"),
    (dict(slot_mapping=np.array([0.0, 1, 2, 3])), TypeError, "slot_mapping must be an integer array"),
    (dict(layout="NDH"), ValueError, "layout must be 'NHD'"),
    (dict(k_cache=lambda c: np.zeros((2, 4, 3, 16), np.float32)), ValueError, "k_cache must be.*kv_heads=2"),
    (dict(k_cache=lambda c: np.zeros((8, 2, 16), np.float32)), ValueError, "k_cache must be a 4-D cache"),
    (dict(k_cache=lambda c: np.zeros((2, 4, 2, 16), np.int16)), TypeError, "k_cache must have dtype"),
    (dict(k_cache=lambda c: np.zeros((2, 4, 2, 32), np.float32)[..., ::2]), ValueError, "k_cache.*contiguous"),
    (dict(v_cache=lambda c: np.zeros((3, 4, 2, 16), np.float32)), ValueError, "v_cache must have k_cache's shape"),
    (dict(v_cache=None), ValueError, "v and v_cache go together"),
    (dict(v=lambda c: c["v"][:, :1].copy()), ValueError, "v must have k's shape"),
    (dict(v=lambda c: c["v"].astype(np.float16)), TypeError, "v must have dtype float32"),
    (dict(k=lambda c: c["k_cache"][0]), ValueError, "k and k_cache overlap"),
    (dict(v=lambda c: c["k_cache"][1]), ValueError, "v and k_cache overlap"),
    (dict(v_cache=lambda c: c["k_cache"]), ValueError, "k_cache and v_cache overlap"),
    (dict(norm=RMSNorm(np.ones(8))), ValueError, r"norm\.weight"),
    (dict(norm="rms"), TypeError, "norm must be a pyrope.RMSNorm"),
    (dict(positions=np.arange(3)), ValueError, "positions must have shape"),
    (dict(positions=np.arange(4), offset=2), ValueError, "either positions or offset"),
])
def test_refusals_name_the_argument_and_write_nothing(kw, error, words):
    refused(error, words, **kw)


def test_a_read_only_cache_and_float64_into_half_precision_are_refused():
    ro = cache(2, 4, 2, 16, np.float32, "NHD")
    ro.flags.writeable = False
    refused(ValueError, "k_cache is read-only", k_cache=ro)
    rope = Rope(16, layout="split_half")
    with pytest.raises(TypeError, match="float64 data are written to a float64 or float32 cache"):
        rope.cache_write(rand((1, 1, 16), np.float64), None, np.zeros((1, 1, 1, 16), BF16), None, np.zeros(1, int))


def test_torch_tensors_are_written_in_their_own_storage():
    torch = pytest.importorskip("torch")
    rope = Rope(32, layout="split_half")
    k, v = torch.randn(6, 2, 32), torch.randn(6, 2, 32)
    kc = torch.zeros(4, 2, 2, 32, dtype=torch.bfloat16)    # HND
    vc = torch.zeros(4, 2, 2, 32, dtype=torch.bfloat16)
    slots = torch.tensor([6, 1, 0, 7, 3, 2], dtype=torch.int32)
    norm = RMSNorm(torch.nn.Parameter(torch.linspace(0.5, 1.5, 32)))
    version = kc._version
    got = rope.cache_write(k, v, kc, vc, slots, offset=5, norm=norm, layout="HND")
    assert got[0] is kc and got[1] is vc and kc._version > version
    ka, va = kc.view(torch.int16).numpy().view(BF16), vc.view(torch.int16).numpy().view(BF16)
    want = rope.apply(k.numpy(), offset=5, norm=norm).astype(BF16)
    s = slots.numpy()
    assert np.array_equal(bits(slots_view(ka, "HND")[s]), bits(want))
    assert np.array_equal(bits(slots_view(va, "HND")[s]), bits(v.numpy().astype(BF16)))
    with pytest.raises(ValueError, match="not differentiable"):
        rope.cache_write(k.requires_grad_(), None, kc, None, slots)


def test_caches_as_views_of_larger_storage():
    """A layer's cache inside a [layers, ...] allocation, blocks in reverse order,
    a memory-mapped file: written where they are."""
    rope = Rope(16, layout="split_half")
    k = rand((3, 2, 16), seed=10)
    slots = np.array([0, 5, 15])
    stacked = np.zeros((4, 5, 4, 2, 16), np.float32)
    reversed_blocks = np.zeros((4, 4, 2, 16), np.float32)[::-1]
    for kc in (stacked[:, 2], reversed_blocks):
        rope.cache_write(k, None, kc, None, slots)
        assert np.array_equal(kc[slots // 4, slots % 4], rope.apply(k))
        assert np.count_nonzero(kc) == np.count_nonzero(rope.apply(k))
    assert not stacked[:, [0, 1, 3, 4]].any()


def test_a_cache_without_slots_takes_only_padding():
    rope = Rope(16, layout="split_half")
    k = rand((3, 2, 16))
    empty = np.zeros((0, 4, 2, 16), np.float32)
    rope.cache_write(k, k, empty, empty.copy(), np.full(3, -1))
    with pytest.raises(ValueError, match=r"slot_mapping must hold slots in \[0, 0\)"):
        rope.cache_write(k, k, empty, empty.copy(), np.array([0, -1, -1]))


@pytest.mark.parametrize("bad, error, words", [
    (np.array([0, 5, 2 ** 64 - 1, 1], np.uint64), ValueError, "got 18446744073709551615"),
    (np.array([True, False, True, False]), TypeError, "integer array"),
    (np.ma.array([0, 5, 7, 1]), TypeError, "masked"),
    ([0, 1, 2, 1], ValueError, "slot 1 twice"),
])
def test_hostile_slot_mappings(bad, error, words):
    refused(error, words, slot_mapping=bad)


def test_threads_writing_at_once_get_what_one_thread_gets():
    import threading
    rope = Rope(64, layout="interleaved")
    norm = RMSNorm(np.linspace(0.5, 1.5, 64))
    k, v = rand((16, 4, 64), seed=11), rand((16, 4, 64), seed=12)
    slots = np.random.default_rng(3).permutation(64)[:16]
    want = cache(16, 4, 4, 64, np.float32, "NHD")
    rope.cache_write(k, v, want, want.copy(), slots, offset=9, norm=norm)
    caches = [cache(16, 4, 4, 64, np.float32, "NHD") for _ in range(8)]
    errors = []

    def work(kc):
        try:
            for step in range(50):
                rope.cache_write(k, v, kc, np.empty_like(kc), slots, offset=9, norm=norm)
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(c,)) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(np.array_equal(bits(c), bits(want)) for c in caches)


def test_a_broadcast_slot_map_is_refused_before_any_work():
    """10**11 tokens of one broadcast key and one broadcast slot: refused from the
    map's strides, not scanned (work bounded by the memory given)."""
    rope = Rope(16, layout="split_half")
    k = np.broadcast_to(np.ones((1, 2, 16), np.float32), (10 ** 11, 2, 16))
    for slot in (-1, 3):
        slots = np.broadcast_to(np.int64(slot), (10 ** 11,))
        refused(ValueError, "slot_mapping .* broadcast view", k=k, v=None, v_cache=None, slot_mapping=slots)
