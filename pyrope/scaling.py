"""Long-context frequency rules: which frequency each rotation pair gets.

``resolve(scaling, head_dim=, rotary_dim=, base=)`` turns a scaling description
into a :class:`Resolved`: the float64 inverse-frequency vector, the attention
factor that multiplies cos and sin, and the rule's resolved parameters.

``scaling`` is ``None`` (original RoPE), a transformers-style dict
(``{"rope_type": "yarn", "factor": 4.0, ...}``, ``"type"`` accepted as the old
spelling), a rule name alone for rules without required keys
(``"proportional"``), one of the rule objects below, or an already
:class:`Resolved` (taken as is, e.g. from a contract).  Dict keys are the rule objects'
field names, plus ``rope_type``/``type`` and, as in transformers 5's
``rope_parameters``, ``rope_theta`` and ``partial_rotary_factor`` (checked
against ``base`` and ``rotary_dim``).  Unknown rules, unknown keys, missing
keys and contradictory values raise ``ValueError`` naming the key; wrong types
raise ``TypeError``.  So does a rule whose frequencies or attention factor the
kernel cannot serve (limits of ``pyrope.h``): the message names the parameter
that produced the value, the value and the limit.

Notation in the docstrings: ``d`` = rotary_dim, ``b`` = base,
``theta_i = b ** (-2i/d)`` for pair ``i = 0 .. d/2 - 1``, ``s`` = factor,
``L0`` = original window.  Definitions follow transformers'
``modeling_rope_utils`` (4.5x and 5); arithmetic here is float64, where
transformers rounds through float32.  Powers and logarithms are correctly
rounded (``_correctly_rounded``: ``theta_i`` is the double nearest to the exact
``b ** (-2i/d)``), and the rest is IEEE arithmetic, so every rule gives the
same bits on every CPU, numpy build and operating system (docs/ACCURACY.md).
"""

from __future__ import annotations

import builtins
import math
import numbers
import operator
import sys
import warnings
from collections import namedtuple
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar

import numpy as np

from ._rules import correctly_rounded as _correctly_rounded
from ._engine.checks import MAX_HEAD_DIM, first_inv_freq_problem, scale_problem
from ._rules.dynamic import dynamic_seq_len
from ._engine.binding import MAX_INV_FREQ
from .errors import OverflowError, TypeError, ValueError, shown

__all__ = [
    "Resolved",
    "resolve",
    "rule_from_dict",
    "RULES",
    "Default",
    "Linear",
    "NTK",
    "Dynamic",
    "Yarn",
    "Llama3",
    "LongRope",
    "Proportional",
    "FreqFactors",
    "dynamic_seq_len",
]

# Largest window, length or other count a rule reads: int64, so that every ratio
# of two of them is a finite float64.
_MAX_INT = 2**63 - 1

# every logarithm a rule takes, correctly rounded: math.log is the C library's,
# which may differ by a last bit between CPUs and systems
_log = _correctly_rounded.log


# --------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class Resolved:
    """What a rule computed: everything that defines the position function.

    ``inv_freq``: float64, read-only; pair ``i`` turns ``inv_freq[i]`` radians per
    token, and ``rotary_dim = 2 * len(inv_freq)``.  ``attention_factor``
    multiplies cos and sin (so attention logits scale by its square).  ``rule``
    is the transformers ``rope_type`` name; ``params`` the rule's resolved
    parameters (JSON-serialisable); ``original_window`` / ``target_window`` the
    pre-training and extended context lengths when the rule has them.

    What the kernel cannot serve is refused here (``ValueError`` naming the
    value and the limit, both from ``pyrope.h``): a frequency that is negative,
    not finite or above ``ROPE_MAX_INV_FREQ``, an attention factor outside
    ``[ROPE_MIN_SCALE, ROPE_MAX_SCALE]``.  When a rule produced it,
    :func:`resolve` names the rule's parameter instead.
    """

    inv_freq: np.ndarray
    attention_factor: float
    rule: str
    params: dict
    original_window: int | None = None
    target_window: int | None = None

    def __post_init__(self):
        if not isinstance(self.rule, str) or not self.rule:
            raise TypeError(f"Resolved: rule must be a non-empty str, got {_shown(self.rule)}")
        who = f"Resolved (rule {_shown(self.rule)})"
        # the count and the entries' kinds before the copy: np.array of a 2**40 broadcast view
        # (or of a list holding one) would allocate terabytes
        given = self.inv_freq
        if isinstance(given, np.ndarray):
            if given.ndim != 1 or given.size == 0:
                raise ValueError(f"{who}: inv_freq must be a non-empty 1-D vector, got shape {given.shape}")
            _count("inv_freq", given, who, "vector of real numbers")
        else:
            if isinstance(given, (list, tuple)) and not given:
                raise ValueError(f"{who}: inv_freq must be a non-empty 1-D vector, got {_shown(given)}")
            _count("inv_freq", given, who, "vector of real numbers")
            if not all(isinstance(v, numbers.Real) or (isinstance(v, np.ndarray) and v.ndim == 0) for v in given):
                raise TypeError(f"{who}: inv_freq must be a vector of real numbers, got {_shown(given)}")
        try:
            arr = np.array(self.inv_freq, dtype=np.float64, copy=True)
        except (builtins.TypeError, builtins.ValueError, builtins.OverflowError):
            raise TypeError(f"{who}: inv_freq must be a vector of real numbers, got {_shown(self.inv_freq)}") from None
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"{who}: inv_freq must be a non-empty 1-D vector, got shape {arr.shape}")
        problem = first_inv_freq_problem(arr)
        if problem is not None:
            i, value, why = problem
            raise _limit_error(f"{who}: inv_freq[{i}] = {value!r} {why}", f"inv_freq[{i}]", value, why, i)
        arr.flags.writeable = False
        object.__setattr__(self, "inv_freq", arr)
        factor = _real("attention_factor", self.attention_factor, who)
        why = scale_problem(factor)
        if why is not None:
            raise _limit_error(f"{who}: attention_factor = {factor!r} {why}", "attention_factor", factor, why)
        object.__setattr__(self, "attention_factor", factor)
        if not isinstance(self.params, dict):
            raise TypeError(f"{who}: params must be a dict, got {type(self.params).__name__}")
        for name in ("original_window", "target_window"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _positive_int(name, value, "Resolved"))

    @property
    def rotary_dim(self) -> int:
        """Number of rotated coordinates: ``2 * len(inv_freq)``."""
        return 2 * self.inv_freq.shape[0]

    def __eq__(self, other):
        if not isinstance(other, Resolved):
            return NotImplemented
        return (
            self.inv_freq.shape == other.inv_freq.shape
            and self.inv_freq.tobytes() == other.inv_freq.tobytes()
            and self.attention_factor == other.attention_factor
            and self.rule == other.rule
            and self.params == other.params
            and self.original_window == other.original_window
            and self.target_window == other.target_window
        )

    def __hash__(self):
        return hash((self.inv_freq.tobytes(), self.attention_factor, self.rule,
                     self.original_window, self.target_window))


