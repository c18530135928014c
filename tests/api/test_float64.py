"""float64 at float64 accuracy: float64 arrays are rotated with float64 rows.

The bound, with e = 2**-52, M = |x0| + |x1| of a pair and f the attention
factor (derived in test_dtypes.py): each float64 table entry is within 1.5
ulp of the exact f * cos/sin (table_f64.c), the kernel rounds one product
and one fused multiply-add (<= e * M), so a coordinate is within 2.5 e |f| M
of the exact rotation; the standard-library reference rounds cos/sin, the
factor, two products and a sum (within 3 e |f| M). Kernel vs reference:
within 5.5 e |f| M; we allow F64_ULPS = 6 such units. (With float32 rows the
same comparison was 1.3e-7 M, about 6e8 units.)
"""
import pickle

import numpy as np
import pytest

import pyrope
from pyrope import Rope, reference
from pyrope._engine.binding import ffi, lib
from array_bits import bits
from kernel_api import address, c_rotate
from tolerance import F64_ULPS, pair_magnitudes, reference_rotation

LAYOUTS = ["interleaved", "split_half"]
E64 = 2.0**-52


def ulps(got, want, x, rotary_dim, layout, factor=1.0):
    """Largest |got - want| over the rotated coordinates, in e * |f| * M."""
    mag = pair_magnitudes(x, rotary_dim, layout) * abs(factor)
    err = np.abs(got - want)
    return float(np.max(err / np.maximum(E64 * mag, 1e-300)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float64_kernel_within_a_few_ulps_of_the_reference(isa, layout, rng):
    worst = 0.0
    for case in range(12):
        head_dim = int(rng.integers(1, 70)) * 2   # every tail of the AVX2 loops
        rotary_dim = head_dim if case % 2 else int(rng.integers(1, head_dim // 2 + 1)) * 2
        rope = Rope(head_dim, layout=layout, base=float(10 ** rng.uniform(2, 6)), rotary_dim=rotary_dim)
        positions = rng.integers(-2**31 + 1, 2**31, size=3)
        x = rng.standard_normal((3, 2, head_dim)) * 10 ** rng.uniform(-3, 3)
        for inverse in (False, True):
            want = reference_rotation(rope, x, positions, inverse)
            for angles in ("auto", "table", "on_the_fly"):
                got = rope.apply(x, positions, inverse=inverse, angles=angles)
                assert got.dtype == np.float64
                worst = max(worst, ulps(got, want, x, rotary_dim, layout))
                assert np.array_equal(bits(got[..., rotary_dim:]), bits(x[..., rotary_dim:]))
    assert worst <= F64_ULPS, worst


def test_float64_with_an_attention_factor(isa, rng):
    rope = Rope(64, layout="split_half", base=5e5,
                scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    assert rope.attention_factor != 1.0
    x = rng.standard_normal((5, 3, 64))
    positions = rng.integers(0, 2**20, size=5)
    got = rope.apply(x, positions)
    want = reference_rotation(rope, x, positions)
    assert ulps(got, want, x, 64, "split_half", rope.attention_factor) <= F64_ULPS


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float64_angle_sources_bit_identical(isa, layout, rng):
    # cached rows, rows built for the call, on the fly, the direct path, and
    # explicit rope.cos_sin(dtype=float64) rows through the C API: one result
    rope = Rope(96, layout=layout, base=1e4, rotary_dim=90)
    x = rng.standard_normal((2, 9, 4, 96))
    runs = [rope.apply(x, offset=1000, angles=a) for a in ("auto", "table", "on_the_fly")]
    runs.append(rope.apply(x, offset=1000))  # the direct path, from the cached float64 window
    assert rope._tables64.window is not None and rope._tables64.window.cos.dtype == np.float64
    sparse = np.array([[1000 + s + (0 if s < 5 else 2**30) for s in range(9)]] * 2)
    cos, sin = rope.cos_sin(np.arange(1000, 1009), dtype=np.float64)
    out = np.empty_like(x)
    assert c_rotate([(x, out)], layout, 90, offset=1000, table=(cos, sin, 1000)) == 0
    runs.append(out)
    for r in runs[1:]:
        assert np.array_equal(bits(r), bits(runs[0]))
    # sparse positions wider than the cache: rows for the call, or on the fly
    a, b = rope.apply(x, sparse, angles="table"), rope.apply(x, sparse, angles="on_the_fly")
    assert np.array_equal(bits(a), bits(b))


def test_float64_rows_do_not_change_float32(isa, rng):
    rope = Rope(64, layout="split_half")
    x = rng.standard_normal((7, 2, 64)).astype(np.float32)
    before = rope.apply(x, offset=3)
    rope.apply(x.astype(np.float64), offset=3)
    assert rope._tables.window.cos.dtype == np.float32
    assert np.array_equal(rope.apply(x, offset=3).view(np.uint32), before.view(np.uint32))
    # q float64 with k float64 in one call; a copy keeps no rows but works alike
    q, k = rng.standard_normal((7, 4, 64)), rng.standard_normal((7, 2, 64))
    got = rope.apply_qk(q, k, offset=3)
    clone = pickle.loads(pickle.dumps(rope))
    again = clone.apply_qk(q, k, offset=3)
    for a, b in zip(got, again):
        assert np.array_equal(bits(a), bits(b))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("interleaved", [False, True])
def test_float64_sections_within_a_few_ulps(isa, layout, interleaved, rng):
    section = [4, 6, 6]
    half = sum(section)
    rope = Rope(2 * half + 4, layout=layout, rotary_dim=2 * half, base=1e4,
                mrope_section=section, mrope_interleaved=interleaved)
    x = rng.standard_normal((2, 3, 2, 2 * half + 4))
    pos = rng.integers(0, 3000, size=(3, 2, 3))
    runs = [rope.apply(x, pos, angles=a) for a in ("auto", "table", "on_the_fly")]
    for r in runs[1:]:
        assert np.array_equal(bits(r), bits(runs[0]))
    inv = [float(w) for w in rope.inv_freq]
    worst = 0.0
    for b in range(2):
        for s in range(3):
            p = [int(v) for v in pos[:, b, s]]
            for h in range(2):
                want = np.array(reference.rotate_sections(
                    list(x[b, s, h]), p, inv, section, interleaved, layout=layout))
                worst = max(worst, ulps(runs[0][b, s, h], want, x[b, s, h], 2 * half, layout))
    assert worst <= F64_ULPS, worst


def test_float64_rows_must_be_aligned_to_double():
    # float64 data reads double rows: a row pointer 4 bytes off is refused
    x = np.zeros((1, 2, 1, 8))
    raw = np.zeros(2 * 4 * 8 + 8, dtype=np.uint8)
    p = raw.__array_interface__["data"][0]
    base = p + (-p % 8) + 4
    op = ffi.new("rope_op *", dict(dtype=lib.ROPE_F64, layout=lib.ROPE_SPLIT_HALF, n_batch=1, n_seq=2,
                                   head_dim=8, rotary_dim=8, n_threads=1))
    t = ffi.new("rope_tensor *", dict(n_heads=1, x_strides=(16, 8, 8), out_strides=(16, 8, 8)))
    t.x = t.out = address(x)
    a = ffi.new("rope_angles *", dict(cos_table=ffi.cast("void *", base), sin_table=ffi.cast("void *", base),
                                      table_rows=2, scale=1.0))
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_E_ALIGN
    op.dtype = lib.ROPE_F32  # float rows: 4-byte alignment is enough
    xf = np.zeros((1, 2, 1, 8), np.float32)
    t.x = t.out = address(xf)
    assert lib.rope_rotate(op, t, 1, a) == lib.ROPE_OK


def test_float64_matches_transformers_run_in_float64(rng):
    # transformers' Llama rotation (rotate_half, x*cos + rotate_half(x)*sin)
    # with cos/sin of float64 angles position * inv_freq: at positions below
    # 2**12 the rounded float64 product is off by at most 2**12 * 2**-53, so
    # the two agree to about 1e-12 M (float32 rows: 1.3e-7 M).
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    rope = Rope(128, layout="split_half", base=5e5)
    x = rng.standard_normal((1, 8, 300, 128))  # [batch, heads, seq, dim] as transformers keeps it
    positions = np.arange(3800, 4100)
    inv = torch.from_numpy(np.array(rope.inv_freq))
    freqs = torch.from_numpy(positions.astype(np.float64))[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    xt = torch.from_numpy(x)
    theirs, _ = llama.apply_rotary_pos_emb(xt, xt, emb.cos()[None], emb.sin()[None])
    ours = rope.apply(x, positions, seq_axis=-2)
    mag = pair_magnitudes(x, 128, "split_half")
    assert np.max(np.abs(ours - theirs.numpy()) / mag) < 1e-12
