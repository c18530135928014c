"""The C API as a C caller sees it: descriptors with explicit (also negative)
element strides, every position source, every storage type and instruction
set, against the standard-library reference; and every refusal as a status,
with nothing written."""
import numpy as np
import pytest

import pyrope
from pyrope import Rope, reference
from pyrope._engine.binding import ffi, lib
from array_bits import bits
from kernel_api import address, c_rotate
from tolerance import assert_rotation_close

import ml_dtypes  # noqa: E402 - the test extra installs it

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
LAYOUTS = ["interleaved", "split_half"]


def reference_rows(inv_freq, pair_positions, layout, x, scale=1.0, inverse=False):
    """Rotate one head x (float64) with pair i at position pair_positions[i], by the reference."""
    out = list(x)
    half = len(inv_freq)
    for i in range(half):
        rotated = reference.rotate_with_inv_freq(
            [float(x[2 * i]), float(x[2 * i + 1])] if layout == "interleaved" else [float(x[i]), float(x[i + half])],
            int(pair_positions[i]), [float(inv_freq[i])], layout="interleaved", inverse=inverse,
            attention_factor=scale)
        if layout == "interleaved":
            out[2 * i], out[2 * i + 1] = rotated
        else:
            out[i], out[i + half] = rotated
    return np.array(out)


# ---- explicit strides --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_and_gapped_strides_on_every_isa(isa, dtype, layout, rng):
    # x is a reversed, gapped view of a bigger buffer: strides the planner never
    # makes; every ISA must give the scalar bits, and the reference's values.
    rope = Rope(24, layout=layout, rotary_dim=20, base=500.0)
    big = rng.standard_normal((3, 9, 5, 30)).astype(dtype)
    x = big[::-1, ::-2, ::2, 3:27]                 # [3, 5, 3, 24], all three strides negative or gapped
    out_big = np.zeros((3, 5, 9, 24), dtype)
    out = out_big[:, ::-1, ::3]                   # [3, 5, 3, 24], reversed seq, gapped heads
    pos = rng.integers(-5000, 5000, size=(3, 5))
    before = bits(x).copy()
    assert c_rotate([(x, out)], layout, 20, positions=pos, inv_freq=rope.inv_freq) == 0
    assert np.array_equal(bits(x), before)
    with pyrope.forced_isa("scalar"):
        spec = np.zeros_like(out)
        assert c_rotate([(x, spec)], layout, 20, positions=pos, inv_freq=rope.inv_freq) == 0
    assert np.array_equal(bits(out), bits(spec))
    if dtype == np.float32:
        for b in range(3):
            for s in range(5):
                for h in range(3):
                    want = reference_rows(rope.inv_freq, [pos[b, s]] * 10, layout, x[b, s, h].astype(np.float64))
                    assert_rotation_close(out[b, s, h], want, x[b, s, h], 20, layout)
    untouched = np.ones(out_big.shape[2], bool)
    untouched[::3] = False
    assert not np.any(out_big[:, :, untouched].astype(np.float64))


def test_two_tensors_of_one_call_equal_two_calls(isa, rng):
    rope = Rope(16, layout="split_half")
    q = rng.standard_normal((2, 4, 3, 16)).astype(np.float32)
    k = rng.standard_normal((2, 4, 1, 16)).astype(np.float32)
    pos = rng.integers(0, 100, size=(2, 4))
    both = [np.empty_like(q), np.empty_like(k)]
    assert c_rotate([(q, both[0]), (k, both[1])], "split_half", 16, positions=pos, inv_freq=rope.inv_freq) == 0
    for x, got in zip((q, k), both):
        alone = np.empty_like(x)
        assert c_rotate([(x, alone)], "split_half", 16, positions=pos, inv_freq=rope.inv_freq) == 0
        assert np.array_equal(bits(got), bits(alone))


# ---- position sources -----------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tabled", [False, True], ids=["on_the_fly", "table"])
def test_sectioned_positions_turn_each_pair_by_its_component(isa, layout, tabled, rng):
    # Multimodal RoPE: three components per token (t, h, w); pair i turns by
    # component pair_component[i]. Contiguous sections and an interleaved map.
    half = 12
    rope = Rope(2 * half, layout=layout, base=1e4)
    x = rng.standard_normal((2, 3, 2, 2 * half)).astype(np.float32)
    pos = rng.integers(0, 40, size=(2, 3, 3))
    for pair_map in (np.repeat([0, 1, 2], [4, 4, 4]), np.arange(half) % 3):
        out = np.empty_like(x)
        table = None
        if tabled:
            cos, sin = rope.cos_sin(np.arange(-2, 45))
            table = (np.ascontiguousarray(cos), np.ascontiguousarray(sin), -2)
        st = c_rotate([(x, out)], layout, 2 * half, positions=pos, sections=(3, pair_map), table=table,
                      inv_freq=rope.inv_freq)
        assert st == 0
        for b in range(2):
            for s in range(3):
                for h in range(2):
                    want = reference_rows(rope.inv_freq, pos[b, s][pair_map], layout, x[b, s, h].astype(np.float64))
                    assert_rotation_close(out[b, s, h], want, x[b, s, h], 2 * half, layout)


