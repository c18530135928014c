"""The apply side of a patched transformers model: ``apply_rotary_pos_emb``.

Attention modules call their modeling module's global ``apply_rotary_pos_emb``,
which every model of that family shares, patched or not. So the replacement is
installed once per modeling module and reference-counted (the last unpatch
restores the original object), and it rotates with pyrope only the calls
whose cos table carries a :class:`~._hf_rotary.Rotation` tag, which only a
patched model's rotary module produces; every other call runs the original.
"""
import functools
import inspect

from .._engine import locks as _locks
from ._hf_rotary import TAG

NAME = "apply_rotary_pos_emb"

# the signatures of transformers 5 whose semantics the wrappers below reproduce
KINDS = {("q", "k", "cos", "sin", "unsqueeze_dim"): "qk", ("tensor", "sin", "cos"): "one"}

_LOCK = _locks.Lock()   # a forked child gets it unheld
_INSTALLED = {}  # modeling module name -> [module, original function, wrapper, patched models]


def kind_of(function):
    """``"qk"``, ``"one"`` (GPT-J's per-tensor form), or None for a signature not handled."""
    try:
        names = tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return KINDS.get(names)


def _wrap(original, kind):
    if kind == "qk":
        @functools.wraps(original)
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            rotation = getattr(cos, TAG, None)
            if rotation is not None:
                out = rotation.qk(q, k, unsqueeze_dim)
                if out is not None:
                    return out
                rotation.hook.patch.note_fallback()
            return original(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    else:
        @functools.wraps(original)
        def apply_rotary_pos_emb(tensor, sin, cos):
            rotation = getattr(cos, TAG, None)
            if rotation is not None:
                out = rotation.one(tensor)
                if out is not None:
                    return out
                rotation.hook.patch.note_fallback()
            return original(tensor, sin, cos)
    apply_rotary_pos_emb._pyrope_original = original
    return apply_rotary_pos_emb


def original_of(module):
    """The module's own ``apply_rotary_pos_emb`` (the original while it is patched)."""
    function = getattr(module, NAME, None)
    return getattr(function, "_pyrope_original", function)


def install(module, kind):
    """Put the wrapper in ``module`` for one more patched model."""
    with _LOCK:
        entry = _INSTALLED.get(module.__name__)
        if entry is None:
            original = getattr(module, NAME)
            entry = _INSTALLED[module.__name__] = [module, original, _wrap(original, kind), 0]
            setattr(module, NAME, entry[2])
        entry[3] += 1


def uninstall(module):
    """One patched model fewer; the last one puts the original function back."""
    with _LOCK:
        entry = _INSTALLED.get(module.__name__)
        if entry is None:
            return
        entry[3] -= 1
        if entry[3] == 0:
            del _INSTALLED[module.__name__]
            if getattr(module, NAME, None) is entry[2]:
                setattr(module, NAME, entry[1])


def installed(module):
    """How many patched models share ``module``'s wrapper (0: not installed)."""
    entry = _INSTALLED.get(module.__name__)
    return 0 if entry is None else entry[3]
