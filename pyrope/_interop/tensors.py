"""Torch tensors and DLPack objects as arguments: numpy views in, the caller's type out.

pyrope computes on ndarrays. An argument that is not an ndarray but has
``__dlpack__`` (a torch tensor, a JAX array, any DLPack producer) is viewed
as an ndarray over the same memory, never copied:

- a torch tensor (recognised through ``sys.modules``: pyrope never imports
  torch) by ``Tensor.numpy()``, bfloat16 through an int16 view reinterpreted
  as ``ml_dtypes.bfloat16`` (numpy has no bfloat16 and refuses it through
  DLPack); it must be dense (strided) and on the CPU;
- any other object by ``numpy.from_dlpack(copy=False)``, or, for bfloat16,
  by reading its capsule (``_dlpack``); its memory must be CPU memory. A
  read-only export (and an unversioned, pre-1.0 capsule, which numpy
  imports read-only) gives a read-only view, never written.

Results go back as the caller's type: an argument written in place, or an
``out=``, is returned as the object given; a new array becomes an object of
its input's type: a torch tensor by ``torch.from_numpy`` (no copy), another
DLPack object's ``__array_namespace__().from_dlpack(result)``, or the
ndarray itself when that object has no namespace or the result is bfloat16
(numpy cannot export bfloat16 through DLPack). Written torch tensors get
their version counter bumped, as torch's in-place ops do, so autograd
notices a tensor it saved for backward being changed.

Tensors that require grad, with grad enabled, are rotated through
``_torch_autograd`` (imported then, and only then). :func:`entry` wraps a
public function in all this; ``Rope.apply``/``apply_qk`` reach
:func:`apply`/:func:`apply_qk` from their general path, so their numpy fast
path never looks for tensors.
"""
import builtins
import functools
import inspect
import sys

import numpy as np

from .._engine import dtypes as _dtypes
from .dlpack_devices import CPU_DEVICES, ELSEWHERE, device_name
from ..errors import TypeError, ValueError, raised

_ndarray = np.ndarray
SERVED = "float32, float16, bfloat16 or float64"

# ---- recognising them ----------------------------------------------------------------

def is_foreign(obj):
    """Does pyrope take ``obj`` through DLPack: a torch tensor, or any object
    with ``__dlpack__`` that is not a numpy array?"""
    return not isinstance(obj, _ndarray) and hasattr(type(obj), "__dlpack__")


def any_foreign(*objs):
    """Is one of ``objs``, or an item of a tuple or list among them, foreign?"""
    for obj in objs:
        if type(obj) is tuple or type(obj) is list:
            if any(map(is_foreign, obj)):
                return True
        elif is_foreign(obj):
            return True
    return False


