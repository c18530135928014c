"""Autograd through pyrope's rotations: gradcheck in float64 on every entry
that rotates, gradients equal to torch's own autograd of an independent
torch RoPE (cos/sin from pyrope.reference), and torch's rules for in-place
and out= calls on tensors that require grad."""
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from pyrope import PartialRotary, Rope, apply_varlen, cache, errors, reference

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def leaf(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()


# ---- an independent rotation, differentiated by torch ----------------------------------------

def torch_rope(x, positions, rope, seq_axis=-3, inverse=False):
    """x rotated with torch ops: cos/sin of the exact angles from pyrope.reference
    (times the attention factor), pairs as the layout says; positions per token
    ``[*batch, seq]``. torch differentiates it."""
    tok = x if seq_axis == -3 else x.transpose(-3, -2)
    inv_freq = [float(w) for w in rope.inv_freq]
    pos = np.broadcast_to(np.asarray(positions), tok.shape[:-2])
    cos, sin = reference.cos_sin(pos.reshape(-1).tolist(), inv_freq)
    cos = torch.tensor(cos, dtype=torch.float64).reshape(*tok.shape[:-2], 1, -1) * rope.attention_factor
    sin = torch.tensor(sin, dtype=torch.float64).reshape(*tok.shape[:-2], 1, -1) * rope.attention_factor
    if inverse:
        sin = -sin
    half, r = len(inv_freq), 2 * len(inv_freq)
    if rope.layout == "split_half":
        x0, x1 = tok[..., :half], tok[..., half:r]
        y = torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, tok[..., r:]], dim=-1)
    else:
        x0, x1 = tok[..., 0:r:2], tok[..., 1:r:2]
        pairs = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
        y = torch.cat([pairs, tok[..., r:]], dim=-1)
    return y if seq_axis == -3 else y.transpose(-3, -2)


CASES = [  # (rope, positions or None, offset, seq_axis, shape)
    (Rope(16, layout="split_half"), None, 7, -3, (2, 3, 2, 16)),
    (Rope(16, layout="interleaved", rotary_dim=10), [[0, 5, 9], [100, 2, 70000]], 0, -3, (2, 3, 2, 16)),
    (Rope(16, layout="split_half", rotary_dim=12, scaling=YARN), [3, 1, 4], 0, -2, (2, 2, 3, 16)),
    (Rope(8, layout="interleaved", scaling=YARN), None, 123456, -2, (1, 2, 4, 8)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("inverse", [False, True])
def test_gradient_equals_torch_autograd_of_an_independent_rope(case, inverse):
    rope, positions, offset, seq_axis, shape = CASES[case]
    n_seq = shape[seq_axis]
    pos = np.arange(offset, offset + n_seq) if positions is None else np.asarray(positions)
    x = leaf(*shape)
    x_ref = x.detach().clone().requires_grad_()
    upstream = leaf(*shape, seed=1).detach()
    y = rope.apply(x, None if positions is None else torch.tensor(positions), offset=offset, seq_axis=seq_axis,
                   inverse=inverse)
    y_ref = torch_rope(x_ref, pos, rope, seq_axis, inverse)
    scale = float(y_ref.detach().abs().max())
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-14 * scale)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=1e-14 * float(x_ref.grad.abs().max()))
    if rope.attention_factor != 1.0:   # the adjoint carries the factor: a wrong one shows
        assert not torch.allclose(x.grad, x_ref.grad / rope.attention_factor)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_gradcheck_apply(case):
    rope, positions, offset, seq_axis, shape = CASES[case]
    pos = None if positions is None else torch.tensor(positions)
    x = leaf(*shape)
    assert gradcheck(lambda t: rope.apply(t, pos, offset=offset, seq_axis=seq_axis), (x,))
    assert gradcheck(lambda t: rope.apply(t, pos, offset=offset, seq_axis=seq_axis, inverse=True), (x,))


