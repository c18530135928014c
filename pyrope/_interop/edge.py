"""The edge: where torch tensors and DLPack objects cross into pyrope, at every public entry.

One mechanism converts them, :class:`Edge`. An entry point names which of
its arguments hold data (``inputs``), which is its output (``out``: one
array, or a pair), which hold integer positions (``positions``). A call
whose named arguments hold no tensor or DLPack object runs untouched (one
scan of those arguments). Any other call runs again on numpy views of the
same memory (``views.py``), so everything below the entry (the checks, the
planner, the C launch) sees ndarrays only. Results go back as the caller's
types: an argument written in place, or an ``out=``, is returned as the
object given; a new array becomes an object of its input's type. Written
torch tensors get their version counter bumped, as torch's in-place ops do,
so autograd notices a tensor it saved for backward being changed.

Tensors that require grad, with grad enabled, are rotated through
``torch_autograd`` (imported then, and only then) when the entry says what
its adjoint is; other entries refuse them, naming the argument.

``Rope.apply``/``apply_qk``, ``Rope.cos_sin``, ``Rope.prepare`` and the
prepared calls ask their :class:`Edge` only once their numpy fast path has
declined a call; public functions elsewhere are wrapped by :func:`entry`,
which builds an :class:`Edge` from their signature.
"""
import builtins
import functools
import inspect
import sys

import numpy as np

from .._engine.checks import too_large
from .views import as_array, grad_needed, is_foreign, new_like, torch_dtype_as_numpy, torch_of
from ..errors import TypeError, ValueError

_ndarray = np.ndarray


class Bridge:
    """One call's conversions: ndarray views of the caller's objects, and the way back."""

    __slots__ = ("_views", "_written", "_native")

    def __init__(self, native=False):
        self._views = []     # (view, original), in the order converted
        self._written = []   # torch tensors the call writes
        self._native = native

    def view(self, name, obj, data=True):
        """``obj`` as an ndarray (itself when it is not foreign, or a torch
        tensor on a native edge); the same object twice gets the same view,
        so ``out=x`` stays in place."""
        if not is_foreign(obj) or (self._native and torch_of(obj) is not None):
            if isinstance(obj, _ndarray):   # an ndarray out= comes back as itself
                self._views.append((obj, obj))
            return obj
        for v, o in self._views:
            if o is obj:
                return v
        v = as_array(name, obj, data)
        self._views.append((v, obj))
        return v

    def writes(self, obj):
        """The call writes ``obj`` (an original; None and ndarrays are ignored)."""
        if torch_of(obj) is not None:
            self._written.append(obj)

    def finish(self, result, likes):
        """The caller's objects for ``result`` (an ndarray or a tuple of them):
        a view of an argument is that argument, a new array takes the type of
        ``likes[i]`` (``likes[0]`` for a single result; none: kept an
        ndarray), each ``(name, original)``. Bumps the version of every
        written tensor."""
        if self._written:
            sys.modules["torch"].autograd.graph.increment_version(self._written)
        if type(result) is tuple:
            return tuple(self._back(r, likes[i] if i < len(likes) else likes[0] if likes else None)
                         for i, r in enumerate(result))
        return self._back(result, likes[0] if likes else None)

    def _back(self, result, like):
        for v, o in self._views:
            if v is result:
                return o
        if type(result) is _ndarray and like is not None and is_foreign(like[1]):
            return new_like(result, like[1], like[0])
        return result


def _kept(positions, name):
    """Positions a backward pass will reuse, as an ndarray the caller cannot
    change in between (a copy; lists and the like are left to the checks)."""
    if is_foreign(positions):
        return np.array(as_array(name, positions, data=False))
    if isinstance(positions, _ndarray):
        return positions.copy()
    return positions


def _autograd():
    from . import torch_autograd
    return torch_autograd


def _pairs(value):
    return (type(value) is tuple or type(value) is list) and len(value) == 2


PASS = object()   # Edge.run: no argument crosses the edge


