"""Argument checks shared by the public API.

Each check names the argument, states the rule and shows the value received,
and raises before anything is computed or written.
"""
import builtins
import math
import operator
import sys

import numpy as np

from .binding import MAX_INV_FREQ, MAX_POSITION, MAX_SCALE, MIN_SCALE
from ..errors import OverflowError, TypeError, ValueError, shown

LAYOUT_NAMES = ("interleaved", "split_half")

# The kernel's limits (pyrope.h, read by the binding), as messages state them.


def _power_of_two(x):
    """``"2**-32"`` for a power of two, else the float's repr."""
    mantissa, exponent = math.frexp(x)
    return f"2**{exponent - 1}" if mantissa == 0.5 else repr(x)


POSITION_LIMIT = f"+-{MAX_POSITION} (ROPE_MAX_POSITION)"
_INT64_MAX = int(np.iinfo(np.int64).max)
INV_FREQ_LIMIT = f"the kernel's largest frequency {MAX_INV_FREQ!r} (ROPE_MAX_INV_FREQ)"
SCALE_LIMIT = (f"the kernel's range [{_power_of_two(MIN_SCALE)}, {_power_of_two(MAX_SCALE)}] "
               f"(ROPE_MIN_SCALE, ROPE_MAX_SCALE)")


def inv_freq_problem(value):
    """Why the kernel cannot serve frequency ``value`` (a phrase), or None when it can."""
    if value != value or value < 0:
        return "must be finite and >= 0"
    if value > MAX_INV_FREQ:
        return f"exceeds {INV_FREQ_LIMIT}"
    return None


def first_inv_freq_problem(values):
    """``(index, value, phrase)`` of the first frequency in a float64 vector the
    kernel cannot serve, or None when it serves them all."""
    bad = ~((values >= 0) & (values <= MAX_INV_FREQ))  # NaN compares false: bad
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return i, float(values[i]), inv_freq_problem(float(values[i]))


def scale_problem(value):
    """Why the kernel cannot serve attention factor ``value`` (a phrase), or None."""
    if MIN_SCALE <= value <= MAX_SCALE:  # NaN and infinities fail
        return None
    return f"is outside {SCALE_LIMIT}"


def as_bool(name, value):
    """``value`` as a bool: True, False or a numpy bool; anything else is a TypeError
    (a truthy string or list never passes for a flag)."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {shown(value)}")


def as_int(name, value):
    """``value`` as a Python int; bools and non-integral numbers are a TypeError."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got a bool ({shown(value)})")
    try:
        return operator.index(value)
    except builtins.TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {shown(value)}") from None


# Largest head_dim (and rotary_dim): a Rope's cached rows stay within their
# 32 MiB bound (_table_cache: at least 64 float64 rows of head_dim/2 pairs,
# cos and sin), and what a Rope allocates for its frequencies is bounded by
# it, whatever number a config holds. 64x the largest head of any model.
MAX_HEAD_DIM = 65536


def as_even_dim(name, value):
    """A positive even integer (head_dim, rotary_dim) up to ``MAX_HEAD_DIM``."""
    value = as_int(name, value)
    if value <= 0 or value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {shown(value)}")
    if value > MAX_HEAD_DIM:
        raise ValueError(f"{name} must be at most {MAX_HEAD_DIM}, got {shown(value)}")
    return value


def as_base(value):
    """The RoPE base: a finite real number greater than 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"base must be a real number, got {type(value).__name__} {shown(value)}")
    value = float(value)
    if not math.isfinite(value) or value <= 1.0:
        raise ValueError(f"base must be finite and greater than 1, got {shown(value)}")
    return value


def as_layout(value):
    """One of the two pair layouts, by name."""
    if not isinstance(value, str):
        raise TypeError(f"layout must be a string, one of {LAYOUT_NAMES}, got {shown(value)}")
    if value not in LAYOUT_NAMES:
        raise ValueError(
            f"layout must be 'split_half' (HF, GPT-NeoX: pairs (i, i + d/2)) or "
            f"'interleaved' (GPT-J, Meta: pairs (2i, 2i+1)), got {shown(value)}")
    return value


def _size(nbytes):
    """``nbytes`` for a message: ``"16.0 GiB"``."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes} bytes" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def allocate(name, shape, dtype, what="the result"):
    """``np.empty(shape, dtype)``; an array this process cannot allocate (or
    that exceeds the address space) is a ``ValueError`` naming ``name``, the
    argument whose size asked for it, never numpy's ``MemoryError``."""
    try:
        return np.empty(shape, dtype)
    except (builtins.MemoryError, builtins.ValueError):
        raise too_large(name, shape, dtype, what) from None


def too_large(name, shape, dtype, what="the result"):
    """The refusal :func:`allocate` raises (for callers that allocate otherwise)."""
    nbytes = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
    return ValueError(f"{name}: {what} of shape {tuple(shape)} ({np.dtype(dtype).name}, {_size(nbytes)}) "
                      f"cannot be allocated")


