"""pyrope inside a loaded transformers model: ``patch(model)``, ``unpatch(model)``.

::

    from pyrope.integrations.transformers import patch
    with patch(model) as p:          # or p = patch(model) ... p.unpatch()
        out = model.generate(**inputs, max_new_tokens=20)
    p.calls                          # q/k rotations pyrope did

The patched model rotates q and k with ``Rope.from_hf_config(model.config)``
(``layer_type=`` per layer type, as Gemma 3's sliding and full layers), exact
cos/sin at every position, at the position ids the model passes its rotary
embedding (left padding included: ``generate`` derives them from the
attention mask). Dynamic NTK follows transformers' own stateful rule (the
frequencies of the longest length since the last reset: the module's own
update runs, so its state is what it would be unpatched) and LongRoPE
switches to the long factors per call, as transformers does. q and k are the
CPU torch tensors the attention passes (float32, float16, bfloat16, float64;
the ``[batch, heads, seq, head_dim]`` views of the projections), rotated into
new tensors as transformers' function returns them; with grad enabled the
rotation is differentiable (its backward is the inverse rotation).

How: the model's rotary-embedding module returns pyrope's exact tables in its
own format, tagged with the rope and positions; the modeling module's
``apply_rotary_pos_emb``, shared by every model of the family, is wrapped
(reference-counted) so that calls carrying such a tag rotate with pyrope and
every other call runs transformers' code. Before anything is changed,
:func:`patch` checks on a copy of the rotary module that pyrope's tables equal
the module's output and that pyrope's rotation equals the family's apply
function; a model that fails, or whose structure is not this one, is refused
with ``pyrope.errors.ValueError`` naming its class and the reason.
"""
import copy
import inspect
import sys
import weakref

from .._interop.views import tracing
from ..errors import ImportError, RopeError, TypeError, ValueError

try:
    import torch
except ModuleNotFoundError as exc:   # a model to patch needs both; say so, not a bare traceback
    raise ImportError("pyrope.integrations.transformers needs torch and transformers: "
                      "pip install torch transformers, or in a pyrope checkout pip install '.[conformance]'") from exc
from . import _hf_apply, _hf_rotary

__all__ = ["patch", "unpatch", "Patch"]

_PATCHED = weakref.WeakKeyDictionary()  # model -> Patch

# Positions the checks compare tables and rotations at (below the window), and the
# float32 error transformers' tables carry: its angle is a float32 product of float32
# frequencies (a few roundings, each 2**-24 relative), so |error| <= 2**-20 * (1 + angle).
_PROBE = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233)
_TABLE_TOL = 2.0 ** -20
_ROTATION_TOL = 2.0 ** -18  # times the largest |q|: three float32 roundings against one


