"""The frequency spectrum of a RoPE configuration, with and without scaling.

For each pair: angular frequency omega, wavelength 2*pi/omega in tokens, and
turns over a window (window * omega / 2*pi). A pair that turns less than once
over the window has never shown the model a repeated angle there; a scaling
rule re-spaces the pairs so that more of them stay under one turn over the
extended window. Used by ``pyrope spectrum``.
"""
import math
from dataclasses import dataclass

import numpy as np

from .errors import OverflowError, ValueError
from .rope import Rope


@dataclass(frozen=True)
class Curve:
    """One frequency rule's spectrum over its window."""

    label: str
    inv_freq: np.ndarray
    window: int
    attention_factor: float = 1.0

    @property
    def wavelength(self):
        """Tokens per full turn of each pair (inf for a zero frequency)."""
        with np.errstate(divide="ignore"):
            return np.where(self.inv_freq > 0, 2 * math.pi / self.inv_freq, np.inf)

    @property
    def turns(self):
        """Full turns of each pair over the window."""
        return self.window * self.inv_freq / (2 * math.pi)

    @property
    def within_one_turn(self):
        """How many pairs turn less than once over the window."""
        return int(np.sum(self.turns < 1.0))


def curves_for(base_rope, window, scaled=()):
    """The original curve of ``base_rope`` over ``window`` and one per scaled rope.

    ``scaled`` holds ``(label, rope)`` pairs; each is measured over its own
    target window (the rule's, else ``window`` times its factor, else ``window``).
    """
    curves = [Curve("original", base_rope.inv_freq, window, 1.0)]
    for label, rope in scaled:
        resolved = rope.resolved
        target = resolved.target_window
        if target is None:
            factor = resolved.params.get("factor")
            target = _times(window, factor, label) if isinstance(factor, (int, float)) else window
        curves.append(Curve(label, rope.inv_freq, target, rope.attention_factor))
    return curves


def _times(window, factor, label):
    """``round(window * factor)``, the extended window of a rule without one of its own."""
    target = window * factor
    if not 1 <= target < 2**63:
        raise OverflowError(f"{label}: 'factor' = {factor!r} makes the extended window {window} * factor = "
                            f"{target:g} tokens, outside [1, 2**63)")
    return int(round(target))


# What rope_for_rule fills in for a rule when the caller does not: the
# original window for the rules that read one, Llama 3.1's band factors, and a
# dynamic NTK length at the target (window * factor). Listed in `pyrope spectrum --help`.
RULE_DEFAULTS = {
    "dynamic": "max_position_embeddings=WINDOW, seq_len=WINDOW*FACTOR",
    "yarn": "original_max_position_embeddings=WINDOW, beta_fast=32, beta_slow=1",
    "llama3": "original_max_position_embeddings=WINDOW, low_freq_factor=1, high_freq_factor=4 (Llama 3.1's)",
    "longrope": "original_max_position_embeddings=WINDOW; short_factor and long_factor must be given",
    "freq_factors": "factors must be given",
}


def rule_keys(rule):
    """The keys a rule reads (its ``pyrope.scaling`` fields); ValueError for an unknown rule."""
    from dataclasses import fields

    from .scaling import RULES
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")
    return tuple(f.name for f in fields(RULES[rule]))


def rope_for_rule(dim, base, rule, *, factor=None, window=None, extra=None):
    """A Rope for a rule name with the usual knobs (``pyrope spectrum --scaling``).

    ``factor``: the scaling factor (``extra["factor"]`` wins); ``window``: the
    original window; ``extra``: the rule's other keys. Keys left out take the
    defaults of :data:`RULE_DEFAULTS`.
    """
    scaling = {"rope_type": rule, **(extra or {})}
    if factor is not None:
        scaling.setdefault("factor", factor)
    factor = scaling.get("factor")
    if rule in ("yarn", "llama3", "longrope") and window is not None:
        scaling.setdefault("original_max_position_embeddings", window)
    if rule == "llama3":
        scaling.setdefault("low_freq_factor", 1.0)
        scaling.setdefault("high_freq_factor", 4.0)
    if rule == "dynamic" and window is not None and scaling.get("alpha") is None:
        scaling.setdefault("max_position_embeddings", window)
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            scaling.setdefault("seq_len", _times(window, factor, rule))
    return Rope(dim, layout="interleaved", base=base, scaling=scaling)


def as_dict(curves):
    """JSON-ready description of the curves (``--json``)."""
    n = len(curves[0].inv_freq)
    return {
        "pairs": n,
        "curves": [{
            "label": c.label,
            "window": c.window,
            "attention_factor": c.attention_factor,
            "within_one_turn": c.within_one_turn,
            "omega": c.inv_freq.tolist(),
            "wavelength": [None if math.isinf(v) else v for v in c.wavelength.tolist()],
            "turns": c.turns.tolist(),
        } for c in curves],
    }


def _column(values, spec):
    return [format(v, spec) for v in values.tolist()]


def render(curves):
    """A readable table: one row per pair, one column group per curve.

    Each curve's arrays are computed and formatted once, a column at a time,
    so the time is linear in the number of pairs."""
    n = len(curves[0].inv_freq)
    columns = [("pair", [f"{i:4d}" for i in range(n)])]
    for c in curves:
        columns += [(f"omega[{c.label}]", _column(c.inv_freq, ".6g")),
                    ("wavelength", _column(c.wavelength, ".6g")),
                    (f"turns/{c.window}", _column(c.turns, ".4g"))]
    padded = []
    for head, cells in columns:
        width = max(len(head), max(map(len, cells), default=0))
        padded.append([head.rjust(width)] + [v.rjust(width) for v in cells])
    lines = ["  ".join(row) for row in zip(*padded)]
    lines.append("")
    for c in curves:
        extra = f", attention factor {c.attention_factor:.6g}" if c.attention_factor != 1.0 else ""
        lines.append(f"{c.label}: {c.within_one_turn} of {len(c.inv_freq)} pairs turn less than once "
                     f"over {c.window} tokens{extra}")
    return "\n".join(lines)


def require_matplotlib():
    """Raise ``pyrope.errors.ImportError`` naming the extra unless matplotlib imports
    (``--plot`` checks this before any work, so nothing is printed in vain)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from .errors import ImportError as RopeImportError, install_hint
        raise RopeImportError(f"--plot needs matplotlib: {install_hint('matplotlib', 'plot')}") from None


def plot(curves, path):
    """Write a PNG: wavelength per pair (log scale) against each curve's window."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    pairs = np.arange(len(curves[0].inv_freq))
    for k, c in enumerate(curves):
        line, = ax.plot(pairs, c.wavelength, marker=".", label=f"{c.label} ({c.within_one_turn} pairs < 1 turn)")
        ax.axhline(c.window, color=line.get_color(), linestyle="--", linewidth=0.8,
                   label=f"window {c.window}" if k == 0 or c.window != curves[0].window else None)
    ax.set_yscale("log")
    ax.set_xlabel("pair i")
    ax.set_ylabel("wavelength 2π/ω (tokens)")
    ax.set_title("RoPE spectrum: pairs above a window's line turn less than once over it")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
