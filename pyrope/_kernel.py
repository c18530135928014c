"""The thin layer between numpy arrays and the C core.

Everything here takes arguments that ``rope.py`` has already validated and
turns them into pointers, element strides and counts; C status codes come
back as exceptions carrying the C side's own message. The C functions check
their arguments again, so a mistake here gives an exception, not a crash.
"""
import builtins
import os
from contextlib import contextmanager

import numpy as np

from ._pyrope_cffi import ffi, lib
from .errors import RopeError, TypeError, ValueError

LAYOUTS = {"interleaved": lib.ROPE_INTERLEAVED, "split_half": lib.ROPE_SPLIT_HALF}

try:  # bfloat16 arrays are ml_dtypes arrays; without ml_dtypes the rest still works
    import ml_dtypes as _ml_dtypes
    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - exercised only without the extra
    BFLOAT16 = None

# Storage dtypes the kernel rotates, and their C codes.
DTYPE_CODES = {np.dtype(np.float32): lib.ROPE_F32, np.dtype(np.float16): lib.ROPE_F16}
if BFLOAT16 is not None:
    DTYPE_CODES[BFLOAT16] = lib.ROPE_BF16
DTYPE_CODES[np.dtype(np.float64)] = lib.ROPE_F64
ACCEPTED_DTYPES = tuple(DTYPE_CODES)
ACCEPTED_NAMES = "float32, float16, bfloat16 (ml_dtypes), float64" if BFLOAT16 is not None else \
    "float32, float16, float64 (bfloat16 needs the ml_dtypes package)"
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


def cos_sin_table(positions, inv_freq, scale, dtype=np.float32):
    """(cos, sin) of shape [len(positions), len(inv_freq)] for int64 positions,
    float32 (1 ulp contract, correctly rounded) or float64 (4 ulp contract)."""
    n_pos, n_freq = positions.shape[0], inv_freq.shape[0]
    wide = np.dtype(dtype) == np.float64
    fn, ctype = (lib.rope_cos_sin_f64, "double *") if wide else (lib.rope_cos_sin_f32, "float *")
    cos, sin = empty_tables(n_pos, n_freq, np.float64 if wide else np.float32)
    status = fn(pointer("int64_t *", positions), n_pos, pointer("double *", inv_freq), n_freq,
                scale, pointer(ctype, cos), pointer(ctype, sin))
    check_status(status, "cos_sin")
    return cos, sin


def cos_sin_table_f64(positions, inv_freq, scale):
    """float64 (cos, sin) for int64 positions (``cos_sin_table(..., np.float64)``)."""
    return cos_sin_table(positions, inv_freq, scale, np.float64)


def cos_sin_range(start, n_pos, inv_freq, scale, cos=None, sin=None):
    """float32 (cos, sin) for positions start..start+n_pos-1 (into ``cos``/``sin``
    when given: C-contiguous float32 [n_pos, len(inv_freq)])."""
    n_freq = inv_freq.shape[0]
    if cos is None:
        cos, sin = empty_tables(n_pos, n_freq, np.float32)
    status = lib.rope_cos_sin_range_f32(
        start, n_pos, pointer("double *", inv_freq), n_freq, scale,
        pointer("float *", cos), pointer("float *", sin))
    check_status(status, "cos_sin")
    return cos, sin


# ---- threads ---------------------------------------------------------------

def _default_threads():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


MAX_THREADS = 64
NUM_THREADS = _default_threads()  # read by every call; set_num_threads changes it


def set_num_threads(n):
    """Use at most ``n`` threads per call (1..64); large calls split across
    them, small ones stay on the calling thread. Results never depend on it."""
    global NUM_THREADS
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {type(n).__name__} {n!r}")
    if not 1 <= int(n) <= MAX_THREADS:
        raise ValueError(f"n must be between 1 and {MAX_THREADS}, got {n}")
    NUM_THREADS = int(n)


def get_num_threads():
    """The most threads one call may use (default: the CPUs this process may run on)."""
    return NUM_THREADS


def _threads_from_environment():
    text = os.environ.get("PYROPE_NUM_THREADS", "").strip()
    if text:
        try:
            set_num_threads(int(text))
        except (builtins.ValueError, RopeError) as exc:
            raise ValueError(f"environment variable PYROPE_NUM_THREADS must be an integer "
                             f"1..{MAX_THREADS}, got {text!r} ({exc})") from None