def refuse_masked(name, value):
    """A numpy masked array's mask would be ignored (the kernel reads the data
    under it): refused, naming the argument."""
    ma = sys.modules.get("numpy.ma")   # a masked array exists only once numpy.ma is imported
    if ma is not None and isinstance(value, ma.MaskedArray):
        raise TypeError(f"{name} must not be a masked array (numpy.ma): pyrope would read the values "
                        f"under its mask; pass numpy.ma.getdata({name}) or fill the masked entries first")


def _all_python_ints(value):
    """Does the nested sequence ``value`` hold only integers (no bools)? Asked
    only after numpy made floats or objects of it: then they exceed int64."""
    try:
        flat = np.asarray(value, dtype=object).reshape(-1)
    except (builtins.ValueError, builtins.TypeError):
        return False
    return flat.size > 0 and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                 for v in flat)


def as_positions(name, value):
    """An int64 array of token positions, each within +-MAX_POSITION (pyrope.h).

    Accepts integer arrays (also CPU torch tensors and DLPack objects),
    Python ints and nested lists of ints; floats, bools, objects and masked
    arrays are a ``TypeError``, ragged lists a ``ValueError``, integers beyond
    int64 an ``OverflowError``, positions past +-MAX_POSITION a
    ``ValueError``: never cast. (:func:`positions_array` then
    :func:`checked_positions`, for callers that check shapes in between.)
    """
    return checked_positions(name, positions_array(name, value))


def table_dtype(dtype):
    """``dtype`` as numpy's float32 or float64 (the tables' types), else a
    ``TypeError`` naming ``dtype``."""
    try:
        kind = None if dtype is None else np.dtype(dtype)
    except Exception:   # numpy refuses odd dtype specs with TypeError or ValueError
        kind = None
    if kind != np.float32 and kind != np.float64:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r:.200}")
    return kind


def positions_array(name, value):
    """``value`` as an integer ndarray (a view where it can be), its dtype
    checked but not its values: shapes can be checked before the values are
    read (see :func:`as_positions` for what is refused)."""
    if isinstance(value, np.ndarray):
        refuse_masked(name, value)
        arr = value if type(value) is np.ndarray else np.asarray(value)   # np.matrix, memmap: the plain array
    else:   # tensors and DLPack objects arrive as ndarray views (crossing the edge, _interop.edge)
        try:
            arr = np.asarray(value)
        except builtins.OverflowError:
            raise OverflowError(f"{name} must hold integers within {POSITION_LIMIT}, got {value!r:.200}") from None
        except builtins.ValueError:   # numpy: "inhomogeneous shape"
            raise ValueError(f"{name} must be a rectangular integer array, got a ragged nested sequence "
                             f"{value!r:.200}") from None
        if arr.dtype.kind in "fO" and _all_python_ints(value):   # numpy 2 makes [2**63, 0] float64
            raise OverflowError(f"{name} must hold integers within {POSITION_LIMIT}, got values beyond int64")
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        if arr.dtype == object and arr.size and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.flat):
            raise OverflowError(f"{name} must hold integers within {POSITION_LIMIT}, got values beyond int64")
        raise TypeError(f"{name} must be an integer array (int8..int64, uint8..uint64), got dtype {arr.dtype}")
    return arr


def position_bounds(name, arr):
    """``(lowest, highest)`` value of the non-empty integer ndarray ``arr`` (from
    :func:`positions_array`), each within +-MAX_POSITION (else
    ``OverflowError``/``ValueError``)."""
    if arr.size <= 64:   # a decode step's few positions: Python's min/max cost less than numpy's
        values = arr.ravel().tolist()
        lo, hi = min(values), max(values)
    else:
        lo, hi = int(arr.min()), int(arr.max())
    if lo < -MAX_POSITION or hi > MAX_POSITION:
        if hi > _INT64_MAX:
            raise OverflowError(f"{name} must lie within {POSITION_LIMIT}, got {hi} (beyond int64)")
        bad = lo if lo < -MAX_POSITION else hi
        raise ValueError(f"{name} must lie within {POSITION_LIMIT}, got {bad}")
    return lo, hi


def checked_positions(name, arr):
    """Integer ndarray ``arr`` (from :func:`positions_array`) as int64, each
    value within +-MAX_POSITION (else ``OverflowError``/``ValueError``)."""
    if arr.size:
        position_bounds(name, arr)
    return arr.astype(np.int64, copy=False)


def as_float_array(name, value, dtypes, accepted=None):
    """``value`` must be an ndarray whose dtype is exactly one of ``dtypes`` (native order).

    ``accepted``: how the message names the dtypes (default: their names), or a
    function giving that, called only for the message."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    refuse_masked(name, value)
    if not any(value.dtype == d for d in dtypes):
        accepted = (accepted() if callable(accepted) else accepted) or ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} must have dtype {accepted} (native byte order), got {value.dtype.str} ({value.dtype})")
    return value


def out_pair(out):
    """``apply_qk``'s ``out``: None or a pair, as ``(q_out, k_out)``."""
    if out is None:
        return None, None
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return out[0], out[1]
    raise TypeError(f"out must be None or a pair (q_out, k_out), got {type(out).__name__}")