# --------------------------------------------------------------------------- argument checks


_Limit = namedtuple("_Limit", "key value why index")


def _limit_error(message, key, value, why, index=None):
    """A ``ValueError`` for a resolved value the kernel cannot serve. Its
    ``limit`` attribute ``(key, value, why, index)`` names the value (``key``
    ``"inv_freq[3]"`` or ``"attention_factor"``) and what is wrong with it (naming
    the limit); :func:`resolve` re-raises it naming the rule's parameter."""
    exc = ValueError(message)
    exc.limit = _Limit(key, value, why, index)
    return exc


# ``repr(value)`` bounded for a message; an integer too long to print usefully (or at all:
# Python refuses to convert ints of more than 4300 digits) is described by its size
_shown = shown


def _sorted_keys(keys):
    """Keys in order for a message: sorted as strings (a dict's keys need not be str, nor
    comparable with each other, which ``sorted`` refuses); str keys in their usual order."""
    return sorted(keys, key=lambda k: (not isinstance(k, str), k if isinstance(k, str) else _shown(k)))


def _real(name, value, rule):
    """``value`` as a float (an int too large for one becomes inf); bools and non-numbers are a TypeError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{rule}: {name!r} must be a real number, got {_shown(value)} ({type(value).__name__})")
    try:
        return float(value)
    except builtins.OverflowError:
        return math.inf if value > 0 else -math.inf


def _positive_real(name, value, rule, *, allow_zero=False):
    """``value`` as a float, which must be finite and > 0 (>= 0 with allow_zero)."""
    out = _real(name, value, rule)
    if not math.isfinite(out) or out < 0 or (out == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{rule}: {name!r} must be finite and {bound}, got {_shown(value)}")
    return out


def _attention_factor(name, value, rule):
    """An attention factor given to a rule: a real number in the kernel's range."""
    out = _real(name, value, rule)
    why = scale_problem(out)
    if why is not None:
        raise ValueError(f"{rule}: {name!r} = {_shown(value)} {why}")
    return out


def _positive_int(name, value, rule):
    """``value`` as an int in ``[1, 2**63 - 1]``; bools and floats are refused (no silent
    truncation), an int beyond int64 is an ``OverflowError``."""
    if isinstance(value, bool):
        raise TypeError(f"{rule}: {name!r} must be an int, got {_shown(value)}")
    try:
        out = operator.index(value)
    except builtins.TypeError:
        raise TypeError(f"{rule}: {name!r} must be an int, got {_shown(value)} ({type(value).__name__})") from None
    if out < 1:
        raise ValueError(f"{rule}: {name!r} must be >= 1, got {_shown(out)}")
    if out > _MAX_INT:
        raise OverflowError(f"{rule}: {name!r} must be at most 2**63 - 1 (int64), got {_shown(out)}")
    return out


def _optional(check, name, value, rule, **kw):
    return None if value is None else check(name, value, rule, **kw)


# One frequency per rotation pair, and a head has at most MAX_HEAD_DIM / 2 pairs: a
# longer list of factors or frequencies can fit no Rope, and is refused by its count
# before an element is read or copied.
MAX_PAIRS = MAX_HEAD_DIM // 2


