"""A ``Rope`` with caller-given inverse frequencies and attention factor.

Used for the twins ``rerotate``/``convert_keys`` need (same frequencies,
factor 1) and for conventions the scaling rules do not name yet (the
``proportional`` partial-rotary rule). The scaling module's own rules and
``Rope.from_contract`` are the public way to get such a rope; this helper
only overrides the resolved numbers of a plain ``Rope`` of the same shape.
"""
import math

import numpy as np

from .errors import ValueError
from .rope import Rope
from .scaling import Resolved


def explicit_rope(head_dim, *, layout, inv_freq, attention_factor=1.0, rule="explicit"):
    """A ``Rope`` rotating ``2 * len(inv_freq)`` coordinates with exactly these frequencies."""
    inv_freq = np.array(inv_freq, dtype=np.float64, copy=True).reshape(-1)
    if inv_freq.size == 0 or not np.all(np.isfinite(inv_freq)):
        raise ValueError(f"inv_freq must be a non-empty vector of finite numbers, got {inv_freq!r}")
    attention_factor = float(attention_factor)
    if not math.isfinite(attention_factor):
        raise ValueError(f"attention_factor must be finite, got {attention_factor!r}")
    rope = Rope(head_dim, layout=layout, rotary_dim=2 * inv_freq.size)
    inv_freq.flags.writeable = False
    rope._inv_freq = inv_freq
    rope._attention_factor = attention_factor
    rope._resolved = Resolved(inv_freq=inv_freq, attention_factor=attention_factor, rule=rule)
    return rope


def unit_twin(rope):
    """``rope`` with attention factor 1: rotation by an angle difference must
    not scale keys that already carry the factor."""
    if rope.attention_factor == 1.0:
        return rope
    return explicit_rope(rope.head_dim, layout=rope.layout, inv_freq=rope.inv_freq,
                         attention_factor=1.0, rule="unit-factor twin")