class Patch:
    """A model whose q/k rotations pyrope does (what :func:`patch` returns).

    ``model``: the model; ``calls``: rotations done by pyrope (one per
    ``apply_rotary_pos_emb`` call); ``fallbacks``: calls handed to
    transformers' own code (positions or shapes pyrope does not take).
    Both count eager calls only: a compiled graph's rotations run as
    ``torch.ops.pyrope`` ops, uncounted (a counter the graph changed would
    make torch recompile it at every call).
    A context manager: leaving the ``with`` block unpatches.
    """

    def __init__(self, model):
        self.model = model
        self.calls = 0
        self.fallbacks = 0
        self._undo = None

    def note_call(self):
        """One more rotation by pyrope (not counted while torch traces)."""
        if not tracing():
            self.calls += 1

    def note_fallback(self):
        """One more call handed to transformers (not counted while torch traces)."""
        if not tracing():
            self.fallbacks += 1

    @property
    def active(self):
        """Whether the model is still patched by this object."""
        return self._undo is not None

    def unpatch(self):
        """Restore the model (and, with its last patched model, the family's function)."""
        if self._undo is None:
            raise ValueError(f"unpatch: this {type(self.model).__name__} is not patched")
        undo, self._undo = self._undo, None
        undo()
        _PATCHED.pop(self.model, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._undo is not None:
            self.unpatch()
        return False

    def __repr__(self):
        state = "active" if self.active else "unpatched"
        return f"<pyrope Patch of {type(self.model).__name__}: {state}, calls={self.calls}, fallbacks={self.fallbacks}>"


def patch(model):
    """Make ``model`` (a loaded transformers model on the CPU) rotate q and k with pyrope.

    Returns a :class:`Patch`, also a context manager (``with patch(model):``).
    Raises ``pyrope.errors.TypeError`` for something that is not a torch
    module, ``pyrope.errors.ValueError`` naming the model class when it is
    already patched or cannot be patched (no single rotary-embedding module,
    an apply function or positions of another form, parameters off the CPU,
    a rope whose tables or rotation differ from transformers' on the check).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"patch: model must be a transformers model (a torch.nn.Module), got {type(model).__name__}")
    name = type(model).__name__
    if model in _PATCHED:
        raise ValueError(f"patch: this {name} is already patched (unpatch it first)")
    rotary, module, kind, config = _structure(model, name)
    p = Patch(model)
    original = rotary.__dict__.get("forward", type(rotary).forward.__get__(rotary))
    fmt, slices_prefix = _check(name, rotary, module, kind, config)
    hook = _hf_rotary.RotaryHook(p, rotary, original, config, fmt, slices_prefix)
    hook.prepare(_layer_types(rotary))

    _hf_apply.install(module, kind)
    if getattr(getattr(module, _hf_apply.NAME), "_pyrope_original", None) is None:
        _hf_apply.uninstall(module)
        raise ValueError(f"patch: cannot patch {name}: {module.__name__}.{_hf_apply.NAME} was replaced by "
                         f"other code while another model was patched")
    had_forward = "forward" in rotary.__dict__
    rotary.forward = hook

    def undo():
        if rotary.__dict__.get("forward") is hook:
            if had_forward:
                rotary.forward = original
            else:
                del rotary.forward
        _hf_apply.uninstall(module)

    p._undo = undo
    _PATCHED[model] = p
    return p


def unpatch(model):
    """Undo :func:`patch`: the model, and the family's function once no model of it is patched."""
    p = _PATCHED.get(model) if isinstance(model, torch.nn.Module) else None
    if p is None:
        raise ValueError(f"unpatch: this {type(model).__name__} is not patched")
    p.unpatch()


def _refuse(name, reason):
    return ValueError(f"patch: cannot patch {name}: {reason}")


def _structure(model, name):
    """``(rotary module, modeling module, apply kind, config)`` or a refusal."""
    rotaries = [(path, m) for path, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]
    if len(rotaries) != 1:
        found = ", ".join(f"{path} ({type(m).__name__})" for path, m in rotaries) or "none"
        raise _refuse(name, f"pyrope patches a model with exactly one rotary-embedding module; found {found}")
    rotary = rotaries[0][1]
    cls = type(rotary).__name__
    params = list(inspect.signature(type(rotary).forward).parameters)[1:]
    if params not in (["x", "position_ids"], ["x", "position_ids", "layer_type"]):
        raise _refuse(name, f"{cls}.forward takes ({', '.join(params)}), not (x, position_ids[, layer_type])")
    module = sys.modules[type(rotary).__module__]
    function = _hf_apply.original_of(module)
    kind = _hf_apply.kind_of(function) if function is not None else None
    if kind is None:
        raise _refuse(name, f"{module.__name__} has no {_hf_apply.NAME}(q, k, cos, sin, unsqueeze_dim) "
                            f"or (tensor, sin, cos) to replace")
    devices = {t.device.type for t in (*model.parameters(), *model.buffers())}
    if devices - {"cpu"}:
        raise _refuse(name, f"pyrope rotates on the CPU; the model has tensors on {sorted(devices - {'cpu'})}")
    config = getattr(rotary, "config", None) or model.config
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return rotary, module, kind, config


def _layer_types(rotary):
    if "layer_type" not in inspect.signature(type(rotary).forward).parameters:
        return [None]
    kinds = getattr(rotary, "rope_type", None)
    if not isinstance(kinds, dict) or not kinds:
        return None
    return sorted(kinds)


def _windows(hook, layer_type):
    """Positions to compare at: below every window, and past it for length-dependent rules."""
    rotary = hook.rotary
    top = getattr(rotary, "max_positions", None) or rotary.original_max_seq_len
    short = [p for p in _PROBE if p < top]
    kind = hook.rope_type(layer_type)
    if "dynamic" in kind:
        return [short, short + [2 * top - 1]]  # past max_position_embeddings: the base grows
    if kind == "longrope":
        params = hook.config.rope_parameters
        window = (params if layer_type is None else params[layer_type])["original_max_position_embeddings"]
        short = [p for p in _PROBE if p < window]
        return [short, short + [window]]  # past the original window: the long factors
    return [short]


def _check(name, rotary, module, kind, config):
    """Compare pyrope with the module on a copy of it: returns ``(table format, slices_prefix)``."""
    layer_types = _layer_types(rotary)
    if layer_types is None:
        raise _refuse(name, f"{type(rotary).__name__} takes a layer_type but names no rope per layer type")
    probe = copy.deepcopy(rotary)  # the checks must not move a dynamic rope's state
    if any(b.is_floating_point() and b.dtype not in (torch.float32, torch.float64) for b in probe.buffers()):
        # model.to(bfloat16) rounds the module's frequencies too; compare with them as built
        probe = type(rotary)(config)
    counters = Patch(None)
    hook = _hf_rotary.RotaryHook(counters, probe, type(probe).forward.__get__(probe), config)
    function = _hf_apply.original_of(module)
    x = torch.zeros(1, dtype=torch.float32)
    fmt = slices = None
    for layer_type in layer_types:
        extra = () if layer_type is None else (layer_type,)
        for positions in _windows(hook, layer_type):
            pos = torch.tensor([positions], dtype=torch.int64)
            try:
                rope, narrow_rope = hook.ropes_for(x, pos, pos.numpy(), layer_type)
            except (RopeError, KeyError) as exc:
                raise _refuse(name, f"Rope.from_hf_config(config{', layer_type=' + repr(layer_type) if layer_type else ''}) "
                                    f"failed: {exc}") from exc
            if rope.mrope_section is not None:
                raise _refuse(name, "multimodal rotary positions (mrope_section) are not patched")
            with torch.no_grad():
                theirs = probe.forward(x, pos, *extra)
            fmt = _table_format(name, rotary, rope, pos, theirs, fmt)
            hook.fmt = fmt
            rotation = _hf_rotary.Rotation(hook, rope, narrow_rope, pos.numpy())
            cos, sin = hook.tables(x, pos.numpy(), rope, narrow_rope)
            slices = _rotation_agrees(name, module, function, kind, rope, rotation, hook, cos, sin, slices)
    return fmt, slices


def _table_format(name, rotary, rope, pos, theirs, expected):
    """Which of ``_hf_rotary.FORMATS`` the module's output ``theirs`` is, checked entry by entry."""
    cos, sin = (torch.from_numpy(t) for t in rope.cos_sin(pos.numpy()))
    angle = pos[..., None].to(torch.float64) * float(max(rope.inv_freq.max(), 0.0))
    worst = None
    for fmt, (build, _) in _hf_rotary.FORMATS.items():
        if expected is not None and fmt != expected:
            continue
        ours = build(cos, sin)
        if not isinstance(theirs, tuple) or len(theirs) != 2 or any(
                not isinstance(t, torch.Tensor) or t.shape != o.shape for t, o in zip(theirs, ours)):
            continue
        tol = _TABLE_TOL * rope.attention_factor * (1.0 + angle)
        excess = max(float(((t.to(torch.float64) - o.to(torch.float64)).abs() - tol).max()) for t, o in zip(theirs, ours))
        if excess <= 0:
            return fmt
        worst = excess if worst is None else min(worst, excess)
    detail = "no table of the same shape" if worst is None else f"off by {worst:.3g} beyond float32 rounding"
    raise _refuse(name, f"{type(rotary).__name__} at positions {pos.tolist()[0]} does not give pyrope's tables "
                        f"of {rope!r} ({detail})")


def _rotation_agrees(name, module, function, kind, rope, rotation, hook, cos, sin, expected):
    """Check pyrope's rotation against the family's function; returns whether it
    rotates the prefix of whole heads (``slices_prefix``)."""
    gen = torch.Generator().manual_seed(0)
    n = rotation.positions.shape[-1]
    widths = [rope.rotary_dim] if rope.rotary_dim == rope.head_dim else [rope.head_dim, rope.rotary_dim]
    slices = False
    for width in widths:
        if kind == "qk":
            args = (torch.randn(1, 3, n, width, generator=gen), torch.randn(1, 1, n, width, generator=gen))
        else:
            args = (torch.randn(1, n, 2, width, generator=gen),)
        whole = width == rope.head_dim and width != rope.rotary_dim
        try:
            with torch.no_grad():
                theirs = function(*args, cos, sin) if kind == "qk" else function(args[0], cos, sin)
        except RuntimeError as exc:
            if whole:  # its tables do not broadcast with whole heads: the attention slices first
                continue
            raise _refuse(name, f"{module.__name__}.{_hf_apply.NAME} fails on [.., {width}] heads: {exc}") from exc
        hook.slices_prefix = whole
        ours = rotation.qk(*args, 1) if kind == "qk" else rotation.one(args[0])
        if ours is None:
            raise _refuse(name, f"pyrope does not take the [.., {width}] heads {module.__name__}.{_hf_apply.NAME} takes")
        theirs = theirs if isinstance(theirs, tuple) else (theirs,)
        ours = ours if isinstance(ours, tuple) else (ours,)
        for what, t, o, a in zip(("q", "k"), theirs, ours, args):
            err = float((t - o).abs().max())
            tol = _ROTATION_TOL * rope.attention_factor * float(a.abs().max())
            if not err <= tol:
                raise _refuse(name, f"{module.__name__}.{_hf_apply.NAME} and pyrope's {rope.layout} rotation of "
                                    f"{rope!r} differ by {err:.3g} on {what} [.., {width}] (layout or slicing "
                                    f"not pyrope's)")
        slices = slices or hook.slices_prefix
    if expected is not None and slices != expected:
        raise _refuse(name, "its layer types slice heads differently")
    hook.slices_prefix = slices
    return slices