def _count(name, value, rule, what="list of numbers"):
    """``len(value)`` of a non-empty sequence (not a str, bytes or dict) of at most MAX_PAIRS
    entries, read without touching an element (a broadcast view of 2**40 is refused at once)."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
        raise TypeError(f"{rule}: {name!r} must be a non-empty {what}, got {_shown(value)}")
    try:
        n = len(value)
    except (builtins.TypeError, builtins.OverflowError):   # a 0-d array; a len beyond ssize_t
        raise TypeError(f"{rule}: {name!r} must be a non-empty {what}, got {_shown(value)}") from None
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise TypeError(f"{rule}: {name!r} must be a 1-D {what}, got an array of shape {value.shape}")
    if n == 0:
        raise TypeError(f"{rule}: {name!r} must be a non-empty {what}, got {_shown(value)}")
    if n > MAX_PAIRS:
        raise ValueError(f"{rule}: {name!r} must have at most {MAX_PAIRS} entries (one per rotation pair of a "
                         f"head of at most {MAX_HEAD_DIM}), got {n}")
    return n


def _factor_list(name, value, rule):
    """A non-empty list of finite positive numbers (at most one per rotation pair), as a tuple of floats."""
    _count(name, value, rule)
    return tuple(_positive_real(f"{name}[{i}]", v, rule) for i, v in enumerate(value))


def _check_pairs(name, factors, rule, d):
    """One factor per rotation pair: ``len(factors) == d // 2``."""
    if len(factors) != d // 2:
        raise ValueError(
            f"{rule}: {name!r} must have rotary_dim/2 = {d // 2} entries (one per rotation pair), got {len(factors)}"
        )


def _base_theta(base, d):
    """``theta_i = b ** (-2i/d)`` for the ``d // 2`` pairs, float64, each the correctly
    rounded double of the exact power (the same bits on every machine)."""
    return np.array(_correctly_rounded.pair_frequencies(base, d), dtype=np.float64)


def _check_base_change(d, rule):
    if d <= 2:
        raise ValueError(f"{rule}: rotary_dim must be > 2 for a base change (exponent d/(d-2)), got {d}")


def _target(max_position_embeddings, original, factor, rule, source="'factor'"):
    """The extended window: the configured one when it extends the original, else factor * original
    (``OverflowError`` naming ``source``, what gave the factor, when that is beyond int64)."""
    if max_position_embeddings is not None and max_position_embeddings > original:
        return max_position_embeddings
    target = original * factor
    if not target < _MAX_INT:
        raise OverflowError(f"{rule}: {source} = {factor!r} makes the extended window original * factor = "
                            f"{original} * {factor!r} = {target:g} tokens, beyond int64")
    return max(1, int(round(target)))


def _scaled_base(base, growth, d, rule, source, growth_name):
    """``base * growth ** (d/(d-2))``, the base a base change gives, correctly rounded
    (the exponent exact, one rounding); ``OverflowError`` naming ``source`` (the
    parameter that gave ``growth``, called ``growth_name`` in the hint) when it is
    not a finite float64 > 0: every pair but the first would then turn at
    frequency 0 (or infinity)."""
    _check_base_change(d, rule)
    exponent = d / (d - 2)
    # a growth <= 0 (cancellation in s*L/W - (s-1)) would make a complex power
    if 0.0 < growth < math.inf:
        scaled = _correctly_rounded.power(growth, d, d - 2, times=base)
    else:
        scaled = math.inf if growth == math.inf else math.nan
    if not 0.0 < scaled < math.inf:  # a base in (0, 1] is left to the frequency limit, which names it
        limit = (sys.float_info.max / base) ** (1 / exponent)
        raise OverflowError(f"{rule}: {source} makes the scaled base {base!r} * {growth!r} ** {exponent:.6g} = "
                            f"{scaled!r}, not a finite float64 > 0: the pairs would turn at frequency 0; "
                            f"{growth_name} must be at most {limit:.6g}")
    return scaled


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Default:
    """Original RoPE: ``inv_freq_i = b ** (-2i/d)``; attention factor 1."""

    rope_type: ClassVar[str] = "default"

    def _resolve(self, head_dim, d, base):
        return Resolved(_base_theta(base, d), 1.0, self.rope_type, {"base": base})


@dataclass(frozen=True)
class Linear:
    """Position interpolation (PI): ``inv_freq_i = theta_i / s``; attention factor 1."""

    factor: float
    rope_type: ClassVar[str] = "linear"

    def __post_init__(self):
        object.__setattr__(self, "factor", _positive_real("factor", self.factor, self.rope_type))

    def _blame(self, limit, head_dim, d, base):
        return _divisor_blame(limit, "'factor'", self.factor, _base_theta(base, d))

    def _resolve(self, head_dim, d, base):
        return Resolved(_base_theta(base, d) / self.factor, 1.0, self.rope_type,
                        {"base": base, "factor": self.factor})


@dataclass(frozen=True)
class NTK:
    """Static NTK-aware base change: ``b' = b * s ** (d/(d-2))``, ``inv_freq_i = b' ** (-2i/d)``.

    Pair 0 keeps frequency 1, the slowest pair is divided by exactly ``s``.  Not a
    transformers rope_type (transformers only ships the dynamic variant).
    """

    factor: float
    rope_type: ClassVar[str] = "ntk"

    def __post_init__(self):
        object.__setattr__(self, "factor", _positive_real("factor", self.factor, self.rope_type))

    def _blame(self, limit, head_dim, d, base):
        return f"'factor' = {self.factor!r}", None

    def _resolve(self, head_dim, d, base):
        scaled = _scaled_base(base, self.factor, d, self.rope_type, f"'factor' = {self.factor!r}", "'factor'")
        return Resolved(_base_theta(scaled, d), 1.0, self.rope_type,
                        {"base": base, "factor": self.factor, "scaled_base": scaled})


