"""Reading transformers model configs: the arguments of a model's ropes.

The engine room of :mod:`pyrope.config` (whose docstring says what is read and
how): everything here returns plain values and Rope *arguments*, never a
``Rope``, so it sits below ``pyrope.rope``, which builds ropes from them, and
``pyrope.config`` (above both) is only the public face.
"""

from __future__ import annotations

import builtins
import collections
import copy
import dataclasses
import json
import math
import numbers
import os
import pathlib
import warnings

from .._engine.checks import LAYOUT_NAMES
from ..errors import TypeError, ValueError, shown
from .._engine.checks import MAX_HEAD_DIM
from ..scaling import Default, _positive_int, _shown, _yarn_m, resolve, rule_from_dict
from ..scaling import _sorted_keys as _sorted


# transformers' config classes fall back to this when config.json names no
# rope_theta (Llama 2's config.json predates the key)
DEFAULT_BASE = 10000.0

_WINDOW_RULES = ("yarn", "llama3", "longrope")

# ---- families, each entry checked against transformers' modeling code (5.24) -----------------
#
# The layout transformers' own code gives HF weights, by the model_type of the
# text config.  "interleaved": the rotation pairs coordinates (2i, 2i + 1);
# "split_half": (i, i + r/2), rotate_half.  A family that reads rope_interleave
# is listed with the layout of its config class's default for the key.
LAYOUT_FAMILIES = {
    # rotate_every_two and cos/sin repeat_interleave(2) (GPTJRotaryEmbedding)
    "gptj": "interleaved",
    "codegen": "interleaved",
    # rotate_half on x[..., 0::2] / x[..., 1::2], cos/sin halves repeat_interleave(2)
    "glm": "interleaved",
    "glm4": "interleaved",
    "helium": "interleaved",
    "ernie4_5": "interleaved",
    "ernie4_5_moe": "interleaved",
    "moonshine_streaming": "interleaved",
    # rotate_half_llm / rotate_half_text (same pairs) with frequencies repeat_interleave(2)
    "glm4v_text": "interleaved",
    "glm_ocr_text": "interleaved",
    "ernie4_5_vl_moe_text": "interleaved",
    "hy_v4_vl_text": "interleaved",
    # rotate_half on x[..., ::2] / x[..., 1::2], emb = repeat_interleave(freqs, 2)
    "cohere": "interleaved",
    "cohere2": "interleaved",
    "cohere2_moe": "interleaved",
    # _apply_rotary_emb on x[..., ::2] / x[..., 1::2], stacked back pairwise
    "openai_privacy_filter": "interleaved",
    # RoFormerSelfAttention.apply_rotary_position_embeddings: stack([-x[..., 1::2], x[..., ::2]]),
    # sin/cos stacked pairwise (base 10000 in its sinusoidal table, whatever the config)
    "roformer": "interleaved",
    # view_as_complex(x.reshape(..., -1, 2)): adjacent coordinates are one complex number
    "llama4_text": "interleaved",
    "deepseek_v2": "interleaved",
    # apply_rotary_pos_emb_interleave when config.rope_interleave, which defaults to True
    "deepseek_v3": "interleaved",
    "sarvam_mla": "interleaved",  # DeepseekV3Model
    "glm4_moe_lite": "interleaved",
    "mistral4": "interleaved",
    "youtu": "interleaved",
    "axk1": "interleaved",
    # apply_rotary_pos_emb_interleave always (the DSA indexer's own keys use rotate_half)
    "deepseek_v32": "interleaved",
    "glm_moe_dsa": "interleaved",
    "longcat_flash": "interleaved",
    "axk2": "interleaved",
    "bailing_hybrid": "interleaved",
    # checked split-half: rotate_half on x[..., :d/2] / x[..., d/2:] with cat((freqs, freqs))
    "glm4_moe": "split_half",
    "glm4v_moe_text": "split_half",
    "minicpm3": "split_half",
    "hy_v4": "split_half",
    "qwen2_vl_text": "split_half",
    "qwen2_5_vl_text": "split_half",
    "qwen3_vl_text": "split_half",
    "qwen3_vl_moe_text": "split_half",
    "gemma3_text": "split_half",
    "gemma4_text": "split_half",
    "gpt_neox": "split_half",
    "gpt_oss": "split_half",  # _apply_rotary_emb on torch.chunk(x, 2)
    "smollm3": "split_half",
    "llama": "split_half",
}

# A composite (multimodal) config's text config, when it names no model_type:
# the text config class the composite one builds by default.
_TEXT_MODEL_TYPE = {
    "llama4": "llama4_text",
    "glm4v": "glm4v_text",
    "glm46v": "glm4v_text",
    "glm_ocr": "glm_ocr_text",
    "glm4v_moe": "glm4v_moe_text",
    "ernie4_5_vl_moe": "ernie4_5_vl_moe_text",
    "hy_v4_vl": "hy_v4_vl_text",
    "cohere2_vision": "cohere2",
    "aya_vision": "cohere2",
    "kimi_k25": "deepseek_v3",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
}

# Multimodal RoPE sections (mrope_section), by text family: the sections its
# transformers rotary module uses when the config names none, and whether it
# assigns them round-robin over the pairs. Checked in each modeling file's
# recomposition_frequencies: Qwen2/2.5-VL split the frequencies in order,
# Qwen3-VL (and its MoE) interleave them and read no flag for it.
MROPE_FAMILIES = {
    "qwen2_vl_text": ((16, 24, 24), False),
    "qwen2_5_vl_text": ((16, 24, 24), False),
    "qwen3_vl_text": ((24, 20, 20), True),
    "qwen3_vl_moe_text": ((24, 20, 20), True),
}

