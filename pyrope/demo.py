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
    w = rope.inv_freq
    return list(zip(range(len(w)), w.tolist(), (2 * math.pi / w).tolist(), (window * w / (2 * math.pi)).tolist()))


def shift_rows(dim=64, gap=2, starts=STARTS, base=10000.0, seed=0):
    """Rows (start, rotary score via the kernel, rotary via reference, additive score).

    The reference column rotates with the standard-library reference's exact
    cos/sin of each angle (``reference.cos_sin``) at the rope's frequencies;
    the additive score adds the sinusoidal encoding ``P[m] = (sin m w_i, cos m w_i)``
    built from the same values. Each position's angles are computed once, so
    the cost is linear in ``dim``."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 1, dim)).astype(np.float32)
    k = rng.standard_normal((1, 1, dim)).astype(np.float32)
    rope = Rope(dim, layout="interleaved", base=base)
    q64, k64 = q.ravel().astype(np.float64), k.ravel().astype(np.float64)
    rows = []
    for start in starts:
        qm = rope.apply(q, [start]).astype(np.float64)
        kn = rope.apply(k, [start + gap]).astype(np.float64)
        (cm, cn), (sm, sn) = (np.array(t) for t in reference.cos_sin([start, start + gap], rope.inv_freq.tolist()))
        ref = float(np.dot(_rotated(q64, cm, sm), _rotated(k64, cn, sn)))
        pm, pn = _sinusoid(cm, sm), _sinusoid(cn, sn)
        rows.append((start, float(np.sum(qm * kn)), ref, float(np.dot(q64 + pm, k64 + pn))))
    return rows


def _rotated(x, cos, sin):
    """x (interleaved pairs) rotated by the angles whose cos and sin are given."""
    x0, x1 = x[0::2], x[1::2]
    out = np.empty_like(x)
    out[0::2] = x0 * cos - x1 * sin
    out[1::2] = x0 * sin + x1 * cos
    return out


def _sinusoid(cos, sin):
    """The additive sinusoidal encoding: ``P[2i] = sin(m w_i)``, ``P[2i+1] = cos(m w_i)``."""
    out = np.empty(2 * len(cos))
    out[0::2], out[1::2] = sin, cos
    return out


def turn_rows(dim=64, gaps=GAPS, base=10000.0):
    """Rows (gap, turns of the fastest pair, of the slowest pair, pairs within one turn)."""
    w = Rope(dim, layout="interleaved", base=base).inv_freq
    rows = []
    for gap in gaps:
        t = gap * w / (2 * math.pi)
        rows.append((gap, float(t[0]), float(t[-1]), int(np.sum(np.abs(t) < 1.0))))
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