@dataclass(frozen=True)
class Dynamic:
    """transformers' dynamic NTK: the base grows with the current length.

    ``L = max(seq_len, max_position_embeddings)`` (``seq_len`` None: the window),
    ``b' = b * (s * L / max_position_embeddings - (s - 1)) ** (d/(d-2))``,
    ``inv_freq_i = b' ** (-2i/d)``; at or below the window ``b' = b``.  Attention
    factor 1.  Keys already rotated under one ``seq_len`` are not valid under
    another: resolve again (and re-rotate) when the length grows.  transformers
    does not use each call's own length: its rotary modules keep the longest
    length seen until a call is shorter than the window; :func:`dynamic_seq_len`
    gives that length, to pass as ``seq_len``.

    With ``alpha`` (HunYuan's configs: ``{"type": "dynamic", "alpha": 1000.0,
    ...}``) the base change is fixed, ``b' = b * alpha ** (d/(d-2))``, whatever
    the length, as vLLM's ``DynamicNTKAlphaRotaryEmbedding`` and transformers'
    HunYuan ``ntk_alpha`` rope compute it; ``factor``, ``max_position_embeddings``
    and ``seq_len`` are then not used, nor are the ``beta_fast``, ``beta_slow``,
    ``mscale`` and ``mscale_all_dim`` keys those configs carry (transformers
    ignores them too; attention factor 1).
    """

    factor: float | None = None
    max_position_embeddings: int | None = None
    seq_len: int | None = None
    alpha: float | None = None
    rope_type: ClassVar[str] = "dynamic"

    def __post_init__(self):
        r = self.rope_type
        object.__setattr__(self, "alpha", _optional(_positive_real, "alpha", self.alpha, r))
        object.__setattr__(self, "factor", _optional(_positive_real, "factor", self.factor, r))
        object.__setattr__(self, "max_position_embeddings",
                           _optional(_positive_int, "max_position_embeddings", self.max_position_embeddings, r))
        object.__setattr__(self, "seq_len", _optional(_positive_int, "seq_len", self.seq_len, r))
        if self.alpha is None:
            missing = [k for k in ("factor", "max_position_embeddings") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"{r}: missing required key(s) {missing} (or 'alpha', a fixed base change)")

    def _resolve(self, head_dim, d, base):
        if self.alpha is not None:
            scaled = _scaled_base(base, self.alpha, d, self.rope_type, f"'alpha' = {self.alpha!r}", "'alpha'")
            params = {"base": base, "alpha": self.alpha, "scaled_base": scaled}
            return Resolved(_base_theta(scaled, d), 1.0, self.rope_type, params)
        window = self.max_position_embeddings
        length = window if self.seq_len is None else max(self.seq_len, window)
        source = f"'factor' = {self.factor!r} at 'seq_len' {length} over 'max_position_embeddings' {window}"
        scaled = _scaled_base(base, self.factor * length / window - (self.factor - 1), d, self.rope_type,
                              source, "factor * seq_len / max_position_embeddings - (factor - 1)")
        params = {"base": base, "factor": self.factor, "max_position_embeddings": window,
                  "seq_len": length, "scaled_base": scaled}
        return Resolved(_base_theta(scaled, d), 1.0, self.rope_type, params, window, length)


@dataclass(frozen=True)
class Yarn:
    """YaRN as transformers defines it.

    ``s`` = factor, or ``max_position_embeddings / L0`` when no factor is given;
    ``L0`` = original_max_position_embeddings, or max_position_embeddings when
    absent.  Ramp bounds, pair indices:
    ``i(r) = d * ln(L0 / (2 pi r)) / (2 ln b)``, ``low = i(beta_fast)``,
    ``high = i(beta_slow)``, floored/ceiled when ``truncate``, clamped to
    ``[0, d-1]``; ``high += 0.001`` if equal.
    ``g_i = clamp((i - low) / (high - low), 0, 1)`` and
    ``inv_freq_i = g_i * theta_i / s + (1 - g_i) * theta_i``.
    Attention factor: ``attention_factor`` if given; else, when mscale and
    mscale_all_dim are both non-zero, ``m(s, mscale) / m(s, mscale_all_dim)``;
    else ``m(s, 1)``, with ``m(s, k) = 0.1 k ln s + 1`` (1 when ``s <= 1``).
    """

    factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    rope_type: ClassVar[str] = "yarn"

    def __post_init__(self):
        r = self.rope_type
        pos = _positive_real
        object.__setattr__(self, "factor", _optional(pos, "factor", self.factor, r))
        for name in ("original_max_position_embeddings", "max_position_embeddings"):
            object.__setattr__(self, name, _optional(_positive_int, name, getattr(self, name), r))
        object.__setattr__(self, "beta_fast", pos("beta_fast", self.beta_fast, r))
        object.__setattr__(self, "beta_slow", pos("beta_slow", self.beta_slow, r))
        for name in ("mscale", "mscale_all_dim"):
            object.__setattr__(self, name, _optional(pos, name, getattr(self, name), r, allow_zero=True))
        object.__setattr__(self, "attention_factor",
                           _optional(_attention_factor, "attention_factor", self.attention_factor, r))
        if not isinstance(self.truncate, bool):
            raise TypeError(f"{r}: 'truncate' must be a bool, got {_shown(self.truncate)}")
        if self.beta_fast <= self.beta_slow:
            raise ValueError(
                f"{r}: 'beta_fast' must be greater than 'beta_slow' (fast pairs turn more), "
                f"got beta_fast={self.beta_fast} and beta_slow={self.beta_slow}"
            )
        if self.original_max_position_embeddings is None and self.max_position_embeddings is None:
            raise ValueError(f"{r}: needs 'original_max_position_embeddings' (or 'max_position_embeddings')")
        if self.factor is None and (self.original_max_position_embeddings is None
                                    or self.max_position_embeddings is None):
            raise ValueError(f"{r}: needs 'factor', or both 'max_position_embeddings' and "
                             "'original_max_position_embeddings' to derive it")

    def _blame(self, limit, head_dim, d, base):
        if limit.index is None and self.attention_factor is None and self.mscale and self.mscale_all_dim:
            return f"'mscale' = {self.mscale!r} over 'mscale_all_dim' = {self.mscale_all_dim!r}", None
        if self.factor is None:
            original = self.original_max_position_embeddings or self.max_position_embeddings
            return (f"the factor 'max_position_embeddings' / 'original_max_position_embeddings' = "
                    f"{self.max_position_embeddings / original!r}"), None
        return f"'factor' = {self.factor!r}", None

    def _resolve(self, head_dim, d, base):
        original = self.original_max_position_embeddings or self.max_position_embeddings
        factor = self.factor if self.factor is not None else self.max_position_embeddings / original
        low, high = _yarn_ramp_bounds(d, base, original, self.beta_fast, self.beta_slow, self.truncate)
        theta = _base_theta(base, d)
        ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        inv_freq = ramp * (theta / factor) + (1.0 - ramp) * theta

        if self.attention_factor is not None:
            attention, how = self.attention_factor, "given"
        elif self.mscale and self.mscale_all_dim:
            attention = _yarn_m(factor, self.mscale) / _yarn_m(factor, self.mscale_all_dim)
            how = "mscale/mscale_all_dim"
        else:
            attention, how = _yarn_m(factor, 1.0), "0.1*ln(factor)+1"
        params = {
            "base": base, "factor": factor, "original_max_position_embeddings": original,
            "beta_fast": self.beta_fast, "beta_slow": self.beta_slow, "truncate": self.truncate,
            "mscale": self.mscale, "mscale_all_dim": self.mscale_all_dim,
            "attention_factor_from": how, "ramp_low": float(low), "ramp_high": float(high),
        }
        source = "'factor'" if self.factor is not None else \
            "the factor 'max_position_embeddings' / 'original_max_position_embeddings'"
        target = _target(self.max_position_embeddings, original, factor, self.rope_type, source)
        return Resolved(inv_freq, attention, self.rope_type, params, original, target)


