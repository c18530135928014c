"""The seeds' properties of RoPE, checked through the kernel on every ISA."""
import numpy as np
import pytest

from pyrope import Rope, reference
from array_bits import bits
from tolerance import EPS32

LAYOUTS = ["interleaved", "split_half"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norm_preserved(isa, layout, rng):
    rope = Rope(128, layout=layout)
    x = rng.standard_normal((4, 16, 8, 128)).astype(np.float32)
    pos = rng.integers(0, 2**31 - 1, size=16)
    y = rope.apply(x, pos)
    n0 = np.linalg.norm(x.astype(np.float64), axis=-1)
    n1 = np.linalg.norm(y.astype(np.float64), axis=-1)
    np.testing.assert_allclose(n1, n0, rtol=8 * EPS32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_score_depends_only_on_distance(isa, layout, rng):
    # The seed's experiment: gap 2 at starts 3, 10, 100, 4000.
    dim = 64
    rope = Rope(dim, layout=layout)
    q = rng.standard_normal((1, 1, dim)).astype(np.float32)
    k = rng.standard_normal((1, 1, dim)).astype(np.float32)
    rotary, additive = [], []
    for start in (3, 10, 100, 4000):
        qm = rope.apply(q, [start]).astype(np.float64)
        kn = rope.apply(k, [start + 2]).astype(np.float64)
        rotary.append(float(np.sum(qm * kn)))
        qv, kv = [float(v) for v in q.ravel()], [float(v) for v in k.ravel()]
        additive.append(reference.additive_score(qv, kv, start, start + 2))
    scale = float(np.sum(np.abs(q.astype(np.float64)) * 1) * np.max(np.abs(k)))
    assert max(rotary) - min(rotary) <= 64 * EPS32 * scale
    assert max(additive) - min(additive) > 1e-2  # the additive score moves with the start


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inverse_after_forward_is_identity(isa, layout, rng):
    rope = Rope(96, layout=layout, base=5e5, rotary_dim=64)
    x = rng.standard_normal((2, 9, 4, 96)).astype(np.float32)
    pos = rng.integers(-2**31 + 1, 2**31, size=(2, 9))
    back = rope.apply(rope.apply(x, pos), pos, inverse=True)
    np.testing.assert_allclose(back, x, rtol=0, atol=8 * EPS32 * float(np.max(np.abs(x))))


def test_layouts_agree_after_permutation(isa, rng):
    # interleaved vector v and split-half vector u = P v (u[i] = v[2i], u[i+h] = v[2i+1]).
    dim, rot = 80, 48
    v = rng.standard_normal((5, 3, dim)).astype(np.float32)
    perm = np.concatenate([np.arange(0, rot, 2), np.arange(1, rot, 2), np.arange(rot, dim)])
    u = v[..., perm]
    pos = [0, 3, 77, 4096, 2**31 - 1]
    yi = Rope(dim, layout="interleaved", rotary_dim=rot).apply(v, pos)
    ys = Rope(dim, layout="split_half", rotary_dim=rot).apply(u, pos)
    assert np.array_equal(bits(yi[..., perm]), bits(ys))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_offset_equals_explicit_positions(isa, layout, rng):
    rope = Rope(64, layout=layout)
    x = rng.standard_normal((3, 7, 2, 64)).astype(np.float32)
    a = rope.apply(x, offset=1000)
    b = rope.apply(x, np.arange(1000, 1007))
    c = rope.apply(x, np.broadcast_to(np.arange(1000, 1007), (3, 7)))
    assert np.array_equal(bits(a), bits(b)) and np.array_equal(bits(a), bits(c))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_equals_out_of_place_and_input_kept(isa, layout, rng):
    rope = Rope(64, layout=layout, rotary_dim=40)
    x = rng.standard_normal((2, 5, 3, 64)).astype(np.float32)
    keep = x.copy()
    y = rope.apply(x, offset=12)
    assert np.array_equal(bits(x), bits(keep))  # out-of-place leaves x alone
    z = x.copy()
    r = rope.apply(z, offset=12, out=z)
    assert r is z and np.array_equal(bits(z), bits(y))
    w = np.full_like(x, np.nan)
    r = rope.apply(x, offset=12, out=w)
    assert r is w and np.array_equal(bits(w), bits(y))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_views_equal_contiguous_copies(isa, layout, rng):
    rope = Rope(32, layout=layout)
    base = rng.standard_normal((3, 10, 6, 70)).astype(np.float32)
    views = [
        base[:, ::2, ::3, 3:35],           # sliced everything
        base[::-1, ::-1, :, 1:33],         # negative strides
        base[..., 5:37].transpose(1, 0, 2, 3),  # batch/seq swapped (unmergeable batch)
        np.asfortranarray(base[0, :, :, :32]),  # Fortran order
        base[..., 0:64:2],                 # non-contiguous last axis (copied)
    ]
    for v in views:
        pos = np.arange(v.shape[-3]) * 5 + 1
        got = rope.apply(v, pos)
        want = rope.apply(np.ascontiguousarray(v), pos)
        assert np.array_equal(bits(got), bits(want))
        inplace = v.copy(order="K")
        inplace_view = inplace
        rope.apply(inplace_view, pos, out=inplace_view)
        assert np.array_equal(bits(inplace_view), bits(want))


def test_misaligned_data(isa, rng):
    rope = Rope(24, layout="interleaved")
    raw = np.zeros(4 * 3 * 2 * 24 + 1, dtype=np.uint8)
    x = raw[1:].view(np.float32).reshape(3, 2, 24)  # one byte off alignment
    x[...] = rng.standard_normal(x.shape)
    want = rope.apply(np.ascontiguousarray(x), offset=5)
    got = rope.apply(x, offset=5)
    rope.apply(x, offset=5, out=x)
    assert np.array_equal(bits(got), bits(want)) and np.array_equal(bits(x), bits(want))


def test_fused_qkv_view_values_untouched(isa, rng):
    # q, k, v sliced out of one fused projection buffer; v must never change.
    heads, kv_heads, dim = 8, 2, 64
    qkv = rng.standard_normal((2, 5, (heads + 2 * kv_heads) * dim)).astype(np.float32)
    q = qkv[..., : heads * dim].reshape(2, 5, heads, dim)
    k = qkv[..., heads * dim:(heads + kv_heads) * dim].reshape(2, 5, kv_heads, dim)
    v_before = qkv[..., (heads + kv_heads) * dim:].copy()
    q_want = Rope(dim, layout="split_half").apply(q.copy(), offset=3)
    k_want = Rope(dim, layout="split_half").apply(k.copy(), offset=3)
    q2, k2 = Rope(dim, layout="split_half").apply_qk(q, k, offset=3, out=(q, k))
    assert np.shares_memory(q2, qkv) and np.shares_memory(k2, qkv)
    assert np.array_equal(bits(qkv[..., (heads + kv_heads) * dim:]), bits(v_before))
    assert np.array_equal(bits(q), bits(q_want)) and np.array_equal(bits(k), bits(k_want))


def test_seq_axis_minus_two_equals_transposed(isa, rng):
    rope = Rope(16, layout="split_half")
    x = rng.standard_normal((2, 4, 9, 16)).astype(np.float32)  # [batch, heads, seq, dim]
    got = rope.apply(x, np.arange(9) + 40, seq_axis=-2)
    want = rope.apply(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), np.arange(9) + 40)
    assert np.array_equal(bits(got), bits(want.transpose(0, 2, 1, 3)))


def test_per_row_positions_left_padding(isa, rng):
    rope = Rope(32, layout="interleaved")
    x = rng.standard_normal((3, 6, 2, 32)).astype(np.float32)
    pos = np.array([[0, 0, 0, 0, 1, 2], [0, 1, 2, 3, 4, 5], [9, 10, 11, 12, 13, 14]])
    got = rope.apply(x, pos)
    for b in range(3):
        assert np.array_equal(bits(got[b]), bits(rope.apply(x[b], pos[b])))


def test_sparse_positions_use_exact_rows(isa, rng):
    # Positions far apart (packed sequences) take the per-token table path.
    rope = Rope(16, layout="split_half")
    x = rng.standard_normal((4, 1, 16)).astype(np.float32)
    pos = np.array([0, 2**30, 5, 2**31 - 1])
    got = rope.apply(x, pos)
    for s in range(4):
        assert np.array_equal(bits(got[s]), bits(rope.apply(x[s:s + 1], pos[s:s + 1])[0]))


def test_apply_qk_gqa_matches_apply(isa, rng):
    rope = Rope(64, layout="interleaved", rotary_dim=32)
    q = rng.standard_normal((2, 7, 8, 64)).astype(np.float32)
    k = rng.standard_normal((2, 7, 2, 64)).astype(np.float32)
    q2, k2 = rope.apply_qk(q, k, offset=100)
    assert np.array_equal(bits(q2), bits(rope.apply(q, offset=100)))
    assert np.array_equal(bits(k2), bits(rope.apply(k, offset=100)))


def test_zero_size_is_a_no_op(isa):
    rope = Rope(8, layout="split_half")
    for shape in [(0, 2, 8), (3, 0, 8), (2, 0, 3, 8)]:
        x = np.zeros(shape, dtype=np.float32)
        y = rope.apply(x, offset=5)
        assert y.shape == shape
    assert rope.cos_sin(np.zeros(0, dtype=np.int64))[0].shape == (0, 4)


def test_nan_inf_stay_in_their_pair(isa):
    rope = Rope(8, layout="interleaved")
    x = np.ones((1, 1, 8), dtype=np.float32)
    x[0, 0, 2] = np.nan
    x[0, 0, 5] = np.inf
    y = rope.apply(x, [3])[0, 0]
    assert np.all(np.isfinite(y[[0, 1, 6, 7]]))
    assert np.isnan(y[2]) and np.isnan(y[3])
    assert not np.all(np.isfinite(y[4:6]))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_on_the_fly_angles_equal_table_rows(isa, layout, rng):
    # The kernel's no-table path builds each row exactly as the table does.
    from kernel_api import c_rotate
    rope = Rope(80, layout=layout, rotary_dim=72, base=5e5)
    x = rng.standard_normal((2, 6, 3, 80)).astype(np.float32)
    pos = rng.integers(-2**31 + 1, 2**31, size=(2, 6))
    want = rope.apply(x, pos)
    got = np.empty_like(x)
    assert c_rotate([(x, got)], layout, rope.rotary_dim, positions=pos, inv_freq=rope.inv_freq,
                    scale=rope.attention_factor) == 0
    assert np.array_equal(bits(got), bits(want))


def test_apply_qk_with_zero_query_heads_still_rotates_keys(isa, rng):
    rope = Rope(16, layout="split_half")
    q = np.zeros((2, 3, 0, 16), dtype=np.float32)
    k = rng.standard_normal((2, 3, 2, 16)).astype(np.float32)
    q2, k2 = rope.apply_qk(q, k, offset=5)
    assert q2.shape == q.shape
    assert np.array_equal(bits(k2), bits(rope.apply(k, offset=5)))
    assert not np.array_equal(bits(k2), bits(k))
