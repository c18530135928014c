"""The binding: the one module that touches the C library.

Everything about the C side that Python needs is read from it here, never
retyped: the storage types, the instruction sets, the limits of
``pyrope.h``, the status codes. Arrays become C pointers in one place
(:func:`pointer`); C status codes become exceptions in one place
(:func:`raise_for_status`). Callers hand in arrays the planner
(``_plan.py``) has already validated and laid out; C checks them again, so a
mistake here gives an exception, not a crash.
"""
import builtins
import functools
import os
import sys
import threading
from contextlib import contextmanager

import numpy as np

from . import locks as _locks
from .._pyrope_cffi import ffi, lib
from ..errors import OverflowError, RopeError, TypeError, ValueError, install_hint

# ---- limits (pyrope.h) -------------------------------------------------------

MAX_POSITION = lib.ROPE_MAX_POSITION      # largest |position|: exact angles up to it
MAX_INV_FREQ = lib.ROPE_MAX_INV_FREQ      # largest |inv_freq| the kernel accepts
MIN_SCALE = lib.ROPE_MIN_SCALE            # range of the attention factor
MAX_SCALE = lib.ROPE_MAX_SCALE
MAX_OTF_HALF = lib.ROPE_MAX_OTF_HALF      # largest rotary_dim/2 computed on the fly
MAX_THREADS = lib.ROPE_MAX_THREADS        # most threads one call uses
MAX_COMPONENTS = lib.ROPE_MAX_COMPONENTS  # most components of a sectioned position

LAYOUTS = {"interleaved": lib.ROPE_INTERLEAVED, "split_half": lib.ROPE_SPLIT_HALF}
POSITION_SOURCES = {"offset": lib.ROPE_POS_OFFSET, "list": lib.ROPE_POS_LIST,
                     "sections": lib.ROPE_POS_SECTIONS}

# ---- status codes -> exceptions ----------------------------------------------

POSITION_MISS = lib.ROPE_E_POSITION  # a position outside the rows given: nothing written
MISALIGNED = lib.ROPE_E_ALIGN        # a pointer not aligned to its element: nothing written
OVERLAP = lib.ROPE_E_OVERLAP         # an output meets what C reads (the positions): nothing written
_FALL_BACK = (POSITION_MISS, MISALIGNED, OVERLAP)   # the general path copes: Call.launch falls back

# Which exception each C status raises (ValueError for the rest).
_STATUS_EXCEPTIONS = {lib.ROPE_E_DTYPE: TypeError, lib.ROPE_E_OVERFLOW: OverflowError}


def raise_for_status(status, where):
    """Raise the exception a C status code stands for (no-op for ROPE_OK).

    ``where`` names what the user passed (``"Rope.apply(x)"``, ``"positions"``),
    never an internal function; the rest of the message is C's own."""
    if status == lib.ROPE_OK:
        return
    message = ffi.string(lib.rope_strerror(status)).decode()
    raise _STATUS_EXCEPTIONS.get(status, ValueError)(f"{where}: {message}")


# ---- storage types (the C list) ------------------------------------------------

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


# ---- pointers ----------------------------------------------------------------

# cffi types by name, looked up once: a type given as a string costs a parse per call
_BUFFER_TYPES = {n: ffi.typeof(n + "[]") for n in ("char", "float", "double", "int64_t", "uint8_t")}
_POINTER_TYPES = {n: ffi.typeof(n + " *") for n in _BUFFER_TYPES}
_CHARS = _BUFFER_TYPES["char"]
# A Call's pointers (Call.launch), without a Python frame each: the buffer of a
# C-contiguous array, or of the contiguous first head of a strided one;
# positions are always C-contiguous int64.
_from_buffer = ffi.from_buffer
_positions_pointer = functools.partial(ffi.from_buffer, _BUFFER_TYPES["int64_t"])
_rotate = lib.rope_rotate