def _yarn_m(scale, k):
    """YaRN's magnitude ``0.1 * k * ln(scale) + 1``; 1 when scale <= 1."""
    return 1.0 if scale <= 1 else 0.1 * k * _log(scale) + 1.0


def _yarn_ramp_bounds(d, base, original, beta_fast, beta_slow, truncate):
    """(low, high) pair indices of YaRN's ramp; ``high`` nudged off ``low`` to avoid 0/0."""
    def pair_turning(rotations):
        # the pair that turns `rotations` full circles over the original window
        ratio = original / (rotations * 2 * math.pi)
        if not 0 < ratio < math.inf:  # an extreme beta: the same as a difference of logs, finite
            return d * (_log(original) - _log(rotations) - _log(2 * math.pi)) / (2 * _log(base))
        return d * _log(ratio) / (2 * _log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    # floats: a bound far past the pairs (a base near 1) must not reach numpy as an int beyond int64
    low, high = float(max(low, 0)), float(min(high, d - 1))
    if low == high:
        high += 0.001
    return low, high


@dataclass(frozen=True)
class Llama3:
    """Llama 3.1's rule, by wavelength ``w_i = 2 pi / theta_i``.

    ``w_i < L0 / high_freq_factor``: ``theta_i`` kept; ``w_i > L0 / low_freq_factor``:
    ``theta_i / s``; in between, with
    ``k = (L0 / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``,
    ``(1 - k) * theta_i / s + k * theta_i``.  Attention factor 1.  ``factor`` is
    used as given even when it differs from max/original (Llama 3.1 8B ships 8
    with 131072/8192 = 16).  Equal low and high factors (Llama 4 Scout: 1 and
    1) leave no band in between: a warning, as transformers gives, and finite
    frequencies (a pair exactly on the edge keeps ``theta_i``, where
    transformers' 0/0 blend would be NaN).
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int
    max_position_embeddings: int | None = None
    rope_type: ClassVar[str] = "llama3"

    def __post_init__(self):
        r = self.rope_type
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            object.__setattr__(self, name, _positive_real(name, getattr(self, name), r))
        object.__setattr__(self, "original_max_position_embeddings",
                           _positive_int("original_max_position_embeddings", self.original_max_position_embeddings, r))
        object.__setattr__(self, "max_position_embeddings",
                           _optional(_positive_int, "max_position_embeddings", self.max_position_embeddings, r))
        if self.high_freq_factor < self.low_freq_factor:
            raise ValueError(
                f"{r}: 'high_freq_factor' must be at least 'low_freq_factor', got "
                f"high_freq_factor={self.high_freq_factor} and low_freq_factor={self.low_freq_factor}"
            )
        if self.high_freq_factor == self.low_freq_factor:  # Llama 4: no blended band
            warnings.warn(
                f"{r}: 'high_freq_factor' equals 'low_freq_factor' ({self.low_freq_factor}): no pair is blended, "
                "each keeps its frequency or is divided by 'factor' (transformers warns the same and computes "
                "the same frequencies)", stacklevel=3)

    def _blame(self, limit, head_dim, d, base):
        return f"'factor' = {self.factor!r}", None

    def _resolve(self, head_dim, d, base):
        theta = _base_theta(base, d)
        s, lo, hi, window = self.factor, self.low_freq_factor, self.high_freq_factor, self.original_max_position_embeddings
        wavelength = 2 * math.pi / theta
        # lo == hi (Llama 4) leaves no band to blend; k is then never used
        k = (window / wavelength - lo) / (hi - lo) if hi > lo else np.zeros_like(theta)
        inv_freq = np.where(
            wavelength < window / hi, theta,
            np.where(wavelength > window / lo, theta / s, (1 - k) * theta / s + k * theta),
        )
        params = {"base": base, "factor": s, "low_freq_factor": lo, "high_freq_factor": hi,
                  "original_max_position_embeddings": window}
        return Resolved(inv_freq, 1.0, self.rope_type, params, window,
                        _target(self.max_position_embeddings, window, s, self.rope_type))


@dataclass(frozen=True)
class LongRope:
    """LongRoPE (Phi-3, Phi-3.5, Phi-4-mini): per-pair divisors chosen by length.

    ``inv_freq_i = theta_i / f_i`` with ``f = long_factor`` when
    ``seq_len > L0`` and ``f = short_factor`` otherwise (``seq_len`` None: short,
    as transformers starts).  ``L0`` = original_max_position_embeddings, or
    max_position_embeddings when absent.  Attention factor: ``attention_factor``
    if given, else with ``s`` = factor (or ``max_position_embeddings / L0``)
    ``sqrt(1 + ln s / ln L0)``, 1 when ``s <= 1``.  Keys rotated with the short
    set are not valid once the long set is in use.
    """

    short_factor: tuple
    long_factor: tuple
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    factor: float | None = None
    attention_factor: float | None = None
    seq_len: int | None = None
    rope_type: ClassVar[str] = "longrope"

    def __post_init__(self):
        r = self.rope_type
        for name in ("short_factor", "long_factor"):
            object.__setattr__(self, name, _factor_list(name, getattr(self, name), r))
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(f"{r}: 'short_factor' and 'long_factor' must have the same length, "
                             f"got {len(self.short_factor)} and {len(self.long_factor)}")
        for name in ("original_max_position_embeddings", "max_position_embeddings", "seq_len"):
            object.__setattr__(self, name, _optional(_positive_int, name, getattr(self, name), r))
        object.__setattr__(self, "factor", _optional(_positive_real, "factor", self.factor, r))
        object.__setattr__(self, "attention_factor",
                           _optional(_attention_factor, "attention_factor", self.attention_factor, r))
        if self.original_max_position_embeddings is None and self.max_position_embeddings is None:
            raise ValueError(f"{r}: needs 'original_max_position_embeddings' (or 'max_position_embeddings')")
        if self.attention_factor is None and self.factor is None and (
                self.original_max_position_embeddings is None or self.max_position_embeddings is None):
            raise ValueError(f"{r}: needs 'factor' or 'attention_factor', or both 'max_position_embeddings' and "
                             "'original_max_position_embeddings' to derive the attention factor")

    def _blame(self, limit, head_dim, d, base):
        original = self.original_max_position_embeddings or self.max_position_embeddings
        name = "long_factor" if self.seq_len is not None and self.seq_len > original else "short_factor"
        if limit.index is None:
            return None, None
        return _divisor_blame(limit, f"'{name}[{limit.index}]'", getattr(self, name)[limit.index], _base_theta(base, d))

    def _resolve(self, head_dim, d, base):
        r = self.rope_type
        _check_pairs("short_factor", self.short_factor, r, d)
        _check_pairs("long_factor", self.long_factor, r, d)
        original = self.original_max_position_embeddings or self.max_position_embeddings
        long = self.seq_len is not None and self.seq_len > original
        chosen = self.long_factor if long else self.short_factor
        inv_freq = _base_theta(base, d) / np.array(chosen, dtype=np.float64)

        factor = self.factor
        if factor is None and self.max_position_embeddings is not None:
            factor = self.max_position_embeddings / original
        if self.attention_factor is not None:
            attention, how = self.attention_factor, "given"
        elif factor <= 1.0:
            attention, how = 1.0, "factor<=1"
        elif original < 2:  # ln(original) = 0
            raise ValueError(f"{r}: the attention factor sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) "
                             f"needs 'original_max_position_embeddings' > 1, got {original}; "
                             "pass 'attention_factor'")
        else:
            attention = math.sqrt(1 + _log(factor) / _log(original))
            how = "sqrt(1+ln(factor)/ln(original))"
        params = {"base": base, "factor": factor, "original_max_position_embeddings": original,
                  "variant": "long" if long else "short", "ext_factors": list(chosen),
                  "attention_factor_from": how}
        target = _target(self.max_position_embeddings, original, factor if factor is not None else 1.0, r)
        return Resolved(inv_freq, attention, r, params, original, target)


@dataclass(frozen=True)
class Proportional:
    """transformers 5 "proportional" RoPE (Gemma-style partial rotation).

    Exponents run over the whole head: ``n`` pairs get
    ``inv_freq_i = b ** (-2i/head_dim) / s`` and the other ``head_dim/2 - n`` pairs
    frequency 0, so ``len(inv_freq) = head_dim // 2`` (rotary_dim = head_dim).
    ``n = int(partial_rotary_factor * head_dim // 2)`` when the factor is given,
    else ``rotary_dim // 2``.  Attention factor 1.
    """

    factor: float = 1.0
    partial_rotary_factor: float | None = None
    rope_type: ClassVar[str] = "proportional"

    def __post_init__(self):
        r = self.rope_type
        object.__setattr__(self, "factor", _positive_real("factor", self.factor, r))
        p = _optional(_positive_real, "partial_rotary_factor", self.partial_rotary_factor, r)
        if p is not None and p > 1:
            raise ValueError(f"{r}: 'partial_rotary_factor' must be in (0, 1], got {p}")
        object.__setattr__(self, "partial_rotary_factor", p)

    def _blame(self, limit, head_dim, d, base):
        return _divisor_blame(limit, "'factor'", self.factor, _base_theta(base, head_dim))

    def _resolve(self, head_dim, d, base):
        r = self.rope_type
        if self.partial_rotary_factor is None:
            rotated = d // 2
        else:
            rotated = int(self.partial_rotary_factor * head_dim // 2)
            if d not in (head_dim, 2 * rotated):
                raise ValueError(
                    f"{r}: rotary_dim={d} contradicts partial_rotary_factor={self.partial_rotary_factor} "
                    f"with head_dim={head_dim} (expected {head_dim} or {2 * rotated})"
                )
        if rotated < 1:
            raise ValueError(f"{r}: no pair left to rotate (head_dim={head_dim}, "
                             f"partial_rotary_factor={self.partial_rotary_factor})")
        inv_freq = np.zeros(head_dim // 2, dtype=np.float64)
        inv_freq[:rotated] = _base_theta(base, head_dim)[:rotated]
        inv_freq /= self.factor
        params = {"base": base, "factor": self.factor, "rotated_pairs": rotated,
                  "partial_rotary_factor": self.partial_rotary_factor}
        return Resolved(inv_freq, 1.0, r, params)


@dataclass(frozen=True)
class FreqFactors:
    """Explicit per-pair divisors, like llama.cpp's ``rope_freqs`` tensor.

    ``inv_freq_i = theta_i / factors[i]``; ``attention_factor`` as given (1 by default).
    """

    factors: tuple
    attention_factor: float = 1.0
    rope_type: ClassVar[str] = "freq_factors"

    def __post_init__(self):
        r = self.rope_type
        object.__setattr__(self, "factors", _factor_list("factors", self.factors, r))
        object.__setattr__(self, "attention_factor", _attention_factor("attention_factor", self.attention_factor, r))

    def _blame(self, limit, head_dim, d, base):
        if limit.index is None:
            return None, None
        return _divisor_blame(limit, f"'factors[{limit.index}]'", self.factors[limit.index], _base_theta(base, d))

    def _resolve(self, head_dim, d, base):
        _check_pairs("factors", self.factors, self.rope_type, d)
        inv_freq = _base_theta(base, d) / np.array(self.factors, dtype=np.float64)
        params = {"base": base, "factors": list(self.factors)}
        return Resolved(inv_freq, self.attention_factor, self.rope_type, params)


RULES = {cls.rope_type: cls for cls in (Default, Linear, NTK, Dynamic, Yarn, Llama3, LongRope,
                                        Proportional, FreqFactors)}

# keys any dict may carry (transformers 5 puts them in rope_parameters); checked, not used
_CONTEXT_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
# keys HunYuan's dynamic-with-alpha configs carry and nobody reads (see Dynamic)
_ALPHA_INERT_KEYS = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")


# --------------------------------------------------------------------------- entry points


def rule_from_dict(scaling: dict):
    """Build the rule object a transformers-style dict describes.

    ``rope_type`` (or the old ``type``; both must agree when both are present)
    names the rule, the other keys are its fields.  A ``None`` value counts as
    absent, as in transformers.  ``rope_theta`` and ``partial_rotary_factor`` are
    allowed and left for :func:`resolve` to check.
    """
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict, got {type(scaling).__name__}")
    new, old = scaling.get("rope_type"), scaling.get("type")
    for key, value in (("rope_type", new), ("type", old)):   # before comparing: an array compares elementwise
        if value is not None and not isinstance(value, str):
            raise TypeError(f"scaling: {key!r} must be a str, got {_shown(value)}")
    if new is not None and old is not None and new != old:
        raise ValueError(f"scaling: 'type'={_shown(old)} and 'rope_type'={_shown(new)} name different rules")
    name = new if new is not None else old
    if name is None:
        name = "default"
    if not isinstance(name, str):
        raise TypeError(f"scaling: 'rope_type' must be a str, got {_shown(name)}")
    if name not in RULES:
        raise ValueError(f"scaling: unknown 'rope_type' {_shown(name)}; known rules: {', '.join(sorted(RULES))}")
    cls = RULES[name]
    names = [f.name for f in fields(cls)]
    allowed = set(names) | set(_CONTEXT_KEYS)
    if name == "dynamic" and scaling.get("alpha") is not None:
        allowed |= set(_ALPHA_INERT_KEYS)
    unknown = _sorted_keys(k for k in scaling if k not in allowed)
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {_shown(unknown)}; this rule reads {sorted(names)}")
    kwargs = {k: scaling[k] for k in names if scaling.get(k) is not None}
    if name == "proportional" and scaling.get("partial_rotary_factor") is not None:
        kwargs["partial_rotary_factor"] = scaling["partial_rotary_factor"]
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [k for k in required if k not in kwargs]
    if missing:
        raise ValueError(f"{name}: missing required key(s) {missing}")
    return cls(**kwargs)


def resolve(scaling, *, head_dim: int, rotary_dim: int, base: float) -> Resolved:
    """Resolve ``scaling`` for a head into frequencies and attention factor.

    ``scaling``: ``None`` (original RoPE), a transformers-style dict (see
    :func:`rule_from_dict`), a rule name (``"proportional"``), a rule object
    (``Linear(8.0)``, ``Yarn(...)`` ...) or a :class:`Resolved`, returned as is
    when its ``rotary_dim`` is ``rotary_dim`` (or ``head_dim``).
    ``head_dim``: coordinates per head; ``rotary_dim``: how many of them rotate
    (even, 2 .. head_dim); ``base``: RoPE base (``rope_theta``), > 1.
    Returns a :class:`Resolved`.  ``ValueError``/``TypeError`` name the argument
    or key, the rule and the value received.
    """
    head_dim = _positive_int("head_dim", head_dim, "resolve")
    rotary_dim = _positive_int("rotary_dim", rotary_dim, "resolve")
    for name, value in (("head_dim", head_dim), ("rotary_dim", rotary_dim)):  # as Rope's, before any allocation
        if value > MAX_HEAD_DIM:
            raise ValueError(f"resolve: {name!r} must be at most {MAX_HEAD_DIM}, got {value}")
    if rotary_dim % 2:
        raise ValueError(f"resolve: 'rotary_dim' must be even, got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"resolve: 'rotary_dim' ({rotary_dim}) must not exceed 'head_dim' ({head_dim})")
    base = _positive_real("base", base, "resolve")
    if base <= 1.0:
        raise ValueError(f"resolve: 'base' must be > 1, got {base}")

    if isinstance(scaling, Resolved):
        if scaling.rotary_dim not in (rotary_dim, head_dim) or scaling.rotary_dim > head_dim:
            raise ValueError(f"resolve: a Resolved with rotary_dim {scaling.rotary_dim} does not fit "
                             f"rotary_dim={rotary_dim}, head_dim={head_dim}")
        return scaling
    if isinstance(scaling, str):
        scaling = {"rope_type": scaling}
    if scaling is None:
        rule = Default()
    elif isinstance(scaling, dict):
        rule = rule_from_dict(scaling)
        _check_context(scaling, rule, head_dim, rotary_dim, base)
    elif type(scaling) in RULES.values():
        rule = scaling
    else:
        raise TypeError(
            f"resolve: 'scaling' must be None, a rule name, a dict, a Resolved or a rule object "
            f"({', '.join(c.__name__ for c in RULES.values())}), got {type(scaling).__name__}"
        )
    try:
        resolved = rule._resolve(head_dim, rotary_dim, base)
    except ValueError as exc:
        if getattr(exc, "limit", None) is None:
            raise
        raise ValueError(_limit_message(rule, exc.limit, head_dim, rotary_dim, base)) from None
    _refuse_lost_pairs(rule, resolved, head_dim, rotary_dim, base)
    return resolved


def _refuse_lost_pairs(rule, resolved, head_dim, d, base):
    """A pair whose frequency a rule's parameter drove to 0 (float64 underflow of
    ``theta_i / factor``) never turns: the parameter is refused, naming it. The
    proportional rule's unrotated pairs are 0 by definition and pass."""
    zero = resolved.inv_freq == 0
    if isinstance(rule, Proportional):
        zero[resolved.params["rotated_pairs"]:] = False
    if not zero.any():
        return
    i, n = int(np.argmax(zero)), int(zero.sum())
    blame = getattr(rule, "_blame", None)
    limit = _Limit(f"inv_freq[{i}]", 0.0, "is 0", i)
    source = blame(limit, head_dim, d, base)[0] if blame is not None else None
    more = f" (and {n - 1} more pair{'s' if n > 2 else ''})" if n > 1 else ""
    raise ValueError(f"{rule.rope_type}: {source or 'its parameters'} make{'s' if source else ''} inv_freq[{i}] = 0"
                     f"{more}: the frequency underflows float64, so the pair would never turn")


def _limit_message(rule, limit, head_dim, d, base):
    """What the user passed that made ``rule`` produce a value the kernel cannot
    serve (``limit``, a ``_Limit``): the rule's parameter, the value it gave, the
    limit and, where the parameter divides a base frequency, the smallest value
    allowed."""
    blame = getattr(rule, "_blame", None)
    source, fix = blame(limit, head_dim, d, base) if blame is not None else (None, None)
    source = f"{source} gives" if source else "its parameters give"
    message = f"{rule.rope_type}: {source} {limit.key} = {limit.value!r}, which {limit.why}"
    return f"{message}; {fix}" if fix else message


def _divisor_blame(limit, name, divisor, theta):
    """``inv_freq[i] = theta[i] / divisor``: name the divisor and the smallest one the kernel serves."""
    if limit.index is None:
        return None, None
    return f"{name} = {divisor!r}", f"{name} must be at least {float(theta[limit.index]) / MAX_INV_FREQ!r}"


def _check_context(scaling, rule, head_dim, rotary_dim, base):
    """``rope_theta`` / ``partial_rotary_factor`` inside the dict must agree with the arguments."""
    name = rule.rope_type
    theta = scaling.get("rope_theta")
    if theta is not None and _positive_real("rope_theta", theta, name) != base:
        raise ValueError(f"{name}: 'rope_theta'={_shown(theta)} contradicts base={base!r}")
    p = scaling.get("partial_rotary_factor")
    if p is not None and name != "proportional":
        p = _positive_real("partial_rotary_factor", p, name)
        if int(head_dim * p) != rotary_dim:
            raise ValueError(
                f"{name}: 'partial_rotary_factor'={p!r} gives rotary_dim int({head_dim} * {p}) = "
                f"{int(head_dim * p)}, contradicting rotary_dim={rotary_dim}"
            )