def test_gradgradcheck_apply():
    # backward is itself a pyrope rotation, differentiable again
    rope = Rope(8, layout="split_half", scaling=YARN)
    x = leaf(2, 3, 2, 8)
    assert gradgradcheck(lambda t: rope.apply(t, torch.tensor([5, 0, 9])), (x,))


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
def test_gradcheck_apply_qk(layout):
    rope = Rope(16, layout=layout, rotary_dim=12, scaling=YARN)
    q, k = leaf(2, 3, 4, 16), leaf(2, 3, 2, 16, seed=1)     # grouped-query heads
    positions = torch.tensor([[1, 2, 3], [40, 41, 9]])
    assert gradcheck(lambda a, b: rope.apply_qk(a, b, positions), (q, k))
    assert gradcheck(lambda a, b: rope.apply_qk(a, b, offset=11), (q, k))
    assert gradcheck(lambda a, b: rope.apply_qk(a, b, offset=3, seq_axis=-2), (leaf(2, 4, 3, 16), leaf(2, 2, 3, 16)))


def test_apply_qk_gradient_against_the_independent_rope():
    rope = Rope(16, layout="interleaved", scaling=YARN)
    q, k = leaf(3, 4, 16), leaf(3, 2, 16, seed=1)
    qr, kr = (t.detach().clone().requires_grad_() for t in (q, k))
    gq, gk = leaf(3, 4, 16, seed=2).detach(), leaf(3, 2, 16, seed=3).detach()
    qo, ko = rope.apply_qk(q, k, offset=17)
    ((qo * gq).sum() + (ko * gk).sum()).backward()
    pos = np.arange(17, 20)
    ((torch_rope(qr, pos, rope) * gq).sum() + (torch_rope(kr, pos, rope) * gk).sum()).backward()
    torch.testing.assert_close(q.grad, qr.grad, rtol=0, atol=1e-14 * float(qr.grad.abs().max()))
    torch.testing.assert_close(k.grad, kr.grad, rtol=0, atol=1e-14 * float(kr.grad.abs().max()))


def test_apply_qk_with_one_input_or_one_output_in_use():
    rope = Rope(8, layout="split_half")
    q, k = leaf(2, 2, 8), leaf(2, 1, 8, seed=1).detach()     # k needs no gradient
    qo, ko = rope.apply_qk(q, k, offset=2)
    qo.sum().backward()                                       # k's output unused
    assert k.grad is None
    qr = q.detach().clone().requires_grad_()
    torch_rope(qr, np.arange(2, 4), rope).sum().backward()
    torch.testing.assert_close(q.grad, qr.grad, rtol=0, atol=1e-14)


@pytest.mark.parametrize("convention, off", [("prefix", 0), ("proportional", 0), ("offset", 6)])
def test_gradcheck_partial_rotary(convention, off):
    pr = PartialRotary(16, 8, convention=convention, layout="interleaved", dim_offset=off)
    x, k = leaf(2, 3, 16), leaf(2, 1, 16, seed=1)
    assert gradcheck(lambda t: pr.apply(t, offset=5), (x,))
    assert gradcheck(lambda t: pr.apply(t, torch.tensor([4, 0]), inverse=True), (x,))
    assert gradcheck(lambda a, b: pr.apply_qk(a, b, offset=5), (x, k))


