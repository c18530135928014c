"""Every array entry point on CPU torch tensors: in place in the tensor's own
storage, new results as tensors of the input's dtype, positions as int
tensors, strided views (KV-cache slots, transposed q), and the refusals
(another device, another dtype) named, before anything is written.

Values are checked against pyrope.reference (tests/support/tensor_oracle.py); the
same call on numpy arrays giving the same bits checks the zero-copy plumbing
on top."""
import gc

import numpy as np
import pytest
import torch

import pyrope
from pyrope import PartialRotary, Rope, apply_varlen, cache, errors, layout, reference
from tensor_oracle import BF16, assert_close, expected, numpy_of
import readme_blocks

DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
          torch.bfloat16: BF16, torch.float64: np.dtype(np.float64)}
LAYOUTS = ["split_half", "interleaved"]


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def bits(t):
    """A tensor's bits as a numpy integer array (any dtype, any strides)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints).numpy().copy()


def as_numpy(t):
    """A numpy copy of tensor ``t`` in its own dtype (bfloat16 as ml_dtypes)."""
    if t.dtype is torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().copy().view(BF16)
    return t.contiguous().numpy().copy()


# ---- Rope.apply ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("layout_", LAYOUTS)
def test_in_place_rotates_the_tensors_own_storage(dtype, layout_):
    rope = Rope(32, layout=layout_, rotary_dim=24)
    x = rand(2, 3, 4, 32, dtype=dtype)
    before = numpy_of(x)
    as_array = as_numpy(x)
    ptr, version = x.data_ptr(), x._version
    y = rope.apply(x, offset=5, out=x)
    assert y is x and x.data_ptr() == ptr and x.dtype == dtype
    assert x._version > version     # written as torch's in-place ops write
    assert_close(numpy_of(x), expected(rope, before, offset=5), before, rope, DTYPES[dtype])
    # the numpy call on the same values gives the same bits: nothing but a view in between
    want = rope.apply(as_array, offset=5)
    assert np.array_equal(bits(x), want.view({2: np.int16, 4: np.int32, 8: np.int64}[want.itemsize]))


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_new_result_is_a_tensor_of_the_same_dtype(dtype):
    rope = Rope(16, layout="split_half")
    x = rand(3, 2, 16, dtype=dtype)
    before = bits(x)
    positions = torch.tensor([7, 0, 100000])
    y = rope.apply(x, positions)
    assert type(y) is torch.Tensor and y.dtype == dtype and y.shape == x.shape
    assert y.data_ptr() != x.data_ptr()
    assert np.array_equal(bits(x), before)          # x untouched
    assert_close(numpy_of(y), expected(rope, numpy_of(x), positions.numpy()), numpy_of(x), rope, DTYPES[dtype])
    y[...] = 0                                      # the result owns its memory
    assert np.array_equal(bits(x), before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_out_is_a_slot_of_a_kv_cache(dtype):
    rope = Rope(32, layout="split_half")
    kv = torch.zeros(2, 8, 4, 32, dtype=dtype)      # [batch, max_seq, heads, dim]
    ptr = kv.data_ptr()
    steps = [rand(2, 1, 4, 32, dtype=dtype, seed=s) for s in range(3)]
    for pos, k in enumerate(steps):
        slot = kv[:, pos:pos + 1]
        assert not slot.is_contiguous()
        assert rope.apply(k, offset=pos + 10, out=slot) is slot
    assert kv.data_ptr() == ptr
    for pos, k in enumerate(steps):
        assert_close(numpy_of(kv[:, pos:pos + 1]), expected(rope, numpy_of(k), offset=pos + 10), numpy_of(k), rope,
                     DTYPES[dtype])
    assert not kv[:, 3:].any()                      # nothing written past the slots


@pytest.mark.parametrize("in_place", [False, True])
def test_transposed_q_with_seq_axis_minus_2(in_place):
    rope = Rope(16, layout="interleaved")
    b, s, h, d = 2, 5, 3, 16
    q = rand(b, s, h * d).view(b, s, h, d).transpose(1, 2)   # [b, h, s, d], a strided view
    assert not q.is_contiguous()
    before = numpy_of(q)
    positions = torch.tensor([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5]], dtype=torch.int32)
    got = rope.apply(q, positions, seq_axis=-2, out=q if in_place else None)
    assert (got is q) == in_place and got.shape == q.shape
    assert_close(numpy_of(got), expected(rope, before, positions.numpy(), seq_axis=-2), before, rope, np.float32)


@pytest.mark.parametrize("pdtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_positions_as_int_tensors(pdtype):
    rope = Rope(16, layout="split_half")
    x = rand(2, 3, 2, 16)
    positions = torch.tensor([[3, 1, 4], [1, 5, 9]], dtype=pdtype)
    want = expected(rope, numpy_of(x), positions.numpy().astype(np.int64))
    assert_close(numpy_of(rope.apply(x, positions)), want, numpy_of(x), rope, np.float32)
    # a numpy x with tensor positions: a numpy result
    got = rope.apply(x.numpy(), positions)
    assert type(got) is np.ndarray
    assert_close(got, want, numpy_of(x), rope, np.float32)


def test_strided_positions_tensor():
    rope = Rope(8, layout="split_half")
    x = rand(4, 1, 8)
    positions = torch.arange(8)[::2]                # a strided int64 view
    assert_close(numpy_of(rope.apply(x, positions)), expected(rope, numpy_of(x), [0, 2, 4, 6]), numpy_of(x), rope,
                 np.float32)


def test_numpy_and_torch_mixed():
    rope = Rope(8, layout="split_half")
    x = rand(3, 2, 8)
    out_np = np.zeros((3, 2, 8), np.float32)
    assert rope.apply(x, offset=2, out=out_np) is out_np
    out_t = torch.zeros(3, 2, 8)
    assert rope.apply(x.numpy(), offset=2, out=out_t) is out_t
    assert np.array_equal(out_np, out_t.numpy())
    assert_close(out_np, expected(rope, numpy_of(x), offset=2), numpy_of(x), rope, np.float32)


def test_requires_grad_tensor_in_place_under_no_grad():
    rope = Rope(8, layout="split_half")
    w = rand(3, 2, 8).requires_grad_()
    before = numpy_of(w)
    ptr = w.data_ptr()
    with torch.no_grad():
        assert rope.apply(w, offset=1, out=w) is w
        y = rope.apply(w, offset=1)
    assert w.data_ptr() == ptr and w.requires_grad and not y.requires_grad
    assert_close(numpy_of(w), expected(rope, before, offset=1), before, rope, np.float32)


def test_parameter_and_inference_tensors():
    rope = Rope(8, layout="split_half")
    p = torch.nn.Parameter(rand(2, 1, 8), requires_grad=False)
    before = numpy_of(p)
    assert rope.apply(p, offset=3, out=p) is p
    assert_close(numpy_of(p), expected(rope, before, offset=3), before, rope, np.float32)
    with torch.inference_mode():
        t = rand(2, 1, 8)
        before = numpy_of(t)
        assert rope.apply(t, offset=3, out=t) is t
        assert_close(numpy_of(t), expected(rope, before, offset=3), before, rope, np.float32)


def test_a_tensor_saved_for_backward_then_rotated_is_caught_by_autograd():
    # pyrope writes through a view torch cannot see: it bumps the version as torch's in-place ops do
    rope = Rope(8, layout="split_half")
    w = rand(2, 1, 8).requires_grad_()
    k = rand(2, 1, 8)
    loss = (w * k).sum()                            # saves k for w's gradient
    with torch.no_grad():
        rope.apply(k, offset=1, out=k)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_overlaps_as_numpy_arrays_have_them():
    # an out overlapping x reads x as it was; two outputs sharing memory are refused, nothing written
    rope = Rope(8, layout="split_half")
    buf = rand(5, 1, 8)
    x0 = numpy_of(buf[:4])
    assert rope.apply(buf[:4], offset=0, out=buf[1:]).data_ptr() == buf[1:].data_ptr()
    assert_close(numpy_of(buf[1:]), expected(rope, x0, offset=0), x0, rope, np.float32)
    q, k = rand(2, 1, 8, seed=1), rand(2, 1, 8, seed=2)
    shared = torch.zeros(3, 1, 8)
    before = bits(shared), bits(q), bits(k)
    with pytest.raises(errors.ValueError, match="out.0. and out.1. overlap"):
        rope.apply_qk(q, k, out=(shared[:2], shared[1:]))
    assert all(np.array_equal(a, b) for a, b in zip((bits(shared), bits(q), bits(k)), before))


# ---- refusals ----------------------------------------------------------------------------------

def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("call, name", [
    (lambda r, x: r.apply(_meta(2, 1, 8)), "x"),
    (lambda r, x: r.apply(x, out=_meta(2, 1, 8)), "out"),
    (lambda r, x: r.apply(x, _meta(2, dtype=torch.int64)), "positions"),
    (lambda r, x: r.apply_qk(x, _meta(2, 1, 8)), "k"),
    (lambda r, x: r.apply_qk(x, x.clone(), out=(x, _meta(2, 1, 8))), "out[1]"),
    (lambda r, x: r.cos_sin(_meta(3, dtype=torch.int64)), "positions"),
    (lambda r, x: cache.rerotate(r, _meta(2, 1, 8), [0, 1], [2, 3]), "k"),
    (lambda r, x: apply_varlen(r, _meta(2, 1, 8), [0, 2]), "x"),
])
def test_a_tensor_on_another_device_is_a_type_error_naming_it(call, name):
    rope = Rope(8, layout="split_half")
    x = rand(2, 1, 8)
    before = bits(x)
    with pytest.raises(errors.TypeError, match=rf"^{name.replace('[', '.').replace(']', '.')} must be a CPU tensor"):
        call(rope, x)
    assert np.array_equal(bits(x), before)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.uint8], ids=str)
def test_an_unserved_dtype_is_a_type_error_naming_it(dtype):
    rope = Rope(8, layout="split_half")
    x = torch.zeros(2, 1, 8, dtype=dtype)
    with pytest.raises(errors.TypeError, match=rf"^x must have dtype float32, float16, bfloat16 or float64, got {dtype}"):
        rope.apply(x)
    good = rand(2, 1, 8)
    before = bits(good)
    with pytest.raises(errors.TypeError, match="^out must have dtype"):
        rope.apply(good, out=x)
    assert np.array_equal(bits(good), before)


def test_mismatched_out_dtype_and_float_positions_are_refused():
    rope = Rope(8, layout="split_half")
    x = rand(2, 1, 8)
    with pytest.raises(errors.TypeError, match="out"):
        rope.apply(x, out=torch.zeros(2, 1, 8, dtype=torch.float64))
    with pytest.raises(errors.TypeError, match="positions must be an integer array"):
        rope.apply(x, torch.tensor([0.0, 1.0]))
    with pytest.raises(errors.TypeError, match="positions must be an integer array"):
        rope.apply(x, torch.tensor([0, 1], dtype=torch.bfloat16))


def test_sparse_and_negative_view_tensors_are_refused():
    rope = Rope(8, layout="split_half")
    sparse = rand(2, 1, 8).to_sparse()
    with pytest.raises(errors.TypeError, match="^x must be a dense"):
        rope.apply(sparse)
    negative = torch._neg_view(rand(2, 1, 8))   # its memory holds -x: no view gives x's values
    with pytest.raises(errors.TypeError, match="^x .torch.float32. has no numpy view"):
        rope.apply(negative)
    x = rand(2, 1, 8)
    before = bits(x)
    with pytest.raises(errors.TypeError, match="^out .torch.float32. has no numpy view"):
        rope.apply(x, out=torch._neg_view(torch.zeros(2, 1, 8)))
    assert np.array_equal(bits(x), before)


def test_no_torch_import_and_no_tensor_check_on_numpy_calls():
    # the numpy path never looks torch up: run in a process where touching it would fail
    import subprocess
    import sys

    from checkout import ROOT, env_with_checkout
    code = ("import sys, numpy as np, pyrope\n"
            "r = pyrope.Rope(8, layout='split_half')\n"
            "x = np.ones((2, 1, 8), np.float32)\n"
            "r.apply(x, out=x); r.apply_qk(x, x.copy(), positions=[3, 4]); r.cos_sin([1, 2])\n"
            "pyrope.cache.rerotate(r, x, [0, 1], [1, 2]); pyrope.layout.convert_heads(x, 'split_half', 'interleaved')\n"
            "assert 'torch' not in sys.modules and 'pyrope._interop.torch_autograd' not in sys.modules\n"
            "assert 'pyrope._interop.dlpack' not in sys.modules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=env_with_checkout())
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---- apply_qk ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_apply_qk_in_place_and_into_a_cache(dtype):
    rope = Rope(16, layout="interleaved")
    q, k = rand(2, 1, 4, 16, dtype=dtype), rand(2, 1, 2, 16, dtype=dtype, seed=1)   # grouped-query heads
    q0, k0 = numpy_of(q), numpy_of(k)
    ptrs = q.data_ptr(), k.data_ptr()
    qo, ko = rope.apply_qk(q, k, offset=6, out=(q, k))
    assert qo is q and ko is k and (q.data_ptr(), k.data_ptr()) == ptrs
    assert_close(numpy_of(q), expected(rope, q0, offset=6), q0, rope, DTYPES[dtype])
    assert_close(numpy_of(k), expected(rope, k0, offset=6), k0, rope, DTYPES[dtype])
    # q in place, k into the next slot of a cache
    kv = torch.zeros(2, 4, 2, 16, dtype=dtype)
    q2, k2 = rand(2, 1, 4, 16, dtype=dtype, seed=2), rand(2, 1, 2, 16, dtype=dtype, seed=3)
    q20, k20 = numpy_of(q2), numpy_of(k2)
    qo, ko = rope.apply_qk(q2, k2, torch.tensor([7]), out=(q2, kv[:, 1:2]))
    assert qo is q2 and ko.data_ptr() == kv[:, 1:2].data_ptr()
    assert_close(numpy_of(kv[:, 1:2]), expected(rope, k20, [7]), k20, rope, DTYPES[dtype])
    assert_close(numpy_of(q2), expected(rope, q20, [7]), q20, rope, DTYPES[dtype])
    assert not kv[:, 0].any() and not kv[:, 2:].any()


def test_apply_qk_new_results():
    rope = Rope(16, layout="split_half")
    q, k = rand(3, 4, 16), rand(3, 2, 16, seed=1)
    qo, ko = rope.apply_qk(q, k, offset=2)
    assert type(qo) is torch.Tensor and type(ko) is torch.Tensor
    assert_close(numpy_of(qo), expected(rope, numpy_of(q), offset=2), numpy_of(q), rope, np.float32)
    assert_close(numpy_of(ko), expected(rope, numpy_of(k), offset=2), numpy_of(k), rope, np.float32)
    with pytest.raises(errors.TypeError, match="out must be None or a pair"):
        rope.apply_qk(q, k, out=q)


# ---- the other entry points --------------------------------------------------------------------

def test_cos_sin_at_tensor_positions():
    rope = Rope(8, layout="split_half", scaling={"rope_type": "linear", "factor": 2.0})
    positions = torch.tensor([[0, 5], [123456, 7]])
    cos, sin = rope.cos_sin(positions)
    assert type(cos) is torch.Tensor and cos.dtype == torch.float32 and cos.shape == (2, 2, 4)
    c64, s64 = rope.cos_sin(positions, dtype=torch.float64)
    assert c64.dtype == torch.float64
    want_c, want_s = reference.cos_sin(positions.reshape(-1).tolist(), [float(w) for w in rope.inv_freq])
    for got32, got64, want in ((cos, c64, want_c), (sin, s64, want_s)):
        want = np.array(want).reshape(2, 2, 4)
        np.testing.assert_allclose(got32.numpy(), want, rtol=0, atol=2.0**-24)   # correctly rounded float32
        np.testing.assert_allclose(got64.numpy(), want, rtol=0, atol=4 * 2.0**-53)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rerotate_and_convert_keys(dtype):
    rope = Rope(16, layout="split_half")
    k0 = rand(2, 3, 2, 16, dtype=dtype)
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([10, 11, 12])
    k = rope.apply(k0, src)
    rotated = numpy_of(k)
    ptr = k.data_ptr()
    assert rope.rerotate(k, src, dst) is k and k.data_ptr() == ptr
    # moving rotated keys by the delta equals rotating them at the delta
    assert_close(numpy_of(k), expected(rope, rotated, [10, 10, 10]), rotated, rope, DTYPES[dtype])
    to = Rope(16, layout="split_half", base=500000.0)
    converted = cache.convert_keys(rope, k, dst, to)
    assert type(converted) is torch.Tensor and converted.dtype == dtype
    back_then_on = expected(to, expected(rope, numpy_of(k), dst.numpy(), inverse=True), dst.numpy())
    tol = 1e-5 if dtype is torch.float32 else 3e-2
    np.testing.assert_allclose(numpy_of(converted), back_then_on, rtol=0, atol=tol * np.abs(back_then_on).max())
    assert cache.convert_keys(rope, k, dst, to, out=k) is k and k.data_ptr() == ptr
    assert np.array_equal(bits(k), bits(converted))


def test_apply_varlen_on_tensors():
    rope = Rope(16, layout="split_half", rotary_dim=8)
    x = rand(7, 2, 16)
    cu, offsets = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([5, 100])
    got = apply_varlen(rope, x, cu, offsets)
    assert type(got) is torch.Tensor
    want = expected(rope, numpy_of(x), [5, 6, 7, 100, 101, 102, 103])
    assert_close(numpy_of(got), want, numpy_of(x), rope, np.float32)
    assert apply_varlen(rope, x, cu, offsets, out=x) is x
    assert np.array_equal(bits(x), bits(got))


@pytest.mark.parametrize("convention, off", [("prefix", 0), ("proportional", 0), ("offset", 4)])
def test_partial_rotary_on_tensors(convention, off):
    pr = PartialRotary(16, 8, convention=convention, layout="split_half", dim_offset=off)
    x, k = rand(3, 2, 16), rand(3, 1, 16, seed=1)
    want = pr.apply(x.numpy().copy(), offset=4)               # the numpy path (tested against its definition)
    got = pr.apply(x, offset=4)
    assert type(got) is torch.Tensor and np.array_equal(got.numpy(), want)
    # the rotated coordinates, by the reference on the rope the convention names
    lo, hi = (off, off + 8) if convention == "offset" else (0, 16)
    ref = expected(pr.rope, numpy_of(x)[..., lo:hi], offset=4)
    assert_close(numpy_of(got)[..., lo:hi], ref, numpy_of(x)[..., lo:hi], pr.rope, np.float32)
    if convention == "offset":
        assert np.array_equal(got[..., :lo].numpy(), x[..., :lo].numpy())
        assert np.array_equal(got[..., hi:].numpy(), x[..., hi:].numpy())
    qo, ko = pr.apply_qk(x, k, offset=4)
    assert np.array_equal(qo.numpy(), want) and type(ko) is torch.Tensor
    ptr = x.data_ptr()
    assert pr.apply(x, offset=4, out=x) is x and x.data_ptr() == ptr and np.array_equal(x.numpy(), want)


def test_prepared_calls_take_tensors():
    rope = Rope(32, layout="split_half")
    kv = torch.zeros(1, 6, 4, 32)
    k = rand(1, 1, 4, 32)
    prepared = rope.prepare(k, out=kv[:, 0:1])
    for pos in range(3):
        assert prepared(k, out=kv[:, pos:pos + 1], offset=pos).data_ptr() == kv[:, pos:pos + 1].data_ptr()
    for pos in range(3):
        assert_close(numpy_of(kv[:, pos:pos + 1]), expected(rope, numpy_of(k), offset=pos), numpy_of(k), rope,
                     np.float32)
    with pytest.raises(errors.ValueError, match="out must have the shape, strides and dtype"):
        prepared(k, out=torch.zeros(1, 1, 4, 32), offset=0)
    q = rand(1, 1, 8, 32, seed=2)
    q0 = numpy_of(q)
    both = rope.prepare_qk(q, k, out=(q, kv[:, 0:1]))
    qo, ko = both(q, k, out=(q, kv[:, 5:6]), positions=torch.tensor([9]))
    assert qo is q
    assert_close(numpy_of(q), expected(rope, q0, [9]), q0, rope, np.float32)
    assert_close(numpy_of(kv[:, 5:6]), expected(rope, numpy_of(k), [9]), numpy_of(k), rope, np.float32)
    fresh = rope.prepare(k)
    assert type(fresh(k, offset=1)) is torch.Tensor


def test_layout_conversion_of_tensors():
    x = rand(2, 3, 8)
    got = layout.convert_heads(x, "interleaved", "split_half")
    assert type(got) is torch.Tensor
    assert np.array_equal(got.numpy(), x.numpy()[..., [0, 2, 4, 6, 1, 3, 5, 7]])
    assert torch.equal(layout.convert_heads(got, "split_half", "interleaved"), x)
    w = rand(2 * 8, 5).requires_grad_()
    rows = layout.permute_rows(w, 2, 8, "interleaved", "split_half")
    rows.sum(dim=1).dot(torch.arange(16.0)).backward()   # a permutation's gradient is the inverse permutation
    perm = layout.permutation(8, "interleaved", "split_half")
    inv = np.argsort(np.concatenate([perm, perm + 8]))
    np.testing.assert_array_equal(w.grad[:, 0].numpy(), np.arange(16.0)[inv])
    out = layout.convert_attention(num_heads=2, num_kv_heads=1, head_dim=8, from_layout="interleaved",
                                   to_layout="split_half", wq=w.detach(), k_norm=torch.arange(8.0))
    assert type(out["wq"]) is torch.Tensor and out["k_norm"].tolist() == [0, 2, 4, 6, 1, 3, 5, 7]


def test_tensors_are_released():
    # the views pyrope takes keep nothing alive after the call
    import weakref
    rope = Rope(8, layout="split_half")
    x = rand(2, 1, 8)
    alive = weakref.ref(x)
    rope.apply(x, out=x)
    y = rope.apply(x)
    del x, y
    gc.collect()
    assert alive() is None


def test_empty_tensors_and_an_out_whose_last_axis_is_strided():
    rope = Rope(8, layout="split_half")
    empty = torch.zeros(0, 2, 8)
    got = rope.apply(empty, offset=3)
    assert type(got) is torch.Tensor and got.shape == (0, 2, 8)
    assert rope.apply(empty, out=empty) is empty
    # an out the kernel cannot address (last axis strided): rotated in a temporary, written back
    x = rand(3, 2, 8)
    out = torch.zeros(8, 2, 3).permute(2, 1, 0)
    assert out.stride()[-1] != 1
    assert rope.apply(x, offset=4, out=out) is out
    assert_close(numpy_of(out), expected(rope, numpy_of(x), offset=4), numpy_of(x), rope, np.float32)
    y = rope.apply(out, offset=-4)                   # and as an input
    assert_close(numpy_of(y), expected(rope, numpy_of(out), offset=-4), numpy_of(out), rope, np.float32)


# ---- the ONNX op ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_onnx_rotary_embedding_on_tensors(dtype):
    """Tensor input, caches and position ids: a tensor of the input's type, equal to the
    numpy call bit for bit and to the definition y = x0*cos - x1*sin, x0*sin + x1*cos
    computed in float64 from the same (rounded) caches, within one rounding of T."""
    x = rand(2, 4, 5, 16, dtype=dtype, seed=3)                  # [batch, heads, seq, head]
    angles = torch.arange(32, dtype=torch.float64)[:, None] * 0.3 ** torch.arange(8, dtype=torch.float64)
    cos, sin = torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
    position_ids = torch.tensor([[0, 3, 7, 30, 31], [5, 5, 1, 2, 9]])
    y = pyrope.onnx_rotary_embedding(x, cos, sin, position_ids)
    assert isinstance(y, torch.Tensor) and y.dtype is dtype and y.shape == x.shape
    y_np = pyrope.onnx_rotary_embedding(as_numpy(x), as_numpy(cos), as_numpy(sin), position_ids.numpy())
    np.testing.assert_array_equal(bits(y), y_np.view({2: np.int16, 4: np.int32}[y_np.itemsize]))
    x64, c, s = x.double(), cos.double()[position_ids][:, None], sin.double()[position_ids][:, None]
    x0, x1 = x64[..., :8], x64[..., 8:]
    want = torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)
    unit = {torch.float32: 2.0**-23, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
    bound = (unit + 4 * 2.0**-23) * (x0.abs() + x1.abs()).repeat(1, 1, 1, 2) + 2.0**-25
    assert ((y.double() - want).abs() <= bound).all()


def test_onnx_rotary_embedding_refuses_what_it_cannot_take():
    cos = torch.ones(8, 4)
    with pytest.raises(errors.TypeError, match="input"):
        pyrope.onnx_rotary_embedding(_meta(1, 2, 3, 8), cos, cos, torch.zeros(1, 3, dtype=torch.int64))
    x = rand(1, 2, 3, 8).requires_grad_()
    with pytest.raises(errors.ValueError, match="input.*requires grad|requires grad.*input|not differentiable"):
        pyrope.onnx_rotary_embedding(x, cos, cos, torch.zeros(1, 3, dtype=torch.int64))


def test_readme_example():
    """README's "torch tensors" example runs as written."""
    (block,) = readme_blocks.code_blocks("### torch tensors")
    exec(compile(block, "README example", "exec"), {})
