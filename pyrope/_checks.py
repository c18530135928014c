"""Argument checks shared by the public API.

Each check names the argument, states the rule and shows the value received,
and raises before anything is computed or written.
"""
import builtins
import math
import operator

import numpy as np

from ._kernel import MAX_INV_FREQ, MAX_POSITION, MAX_SCALE, MIN_SCALE
from ._tensors import as_array, is_foreign
from .errors import OverflowError, TypeError, ValueError

LAYOUT_NAMES = ("interleaved", "split_half")

# The kernel's limits (pyrope.h, read by _kernel), as messages state them.


def _power_of_two(x):
    """``"2**-32"`` for a power of two, else the float's repr."""
    mantissa, exponent = math.frexp(x)
    return f"2**{exponent - 1}" if mantissa == 0.5 else repr(x)


POSITION_LIMIT = f"+-{MAX_POSITION} (ROPE_MAX_POSITION)"
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
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


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
    """An int64 array of token positions, each within +-MAX_POSITION (pyrope.h).

    Accepts integer arrays (also CPU torch tensors and DLPack objects),
    Python ints and nested lists of ints; floats,
    bools, objects and values beyond int64 are refused, never cast.
    """
    if isinstance(value, np.ndarray):
        arr = value
    elif is_foreign(value):   # a torch int tensor, a DLPack array: viewed, not copied
        arr = as_array(name, value, data=False)
    else:
        try:
            arr = np.asarray(value)
        except (builtins.OverflowError, builtins.ValueError):
            raise OverflowError(f"{name} must hold integers within {POSITION_LIMIT}, got {value!r}") from None
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        if arr.dtype == object and arr.size and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.flat):
            raise OverflowError(f"{name} must hold integers within {POSITION_LIMIT}, got values beyond int64")
        raise TypeError(f"{name} must be an integer array (int8..int64, uint8..uint64), got dtype {arr.dtype}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if hi > np.iinfo(np.int64).max:
            raise OverflowError(f"{name} must lie within {POSITION_LIMIT}, got {hi} (beyond int64)")
        if lo < -MAX_POSITION or hi > MAX_POSITION:
            bad = lo if lo < -MAX_POSITION else hi
            raise ValueError(f"{name} must lie within {POSITION_LIMIT}, got {bad}")
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