def torch_of(obj):
    """The torch module when ``obj`` is a torch tensor, else None (torch is
    looked up, never imported: a tensor exists only if its caller imported it)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(obj, torch.Tensor) else None


def grad_needed(objs):
    """Is grad enabled and does one of ``objs`` require it?"""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    tensor = torch.Tensor
    return any(isinstance(o, tensor) and o.requires_grad for o in objs)


# ---- views -----------------------------------------------------------------------------

_TORCH_FLOATS = {}    # torch dtype -> numpy dtype, filled when the first tensor arrives
_TORCH_PLAIN = set()  # the torch dtypes Tensor.numpy() serves as pyrope needs them (not bfloat16)


def _torch_floats(torch):
    """{torch float dtype: numpy dtype}; bfloat16's is ml_dtypes', so it joins
    with the first bfloat16 tensor or dtype (:func:`_bfloat16_for`), not before:
    importing ml_dtypes takes longer than importing pyrope."""
    if not _TORCH_FLOATS:
        _TORCH_FLOATS.update({torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                              torch.float64: np.dtype(np.float64)})
        _TORCH_PLAIN.update((torch.float32, torch.float16, torch.float64))
    return _TORCH_FLOATS


def _bfloat16_for(torch, name):
    """ml_dtypes' bfloat16 for torch.bfloat16 (imported now if need be), or a
    ``TypeError`` naming ``name`` and what to install."""
    dtype = _dtypes.bfloat16()
    if dtype is None:
        raise TypeError(f"{name} is bfloat16, which needs the ml_dtypes package: {_dtypes.ML_DTYPES_HINT}")
    _torch_floats(torch)[torch.bfloat16] = dtype
    return dtype


def as_array(name, obj, data=True):
    """An ndarray over the memory of tensor or DLPack object ``obj`` (no copy).

    ``data``: ``obj`` holds values pyrope rotates, so its dtype must be one
    pyrope serves; else (positions) any dtype numpy has, which the caller
    checks. Raises ``TypeError`` naming ``name`` for a tensor that is not on
    the CPU, not dense, or of another dtype."""
    torch = torch_of(obj)
    if torch is not None:
        return _torch_view(torch, name, obj, data)
    return _dlpack_view(name, obj, data)


def positions_view(name, value):
    """Integer positions as the checks take them: a tensor or DLPack object
    viewed as an ndarray (no copy), anything else as given. Called where a
    public entry receives positions, so the checks below see no foreign object."""
    if type(value) is _ndarray or not is_foreign(value):
        return value
    return as_array(name, value, data=False)


def _torch_view(torch, name, t, data):
    if t.dtype in _TORCH_PLAIN:
        try:   # the common case in one step: numpy() itself refuses other devices and layouts,
            return t.numpy()   # tensors that require grad, negative views; the checks below name them
        except (RuntimeError, builtins.TypeError, builtins.ValueError):
            pass
    if t.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if not t.is_cpu:
        raise TypeError(f"{name} must be a CPU tensor, got one on device {t.device} ({ELSEWHERE})")
    if data and t.dtype not in _torch_floats(torch) and t.dtype is not torch.bfloat16:
        raise TypeError(f"{name} must have dtype {SERVED}, got {t.dtype}")
    if t.requires_grad:
        t = t.detach()
    if t.numel() * t.element_size() > _MAX_ARRAY_BYTES:   # numpy's bare "array is too big"
        raise ValueError(f"{name}: a view of {t.numel()} elements of {t.dtype} (shape {tuple(t.shape)}) is "
                         f"larger than numpy can address ({_MAX_ARRAY_BYTES} bytes), even when its strides "
                         f"repeat memory")
    bfloat16 = _bfloat16_for(torch, name) if t.dtype is torch.bfloat16 else None
    try:
        if bfloat16 is not None:
            return t.view(torch.int16).numpy().view(bfloat16)
        return t.numpy()
    except (RuntimeError, builtins.TypeError) as exc:  # negative or conjugate views, exotic dtypes
        raise TypeError(f"{name} ({t.dtype}) has no numpy view: {exc}") from None


_MAX_ARRAY_BYTES = np.iinfo(np.intp).max   # numpy refuses arrays whose size * itemsize exceeds it


def _numpy_import(obj):
    try:
        return np.from_dlpack(obj, copy=False)   # never a copy: writes must reach obj
    except builtins.TypeError:                   # a producer without DLPack 1.0's keywords
        return np.from_dlpack(obj)


def _dlpack_view(name, obj, data):
    where = getattr(obj, "__dlpack_device__", None)
    if where is not None:
        try:
            code = int(where()[0])
        except Exception as exc:   # a producer's own failure: named, not leaked bare
            raise TypeError(f"{name}.__dlpack_device__() failed: {raised(exc)}") from exc
        if code not in CPU_DEVICES:
            raise TypeError(f"{name} must be in CPU memory, got an array on {device_name(code)} ({ELSEWHERE})")
    try:
        arr = _numpy_import(obj)
    except Exception as exc:  # numpy refuses bfloat16 (and types it lacks): read the capsule
        from .dlpack import import_view
        arr = import_view(name, obj, exc, f"dtype {SERVED}" if data else "an integer dtype")
    if data and not _dtypes.stores(arr.dtype):
        raise TypeError(f"{name} must have dtype {SERVED}, got {arr.dtype}")
    return arr


def new_like(result, like, name=None):
    """A new ndarray ``result`` as an object of ``like``'s type (see the module
    notes); ``name``: the argument ``like`` is, named if its library fails."""
    torch = torch_of(like)
    if torch is not None:
        if _dtypes.is_bfloat16(result.dtype):
            return torch.from_numpy(result.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(result)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is None or _dtypes.is_bfloat16(result.dtype):
        return result
    try:
        return namespace().from_dlpack(result)
    except Exception as exc:   # the producer's library, not pyrope: named, not leaked bare
        raise TypeError(f"the result cannot be returned as {name or 'the argument'}'s type "
                        f"{type(like).__name__}: {name or 'its'}.__array_namespace__().from_dlpack failed: "
                        f"{raised(exc)}") from exc


def torch_dtype_as_numpy(dtype):
    """``dtype`` with a torch float dtype replaced by numpy's (others unchanged,
    bfloat16 too: tables are float32 or float64, so it is refused by name, and
    ml_dtypes is not imported to say so)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype) and dtype is not torch.bfloat16:
        return _torch_floats(torch).get(dtype, dtype)
    return dtype


