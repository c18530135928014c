"""Direct calls of the C API for kernel-level tests: descriptors built here,
by hand, from explicit element strides, with no planner in between."""
import numpy as np

from pyrope._engine.binding import LAYOUTS, ffi, lib
from pyrope._engine.dtypes import DTYPE_CODES


def strides_of(a4):
    """Element strides of the first three axes of a 4-D array (any sign)."""
    return tuple(s // a4.itemsize for s in a4.strides[:3])


def address(a, ctype="char"):
    return ffi.cast(ctype + " *", a.__array_interface__["data"][0])


def c_rotate(pairs, layout, rotary_dim, *, inverse=False, positions=None, offset=0, table=None,
             inv_freq=None, scale=1.0, sections=None, n_threads=1, op=None):
    """Call ``rope_rotate`` and return its status.

    ``pairs``: ``[(x4, out4)]`` 4-D ``[batch, seq, heads, head_dim]`` arrays of
    one dtype (``out4 is x4``: in place); ``positions`` None (``offset + s``)
    or int64 ``[batch, seq]`` (or ``[batch, seq, k]`` with ``sections=(k,
    uint8 map)``); ``table`` ``(cos, sin, first position)`` rows of the arithmetic
    type (float64 for float64 data, else float32), or
    None with ``inv_freq``/``scale`` for angles on the fly. ``op``: fields of
    ``rope_op`` to override (to test refusals)."""
    x0 = pairs[0][0]
    fields = dict(dtype=DTYPE_CODES[x0.dtype], layout=LAYOUTS[layout], inverse=int(inverse),
                  n_batch=x0.shape[0], n_seq=x0.shape[1], head_dim=x0.shape[3], rotary_dim=rotary_dim,
                  n_threads=n_threads)
    fields.update(op or {})
    c_op = ffi.new("rope_op *", fields)
    tensors = ffi.new("rope_tensor[]", max(len(pairs), 1))
    for i, (x, out) in enumerate(pairs):
        tensors[i].x = address(x)
        tensors[i].out = address(out)
        tensors[i].n_heads = x.shape[2]
        tensors[i].x_strides = strides_of(x)
        tensors[i].out_strides = strides_of(out)
    a = ffi.new("rope_angles *")
    keep = []
    if positions is None:
        a.source = lib.ROPE_POS_OFFSET
        a.offset = offset
    else:
        positions = np.asarray(positions)
        keep.append(positions)
        a.positions = address(positions, "int64_t")
        st = [s // 8 for s in positions.strides] + [0] * (3 - positions.ndim)
        a.strides = st[:3]
        if sections is None:
            a.source = lib.ROPE_POS_LIST
        else:
            a.source = lib.ROPE_POS_SECTIONS
            a.n_components = sections[0]
            pair_map = np.ascontiguousarray(sections[1], dtype=np.uint8)
            keep.append(pair_map)
            a.pair_component = address(pair_map, "uint8_t")
    if table is not None:
        cos, sin, start = table
        kind = "double" if cos.dtype == np.float64 else "float"  # rows of the arithmetic type
        a.cos_table, a.sin_table = address(cos, kind), address(sin, kind)
        a.table_start, a.table_rows = start, cos.shape[0]
    if inv_freq is not None:
        inv_freq = np.ascontiguousarray(inv_freq, dtype=np.float64)
        keep.append(inv_freq)
        a.inv_freq = address(inv_freq, "double")
    a.scale = scale
    return lib.rope_rotate(c_op, tensors, len(pairs), a)