# Families whose attention multiplies its softmax scale 1/sqrt(qk_head_dim) by
# mscale(factor, mscale_all_dim)**2 when the rope is not the default one
# (yarn_apply_mscale in their modeling code).
SOFTMAX_MSCALE_FAMILIES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "sarvam_mla", "glm4_moe_lite", "glm_moe_dsa",
    "longcat_flash", "mistral4", "mistral_large4_text", "minicpm3", "youtu", "axk1", "axk2",
    "bailing_hybrid", "hy_v4", "hy_v4_vl_text",
})

# rope_theta when the config has none: the config class's default_theta where it is not 10000
_DEFAULT_THETA = {
    "apertus": 12000000.0, "bitnet": 500000.0, "cohere": 500000.0, "csm": 500000.0, "cwm": 1000000.0,
    "ernie4_5": 500000.0, "ernie4_5_moe": 500000.0, "ernie4_5_vl_moe_text": 500000.0, "exaone": 500000.0,
    "flex_olmo": 500000.0, "gpt_oss": 150000.0, "helium": 100000.0, "llama4_text": 500000.0,
    "longcat_flash": 10000000.0, "minimax_m2": 5000000.0, "olmo3": 500000.0,
    "openai_privacy_filter": 150000.0, "qwen2_vl_text": 1000000.0, "qwen3_vl_text": 500000.0,
    "smollm3": 2000000.0, "solar_open": 1000000.0,
}
# Gemma 3: full-attention layers rope_theta, sliding ones rope_local_base_freq
_GEMMA3_THETA = {"full_attention": 1000000.0, "sliding_attention": 10000.0}

# Gemma 4's rope_parameters when the config has none; its full-attention layers have
# global_head_dim (512 when absent) heads
_GEMMA4_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1000000.0}}
_GEMMA4_GLOBAL_HEAD_DIM = 512

# partial_rotary_factor when the config has none, where the class's default is not 1
_PARTIAL_DEFAULT = {"gpt_neox": 0.25, "glm": 0.5, "glm4": 0.5, "glm4_moe": 0.5, "glm4v_moe_text": 0.5}

# GPT-J / CodeGen: rotary_dim when the config has none
_ROTARY_DIM_DEFAULT = {"gptj": 64, "codegen": 64}

# Families whose rotary embedding this module cannot state as one Rope per layer
_REFUSED = {
    "deepseek_v4": "DeepSeek V4 rotates the last qk_rope_head_dim channels of its shared key/value head with a "
                   "'main' or 'compress' rope chosen by layer type, and rotates the attention output back",
    "dots3_note_text": "dots3_note mixes per-layer head sizes and rope widths (per_layer_config)",
    "kimi_linear": "Kimi Linear's attention layers have no rotary embedding",
}
_NO_ROPE_FAMILIES = {"kimi_linear"}

# The most hidden layers a config may have: far above any model (the deepest have a
# few hundred), low enough that the per-layer lists (layer_ropes, layer types) stay
# in the megabytes whatever number a config states.
MAX_LAYERS = 65536