_threads_from_environment()


# ---- rotation --------------------------------------------------------------

def _table_args(table):
    if table is None:
        return ffi.NULL, ffi.NULL, 0, 0
    cos, sin, table_start = table
    return pointer("float *", cos), pointer("float *", sin), table_start, cos.shape[0]


def _position_args(positions):
    if positions is None:
        return ffi.NULL, 0, 0
    return (pointer("int64_t *", positions),
            0 if positions.shape[0] == 1 else positions.strides[0] // 8, positions.strides[1] // 8)


def rotate(x, out, layout, inverse, rotary_dim, positions, offset, table, inv_freq, scale):
    """Rotate 4-D views ``x`` into ``out`` ([batch, seq, heads, head_dim]) of one dtype.

    The last axis of both is contiguous and every stride is a whole number of
    elements. ``positions`` is None (then ``offset + s``) or an int64 array
    [batch or 1, seq]; ``table`` is (cos, sin, first_position), or None to
    compute each token's angles on the fly from ``inv_freq`` and ``scale``.
    """
    n_batch, n_seq, n_heads, head_dim = x.shape
    xs = _element_strides(x)
    os_ = _element_strides(out)
    cos_p, sin_p, table_start, table_rows = _table_args(table)
    p_ptr, p_sb, p_ss = _position_args(positions)
    status = lib.rope_rotate(
        DTYPE_CODES[x.dtype], LAYOUTS[layout], 1 if inverse else 0,
        pointer("void *", x), pointer("void *", out),
        n_batch, n_seq, n_heads, head_dim, rotary_dim,
        xs[0], xs[1], xs[2], os_[0], os_[1], os_[2],
        p_ptr, p_sb, p_ss, offset,
        cos_p, sin_p, table_start, table_rows,
        pointer("double *", inv_freq), scale, NUM_THREADS)
    check_status(status, "apply")


def rotate_qk(q, q_out, k, k_out, layout, inverse, rotary_dim, positions, offset, table,
              inv_freq, scale):
    """Rotate 4-D views q and k (same batch, seq, dtype) in one pass; see :func:`rotate`."""
    n_batch, n_seq, q_heads, head_dim = q.shape
    k_heads = k.shape[2]
    qs, qo, ks, ko = (_element_strides(a) for a in (q, q_out, k, k_out))
    cos_p, sin_p, table_start, table_rows = _table_args(table)
    p_ptr, p_sb, p_ss = _position_args(positions)
    status = lib.rope_rotate_qk(
        DTYPE_CODES[q.dtype], LAYOUTS[layout], 1 if inverse else 0,
        pointer("void *", q), pointer("void *", q_out), q_heads, *qs, *qo,
        pointer("void *", k), pointer("void *", k_out), k_heads, *ks, *ko,
        n_batch, n_seq, head_dim, rotary_dim,
        p_ptr, p_sb, p_ss, offset,
        cos_p, sin_p, table_start, table_rows,
        pointer("double *", inv_freq), scale, NUM_THREADS)
    check_status(status, "apply_qk")


def bandwidth_pass(a, xor_mask=0, n_threads=None):
    """The yardstick: XOR every byte of C-contiguous ``a`` in place with ``xor_mask``
    (0: unchanged), one read and one write per byte, split like a rotation."""
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"a must be a writeable C-contiguous array, got c_contiguous="
                         f"{a.flags.c_contiguous}, writeable={a.flags.writeable}")
    status = lib.rope_bandwidth_pass(pointer("void *", a), a.nbytes, xor_mask,
                                     NUM_THREADS if n_threads is None else n_threads)
    check_status(status, "bandwidth_pass")


def kernel_friendly(a):
    """Can the kernel address ``a`` directly? Contiguous last axis, and data
    aligned to the element size (C forbids misaligned float pointers; such
    views, e.g. a byte-offset buffer, go through an aligned copy)."""
    item = a.itemsize
    return a.strides[-1] == item and a.flags.aligned and all(s % item == 0 for s in a.strides)


def _element_strides(a):
    """Strides in elements of the first three axes; 0 for axes of length 1."""
    item = a.itemsize
    return tuple(0 if n == 1 else s // item for n, s in zip(a.shape[:3], a.strides[:3]))