class Edge:
    """The conversions of one entry point, whose arguments come as one
    sequence in the order of ``params`` (its parameter names).

    - ``inputs``: float array arguments; a new array returned takes the type
      of the first (of the i-th, for a tuple of results).
    - ``out``: the output argument (None, an input itself for in place, or
      another array); with ``pair``, None or a pair, one per input, named
      ``out[0]``, ``out[1]`` in messages. Returned as given.
    - ``positions``: integer array arguments. ``dtypes``: dtype arguments
      (a torch float dtype becomes numpy's).
    - ``written``: inputs the entry writes in place.
    - ``like``: the argument whose type new results take instead of the
      inputs' (``Rope.cos_sin``: the positions'); ``""``: results stay ndarrays.
    - ``adjoint``: how tensors that require grad are differentiated. None:
      they are refused (``ValueError`` naming one). The name of the entry's
      boolean ``inverse`` argument: the entry is a rotation of its one input
      whose adjoint is itself with ``inverse`` flipped (pyrope's inverse
      rotation multiplies by ``a R^T``). Else a function of the arguments (a
      dict) returning the vector-Jacobian product of one output's gradient.
    - ``native``: torch tensors pass as they are (the entry indexes them
      with torch, on any device); other DLPack objects are viewed.
    - ``examples``: the arrays are examples whose layouts alone matter
      (``Rope.prepare``): never written, never differentiated.
    - ``data``: the inputs hold values of a type pyrope rotates (False: any
      dtype numpy has, for entries that only move values).
    """

    __slots__ = ("where", "_names", "_inputs", "_out", "_pair", "_positions", "_dtypes", "_written",
                 "_like", "_adjoint", "_native", "_examples", "_data", "_scan", "_lean", "_lean_pair", "_lean_write",
                 "_out_labels")

    def __init__(self, where, params, *, inputs=(), out=None, pair=False, positions=(), dtypes=(),
                 written=(), like=None, adjoint=None, native=False, examples=False, data=True):
        index = {name: i for i, name in enumerate(params)}
        self.where, self._names = where, tuple(params)
        self._inputs = tuple(index[n] for n in inputs)
        self._out = None if out is None else index[out]
        self._pair = pair
        self._positions = tuple(index[n] for n in positions)
        self._dtypes = tuple(index[n] for n in dtypes)
        self._written = tuple(index[n] for n in written)
        self._like = None if like is None else "" if like == "" else index[like]
        if adjoint is not None and (self._out is None or (len(inputs) != 1 and type(adjoint) is str)):
            raise builtins.ValueError("a differentiable entry rotates its inputs into an out argument")
        self._adjoint = index[adjoint] if type(adjoint) is str else adjoint
        self._native, self._examples, self._data = native, examples, data
        self._scan = tuple((i, i == self._out and pair) for i in self._inputs + (
            () if self._out is None else (self._out,)) + self._positions)
        # the shape of a decode call (apply, a prepared call): one input, one
        # output, positions; converted step by step (a few hundred ns each)
        self._out_labels = () if self._out is None else tuple(
            f"{out}[{i}]" for i in range(len(self._inputs))) if pair else (out,)
        plain = (self._out is not None and not self._dtypes and not self._written and self._like is None
                 and not native and not examples)
        self._lean = plain and len(self._inputs) == 1 and not pair
        self._lean_pair = plain and len(self._inputs) == 2 and pair
        # an entry writing some of its inputs in place and returning them (Rope.cache_write)
        self._lean_write = (self._out is None and bool(self._written) and self._like == "" and not self._dtypes
                            and not native and not examples and adjoint is None)

    def crosses(self, value, pair=False):
        """Is ``value`` (an argument; with ``pair``, possibly a pair of them)
        an object this edge converts?"""
        if pair and _pairs(value):
            return self.crosses(value[0]) or self.crosses(value[1])
        return is_foreign(value) and not (self._native and torch_of(value) is not None)

    def foreign(self, args):
        """Does one of ``args`` this edge names hold an object it converts?"""
        for i, pair in self._scan:
            if self.crosses(args[i], pair):
                return True
        return False

    def convert(self, fn, args):
        """``fn(*args)`` on numpy views of ``args``' tensors and DLPack objects,
        its result as the caller's types. ``fn`` is the public call itself, so
        the views take the path an ndarray takes (and under autograd, the
        forward and backward passes re-enter it with tensors)."""
        if self._lean:
            return self._convert_one(fn, args)
        if self._lean_pair:
            return self._convert_pair(fn, args)
        if self._lean_write:
            return self._convert_written(fn, args)
        return self._convert_general(fn, args)

    def _convert_general(self, fn, args):
        """:meth:`convert` through a :class:`Bridge`: any entry, any foreign object."""
        args = list(args)
        given = tuple(args)
        originals = [args[i] for i in self._inputs]
        outs = self._outs(args)
        if not self._examples and grad_needed(originals + outs):
            return self._differentiate(fn, args, originals, outs)
        bridge, names = Bridge(self._native), self._names
        for i in self._inputs:
            args[i] = bridge.view(names[i], args[i], self._data)
        if self._out is not None and any(o is not None for o in outs):
            views = tuple(bridge.view(n, o, self._data) for n, o in zip(self._out_labels, outs))
            args[self._out] = views if self._pair else views[0]
            if not self._examples:
                for o in outs:
                    bridge.writes(o)
        for i in self._written:
            bridge.writes(given[i])
        for i in self._positions:
            args[i] = bridge.view(names[i], args[i], data=False)
        for i in self._dtypes:
            args[i] = torch_dtype_as_numpy(args[i])
        like = self._like
        likes = (tuple(zip((names[i] for i in self._inputs), originals)) if like is None else ()
                 if like == "" else ((names[like], given[like]),))
        return bridge.finish(fn(*args), likes)

    def run(self, fn, args):
        """:meth:`convert` when one of ``args`` crosses this edge, else
        :data:`PASS` (the caller's own path takes them): one scan, for the
        calls a decode loop makes (``Rope.apply``, prepared calls)."""
        if not self._lean:
            return self.convert(fn, args) if self.foreign(args) else PASS
        return self._convert_one(fn, args, True)

    def _convert_one(self, fn, args, passing=False):
        """:meth:`convert` for one input and one output, without a Bridge;
        ``passing``: :data:`PASS` when nothing crosses (:meth:`run`)."""
        ix, io = self._inputs[0], self._out
        x, out = args[ix], args[io]
        foreign = not isinstance(x, _ndarray) and hasattr(type(x), "__dlpack__")
        if passing and not foreign and (out is None or isinstance(out, _ndarray)
                                        or not hasattr(type(out), "__dlpack__")):
            for i in self._positions:
                if is_foreign(args[i]):
                    break
            else:
                return PASS
        if (getattr(x, "requires_grad", False) or getattr(out, "requires_grad", False)) and grad_needed((x, out)):
            return self._differentiate(fn, list(args), [x], [out])
        args = list(args)
        names, data = self._names, self._data
        xa = args[ix] = as_array(names[ix], x, data) if foreign else x
        if out is not None:
            args[io] = xa if out is x else as_array(names[io], out, data) if is_foreign(out) else out
        for i in self._positions:
            p = args[i]
            if p is not None and is_foreign(p):
                args[i] = as_array(names[i], p, data=False)
        result = fn(*args)
        if out is not None:
            if torch_of(out) is not None:   # written as torch's in-place ops write
                sys.modules["torch"].autograd.graph.increment_version((out,))
            return out
        return new_like(result, x, names[ix]) if foreign and type(result) is _ndarray else result

    def _convert_pair(self, fn, args):
        """:meth:`convert` for two inputs and a pair of outputs (``apply_qk``), without a Bridge."""
        (iq, ik), io, names, data = self._inputs, self._out, self._names, self._data
        q, k, out = args[iq], args[ik], args[io]
        outs = self._outs(args)
        qo, ko = outs
        if (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False) or getattr(
                qo, "requires_grad", False) or getattr(ko, "requires_grad", False)) and grad_needed((q, k, qo, ko)):
            return self._differentiate(fn, list(args), [q, k], outs)
        args = list(args)
        qa = args[iq] = as_array(names[iq], q, data) if is_foreign(q) else q
        ka = args[ik] = as_array(names[ik], k, data) if is_foreign(k) else k
        if out is not None:
            on = self._out_labels
            args[io] = (qa if qo is q else as_array(on[0], qo, data) if is_foreign(qo) else qo,
                        ka if ko is k else as_array(on[1], ko, data) if is_foreign(ko) else ko)
        for i in self._positions:
            p = args[i]
            if p is not None and is_foreign(p):
                args[i] = as_array(names[i], p, data=False)
        rq, rk = fn(*args)
        written = [o for o in outs if torch_of(o) is not None]
        if written:   # written as torch's in-place ops write
            sys.modules["torch"].autograd.graph.increment_version(written)
        return (qo if qo is not None else new_like(rq, q, names[iq]) if qa is not q and type(rq) is _ndarray else rq,
                ko if ko is not None else new_like(rk, k, names[ik]) if ka is not k and type(rk) is _ndarray else rk)

    def _convert_written(self, fn, args):
        """:meth:`convert` for an entry that writes inputs in place and returns
        some of them: each torch tensor viewed as it comes (no Bridge), other
        DLPack objects through the general conversion; the written tensors'
        versions bumped; a result that is a view of an argument returned as
        that argument."""
        torch = sys.modules.get("torch")
        names, data = self._names, self._data
        given = [args[i] for i in self._inputs + self._positions]
        if torch is None or not all(g is None or isinstance(g, (_ndarray, torch.Tensor, float, int)) for g in given):
            return self._convert_general(fn, args)
        if grad_needed(given):
            return self._differentiate(fn, list(args), [args[i] for i in self._inputs], [])
        written = [args[i] for i in self._written if isinstance(args[i], torch.Tensor)]
        args = list(args)
        views = []
        for i in self._inputs + self._positions:
            a = args[i]
            if a is not None and not isinstance(a, _ndarray) and is_foreign(a):   # numbers pass as they are
                args[i] = as_array(names[i], a, data and i in self._inputs)
                views.append((args[i], a))
        result = fn(*args)
        if written:
            torch.autograd.graph.increment_version(written)

        def back(r):
            for v, o in views:
                if v is r:
                    return o
            return r
        return tuple(back(r) for r in result) if type(result) is tuple else back(result)

    def _outs(self, args):
        """The output argument as a list, one item per input (pairs) or one."""
        if self._out is None:
            return []
        out = args[self._out]
        if not self._pair:
            return [out]
        if out is None:
            return [None] * len(self._inputs)
        if not _pairs(out):
            ins = ", ".join(f"{self._names[i]}_out" for i in self._inputs)
            raise TypeError(f"{self._names[self._out]} must be None or a pair ({ins}), got {type(out).__name__}")
        return list(out)

    def _differentiate(self, fn, args, originals, outs):
        names, inputs, out = self._names, self._inputs, self._out
        if self._adjoint is None:
            name = next(n for n, v in zip([names[i] for i in inputs] + list(self._out_labels if outs else ()),
                                          originals + outs) if getattr(v, "requires_grad", False))
            raise ValueError(f"{self.where} is not differentiable, and {name} requires grad: call it under "
                             f"torch.no_grad() or pass {name}.detach()")
        for i in self._positions:
            args[i] = _kept(args[i], names[i])
        given_out = args[out]

        def run(*tensors):   # autograd's forward (grad disabled): the entry again, on tensors
            again = list(args)
            for i, t in zip(inputs, tensors):
                again[i] = t
            if given_out is not None:
                placed = tuple(None if o is None else t for o, t in zip(outs, tensors))
                again[out] = placed if self._pair else placed[0]
            return fn(*again)

        if type(self._adjoint) is int:
            flip = self._adjoint

            def backward(g):   # the entry with inverse flipped, into a new result
                again = list(args)
                again[inputs[0]], again[out], again[flip] = g, None, not args[flip]
                return fn(*again)
        else:
            backward = self._adjoint(dict(zip(names, args)))
        return _autograd().rotation(run, backward, tuple(names[i] for i in inputs), tuple(originals),
                                    self._out_labels, tuple(outs))


