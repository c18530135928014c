"""Any object with ``__dlpack__``: viewed without a copy (numpy's importer, or
the capsule read for bfloat16), written only when its export is writable,
results back through its ``__array_namespace__``, devices other than CPU
memory refused by name, the producer's deleter run when pyrope lets go."""
import gc
import weakref

import numpy as np
import pytest
import torch

from pyrope import Rope, errors
from tensor_oracle import BF16, assert_close, expected


class Producer:
    """A minimal DLPack producer over a numpy array or a torch tensor (DLPack 1.x keywords)."""

    def __init__(self, data, device=(1, 0)):
        self.data, self.device = data, device

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


class OldProducer(Producer):
    """A producer older than DLPack 1.0: no keywords, unversioned capsules."""

    def __dlpack__(self, stream=None):
        return self.data.__dlpack__()


class Namespace:
    """The array-API namespace of :class:`ArrayLike`: from_dlpack wraps numpy's import."""

    @staticmethod
    def from_dlpack(obj):
        return ArrayLike(np.from_dlpack(obj))


class ArrayLike(Producer):
    def __array_namespace__(self, api_version=None):
        return Namespace


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_in_place_writes_the_producers_memory(dtype):
    rope = Rope(16, layout="split_half", rotary_dim=12)
    data = rand(2, 3, 16, dtype=dtype)
    before = data.astype(np.float64)
    obj = Producer(data)
    assert rope.apply(obj, offset=4, out=obj) is obj
    assert_close(data, expected(rope, before, offset=4), before, rope, dtype)


def test_new_results_come_back_through_the_namespace():
    rope = Rope(8, layout="interleaved")
    data = rand(3, 2, 8)
    got = rope.apply(ArrayLike(data), [5, 6, 7])
    assert type(got) is ArrayLike and not np.shares_memory(got.data, data)
    assert_close(got.data, expected(rope, data, [5, 6, 7]), data, rope, np.float32)
    plain = rope.apply(Producer(data), [5, 6, 7])          # no namespace: the ndarray itself
    assert type(plain) is np.ndarray and np.array_equal(plain, got.data)
    qo, ko = rope.apply_qk(ArrayLike(data), Producer(data[:, :1].copy()), offset=1)
    assert type(qo) is ArrayLike and type(ko) is np.ndarray


def test_positions_and_out_as_dlpack_objects():
    rope = Rope(8, layout="split_half")
    data = rand(3, 2, 8)
    out = np.zeros_like(data)
    got = rope.apply(data, Producer(np.array([9, 2, 4])), out=Producer(out))
    assert type(got) is Producer and got.data is out
    assert_close(out, expected(rope, data, [9, 2, 4]), data, rope, np.float32)


def test_a_read_only_export_is_never_written():
    rope = Rope(8, layout="split_half")
    data = rand(3, 1, 8)
    data.flags.writeable = False                             # its DLPack 1.x capsule says read-only
    before = data.copy()
    with pytest.raises(errors.ValueError, match="^out is read-only"):
        rope.apply(Producer(data), out=Producer(data))
    target = rand(3, 1, 8, seed=1)
    with pytest.raises(errors.ValueError, match="is read-only"):
        rope.apply(target, out=Producer(data))
    assert np.array_equal(data, before)
    got = rope.apply(Producer(data), offset=2)               # read, not written: fine
    assert_close(got, expected(rope, before, offset=2), before, rope, np.float32)


def test_an_unversioned_capsule_is_read_only_as_numpy_imports_it():
    rope = Rope(8, layout="split_half")
    data = rand(3, 1, 8)
    before = data.copy()
    with pytest.raises(errors.ValueError, match="is read-only"):
        rope.apply(OldProducer(data), out=OldProducer(data))
    assert np.array_equal(data, before)
    assert_close(rope.apply(OldProducer(data), offset=1), expected(rope, before, offset=1), before, rope, np.float32)


@pytest.mark.parametrize("device, label", [((2, 0), "CUDA"), ((10, 1), "ROCM"), ((14, 0), "OneAPI"),
                                           ((99, 0), "type 99")])
def test_another_device_is_a_type_error_naming_the_argument(device, label):
    rope = Rope(8, layout="split_half")
    data = rand(2, 1, 8)
    before = data.copy()
    far = Producer(rand(2, 1, 8), device=device)
    with pytest.raises(errors.TypeError, match=rf"^x must be in CPU memory, got an array on DLPack device {label}"):
        rope.apply(far)
    with pytest.raises(errors.TypeError, match="^out must be in CPU memory"):
        rope.apply(data, out=far)
    with pytest.raises(errors.TypeError, match="^positions must be in CPU memory"):
        rope.apply(data, Producer(np.arange(2), device=device))
    with pytest.raises(errors.TypeError, match="^k must be in CPU memory"):
        rope.apply_qk(data, far)
    assert np.array_equal(data, before)


