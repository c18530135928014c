"""The launcher: every rotation reaches C here, through :meth:`Call.launch`.

A :class:`Call` holds the C descriptors of one planned rotation (built by the
planner, ``plan.py``) without its data pointers; ``launch`` fills them per
call and runs ``rope_rotate``, or answers "take the general path" with
nothing written. :func:`angle_template` makes the ``rope_angles`` a call
copies; :func:`direct_position_strides` says whether the direct path can
hand positions to C as they are. :func:`bandwidth_pass`, the benchmarks'
yardstick, lives here too: like a rotation it sends a pass over memory to the
C thread pool, split over the thread count in effect (``isa.NUM_THREADS``,
read on every call).
"""
import builtins
import functools
import threading

import numpy as np

from . import isa as _isa
from .binding import BUFFER_TYPES, LAYOUTS, MISALIGNED, OVERLAP, POSITION_MISS, ffi, lib, pointer, raise_for_status
from .dtypes import DTYPE_CODES
from ..errors import ValueError

_FALL_BACK = (POSITION_MISS, MISALIGNED, OVERLAP)   # the general path copes: Call.launch falls back
# A Call's pointers (Call.launch), without a Python frame each: the buffer of a
# C-contiguous array, or of the contiguous first head of a strided one;
# positions are always C-contiguous int64.
_CHARS = BUFFER_TYPES["char"]
_from_buffer = ffi.from_buffer
_positions_pointer = functools.partial(ffi.from_buffer, BUFFER_TYPES["int64_t"])
_rotate = lib.rope_rotate
_rotate_at = lib.rope_rotate_at
_rotate_staged = lib.rope_rotate_staged
_rotate_quantised = lib.rope_rotate_quantised
_NULL = ffi.NULL

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

    __slots__ = ("_fields", "_template", "_firsts", "_local", "_stages", "_quants", "n_tensors", "n_batch", "n_seq",
                 "n_heads", "wide")

    def __init__(self, dtype, layout, inverse, n_batch, n_seq, head_dim, rotary_dim, tensors, firsts=None,
                 stages=None, quants=None):
        """``tensors``: ``[(n_heads, x_strides, out_strides)]``, element strides
        (batch, seq, head). ``firsts``: per tensor, how :meth:`launch` reaches the
        first elements of its source and of its result, ``(x's, out's)``, each
        None (the array is C-contiguous: its own buffer) or the index of its
        first head (``a[0, ..., 0]``, contiguous since the last axis is);
        None: every array C-contiguous. ``stages``: None (``rope_rotate``), or
        per tensor the fields of its ``rope_stage`` but the pointers (a dict:
        ``copy``, ``norm``, ``norm_eps``, ``convert``, ``out_dtype``, ``slot_strides``,
        ``n_slots``, ``block_size``): the call runs ``rope_rotate_staged``,
        each launch giving the weights and slots (``stage_data``). ``quants``:
        None, or per tensor (with ``stages``) the fields of its ``rope_quant``
        but the scales' pointer (``quantised.quant_fields``): the call runs
        ``rope_rotate_quantised``, each launch giving the scales."""
        self._fields = dict(dtype=DTYPE_CODES[dtype], layout=LAYOUTS[layout], inverse=1 if inverse else 0,
                            n_batch=n_batch, n_seq=n_seq, head_dim=head_dim, rotary_dim=rotary_dim)
        self._template = [(ffi.NULL, ffi.NULL, h, xs, os_) for h, xs, os_ in tensors]
        self._firsts = tuple(firsts) if firsts is not None else ((None, None),) * len(tensors)
        self._local = threading.local()
        self._stages = None if stages is None else [dict(s) for s in stages]
        self._quants = None if quants is None else [dict(q) for q in quants]
        self.n_tensors = len(tensors)
        self.n_batch, self.n_seq = n_batch, n_seq
        self.n_heads = tuple(h for h, _, _ in tensors)
        self.wide = np.dtype(dtype) == np.float64  # float64 rows (Rope._rows_for)

    def _bind(self):
        """This thread's [op, its thread count, per tensor (entry, x's first,
        out's first, index), tensor array, angles, what the angles hold: a template
        (offset source), (template, strides) (a position list) or None, the
        stage array (None: no stages)] --
        made on its first call, and again when the thread count changes (a
        call in flight keeps its op)."""
        t = ffi.new("rope_tensor[]", self._template)
        op = ffi.new("rope_op *", dict(self._fields, n_threads=_isa.NUM_THREADS))
        slots = tuple((t[i], fx, fo, i) for i, (fx, fo) in enumerate(self._firsts))
        st = None if self._stages is None else ffi.new("rope_stage[]", self._stages)
        qu = None if self._quants is None else ffi.new("rope_quant[]", self._quants)
        bound = [op, _isa.NUM_THREADS, slots, t, ffi.new("rope_angles *"), None, st, qu]
        self._local.bound = bound
        return bound

    def _current(self):
        """This thread's descriptors (:meth:`_bind`), made again if the thread
        count changed since."""
        try:
            bound = self._local.bound
        except AttributeError:
            return self._bind()
        return bound if bound[1] == _isa.NUM_THREADS else self._bind()

    def launch(self, sources, results, template, positions, offset, where, strides=None, sections=None,
               fall_back=True, stage_data=None):
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
        ``where``.

        A staged Call takes ``stage_data``: per tensor ``(weight, slots)``,
        the norm's float64 weight pointer (``ffi.NULL``: none) and the int64
        C-contiguous slot array (None: no slots), kept referenced by the
        caller; a quantised Call ``(weight, slots, scales)``, the int8 scales
        a float32 ndarray (None: none)."""
        if positions is not None and strides is None:
            if offset or (strides := direct_position_strides(positions, self.n_seq, sources[0])) is None:
                return False
        if template is None:
            return False
        op, threads, slots, t, a, held, st, qu = self._current()
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
            if st is not None:
                for i, data in enumerate(stage_data):   # (weight, slots) or, quantised, (weight, slots, scales)
                    stage = st[i]
                    stage.norm_weight = data[0]
                    stage.slots = _NULL if data[1] is None else _positions_pointer(data[1])
                    if qu is not None:   # int8 scales: any strides, C addresses them by the quant's
                        qu[i].scales = _NULL if data[2] is None else pointer(data[2], True, "float")
        except (builtins.ValueError, builtins.OverflowError):   # a read-only result; an offset beyond int64
            if fall_back:
                return False
            raise
        status = (_rotate(op, t, self.n_tensors, a) if st is None else _rotate_staged(op, t, st, self.n_tensors, a)
                  if qu is None else _rotate_quantised(op, t, st, qu, self.n_tensors, a))
        if not status:
            return True
        if fall_back and status in _FALL_BACK:
            return False
        raise_for_status(status, where)

    def launch_one(self, x, out, template, positions, offset, where, stage_data=None):
        """:meth:`launch` of a Call of one tensor, ``x`` into ``out``: the same
        answer. The one specialised path, for the decode call ``apply(x,
        offset=t, out=x)``: at an offset, on this thread's descriptors as the
        last call left them, one tensor filled without the tuples and the
        loop of :meth:`launch`. Measured (bench/race_decode.py against
        launch alone, 41 rounds, medians of per-round ratios; AMD EPYC family
        26 model 2, avx512bf16): ``apply`` of x [1, 1, 32, 128] float32 in
        place 1.05-1.07x as fast in both layouts and cache layouts (1.38-1.40
        against 1.47-1.50 us), its prepared call 1.07x. Anything else (a
        staged Call's ``stage_data`` among it) goes to :meth:`launch`."""
        if positions is None and template is not None and stage_data is None:
            try:
                op, threads, slots, t, a, held, st, qu = self._local.bound
            except AttributeError:
                pass
            else:
                if threads == _isa.NUM_THREADS and held is template and st is None:
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
        return self.launch((x,), (out,), template, positions, offset, where, stage_data=stage_data)

    def launch_at(self, template, offset, where, x0, out0, x1=0, out1=0):
        """:meth:`launch` at ``offset`` of a Call of one or two tensors without
        stages, their data as addresses (``x0``, ``out0``, ``x1``, ``out1``:
        integers, the first elements of torch tensors, ``tensor_direct.py``):
        the same answers, True rotated, False nothing written (C's refusals
        the general path copes with, checked as for arrays: overlaps,
        alignment, rows)."""
        if template is None or self._stages is not None:
            return False
        op, threads, slots, t, a, held, st, qu = self._current()
        if held is not template:
            ffi.memmove(a, template, _ANGLES_SIZE)
            self._local.bound[5] = template
        try:
            a.offset = offset
        except OverflowError:   # an offset beyond int64
            return False
        status = _rotate_at(op, t, self.n_tensors, a, x0, out0, x1, out1)
        if not status:
            return True
        if status in _FALL_BACK:
            return False
        raise_for_status(status, where)


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
                                     _isa.NUM_THREADS if n_threads is None else n_threads)
    raise_for_status(status, "bandwidth_pass(a)")