class Bridge:
    """One call's conversions: ndarray views of the caller's objects, and the way back."""

    __slots__ = ("_views", "_written")

    def __init__(self):
        self._views = []     # (view, original), in the order converted
        self._written = []   # torch tensors the call writes

    def view(self, name, obj, data=True):
        """``obj`` as an ndarray (itself when it is not foreign); the same object
        twice gets the same view, so ``out=x`` stays in place."""
        if not is_foreign(obj):
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
        ``likes[i]`` (``likes[0]`` for a single result). Bumps the version of
        every written tensor."""
        if self._written:
            sys.modules["torch"].autograd.graph.increment_version(self._written)
        if type(result) is tuple:
            return tuple(self._back(r, likes[i] if i < len(likes) else likes[0]) for i, r in enumerate(result))
        return self._back(result, likes[0])

    def _back(self, result, like):
        for v, o in self._views:
            if v is result:
                return o
        if type(result) is _ndarray and is_foreign(like):
            return new_like(result, like)
        return result


def _kept(positions, name="positions"):
    """Positions a backward pass will reuse, as an ndarray the caller cannot
    change in between (a copy; lists and the like are left to the checks)."""
    if is_foreign(positions):
        return np.array(as_array(name, positions, data=False))
    if isinstance(positions, _ndarray):
        return positions.copy()
    return positions


def _autograd():
    from . import torch_autograd as _torch_autograd
    return _torch_autograd


def _out_pair(out):
    if out is None:
        return None, None
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return out[0], out[1]
    raise TypeError(f"out must be None or a pair (q_out, k_out), got {type(out).__name__}")


# ---- Rope.apply, Rope.apply_qk ----------------------------------------------------------

def apply(rope, x, positions, offset, seq_axis, out, inverse, angles):
    """:meth:`Rope.apply` with a tensor or DLPack object as ``x`` or ``out``.

    Written without a :class:`Bridge`: a decode step calls this once per
    layer, and each step below is a few hundred nanoseconds."""
    if (getattr(x, "requires_grad", False) or getattr(out, "requires_grad", False)) and grad_needed((x, out)):
        positions = _kept(positions)

        def run(t):
            return rope.apply(t, positions, offset=offset, seq_axis=seq_axis, out=None if out is None else t,
                              inverse=inverse, angles=angles)

        def adjoint(g):
            return rope.apply(g, positions, offset=offset, seq_axis=seq_axis, inverse=not inverse, angles=angles)

        return _autograd().rotation(run, adjoint, ("x",), (x,), ("out",), (out,))
    foreign = is_foreign(x)
    xa = as_array("x", x) if foreign else x
    oa = xa if out is x else out if out is None or not is_foreign(out) else as_array("out", out)
    if positions is not None and is_foreign(positions):
        positions = as_array("positions", positions, data=False)
    result = rope.apply(xa, positions, offset=offset, seq_axis=seq_axis, out=oa, inverse=inverse, angles=angles)
    if out is not None:
        if torch_of(out) is not None:  # written as torch's in-place ops write
            sys.modules["torch"].autograd.graph.increment_version((out,))
        return out
    return new_like(result, x, "x") if foreign else result


def apply_qk(rope, q, k, positions, offset, seq_axis, out, angles):
    """:meth:`Rope.apply_qk` with tensors or DLPack objects among q, k and ``out``."""
    outs = _out_pair(out)
    if grad_needed((q, k) + outs):
        positions = _kept(positions)

        def run(q_, k_):
            pair = (None if outs[0] is None else q_, None if outs[1] is None else k_)
            return rope.apply_qk(q_, k_, positions, offset=offset, seq_axis=seq_axis, out=pair, angles=angles)

        def adjoint(g):  # q and k turn by the same angles: each one's adjoint is the inverse
            return rope.apply(g, positions, offset=offset, seq_axis=seq_axis, inverse=True, angles=angles)

        return _autograd().rotation(run, adjoint, ("q", "k"), (q, k), ("out[0]", "out[1]"), outs)
    # as apply: each step spelled out, no Bridge (a decode step calls this once per layer)
    qa = as_array("q", q) if is_foreign(q) else q
    ka = as_array("k", k) if is_foreign(k) else k
    qo, ko = outs
    if out is not None:
        out = (qa if qo is q else qo if qo is None or not is_foreign(qo) else as_array("out[0]", qo),
               ka if ko is k else ko if ko is None or not is_foreign(ko) else as_array("out[1]", ko))
    if positions is not None and is_foreign(positions):
        positions = as_array("positions", positions, data=False)
    results = rope.apply_qk(qa, ka, positions, offset=offset, seq_axis=seq_axis, out=out, angles=angles)
    written = [o for o in outs if torch_of(o) is not None]
    if written:  # written as torch's in-place ops write
        sys.modules["torch"].autograd.graph.increment_version(written)
    return tuple(o if o is not None else new_like(r, x, n) if is_foreign(x) else r
                 for o, r, x, n in zip(outs, results, (q, k), ("q", "k")))


def cos_sin(rope, positions, dtype):
    """:meth:`Rope.cos_sin` at tensor or DLPack ``positions``: tables of their type."""
    cos, sin = rope.cos_sin(as_array("positions", positions, data=False), torch_dtype_as_numpy(dtype))
    return new_like(cos, positions, "positions"), new_like(sin, positions, "positions")


# ---- prepared calls ------------------------------------------------------------------------

def example_views(pairs):
    """ndarray views of ``(name, obj)`` examples given to ``Rope.prepare``:
    only their layouts matter; the same object twice gets one view."""
    bridge = Bridge()
    return tuple(bridge.view(name, obj) for name, obj in pairs)


def call_prepared(prepared, arrays, out, offset, positions):
    """A :class:`PreparedRotation` called with tensors or DLPack objects: their
    views run the prepared plan (layouts checked as for ndarrays). Tensors that
    require grad are differentiated, the backward being ``Rope.apply``'s."""
    names, out_names = prepared._names, prepared._out_names
    outs = (out,) if len(arrays) == 1 else _out_pair(out)
    if grad_needed(arrays + outs):
        positions = _kept(positions)
        rope, seq_axis, inverse = prepared._rope, prepared._seq_axis, prepared._inverse

        def run(*ts):
            given = tuple(None if o is None else t for t, o in zip(ts, outs))
            return prepared(*ts, out=given[0] if len(ts) == 1 else given, offset=offset, positions=positions)

        def adjoint(g):
            return rope.apply(g, positions, offset=offset, seq_axis=seq_axis, inverse=not inverse)

        return _autograd().rotation(run, adjoint, names, arrays, out_names, outs)
    bridge = Bridge()
    views = tuple(bridge.view(n, a) for n, a in zip(names, arrays))
    out_views = tuple(bridge.view(n, o) for n, o in zip(out_names, outs))
    for o in outs:
        bridge.writes(o)
    given = out_views[0] if len(arrays) == 1 else (None if out is None else out_views)
    result = prepared(*views, out=given, offset=offset, positions=bridge.view("positions", positions, data=False))
    return bridge.finish(result, arrays)


