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
        resolved = rope._resolved
        target = resolved.target_window
        if target is None:
            factor = resolved.params.get("factor")
            target = int(round(window * factor)) if isinstance(factor, (int, float)) else window
        curves.append(Curve(label, rope.inv_freq, target, rope.attention_factor))
    return curves


def rope_for_rule(dim, base, rule, *, factor=None, window=None, extra=None):
    """A Rope for a rule name with the usual knobs (``pyrope spectrum --scaling``)."""
    scaling = {"rope_type": rule}
    if factor is not None:
        scaling["factor"] = factor
    if rule in ("yarn", "llama3", "longrope") and window is not None:
        scaling["original_max_position_embeddings"] = window
    if rule == "dynamic" and window is not None:
        scaling.setdefault("max_position_embeddings", window)
        if factor is not None:
            scaling.setdefault("seq_len", int(round(window * factor)))
    scaling.update(extra or {})
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
            "omega": [float(v) for v in c.inv_freq],
            "wavelength": [None if math.isinf(v) else float(v) for v in c.wavelength],
            "turns": [float(v) for v in c.turns],
        } for c in curves],
    }


def render(curves):
    """A readable table: one row per pair, one column group per curve."""
    head = ["pair"]
    for c in curves:
        head += [f"omega[{c.label}]", "wavelength", f"turns/{c.window}"]
    rows = []
    for i in range(len(curves[0].inv_freq)):
        row = [f"{i:4d}"]
        for c in curves:
            row += [f"{c.inv_freq[i]:.6g}", f"{c.wavelength[i]:.6g}", f"{c.turns[i]:.4g}"]
        rows.append(row)
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append("")
    for c in curves:
        extra = f", attention factor {c.attention_factor:.6g}" if c.attention_factor != 1.0 else ""
        lines.append(f"{c.label}: {c.within_one_turn} of {len(c.inv_freq)} pairs turn less than once "
                     f"over {c.window} tokens{extra}")
    return "\n".join(lines)


def plot(curves, path):
    """Write a PNG: wavelength per pair (log scale) against each curve's window."""
    try:
        import matplotlib
    except ImportError:
        from .errors import ValueError
        raise ValueError("--plot needs matplotlib: pip install 'pyrope[plot]'") from None
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