def pointer(a, writable=False, ctype="char"):
    """A C ``ctype *`` to the first element of ndarray ``a``: the one way
    arrays become pointers.

    The caller keeps ``a`` referenced for the whole C call. Contiguous arrays
    go through the buffer protocol (``writable``: refuse a read-only buffer,
    a second guard), whose pointer is the first element's; other views, which
    numpy does not export as a plain buffer, by their address."""
    try:
        return ffi.from_buffer(_CHARS if ctype == "char" else _BUFFER_TYPES[ctype], a, writable)
    except (BufferError, builtins.ValueError):  # numpy: "ndarray is not C-contiguous"
        if writable and not a.flags.writeable:
            raise
        return ffi.cast(_POINTER_TYPES[ctype], a.__array_interface__["data"][0])


# ---- instruction sets (the C registry) -----------------------------------------

ISAS = tuple(ffi.string(lib.rope_isa_name(i)).decode() for i in range(lib.rope_isa_count()))


def supported_isas():
    """Names of the instruction sets this CPU and OS can run, best last."""
    return [name for code, name in enumerate(ISAS) if lib.rope_isa_supported(code)]


# The choice is process-wide (C publishes one kernel table for every thread).
# Python keeps what decides it, under one lock: the base choice (set_isa,
# PYROPE_ISA, else the best supported) and the forced_isa blocks active in
# any thread, in the order they were entered. The ISA in effect is always
# the most recently entered active block's, or the base when none is active,
# and it is republished whenever either changes. So blocks may overlap and
# end in any order, in any threads: the last one to end restores the base.
_isa_lock = _locks.Lock()   # a forked child gets it unheld (and its own blocks only)
_isa_base = None      # the base choice, a name of ISAS (set at import, below)
_isa_blocks = []      # [(token, name, thread id)] of the active forced_isa blocks, oldest first


def _publish():
    """Make the ISA the state says the one C uses (``_isa_lock`` held)."""
    name = _isa_blocks[-1][1] if _isa_blocks else _isa_base
    if lib.rope_set_isa(ISAS.index(name)) != lib.ROPE_OK:  # pragma: no cover - names are checked
        raise ValueError(f"isa {name!r} is not supported on this CPU/OS")


def get_isa():
    """The instruction set the kernels use now, e.g. ``"scalar"`` or ``"avx2"``."""
    return ISAS[lib.rope_get_isa()]


def _isa_name(name):
    """``name`` checked: a name of ``supported_isas()``, or ``"auto"`` for the best."""
    if isinstance(name, str) and name == "auto":
        return supported_isas()[-1]
    if not isinstance(name, str) or name not in ISAS:
        raise ValueError(f"isa must be one of 'auto', {', '.join(map(repr, ISAS))}; got {name!r}")
    if not lib.rope_isa_supported(ISAS.index(name)):
        raise ValueError(f"isa {name!r} is not supported on this CPU/OS (supported: {supported_isas()})")
    return name


def set_isa(name):
    """Choose the instruction set (a name of ``supported_isas()``) or ``"auto"`` for the best one.

    Process-wide: every thread's calls use it. Inside ``forced_isa`` blocks
    (in any thread) their ISA holds; this choice takes effect when the last
    of them ends. Raises ``ValueError`` for an unknown name or one this
    machine cannot run.
    """
    global _isa_base
    name = _isa_name(name)
    with _isa_lock:
        _isa_base = name
        _publish()


@contextmanager
def forced_isa(name):
    """Context manager: run the body with instruction set ``name`` (as :func:`set_isa` takes).

    The choice is process-wide, not per thread: while a block is active,
    every thread's calls use the ISA of the most recently entered active
    block. Blocks may overlap across threads and end in any order: when one
    ends, the ISA becomes that of the most recent block still active, and
    when the last ends, the base choice (:func:`set_isa`, ``PYROPE_ISA``,
    else the best) again, even if ``set_isa`` ran meanwhile. Overlapping
    blocks of *different* ISAs in different threads therefore do not each
    get their own; run such measurements one at a time.
    """
    name = _isa_name(name)
    token = object()
    with _isa_lock:
        _isa_blocks.append((token, name, threading.get_ident()))
        _publish()
    try:
        yield
    finally:
        with _isa_lock:
            _isa_blocks[:] = [b for b in _isa_blocks if b[0] is not token]
            _publish()


