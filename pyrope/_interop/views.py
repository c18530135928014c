"""Torch tensors and DLPack objects as numpy views of the same memory, and results back.

pyrope computes on ndarrays. An argument that is not an ndarray but has
``__dlpack__`` (a torch tensor, a JAX array, any DLPack producer) is viewed
as an ndarray over the same memory, never copied:

- a torch tensor (recognised through ``sys.modules``: pyrope never imports
  torch) by ``Tensor.numpy()``, bfloat16 through an int16 view reinterpreted
  as ``ml_dtypes.bfloat16`` (numpy has no bfloat16 and refuses it through
  DLPack); it must be dense (strided) and on the CPU;
- any other object by ``numpy.from_dlpack(copy=False)``, or, for bfloat16,
  by reading its capsule (``dlpack``); its memory must be CPU memory. A
  read-only export (and an unversioned, pre-1.0 capsule, which numpy
  imports read-only) gives a read-only view, never written.

A new result goes back as an object of its input's type (:func:`new_like`):
a torch tensor by ``torch.from_numpy`` (no copy), another DLPack object's
``__array_namespace__().from_dlpack(result)``, or the ndarray itself when
that object has no namespace or the result is bfloat16 (numpy cannot export
bfloat16 through DLPack). Which arguments are converted, and when, is the
edge's business (``edge.py``), not this module's.
"""
import builtins
import sys

import numpy as np

from .._engine import dtypes as _dtypes
from .dlpack_devices import CPU_DEVICES, ELSEWHERE, device_name
from ..errors import TypeError, ValueError, raised

_ndarray = np.ndarray
SERVED = "float32, float16, bfloat16 or float64"

# ---- recognising them ----------------------------------------------------------------

def is_foreign(obj):
    """Does pyrope take ``obj`` through DLPack: a torch tensor, or any object
    with ``__dlpack__`` that is not a numpy array?"""
    return not isinstance(obj, _ndarray) and hasattr(type(obj), "__dlpack__")


def torch_of(obj):
    """The torch module when ``obj`` is a torch tensor, else None (torch is
    looked up, never imported: a tensor exists only if its caller imported it)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(obj, torch.Tensor) else None


def tracing():
    """Is torch tracing this call (``torch.compile``, ``torch.export``)? Then
    tensors go to pyrope's custom ops (``torch_ops``), which tracing records,
    instead of to numpy views, which it cannot."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def grad_needed(objs):
    """Is grad enabled and does one of ``objs`` require it?"""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    tensor = torch.Tensor
    return any(isinstance(o, tensor) and o.requires_grad for o in objs)


# ---- views -----------------------------------------------------------------------------

_TORCH_FLOATS = {}    # torch dtype -> numpy dtype, filled when the first tensor arrives
_TORCH_PLAIN = set()  # the torch dtypes Tensor.numpy() serves as pyrope needs them (not bfloat16)


def _torch_floats(torch):
    """{torch float dtype: numpy dtype}; bfloat16's is ml_dtypes', so it joins
    with the first bfloat16 tensor or dtype (:func:`_bfloat16_for`), not before:
    importing ml_dtypes takes longer than importing pyrope."""
    if not _TORCH_FLOATS:
        _TORCH_FLOATS.update({torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                              torch.float64: np.dtype(np.float64)})
        _TORCH_PLAIN.update((torch.float32, torch.float16, torch.float64))
        from . import tensor_direct
        tensor_direct.learn(torch, _TORCH_FLOATS)   # the direct path takes tensors from now on
    return _TORCH_FLOATS


def _bfloat16_for(torch, name):
    """ml_dtypes' bfloat16 for torch.bfloat16 (imported now if need be), or a
    ``TypeError`` naming ``name`` and what to install."""
    dtype = _dtypes.bfloat16()
    if dtype is None:
        raise TypeError(f"{name} is bfloat16, which needs the ml_dtypes package: {_dtypes.ML_DTYPES_HINT}")
    _torch_floats(torch)[torch.bfloat16] = dtype
    return dtype


def as_array(name, obj, data=True):
    """An ndarray over the memory of tensor or DLPack object ``obj`` (no copy).

    ``data``: ``obj`` holds values pyrope rotates, so its dtype must be one
    pyrope serves; else (positions) any dtype numpy has, which the caller
    checks. Raises ``TypeError`` naming ``name`` for a tensor that is not on
    the CPU, not dense, or of another dtype."""
    torch = torch_of(obj)
    if torch is not None:
        return _torch_view(torch, name, obj, data)
    return _dlpack_view(name, obj, data)


