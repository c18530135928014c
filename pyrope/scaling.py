"""Frequency rules: what inverse frequencies a RoPE uses.

Only the default rule lives here for now: theta_i = base ** (-2i / rotary_dim).
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import ValueError


@dataclass(frozen=True)
class Resolved:
    """A rule resolved to numbers: everything that defines the position function."""

    inv_freq: np.ndarray  # float64, read-only; rotary_dim = 2 * len(inv_freq)
    attention_factor: float = 1.0  # multiplies cos and sin
    rule: str = "default"
    params: dict = field(default_factory=dict)
    original_window: Optional[int] = None
    target_window: Optional[int] = None


def default_inv_freq(rotary_dim, base):
    """``base ** (-2i / rotary_dim)`` for i in 0..rotary_dim/2-1, in float64."""
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return 1.0 / (base ** exponents)


def resolve(scaling, *, head_dim, rotary_dim, base):
    """Resolve a scaling rule (``None`` for the default) to a :class:`Resolved`."""
    if scaling is not None:
        raise ValueError(f"scaling must be None (only the default rule is available), got {scaling!r}")
    inv_freq = default_inv_freq(rotary_dim, base)
    inv_freq.flags.writeable = False
    return Resolved(inv_freq=inv_freq)