@_locks.after_fork_in_child
def _forget_other_threads_blocks():
    """A forked child has only the forking thread: blocks other threads had
    entered can never end there, so they end now (the forking thread's stay)."""
    me = threading.get_ident()
    _isa_blocks[:] = [b for b in _isa_blocks if b[2] == me]
    if _isa_base is not None:   # None: forked while this module was being imported
        _publish()


def _isa_from_environment():
    name = os.environ.get("PYROPE_ISA", "").strip().lower()
    if name:
        try:
            set_isa(name)
        except RopeError as exc:
            raise ValueError(f"environment variable PYROPE_ISA: {exc}") from None


# A bad variable is not an import error: `pyrope --help` must still run, and
# the command line refuses it in one line (cli.py). A library user gets a
# RuntimeWarning naming it and the default (as torch does for OMP_NUM_THREADS),
# from pyrope/__init__.py, which knows whether the command line is starting.
ENVIRONMENT_ERRORS = []
try:
    _isa_from_environment()
except ValueError as exc:
    ENVIRONMENT_ERRORS.append(exc)
if _isa_base is None:
    _isa_base = get_isa()   # C's own choice: the best supported


# ---- threads -------------------------------------------------------------------

def _default_threads():
    try:
        return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, min(MAX_THREADS, os.cpu_count() or 1))


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


try:
    _threads_from_environment()
except ValueError as exc:
    ENVIRONMENT_ERRORS.append(exc)


# ---- tables ----------------------------------------------------------------------

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


def float_pointers(*arrays):
    """C ``float *``/``double *`` views of C-contiguous tables or frequency vectors
    (``rope_angles`` takes either as its rows: ``void *``),
    kept with them by the caller (``TableCache`` windows, a Rope's inv_freq)."""
    return tuple(pointer(a, ctype="double" if a.dtype == np.float64 else "float") for a in arrays)


# ---- rotation ----------------------------------------------------------------------

_ANGLES_SIZE = ffi.sizeof("rope_angles")
_POS_LIST, _POS_SECTIONS = lib.ROPE_POS_LIST, lib.ROPE_POS_SECTIONS


def angle_template(inv_freq_ptr, scale, table=None):
    """A ``rope_angles`` holding where angles come from: ``table`` ``(cos_ptr,
    sin_ptr, first position, rows)`` or None (on the fly from the frequencies).
    Never written after it is made; calls copy it."""
    a = ffi.new("rope_angles *")
    a.inv_freq = inv_freq_ptr
    a.scale = scale
    if table is not None:
        a.cos_table, a.sin_table, a.table_start, a.table_rows = table
    return a


