"""The first seed's experiment, run through the C kernel, as readable tables.

1. the frequency table of a 64-dim head (omega, wavelength, turns over 4096);
2. rotary vs additive scores for a fixed gap of 2 at starts 3, 10, 100, 4000:
   the rotary column is one number, the additive column wanders;
3. how many pairs turn less than once as the gap grows.
"""
import math

import numpy as np

from . import reference
from .rope import Rope

GAPS = (1, 2, 10, 100, 1000, 10000)
STARTS = (3, 10, 100, 4000)


def frequency_table(dim=64, base=10000.0, window=4096):
    """Rows (pair, omega, wavelength, turns over window) from the kernel's frequencies."""
    rope = Rope(dim, layout="interleaved", base=base)
    return [(i, float(w), 2 * math.pi / float(w), window * float(w) / (2 * math.pi))
            for i, w in enumerate(rope.inv_freq)]


def shift_rows(dim=64, gap=2, starts=STARTS, base=10000.0, seed=0):
    """Rows (start, rotary score via the kernel, rotary via reference, additive score)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 1, dim)).astype(np.float32)
    k = rng.standard_normal((1, 1, dim)).astype(np.float32)
    rope = Rope(dim, layout="interleaved", base=base)
    qv, kv = [float(v) for v in q.ravel()], [float(v) for v in k.ravel()]
    rows = []
    for start, ref_rotary, additive in reference.shift_comparison(qv, kv, gap, starts, base):
        qm = rope.apply(q, [start]).astype(np.float64)
        kn = rope.apply(k, [start + gap]).astype(np.float64)
        rows.append((start, float(np.sum(qm * kn)), ref_rotary, additive))
    return rows


def turn_rows(dim=64, gaps=GAPS, base=10000.0):
    """Rows (gap, turns of the fastest pair, of the slowest pair, pairs within one turn)."""
    rows = []
    for gap in gaps:
        t = reference.turns(gap, dim, base)
        rows.append((gap, t[0], t[-1], reference.pairs_within_one_turn(gap, dim, base)))
    return rows


def _table(title, header, rows, formats):
    lines = [title, "  " + "  ".join(h.rjust(w) for h, (w, _) in zip(header, formats))]
    for row in rows:
        lines.append("  " + "  ".join(format(v, f).rjust(w) for v, (w, f) in zip(row, formats)))
    return "\n".join(lines)


def render(dim=64, base=10000.0, window=4096):
    """The whole demonstration as text."""
    out = []
    out.append(_table(
        f"1. Pair frequencies, dim={dim}, base={base:g}: omega_i = base^(-2i/dim)",
        ["pair", "omega", "wavelength", f"turns/{window}"],
        frequency_table(dim, base, window),
        [(4, "d"), (12, ".6g"), (12, ".6g"), (12, ".6g")]))
    rows = shift_rows(dim, 2, STARTS, base)
    out.append(_table(
        "2. Same gap (2), different starts: rotary score is a function of the gap only",
        ["start", "rotary (kernel)", "rotary (reference)", "additive"],
        rows, [(6, "d"), (16, ".7f"), (18, ".7f"), (12, ".5f")]))
    spread = [max(r[c] for r in rows) - min(r[c] for r in rows) for c in (1, 2, 3)]
    out.append(f"  spread (max - min): rotary kernel {spread[0]:.2e}, "
               f"rotary reference {spread[1]:.2e}, additive {spread[2]:.4f}")
    out.append(_table(
        f"3. Turns over a gap, dim={dim}: only pairs under one turn tell that distance apart",
        ["gap", "fastest pair", "slowest pair", "pairs < 1 turn"],
        turn_rows(dim, GAPS, base), [(6, "d"), (14, ".4g"), (14, ".4g"), (15, "d")]))
    return "\n\n".join(out)


def main():
    """Print the demonstration."""
    print(render())
