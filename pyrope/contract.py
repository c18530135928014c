"""The rope contract: a JSON document of everything that defines a position function.

Two caches may share rotated keys only when their contracts are equal; the
fingerprint is a short, stable way to compare them.

Contract (``make_contract``), a dict with exactly these keys::

    format            "pyrope.contract/1"
    layout            str, the coordinate pairing (e.g. "split_half")
    head_dim          int
    rotary_dim        int, 2 * len(inv_freq)
    inv_freq          list of float.hex() strings, exact float64 values
    attention_factor  float.hex() string
    rule              str, transformers rope_type name ("default" for none)
    params            dict, the rule's resolved parameters (JSON numbers)
    original_window   int or null, the pre-training context length
    target_window     int or null, the extended context length

and, only for a sectioned (multimodal) rope, two more::

    mrope_section     list of 3 or 4 ints, rotation pairs per position component
    mrope_interleaved bool, pairs assigned round-robin (Qwen3-VL) or in order

(absent otherwise, so the contracts and fingerprints of other ropes are the
same as before sections existed).

The windows are the rule's (YaRN, Llama 3, LongRoPE, dynamic NTK). The default
rule has none of its own: a rope read from a config then carries the config's
``max_position_embeddings`` as both windows, informational, like
``layout_source`` below: they enter the canonical form as null, so the
fingerprint of a default rope is the same whatever window its model has (the
windows do not change its position function) and the same as before the
windows were carried.

Fingerprint (``fingerprint``): the SHA-256 hex digest of the canonical form, the
contract rebuilt from its own values with every JSON float inside ``params``
replaced by its ``float.hex()`` string, then
``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
allow_nan=False)`` encoded as ASCII.  Hex strings make the bytes independent of
how any Python version prints floats, so the same numbers give the same
fingerprint everywhere.

Two more keys, added by ``with_config_facts`` (``Rope.contract()`` always has
them; ``make_contract`` alone does not)::

    softmax_scale_factor  float.hex() string, the multiplier of the backend's
                          1/sqrt(d) softmax scale (DeepSeek YaRN:
                          mscale(factor, mscale_all_dim)**2; 1.0 otherwise)
    layout_source         str, where the layout came from: "argument",
                          "rope_interleave", "model_type", "default"

``layout_source`` is informational: it never enters the canonical form, so
two ropes with the same layout and numbers have one fingerprint wherever their
layouts came from.  ``softmax_scale_factor`` enters it when it is not exactly
1.0, as ``"softmax_scale_factor": "<hex>"``: it scales attention logits as
the square of ``attention_factor`` does, so a backend that shares keys or
checks a fingerprint must apply it too.  At 1.0 (every rope but a
DeepSeek-style YaRN one) it is left out, so the canonical form, and the
fingerprint, of every rope that has no factor is the one it had before the
key existed.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import json
import math
import numbers
import re

from ._engine.checks import MAX_HEAD_DIM, inv_freq_problem, scale_problem
from .errors import TypeError, ValueError, shown
from . import scaling as _scaling
from .scaling import Resolved

__all__ = ["FORMAT", "make_contract", "fingerprint", "resolved_from_contract", "sections_from_contract",
           "canonical_json", "upgrade"]

FORMAT = "pyrope.contract/1"

# keys with_config_facts adds; resolved_from_contract checks and sets them aside
_FACT_KEYS = ("softmax_scale_factor", "layout_source")
LAYOUT_SOURCES = ("argument", "rope_interleave", "model_type", "default")

_KEYS = ("format", "layout", "head_dim", "rotary_dim", "inv_freq", "attention_factor", "rule", "params",
         "original_window", "target_window")
_SECTION_KEYS = ("mrope_section", "mrope_interleaved")  # present only for sectioned ropes
_WINDOWLESS_RULES = ("default",)  # rules whose windows, when given, do not enter the fingerprint


def make_contract(*, layout: str, head_dim: int, resolved: Resolved, mrope_section=None,
                  mrope_interleaved=False) -> dict:
    """The JSON-serialisable contract of a rope (see the module docstring for the keys).

    ``layout``: the coordinate pairing name; ``head_dim``: coordinates per head;
    ``resolved``: what :func:`pyrope.scaling.resolve` returned;
    ``mrope_section``/``mrope_interleaved``: a sectioned rope's sections (None: none).
    """
    if not isinstance(resolved, Resolved):
        raise TypeError(f"make_contract: 'resolved' must be a Resolved, got {type(resolved).__name__}")
    _check_layout(layout)
    head_dim = _check_window_like("head_dim", head_dim, allow_none=False)
    if resolved.rotary_dim > head_dim:
        raise ValueError(f"make_contract: rotary_dim {resolved.rotary_dim} exceeds head_dim {head_dim}")
    params = copy.deepcopy(resolved.params)
    _check_json_params(params, "params")
    sections = {}
    if mrope_section is not None:
        sections = {"mrope_section": [int(n) for n in mrope_section], "mrope_interleaved": bool(mrope_interleaved)}
    return {
        **sections,
        "format": FORMAT,
        "layout": layout,
        "head_dim": head_dim,
        "rotary_dim": resolved.rotary_dim,
        "inv_freq": [float(v).hex() for v in resolved.inv_freq],
        "attention_factor": float(resolved.attention_factor).hex(),
        "rule": resolved.rule,
        "params": params,
        "original_window": resolved.original_window,
        "target_window": resolved.target_window,
    }


def resolved_from_contract(d: dict):
    """Validate a contract and return ``(layout, head_dim, Resolved)``.

    Refuses (``ValueError``/``TypeError`` naming the key) a wrong format
    version, missing or unknown keys, malformed hex floats, what the kernel
    cannot serve (a frequency that is negative, not finite or above
    ``ROPE_MAX_INV_FREQ``; an attention factor outside ``[ROPE_MIN_SCALE,
    ROPE_MAX_SCALE]``), a ``rotary_dim`` that is not ``2 * len(inv_freq)`` or
    exceeds ``head_dim``.
    """
    if not isinstance(d, dict):
        raise TypeError(f"contract must be a dict, got {type(d).__name__}")
    config_facts_from_contract(d)
    d = {k: v for k, v in d.items() if k not in _FACT_KEYS}
    if not isinstance(d.get("format"), str) or d.get("format") != FORMAT:
        raise ValueError(f"contract: 'format' must be {FORMAT!r}, got {_shown(d.get('format'))}")
    missing = [k for k in _KEYS if k not in d]
    unknown = _scaling._sorted_keys(k for k in d if k not in _KEYS and k not in _SECTION_KEYS)
    if missing:
        raise ValueError(f"contract: missing key(s) {missing}")
    if unknown:
        raise ValueError(f"contract: unknown key(s) {_shown(unknown)}")
    layout = d["layout"]
    _check_layout(layout)
    head_dim = _check_window_like("head_dim", d["head_dim"], allow_none=False)
    rotary_dim = _check_window_like("rotary_dim", d["rotary_dim"], allow_none=False)
    for key, value in (("head_dim", head_dim), ("rotary_dim", rotary_dim)):   # as Rope's
        if value > MAX_HEAD_DIM:
            raise ValueError(f"contract: {key!r} must be at most {MAX_HEAD_DIM}, got {value}")
    freqs = d["inv_freq"]
    if not isinstance(freqs, list) or not freqs:
        raise ValueError(f"contract: 'inv_freq' must be a non-empty list of hex strings, got {_shown(freqs)}")
    if 2 * len(freqs) != rotary_dim:   # the count before any entry is read
        raise ValueError(f"contract: 'rotary_dim' {rotary_dim} must be 2 * len(inv_freq) = {2 * len(freqs)}")
    inv_freq = [_from_hex(f"inv_freq[{i}]", s) for i, s in enumerate(freqs)]
    for i, v in enumerate(inv_freq):
        why = inv_freq_problem(v)
        if why is not None:
            raise ValueError(f"contract: 'inv_freq[{i}]' = {freqs[i]!r} ({v!r}) {why}")
    if rotary_dim != 2 * len(inv_freq):
        raise ValueError(f"contract: 'rotary_dim' {rotary_dim} must be 2 * len(inv_freq) = {2 * len(inv_freq)}")
    if rotary_dim > head_dim:
        raise ValueError(f"contract: 'rotary_dim' {rotary_dim} exceeds 'head_dim' {head_dim}")
    attention = _from_hex("attention_factor", d["attention_factor"])
    why = scale_problem(attention)
    if why is not None:
        raise ValueError(f"contract: 'attention_factor' = {d['attention_factor']!r} ({attention!r}) {why}")
    rule = d["rule"]
    if not isinstance(rule, str) or not rule:
        raise ValueError(f"contract: 'rule' must be a non-empty str, got {_shown(rule)}")
    params = d["params"]
    if not isinstance(params, dict):
        raise ValueError(f"contract: 'params' must be an object, got {_shown(params)}")
    _check_json_params(params, "params")
    resolved = Resolved(
        inv_freq=inv_freq,
        attention_factor=attention,
        rule=rule,
        params=copy.deepcopy(params),
        original_window=_check_window_like("original_window", d["original_window"]),
        target_window=_check_window_like("target_window", d["target_window"]),
    )
    return layout, head_dim, resolved


def sections_from_contract(d: dict):
    """``(mrope_section list or None, mrope_interleaved)`` of a contract whose
    other keys :func:`resolved_from_contract` checks; the sections themselves
    are checked against the rope by ``Rope.from_contract``."""
    if "mrope_section" not in d:
        if "mrope_interleaved" in d:
            raise ValueError("contract: 'mrope_interleaved' without 'mrope_section'")
        return None, False
    section = d["mrope_section"]
    if not isinstance(section, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in section):
        raise ValueError(f"contract: 'mrope_section' must be a list of integers, got {_shown(section)}")
    interleaved = d.get("mrope_interleaved", False)
    if not isinstance(interleaved, bool):
        raise ValueError(f"contract: 'mrope_interleaved' must be true or false, got {_shown(interleaved)}")
    return list(section), interleaved


def canonical_json(contract: dict) -> str:
    """The canonical text hashed by :func:`fingerprint` (validated first)."""
    layout, head_dim, resolved = resolved_from_contract(contract)
    section, interleaved = sections_from_contract(contract)
    clean = make_contract(layout=layout, head_dim=head_dim, resolved=resolved, mrope_section=section,
                          mrope_interleaved=interleaved)
    clean["params"] = _hex_floats(clean["params"])
    if clean["rule"] in _WINDOWLESS_RULES:  # informational windows (see the module docstring)
        clean["original_window"] = clean["target_window"] = None
    factor = config_facts_from_contract(contract)[0]
    if factor != 1.0:  # layout_source never enters the canonical form
        clean["softmax_scale_factor"] = factor.hex()
    return json.dumps(clean, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def fingerprint(contract: dict) -> str:
    """SHA-256 hex digest of :func:`canonical_json` of the contract."""
    return hashlib.sha256(canonical_json(contract).encode("ascii")).hexdigest()


def with_config_facts(contract: dict, *, softmax_scale_factor=1.0, layout_source="argument") -> dict:
    """``contract`` with ``softmax_scale_factor`` (float.hex) and ``layout_source`` added (see the module docstring)."""
    factor = _check_softmax_factor(softmax_scale_factor)
    _check_layout_source(layout_source)
    return {**contract, "softmax_scale_factor": factor.hex(), "layout_source": layout_source}


def config_facts_from_contract(d: dict):
    """``(softmax_scale_factor, layout_source)`` of a contract: ``1.0`` and ``"argument"``
    when absent (contracts made before the keys existed)."""
    factor = 1.0
    if "softmax_scale_factor" in d:
        factor = _check_softmax_factor(_from_hex("softmax_scale_factor", d["softmax_scale_factor"]))
    source = d.get("layout_source", "argument")
    _check_layout_source(source)
    return factor, source


# --------------------------------------------------------------------------- older releases

# How far an older release's numbers may be from today's for the same rule and
# parameters: 0.1.0 evaluated powers with numpy (or the C library) and rounded
# twice, within 4 ulp (2**-50) of the correctly rounded values on the family
# configs; 2**-40 leaves room and is still far below any real change of rule.
UPGRADE_TOLERANCE = 2.0 ** -40


def upgrade(contract: dict) -> dict:
    """The contract that today's rules give for the rule and parameters an older
    contract names, after checking that its numbers are those, to within rounding.

    Contracts written by pyrope 0.1.0 stay loadable as they are
    (:meth:`pyrope.Rope.from_contract` keeps their numbers and fingerprint), but
    0.1.0 computed frequencies with CPU-dependent powers, so the same config now
    gives numbers a few ulp apart and another fingerprint (docs/ACCURACY.md).
    ``upgrade`` recomputes ``inv_freq``, the attention factor and the softmax
    scale factor from ``rule`` and ``params``, requires every one of them within
    ``UPGRADE_TOLERANCE`` (relative) of the old value, and returns the new
    contract: its fingerprint is the one a new Rope from the same config has.
    A contract whose numbers its rule does not give (edited by hand, or a rule
    this release computes differently) raises ``ValueError`` naming the key.
    The keys cached under an old contract were rotated by angles at most
    ``m * |w_old - w_new|`` apart (at most ``1.2e-11`` rad at position ``10**5`` on
    the family configs), far below float32's resolution.
    """
    layout, head_dim, old = resolved_from_contract(contract)
    section, interleaved = sections_from_contract(contract)
    softmax, source = config_facts_from_contract(contract)
    try:
        rule = _rule_of(old, contract)
        new = _scaling.resolve(rule, head_dim=head_dim, rotary_dim=old.rotary_dim, base=old.params["base"])
    except (builtins.KeyError, builtins.TypeError, builtins.ValueError) as exc:
        raise ValueError(f"contract: its 'rule' {_shown(old.rule)} and 'params' do not rebuild a rule: {exc}") from None
    _close("inv_freq", old.inv_freq.tolist(), new.inv_freq.tolist())
    _close("attention_factor", [old.attention_factor], [new.attention_factor])
    if softmax != 1.0:  # DeepSeek's yarn: mscale(factor, mscale_all_dim) squared, its log now correctly rounded
        if old.rule != "yarn" or not old.params.get("mscale_all_dim"):
            raise ValueError(f"contract: 'softmax_scale_factor' {_shown(softmax)} without a yarn rule's mscale_all_dim")
        softmax_new = _scaling._yarn_m(new.params["factor"], float(old.params["mscale_all_dim"])) ** 2
        _close("softmax_scale_factor", [softmax], [softmax_new])
        softmax = softmax_new
    _close_params("params", old.params, new.params)
    fresh = make_contract(layout=layout, head_dim=head_dim, resolved=new, mrope_section=section,
                          mrope_interleaved=interleaved)
    fresh["original_window"], fresh["target_window"] = contract["original_window"], contract["target_window"]
    return with_config_facts(fresh, softmax_scale_factor=softmax, layout_source=source)


def _rule_of(resolved, contract):
    """The rule object whose resolution gave ``resolved`` (from its name and parameters)."""
    p, name = resolved.params, resolved.rule
    given = resolved.attention_factor
    S = _scaling
    if name == "default":
        return None
    if name == "linear":
        return S.Linear(p["factor"])
    if name == "ntk":
        return S.NTK(p["factor"])
    if name == "dynamic":
        if "alpha" in p:
            return S.Dynamic(alpha=p["alpha"])
        return S.Dynamic(p["factor"], p["max_position_embeddings"], seq_len=p["seq_len"])
    if name == "yarn":
        return S.Yarn(factor=p["factor"], original_max_position_embeddings=p["original_max_position_embeddings"],
                      max_position_embeddings=contract["target_window"], beta_fast=p["beta_fast"],
                      beta_slow=p["beta_slow"], mscale=p["mscale"], mscale_all_dim=p["mscale_all_dim"],
                      attention_factor=given if p["attention_factor_from"] == "given" else None,
                      truncate=p["truncate"])
    if name == "llama3":
        return S.Llama3(p["factor"], p["low_freq_factor"], p["high_freq_factor"],
                        p["original_max_position_embeddings"], contract["target_window"])
    if name == "longrope":
        original = p["original_max_position_embeddings"]
        return S.LongRope(p["ext_factors"], p["ext_factors"], original, contract["target_window"],
                          factor=p["factor"], attention_factor=given if p["attention_factor_from"] == "given" else None,
                          seq_len=original + 1 if p["variant"] == "long" else None)
    if name == "proportional":
        return S.Proportional(p["factor"], p["partial_rotary_factor"])
    if name == "freq_factors":
        return S.FreqFactors(p["factors"], given)
    raise builtins.ValueError(f"no rule is named {_shown(name)}")


def _close(key, old, new):
    if len(old) != len(new):
        raise ValueError(f"contract: {key!r} has {len(old)} entries, its rule gives {len(new)}")
    for i, (a, b) in enumerate(zip(old, new)):
        if not abs(a - b) <= UPGRADE_TOLERANCE * abs(b):
            where = f"{key}[{i}]" if len(old) > 1 else key
            raise ValueError(f"contract: {where!r} = {_shown(a)} is not what its rule gives ({_shown(b)}), "
                             f"even within {UPGRADE_TOLERANCE!r} relative")


def _close_params(path, old, new):
    if isinstance(old, float) and isinstance(new, float):
        return _close(path, [old], [new])
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            raise ValueError(f"contract: {path!r} has keys {_shown(_scaling._sorted_keys(old))}, its rule gives "
                             f"{_shown(_scaling._sorted_keys(new))}")
        for k in old:
            _close_params(f"{path}.{k}", old[k], new[k])
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _close_params(f"{path}[{i}]", a, b)
        return None
    if old != new:
        raise ValueError(f"contract: {path!r} = {_shown(old)}, its rule gives {_shown(new)}")
    return None


# --------------------------------------------------------------------------- helpers


def _check_softmax_factor(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"contract: 'softmax_scale_factor' must be a finite number > 0, got {_shown(value)}")
    return float(value)


def _check_layout_source(value):
    if not isinstance(value, str) or value not in LAYOUT_SOURCES:
        raise ValueError(f"contract: 'layout_source' must be one of {', '.join(map(repr, LAYOUT_SOURCES))}, "
                         f"got {_shown(value)}")


def _check_layout(layout):
    if not isinstance(layout, str) or not layout:
        raise ValueError(f"contract: 'layout' must be a non-empty str, got {_shown(layout)}")


_MAX_INT = 2**63 - 1  # ints in a contract are int64: every consumer can hold them

# float.hex()'s forms: an optional sign, "0x", hex digits with an optional
# fraction, a binary exponent; "inf", "-inf" and "nan" as it writes them (the
# callers refuse those against the kernel's limits, naming them). float.fromhex
# alone also takes "1.5" (read as 0x1.5 = 1.3125), "Infinity" and surrounding
# spaces: a contract edited by hand with a decimal number would be read as
# another number without a word.
_HEX_FLOAT = re.compile(r"[+-]?0x[0-9a-f]+(\.[0-9a-f]*)?p[+-]?[0-9]+|-?inf|nan", re.IGNORECASE)


_shown = shown   # repr bounded for a message, the size of an integer too long to print


def _check_window_like(key, value, *, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_INT:
        raise ValueError(f"contract: {key!r} must be a positive int64{' or null' if allow_none else ''}, "
                         f"got {_shown(value)}")
    return int(value)


def _from_hex(key, text):
    if not isinstance(text, str):
        raise ValueError(f"contract: {key!r} must be a float.hex() string, got {_shown(text)}")
    if len(text) > 64 or not _HEX_FLOAT.fullmatch(text):
        shown = text if len(text) <= 64 else text[:61] + "..."
        raise ValueError(f"contract: {key!r} must be a float.hex() string such as '0x1.8000000000000p+0', "
                         f"got {shown!r}")
    try:
        value = float.fromhex(text)
    except (builtins.ValueError, builtins.OverflowError):
        raise ValueError(f"contract: {key!r} is not a hex float: {text!r}") from None
    return value  # its range is checked against the kernel's limits by the caller


# How deep a contract's params may nest: a rule's params are a dict of numbers and
# lists, two levels; the bound keeps the copies and walks over them (which recurse)
# far from the recursion limit, and ends a walk around a cycle.
MAX_PARAMS_DEPTH = 32


def _check_json_params(root, root_path):
    """params may hold only JSON values: str, bool, int, finite float, None, lists and str-keyed
    dicts, nested at most MAX_PARAMS_DEPTH deep (walked without recursion)."""
    stack = [(root, root_path, 0)]
    while stack:
        value, path, depth = stack.pop()
        if value is None or isinstance(value, (str, bool)):
            continue
        if isinstance(value, int):
            if not -_MAX_INT - 1 <= value <= _MAX_INT:
                raise ValueError(f"contract: {path} must be an int64, got {_shown(value)}")
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"contract: {path} must be finite, got {value!r}")
            continue
        if isinstance(value, (list, dict)) and depth >= MAX_PARAMS_DEPTH:
            raise ValueError(f"contract: {path} nests deeper than {MAX_PARAMS_DEPTH} levels")
        if isinstance(value, list):   # pushed last first: entries are checked in order
            stack.extend((value[i], f"{path}[{i}]", depth + 1) for i in reversed(range(len(value))))
            continue
        if isinstance(value, dict):
            for k in value:
                if not isinstance(k, str):
                    raise ValueError(f"contract: {path} keys must be str, got {_shown(k)}")
            stack.extend((value[k], f"{path}.{k}", depth + 1) for k in reversed(list(value)))
            continue
        if isinstance(value, numbers.Real):
            raise ValueError(f"contract: {path} must be a plain int or float, got {type(value).__name__}")
        raise ValueError(f"contract: {path} is not a JSON value: {_shown(value)}")


def _hex_floats(value):
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, list):
        return [_hex_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _hex_floats(v) for k, v in value.items()}
    return value
