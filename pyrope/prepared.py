"""Prepared calls: a rotation planned once by ``Rope.prepare``/``prepare_qk``, run again and again.

A backend's decode loop rotates arrays of the same layout at successive
positions; a :class:`PreparedRotation` holds the plan (the ``Call`` the
launcher fills), so a call checks its arrays against it and launches.
Anything the plan cannot take goes to ``Rope.apply``/``apply_qk``.
"""
import numpy as np

from ._engine import plan as _plan
from ._engine.checks import as_int, out_pair, refuse_masked
from ._engine.direct import may_share
from ._interop.edge import PASS as _PASS, Edge
from .errors import TypeError, ValueError

__all__ = ["PreparedRotation"]

_ndarray = np.ndarray
_FRESH = _plan.FRESH
_IN_PLACE = None   # a prepared output's mode: in place, a new array (_FRESH) or a given one's strides


class PreparedRotation:
    """One rotation planned ahead (:meth:`Rope.prepare`, :meth:`Rope.prepare_qk`),
    run again and again on arrays of the same layout.

    ``prepared(x, out=..., offset=..., positions=...)`` (prepared with
    ``prepare_qk``: ``prepared(q, k, out=(q_out, k_out), ...)``) rotates like
    :meth:`Rope.apply` (:meth:`Rope.apply_qk`) and returns the same. Each
    array must have the shape, strides and dtype of the example it was
    prepared with, and ``out`` the same kind (``x`` itself when prepared in
    place, None when prepared with None), else ``TypeError``/``ValueError``
    names the argument before anything is written. ``offset`` (an int) or
    ``positions`` (int64, shape ``[seq]`` or ``[*batch, seq]``) as in
    ``apply``.

    A call checks that, fills this thread's descriptors (the pointers and the
    positions) and runs the kernel with the rows the Rope keeps: no plan, no
    memo lookup. Anything else takes ``apply``'s general path, with the same
    bits: positions outside the kept rows (which grows them) or in another
    form, arrays that overlap (positions sharing memory with an output
    among them: read from a copy), a pointer not aligned to its element, a
    read-only output (which raises there). Safe to share between threads.
    """

    __slots__ = ("_rope", "_call", "_names", "_out_names", "_layouts", "_modes", "_seq_axis", "_inverse")

    def __init__(self, rope, arrays, outs, seq_axis, inverse, names, out_names):
        call, reason = _plan.plan_direct(arrays, outs, seq_axis, inverse, rope._plan_key)
        if call is None:
            raise ValueError(f"cannot prepare this rotation: {reason}; Rope.apply takes any layout "
                             f"(through a copy)")
        self._rope, self._call = rope, call
        self._names, self._out_names = names, out_names
        self._layouts = tuple((a.shape, a.strides, a.dtype) for a in arrays)
        self._modes = tuple(_IN_PLACE if o is x else _FRESH if o is None else o.strides
                            for x, o in zip(arrays, outs))
        self._seq_axis, self._inverse = seq_axis, inverse

    def __repr__(self):
        def mode(m, name):
            return "in place" if m is _IN_PLACE else "into a new array" if m is _FRESH else f"into {name} strides {m}"
        parts = [f"{n}: shape {shape}, strides {strides}, {dtype}, {mode(m, o)}"
                 for n, o, (shape, strides, dtype), m in zip(self._names, self._out_names, self._layouts,
                                                              self._modes)]
        return f"<PreparedRotation {'; '.join(parts)}; seq_axis={self._seq_axis}, inverse={self._inverse}>"

    def _result(self, i, x, out):
        """The array tensor ``i`` is written to, once ``x`` and ``out`` match
        the prepared layouts (a new array when prepared so); raises naming the
        argument."""
        name, out_name = self._names[i], self._out_names[i]
        shape, strides, dtype = self._layouts[i]
        if not isinstance(x, _ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
        refuse_masked(name, x)
        if x.shape != shape or x.strides != strides or x.dtype != dtype:
            raise ValueError(f"{name} must have the shape, strides and dtype this call was prepared for "
                             f"({shape}, {strides}, {dtype}), got ({x.shape}, {x.strides}, {x.dtype})")
        mode = self._modes[i]
        if mode is _IN_PLACE:
            if out is not x:
                raise ValueError(f"this call was prepared to rotate {name} in place: pass {out_name}={name}")
            return x
        if mode is _FRESH:
            if out is not None:
                raise ValueError(f"this call was prepared to return a new {name}: pass {out_name}=None")
            return _plan.fresh_result(x)
        if not isinstance(out, _ndarray):
            raise TypeError(f"{out_name} must be a numpy.ndarray, got {type(out).__name__}")
        refuse_masked(out_name, out)
        if out.shape != shape or out.strides != mode or out.dtype != dtype:
            raise ValueError(f"{out_name} must have the shape, strides and dtype this call was prepared for "
                             f"({shape}, {mode}, {dtype}), got ({out.shape}, {out.strides}, {out.dtype})")
        return out


def _subclassed(*arrays):
    """Is one of ``arrays`` (ndarrays or None) an ndarray subclass (memmap, a
    user's class)? Prepared calls hand those to ``apply``, whose result type
    rules they keep, instead of checking every subclass's behaviour here."""
    return any(a is not None and type(a) is not _ndarray for a in arrays)


class PreparedApply(PreparedRotation):
    """A prepared :meth:`Rope.apply`."""

    __slots__ = ("_shape", "_strides", "_dtype", "_mode")

    def __init__(self, *args):
        super().__init__(*args)
        (self._shape, self._strides, self._dtype), self._mode = self._layouts[0], self._modes[0]

    def __call__(self, x, out=None, *, offset=0, positions=None):
        """Rotate ``x`` into ``out`` (see :class:`PreparedRotation`); returns the result."""
        if type(offset) is not int:
            offset = as_int("offset", offset)
        mode = self._mode
        if (type(x) is not _ndarray or x.dtype is not self._dtype or x.shape != self._shape
                or x.strides != self._strides or (out is not x if mode is _IN_PLACE else out is not None
                                                  if mode is _FRESH else type(out) is not _ndarray
                                                  or out.dtype is not self._dtype or out.strides != mode
                                                  or out.shape != self._shape)):
            try:
                result = self._result(0, x, out)   # raises, or the same arrays with equal dtypes
            except TypeError:                      # not arrays: tensors run this plan on their views
                result = _PREPARED.run(_call_prepared, (self, x, out, offset, positions))
                if result is not _PASS:
                    return result
                raise
            if _subclassed(x, out):   # a memmap, say: apply's answer, of apply's type
                return self._rope.apply(x, positions, offset=offset, seq_axis=self._seq_axis, out=out,
                                        inverse=self._inverse)
        else:
            result = _plan.fresh_result(x) if mode is _FRESH else out
        rope = self._rope
        if (positions is None or type(positions) is _ndarray) and (
                result is x or mode is _FRESH or not may_share(x, result)):   # tensors cross the edge first
            call = self._call
            rows = rope._rows_for(np.float64).window if call.wide else rope._tables.window
            if rows is not None and call.launch_one(x, result, rows.angles, positions, offset, "prepared rotation"):
                return result
        return rope.apply(x, positions, offset=offset, seq_axis=self._seq_axis, out=result,
                          inverse=self._inverse)   # the general path, which grows the rows


class PreparedApplyQK(PreparedRotation):
    """A prepared :meth:`Rope.apply_qk`."""

    __slots__ = ()

    def __call__(self, q, k, out=None, *, offset=0, positions=None):
        """Rotate ``q`` and ``k`` into ``out`` (see :class:`PreparedRotation`);
        returns ``(q_rot, k_rot)``."""
        if type(offset) is not int:
            offset = as_int("offset", offset)
        (q_shape, q_strides, dtype), (k_shape, k_strides, _) = self._layouts
        q_mode, k_mode = self._modes
        if (type(out) is tuple and len(out) == 2 and q_mode is _IN_PLACE and k_mode is not _FRESH
                and out[0] is q and type(q) is _ndarray and type(k) is _ndarray and q.dtype is dtype
                and k.dtype is dtype and q.shape == q_shape and q.strides == q_strides and k.shape == k_shape
                and k.strides == k_strides and (out[1] is k if k_mode is _IN_PLACE else
                                                type(out[1]) is _ndarray and out[1].dtype is dtype
                                                and out[1].strides == k_mode and out[1].shape == k_shape)):
            results = qo, ko = out   # q in place, k in place or into a cache: checked inline
        else:
            try:
                q_out, k_out = out_pair(out)
                results = qo, ko = self._result(0, q, q_out), self._result(1, k, k_out)
            except TypeError:                      # not arrays: tensors run this plan on their views
                result = _PREPARED_QK.run(_call_prepared_qk, (self, q, k, out, offset, positions))
                if result is not _PASS:
                    return result
                raise
            if _subclassed(q, k, q_out, k_out):
                return self._rope.apply_qk(q, k, positions, offset=offset, seq_axis=self._seq_axis, out=out)
        rope = self._rope
        if (positions is None or type(positions) is _ndarray) and not (may_share(q, k) or (qo is not q and (may_share(qo, q) or may_share(qo, k)))
                or (ko is not k and (may_share(ko, q) or may_share(ko, k)))
                or (qo is not q and ko is not k and may_share(qo, ko))):
            call = self._call
            rows = rope._rows_for(np.float64).window if call.wide else rope._tables.window
            if rows is not None and call.launch((q, k), results, rows.angles, positions, offset,
                                                "prepared rotation"):
                return results
        return rope.apply_qk(q, k, positions, offset=offset, seq_axis=self._seq_axis, out=results)


# ---- the edge: tensors and DLPack objects run the plan on their views ---------------

def _call_prepared(prepared, x, out, offset, positions):
    return prepared(x, out, offset=offset, positions=positions)


def _call_prepared_qk(prepared, q, k, out, offset, positions):
    return prepared(q, k, out, offset=offset, positions=positions)


def _prepared_adjoint(args):
    """A prepared call's backward is :meth:`Rope.apply`'s, by the inverse rotation."""
    p = args["prepared"]
    return lambda g: p._rope.apply(g, args["positions"], offset=args["offset"], seq_axis=p._seq_axis,
                                   inverse=not p._inverse)


_PREPARED = Edge("prepared rotation", ("prepared", "x", "out", "offset", "positions"), inputs=("x",),
                 out="out", positions=("positions",), adjoint=_prepared_adjoint)
_PREPARED_QK = Edge("prepared rotation", ("prepared", "q", "k", "out", "offset", "positions"),
                    inputs=("q", "k"), out="out", pair=True, positions=("positions",), adjoint=_prepared_adjoint)
