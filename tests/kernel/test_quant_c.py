"""rope_rotate_quantised, the C entry of a quantised store per staged tensor (int8 with
a scale per head, float8 e4m3 with a static scale, ggml's q8_0) and of an in-place
cache read (keys shifted where they lie), called through cffi.

The values against computations written here from pyrope.h's formulas with numpy,
ml_dtypes (float8 e4m3fn) and gguf's own q8_0 quantiser (bit-exact with ggml's
reference): at position 0 (cos 1, sin 0: the rotation is the identity) the store is
the quantised input; at real positions it is pyrope's own float32 rotation
(Rope.apply) quantised; an in-place shift is dequantise, rotate by the delta in
float32, quantise. Every instruction set gives the scalar bits. And every refusal,
each before anything is written."""
import ml_dtypes
import numpy as np
import pytest

import pyrope
from pyrope._engine.binding import ffi, lib

try:
    import gguf.quants
except ImportError:   # pragma: no cover - the test extra installs gguf
    gguf = None

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
CODES = {np.dtype(np.float32): lib.ROPE_F32, np.dtype(np.float16): lib.ROPE_F16, BF16: lib.ROPE_BF16,
         np.dtype(np.float64): lib.ROPE_F64}
LAYOUTS = {"split_half": lib.ROPE_SPLIT_HALF, "interleaved": lib.ROPE_INTERLEAVED}
INT8, FP8_E4M3, Q8_0 = lib.ROPE_QUANT_INT8, lib.ROPE_QUANT_FP8_E4M3, lib.ROPE_QUANT_Q8_0
KINDS = {"int8": INT8, "fp8": FP8_E4M3, "q8_0": Q8_0}
QK = lib.ROPE_Q8_0_VALUES
ISAS = pyrope.supported_isas()
needs_gguf = pytest.mark.skipif(gguf is None, reason="gguf (its q8_0 quantiser) is not installed")


def address(a):
    return a.__array_interface__["data"][0]


def ptr(a, ctype="void *", byte_offset=0):
    return ffi.cast(ctype, address(a) + byte_offset)