class Call:
    """The C descriptors of one planned rotation, without its data pointers.

    Built once per plan shape (the planner memoises the direct path's), so a
    repeated call only fills in where its arrays and positions are
    (:meth:`launch`, the one place that does). Every thread has its own
    descriptors (op, tensors, angles), so concurrent calls never share a
    struct that is being filled."""

    __slots__ = ("_fields", "_template", "_firsts", "_local", "n_tensors", "n_batch", "n_seq", "n_heads", "wide")

    def __init__(self, dtype, layout, inverse, n_batch, n_seq, head_dim, rotary_dim, tensors, firsts=None):
        """``tensors``: ``[(n_heads, x_strides, out_strides)]``, element strides
        (batch, seq, head). ``firsts``: per tensor, how :meth:`launch` reaches the
        first elements of its source and of its result, ``(x's, out's)``, each
        None (the array is C-contiguous: its own buffer) or the index of its
        first head (``a[0, ..., 0]``, contiguous since the last axis is);
        None: every array C-contiguous."""
        self._fields = dict(dtype=DTYPE_CODES[dtype], layout=LAYOUTS[layout], inverse=1 if inverse else 0,
                            n_batch=n_batch, n_seq=n_seq, head_dim=head_dim, rotary_dim=rotary_dim)
        self._template = [(ffi.NULL, ffi.NULL, h, xs, os_) for h, xs, os_ in tensors]
        self._firsts = tuple(firsts) if firsts is not None else ((None, None),) * len(tensors)
        self._local = threading.local()
        self.n_tensors = len(tensors)
        self.n_batch, self.n_seq = n_batch, n_seq
        self.n_heads = tuple(h for h, _, _ in tensors)
        self.wide = np.dtype(dtype) == np.float64  # float64 rows (Rope._rows_for)

    def _bind(self):
        """This thread's [op, its thread count, per tensor (entry, x's first,
        out's first, index), tensor array, angles, what the angles hold: a template
        (offset source), (template, strides) (a position list) or None] --
        made on its first call, and again when the thread count changes (a
        call in flight keeps its op)."""
        t = ffi.new("rope_tensor[]", self._template)
        op = ffi.new("rope_op *", dict(self._fields, n_threads=NUM_THREADS))
        slots = tuple((t[i], fx, fo, i) for i, (fx, fo) in enumerate(self._firsts))
        bound = [op, NUM_THREADS, slots, t, ffi.new("rope_angles *"), None]
        self._local.bound = bound
        return bound

    def launch(self, sources, results, template, positions, offset, where, strides=None, sections=None,
               fall_back=True):
        """The launcher: rotate ``sources`` into ``results`` (ndarrays in the
        order of the tensors, with exactly the planned shapes, strides and
        dtype; ``results[i] is sources[i]``: in place; all kept referenced by
        the caller, who has checked that no result shares byte bounds with
        another array) and report whether it did. Every rotation runs here:
        the direct path (apply, apply_qk, prepared calls, the ONNX op) and the
        general path's plans; it is also the one place a Call's pointers are
        filled, one tensor or several by the same loop.

        Angles: those of ``template`` (:func:`angle_template`; None: no rows,
        take the general path; whether the positions lie within a table's
        rows is C's check) at positions ``offset + s`` (``positions``
        None), or one int64 position per token, ``positions[b*strides[0] +
        s*strides[1]]``: given ``strides`` (the general path's C-contiguous
        positions), else ``positions`` as the direct path takes them
        (:func:`direct_position_strides`, ``offset`` 0; any other form: the
        general path); ``sections`` ``(n_components, pair_component uint8
        array)`` per token.

        True: rotated. False (``fall_back``): nothing was written and the
        general path must run: rows not given, positions in another form, a
        read-only result (results are exported writable), an offset beyond
        int64, or a C refusal the general path copes with (a position outside
        the rows, a misaligned pointer, a result meeting the positions). Any
        other C refusal, and every one without ``fall_back``, raises naming
        ``where``."""
        if positions is not None and strides is None:
            if offset or (strides := direct_position_strides(positions, self.n_seq, sources[0])) is None:
                return False
        if template is None:
            return False
        try:
            op, threads, slots, t, a, held = self._local.bound
        except AttributeError:
            op, threads, slots, t, a, held = self._bind()
        if threads != NUM_THREADS:
            op, threads, slots, t, a, held = self._bind()
        try:
            # a keeps what the last call on this thread set: refill only what differs
            if positions is None:
                if held is not template:
                    ffi.memmove(a, template, _ANGLES_SIZE)
                    self._local.bound[5] = template
                a.offset = offset
            else:
                if held is None or sections is not None or held[0] is not template or held[1] != strides:
                    ffi.memmove(a, template, _ANGLES_SIZE)
                    a.strides = strides
                    if sections is None:
                        a.source = _POS_LIST
                        self._local.bound[5] = (template, strides)
                    else:
                        a.source = _POS_SECTIONS
                        a.n_components = sections[0]
                        a.pair_component = pointer(sections[1], False, "uint8_t")
                        self._local.bound[5] = None
                a.positions = _positions_pointer(positions)
            for d, fx, fo, i in slots:   # one tensor or several: the same loop, over data
                x = sources[i]
                out = results[i]
                if out is x:
                    d.x = d.out = _from_buffer(_CHARS, x if fx is None else x[fx], True)
                else:
                    d.x = _from_buffer(_CHARS, x if fx is None else x[fx])
                    d.out = _from_buffer(_CHARS, out if fo is None else out[fo], True)
        except (builtins.ValueError, builtins.OverflowError):   # a read-only result; an offset beyond int64
            if fall_back:
                return False
            raise
        status = _rotate(op, t, self.n_tensors, a)
        if not status:
            return True
        if fall_back and status in _FALL_BACK:
            return False
        raise_for_status(status, where)

    def launch_one(self, x, out, template, positions, offset, where):
        """:meth:`launch` of a Call of one tensor, ``x`` into ``out``: the same
        answer. The one specialised path, for the decode call ``apply(x,
        offset=t, out=x)``: at an offset, on this thread's descriptors as the
        last call left them, one tensor filled without the tuples and the
        loop of :meth:`launch`. Measured (bench/race_decode.py against
        launch alone, 41 rounds, medians of per-round ratios; AMD EPYC family
        26 model 2, avx512bf16): ``apply`` of x [1, 1, 32, 128] float32 in
        place 1.05-1.07x as fast in both layouts and cache layouts (1.38-1.40
        against 1.47-1.50 us), its prepared call 1.07x. Anything else goes
        to :meth:`launch`."""
        if positions is None and template is not None:
            try:
                op, threads, slots, t, a, held = self._local.bound
            except AttributeError:
                pass
            else:
                if threads == NUM_THREADS and held is template:
                    d, fx, fo, _ = slots[0]
                    try:
                        a.offset = offset
                        if out is x:
                            d.x = d.out = _from_buffer(_CHARS, x if fx is None else x[fx], True)
                        else:
                            d.x = _from_buffer(_CHARS, x if fx is None else x[fx])
                            d.out = _from_buffer(_CHARS, out if fo is None else out[fo], True)
                    except (builtins.ValueError, builtins.OverflowError):   # as in launch
                        return False
                    status = _rotate(op, t, 1, a)
                    if not status:
                        return True
                    if status in _FALL_BACK:
                        return False
                    raise_for_status(status, where)
        return self.launch((x,), (out,), template, positions, offset, where)