def test_sections_with_one_component_equal_a_position_list(isa, rng):
    rope = Rope(32, layout="interleaved")
    x = rng.standard_normal((2, 5, 3, 32)).astype(np.float32)
    pos = rng.integers(-10**6, 10**6, size=(2, 5))
    listed, sectioned = np.empty_like(x), np.empty_like(x)
    assert c_rotate([(x, listed)], "interleaved", 32, positions=pos, inv_freq=rope.inv_freq) == 0
    assert c_rotate([(x, sectioned)], "interleaved", 32, positions=pos[..., None],
                    sections=(1, np.zeros(16)), inv_freq=rope.inv_freq) == 0
    assert np.array_equal(bits(listed), bits(sectioned))


def test_offset_list_and_table_sources_agree_bit_for_bit(isa, rng):
    rope = Rope(64, layout="split_half", base=5e5)
    x = rng.standard_normal((1, 7, 2, 64)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(100, 107))
    runs = []
    for kw in (dict(offset=100, inv_freq=rope.inv_freq),
               dict(positions=np.arange(100, 107)[None], inv_freq=rope.inv_freq),
               dict(offset=100, table=(cos, sin, 100)),
               dict(positions=np.arange(7)[None], table=(cos, sin, 0))):
        out = np.empty_like(x)
        assert c_rotate([(x, out)], "split_half", 64, **kw) == 0
        runs.append(bits(out))
    for r in runs[1:]:
        assert np.array_equal(r, runs[0])


# ---- refusals: a status, nothing written -----------------------------------------------

def _refusals():
    x = np.zeros((1, 2, 1, 8), np.float32)
    cos = np.ones((2, 4), np.float32)
    inv = np.full(4, 0.5)
    base = dict(pairs=[(x, x)], table=(cos, cos, 0))
    yield "dtype", dict(base, op=dict(dtype=lib.ROPE_N_DTYPES)), lib.ROPE_E_DTYPE
    yield "dtype<0", dict(base, op=dict(dtype=-1)), lib.ROPE_E_DTYPE
    yield "layout", dict(base, op=dict(layout=2)), lib.ROPE_E_LAYOUT
    yield "odd rotary", dict(base, op=dict(rotary_dim=7)), lib.ROPE_E_DIM
    yield "rotary>head", dict(base, op=dict(rotary_dim=10)), lib.ROPE_E_DIM
    yield "n_seq<0", dict(base, op=dict(n_seq=-1)), lib.ROPE_E_COUNT
    yield "table rows", dict(base, table=(cos[:1], cos[:1], 0)), lib.ROPE_E_POSITION
    yield "offset", dict(base, offset=1), lib.ROPE_E_POSITION
    yield "otf position", dict(pairs=[(x, x)], offset=2**31 - 1, inv_freq=inv), lib.ROPE_E_POSITION
    yield "otf no freq", dict(pairs=[(x, x)]), lib.ROPE_E_NULL
    yield "freq too big", dict(pairs=[(x, x)], inv_freq=np.full(4, 4.5)), lib.ROPE_E_VALUE
    yield "freq nan", dict(pairs=[(x, x)], inv_freq=np.full(4, np.nan)), lib.ROPE_E_VALUE
    yield "scale tiny", dict(pairs=[(x, x)], inv_freq=inv, scale=1e-30), lib.ROPE_E_VALUE
    yield "scale huge", dict(pairs=[(x, x)], inv_freq=inv, scale=1e30), lib.ROPE_E_VALUE
    yield "scale nan", dict(pairs=[(x, x)], inv_freq=inv, scale=float("nan")), lib.ROPE_E_VALUE
    pos3 = np.zeros((1, 2, 3), np.int64)
    yield "components 0", dict(base, positions=pos3, sections=(0, np.zeros(4))), lib.ROPE_E_SOURCE
    yield "components 5", dict(base, positions=pos3, sections=(lib.ROPE_MAX_COMPONENTS + 1, np.zeros(4))), \
        lib.ROPE_E_SOURCE
    yield "map entry", dict(base, positions=pos3, sections=(3, [0, 1, 2, 3])), lib.ROPE_E_SOURCE
    bad_pos = np.zeros((1, 2, 3), np.int64)
    bad_pos[0, 1, 2] = 5
    yield "section position", dict(base, positions=bad_pos, sections=(3, [0, 1, 2, 2])), lib.ROPE_E_POSITION
    k = np.zeros((1, 2, 3, 8), np.float32)
    yield "zero heads", dict(base, pairs=[(x, x), (k[:, :, :0], k[:, :, :0])]), None  # skipped, not refused