def estrides(a, esize=None):
    """a's first three strides in elements (of esize bytes; default a's itemsize)."""
    return [s // (esize or a.itemsize) for s in a.strides[:3]]


# ---- the formulas, in numpy -----------------------------------------------------------

def int8_quantise(x):
    """[..., head_dim] float32: per head s = float32(amax) / 127, q = rint(x / s) clipped."""
    x = np.asarray(x, np.float32)
    s = (np.abs(x).max(axis=-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.rint(x / s[..., None])
    q = np.where(np.isnan(r), 0, np.clip(r, -127, 127)).astype(np.int8)
    return q, s


def fp8_quantise(x, scale):
    """float8 e4m3fn of the float32 quotient clamped to +-448, as bytes."""
    v = np.clip(np.asarray(x, np.float32) / np.float32(scale), -448, 448).astype(np.float32)
    return v.astype(FP8).view(np.uint8)


def q8_0_quantise(x):
    """[..., head_dim] float32 into [..., head_dim / 32, 34] q8_0 blocks (gguf's numpy quantiser)."""
    x = np.asarray(x, np.float32)
    blocks = gguf.quants.quantize(x.reshape(-1, x.shape[-1]), gguf.GGMLQuantizationType.Q8_0)
    return blocks.reshape(x.shape[:-1] + (x.shape[-1] // QK, lib.ROPE_Q8_0_BYTES))


def q8_0_dequantise(blocks):
    head_dim = blocks.shape[-2] * QK
    flat = gguf.quants.dequantize(blocks.reshape(-1, blocks.shape[-2] * blocks.shape[-1]),
                                  gguf.GGMLQuantizationType.Q8_0)
    return flat.reshape(blocks.shape[:-2] + (head_dim,)).astype(np.float32)


def quantise(kind, x, scale=0.5):
    """(the cache's bytes, the int8 scales or None)."""
    if kind == INT8:
        return int8_quantise(x)
    if kind == FP8_E4M3:
        return fp8_quantise(x, scale), None
    return q8_0_quantise(x), None


def dequantise(kind, q, scales=None, scale=0.5):
    if kind == INT8:
        return (q.astype(np.float32) * scales[..., None]).astype(np.float32)
    if kind == FP8_E4M3:
        return (q.view(FP8).astype(np.float32) * np.float32(scale)).astype(np.float32)
    return q8_0_dequantise(q)


def cache_like(kind, shape_heads, head_dim, fill=0x5A):
    """An empty cache [..., head_dim] of kind's elements: int8, fp8 bytes or q8_0 blocks."""
    if kind == INT8:
        return np.full(shape_heads + (head_dim,), fill & 0x7F, np.int8)
    if kind == FP8_E4M3:
        return np.full(shape_heads + (head_dim,), fill, np.uint8)
    return np.full(shape_heads + (head_dim // QK, lib.ROPE_Q8_0_BYTES), fill, np.uint8)


def out_strides(kind, cache):
    return estrides(cache, lib.ROPE_Q8_0_BYTES if kind == Q8_0 else 1)


# ---- a call -------------------------------------------------------------------------------

class Call:
    """One rope_rotate_quantised call's descriptors; arrays kept alive with it. Angles on
    the fly from the Rope's own frequencies, at positions (one per token) or offset + s."""

    def __init__(self, dtype=np.float32, n_seq=4, head_dim=64, rotary_dim=None, layout="split_half",
                 positions=None, offset=0):
        rotary_dim = rotary_dim or head_dim
        self.rope = pyrope.Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
        self.inv_freq = np.ascontiguousarray(self.rope.inv_freq, np.float64)
        self.op = ffi.new("rope_op *", dict(dtype=CODES[np.dtype(dtype)], layout=LAYOUTS[layout], inverse=0,
                                            n_batch=1, n_seq=n_seq, head_dim=head_dim, rotary_dim=rotary_dim,
                                            n_threads=1))
        self.angles = ffi.new("rope_angles *")
        if positions is None:
            self.positions = offset + np.arange(n_seq, dtype=np.int64)
            self.angles.source = lib.ROPE_POS_OFFSET
            self.angles.offset = offset
        else:
            self.positions = np.ascontiguousarray(positions, np.int64)
            self.angles.source = lib.ROPE_POS_LIST
            self.angles.positions = ptr(self.positions, "int64_t *")
            self.angles.strides = [0, 1, 0]
        self.angles.inv_freq = ptr(self.inv_freq, "double *")
        self.angles.scale = self.rope.attention_factor
        self.keep = [self.inv_freq, self.positions]
        self.tensors, self.stages, self.quants = [], [], []

    def add(self, x, out, o_strides, n_heads=None, kind=0, in_place=0, scale=0.0, scales=None, scales_ptr=None,
            scale_strides=(0, 0, 0), copy=0, norm=0, eps=1e-6, convert=0, out_dtype=0, slots=None, n_slots=0,
            block_size=1):
        self.keep += [x, out, scales, slots]
        self.tensors.append(dict(x=ffi.NULL if x is None else ptr(x), out=ptr(out),
                                 n_heads=x.shape[2] if n_heads is None else n_heads,
                                 x_strides=[0, 0, 0] if x is None else estrides(x), out_strides=o_strides))
        self.stages.append(dict(copy=copy, norm=norm, norm_eps=eps, convert=convert, out_dtype=out_dtype,
                                slots=ffi.NULL if slots is None else ptr(slots, "int64_t *"),
                                slot_strides=[0, 1], n_slots=n_slots, block_size=block_size))
        if scales_ptr is None:
            scales_ptr = ffi.NULL if scales is None else ptr(scales, "float *")
        self.quants.append(dict(kind=kind, in_place=in_place, scale=scale, scales=scales_ptr,
                                scale_strides=list(scale_strides)))
        return self

    def run(self, isa=None):
        t = ffi.new("rope_tensor[]", self.tensors)
        st = ffi.new("rope_stage[]", self.stages)
        q = ffi.new("rope_quant[]", self.quants)
        if isa is None:
            return lib.rope_rotate_quantised(self.op, t, st, q, len(self.tensors), self.angles)
        with pyrope.forced_isa(isa):
            return lib.rope_rotate_quantised(self.op, t, st, q, len(self.tensors), self.angles)


def rand(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def store(kind, x, dtype=np.float32, positions=None, offset=0, copy=0, scale=0.5, layout="split_half",
          rotary_dim=None, isa=None):
    """x [1, seq, heads, head_dim] rotated (or copied) and quantised by the C call,
    without slots: (the cache, the int8 scales or None)."""
    _, seq, heads, head_dim = x.shape
    cache = cache_like(kind, (1, seq, heads), head_dim)
    scales = np.full((1, seq, heads), 7.0, np.float32) if kind == INT8 else None
    call = Call(dtype, seq, head_dim, rotary_dim, layout, positions, offset)
    call.add(x, cache, out_strides(kind, cache), kind=kind, scale=scale, scales=scales,
             scale_strides=estrides(scales) if scales is not None else (0, 0, 0), copy=copy)
    assert call.run(isa) == lib.ROPE_OK
    return cache, scales


def assert_stored(kind, cache, scales, want):
    q, s = want
    assert np.array_equal(cache.view(np.uint8), np.asarray(q).view(np.uint8))
    if kind == INT8:
        assert np.array_equal(scales.view(np.uint32), s.view(np.uint32))


# ---- values -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, pytest.param(Q8_0, marks=needs_gguf)], ids=list(KINDS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_at_position_zero_the_store_is_the_quantised_input(kind, dtype):
    """cos 1, sin 0: the rotation is the identity, so the cache holds the input (widened
    to float32 exactly) quantised by the formulas."""
    x = rand((1, 5, 3, 64), dtype, seed=1)
    cache, scales = store(kind, x, dtype, positions=np.zeros(5))
    assert_stored(kind, cache, scales, quantise(kind, x.astype(np.float32)))


@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, pytest.param(Q8_0, marks=needs_gguf)], ids=list(KINDS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_at_real_positions_the_store_is_pyropes_rotation_quantised(kind, layout):
    x = rand((1, 6, 2, 96), seed=2)
    positions = np.array([3, 17, 1000, 5, 65535, 123456])
    rotary_dim = 64   # a tail past rotary_dim too
    cache, scales = store(kind, x, positions=positions, layout=layout, rotary_dim=rotary_dim)
    rotated = pyrope.Rope(96, layout=layout, rotary_dim=rotary_dim).apply(x, positions)
    assert rotated.dtype == np.float32
    assert_stored(kind, cache, scales, quantise(kind, rotated))


@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, pytest.param(Q8_0, marks=needs_gguf)], ids=list(KINDS))
def test_values_copied_are_quantised_unrotated(kind):
    x = rand((1, 4, 2, 32), seed=3)
    cache, scales = store(kind, x, offset=50, copy=1)
    assert_stored(kind, cache, scales, quantise(kind, x))


@pytest.mark.parametrize("scale", [0.5, 0.01, 3.0, 1e-30])
def test_fp8_static_scales(scale):
    """The quotient clamps at 448 (a tiny scale saturates every value) before it rounds."""
    x = rand((1, 3, 2, 32), seed=4)
    cache, _ = store(FP8_E4M3, x, positions=np.zeros(3), scale=scale)
    assert np.array_equal(cache, fp8_quantise(x, scale))
    if scale == 1e-30:
        assert set(np.unique(cache)) <= {0x7E, 0xFE}


def test_non_finite_values_as_pyrope_h_defines_them():
    """A NaN stores 0 (float8: 0x7F); an amax that is NaN or infinite is the scale, so the
    head (int8) or block (q8_0) dequantises to NaN. Copied values: no rotation mixes them."""
    x = rand((1, 4, 1, 64), seed=5)
    x[0, 0, 0, 7] = np.nan       # token 0: a NaN
    x[0, 1, 0, 40] = np.inf      # token 1: an infinity (in the second q8_0 block)
    x[0, 2, 0, 3] = -np.inf
    # int8
    cache, scales = store(INT8, x, copy=1)
    assert np.isnan(scales[0, 0]) and not cache[0, 0].any()
    assert scales[0, 1] == np.inf and scales[0, 2] == np.inf and not cache[0, 1:3].any()
    assert np.array_equal(cache[0, 3], int8_quantise(x[0, 3])[0])
    with np.errstate(invalid="ignore"):
        assert np.all(np.isnan(cache[0, :3].astype(np.float32) * scales[0, :3, None]))
    # float8: NaN 0x7F, infinities clamp to +-448
    cache, _ = store(FP8_E4M3, x, copy=1, scale=1.0)
    assert cache[0, 0, 0, 7] == 0x7F and cache[0, 1, 0, 40] == 0x7E and cache[0, 2, 0, 3] == 0xFE
    finite = np.isfinite(x)
    assert np.array_equal(cache[finite], fp8_quantise(x[finite], 1.0))
    # q8_0: a block holding a NaN or an infinity has qs 0 and d NaN or infinite
    cache, _ = store(Q8_0, x, copy=1)
    d = cache[..., :2].copy().view(np.float16)[..., 0]
    qs = cache[..., 2:].view(np.int8)
    assert np.isnan(d[0, 0, 0, 0]) and not qs[0, 0, 0, 0].any()
    assert d[0, 1, 0, 1] == np.inf and not qs[0, 1, 0, 1].any()
    assert d[0, 2, 0, 0] == np.inf and not qs[0, 2, 0, 0].any()
    if gguf is not None:
        assert np.array_equal(cache[0, 3], q8_0_quantise(x[0, 3]))
        assert np.array_equal(cache[0, 0, 0, 1], q8_0_quantise(x[0, 0, 0, 32:])[0])


def test_int8_head_of_zeros_has_scale_zero():
    x = rand((1, 2, 2, 32), seed=6)
    x[0, 1, 1] = 0.0
    cache, scales = store(INT8, x, copy=1)
    assert scales[0, 1, 1] == 0.0 and not cache[0, 1, 1].any()


@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, pytest.param(Q8_0, marks=needs_gguf)], ids=list(KINDS))
@pytest.mark.parametrize("cache_layout", ["NHD", "HND"])
def test_keys_into_cache_slots(kind, cache_layout):
    """k rotated into shuffled slots of a paged cache (slot -1 skipped), int8 scales laid
    as the cache: each written head is the rotated key quantised, every other untouched."""
    heads, head_dim, seq, blocks, block = 2, 64, 5, 3, 4
    k = rand((1, seq, heads, head_dim), seed=7)
    shape = (blocks, block, heads) if cache_layout == "NHD" else (blocks, heads, block)
    cache = cache_like(kind, shape, head_dim)
    before = cache.copy()
    scales = np.full(shape, 7.0, np.float32) if kind == INT8 else None
    perm = [0, 1, 2] if cache_layout == "NHD" else [0, 2, 1]   # strides as {block, slot, head}
    o_strides = [out_strides(kind, cache)[i] for i in perm]
    s_strides = [estrides(scales)[i] for i in perm] if scales is not None else (0, 0, 0)
    slots = np.array([9, -1, 0, 5, 11], np.int64)
    positions = np.array([100, 101, 102, 103, 104])
    call = Call(np.float32, seq, head_dim, positions=positions)
    call.add(k, cache, o_strides, kind=kind, scale=0.25, scales=scales, scale_strides=s_strides, slots=slots,
             n_slots=blocks * block, block_size=block)
    assert call.run() == lib.ROPE_OK
    q, s = quantise(kind, pyrope.Rope(head_dim, layout="split_half").apply(k, positions), scale=0.25)

    def at(a, slot):
        b, o = divmod(slot, block)
        return a[b, o] if cache_layout == "NHD" else a[b, :, o]
    for t, slot in enumerate(slots):
        if slot >= 0:
            assert np.array_equal(at(cache, slot).view(np.uint8), q[0, t].view(np.uint8)), t
            if kind == INT8:
                assert np.array_equal(at(scales, slot), s[0, t]), t
    for slot in sorted(set(range(blocks * block)) - set(slots.tolist())):
        assert np.array_equal(at(cache, slot), at(before, slot)), slot
        if kind == INT8:
            assert np.all(at(scales, slot) == 7.0), slot


@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, pytest.param(Q8_0, marks=needs_gguf)], ids=list(KINDS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_in_place_shift_is_dequantise_rotate_quantise(kind, layout):
    """A cache quantised here, its keys moved by delta in place (x not read: NULL): each
    written slot is its head dequantised, rotated by the token's delta in float32
    (pyrope's Rope.apply), quantised again; every other slot untouched."""
    heads, head_dim, blocks, block = 2, 64, 4, 2
    n_slots = blocks * block
    cache, scales = quantise(kind, rand((blocks, block, heads, head_dim), seed=8), scale=0.5)
    cache = np.ascontiguousarray(cache)
    before, scales_before = cache.copy(), None if scales is None else scales.copy()
    slots = np.array([6, 1, -1, 3, 0, 7], np.int64)
    delta = np.array([-5, 12, 0, 1, 40000, -3])
    call = Call(np.float32, len(slots), head_dim, layout=layout, positions=delta)
    call.add(None, cache, out_strides(kind, cache), n_heads=heads, kind=kind, in_place=1, scale=0.5,
             scales=scales, scale_strides=estrides(scales) if scales is not None else (0, 0, 0), slots=slots,
             n_slots=n_slots, block_size=block)
    assert call.run() == lib.ROPE_OK
    flat_before = before.reshape((n_slots,) + before.shape[2:])
    flat_scales = None if scales_before is None else scales_before.reshape(n_slots, heads)
    rope = pyrope.Rope(head_dim, layout=layout)
    cache_flat = cache.reshape(flat_before.shape)
    scales_flat = None if scales is None else scales.reshape(n_slots, heads)
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        deq = dequantise(kind, flat_before[slot], None if flat_scales is None else flat_scales[slot], scale=0.5)
        rotated = rope.apply(deq[None, None], np.array([delta[t]]))[0, 0]
        q, s = quantise(kind, rotated, scale=0.5)
        assert np.array_equal(cache_flat[slot].view(np.uint8), q.view(np.uint8)), t
        if kind == INT8:
            assert np.array_equal(scales_flat[slot].view(np.uint32), s.view(np.uint32)), t
    for slot in sorted(set(range(n_slots)) - set(slots.tolist())):
        assert np.array_equal(cache_flat[slot], flat_before[slot]), slot
        if kind == INT8:
            assert np.array_equal(scales_flat[slot], flat_scales[slot]), slot


def test_in_place_shift_of_a_float_cache():
    """kind NONE in place: the float cache's own heads rotated at their slots."""
    heads, head_dim, n_slots = 2, 32, 6
    cache = rand((n_slots, 1, heads, head_dim), seed=9)
    before = cache.copy()
    slots = np.array([4, 2, 5], np.int64)
    delta = np.array([7, -7, 300])
    call = Call(np.float32, 3, head_dim, positions=delta)
    call.add(None, cache, estrides(cache), n_heads=heads, in_place=1, slots=slots, n_slots=n_slots)
    assert call.run() == lib.ROPE_OK
    rope = pyrope.Rope(head_dim, layout="split_half")
    for t, slot in enumerate(slots):
        assert np.array_equal(cache[slot], rope.apply(before[slot], np.array([delta[t]]))), t
    for slot in (0, 1, 3):
        assert np.array_equal(cache[slot], before[slot])


@pytest.mark.parametrize("isa", [i for i in ISAS if i != "scalar"])
@pytest.mark.parametrize("kind", [INT8, FP8_E4M3, Q8_0], ids=list(KINDS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_every_isa_stores_the_scalar_bits(isa, kind, dtype):
    for head_dim, rotary_dim in ((32, 32), (64, 48), (128, 128), (160, 96)):
        x = rand((1, 7, 3, head_dim), dtype, seed=head_dim)
        got = [store(kind, x, dtype, offset=11, rotary_dim=rotary_dim, layout=layout, isa=which)
               for which in ("scalar", isa) for layout in LAYOUTS]
        for a, b in zip(got[:2], got[2:]):
            assert np.array_equal(a[0], b[0]), head_dim
            if kind == INT8:
                assert np.array_equal(a[1].view(np.uint32), b[1].view(np.uint32)), head_dim


def test_k_int8_and_v_q8_0_in_one_call_equal_each_alone():
    heads, head_dim, seq, n_slots = 2, 64, 4, 8
    k, v = rand((1, seq, heads, head_dim), seed=10), rand((1, seq, heads, head_dim), seed=11)
    slots = np.array([5, 2, 7, 0], np.int64)

    def run(which):
        kc, vc = cache_like(INT8, (n_slots, 1, heads), head_dim), cache_like(Q8_0, (n_slots, 1, heads), head_dim)
        ks = np.zeros((n_slots, 1, heads), np.float32)
        call = Call(np.float32, seq, head_dim, offset=30)
        if "k" in which:
            call.add(k, kc, out_strides(INT8, kc), kind=INT8, scales=ks, scale_strides=estrides(ks), slots=slots,
                     n_slots=n_slots)
        if "v" in which:
            call.add(v, vc, out_strides(Q8_0, vc), kind=Q8_0, copy=1, slots=slots, n_slots=n_slots)
        assert call.run() == lib.ROPE_OK
        return kc, ks, vc
    both, k_alone, v_alone = run("kv"), run("k"), run("v")
    assert np.array_equal(both[0], k_alone[0]) and np.array_equal(both[1], k_alone[1])
    assert np.array_equal(both[2], v_alone[2])


def test_quants_null_is_rope_rotate_staged():
    x = rand((1, 3, 2, 16), seed=12)
    a, b = np.zeros_like(x), np.zeros_like(x)
    call = Call(np.float32, 3, 16, offset=4).add(x, a, estrides(a))
    t = ffi.new("rope_tensor[]", call.tensors)
    st = ffi.new("rope_stage[]", call.stages)
    assert lib.rope_rotate_quantised(call.op, t, st, ffi.NULL, 1, call.angles) == lib.ROPE_OK
    t[0].out = ptr(b)
    assert lib.rope_rotate_staged(call.op, t, st, 1, call.angles) == lib.ROPE_OK
    assert np.array_equal(a, b) and a.any()


# ---- refusals, each before anything is written ------------------------------------------

class Refusal:
    """A valid call -- k rotated into int8 cache slots with scales, v copied into a q8_0
    cache -- that one change breaks; status() makes it and checks nothing was written."""

    heads, head_dim, seq, n_slots = 2, 64, 3, 6

    def __init__(self, dtype=np.float32, head_dim=64):
        self.head_dim = head_dim
        self.k = rand((1, self.seq, self.heads, head_dim), dtype, seed=20)
        self.v = rand((1, self.seq, self.heads, head_dim), dtype, seed=21)
        self.kc = cache_like(INT8, (self.n_slots, 1, self.heads), head_dim)
        self.vc = np.full((self.n_slots, 1, self.heads, max(head_dim // QK, 1), lib.ROPE_Q8_0_BYTES), 0x33, np.uint8)
        self.ks = np.full((self.n_slots, 1, self.heads), 7.0, np.float32)
        self.slots = np.array([4, 0, 2], np.int64)
        self.dtype = dtype
        self.k_args = dict(kind=INT8, scales=self.ks, scale_strides=estrides(self.ks), slots=self.slots,
                           n_slots=self.n_slots)
        self.v_args = dict(kind=Q8_0, copy=1, slots=self.slots, n_slots=self.n_slots)

    def status(self, positions=None, **change):
        """change: k_* and v_* fields of either tensor."""
        k_args, v_args = dict(self.k_args), dict(self.v_args)
        for name, value in change.items():
            (k_args if name.startswith("k_") else v_args)[name[2:]] = value
        buffers = [self.k, self.v, self.kc, self.vc, self.ks, self.slots]
        before = [b.copy() for b in buffers]
        call = Call(self.dtype, self.seq, self.head_dim, positions=positions, offset=9)
        call.add(self.k, self.kc, out_strides(INT8, self.kc), **k_args)
        # v's strides count q8_0 blocks, or bytes when a change makes it another kind
        call.add(self.v, self.vc, out_strides(Q8_0, self.vc) if v_args["kind"] == Q8_0 else estrides(self.vc, 1),
                 **v_args)
        code = call.run()
        if code != lib.ROPE_OK:
            for b, was in zip(buffers, before):
                assert np.array_equal(b.view(np.uint8), was.view(np.uint8)), change
        return code


def test_the_valid_call_of_the_refusals_is_valid():
    r = Refusal()
    assert r.status() == lib.ROPE_OK and r.kc.any() and not np.all(r.ks == 7.0)


@pytest.mark.parametrize("kind", [-1, 4, 99])
def test_unknown_kinds(kind):
    assert Refusal().status(k_kind=kind) == lib.ROPE_E_STAGE
    assert Refusal().status(v_kind=kind) == lib.ROPE_E_STAGE


def test_in_place_needs_slots_and_no_norm_copy_or_convert():
    r = Refusal()
    assert r.status(k_in_place=1, k_slots=None) == lib.ROPE_E_STAGE
    assert r.status(k_in_place=1, k_norm=lib.ROPE_NORM_HEAD) == lib.ROPE_E_STAGE
    assert r.status(k_in_place=1, k_norm=lib.ROPE_NORM_TOKEN) == lib.ROPE_E_STAGE
    assert r.status(v_in_place=1) == lib.ROPE_E_STAGE                        # v is a copy
    assert r.status(k_in_place=1, k_convert=1, k_out_dtype=lib.ROPE_F32) == lib.ROPE_E_STAGE
    assert r.status(k_in_place=2) == lib.ROPE_E_STAGE
    assert r.status(k_in_place=-1) == lib.ROPE_E_STAGE
    # kind NONE in place: the same rules
    assert r.status(k_kind=0, k_in_place=1, k_slots=None) == lib.ROPE_E_STAGE


def test_float64_data_and_conversions_take_no_quant():
    assert Refusal(np.float64).status() == lib.ROPE_E_STAGE
    assert Refusal(np.float64).status(v_kind=0, v_slots=None) == lib.ROPE_E_STAGE   # k still int8
    r = Refusal()
    assert r.status(k_convert=1, k_out_dtype=lib.ROPE_F32) == lib.ROPE_E_STAGE
    assert r.status(v_convert=1, v_out_dtype=lib.ROPE_F16) == lib.ROPE_E_STAGE


@pytest.mark.parametrize("head_dim", [48, 40, 66, 8])
def test_q8_0_wants_head_dim_a_multiple_of_32(head_dim):
    assert Refusal(head_dim=head_dim).status() == lib.ROPE_E_DIM


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, -1.0, -1e-40])
def test_fp8_scale_finite_and_positive(scale):
    r = Refusal()
    assert r.status(v_kind=FP8_E4M3, v_scale=scale) == lib.ROPE_E_VALUE
    assert r.status(v_kind=FP8_E4M3, v_scale=1e-40) == lib.ROPE_OK   # subnormal, but > 0


def test_int8_scales_null_misaligned():
    r = Refusal()
    assert r.status(k_scales=None) == lib.ROPE_E_NULL
    spare = np.zeros(r.ks.size + 1, np.float32)
    for off in (1, 2, 3):
        assert r.status(k_scales=spare, k_scales_ptr=ptr(spare, "float *", off)) == lib.ROPE_E_ALIGN
    assert r.status(k_scales=spare, k_scales_ptr=ptr(spare, "float *", 4)) == lib.ROPE_OK


def test_scales_overlapping_an_out_or_the_slots():
    r = Refusal()
    # in k's own cache, in v's, in the slots, in the positions read while writing
    assert r.status(k_scales_ptr=ptr(r.kc, "float *", 8)) == lib.ROPE_E_OVERLAP
    assert r.status(k_scales_ptr=ptr(r.vc, "float *", 0)) == lib.ROPE_E_OVERLAP
    assert r.status(k_scales_ptr=ptr(r.vc, "float *", r.vc.nbytes - 4)) == lib.ROPE_E_OVERLAP   # last 4 bytes
    assert r.status(k_scales_ptr=ptr(r.slots, "float *")) == lib.ROPE_E_OVERLAP
    positions = np.arange(3, dtype=np.int64) + 40
    assert r.status(positions=positions, k_scales_ptr=ptr(positions, "float *", 8)) == lib.ROPE_E_OVERLAP
    # just past v's cache: apart
    spare = np.zeros(r.ks.size, np.float32)
    assert r.status(k_scales=spare) == lib.ROPE_OK


def test_slot_out_of_range():
    r = Refusal()
    assert r.status(k_slots=np.array([4, 6, 2], np.int64)) == lib.ROPE_E_SLOT      # slot 6 of 6
    assert r.status(v_slots=np.array([4, -2, 2], np.int64)) == lib.ROPE_E_SLOT
    assert r.status(k_in_place=1, k_slots=np.array([0, 1, 99], np.int64)) == lib.ROPE_E_SLOT
