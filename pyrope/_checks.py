"""Argument checks shared by the public API.

Each check names the argument, states the rule and shows the value received,
and raises before anything is computed or written.
"""
import builtins
import math
import operator

import numpy as np

from .errors import OverflowError, TypeError, ValueError

LAYOUT_NAMES = ("interleaved", "split_half")
MAX_POSITION = 2**31 - 1  # |position| bound of the exact angle computation


def as_int(name, value):
    """``value`` as a Python int; bools and non-integral numbers are a TypeError."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got a bool ({value!r})")
    try:
        return operator.index(value)
    except builtins.TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def as_even_dim(name, value):
    """A positive even integer (head_dim, rotary_dim)."""
    value = as_int(name, value)
    if value <= 0 or value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {value}")
    return value


def as_base(value):
    """The RoPE base: a finite real number greater than 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"base must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 1.0:
        raise ValueError(f"base must be finite and greater than 1, got {value!r}")
    return value


def as_layout(value):
    """One of the two pair layouts, by name."""
    if not isinstance(value, str):
        raise TypeError(f"layout must be a string, one of {LAYOUT_NAMES}, got {value!r}")
    if value not in LAYOUT_NAMES:
        raise ValueError(
            f"layout must be 'split_half' (HF, GPT-NeoX: pairs (i, i + d/2)) or "
            f"'interleaved' (GPT-J, Meta: pairs (2i, 2i+1)), got {value!r}")
    return value


def as_positions(name, value):
    """An int64 array of token positions, each within +-MAX_POSITION.

    Accepts integer arrays, Python ints and nested lists of ints; floats,
    bools, objects and values beyond int64 are refused, never cast.
    """
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (builtins.OverflowError, builtins.ValueError):
            raise OverflowError(f"{name} must hold integers within +-{MAX_POSITION}, got {value!r}") from None
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        if arr.dtype == object and arr.size and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.flat):
            raise OverflowError(f"{name} must hold integers within +-{MAX_POSITION}, got values beyond int64")
        raise TypeError(f"{name} must be an integer array (int8..int64, uint8..uint64), got dtype {arr.dtype}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if hi > np.iinfo(np.int64).max:
            raise OverflowError(f"{name} must lie within +-{MAX_POSITION} (2**31 - 1), got {hi} (beyond int64)")
        if lo < -MAX_POSITION or hi > MAX_POSITION:
            bad = lo if lo < -MAX_POSITION else hi
            raise ValueError(f"{name} must lie within +-{MAX_POSITION} (2**31 - 1), got {bad}")
    return arr.astype(np.int64, copy=False)


def as_float_array(name, value, dtypes, accepted=None):
    """``value`` must be an ndarray whose dtype is exactly one of ``dtypes`` (native order).

    ``accepted``: how the message names the dtypes (default: their names)."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    if not any(value.dtype == d for d in dtypes):
        accepted = accepted or ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} must have dtype {accepted} (native byte order), got {value.dtype.str} ({value.dtype})")
    return value
