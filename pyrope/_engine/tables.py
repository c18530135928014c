"""The cos/sin tables: allocation (:func:`empty_tables`, huge-page aligned
from 32 MiB on) and filling by C (:func:`cos_sin_table` for a position list,
:func:`cos_sin_range` for consecutive positions), float32 correctly rounded
or float64 within the 4 ulp contract. Rows for a Rope's cache
(``table_cache``), for one call (``rope.py``) and for the tests come from here.
"""
import numpy as np

from .binding import lib, pointer, raise_for_status


# Tables of 32 MiB and more: cos and sin share one fresh allocation that
# starts on a 2 MiB boundary (the x86-64 huge page). numpy asks the kernel for
# transparent huge pages on large allocations (madvise), but only whole,
# aligned 2 MiB pages get them; the rest costs one page fault per 4 KiB on
# first touch, and those faults dominate the time to make a fresh table
# (measured: a 131072 x 64 pair in 11.3 ms instead of 14.5 ms). Smaller
# arrays are left to malloc, which may hand back recently freed memory with
# its pages already in place; from 32 MiB on (glibc's largest dynamic mmap
# threshold) it always maps fresh pages.
_HUGE_PAGE = 1 << 21
_ALIGN_FROM = 1 << 25


def empty_tables(n_pos, n_freq, dtype):
    """Two fresh, uninitialised C-contiguous [n_pos, n_freq] arrays (cos, sin).

    From 32 MiB per table on, they are the two halves of one buffer that
    starts on a 2 MiB boundary (so the buffer lives as long as either)."""
    dtype = np.dtype(dtype)
    nbytes = n_pos * n_freq * dtype.itemsize
    if nbytes < _ALIGN_FROM:
        return np.empty((n_pos, n_freq), dtype=dtype), np.empty((n_pos, n_freq), dtype=dtype)
    raw = np.empty(2 * nbytes + _HUGE_PAGE, dtype=np.uint8)
    skip = -raw.ctypes.data % _HUGE_PAGE
    both = raw[skip:skip + 2 * nbytes].view(dtype).reshape(2, n_pos, n_freq)
    return both[0], both[1]


def cos_sin_table(positions, inv_freq, scale, dtype=np.float32, where="positions", tables=None):
    """(cos, sin) of shape [len(positions), len(inv_freq)] for C-contiguous int64
    positions, float32 (correctly rounded) or float64 (4 ulp contract). ``where``
    names the user's argument the positions came from, for error messages;
    ``tables``: the two arrays to fill (from :func:`empty_tables`), else new ones."""
    n_pos, n_freq = positions.shape[0], inv_freq.shape[0]
    wide = np.dtype(dtype) == np.float64
    fn = lib.rope_cos_sin_f64 if wide else lib.rope_cos_sin_f32
    cos, sin = tables if tables is not None else empty_tables(n_pos, n_freq, np.float64 if wide else np.float32)
    ctype = "double" if wide else "float"
    status = fn(pointer(positions, ctype="int64_t"), n_pos, pointer(inv_freq, ctype="double"), n_freq, scale,
                pointer(cos, True, ctype), pointer(sin, True, ctype))
    raise_for_status(status, where)
    return cos, sin


def cos_sin_table_f64(positions, inv_freq, scale):
    """float64 (cos, sin) for int64 positions (``cos_sin_table(..., np.float64)``)."""
    return cos_sin_table(positions, inv_freq, scale, np.float64)


def cos_sin_range(start, n_pos, inv_freq, scale, cos=None, sin=None, where="positions", dtype=np.float32):
    """(cos, sin) of ``dtype`` (float32 or float64) for positions
    start..start+n_pos-1 (into ``cos``/``sin`` when given: C-contiguous
    [n_pos, len(inv_freq)] of that dtype)."""
    n_freq = inv_freq.shape[0]
    wide = np.dtype(dtype) == np.float64
    if cos is None:
        cos, sin = empty_tables(n_pos, n_freq, np.float64 if wide else np.float32)
    if wide:
        positions = np.arange(start, start + n_pos, dtype=np.int64)
        status = lib.rope_cos_sin_f64(
            pointer(positions, ctype="int64_t"), n_pos, pointer(inv_freq, ctype="double"), n_freq, scale,
            pointer(cos, True, "double"), pointer(sin, True, "double"))
    else:
        status = lib.rope_cos_sin_range_f32(
            start, n_pos, pointer(inv_freq, ctype="double"), n_freq, scale,
            pointer(cos, True, "float"), pointer(sin, True, "float"))
    raise_for_status(status, where)
    return cos, sin