# ---- any other entry point ------------------------------------------------------------------

def entry(*, inputs, out=None, positions=(), written=(), adjoint=None, name=None):
    """Decorator: let a public function take torch tensors and DLPack objects.

    - ``inputs``: names of its float array arguments; a new array it returns
      takes the type of the first (of the i-th, for a tuple of results).
    - ``out``: the name of its output argument (None, an input itself for in
      place, or another array), returned as given.
    - ``positions``: names of its integer array arguments.
    - ``written``: inputs it writes in place.
    - ``adjoint``: the name of its boolean ``inverse`` argument when the
      function is a rotation of its one input whose adjoint is itself with
      ``inverse`` flipped (pyrope's inverse rotation multiplies by
      ``a R^T``): tensors that require grad are then differentiated through
      it. None: not differentiable, and a tensor that requires grad (with
      grad enabled) is refused with ``ValueError`` naming it.
    - ``name``: how messages name the function (default: its module and name),
      for an implementation behind a public function of another module.

    A call whose named arguments hold no tensor or DLPack object runs the
    function untouched (one scan of those arguments)."""
    if adjoint is not None and (len(inputs) != 1 or out is None):
        raise builtins.ValueError("a differentiable entry rotates one input into an out argument")

    def decorate(fn):
        signature = inspect.signature(fn)
        where = name or f"{fn.__module__}.{fn.__qualname__}"
        params = list(signature.parameters.values())

        def slot(name):  # (name, positional index or None, may hold a pair)
            i = next((i for i, p in enumerate(params) if p.name == name and p.kind is p.POSITIONAL_OR_KEYWORD), None)
            return name, i, name == out
        slots = tuple(map(slot, tuple(inputs) + ((out,) if out else ()) + tuple(positions)))

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for name, i, pair in slots:
                value = kwargs[name] if name in kwargs else args[i] if i is not None and i < len(args) else None
                if any_foreign(value) if pair else is_foreign(value):
                    break
            else:
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            values = [arguments[n] for n in inputs]
            given_out = arguments[out] if out else None
            if grad_needed(values + [given_out]):
                return differentiate(arguments, given_out)
            bridge = Bridge()
            for n in inputs:
                arguments[n] = bridge.view(n, arguments[n])
            if out:
                arguments[out] = bridge.view(out, given_out)
                bridge.writes(given_out)
            for n, v in zip(inputs, values):
                if n in written:
                    bridge.writes(v)
            for n in positions:
                arguments[n] = bridge.view(n, arguments[n], data=False)
            call = signature.bind(**arguments)
            return bridge.finish(fn(*call.args, **call.kwargs), values)

        def differentiate(arguments, given_out):
            if adjoint is None:
                name = next(n for n in tuple(inputs) + ((out,) if out else ())
                            if getattr(arguments[n], "requires_grad", False))
                raise ValueError(f"{where} is not differentiable, and {name} requires grad: call it under "
                                 f"torch.no_grad() or pass {name}.detach()")
            (name,) = inputs
            for n in positions:
                arguments[n] = _kept(arguments[n], n)
            inverse = arguments[adjoint]

            def call(**changed):  # the wrapper again, on tensors: grad disabled in forward, kept in backward
                bound = signature.bind(**dict(arguments, **changed))
                return wrapper(*bound.args, **bound.kwargs)

            def run(t):
                return call(**{name: t, out: None if given_out is None else t})

            def backward(g):
                return call(**{name: g, out: None, adjoint: not inverse})

            return _autograd().rotation(run, backward, (name,), (arguments[name],), (out,), (given_out,))

        return wrapper
    return decorate


def restore(result, original):
    """``result`` of a function that ran on ``original`` converted to an
    ndarray, back as ``original``'s type (a torch tensor is never converted:
    such functions index it natively)."""
    if type(result) is _ndarray and is_foreign(original):
        return new_like(result, original)
    return result