def _torch_view(torch, name, t, data):
    if t.dtype in _TORCH_PLAIN:
        try:   # the common case in one step: numpy() itself refuses other devices and layouts,
            return t.numpy()   # tensors that require grad, negative views; the checks below name them
        except (RuntimeError, builtins.TypeError, builtins.ValueError):
            pass
    if t.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if not t.is_cpu:
        raise TypeError(f"{name} must be a CPU tensor, got one on device {t.device} ({ELSEWHERE})")
    if data and t.dtype not in _torch_floats(torch) and t.dtype is not torch.bfloat16:
        raise TypeError(f"{name} must have dtype {SERVED}, got {t.dtype}")
    if t.requires_grad:
        t = t.detach()
    if t.numel() * t.element_size() > _MAX_ARRAY_BYTES:   # numpy's bare "array is too big"
        raise ValueError(f"{name}: a view of {t.numel()} elements of {t.dtype} (shape {tuple(t.shape)}) is "
                         f"larger than numpy can address ({_MAX_ARRAY_BYTES} bytes), even when its strides "
                         f"repeat memory")
    bfloat16 = _bfloat16_for(torch, name) if t.dtype is torch.bfloat16 else None
    float8 = _float8_for(name) if t.dtype is getattr(torch, "float8_e4m3fn", None) else None
    try:
        if bfloat16 is not None:
            return t.view(torch.int16).numpy().view(bfloat16)
        if float8 is not None:   # a float8 cache (data=False entries); numpy() refuses float8
            return t.view(torch.uint8).numpy().view(float8)
        return t.numpy()
    except (RuntimeError, builtins.TypeError) as exc:  # negative or conjugate views, exotic dtypes
        raise TypeError(f"{name} ({t.dtype}) has no numpy view: {exc}") from None


def _float8_for(name):
    """ml_dtypes' float8_e4m3fn for torch.float8_e4m3fn (imported now if need
    be), or a ``TypeError`` naming ``name`` and what to install."""
    if _dtypes.bfloat16() is None:   # imports ml_dtypes when it is installed
        raise TypeError(f"{name} is float8_e4m3fn, which needs the ml_dtypes package: {_dtypes.ML_DTYPES_HINT}")
    return np.dtype(sys.modules["ml_dtypes"].float8_e4m3fn)


_MAX_ARRAY_BYTES = np.iinfo(np.intp).max   # numpy refuses arrays whose size * itemsize exceeds it


def _numpy_import(obj):
    try:
        return np.from_dlpack(obj, copy=False)   # never a copy: writes must reach obj
    except builtins.TypeError:                   # a producer without DLPack 1.0's keywords
        return np.from_dlpack(obj)


def _dlpack_view(name, obj, data):
    where = getattr(obj, "__dlpack_device__", None)
    if where is not None:
        try:
            code = int(where()[0])
        except Exception as exc:   # a producer's own failure: named, not leaked bare
            raise TypeError(f"{name}.__dlpack_device__() failed: {raised(exc)}") from exc
        if code not in CPU_DEVICES:
            raise TypeError(f"{name} must be in CPU memory, got an array on {device_name(code)} ({ELSEWHERE})")
    try:
        arr = _numpy_import(obj)
    except Exception as exc:  # numpy refuses bfloat16 (and types it lacks): read the capsule
        from .dlpack import import_view
        arr = import_view(name, obj, exc, f"dtype {SERVED}" if data else "an integer dtype")
    if data and not _dtypes.stores(arr.dtype):
        raise TypeError(f"{name} must have dtype {SERVED}, got {arr.dtype}")
    return arr


def new_like(result, like, name=None):
    """A new ndarray ``result`` as an object of ``like``'s type (see the module
    notes); ``name``: the argument ``like`` is, named if its library fails."""
    torch = torch_of(like)
    if torch is not None:
        if _dtypes.is_bfloat16(result.dtype):
            return torch.from_numpy(result.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(result)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is None or _dtypes.is_bfloat16(result.dtype):
        return result
    try:
        return namespace().from_dlpack(result)
    except Exception as exc:   # the producer's library, not pyrope: named, not leaked bare
        raise TypeError(f"the result cannot be returned as {name or 'the argument'}'s type "
                        f"{type(like).__name__}: {name or 'its'}.__array_namespace__().from_dlpack failed: "
                        f"{raised(exc)}") from exc


def torch_dtype_as_numpy(dtype):
    """``dtype`` with a torch float dtype replaced by numpy's (others unchanged,
    bfloat16 too: tables are float32 or float64, so it is refused by name, and
    ml_dtypes is not imported to say so)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype) and dtype is not torch.bfloat16:
        return _torch_floats(torch).get(dtype, dtype)
    return dtype