def entry(*, inputs, out=None, positions=(), written=(), adjoint=None, like=None, native=False, data=True,
          name=None):
    """Decorator: let a public function take torch tensors and DLPack objects,
    through an :class:`Edge` of its parameters (the arguments as there).
    ``name``: how messages name the function (default: its module and name),
    for an implementation behind a public function of another module."""

    def decorate(fn):
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) for p in params):
            raise builtins.ValueError("an entry's parameters are named")
        names = tuple(p.name for p in params)
        edge = Edge(name or f"{fn.__module__}.{fn.__qualname__}", names, inputs=inputs, out=out,
                    positions=positions, written=written, adjoint=adjoint, like=like, native=native, data=data)

        def slot(name):  # (name, positional index or None, may hold a pair)
            i = next((i for i, p in enumerate(params) if p.name == name and p.kind is p.POSITIONAL_OR_KEYWORD), None)
            return name, i
        slots = tuple(map(slot, tuple(inputs) + ((out,) if out else ()) + tuple(positions)))
        crosses = edge.crosses

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for name, i in slots:
                if crosses(kwargs[name] if name in kwargs else args[i] if i is not None and i < len(args) else None):
                    break
            else:
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return edge.convert(again, [bound.arguments[n] for n in names])

        def again(*values):   # the wrapper, on the views or (autograd) on tensors
            return wrapper(**dict(zip(names, values)))

        return wrapper
    return decorate


def take(a, index, name):
    """``a[index]`` with ``index`` built of int64 ndarrays (and ``Ellipsis``):
    a torch tensor is indexed by torch, on its device, autograd intact.
    A result that cannot be allocated (``a`` a broadcast view of terabytes)
    is a ValueError naming ``name``."""
    torch = torch_of(a)
    if torch is not None:
        index = tuple(torch.as_tensor(i, device=a.device) if type(i) is _ndarray else i for i in index)
        try:
            return a[index]
        except (MemoryError, RuntimeError):   # torch: "Storage size calculation overflowed", ...
            raise ValueError(f"{name}: the result of shape {tuple(a.shape)} ({a.dtype}) cannot be "
                             f"allocated") from None
    try:
        return a[index]
    except (MemoryError, builtins.ValueError):
        raise too_large(name, a.shape, a.dtype) from None
