"""The binding: the one module that imports the C extension.

What Python needs of ``pyrope.h`` that is not a storage type or an
instruction set (``dtypes``, ``isa``) is read from it here, never retyped:
the limits, the layouts and position sources, the status codes. Arrays
become C pointers in one place (:func:`pointer`); C status codes become
exceptions in one place (:func:`raise_for_status`). The other engine modules
that call C (``dtypes``, ``isa``, ``tables``, ``launcher``) take ``ffi`` and
``lib`` from here, never from the extension itself. Callers hand in arrays
the planner (``plan.py``) has already validated and laid out; C checks them
again, so a mistake gives an exception, not a crash.
"""
import builtins

import numpy as np

from .._pyrope_cffi import ffi, lib
from ..errors import OverflowError, TypeError, ValueError

# ---- limits (pyrope.h) -------------------------------------------------------

MAX_POSITION = lib.ROPE_MAX_POSITION      # largest |position|: exact angles up to it
MAX_INV_FREQ = lib.ROPE_MAX_INV_FREQ      # largest |inv_freq| the kernel accepts
MIN_SCALE = lib.ROPE_MIN_SCALE            # range of the attention factor
MAX_SCALE = lib.ROPE_MAX_SCALE
MAX_OTF_HALF = lib.ROPE_MAX_OTF_HALF      # largest rotary_dim/2 computed on the fly
MAX_THREADS = lib.ROPE_MAX_THREADS        # most threads one call uses
MAX_COMPONENTS = lib.ROPE_MAX_COMPONENTS  # most components of a sectioned position
MAX_STAGE_DIM = lib.ROPE_MAX_STAGE_DIM    # largest head_dim of a normalised or converted staged call
NORMS = {None: lib.ROPE_NORM_NONE, "head": lib.ROPE_NORM_HEAD, "token": lib.ROPE_NORM_TOKEN}  # rope_stage.norm
# rope_quant.kind, and the q8_0 block's values and bytes
QUANT_KINDS = {None: lib.ROPE_QUANT_NONE, "int8": lib.ROPE_QUANT_INT8, "float8_e4m3fn": lib.ROPE_QUANT_FP8_E4M3,
               "q8_0": lib.ROPE_QUANT_Q8_0}
Q8_0_VALUES, Q8_0_BYTES = lib.ROPE_Q8_0_VALUES, lib.ROPE_Q8_0_BYTES

LAYOUTS = {"interleaved": lib.ROPE_INTERLEAVED, "split_half": lib.ROPE_SPLIT_HALF}
POSITION_SOURCES = {"offset": lib.ROPE_POS_OFFSET, "list": lib.ROPE_POS_LIST,
                     "sections": lib.ROPE_POS_SECTIONS}

# ---- status codes -> exceptions ----------------------------------------------

POSITION_MISS = lib.ROPE_E_POSITION  # a position outside the rows given: nothing written
MISALIGNED = lib.ROPE_E_ALIGN        # a pointer not aligned to its element: nothing written
OVERLAP = lib.ROPE_E_OVERLAP         # an output meets what C reads (the positions): nothing written

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


# ---- pointers ----------------------------------------------------------------

# cffi types by name, looked up once: a type given as a string costs a parse per call
BUFFER_TYPES = {n: ffi.typeof(n + "[]") for n in ("char", "float", "double", "int64_t", "uint8_t")}
_POINTER_TYPES = {n: ffi.typeof(n + " *") for n in BUFFER_TYPES}
_CHARS = BUFFER_TYPES["char"]


def pointer(a, writable=False, ctype="char"):
    """A C ``ctype *`` to the first element of ndarray ``a``: the one way
    arrays become pointers.

    The caller keeps ``a`` referenced for the whole C call. Contiguous arrays
    go through the buffer protocol (``writable``: refuse a read-only buffer,
    a second guard), whose pointer is the first element's; other views, which
    numpy does not export as a plain buffer, by their address."""
    try:
        return ffi.from_buffer(_CHARS if ctype == "char" else BUFFER_TYPES[ctype], a, writable)
    except (BufferError, builtins.ValueError):  # numpy: "ndarray is not C-contiguous"
        if writable and not a.flags.writeable:
            raise
        return ffi.cast(_POINTER_TYPES[ctype], a.__array_interface__["data"][0])


def float_pointers(*arrays):
    """C ``float *``/``double *`` views of C-contiguous tables or frequency vectors
    (``rope_angles`` takes either as its rows: ``void *``),
    kept with them by the caller (``TableCache`` windows, a Rope's inv_freq)."""
    return tuple(pointer(a, ctype="double" if a.dtype == np.float64 else "float") for a in arrays)
