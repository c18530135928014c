"""pyrope.RMSNorm and the norm before the rotation: Rope.apply(norm=),
Rope.apply_qk(q_norm=, k_norm=).

Values against a float64 computation written here (RMSNorm over each head
or over a token's heads, the weight or 1 + weight, then the rotation at
angles position * inv_freq with numpy's float64 cos/sin): within 2 float32
ulps of each pair's magnitude plus the storage type's rounding. Every
instruction set gives the same bits; the three entries give the same bits;
refusals name the argument and leave the output untouched."""
import pickle

import ml_dtypes
import numpy as np
import pytest

import pyrope
from pyrope import RMSNorm, Rope, RopeError

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.float64)]
ULP = {np.dtype(np.float64): 2.0 ** -52, np.dtype(np.float32): 2.0 ** -23, np.dtype(np.float16): 2.0 ** -10,
       BF16: 2.0 ** -7}


def rand(shape, dtype=np.float32, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def reference(rope, x, positions, over, weight, eps, unit_offset=False):
    """float64 RMSNorm then rotation of x [..., seq, heads, dim]; and each value's pair magnitude."""
    x = x.astype(np.float64)
    axes = (-1,) if over == "head" else (-2, -1)
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    if weight is not None:
        w = np.asarray(weight, np.float64)
        w = (1.0 + w) if unit_offset else w
        y = y * (w if over == "head" else w.reshape(x.shape[-2], x.shape[-1]))
    r = rope.rotary_dim
    half = r // 2
    if rope.layout == "split_half":
        i0, i1 = np.arange(half), np.arange(half) + half
    else:
        i0, i1 = np.arange(0, r, 2), np.arange(1, r, 2)
    ang = np.asarray(positions, np.float64)[..., :, None] * np.asarray(rope.inv_freq, np.float64)
    c, s = np.cos(ang)[..., None, :], np.sin(ang)[..., None, :]
    out = y.copy()
    out[..., i0] = y[..., i0] * c - y[..., i1] * s
    out[..., i1] = y[..., i1] * c + y[..., i0] * s
    mag = np.abs(y)
    mag[..., i0] = mag[..., i1] = np.abs(y[..., i0]) + np.abs(y[..., i1])
    return out, mag


def assert_close(got, want, mag, dtype):
    """2 float32 ulps of the pair magnitude (a few float64 ulps for float64), plus
    the storage type's rounding of the value on store."""
    arith = 8 * 2.0 ** -52 if dtype == np.float64 else 2 * 2.0 ** -23
    bound = arith * mag + 0.5 * ULP[np.dtype(dtype)] * np.abs(want) * 1.0001
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= bound), float(np.max(err / np.maximum(bound, 1e-300)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("over", ["head", "token"])
@pytest.mark.parametrize("weighted", ["none", "weight", "unit_offset"])
# a tail past rotary_dim (normalised, not rotated); the whole head rotated, a
# multiple of 16 (the one-pass kernels where the instruction set has them)
@pytest.mark.parametrize("head_dim, rotary_dim", [(48, 32), (64, 64)])
def test_apply_with_norm_against_float64(dtype, layout, over, weighted, head_dim, rotary_dim):
    heads, seq = 3, 9
    rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim, base=500.0)
    x = rand((2, seq, heads, head_dim), dtype)
    size = head_dim * (heads if over == "token" else 1)
    weight = None if weighted == "none" else np.random.default_rng(2).uniform(-1.5, 1.5, size).astype(np.float32)
    norm = RMSNorm(weight, eps=1e-5, unit_offset=weighted == "unit_offset", over=over)
    got = rope.apply(x, offset=7, norm=norm)
    assert got.dtype == x.dtype and got.shape == x.shape
    want, mag = reference(rope, x, 7 + np.arange(seq), over, weight, 1e-5, weighted == "unit_offset")
    assert_close(got, want, mag, dtype)


def test_unit_offset_adds_one_in_float32_as_gemma_does():
    # 1 + w for w below float32's half-ulp of 1 is 1 in float32 (Gemma 3's (1.0 + weight.float()))
    rope = Rope(8, layout="split_half")
    x = rand((1, 1, 8), np.float32)
    w = np.full(8, 2.0 ** -30)
    a = rope.apply(x, norm=RMSNorm(w, unit_offset=True))
    b = rope.apply(x, norm=RMSNorm(np.ones(8)))
    assert np.array_equal(a, b)
    # float64 data keep the sum in float64
    x64 = x.astype(np.float64)
    a64 = rope.apply(x64, norm=RMSNorm(w, unit_offset=True))
    b64 = rope.apply(x64, norm=RMSNorm(np.ones(8)))
    assert not np.array_equal(a64, b64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("over", ["head", "token"])
def test_every_isa_and_entry_gives_the_same_bits(dtype, over):
    rope = Rope(64, layout="interleaved", rotary_dim=48)
    q, k = rand((1, 11, 4, 64), dtype, 1), rand((1, 11, 2, 64), dtype, 2)
    qn = RMSNorm(np.linspace(-1, 2, 64 * (4 if over == "token" else 1)), over=over)
    kn = RMSNorm(np.linspace(0.5, 1, 64 * (2 if over == "token" else 1)), over=over)
    results = []
    for isa in pyrope.supported_isas():
        with pyrope.forced_isa(isa):
            pair = rope.apply_qk(q, k, offset=3, q_norm=qn, k_norm=kn)
            alone = rope.apply(q, offset=3, norm=qn), rope.apply(k, offset=3, norm=kn)
        results.append([a.view(np.uint8) for a in pair + alone])
    for r in results:
        assert all(np.array_equal(a, b) for a, b in zip(r, results[0]))
    assert np.array_equal(results[0][0], results[0][2]) and np.array_equal(results[0][1], results[0][3])


def test_in_place_strided_seq_axis_and_out():
    rope = Rope(32, layout="split_half")
    norm = RMSNorm(np.linspace(0.5, 2, 32))
    x = rand((3, 5, 2, 32))
    want = rope.apply(x, norm=norm)
    y = x.copy()
    assert rope.apply(y, out=y, norm=norm) is y and np.array_equal(y, want)
    out = np.zeros_like(x)
    assert rope.apply(x, out=out, norm=norm) is out and np.array_equal(out, want)
    t = np.ascontiguousarray(x.swapaxes(-3, -2))   # [batch, heads, seq, dim]
    assert np.array_equal(rope.apply(t, seq_axis=-2, norm=norm).swapaxes(-3, -2), want)
    across = RMSNorm(np.linspace(0.5, 2, 64), over="token")   # 2 heads of 32
    assert np.array_equal(rope.apply(t, seq_axis=-2, norm=across).swapaxes(-3, -2), rope.apply(x, norm=across))
    with pytest.raises(ValueError, match=r"norm\.weight.*64"):
        rope.apply(t[:, :1], seq_axis=-2, norm=across)
    wide = np.zeros((3, 5, 2, 64), np.float32)
    wide[..., ::2] = x                      # a last axis that is not contiguous: the general path copies
    assert np.array_equal(rope.apply(wide[..., ::2], norm=norm), want)
    pos = np.array([4, 0, 9, 2, 7])
    want_pos = reference(rope, x, pos, "head", norm.weight, 1e-6)[0]
    assert np.abs(rope.apply(x, pos, norm=norm) - want_pos).max() < 1e-5


@pytest.mark.parametrize("bad, error, words", [
    (np.arange(8), TypeError, "float dtype"),
    (np.ones((2, 4)), ValueError, "1-D"),
    (np.ones(0), ValueError, "non-empty"),
    (np.array([1.0, np.nan]), ValueError, "finite"),
    (np.array([1.0, np.inf]), ValueError, "finite"),
    ("abc", TypeError, "float dtype"),
    (np.broadcast_to(np.float32(1), (10 ** 12,)), ValueError, "more than a norm can use"),
])
def test_bad_weights_are_refused_naming_weight(bad, error, words):
    with pytest.raises(error, match="weight") as e:
        RMSNorm(bad)
    assert words in str(e.value) and isinstance(e.value, RopeError)


@pytest.mark.parametrize("kw, error, name", [
    (dict(eps=0.0), ValueError, "eps"), (dict(eps=-1e-6), ValueError, "eps"), (dict(eps=float("nan")), ValueError, "eps"),
    (dict(eps=float("inf")), ValueError, "eps"), (dict(eps=True), TypeError, "eps"), (dict(eps="1e-6"), TypeError, "eps"),
    (dict(over="tokens"), ValueError, "over"), (dict(unit_offset=1), TypeError, "unit_offset"),
])
def test_bad_options_are_refused_naming_them(kw, error, name):
    with pytest.raises(error, match=name):
        RMSNorm(np.ones(8), **kw)


def test_unit_offset_needs_a_weight_and_float32_overflow_is_refused():
    with pytest.raises(ValueError, match="unit_offset"):
        RMSNorm(unit_offset=True)
    with pytest.raises(ValueError, match="weight"):
        RMSNorm(np.full(4, 1e39), unit_offset=True)


def test_a_weight_of_another_length_is_refused_by_the_call_with_nothing_written():
    rope = Rope(16, layout="split_half")
    x = rand((4, 2, 16))
    out = np.full_like(x, 7.0)
    with pytest.raises(ValueError, match=r"norm\.weight.*16"):
        rope.apply(x, out=out, norm=RMSNorm(np.ones(8)))
    with pytest.raises(ValueError, match=r"norm\.weight.*32"):
        rope.apply(x, out=out, norm=RMSNorm(np.ones(16), over="token"))
    with pytest.raises(ValueError, match=r"k_norm\.weight"):
        rope.apply_qk(x, x[:, :1].copy(), out=(out, None), k_norm=RMSNorm(np.ones(32), over="token"))
    with pytest.raises(TypeError, match="q_norm must be a pyrope.RMSNorm"):
        rope.apply_qk(x, x.copy(), q_norm=np.ones(16))
    with pytest.raises(TypeError, match="norm must be a pyrope.RMSNorm"):
        rope.apply(x, norm=1e-6)
    assert np.all(out == 7.0)


def test_head_dim_beyond_the_stage_row_is_refused():
    from pyrope._engine.binding import MAX_STAGE_DIM
    rope = Rope(2 * MAX_STAGE_DIM, layout="split_half")
    with pytest.raises(ValueError, match="ROPE_MAX_STAGE_DIM"):
        rope.apply(np.ones((1, 1, 2 * MAX_STAGE_DIM), np.float32), norm=RMSNorm())


def test_weights_are_copied_read_only_and_pickled():
    w = np.linspace(1, 2, 8).astype(np.float32)
    norm = RMSNorm(w, eps=1e-5, unit_offset=True, over="token")
    w[:] = 0
    assert norm.weight[0] == 1.0 and not norm.weight.flags.writeable
    again = pickle.loads(pickle.dumps(norm))
    assert (again.eps, again.unit_offset, again.over) == (1e-5, True, "token")
    assert np.array_equal(again.weight, norm.weight)
    assert "RMSNorm" in repr(norm) and "token" in repr(norm)
    assert RMSNorm(ml_dtypes.bfloat16(1.5) * np.ones(4, BF16)).weight[0] == 1.5


def test_torch_tensors_and_parameters():
    torch = pytest.importorskip("torch")
    rope = Rope(16, layout="split_half")
    w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16))
    norm = RMSNorm(w)
    x = torch.randn(5, 2, 16)
    got = rope.apply(x, norm=norm, offset=2)
    assert isinstance(got, torch.Tensor)
    assert np.array_equal(got.numpy(), rope.apply(x.numpy(), norm=norm, offset=2))
    xb = x.to(torch.bfloat16)
    rope.apply(xb, out=xb, norm=norm)
    leaf = torch.randn(5, 2, 16, requires_grad=True)
    with pytest.raises(ValueError, match="norm= is not differentiable"):
        rope.apply(leaf, norm=norm)
    with pytest.raises(ValueError, match="k_norm= is not differentiable"):
        rope.apply_qk(leaf, leaf.detach().clone(), k_norm=norm)
    with torch.no_grad():
        assert np.array_equal(rope.apply(leaf, norm=norm).numpy(), rope.apply(leaf.detach().numpy(), norm=norm))
