"""The thin layer between numpy arrays and the C core.

Everything here takes arguments that ``rope.py`` has already validated and
turns them into pointers, element strides and counts; C status codes come
back as exceptions carrying the C side's own message. The C functions check
their arguments again, so a mistake here gives an exception, not a crash.
"""
import os
from contextlib import contextmanager

import numpy as np

from ._pyrope_cffi import ffi, lib
from .errors import RopeError, TypeError, ValueError

LAYOUTS = {"interleaved": lib.ROPE_INTERLEAVED, "split_half": lib.ROPE_SPLIT_HALF}
ISAS = {"scalar": lib.ROPE_ISA_SCALAR, "avx2": lib.ROPE_ISA_AVX2}
_ISA_NAMES = {code: name for name, code in ISAS.items()}


def check_status(status, what):
    """Raise the exception that matches a C status code (no-op for ROPE_OK)."""
    if status == lib.ROPE_OK:
        return
    message = f"{what}: {ffi.string(lib.rope_strerror(status)).decode()}"
    if status == lib.ROPE_E_DTYPE:
        raise TypeError(message)
    raise ValueError(message)


def pointer(ctype, array):
    """A C pointer to the first element of ``array`` (which the caller keeps alive)."""
    return ffi.cast(ctype, array.__array_interface__["data"][0])


# ---- instruction sets ------------------------------------------------------

def supported_isas():
    """Names of the instruction sets this CPU and OS can run, best last."""
    return [name for name, code in ISAS.items() if lib.rope_isa_supported(code)]


def get_isa():
    """The instruction set the kernels use now: ``"scalar"`` or ``"avx2"``."""
    return _ISA_NAMES[lib.rope_get_isa()]


def set_isa(name):
    """Force an instruction set (``"scalar"``, ``"avx2"``) or ``"auto"`` for the best one.

    Raises ``ValueError`` for an unknown name or one this machine cannot run.
    """
    if name == "auto":
        name = supported_isas()[-1]
    if name not in ISAS:
        raise ValueError(f"isa must be one of 'auto', {', '.join(map(repr, ISAS))}; got {name!r}")
    if lib.rope_set_isa(ISAS[name]) != lib.ROPE_OK:
        raise ValueError(f"isa {name!r} is not supported on this CPU/OS (supported: {supported_isas()})")


@contextmanager
def forced_isa(name):
    """Context manager: run the body with ``set_isa(name)``, then restore the previous choice."""
    previous = get_isa()
    set_isa(name)
    try:
        yield
    finally:
        set_isa(previous)


def _isa_from_environment():
    name = os.environ.get("PYROPE_ISA", "").strip().lower()
    if name:
        try:
            set_isa(name)
        except RopeError as exc:
            raise ValueError(f"environment variable PYROPE_ISA: {exc}") from None


_isa_from_environment()


# ---- tables ----------------------------------------------------------------

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


def cos_sin_table(positions, inv_freq, scale):
    """float32 (cos, sin) of shape [len(positions), len(inv_freq)] for int64 positions."""
    n_pos, n_freq = positions.shape[0], inv_freq.shape[0]
    cos, sin = empty_tables(n_pos, n_freq, np.float32)
    status = lib.rope_cos_sin_f32(
        pointer("int64_t *", positions), n_pos, pointer("double *", inv_freq), n_freq,
        scale, pointer("float *", cos), pointer("float *", sin))
    check_status(status, "cos_sin")
    return cos, sin


def cos_sin_table_f64(positions, inv_freq, scale):
    """float64 (cos, sin) of shape [len(positions), len(inv_freq)] for int64 positions."""
    n_pos, n_freq = positions.shape[0], inv_freq.shape[0]
    cos, sin = empty_tables(n_pos, n_freq, np.float64)
    status = lib.rope_cos_sin_f64(
        pointer("int64_t *", positions), n_pos, pointer("double *", inv_freq), n_freq,
        scale, pointer("double *", cos), pointer("double *", sin))
    check_status(status, "cos_sin")
    return cos, sin


def cos_sin_range(start, n_pos, inv_freq, scale):
    """float32 (cos, sin) for positions start..start+n_pos-1."""
    n_freq = inv_freq.shape[0]
    cos, sin = empty_tables(n_pos, n_freq, np.float32)
    status = lib.rope_cos_sin_range_f32(
        start, n_pos, pointer("double *", inv_freq), n_freq, scale,
        pointer("float *", cos), pointer("float *", sin))
    check_status(status, "cos_sin")
    return cos, sin


# ---- rotation --------------------------------------------------------------

def rotate(x, out, layout, inverse, rotary_dim, positions, offset, table, inv_freq, scale):
    """Rotate 4-D float32 views ``x`` into ``out`` ([batch, seq, heads, head_dim]).

    The last axis of both is contiguous and every stride is a whole number of
    elements. ``positions`` is None (then ``offset + s``) or an int64 array
    [batch or 1, seq]; ``table`` is (cos, sin, first_position), or None to
    compute each token's angles on the fly from ``inv_freq`` and ``scale``.
    """
    n_batch, n_seq, n_heads, head_dim = x.shape
    xs = _element_strides(x)
    os_ = _element_strides(out)
    if table is None:
        cos_p = sin_p = ffi.NULL
        table_start = table_rows = 0
    else:
        cos, sin, table_start = table
        cos_p, sin_p, table_rows = pointer("float *", cos), pointer("float *", sin), cos.shape[0]
    if positions is None:
        p_ptr, p_sb, p_ss = ffi.NULL, 0, 0
    else:
        p_ptr = pointer("int64_t *", positions)
        p_sb, p_ss = (0 if positions.shape[0] == 1 else positions.strides[0] // 8,
                      positions.strides[1] // 8)
    status = lib.rope_rotate(
        lib.ROPE_F32, LAYOUTS[layout], 1 if inverse else 0,
        pointer("float *", x), pointer("float *", out),
        n_batch, n_seq, n_heads, head_dim, rotary_dim,
        xs[0], xs[1], xs[2], os_[0], os_[1], os_[2],
        p_ptr, p_sb, p_ss, offset,
        cos_p, sin_p, table_start, table_rows,
        pointer("double *", inv_freq), scale, 1)
    check_status(status, "apply")


def _element_strides(a):
    """Strides in elements of the first three axes; 0 for axes of length 1."""
    item = a.itemsize
    return tuple(0 if n == 1 else s // item for n, s in zip(a.shape[:3], a.strides[:3]))