def load_hf_config(config_or_path) -> dict:
    """Return a model config as a fresh dict.

    ``config_or_path``: a dict (deep-copied, at any depth, without recursion;
    a value that contains itself raises ``ValueError``), an object with
    ``to_dict()`` (a transformers config; its dict copied the same way), a path
    to a ``config.json`` file, or a directory holding one.  A missing file,
    malformed JSON, a key given twice in one object (JSON leaves the meaning
    open; Python would keep the last), nesting deeper than Python's recursion
    limit or an integer of more than 4300 digits raise ``ValueError`` naming
    the path (and the key).
    """
    if isinstance(config_or_path, dict):
        return _copy_tree(config_or_path)
    if isinstance(config_or_path, (str, os.PathLike)):
        path = pathlib.Path(config_or_path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"config: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"config: cannot read {str(path)!r}: {exc}") from exc
        except _DuplicateKey as exc:
            raise ValueError(f"config: {str(path)!r} gives the key {_shown(exc.key)} twice in one object; "
                             "say which value is meant") from None
        except RecursionError:
            raise ValueError(f"config: {str(path)!r} nests arrays or objects too deeply to read") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config: {str(path)!r} is not valid JSON: {exc}") from None
        except builtins.ValueError:  # int() past Python's 4300-digit limit (CVE-2020-10735)
            raise ValueError(f"config: {str(path)!r} holds an integer of more than 4300 digits") from None
        if not isinstance(data, dict):
            raise ValueError(f"config: {str(path)!r} must hold a JSON object, got {type(data).__name__}")
        return data
    to_dict = getattr(config_or_path, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if not isinstance(data, dict):
            raise TypeError(f"config: to_dict() returned {type(data).__name__}, not a dict")
        return _copy_tree(data)
    raise TypeError(
        "config must be a dict, a path to config.json (or its folder), or an object with to_dict(); "
        f"got {type(config_or_path).__name__}"
    )


_CONTAINERS = (dict, list, tuple)


def _copy_tree(root):
    """A deep copy of the dicts, lists and tuples of a config (other values are shared:
    pyrope never changes them), made without recursion: ``copy.deepcopy`` recursed
    per level and raised ``RecursionError`` on a dict 700 levels deep whose text
    ``json.loads`` reads. Shared sub-objects stay shared, as with deepcopy; a
    value that contains itself (no JSON text can) is a ``ValueError`` naming where."""
    if not isinstance(root, _CONTAINERS):
        return root
    done = {}               # id -> finished copy
    open_ids = {id(root)}   # the containers on the path from the root
    leaves = _copy_of_leaves(root)
    if leaves is not None:
        return leaves
    # frames: [source, its copy (a list for a tuple until finished), its items, key in the parent]
    stack = [_frame(root, None)]
    while stack:
        frame = stack[-1]
        source, target, it, _ = frame
        in_dict = type(target) is dict
        for key, child in it:
            if isinstance(child, _CONTAINERS):
                copied = done.get(id(child))
                if copied is None:
                    if id(child) in open_ids:
                        where = "".join(f"[{f[3]!r}]" for f in stack[1:]) + f"[{key!r}]"
                        raise ValueError(f"config: the value at {shown(where)} contains itself; a config is a "
                                         "tree (no config.json can hold a cycle)")
                    copied = _copy_of_leaves(child)
                    if copied is None:
                        open_ids.add(id(child))
                        stack.append(_frame(child, key))
                        break
                    done[id(child)] = copied
                child = copied
            if in_dict:
                target[key] = child
            else:
                target.append(child)
        else:
            stack.pop()
            open_ids.discard(id(source))
            finished = done[id(source)] = tuple(target) if isinstance(source, tuple) else target
            if not stack:
                return finished
            parent = stack[-1][1]
            if type(parent) is dict:
                parent[frame[3]] = finished
            else:
                parent.append(finished)


def _frame(source, key):
    if isinstance(source, dict):
        return [source, {}, iter(source.items()), key]
    return [source, [], enumerate(source), key]


def _copy_of_leaves(source):
    """The copy of a long container none of whose values is a container (one pass in C
    over the values' types: a factor list of 10**4 numbers is copied in 0.1 ms, not 2), else None."""
    if len(source) < 16:   # the frame's loop is as quick, and a deep chain of small ones pays no check
        return None
    values = source.values() if isinstance(source, dict) else source
    if any(issubclass(t, _CONTAINERS) for t in set(map(type, values))):
        return None
    if isinstance(source, dict):
        return dict(source)
    return tuple(source) if isinstance(source, tuple) else list(source)


class _DuplicateKey(Exception):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs):
    """json's object_pairs_hook: the object, refusing a key given twice."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


# --------------------------------------------------------------------------- public entry points


def rope_arguments_from_hf_config(config, *, seq_len=None, layer_type=None, default_base=None) -> dict:
    """Keyword arguments ``head_dim``, ``rotary_dim``, ``base``, ``scaling`` for ``Rope``.

    ``config``: anything :func:`load_hf_config` accepts.  A multimodal config
    whose text model sits under ``text_config`` is read there.
    ``seq_len``: current sequence length; selects the dynamic-NTK base and the
    LongRoPE short/long factors (ignored by rules that do not depend on it).
    ``layer_type``: which entry of a per-layer-type ``rope_parameters`` to read.
    ``default_base``: base used when the config names no ``rope_theta``
    (default: the family's transformers default, 10000 for most).

    ``head_dim`` = ``qk_rope_head_dim`` (MLA), else ``head_dim``, else
    ``hidden_size // num_attention_heads`` (``n_embd // n_head``);
    ``rotary_dim`` = ``rotary_dim`` (GPT-J) or ``int(head_dim *
    partial_rotary_factor)`` (``head_dim`` for the proportional rule, whose
    frequency vector covers the whole head).  Missing or contradictory keys
    raise ``ValueError`` naming them.
    """
    _, cfg, family = _view(config)
    return _read(cfg, family, seq_len, layer_type, default_base)["args"]


def layout_from_hf_config(config, layout=None):
    """``(layout, source)``: the pair layout of a model's HF weights and where it came from.

    ``source`` is ``"rope_interleave"`` (the config's key decided),
    ``"model_type"`` (:data:`LAYOUT_FAMILIES`), ``"default"`` (no hint:
    ``"split_half"``) or ``"argument"`` (``layout`` given).  A ``layout`` that
    contradicts the config's ``rope_interleave`` raises ``ValueError``.
    """
    raw, cfg, family = _view(config)
    _refuse(family)
    return _layout(raw, cfg, family, layout)


def softmax_scale_factor_from_hf_config(config, *, layer_type=None) -> float:
    """The factor a backend multiplies its ``1/sqrt(d)`` softmax scale by (``d``
    the full query/key head, ``qk_nope_head_dim + qk_rope_head_dim`` for MLA).

    ``mscale(factor, mscale_all_dim) ** 2`` with ``mscale(s, k) = 0.1 k ln s + 1``
    (1 when ``s <= 1``) for the DeepSeek-style families of
    :data:`SOFTMAX_MSCALE_FAMILIES` when the rope is not the default one and
    ``mscale_all_dim`` is non-zero (as their transformers attention does); 1.0
    otherwise.
    """
    _, cfg, family = _view(config)
    return _read(cfg, family, None, layer_type, None)["softmax_scale_factor"]


def rope_layer_types(config):
    """The layer types a config gives its rope per (``rope_parameters`` by layer type in
    transformers 5; Gemma 3's two bases; Gemma 4's defaults), sorted; ``None`` when one
    rope serves every layer. Any of them is a ``layer_type=`` of ``Rope.from_hf_config``."""
    _, cfg, family = _view(config)
    params = _normalised(cfg, family).get("rope_parameters")
    return _sorted(params) if isinstance(params, dict) and _is_nested(params) else None


def layer_rope_arguments(config, *, layout=None, seq_len=None):
    """:func:`pyrope.config.layer_ropes` as arguments: one entry per hidden layer, the
    :class:`RopeArguments` of its rope or ``None``; layers with equal overrides share one
    object (``pyrope.config`` builds one ``Rope`` per object)."""
    raw, cfg, family = _view(config)
    if family in _NO_ROPE_FAMILIES:
        return [None] * _num_layers(cfg)
    _refuse(family)
    cfg = _normalised(cfg, family)
    n = _num_layers(cfg)
    types = _layer_types(cfg, family, n)
    flags = _rope_flags(cfg, family, n, types)
    params = cfg.get("rope_parameters")
    nested = isinstance(params, dict) and _is_nested(params)
    if nested and types is None:
        raise ValueError(f"config: 'rope_parameters' is given per layer type {_sorted(params)} "
                         "but the config has no 'layer_types'")
    chosen = _layout(raw, cfg, family, layout)
    built, out = {}, []
    for i in range(n):
        layer_type = types[i] if nested else None
        if not flags[i] or (nested and layer_type in params and params[layer_type] is None):
            out.append(None)
            continue
        overrides = _layer_overrides(cfg, family, i, types)
        try:
            same = json.dumps(overrides, sort_keys=True)   # layers with equal overrides share one Rope
        except (builtins.TypeError, builtins.ValueError, RecursionError):   # not JSON: this layer's own
            same = i
        key = (layer_type, same)
        if key not in built:
            layer_cfg = {**cfg, **overrides}
            try:
                built[key] = _rope_arguments(layer_cfg, family, chosen, seq_len, layer_type)
            except ValueError as exc:
                raise type(exc)(f"layer {i}: {exc}") from None
        out.append(built[key])
    return out


def hf_rope_arguments(config, *, layout=None, seq_len=None, layer_type=None):
    """``Rope.from_hf_config``'s :class:`RopeArguments`: the rope's keyword arguments,
    its layout source and softmax factor."""
    raw, cfg, family = _view(config)
    if family in _NO_ROPE_FAMILIES:
        raise ValueError(f"config: {_REFUSED[family]}")
    _refuse(family)
    chosen = _layout(raw, cfg, family, layout)
    return _rope_arguments(_prepared(cfg, family, layer_type), family, chosen, seq_len, layer_type)


RopeArguments = collections.namedtuple("RopeArguments", "kwargs softmax_scale_factor layout_source")
RopeArguments.__doc__ = """What a config says of one rope: ``Rope(**kwargs)`` (layout included),
and the two facts a Rope records beside it (``softmax_scale_factor``, ``layout_source``)."""


def _rope_arguments(cfg, family, chosen, seq_len, layer_type):
    read = _read(cfg, family, seq_len, layer_type, None, normalised=True)
    args = read["args"]
    if read["window"] is not None:  # the default rule has no window of its own: the config's is the rope's
        args = {**args, "scaling": dataclasses.replace(read["resolved"], original_window=read["window"],
                                                       target_window=read["window"])}
    return RopeArguments({**args, "layout": chosen[0]}, read["softmax_scale_factor"], chosen[1])


# --------------------------------------------------------------------------- reading


def _view(config):
    """``(whole config, the config the text model reads, its family model_type)``."""
    raw = load_hf_config(config)
    cfg, parent = raw, raw.get("model_type")
    if isinstance(raw.get("text_config"), dict) and "num_attention_heads" not in raw and "n_head" not in raw:
        cfg = raw["text_config"]
        own = cfg.get("model_type")
        if own is not None:
            parent = own
    family = _TEXT_MODEL_TYPE.get(parent, parent) if isinstance(parent, str) else None
    return raw, cfg, family


def _refuse(family):
    if family in _REFUSED:
        raise ValueError(f"config: model_type {_shown(family)} is not read: {_REFUSED[family]}")


def _layout(raw, cfg, family, layout):
    flag = cfg.get("rope_interleave", raw.get("rope_interleave"))
    if layout is not None:
        if not isinstance(layout, str) or layout not in LAYOUT_NAMES:
            raise ValueError(f"layout must be None (read it from the config), 'split_half' or 'interleaved', "
                             f"got {_shown(layout)}")
    if flag is not None:
        if not isinstance(flag, bool):
            raise ValueError(f"config: 'rope_interleave' must be true or false, got {_shown(flag)}")
        from_flag = "interleaved" if flag else "split_half"
        if layout is None:
            return from_flag, "rope_interleave"
        if layout != from_flag:
            raise ValueError(f"layout={_shown(layout)} contradicts the config's 'rope_interleave': "
                             f"{str(flag).lower()} (which means {from_flag!r})")
        return layout, "argument"
    if layout is not None:
        return layout, "argument"
    if family in LAYOUT_FAMILIES:
        return LAYOUT_FAMILIES[family], "model_type"
    return "split_half", "default"


def _prepared(cfg, family, layer_type):
    """The text config as its rope is read: family spellings normalised, and the attributes the
    layers of ``layer_type`` override (Gemma 4's full-attention head_dim)."""
    cfg = _normalised(cfg, family)
    if layer_type is not None:
        cfg = {**cfg, **_type_overrides(cfg, family, layer_type)}
    return cfg


def _read(cfg, family, seq_len, layer_type, default_base, normalised=False):
    """``{"args": Rope kwargs, "softmax_scale_factor": float}`` for one text config."""
    if not normalised:
        _refuse(family)
        cfg = _prepared(cfg, family, layer_type)
    rope, where = _rope_dict(cfg, layer_type)
    mla = cfg.get("qk_rope_head_dim") is not None
    head_dim = _head_dim(cfg)

    base = _one_value(f"{where}.rope_theta", rope.pop("rope_theta", None), "rope_theta", cfg.get("rope_theta"))
    # GPT-NeoX spells the base rotary_emb_base
    base = _one_value("rope_theta", base, "rotary_emb_base", cfg.get("rotary_emb_base"))
    if base is None:
        base = default_base if default_base is not None else _DEFAULT_THETA.get(family, DEFAULT_BASE)
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not _finite(base) or base <= 1:
        raise ValueError(f"config: 'rope_theta' must be a finite number > 1, got {_shown(base)}")
    base = float(base)

    partial = _one_value(f"{where}.partial_rotary_factor", rope.pop("partial_rotary_factor", None),
                         "partial_rotary_factor", cfg.get("partial_rotary_factor"))
    # GPT-NeoX spells the same fraction rotary_pct
    partial = _one_value("partial_rotary_factor", partial, "rotary_pct", cfg.get("rotary_pct"))
    if partial is not None and (isinstance(partial, bool) or not isinstance(partial, numbers.Real)
                                or not 0 < partial <= 1):
        raise ValueError(f"config: 'partial_rotary_factor' must be in (0, 1], got {_shown(partial)}")

    sections = _mrope(rope, where, family)
    name = _rule_name(rope, cfg)
    if seq_len is not None:
        seq_len = _positive_int("seq_len", seq_len, "config")

    if name == "proportional":
        rope["partial_rotary_factor"] = float(1.0 if partial is None else partial)
        rotary_dim = head_dim
    elif mla:
        rotary_dim = _mla_rotary_dim(cfg, head_dim, partial)
    else:
        rotary_dim = _rotary_dim(cfg, family, head_dim, partial)

    max_pos = cfg.get("max_position_embeddings")
    alpha = name == "dynamic" and rope.get("alpha") is not None
    if name in _WINDOW_RULES:
        original = _one_value(f"{where}.original_max_position_embeddings",
                              rope.get("original_max_position_embeddings"),
                              "original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        if original is not None:
            rope["original_max_position_embeddings"] = original
    if name in ("dynamic", "yarn", "llama3", "longrope") and max_pos is not None and not alpha:
        _put(rope, where, "max_position_embeddings", max_pos)
    if name == "dynamic" and max_pos is None and not alpha:
        raise ValueError("config: rope_type 'dynamic' needs top-level 'max_position_embeddings' "
                         "(or 'alpha', a fixed base change)")
    if name in ("dynamic", "longrope") and seq_len is not None and not alpha:
        _put(rope, where, "seq_len", seq_len)

    scaling = rule_from_dict(rope)
    if isinstance(scaling, Default):
        scaling = None
    args = {"head_dim": head_dim, "rotary_dim": rotary_dim, "base": base, "scaling": scaling}
    resolved = resolve(**args)  # refuse now what Rope would refuse later (e.g. a factor list of the wrong length)
    if sections is not None:
        args["mrope_section"], args["mrope_interleaved"] = sections

    softmax = 1.0
    mscale_all_dim = rope.get("mscale_all_dim")
    if family in SOFTMAX_MSCALE_FAMILIES and name != "default" and mscale_all_dim:
        factor = rope.get("factor")
        if factor is None:  # yarn derives it from the windows
            factor = resolved.params.get("factor")
        m = _yarn_m(factor, float(mscale_all_dim))  # DeepSeek's yarn_get_mscale
        softmax = m * m
    # the context window of a rope whose rule has none (the default rule): the config's
    window = max_pos if name == "default" and isinstance(max_pos, int) and not isinstance(max_pos, bool) \
        and 1 <= max_pos <= 2**63 - 1 else None
    return {"args": args, "softmax_scale_factor": softmax, "resolved": resolved, "window": window}


def _normalised(cfg, family):
    """The config with Gemma 3's transformers-4 keys turned into its per-layer-type rope_parameters,
    and Gemma 4's defaults for them (Gemma4TextConfig's) when it has none."""
    if family == "gemma4_text" and cfg.get("rope_parameters") is None and cfg.get("rope_scaling") is None:
        return {**cfg, "rope_parameters": copy.deepcopy(_GEMMA4_ROPE)}
    if family != "gemma3_text":
        return cfg
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and _is_nested(params):
        params = _copy_tree(params)
        for layer_type, theta in _GEMMA3_THETA.items():
            if isinstance(params.get(layer_type), dict):
                params[layer_type].setdefault("rope_theta", theta)
        return {**cfg, "rope_parameters": params}
    full = {"rope_type": "default"}
    for key in ("rope_scaling", "rope_parameters"):
        value = cfg.get(key)
        if value is not None:
            if not isinstance(value, dict):
                raise ValueError(f"config: {key!r} must be an object or null, got {_shown(value)}")
            full.update(value)
    if "type" in full and _is_text(full.get("rope_type"), "default"):
        full["rope_type"] = full.pop("type")
    theta = _one_value("rope_parameters.rope_theta", full.get("rope_theta"), "rope_theta", cfg.get("rope_theta"))
    full["rope_theta"] = _GEMMA3_THETA["full_attention"] if theta is None else theta
    local = cfg.get("rope_local_base_freq")
    sliding = {"rope_type": "default",
               "rope_theta": _GEMMA3_THETA["sliding_attention"] if local is None else local}
    out = {k: v for k, v in cfg.items() if k not in ("rope_scaling", "rope_theta", "rope_local_base_freq")}
    out["rope_parameters"] = {"full_attention": full, "sliding_attention": sliding}
    return out


def _finite(value):
    """Whether a real number is a finite float64 (an int too large for one is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _int_key(cfg, *names):
    """The one value of a key that several spellings name (they must agree)."""
    value = None
    for name in names:
        value = _one_value(names[0], value, name, cfg.get(name))
    return value


def _head_dim(cfg):
    rope_slice = cfg.get("qk_rope_head_dim")
    if rope_slice is not None:  # MLA: the rope acts on the qk_rope_head_dim slice
        if isinstance(rope_slice, bool) or not isinstance(rope_slice, int) or rope_slice < 2 or rope_slice % 2 \
                or rope_slice > MAX_HEAD_DIM:
            raise ValueError(f"config: 'qk_rope_head_dim' must be an even int in [2, {MAX_HEAD_DIM}], "
                             f"got {_shown(rope_slice)}")
        return rope_slice
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        hidden = _int_key(cfg, "hidden_size", "n_embd")
        heads = _int_key(cfg, "num_attention_heads", "n_head")
        missing = [k for k, v in (("hidden_size", hidden), ("num_attention_heads", heads)) if v is None]
        if missing:
            raise ValueError(f"config: needs 'head_dim', or 'hidden_size' and 'num_attention_heads'; missing {missing}")
        for key, value in (("hidden_size", hidden), ("num_attention_heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"config: {key!r} must be a positive int, got {_shown(value)}")
        head_dim = hidden // heads
        if head_dim > MAX_HEAD_DIM:
            raise ValueError(f"config: the head dimension 'hidden_size' // 'num_attention_heads' must be at most "
                             f"{MAX_HEAD_DIM}, got {_shown(head_dim)}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 2 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"config: 'head_dim' must be an int in [2, {MAX_HEAD_DIM}], "
                         f"got {_shown(head_dim)}")
    return head_dim


def _rotary_dim(cfg, family, head_dim, partial):
    if "rotary_dim" in cfg or family in _ROTARY_DIM_DEFAULT:  # GPT-J, CodeGen
        given = cfg.get("rotary_dim", _ROTARY_DIM_DEFAULT.get(family))
        if isinstance(given, bool) or not isinstance(given, int) or not 2 <= given <= head_dim or given % 2:
            raise ValueError(f"config: 'rotary_dim' must be an even int in [2, head_dim={head_dim}], got {_shown(given)}")
        if partial is not None and int(head_dim * partial) != given:
            raise ValueError(f"config: 'partial_rotary_factor' = {_shown(partial)} gives int({head_dim} * {partial}) = "
                             f"{int(head_dim * partial)}, contradicting 'rotary_dim' = {given}")
        return given
    if partial is None:
        partial = _PARTIAL_DEFAULT.get(family, 1.0)
    rotary_dim = int(head_dim * partial)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"config: rotary dimension int(head_dim * partial_rotary_factor) = int({head_dim} * {partial}) "
            f"= {rotary_dim} must be even and >= 2"
        )
    return rotary_dim


def _mla_rotary_dim(cfg, rope_slice, partial):
    """The whole qk_rope_head_dim slice rotates; a partial_rotary_factor may only say so, as a
    fraction of the full head (qk_nope_head_dim + qk_rope_head_dim, else head_dim)."""
    if partial is None or partial == 1:
        return rope_slice
    nope = cfg.get("qk_nope_head_dim")
    full = nope + rope_slice if isinstance(nope, int) and not isinstance(nope, bool) else cfg.get("head_dim")
    if not isinstance(full, int) or isinstance(full, bool) or int(full * partial) != rope_slice:
        raise ValueError(f"config: 'partial_rotary_factor' = {_shown(partial)} of the {_shown(full)}-wide head does not give "
                         f"'qk_rope_head_dim' = {rope_slice}, the slice the rope rotates")
    return rope_slice


def _rope_dict(cfg, layer_type):
    """The rope description as a fresh dict (empty for plain RoPE), and the key it came from."""
    new, old = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    for key, value in (("rope_parameters", new), ("rope_scaling", old)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"config: {key!r} must be an object or null, got {_shown(value)}")
    if new is not None and _is_nested(new):
        if layer_type is None:
            raise ValueError(f"config: 'rope_parameters' is given per layer type {_sorted(new)}; pass layer_type=")
        if layer_type not in new:
            raise ValueError(f"config: layer_type {_shown(layer_type)} not in 'rope_parameters' {_sorted(new)}")
        if new[layer_type] is None:
            raise ValueError(f"config: layer type {_shown(layer_type)} has no rotary embedding (rope_parameters entry null)")
        new = new[layer_type]
    elif layer_type is not None:
        raise ValueError(f"config: layer_type={_shown(layer_type)} given but 'rope_parameters' is not per layer type")
    if new and old:
        # transformers 5 may keep both; accept only when rope_scaling says nothing new
        normal = dict(old)
        if "type" in normal and "rope_type" not in normal:
            normal["rope_type"] = normal.pop("type")
        clash = _sorted(k for k in normal if not _same(new.get(k), normal[k]))
        if clash:
            raise ValueError(f"config: 'rope_scaling' and 'rope_parameters' disagree on {clash}")
    if new:
        return dict(new), "rope_parameters"
    return dict(old or {}), "rope_scaling"


def _mrope(rope, where, family):
    """``(mrope_section, mrope_interleaved)`` of a multimodal text config, or None;
    removes the keys (and the legacy ``"type": "mrope"``, plain RoPE with sections)
    from ``rope``. A family of MROPE_FAMILIES takes its transformers default when
    the config names no sections, and its own pairing whatever flag it carries
    (as transformers); sections of a family whose transformers code is not
    checked here are refused rather than guessed."""
    section = rope.pop("mrope_section", None)
    flag = rope.pop("mrope_interleaved", None)
    legacy = _is_text(rope.get("type"), "mrope") or _is_text(rope.get("rope_type"), "mrope")
    if legacy:  # transformers reads it as the default rule with sections
        rope.pop("type", None)
        rope.pop("rope_type", None)
    if flag is not None and not isinstance(flag, bool):
        raise ValueError(f"config: '{where}.mrope_interleaved' must be true or false, got {_shown(flag)}")
    if family in MROPE_FAMILIES:
        default, interleaved = MROPE_FAMILIES[family]
        return (default if section is None else section), interleaved
    if section is None and not legacy:
        if flag:
            raise ValueError(f"config: '{where}.mrope_interleaved' without 'mrope_section'")
        return None
    if family is not None:
        raise ValueError(f"config: multimodal sections ('{where}.mrope_section') of model_type {_shown(family)} "
                         f"are not read: its transformers code is not one pyrope checked "
                         f"({', '.join(sorted(MROPE_FAMILIES))} are)")
    if section is None:
        raise ValueError(f"config: '{where}' names the 'mrope' rule but no 'mrope_section'")
    return section, bool(flag)


def _is_nested(params):
    return bool(params) and "rope_type" not in params and "type" not in params and "rope_theta" not in params \
        and all(v is None or isinstance(v, dict) for v in params.values())


def _is_text(value, text):
    """``value == text`` for a config value that may be anything (an array compares elementwise)."""
    return isinstance(value, str) and value == text


def _rule_name(rope, cfg):
    new, old = rope.get("rope_type"), rope.get("type")
    for key, value in (("rope_type", new), ("type", old)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"config: rope {key!r} must be a str, got {_shown(value)}")
    if new is not None and old is not None and new != old:
        raise ValueError(f"config: rope 'type'={_shown(old)} and 'rope_type'={_shown(new)} name different rules")
    name = new if new is not None else old
    if name is None:
        name = "default"
    # transformers' Phi3Config renames Phi-3's early spellings of its LongRoPE
    if _is_text(cfg.get("model_type"), "phi3") and name in ("su", "yarn"):
        name = "longrope"
        rope.pop("type", None)
        rope["rope_type"] = name
    return name


def _same(a, b):
    """``a == b`` of two config values; values whose comparison fails (a NaN-holding numpy
    array, a value containing itself) are not the same."""
    try:
        return bool(a == b)
    except Exception:   # noqa: BLE001 - numpy's ambiguous truth value, RecursionError, a hostile __eq__
        return False


def _one_value(first_key, first, second_key, second):
    """A value that may be given in two places; when both are given they must agree."""
    if first is not None and second is not None and not _same(first, second):
        raise ValueError(f"config: {first_key!r} = {_shown(first)} contradicts {second_key!r} = {_shown(second)}")
    return first if first is not None else second


def _put(rope, where, key, value):
    """Add a top-level value to the rope dict, refusing a different one already there."""
    _one_value(f"{where}.{key}", rope.get(key), key, value)
    rope[key] = value


# --------------------------------------------------------------------------- layers


def _num_layers(cfg, required=True):
    """The layer count, checked against MAX_LAYERS before any per-layer list is built
    (None when ``required`` is false and the config gives no count)."""
    n = _int_key(cfg, "num_hidden_layers", "n_layer")
    if n is None and isinstance(cfg.get("layer_types"), list):
        n = len(cfg["layer_types"])
    if n is None and not required:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LAYERS:
        raise ValueError(f"config: 'num_hidden_layers' must be an int in [1, {MAX_LAYERS}], got {_shown(n)}")
    return n


def _pattern(pattern, key="sliding_window_pattern"):
    if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
        raise ValueError(f"config: {key!r} must be a positive int, got {_shown(pattern)}")
    return pattern


def _pattern_types(n, pattern, key="sliding_window_pattern"):
    pattern = _pattern(pattern, key)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def _dense_prefix(cfg, n):
    """Cohere 2 MoE's ``first_k_dense_replace``: the number of dense layers in front, in [0, n]."""
    first = cfg.get("first_k_dense_replace", 0)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= n:
        raise ValueError(f"config: 'first_k_dense_replace' must be an int in [0, num_hidden_layers={n}], "
                         f"got {_shown(first)}")
    return first


def _strings_per_layer(cfg, key, n):
    """A list of one string per layer (``layer_types``, ``mlp_layer_types``)."""
    values = cfg.get(key)
    if not isinstance(values, list) or not all(isinstance(t, str) for t in values):
        raise ValueError(f"config: {key!r} must be a list of strings, got {_shown(values)}")
    if len(values) != n:
        raise ValueError(f"config: {key!r} has {len(values)} entries for {n} hidden layers")
    return values


def _layer_types(cfg, family, n):
    """The config's layer_types, or what the family's config class derives; None when neither."""
    types = cfg.get("layer_types")
    if types is None:
        if family == "gemma3_text":
            types = _pattern_types(n, cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6)))
        elif family == "gemma4_text":
            types = _pattern_types(n, 6)
        elif family == "cohere2":
            types = _pattern_types(n, cfg.get("sliding_window_pattern", 4))
        elif family == "cohere2_moe":
            first = _dense_prefix(cfg, n)
            types = (_pattern_types(first, cfg.get("prefix_dense_sliding_window_pattern", 1),
                                    "prefix_dense_sliding_window_pattern")
                     + _pattern_types(n - first, cfg.get("sliding_window_pattern", 4)))
        else:
            return None
        types = {"layer_types": types}
    else:
        types = cfg
    types = list(_strings_per_layer(types, "layer_types", n))
    if family == "gemma4_text" and types[-1] != "full_attention":
        warnings.warn(f"config: Gemma 4's last layer must use full attention, got {_shown(types[-1])}; "
                      "taking it as full attention, as transformers does", stacklevel=3)
        types[-1] = "full_attention"
    return types


def _rope_flags(cfg, family, n, types):
    """Per layer: whether its attention applies the rotary embedding at all."""
    if family in ("llama4_text", "smollm3"):
        flags = cfg.get("no_rope_layers")
        interval = cfg.get("no_rope_layer_interval", 4)
        if flags is None or (family == "llama4_text" and flags == []):
            if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
                raise ValueError(f"config: 'no_rope_layer_interval' must be a positive int, got {_shown(interval)}")
            return [(i + 1) % interval != 0 for i in range(n)]
        if not isinstance(flags, list) or len(flags) < n:
            raise ValueError(f"config: 'no_rope_layers' must list 1 (rope) or 0 (no rope) for each of the {n} "
                             f"hidden layers, got {_shown(flags)}")
        for i, flag in enumerate(flags[:n]):
            if not isinstance(flag, numbers.Real) or flag not in (0, 1):  # True/False compare equal to 1/0
                raise ValueError(f"config: 'no_rope_layers[{i}]' must be 1 (rope) or 0 (no rope), got {_shown(flag)}")
        return [bool(flag) for flag in flags[:n]]
    if family in ("cohere2", "cohere2_moe"):
        window = cfg.get("sliding_window", 4096)
        flags = [t == "sliding_attention" and window is not None for t in types]
        prefix = cfg.get("prefix_dense_sliding_window_pattern", 1)
        if family == "cohere2_moe" and _pattern(prefix, "prefix_dense_sliding_window_pattern") == 1:
            mlp = cfg.get("mlp_layer_types")
            if mlp is None or (isinstance(mlp, list) and not mlp):   # absent or empty: as Cohere2MoeConfig derives it
                first = _dense_prefix(cfg, n)
                mlp = ["dense" if i < first else "sparse" for i in range(n)]
            else:
                mlp = _strings_per_layer(cfg, "mlp_layer_types", n)
            flags = [f or mlp[i] == "dense" for i, f in enumerate(flags)]
        return flags
    return [True] * n


def _layer_overrides(cfg, family, i, types):
    """Config attributes layer ``i`` overrides (transformers 5 per_layer_config; Gemma 4's global_head_dim)."""
    per_layer = cfg.get("per_layer_config")
    if per_layer is not None:
        if not isinstance(per_layer, dict):
            raise ValueError(f"config: 'per_layer_config' must be an object, got {_shown(per_layer)}")
        found = per_layer.get(str(i), per_layer.get(i))
        if found is not None and not isinstance(found, dict):
            raise ValueError(f"config: 'per_layer_config[{i}]' must be an object, got {_shown(found)}")
        return dict(found or {})
    if family == "gemma4_text" and types is not None and types[i] == "full_attention":
        return {"head_dim": cfg.get("global_head_dim", _GEMMA4_GLOBAL_HEAD_DIM)}
    return {}


def _type_overrides(cfg, family, layer_type):
    """What the layers of ``layer_type`` override (the first such layer's; Gemma 4's are all alike)."""
    if cfg.get("per_layer_config") is None and family != "gemma4_text":
        return {}
    n = _num_layers(cfg, required=False)   # a count the config gives is checked: it sizes the lists
    types = _layer_types(cfg, family, n) if n is not None else None
    if types is None or layer_type not in types:
        if family == "gemma4_text" and layer_type == "full_attention":
            return {"head_dim": cfg.get("global_head_dim", _GEMMA4_GLOBAL_HEAD_DIM)}
        return {}
    return _layer_overrides(cfg, family, types.index(layer_type), types)
