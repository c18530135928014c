"""Torch tensors and DLPack objects cross into pyrope at the public entry points
only (``pyrope._interop.edge``): below them, in the engine (the checks, the
planner, the general path, the launcher), every argument is an ndarray.

A profile hook watches every call into a module of ``pyrope/_engine/`` while
each public entry that takes arrays runs on torch tensors and on a generic
DLPack object, and records any argument (or item of a tuple or list
argument) that is still a foreign object."""
import pathlib
import sys

import numpy as np
import pytest
import torch

import pyrope
from pyrope import PartialRotary, RMSNorm, Rope, apply_varlen, cache, layout, positions
from pyrope._interop.views import is_foreign
from pyrope.onnx_interop import onnx_rotary_embedding

ENGINE = str(pathlib.Path(pyrope.__file__).parent / "_engine")


class Wrapped:
    """A DLPack producer that is neither an ndarray nor a torch tensor."""

    def __init__(self, data):
        self.data = data
        self.shape = data.shape

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


def foreign_items(value):
    items = value if type(value) in (tuple, list) else (value,)
    return [type(v).__name__ for v in items if is_foreign(v)]


def engine_sees(call):
    """``(result, [(function, argument, type)])`` of ``call()``: each foreign
    argument a function of the engine received."""
    seen = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(ENGINE):
            for name, value in list(frame.f_locals.items()):
                for kind in foreign_items(value):
                    seen.append((frame.f_code.co_name, name, kind))
    sys.setprofile(hook)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, seen


def tensor(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


ROPE = Rope(16, layout="split_half")


def calls(make):
    """Every public entry that takes arrays, on arrays made by ``make``."""
    x, q, k = make(1, 5, 2, 16), make(1, 5, 2, 16, seed=1), make(1, 5, 1, 16, seed=2)
    pos = torch.arange(3, 8)
    cu = torch.tensor([0, 2, 5])
    packed = make(5, 2, 16, seed=3)
    cache_k = make(1, 8, 1, 16, seed=4)
    step = ROPE.prepare(x, out=x)
    xn = np.random.default_rng(6).standard_normal((1, 5, 2, 16)).astype(np.float32)
    step_n = ROPE.prepare(xn, out=xn)
    partial = PartialRotary(16, rotary_dim=8, convention="prefix", layout="split_half")
    cos, sin = ROPE.cos_sin(np.arange(8))
    heads = make(1, 5, 2, 16, seed=5)
    packed_v = make(5, 2, 16, seed=7)
    paged_k, paged_v = make(3, 4, 2, 16, seed=8), make(3, 4, 2, 16, seed=9)
    slots = torch.tensor([9, 0, -1, 4, 2], dtype=torch.int32)
    return {
        "apply": lambda: ROPE.apply(x, offset=3),
        "apply in place": lambda: ROPE.apply(x, offset=3, out=x),
        "apply at tensor positions": lambda: ROPE.apply(x, pos),
        "apply, an ndarray at tensor positions": lambda: ROPE.apply(xn, pos),
        "prepared call, an ndarray at tensor positions": lambda: step_n(xn, out=xn, positions=pos),
        "apply into a cache slot": lambda: ROPE.apply(k, offset=3, out=cache_k[:, 3:8]),
        "apply_qk": lambda: ROPE.apply_qk(q, k, pos),
        "apply_qk in place": lambda: ROPE.apply_qk(q, k, offset=2, out=(q, k)),
        "prepared call": lambda: step(x, out=x, offset=4),
        "prepared call at tensor positions": lambda: step(x, out=x, positions=pos),
        "cos_sin": lambda: ROPE.cos_sin(pos),
        "apply_varlen": lambda: apply_varlen(ROPE, packed, cu),
        "varlen_positions": lambda: positions.varlen_positions(cu),
        "PartialRotary.apply": lambda: partial.apply(x, offset=1),
        "cache.rerotate": lambda: cache.rerotate(ROPE, cache_k, torch.arange(8), torch.arange(2, 10)),
        "cache.convert_keys": lambda: cache.convert_keys(ROPE, cache_k, torch.arange(8), ROPE),
        "onnx_rotary_embedding": lambda: onnx_rotary_embedding(
            heads.permute(0, 2, 1, 3) if isinstance(heads, torch.Tensor) else heads, cos, sin,
            pos.reshape(1, 5) if isinstance(heads, torch.Tensor) else np.arange(3, 8).reshape(1, 5)),
        "layout.convert_heads": lambda: layout.convert_heads(x, "split_half", "interleaved"),
        "cache_write": lambda: ROPE.cache_write(packed, packed_v, paged_k, paged_v, slots, offset=2),
        "cache_write, keys only with a norm": lambda: ROPE.cache_write(packed, None, paged_k, None, slots,
                                                                       norm=RMSNorm(np.ones(16))),
    }


NAMES = list(calls(tensor))


@pytest.mark.parametrize("name", NAMES)
def test_the_engine_sees_ndarrays_only_for_torch_tensors(name):
    call = calls(tensor)[name]
    call()   # plans and rows made: the call below is the steady one
    _, seen = engine_sees(call)
    assert seen == [], seen


def wrapped(*shape, seed=0):
    return Wrapped(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("name", ["apply", "apply in place", "apply_qk", "prepared call", "apply_varlen",
                                  "layout.convert_heads", "cache_write"])
def test_the_engine_sees_ndarrays_only_for_dlpack_objects(name):
    call = calls(wrapped)[name]
    call()
    _, seen = engine_sees(call)
    assert seen == [], seen


def test_the_hook_sees_a_foreign_argument():
    """The test can fail: an engine function given a tensor is recorded."""
    from pyrope._engine import checks
    _, seen = engine_sees(lambda: checks.as_int("n", torch.tensor(3)))
    assert seen and seen[0][:2] == ("as_int", "value"), seen