def direct_position_strides(positions, n_seq, x):
    """Element strides (batch, seq, 0) under which C reads ``positions`` for a
    direct call on ``x`` (as the caller passed it), or None when they need
    the general path: not a C-contiguous, aligned, non-empty int64 array of
    shape [seq] or x's [*batch, seq]."""
    if type(positions) is not np.ndarray or positions.dtype != np.int64 or not positions.size:
        return None
    flags = positions.flags
    if not flags.c_contiguous or not flags.aligned:
        return None
    if positions.shape == (n_seq,):
        return (0, 1, 0)
    if positions.shape == x.shape[:-3] + (n_seq,):
        return (n_seq, 1, 0)
    return None


def bandwidth_pass(a, xor_mask=0, n_threads=None):
    """The yardstick: XOR every byte of C-contiguous ``a`` in place with ``xor_mask``
    (0: unchanged), one read and one write per byte, split like a rotation."""
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"a must be a writeable C-contiguous array, got c_contiguous="
                         f"{a.flags.c_contiguous}, writeable={a.flags.writeable}")
    status = lib.rope_bandwidth_pass(pointer(a, writable=True), a.nbytes, xor_mask,
                                     NUM_THREADS if n_threads is None else n_threads)
    raise_for_status(status, "bandwidth_pass(a)")
