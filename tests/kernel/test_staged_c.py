"""rope_rotate_staged, the C entry of a norm before the rotation and a cache slot
after it (issue 24's data plane), called through cffi.

Values against a float64 computation written here (RMSNorm, then the rotation
at angles position * inv_freq); every instruction set bit for bit against the
scalar one; slots (NHD and HND caches, -1 skipped, values copied exactly);
another storage type equal to rotating in float32 and rounding once; and the
refusals, with nothing written."""
import ml_dtypes
import numpy as np
import pytest

import pyrope
from pyrope._engine.binding import ffi, lib

BF16 = np.dtype(ml_dtypes.bfloat16)
CODES = {np.dtype(np.float32): lib.ROPE_F32, np.dtype(np.float16): lib.ROPE_F16, BF16: lib.ROPE_BF16,
         np.dtype(np.float64): lib.ROPE_F64}
LAYOUTS = {"split_half": lib.ROPE_SPLIT_HALF, "interleaved": lib.ROPE_INTERLEAVED}
ISAS = pyrope.supported_isas()


def ptr(a):
    return ffi.cast("void *", a.ctypes.data)


class Staged:
    """One staged call's descriptors; arrays kept alive with it."""

    def __init__(self, dtype, layout, n_seq, head_dim, rotary_dim, start=5):
        self.keep = []
        self.op = ffi.new("rope_op *", dict(dtype=CODES[np.dtype(dtype)], layout=LAYOUTS[layout], inverse=0,
                                            n_batch=1, n_seq=n_seq, head_dim=head_dim, rotary_dim=rotary_dim,
                                            n_threads=1))
        self.inv_freq = 10000.0 ** (-np.arange(0, rotary_dim, 2) / rotary_dim)
        self.angles = ffi.new("rope_angles *")
        self.angles.source = lib.ROPE_POS_OFFSET
        self.angles.offset = start
        self.angles.inv_freq = ffi.cast("double *", self.inv_freq.ctypes.data)
        self.angles.scale = 1.0
        self.start, self.rotary_dim, self.layout = start, rotary_dim, layout
        self.tensors, self.stages = [], []

    def add(self, x, out, out_strides=None, rotate=1, norm=0, weight=None, eps=1e-6, out_dtype=-1, slots=None,
            n_slots=0, block_size=1):
        self.keep += [x, out, weight, slots]
        es, eo = x.itemsize, out.itemsize
        self.tensors.append(dict(x=ptr(x), out=ptr(out), n_heads=x.shape[2],
                                 x_strides=[s // es for s in x.strides[:3]],
                                 out_strides=out_strides or [s // eo for s in out.strides[:3]]))
        # rotate/out_dtype as the tests think of them (-1: the op's type); rope_stage has copy and convert
        self.stages.append(dict(copy=1 - rotate, norm=norm, norm_eps=eps, convert=0 if out_dtype == -1 else 1,
                                out_dtype=0 if out_dtype == -1 else out_dtype,
                                norm_weight=ffi.NULL if weight is None else ffi.cast("double *", weight.ctypes.data),
                                slots=ffi.NULL if slots is None else ffi.cast("int64_t *", slots.ctypes.data),
                                slot_strides=[0, 1], n_slots=n_slots, block_size=block_size))

    def run(self):
        t = ffi.new("rope_tensor[]", self.tensors)
        st = ffi.new("rope_stage[]", self.stages)
        return lib.rope_rotate_staged(self.op, t, st, len(self.tensors), self.angles)

    def reference(self, x, norm=0, weight=None, eps=1e-6, rotate=True):
        """float64: RMSNorm (over each head, or the token's heads), then the rotation."""
        x = x.astype(np.float64)
        if norm:
            axes = (-1,) if norm == lib.ROPE_NORM_HEAD else (-2, -1)
            x = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
            if weight is not None:
                x = x * weight.reshape((-1, x.shape[-1]) if norm == lib.ROPE_NORM_TOKEN else (x.shape[-1],))
        if not rotate:
            return x, np.abs(x)
        half = self.rotary_dim // 2
        pos = self.start + np.arange(x.shape[1])
        ang = pos[:, None] * self.inv_freq[None, :]
        c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
        i0, i1 = (np.arange(half), np.arange(half) + half) if self.layout == "split_half" else (
            np.arange(0, 2 * half, 2), np.arange(1, 2 * half, 2))
        y = x.copy()
        y[..., i0] = x[..., i0] * c - x[..., i1] * s
        y[..., i1] = x[..., i1] * c + x[..., i0] * s
        mag = np.abs(x).copy()
        mag[..., i0] = mag[..., i1] = np.abs(x[..., i0]) + np.abs(x[..., i1])
        return y, mag


def rand(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def ulp(dtype):
    return {np.dtype(np.float64): 2.0 ** -52, np.dtype(np.float32): 2.0 ** -23,
            np.dtype(np.float16): 2.0 ** -10, BF16: 2.0 ** -7}[np.dtype(dtype)]


NORMS = {"head": lib.ROPE_NORM_HEAD, "token": lib.ROPE_NORM_TOKEN}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", list(CODES), ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("weighted", [True, False])
def test_norm_then_rotation_against_float64(isa, dtype, layout, norm, weighted):
    head_dim, rotary_dim, heads, seq = 40, 24, 3, 6   # 40 = 5 lanes of 8; rotary part and a tail
    x = rand((1, seq, heads, head_dim), dtype)
    n = NORMS[norm]
    size = head_dim * (heads if norm == "token" else 1)
    weight = np.random.default_rng(1).uniform(0.5, 1.5, size) if weighted else None
    call = Staged(dtype, layout, seq, head_dim, rotary_dim)
    out = np.zeros_like(x)
    call.add(x, out, norm=n, weight=weight)
    with pyrope.forced_isa(isa):
        assert call.run() == lib.ROPE_OK
    ref, mag = call.reference(x, n, weight)
    # float64: a few of its ulps; else 2 float32 ulps of the pair's magnitude, and the
    # storage type's rounding of the value on store
    arith = 8 * 2.0 ** -52 if np.dtype(dtype) == np.float64 else 2 * 2.0 ** -23
    bound = arith * mag + 0.5 * ulp(dtype) * np.abs(ref) * 1.0001
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= bound), float(np.max(err / np.maximum(bound, 1e-300)))


@pytest.mark.parametrize("isa", [i for i in ISAS if i != "scalar"])
@pytest.mark.parametrize("dtype", list(CODES), ids=str)
@pytest.mark.parametrize("norm", list(NORMS))
def test_every_isa_gives_the_scalar_bits(isa, dtype, norm):
    for head_dim in (2, 6, 8, 14, 64, 130):
        x = rand((1, 7, 2, head_dim), dtype, seed=head_dim)
        weight = np.random.default_rng(head_dim).uniform(-2, 2, head_dim * (2 if norm == "token" else 1))
        outs = []
        for which in ("scalar", isa):
            call = Staged(dtype, "interleaved", 7, head_dim, head_dim)
            out = np.zeros_like(x)
            call.add(x, out, norm=NORMS[norm], weight=weight)
            with pyrope.forced_isa(which):
                assert call.run() == lib.ROPE_OK
            outs.append(out.view(np.uint8))
        assert np.array_equal(*outs), head_dim


SPECIALS = {np.dtype(np.float32): [np.nan, np.inf, -np.inf, -0.0, 1e-40, 1e-45, 3e38, -3.4e38],
            np.dtype(np.float16): [np.nan, np.inf, -np.inf, -0.0, 6e-8, 3e-5, 65504.0, -65504.0],
            BF16: [np.nan, np.inf, -np.inf, -0.0, 1e-40, 1e-38, 3e38, -3.3e38],
            np.dtype(np.float64): [np.nan, np.inf, -np.inf, -0.0, 5e-324, 1e-310, 1e300, -1e308]}


def with_specials(x, seed):
    """x with NaNs (signalling and payloads too), infinities, -0, subnormals and huge
    values in one token's heads and now and then elsewhere."""
    x = x.copy()
    rng = np.random.default_rng(seed)
    flat = x.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        specials = np.array(SPECIALS[x.dtype], dtype=np.float64).astype(x.dtype)
    picks = rng.random(flat.size) < 0.02
    picks[x[0, 3].size * 3:x[0, 3].size * 4] = rng.random(x[0, 3].size) < 0.3   # token 3: many
    flat[picks] = specials[rng.integers(0, specials.size, int(picks.sum()))]
    bits = flat.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.itemsize])
    # NaNs with random payloads, quiet or signalling, either sign. float32 payload bit 21
    # (float16: bit 8) clear: a rotation may leave a NaN's sign or payload as it likes
    # (tests/c/kernels_identical.c), and the bfloat16 rounding of a NaN whose top payload
    # bits are all ones carries out of it (convert.h), so two such NaNs could round to
    # different numbers; the stage kernels' own rounding of any NaN is checked there
    nans = np.flatnonzero(rng.random(flat.size) < 0.005)
    sign = rng.integers(0, 2, nans.size)
    if x.dtype == np.float64:
        bits[nans] = (np.uint64(0x7FF0000000000001) | rng.integers(0, 2 ** 52 - 1, nans.size, dtype=np.uint64)
                      | (sign.astype(np.uint64) << np.uint64(63)))
    elif x.dtype == np.float32:
        bits[nans] = (np.uint32(0x7F800001) | rng.integers(0, 2 ** 21 - 1, nans.size, dtype=np.uint32)
                      | (sign.astype(np.uint32) << np.uint32(31)))
    elif x.dtype == np.float16:
        bits[nans] = (np.uint16(0x7C01) | (rng.integers(0, 2 ** 10 - 1, nans.size, dtype=np.uint16) & np.uint16(0x2FF))
                      | (sign.astype(np.uint16) << np.uint16(15)))
    else:
        bits[nans] = (np.uint16(0x7F81) | rng.integers(0, 2 ** 7 - 1, nans.size, dtype=np.uint16)
                      | (sign.astype(np.uint16) << np.uint16(15)))
    return x


def same_or_both_nan(a, b):
    """Equal bits, or NaN on both sides (a NaN's payload may differ between vector and
    scalar rotations: tests/c/kernels_identical.c)."""
    if np.array_equal(a.view(np.uint8), b.view(np.uint8)):
        return True
    with np.errstate(invalid="ignore"):
        fa, fb = a.astype(np.float64), b.astype(np.float64)
    bits_a = a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
    bits_b = b.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[b.itemsize])
    return bool(np.all((bits_a == bits_b) | (np.isnan(fa) & np.isnan(fb))))


# (data type, output type, norm): float64 goes to float64 or float32 only, and without
# a norm or a conversion a call takes rope_rotate's own path (no stage kernel)
STAGE_CASES = [(d, o, norm) for d in CODES for o in ([np.dtype(np.float64), np.dtype(np.float32)]
                                                     if d == np.float64 else list(CODES))
               for norm in ("none", "head", "token") if norm != "none" or o != d]


@pytest.mark.parametrize("isa", [i for i in ISAS if i != "scalar"])
@pytest.mark.parametrize("dtype,cache,norm", STAGE_CASES, ids=str)
def test_every_stage_kernel_gives_the_scalar_bits(isa, dtype, cache, norm):
    """Each stage kernel of each ISA through the C entry: every storage type into every
    type it may go to, no norm (widened), a norm of each head or of the token, weights
    or none, head_dim with every tail of the vector steps, both layouts, special values."""
    n = {"none": lib.ROPE_NORM_NONE, **NORMS}[norm]
    for head_dim in (2, 6, 10, 14, 18, 30, 34, 64, 126, 130, 258):
        for layout in LAYOUTS:
            for weighted in ((False, True) if norm != "none" else (False,)):
                x = with_specials(rand((1, 7, 2, head_dim), dtype, seed=head_dim), head_dim)
                size = head_dim * (2 if norm == "token" else 1)
                weight = np.random.default_rng(head_dim).uniform(-2, 2, size) if weighted else None
                outs = []
                for which in ("scalar", isa):
                    call = Staged(dtype, layout, 7, head_dim, head_dim - 2 if head_dim > 2 else head_dim)
                    out = np.full(x.shape, 7, cache)
                    call.add(x, out, norm=n, weight=weight, out_dtype=CODES[cache])
                    with pyrope.forced_isa(which):
                        assert call.run() == lib.ROPE_OK
                    outs.append(out)
                assert same_or_both_nan(*outs), (head_dim, layout, weighted)


@pytest.mark.parametrize("cache_layout", ["NHD", "HND"])
def test_keys_and_values_into_their_slots(cache_layout):
    heads, head_dim, seq, blocks, block = 2, 16, 5, 3, 4
    k, v = rand((1, seq, heads, head_dim), np.float32), rand((1, seq, heads, head_dim), np.float32, seed=2)
    shape = (blocks, block, heads, head_dim) if cache_layout == "NHD" else (blocks, heads, block, head_dim)
    k_cache, v_cache = np.full(shape, 7.0, np.float32), np.full(shape, 7.0, np.float32)
    e = k_cache.strides
    strides = ([e[0] // 4, e[1] // 4, e[2] // 4] if cache_layout == "NHD" else [e[0] // 4, e[2] // 4, e[1] // 4])
    slots = np.array([9, -1, 0, 5, 11], np.int64)   # not positions: places
    call = Staged(np.float32, "split_half", seq, head_dim, head_dim)
    call.add(k, k_cache, strides, slots=slots, n_slots=blocks * block, block_size=block)
    call.add(v, v_cache, strides, rotate=0, slots=slots, n_slots=blocks * block, block_size=block)
    assert call.run() == lib.ROPE_OK
    rotated = np.zeros_like(k)
    plain = Staged(np.float32, "split_half", seq, head_dim, head_dim)
    plain.add(k, rotated)
    assert plain.run() == lib.ROPE_OK

    def slot(cache, s):
        b, o = divmod(s, block)
        return cache[b, o] if cache_layout == "NHD" else cache[b, :, o]
    for t, s in enumerate(slots):
        if s == -1:
            continue
        assert np.array_equal(slot(k_cache, s), rotated[0, t]), t   # rotated at its position, not its slot
        assert np.array_equal(slot(v_cache, s), v[0, t]), t          # values never rotated
    untouched = sorted(set(range(blocks * block)) - set(slots.tolist()))
    for s in untouched:
        assert np.all(slot(k_cache, s) == 7.0) and np.all(slot(v_cache, s) == 7.0), s


@pytest.mark.parametrize("dtype,cache", [(np.float32, BF16), (np.float32, np.float16), (np.float64, np.float32),
                                         (BF16, np.float32), (np.float16, BF16)], ids=str)
def test_another_cache_type_is_the_arithmetic_value_rounded_once(dtype, cache):
    x = rand((1, 4, 2, 32), dtype)
    weight = np.linspace(0.5, 1.5, 32)
    out = np.zeros(x.shape, cache)
    call = Staged(dtype, "split_half", 4, 32, 32)
    call.add(x, out, norm=lib.ROPE_NORM_HEAD, weight=weight, out_dtype=CODES[np.dtype(cache)])
    assert call.run() == lib.ROPE_OK
    # the same in the arithmetic type (float32 or float64), rounded once with numpy/ml_dtypes
    wide = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    arith = np.zeros(x.shape, wide)
    same = Staged(wide, "split_half", 4, 32, 32)
    same.add(x.astype(wide), arith, norm=lib.ROPE_NORM_HEAD, weight=weight)
    assert same.run() == lib.ROPE_OK
    assert np.array_equal(out.view(np.uint8), arith.astype(cache).view(np.uint8))


def test_refusals_write_nothing():
    x = rand((1, 3, 1, 8), np.float32)

    def status(**stage):
        out = np.full_like(x, 7.0)
        call = Staged(np.float32, "split_half", 3, 8, 8)
        call.add(x, out, **stage)
        code = call.run()
        assert np.all(out == 7.0), stage
        return code
    assert status(norm=lib.ROPE_NORM_HEAD, eps=0.0) == lib.ROPE_E_STAGE
    assert status(norm=lib.ROPE_NORM_HEAD, eps=float("nan")) == lib.ROPE_E_STAGE
    assert status(norm=lib.ROPE_NORM_HEAD, rotate=0) == lib.ROPE_E_STAGE
    assert status(norm=7) == lib.ROPE_E_STAGE
    assert status(rotate=2) == lib.ROPE_E_STAGE
    assert status(out_dtype=99) == lib.ROPE_E_DTYPE
    assert status(out_dtype=-2) == lib.ROPE_E_DTYPE
    slots = np.array([0, 3, 1], np.int64)
    assert status(slots=slots, n_slots=3) == lib.ROPE_E_SLOT     # slot 3 of 3
    assert status(slots=np.array([0, -2, 1], np.int64), n_slots=3) == lib.ROPE_E_SLOT
    # float64 data goes to float64 or float32 only
    x64 = rand((1, 3, 1, 8), np.float64)
    out16 = np.zeros(x64.shape, np.float16)
    call = Staged(np.float64, "split_half", 3, 8, 8)
    call.add(x64, out16, out_dtype=lib.ROPE_F16)
    assert call.run() == lib.ROPE_E_STAGE and not out16.any()


def test_a_stage_of_zeros_is_the_plain_rotation():
    """C's {0} for a stage: rotate (copy 0), the op's storage type (convert 0, out_dtype not
    read), no norm, no slots: rope_rotate's bits, for a 16-bit type whose code is not 0."""
    x = rand((1, 5, 2, 16), BF16)
    outs = []
    for staged in (True, False):
        call = Staged(BF16, "interleaved", 5, 16, 12)
        out = np.zeros_like(x)
        call.add(x, out)
        call.stages[0] = {}   # every field zero
        t = ffi.new("rope_tensor[]", call.tensors)
        st = ffi.new("rope_stage[]", call.stages)
        status = (lib.rope_rotate_staged(call.op, t, st, 1, call.angles) if staged
                  else lib.rope_rotate(call.op, t, 1, call.angles))
        assert status == lib.ROPE_OK
        outs.append(out.view(np.uint16))
    assert np.array_equal(*outs) and outs[0].any()
    call = Staged(np.float32, "split_half", 3, 8, 8)
    x32 = rand((1, 3, 1, 8), np.float32)
    out = np.full_like(x32, 7.0)
    call.add(x32, out)
    call.stages[0]["convert"] = 2
    assert call.run() == lib.ROPE_E_STAGE and np.all(out == 7.0)


def test_weights_inside_an_output_are_refused():
    x = rand((1, 2, 1, 8), np.float64)
    out = np.zeros((1, 2, 1, 8), np.float64)
    call = Staged(np.float64, "split_half", 2, 8, 8)
    call.add(x, out, norm=lib.ROPE_NORM_HEAD, weight=out.reshape(-1)[:8])   # read while written
    assert call.run() == lib.ROPE_E_OVERLAP and not out.any()


def test_no_stages_is_rope_rotate():
    x = rand((1, 4, 2, 16), np.float32)
    a, b = np.zeros_like(x), np.zeros_like(x)
    call = Staged(np.float32, "interleaved", 4, 16, 16)
    call.add(x, a)
    t = ffi.new("rope_tensor[]", call.tensors)
    assert lib.rope_rotate_staged(call.op, t, ffi.NULL, 1, call.angles) == lib.ROPE_OK
    t2 = ffi.new("rope_tensor[]", [dict(call.tensors[0], out=ptr(b))])
    assert lib.rope_rotate(call.op, t2, 1, call.angles) == lib.ROPE_OK
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
