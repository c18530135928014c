"""The storage types: read from the C list (``pyrope.h``'s
``ROPE_STORAGE_TYPES``, through the binding), never retyped.

``DTYPE_CODES`` maps each numpy dtype the kernel stores to its C code; the
types numpy lacks (bfloat16) join it from ml_dtypes once the caller has
imported that (:func:`stores`), and :func:`bfloat16` is the one place that
imports ml_dtypes. The message helpers (:func:`accepted_names`) name the
types as ``TypeError`` states them.
"""
import builtins
import sys

import numpy as np

from . import locks as _locks
from .binding import ffi, lib
from ..errors import install_hint

# bfloat16 arrays are ml_dtypes arrays, yet ml_dtypes is not imported here: its
# import takes longer than the rest of pyrope's (bench/import_time.py). No array
# of its types can exist before its caller has imported it, so the C types numpy
# lacks join DTYPE_CODES, from sys.modules, the first time a dtype missing from
# it is looked up (stores); what must make such an array itself (a bfloat16
# torch tensor or DLPack capsule) imports ml_dtypes through bfloat16().

def _storage_types():
    """``({numpy dtype: C code}, {name: C code})``: the C storage types numpy
    has, and the others (bfloat16), which ml_dtypes provides (by numpy's own
    names: once ml_dtypes is loaded, ``np.dtype("bfloat16")`` finds its type)."""
    codes, late = {}, {}
    for code in range(lib.rope_dtype_count()):
        name = ffi.string(lib.rope_dtype_name(code)).decode()
        kind = getattr(np, name, None)
        if kind is None:
            late[name] = code
            continue
        dtype = np.dtype(kind)
        assert dtype.itemsize == lib.rope_dtype_size(code), name
        codes[dtype] = code
    return codes, late


DTYPE_CODES, _LATE_TYPES = _storage_types()   # DTYPE_CODES gains the late ones in place
_ML_DTYPES_NAMES = frozenset(_LATE_TYPES)      # for messages: "bfloat16 (ml_dtypes)"
ACCEPTED_DTYPES = tuple(DTYPE_CODES)           # the same, in C order; replaced when they join
ML_DTYPES_HINT = install_hint("ml_dtypes", "bfloat16")
_late_lock = _locks.Lock()


def _add_late_types(module):
    """Add ml_dtypes' types (``module``) of the C list to DTYPE_CODES and ACCEPTED_DTYPES."""
    global ACCEPTED_DTYPES
    with _late_lock:
        for name, code in list(_LATE_TYPES.items()):
            kind = getattr(module, name, None)
            if kind is None:   # pragma: no cover - every ml_dtypes since 0.3 has bfloat16
                continue
            dtype = np.dtype(kind)
            assert dtype.itemsize == lib.rope_dtype_size(code), name
            DTYPE_CODES[dtype] = code
            del _LATE_TYPES[name]
        ACCEPTED_DTYPES = tuple(sorted(DTYPE_CODES, key=DTYPE_CODES.__getitem__))


def stores(dtype):
    """Whether the kernel stores ``dtype`` (a numpy dtype): one dict lookup, and
    for a dtype missing from it, ml_dtypes' types added if it is loaded."""
    if dtype in DTYPE_CODES:
        return True
    module = sys.modules.get("ml_dtypes") if _LATE_TYPES else None
    if module is None:
        return False
    _add_late_types(module)
    return dtype in DTYPE_CODES


def storage_dtypes():
    """Every storage type this process can serve, in C order, importing ml_dtypes
    if it is installed (for the tools and tests that go through them all)."""
    bfloat16()
    return ACCEPTED_DTYPES


def accepted_dtypes(x):
    """ACCEPTED_DTYPES for checking array ``x`` against them (any object: only an
    ndarray of a dtype not yet among them makes :func:`stores` look ml_dtypes up)."""
    if isinstance(x, np.ndarray):
        stores(x.dtype)
    return ACCEPTED_DTYPES


def bfloat16():
    """``ml_dtypes.bfloat16``'s numpy dtype, importing ml_dtypes (the first call
    pays for its import); None when it is not installed."""
    module = sys.modules.get("ml_dtypes")
    if module is None:
        try:
            import ml_dtypes as module
        except builtins.ImportError:
            return None
    if _LATE_TYPES:
        _add_late_types(module)
    return np.dtype(module.bfloat16)


def is_bfloat16(dtype):
    """Whether ``dtype`` is ml_dtypes' bfloat16, without importing ml_dtypes
    (an array of it exists only once ml_dtypes is loaded)."""
    module = sys.modules.get("ml_dtypes")
    return module is not None and dtype == module.bfloat16


def accepted_names(without=()):
    """The storage types (but those named in ``without``) for messages, as
    ``TypeError`` names them: ``float32, float16, bfloat16 (ml_dtypes), float64``;
    a type whose package is not installed is named with what to install."""
    import importlib.util
    names, missing = [], []
    for code in range(lib.rope_dtype_count()):
        name = ffi.string(lib.rope_dtype_name(code)).decode()
        if name in without:
            continue
        if name not in _ML_DTYPES_NAMES:
            names.append(name)
        elif sys.modules.get("ml_dtypes") is not None or importlib.util.find_spec("ml_dtypes") is not None:
            names.append(f"{name} (ml_dtypes)")
        else:
            missing.append(name)
    if missing:
        names[-1] += f" ({', '.join(missing)} needs the ml_dtypes package: {ML_DTYPES_HINT})"
    return ", ".join(names)
