"""DLPack capsules numpy will not import: bfloat16, read straight from the capsule.

``numpy.from_dlpack`` refuses the DLPack bfloat16 code, so a bfloat16
tensor of another library (JAX, a wrapped torch tensor, ...) is read here:
the capsule's ``DLTensor`` becomes an ndarray over the same memory (uint16,
viewed as ``ml_dtypes.bfloat16``), which owns the capsule's managed tensor
and calls its deleter when the last view dies (the DLPack consumer's
contract). Versioned capsules (DLPack >= 1.0) with a major version other
than 1 are refused; their read-only flag makes the array read-only, and an
unversioned (pre-1.0) capsule is read-only, as numpy imports it. Any
other dtype numpy refused is a ``TypeError`` naming the argument and the
DLPack type. Loaded only when such a capsule arrives.
"""
import builtins
import ctypes

import numpy as np

from .._engine import dtypes as _dtypes
from .dlpack_devices import CPU_DEVICES, device_name
from ..errors import TypeError, ValueError, raised

_DLPACK_MAJOR = 1
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_BFLOAT = 4     # kDLBfloat

# DLDataTypeCode -> name, for messages (dlpack.h 1.1)
_CODES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool",
          7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
          11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu",
          15: "float6_e2m3fn", 16: "float6_e3m2fn", 17: "float4_e2m1fn"}


# DLDataTypeCode -> the bit widths numpy.from_dlpack reads (int, uint, float, complex, bool)
_NUMPY_TYPES = {0: (8, 16, 32, 64), 1: (8, 16, 32, 64), 2: (16, 32, 64), 5: (64, 128), 6: (8,)}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # DLManagedTensor (unversioned, "dltensor")
    pass


_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed)))]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned ("dltensor_versioned")
    pass


_ManagedVersioned._fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                              ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedVersioned))),
                              ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype, _api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype, _api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]

# names a capsule takes; module constants, so the pointers SetName keeps stay valid
_VERSIONED, _USED_VERSIONED = b"dltensor_versioned", b"used_dltensor_versioned"
_LEGACY, _USED_LEGACY = b"dltensor", b"used_dltensor"


class _Owner:
    """Owns one consumed managed tensor: exposes its memory to numpy and runs
    the producer's deleter when numpy lets go of it."""

    def __init__(self, managed, readonly, typestr):
        self._managed = managed
        t = managed.contents.dl_tensor
        shape = tuple(t.shape[i] for i in range(t.ndim))
        itemsize = t.dtype.bits // 8
        strides = None if not t.strides else tuple(t.strides[i] * itemsize for i in range(t.ndim))
        self.__array_interface__ = {"data": ((t.data or 0) + t.byte_offset, readonly), "shape": shape,
                                    "strides": strides, "typestr": typestr, "version": 3}

    def __del__(self):
        deleter = self._managed.contents.deleter
        if deleter:
            deleter(self._managed)


def _capsule(name, obj):
    """A capsule of ``obj``'s data, asking for DLPack 1.x without a copy; older
    producers that take no keywords are asked plainly. A producer that fails
    is a ``TypeError`` naming ``name``, not its own exception leaked bare."""
    try:
        try:
            return obj.__dlpack__(max_version=(1, 1), copy=False)
        except builtins.TypeError:
            return obj.__dlpack__()
    except Exception as exc:
        raise TypeError(f"{name}.__dlpack__() failed: {raised(exc)}") from exc


def import_view(name, obj, numpy_error, accepted):
    """An ndarray over the memory of DLPack object ``obj`` whose capsule numpy
    refused (``numpy_error``): a bfloat16 view for a bfloat16 tensor, else a
    ``TypeError`` naming ``name``, what it must have (``accepted``, e.g.
    ``"dtype float32, ..."``) and the DLPack type."""
    capsule = _capsule(name, obj)
    if _api.PyCapsule_IsValid(capsule, _VERSIONED):
        managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule, _VERSIONED), ctypes.POINTER(_ManagedVersioned))
        version = managed.contents.version.major
        readonly = bool(managed.contents.flags & _READ_ONLY)
        used = _USED_VERSIONED
        if version != _DLPACK_MAJOR:
            # not consumed: the capsule's destructor frees it
            raise TypeError(f"{name}: DLPack version {version}.x is not supported (pyrope reads 1.x)")
    elif _api.PyCapsule_IsValid(capsule, _LEGACY):
        managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule, _LEGACY), ctypes.POINTER(_Managed))
        # numpy imports unversioned capsules read-only (they cannot say otherwise): so do we
        readonly, used = True, _USED_LEGACY
    else:
        raise TypeError(f"{name}.__dlpack__() did not return a DLPack capsule: {numpy_error}")
    tensor = managed.contents.dl_tensor
    if tensor.device.device_type not in CPU_DEVICES:
        raise TypeError(f"{name} must be in CPU memory, got {device_name(tensor.device.device_type)}")
    dtype = tensor.dtype
    kind = _CODES.get(dtype.code, f"code {dtype.code}")
    if dtype.lanes == 1 and dtype.bits in _NUMPY_TYPES.get(dtype.code, ()):
        # a type numpy imports: it refused something else (a view too large to address, say)
        raise ValueError(f"{name}: numpy cannot view this DLPack array ({kind}{dtype.bits}): "
                         f"{raised(numpy_error)}")
    if dtype.code != _BFLOAT or dtype.bits != 16 or dtype.lanes != 1:
        lanes = "" if dtype.lanes == 1 else f" x{dtype.lanes} lanes"
        raise TypeError(f"{name} must have {accepted}, got DLPack {kind} {dtype.bits} bits{lanes} "
                        f"({numpy_error})")
    bfloat16 = _dtypes.bfloat16()   # ml_dtypes, imported now: the first bfloat16 array needs it
    if bfloat16 is None:
        raise TypeError(f"{name} is bfloat16, which needs the ml_dtypes package: {_dtypes.ML_DTYPES_HINT}")
    # consumed from here on: renaming tells the producer's destructor to leave it to the owner
    _api.PyCapsule_SetName(capsule, used)
    owner = _Owner(managed, readonly, "<u2")
    return np.asarray(owner).view(bfloat16)
