"""A ``Rope`` with caller-given inverse frequencies and attention factor.

Used for the twins ``rerotate``/``convert_keys`` need (same frequencies,
factor 1) and for the partial-rotary conventions in ``pyrope.positions``.
It goes through the public path: ``Rope(..., scaling=Resolved(...))``, with the
Rope class an argument (this module sits below ``pyrope.rope``).
"""
import numpy as np

from ..scaling import Resolved


def explicit_rope(rope_class, head_dim, *, layout, inv_freq, attention_factor=1.0, rule="explicit", mrope_section=None,
                  mrope_interleaved=False):
    """A ``Rope`` rotating ``2 * len(inv_freq)`` coordinates with exactly these frequencies
    (and these multimodal sections, if any)."""
    resolved = Resolved(inv_freq=np.asarray(inv_freq, dtype=np.float64).reshape(-1),
                        attention_factor=float(attention_factor), rule=rule, params={})
    return rope_class(head_dim, layout=layout, rotary_dim=2 * resolved.inv_freq.size, scaling=resolved,
                mrope_section=mrope_section, mrope_interleaved=mrope_interleaved)


def unit_twin(rope_class, rope):
    """``rope`` (a ``rope_class``) with attention factor 1: rotation by an angle difference must
    not scale keys that already carry the factor."""
    if rope.attention_factor == 1.0:
        return rope
    return explicit_rope(rope_class, rope.head_dim, layout=rope.layout, inv_freq=rope.inv_freq,
                         attention_factor=1.0, rule="unit-factor twin", mrope_section=rope.mrope_section,
                         mrope_interleaved=rope.mrope_interleaved)
