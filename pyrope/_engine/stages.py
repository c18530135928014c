"""Stages: what ``rope_rotate_staged`` does to one tensor around its rotation.

A stage is a norm before the rotation (``pyrope.RMSNorm``, handed down as
``(over, scale, eps)``), a copy instead of it (values in a cache write),
another storage type on store, or a paged cache as the destination. This
module turns those into the fields of a C ``rope_stage`` (the fields a
``_launcher.Call`` keeps) and the pointers each launch fills in.
"""
from .binding import MAX_STAGE_DIM, NORMS, ffi, pointer
from .dtypes import DTYPE_CODES
from ..errors import ValueError

NULL = ffi.NULL


def fields(norm=None, rotate=True, out_dtype=None, slots=None):
    """The ``rope_stage`` fields of one tensor but its pointers.

    ``norm``: None or ``(over, scale, eps)`` (``RMSNorm.stage``); ``rotate``:
    False copies the tensor unchanged (no norm then); ``out_dtype``: the
    storage type written (None: the data's); ``slots``: None, or ``(n_slots,
    block_size, (batch, seq) element strides of the slot array)`` of a paged
    cache."""
    n_slots, block_size, strides = slots if slots is not None else (0, 1, (0, 1))
    return dict(copy=0 if rotate else 1, norm=NORMS[None if norm is None else norm[0]],
                norm_eps=1.0 if norm is None else norm[2], convert=0 if out_dtype is None else 1,
                out_dtype=0 if out_dtype is None else DTYPE_CODES[out_dtype],
                slot_strides=list(strides), n_slots=n_slots, block_size=block_size)


def weight_pointer(norm):
    """The ``double *`` of a norm's scale, or NULL (no norm, or no weight);
    the caller keeps the scale referenced."""
    if norm is None or norm[1] is None:
        return NULL
    return pointer(norm[1], ctype="double")


def check_stage_dim(name, head_dim):
    """A normalised or converted head passes through a row of at most
    ``ROPE_MAX_STAGE_DIM`` values in C: a ValueError naming ``name`` beyond."""
    if head_dim > MAX_STAGE_DIM:
        raise ValueError(f"{name}: a normalised or converted head holds at most {MAX_STAGE_DIM} values "
                         f"(ROPE_MAX_STAGE_DIM), got head_dim={head_dim}")