def test_pinned_host_memory_counts_as_cpu():
    rope = Rope(8, layout="split_half")
    data = rand(2, 1, 8)
    got = rope.apply(Producer(data, device=(3, 0)), offset=1)   # kDLCUDAHost: the CPU addresses it
    assert_close(got, expected(rope, data, offset=1), data, rope, np.float32)


@pytest.mark.parametrize("producer", [Producer, OldProducer])
def test_bfloat16_is_read_from_the_capsule(producer):
    # numpy.from_dlpack refuses bfloat16; pyrope reads the DLTensor itself
    rope = Rope(16, layout="interleaved")
    t = torch.randn(2, 3, 16, dtype=torch.float64).to(torch.bfloat16)
    before = t.double().numpy()
    got = rope.apply(producer(t), offset=7)
    assert type(got) is np.ndarray and got.dtype == BF16      # documented: numpy cannot export bfloat16
    assert_close(got.astype(np.float64), expected(rope, before, offset=7), before, rope, BF16)
    if producer is OldProducer:
        with pytest.raises(errors.ValueError, match="read-only"):
            rope.apply(producer(t), out=producer(t))
        return
    ptr = t.data_ptr()
    assert rope.apply(producer(t), offset=7, out=producer(t)).data is t
    assert t.data_ptr() == ptr
    assert np.array_equal(t.view(torch.int16).numpy(), got.view(np.int16))   # written in the tensor's storage


def test_bfloat16_strided_view_through_the_capsule():
    rope = Rope(8, layout="split_half")
    kv = torch.zeros(2, 5, 1, 8, dtype=torch.bfloat16)
    k = torch.randn(2, 1, 1, 8, dtype=torch.float64).to(torch.bfloat16)
    slot = kv[:, 2:3]
    rope.apply(Producer(k), offset=3, out=Producer(slot))
    want = expected(rope, k.double().numpy(), offset=3)
    assert_close(kv[:, 2:3].double().numpy(), want, k.double().numpy(), rope, BF16)
    assert not kv[:, :2].any() and not kv[:, 3:].any()


def test_the_producers_deleter_runs_when_the_view_dies():
    rope = Rope(8, layout="split_half")
    for dtype in (torch.float32, torch.bfloat16):          # numpy's importer, then pyrope's capsule reader
        t = torch.randn(2, 1, 8).to(dtype)
        alive = weakref.ref(t)
        obj = Producer(t)
        rope.apply(obj, out=obj)
        rope.apply(obj)
        del obj, t
        gc.collect()
        assert alive() is None, dtype


@pytest.mark.parametrize("dtype, name", [(torch.float8_e4m3fn, "float8_e4m3fn"), (torch.float8_e5m2, "float8_e5m2"),
                                         (torch.int32, "int32"), (torch.complex64, "complex64")])
def test_an_unserved_dtype_through_dlpack_is_a_type_error(dtype, name):
    rope = Rope(8, layout="split_half")
    obj = Producer(torch.zeros(2, 1, 8, dtype=dtype))
    with pytest.raises(errors.TypeError, match=rf"^x must have dtype float32, float16, bfloat16 or float64, got .*{name}"):
        rope.apply(obj)


def test_a_producer_without_a_capsule_is_a_type_error():
    class Broken(Producer):
        def __dlpack__(self, **kwargs):
            return object()

    with pytest.raises(errors.TypeError, match="^x.__dlpack__.. did not return a DLPack capsule"):
        Rope(8, layout="split_half").apply(Broken(rand(2, 1, 8)))


def test_the_other_entry_points_take_dlpack_objects():
    from pyrope import PartialRotary, apply_varlen, cache, layout
    rope = Rope(8, layout="split_half")
    keys = rand(3, 2, 8)
    rotated = keys.copy()
    obj = Producer(rotated)
    assert cache.rerotate(rope, obj, Producer(np.arange(3)), [5, 6, 7]) is obj
    assert_close(rotated, expected(rope, keys, [5, 5, 5]), keys, rope, np.float32)
    pr = PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=2)
    got = pr.apply(ArrayLike(keys), offset=1)
    assert type(got) is ArrayLike
    assert_close(got.data[..., 2:6], expected(pr.rope, keys[..., 2:6], offset=1), keys[..., 2:6], pr.rope, np.float32)
    varlen = apply_varlen(rope, ArrayLike(keys), Producer(np.array([0, 1, 3])))
    assert_close(varlen.data, expected(rope, keys, [0, 0, 1]), keys, rope, np.float32)
    heads = layout.convert_heads(ArrayLike(keys), "split_half", "interleaved")
    assert type(heads) is ArrayLike and np.array_equal(heads.data, keys[..., [0, 4, 1, 5, 2, 6, 3, 7]])
    cos, sin = rope.cos_sin(ArrayLike(np.array([3, 4])))
    assert type(cos) is ArrayLike and cos.data.shape == (2, 4)