@pytest.mark.parametrize("case", list(_refusals()), ids=lambda c: c[0])
def test_c_refuses_bad_descriptors_without_writing(isa, case):
    _, kw, want = case
    kw = dict(kw)
    pairs = kw.pop("pairs")
    before = [bits(out).copy() for _, out in pairs]
    status = c_rotate(pairs, "split_half", 8, **kw)
    if want is None:
        assert status == lib.ROPE_OK
        return
    assert status == want, ffi.string(lib.rope_strerror(status)).decode()
    for (_, out), b in zip(pairs, before):
        assert np.array_equal(bits(out), b)


def test_c_refuses_misaligned_and_null_pointers():
    raw = np.zeros(4 * 2 * 8 + 1, dtype=np.uint8)
    x = np.zeros((1, 2, 1, 8), np.float32)
    cos = np.ones((4, 4), np.float32)
    op = ffi.new("rope_op *", dict(dtype=lib.ROPE_F32, layout=lib.ROPE_SPLIT_HALF, n_batch=1, n_seq=2,
                                   head_dim=8, rotary_dim=8, n_threads=1))
    t = ffi.new("rope_tensor *", dict(n_heads=1, x_strides=(16, 8, 8), out_strides=(16, 8, 8)))
    a = ffi.new("rope_angles *", dict(cos_table=address(cos, "float"), sin_table=address(cos, "float"),
                                      table_rows=4, scale=1.0))
    t.x = t.out = ffi.cast("void *", raw.__array_interface__["data"][0] + 1)
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_ALIGN
    assert np.all(raw == 0)
    t.x = t.out = ffi.NULL
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_NULL
    t.x = t.out = address(x)
    assert lib.rope_rotate(ffi.NULL, t, 1, a) == lib.ROPE_E_NULL
    assert lib.rope_rotate(op, t, 1, ffi.NULL) == lib.ROPE_E_NULL
    assert lib.rope_rotate(op, ffi.NULL, 1, a) == lib.ROPE_E_NULL
    assert lib.rope_rotate(op, t, -1, a) == lib.ROPE_E_COUNT
    t.out_strides = (16, 8, 4)  # in place with other strides
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_OVERLAP
    t.out_strides = (16, 8, 8)
    a.source = 3
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_SOURCE
    a.source = lib.ROPE_POS_OFFSET
    a.inv_freq = ffi.cast("double *", raw.__array_interface__["data"][0] + 1)
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_OK    # a tabled call never reads inv_freq
    t.n_heads = -1
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_COUNT
    t.n_heads = 1
    t.x_strides = t.out_strides = (-2**63, 8, 8)           # reaches nothing when empty ...
    op.n_batch = 0
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_OK
    op.n_batch = 3                                         # ... but overflows when not
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_OVERFLOW
    assert lib.rope_bandwidth_pass(address(x), -1, 0, 2) == lib.ROPE_E_COUNT
    assert lib.rope_bandwidth_pass(ffi.NULL, 4, 0, 2) == lib.ROPE_E_NULL


def test_registries_describe_themselves():
    names = [ffi.string(lib.rope_isa_name(i)).decode() for i in range(lib.rope_isa_count())]
    assert names[0] == "scalar" and lib.rope_isa_supported(0)
    assert lib.rope_isa_name(-1) == ffi.NULL and lib.rope_isa_name(len(names)) == ffi.NULL
    assert not lib.rope_isa_supported(len(names)) and lib.rope_set_isa(len(names)) == lib.ROPE_E_ISA
    assert pyrope.supported_isas() == [n for i, n in enumerate(names) if lib.rope_isa_supported(i)]
    dtypes = [(ffi.string(lib.rope_dtype_name(i)).decode(), lib.rope_dtype_size(i))
              for i in range(lib.rope_dtype_count())]
    assert dtypes == [("float32", 4), ("float16", 2), ("bfloat16", 2), ("float64", 8)]
    assert lib.rope_dtype_name(lib.rope_dtype_count()) == ffi.NULL and lib.rope_dtype_size(-1) == 0
