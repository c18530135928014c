"""The direct path of torch tensors (pyrope/_interop/tensor_direct.py): decode
calls launched with the tensors' data pointers, skipping numpy views.

It must give the bits of the same call on numpy arrays, bump the version
counters torch's in-place ops bump, and decline (to the edge, whose
answers are checked elsewhere) everything else: grad to record, other
layouts and devices, overlapping q and k, positions outside the rows."""
import ml_dtypes
import numpy as np
import pytest
import torch

import pyrope
from pyrope import Rope
from pyrope._engine.binding import ffi, lib
from pyrope._interop import edge, tensor_direct

DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16,
          torch.float64: np.float64}


def tensor(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def as_numpy(t):
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def bits(t):
    return t.view(torch.int16) if t.dtype is torch.bfloat16 else t


class EdgeCalls:
    """Counts the calls the edge converts (the direct path converts none)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in ("_convert_one", "_convert_pair", "_convert_general"):
            original = getattr(edge.Edge, name)
            monkeypatch.setattr(edge.Edge, name, self._counting(original))

    def _counting(self, original):
        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)
        return counted


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_decode_calls_take_the_pointers_and_give_the_numpy_bits(dtype, layout, monkeypatch):
    rope = Rope(128, layout=layout)
    q, k = tensor(4, 1, 8, 128, dtype=dtype), tensor(4, 1, 2, 128, dtype=dtype, seed=1)
    cache = tensor(4, 16, 8, 128, dtype=dtype, seed=2).transpose(1, 2)   # a strided [b, seq, h, d] view
    want_q, want_k, want_c = (as_numpy(t).copy() for t in (q, k, cache))
    qc, kc, slot = q.clone(), k.clone(), cache.clone()[:, 3:4]   # the edge plans the calls once
    rope.apply(qc, offset=9)
    rope.apply(qc, offset=9, out=qc)
    rope.apply_qk(qc, kc, offset=9, out=(qc, kc))
    rope.apply(slot, offset=9, out=slot)
    slot = cache[:, 3:4]
    edge_calls = EdgeCalls(monkeypatch)
    versions = q._version, k._version, cache._version
    for t in (9, 10, 11):
        fresh = rope.apply(q, offset=t)
        rope.apply(q, offset=t, out=q)
        rope.apply_qk(q, k, offset=t, out=(q, k))
        rope.apply(slot, offset=t, out=slot)
        expect = rope.apply(want_q, offset=t)
        assert torch.equal(bits(fresh), bits(torch.from_numpy(np.ascontiguousarray(expect).view(
            np.int16) if dtype is torch.bfloat16 else expect).view(dtype)))
        rope.apply(want_q, offset=t, out=want_q)
        rope.apply_qk(want_q, want_k, offset=t, out=(want_q, want_k))
        rope.apply(want_c[:, 3:4], offset=t, out=want_c[:, 3:4])
    assert edge_calls.calls == 0
    for got, want in ((q, want_q), (k, want_k), (cache, want_c)):
        assert np.array_equal(as_numpy(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    assert q._version > versions[0] and k._version > versions[1] and cache._version > versions[2]


def test_a_saved_tensor_changed_in_place_is_noticed_by_autograd():
    rope = Rope(16, layout="split_half")
    x = tensor(1, 1, 2, 16)
    c = x.clone()
    rope.apply(c, offset=1, out=c)   # the memo: the direct path takes the next call
    w = torch.ones(16, requires_grad=True)
    y = (x * w).sum()   # saves x for backward
    rope.apply(x, offset=1, out=x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_what_the_direct_path_declines_the_edge_answers(monkeypatch):
    rope = Rope(16, layout="split_half")
    x = tensor(2, 1, 2, 16)
    c = x.clone()
    rope.apply(c, offset=1, out=c)
    rope.apply(c, offset=1)
    edge_calls = EdgeCalls(monkeypatch)
    grad = x.clone().requires_grad_()
    y = rope.apply(grad * 1, offset=1)   # grad to record: the edge's autograd
    assert y.requires_grad and edge_calls.calls == 1
    with pytest.raises(pyrope.errors.TypeError, match="dense"):
        rope.apply(x.to_sparse(), offset=1)
    with pytest.raises(pyrope.errors.TypeError):
        rope.apply(x.to_mkldnn(), offset=1)
    with pytest.raises(pyrope.errors.TypeError, match="CPU"):
        rope.apply(x.to("meta"), offset=1)
    far = rope.apply(x.clone(), offset=10 ** 7)   # beyond the rows: the edge grows them or turns on the fly
    assert torch.equal(far, torch.from_numpy(rope.apply(x.numpy(), offset=10 ** 7)))


def test_overlapping_q_and_k_are_refused_as_for_arrays():
    rope = Rope(16, layout="split_half")
    buffer = tensor(2, 1, 3, 16)
    a, b = buffer.clone(), buffer.clone()   # the same shapes and strides, apart: planned, then direct
    rope.apply_qk(a[:, :, :2], b[:, :, 1:], offset=1, out=(a[:, :, :2], b[:, :, 1:]))
    rope.apply_qk(a[:, :, :2], b[:, :, 1:], offset=1, out=(a[:, :, :2], b[:, :, 1:]))
    q, k = buffer[:, :, :2], buffer[:, :, 1:]   # they share a head
    with pytest.raises(pyrope.errors.ValueError):
        rope.apply_qk(q, k, offset=1, out=(q, k))


def test_rope_rotate_at_checks_its_count_and_tensors():
    assert lib.rope_rotate_at(ffi.NULL, ffi.NULL, 1, ffi.NULL, 0, 0, 0, 0) == lib.ROPE_E_NULL
    t = ffi.new("rope_tensor[3]")
    assert lib.rope_rotate_at(ffi.NULL, t, 3, ffi.NULL, 0, 0, 0, 0) == lib.ROPE_E_COUNT
    assert lib.rope_rotate_at(ffi.NULL, t, 0, ffi.NULL, 0, 0, 0, 0) == lib.ROPE_E_COUNT
    assert tensor_direct.TENSOR is torch.Tensor