def test_gradcheck_varlen_and_prepared():
    rope = Rope(8, layout="split_half", scaling=YARN)
    x = leaf(5, 2, 8)
    cu = torch.tensor([0, 2, 5])
    assert gradcheck(lambda t: apply_varlen(rope, t, cu, torch.tensor([3, 1000])), (x,))
    prepared = rope.prepare(x.detach())
    assert gradcheck(lambda t: prepared(t, offset=9), (x,))
    both = rope.prepare_qk(x.detach(), x.detach()[:, :1].clone())
    assert gradcheck(lambda a, b: both(a, b, positions=torch.arange(5)), (x, leaf(5, 1, 8, seed=1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_low_precision_gradients_are_the_rounded_adjoint(dtype):
    rope = Rope(16, layout="split_half")
    x = leaf(2, 3, 16, dtype=dtype)
    g = leaf(2, 3, 16, seed=1, dtype=dtype).detach()
    y = rope.apply(x, offset=4)
    y.backward(g)
    assert x.grad.dtype == dtype and y.dtype == dtype
    want = torch_rope(g.double(), np.arange(4, 6), rope, inverse=True)
    tol = {torch.float32: 2.0**-21, torch.float16: 2.0**-9, torch.bfloat16: 2.0**-6}[dtype]
    torch.testing.assert_close(x.grad.double(), want, rtol=0, atol=tol * float(want.abs().max()))


# ---- in place and out= under autograd ----------------------------------------------------------

def test_in_place_on_a_non_leaf_rebases_its_history():
    rope = Rope(8, layout="interleaved", scaling=YARN)
    a = leaf(2, 3, 8)
    y = a * 2.0
    ptr = y.data_ptr()
    assert rope.apply(y, offset=3, out=y) is y and y.data_ptr() == ptr
    g = leaf(2, 3, 8, seed=1).detach()
    y.backward(g)
    want = 2.0 * torch_rope(g, np.arange(3, 5), rope, inverse=True)
    torch.testing.assert_close(a.grad, want, rtol=0, atol=1e-14 * float(want.abs().max()))
    assert gradcheck(lambda t: rope.apply(t * 1.0, offset=3, out=None), (a,))

    def in_place(t):
        u = t * 1.0
        return rope.apply(u, offset=3, out=u)
    assert gradcheck(in_place, (a,))


def test_in_place_on_a_view_of_a_non_leaf():
    # a slot of an activation buffer: torch's CopySlices carries the gradient through
    rope = Rope(8, layout="split_half")
    a = leaf(2, 4, 2, 8)

    def slot_in_place(t):
        buf = t * 1.0
        slot = buf[:, 1:2]
        rope.apply(slot, offset=9, out=slot)
        return buf
    assert gradcheck(slot_in_place, (a,))
    slot_in_place(a).sum().backward()
    ones = torch.ones(2, 1, 2, 8, dtype=torch.float64)
    torch.testing.assert_close(a.grad[:, 1:2], torch_rope(ones, [9], rope, inverse=True), rtol=0, atol=1e-14)
    torch.testing.assert_close(a.grad[:, 0], torch.ones_like(a.grad[:, 0]))


def test_in_place_on_a_leaf_that_requires_grad_is_refused_before_writing():
    rope = Rope(8, layout="split_half")
    x = leaf(2, 1, 8)
    before = x.detach().clone()
    with pytest.raises(errors.ValueError, match="^out=x rotates in place a leaf tensor that requires grad"):
        rope.apply(x, out=x)
    with pytest.raises(errors.ValueError, match="^out=x rotates in place a view of a leaf"):
        view = x[:1]
        rope.apply(view, out=view)
    q, k = leaf(2, 1, 8, seed=1), leaf(2, 1, 8, seed=2)
    with pytest.raises(errors.ValueError, match=r"^out\[0\]=q rotates in place a leaf"):
        rope.apply_qk(q, k, out=(q, k))
    assert torch.equal(x, before)
    with torch.no_grad():                      # torch's rule: fine without grad, no copy
        ptr = x.data_ptr()
        assert rope.apply(x, offset=1, out=x) is x and x.data_ptr() == ptr
    assert not torch.equal(x, before)


def test_out_into_another_tensor_with_grad_is_refused():
    rope = Rope(8, layout="split_half")
    x = leaf(2, 1, 8)
    cache_ = torch.zeros(2, 3, 8, dtype=torch.float64)
    with pytest.raises(errors.ValueError, match="^out is another tensor, and a result written into it cannot be "
                                                "differentiated"):
        rope.apply(x, out=cache_[:, :1])
    with pytest.raises(errors.ValueError, match=r"^out\[1\] is another tensor"):
        rope.apply_qk(x * 1.0, x.detach() * 1.0, out=(None, torch.zeros(2, 1, 8, dtype=torch.float64)))
    grad_out = torch.zeros(2, 1, 8, dtype=torch.float64, requires_grad=True) * 1.0
    with pytest.raises(errors.ValueError, match="^out is another tensor"):
        rope.apply(x.detach(), out=grad_out)   # torch refuses out= when any argument requires grad
    assert not cache_.any() and not grad_out.any()
    with torch.no_grad():
        rope.apply(x, out=cache_[:, :1])
    assert cache_[:, :1].any()


def test_non_differentiable_entries_refuse_tensors_that_require_grad():
    rope = Rope(8, layout="split_half")
    k = leaf(3, 1, 8)
    with pytest.raises(errors.ValueError, match=r"^pyrope.cache.rerotate is not differentiable, and k requires grad"):
        cache.rerotate(rope, k * 1.0, [0, 1, 2], [1, 2, 3])
    with pytest.raises(errors.ValueError, match=r"convert_keys is not differentiable, and k requires grad"):
        rope.convert_keys(k, [0, 1, 2], Rope(8, layout="split_half", base=500.0))
    with torch.no_grad():
        moved = cache.rerotate(rope, k, [0, 1, 2], [1, 2, 3])
    assert moved is k
