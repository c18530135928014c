"""Model configs (transformers ``config.json``) to Rope arguments.

``rope_arguments_from_hf_config(config)`` reads the keys that define a model's
position function and returns ``head_dim``, ``rotary_dim``, ``base`` and
``scaling`` (a rule object from :mod:`pyrope.scaling`, or ``None``), ready for
``Rope(**args, layout=...)``.

Both config styles are read:

* transformers 4: top-level ``rope_theta`` and ``rope_scaling`` (``type`` or
  ``rope_type``), top-level ``partial_rotary_factor`` and
  ``original_max_position_embeddings``;
* transformers 5: ``rope_parameters`` holding ``rope_theta``, ``rope_type``,
  ``partial_rotary_factor`` and the rule's keys (optionally nested by layer
  type, e.g. ``{"full_attention": {...}, "sliding_attention": {...}}``).

A value given in two places must agree, else ``ValueError`` names both.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import os
import pathlib

from .errors import TypeError, ValueError
from .scaling import Default, _positive_int, resolve, rule_from_dict

__all__ = ["load_hf_config", "rope_arguments_from_hf_config", "DEFAULT_BASE"]

# transformers' config classes fall back to this when config.json names no
# rope_theta (Llama 2's config.json predates the key)
DEFAULT_BASE = 10000.0

_WINDOW_RULES = ("yarn", "llama3", "longrope")


def load_hf_config(config_or_path) -> dict:
    """Return a model config as a fresh dict.

    ``config_or_path``: a dict (deep-copied), an object with ``to_dict()``
    (a transformers config), a path to a ``config.json`` file, or a directory
    holding one.  A missing file or malformed JSON raises ``ValueError`` naming
    the path.
    """
    if isinstance(config_or_path, dict):
        return copy.deepcopy(config_or_path)
    if isinstance(config_or_path, (str, os.PathLike)):
        path = pathlib.Path(config_or_path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"config: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"config: cannot read {str(path)!r}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"config: {str(path)!r} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"config: {str(path)!r} must hold a JSON object, got {type(data).__name__}")
        return data
    to_dict = getattr(config_or_path, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if not isinstance(data, dict):
            raise TypeError(f"config: to_dict() returned {type(data).__name__}, not a dict")
        return copy.deepcopy(data)
    raise TypeError(
        "config must be a dict, a path to config.json (or its folder), or an object with to_dict(); "
        f"got {type(config_or_path).__name__}"
    )


def rope_arguments_from_hf_config(config, *, seq_len=None, layer_type=None, default_base=DEFAULT_BASE) -> dict:
    """Keyword arguments ``head_dim``, ``rotary_dim``, ``base``, ``scaling`` for ``Rope``.

    ``config``: anything :func:`load_hf_config` accepts.  A multimodal config
    whose text model sits under ``text_config`` is read there.
    ``seq_len``: current sequence length; selects the dynamic-NTK base and the
    LongRoPE short/long factors (ignored by rules that do not depend on it).
    ``layer_type``: which entry of a per-layer-type ``rope_parameters`` to read.
    ``default_base``: base used when the config names no ``rope_theta``.

    ``head_dim`` = ``head_dim`` or ``hidden_size // num_attention_heads``;
    ``rotary_dim`` = ``int(head_dim * partial_rotary_factor)`` (``head_dim`` for
    the proportional rule, whose frequency vector covers the whole head).
    Missing or contradictory keys raise ``ValueError`` naming them.
    """
    cfg = load_hf_config(config)
    if isinstance(cfg.get("text_config"), dict) and "num_attention_heads" not in cfg:
        cfg = cfg["text_config"]

    head_dim = _head_dim(cfg)
    rope, where = _rope_dict(cfg, layer_type)

    base = _one_value(f"{where}.rope_theta", rope.pop("rope_theta", None), "rope_theta", cfg.get("rope_theta"))
    base = default_base if base is None else base
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"config: 'rope_theta' must be a finite number > 1, got {base!r}")
    base = float(base)

    partial = _one_value(f"{where}.partial_rotary_factor", rope.pop("partial_rotary_factor", None),
                         "partial_rotary_factor", cfg.get("partial_rotary_factor"))
    # GPT-NeoX spells the same fraction rotary_pct
    partial = _one_value("partial_rotary_factor", partial, "rotary_pct", cfg.get("rotary_pct"))
    partial = 1.0 if partial is None else partial
    if isinstance(partial, bool) or not isinstance(partial, numbers.Real) or not 0 < partial <= 1:
        raise ValueError(f"config: 'partial_rotary_factor' must be in (0, 1], got {partial!r}")

    name = _rule_name(rope, cfg)
    if seq_len is not None:
        seq_len = _positive_int("seq_len", seq_len, "config")

    if name == "proportional":
        rope["partial_rotary_factor"] = float(partial)
        rotary_dim = head_dim
    else:
        rotary_dim = int(head_dim * partial)
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"config: rotary dimension int(head_dim * partial_rotary_factor) = int({head_dim} * {partial}) "
                f"= {rotary_dim} must be even and >= 2"
            )

    max_pos = cfg.get("max_position_embeddings")
    if name in _WINDOW_RULES:
        original = _one_value(f"{where}.original_max_position_embeddings",
                              rope.get("original_max_position_embeddings"),
                              "original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        if original is not None:
            rope["original_max_position_embeddings"] = original
    if name in ("dynamic", "yarn", "llama3", "longrope") and max_pos is not None:
        _put(rope, where, "max_position_embeddings", max_pos)
    if name == "dynamic" and max_pos is None:
        raise ValueError("config: rope_type 'dynamic' needs top-level 'max_position_embeddings'")
    if name in ("dynamic", "longrope") and seq_len is not None:
        _put(rope, where, "seq_len", seq_len)

    scaling = rule_from_dict(rope)
    if isinstance(scaling, Default):
        scaling = None
    args = {"head_dim": head_dim, "rotary_dim": rotary_dim, "base": base, "scaling": scaling}
    resolve(**args)  # refuse now what Rope would refuse later (e.g. a factor list of the wrong length)
    return args


def _head_dim(cfg):
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        missing = [k for k in ("hidden_size", "num_attention_heads") if cfg.get(k) is None]
        if missing:
            raise ValueError(f"config: needs 'head_dim', or 'hidden_size' and 'num_attention_heads'; missing {missing}")
        hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        for key, value in (("hidden_size", hidden), ("num_attention_heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"config: {key!r} must be a positive int, got {value!r}")
        head_dim = hidden // heads
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2:
        raise ValueError(f"config: 'head_dim' must be an int >= 2, got {head_dim!r}")
    return head_dim


def _rope_dict(cfg, layer_type):
    """The rope description as a fresh dict (empty for plain RoPE), and the key it came from."""
    new, old = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    for key, value in (("rope_parameters", new), ("rope_scaling", old)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"config: {key!r} must be an object or null, got {value!r}")
    if new is not None and _is_nested(new):
        if layer_type is None:
            raise ValueError(f"config: 'rope_parameters' is given per layer type {sorted(new)}; pass layer_type=")
        if layer_type not in new:
            raise ValueError(f"config: layer_type {layer_type!r} not in 'rope_parameters' {sorted(new)}")
        new = new[layer_type] or {}
    elif layer_type is not None:
        raise ValueError(f"config: layer_type={layer_type!r} given but 'rope_parameters' is not per layer type")
    if new and old:
        # transformers 5 may keep both; accept only when rope_scaling says nothing new
        normal = dict(old)
        if "type" in normal and "rope_type" not in normal:
            normal["rope_type"] = normal.pop("type")
        clash = sorted(k for k in normal if new.get(k) != normal[k])
        if clash:
            raise ValueError(f"config: 'rope_scaling' and 'rope_parameters' disagree on {clash}")
    if new:
        return dict(new), "rope_parameters"
    return dict(old or {}), "rope_scaling"


def _is_nested(params):
    return bool(params) and "rope_type" not in params and "type" not in params and "rope_theta" not in params \
        and all(v is None or isinstance(v, dict) for v in params.values())


def _rule_name(rope, cfg):
    new, old = rope.get("rope_type"), rope.get("type")
    if new is not None and old is not None and new != old:
        raise ValueError(f"config: rope 'type'={old!r} and 'rope_type'={new!r} name different rules")
    name = new if new is not None else old
    if name is None:
        name = "default"
    # transformers' Phi3Config renames Phi-3's early spellings of its LongRoPE
    if cfg.get("model_type") == "phi3" and name in ("su", "yarn"):
        name = "longrope"
        rope.pop("type", None)
        rope["rope_type"] = name
    return name


def _one_value(first_key, first, second_key, second):
    """A value that may be given in two places; when both are given they must agree."""
    if first is not None and second is not None and first != second:
        raise ValueError(f"config: {first_key!r} = {first!r} contradicts {second_key!r} = {second!r}")
    return first if first is not None else second


def _put(rope, where, key, value):
    """Add a top-level value to the rope dict, refusing a different one already there."""
    _one_value(f"{where}.{key}", rope.get(key), key, value)
    rope[key] = value
