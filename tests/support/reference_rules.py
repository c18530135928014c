"""Plain-Python oracle for the long-context frequency rules.

Standard library and mpmath only, no numpy, no imports from the pyrope
package: an independent check of ``pyrope.scaling`` that lives with the tests
and is not installed with the package.  Powers and logarithms are mpmath's at
``_BITS`` bits, rounded once to the nearest double (``_cr_power``, ``_cr_log``):
the correctly rounded values pyrope's rules must give bit for bit, on every
machine.  The other operations are float64 arithmetic in the order the rule's
docstring in ``pyrope.scaling`` writes them.  Each function is written pair by pair, straight
from the published definition (transformers' ``modeling_rope_utils``, the YaRN, LongRoPE
and position-interpolation papers, Meta's Llama 3.1 reference code), favouring
readability over speed.

Every function takes the rotated dimension ``dim`` (an even number of
coordinates, ``dim // 2`` rotation pairs) and the base ``base`` and returns a
tuple ``(inv_freq, attention_factor)`` where ``inv_freq`` is a list of
``dim // 2`` floats: pair ``i`` turns by ``inv_freq[i]`` radians per token.
"""

import functools
import math

import mpmath

_BITS = 320  # far past a double's 53 bits: a rounding is misjudged only within 2**-260 of a midpoint


def _nearest_double(compute):
    """The double nearest to the real number ``compute()`` (mpmath at the working precision),
    checked at twice the precision: the two must round alike, so the answer does not hang
    on how close the real number lies to a midpoint between two doubles."""
    with mpmath.workprec(_BITS):
        once = float(compute())
    with mpmath.workprec(2 * _BITS):
        twice = float(compute())
    assert once == twice, "a value within 2**-260 of a rounding boundary: raise _BITS"
    return once


def _cr_power(x, num, den, times=1.0):
    """``times * x ** (num/den)`` for doubles ``x``, ``times`` and an exact rational
    exponent, rounded once."""
    return _nearest_double(lambda: mpmath.mpf(times) * mpmath.mpf(x) ** (mpmath.mpf(num) / den))


def _cr_log(x):
    """``ln x`` rounded once (``ln 1 = 0`` exactly)."""
    return 0.0 if x == 1 else _nearest_double(lambda: mpmath.log(mpmath.mpf(x)))


@functools.lru_cache(maxsize=None)
def _theta(dim, base):
    return tuple(_cr_power(base, -2 * i, dim) for i in range(dim // 2))

__all__ = [
    "default",
    "linear",
    "ntk",
    "ntk_base",
    "dynamic",
    "dynamic_base",
    "yarn",
    "yarn_correction_range",
    "yarn_mscale",
    "llama3",
    "longrope",
    "proportional",
    "freq_factors",
]


def default(dim, base):
    """Original RoPE: ``theta_i = base ** (-2i / dim)`` for ``i = 0 .. dim/2 - 1``,
    each rounded once from the exact power."""
    return list(_theta(dim, float(base))), 1.0


def linear(dim, base, factor):
    """Position interpolation: every frequency divided by ``factor``.

    Dividing positions by ``factor`` is the same as dividing each frequency.
    """
    theta, _ = default(dim, base)
    return [t / factor for t in theta], 1.0


def ntk_base(dim, base, factor):
    """Static NTK-aware base: ``base * factor ** (dim / (dim - 2))``, rounded once.

    Chosen so that the lowest frequency is divided by ``factor`` while the
    highest (pair 0, always 1) is kept.
    """
    return _cr_power(factor, dim, dim - 2, times=base)


def ntk(dim, base, factor):
    """Static NTK-aware base change: the default rule with ``ntk_base``."""
    return default(dim, ntk_base(dim, base, factor))


def dynamic_base(dim, base, factor, max_position_embeddings, seq_len):
    """transformers' dynamic NTK base for the current sequence length.

    ``L = max(seq_len, max_position_embeddings)`` (``seq_len`` None counts as
    the window itself) and
    ``base' = base * (factor * L / max_position_embeddings - (factor - 1)) ** (dim / (dim - 2))``,
    which is ``base`` itself whenever ``L`` is the window.
    """
    window = max_position_embeddings
    length = window if seq_len is None else max(seq_len, window)
    ratio = factor * length / window - (factor - 1)
    return _cr_power(ratio, dim, dim - 2, times=base)


def dynamic(dim, base, factor, max_position_embeddings, seq_len):
    """Dynamic NTK: the default rule with ``dynamic_base``; attention factor 1."""
    return default(dim, dynamic_base(dim, base, factor, max_position_embeddings, seq_len))


def yarn_mscale(factor, mscale=1.0):
    """YaRN's magnitude correction: ``0.1 * mscale * ln(factor) + 1``, or 1 when factor <= 1."""
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * _cr_log(factor) + 1.0


def yarn_correction_range(dim, base, original_max_position_embeddings, beta_fast, beta_slow, truncate):
    """Pair indices where YaRN's ramp starts and ends.

    The pair that turns ``r`` full circles over the original window ``L0``
    solves ``L0 / (2 pi base**(2i/dim)) = r``, that is
    ``i(r) = dim * ln(L0 / (2 pi r)) / (2 ln base)``.  The ramp runs from
    ``i(beta_fast)`` to ``i(beta_slow)``; with ``truncate`` the start is floored
    and the end ceiled.  Both are clamped into ``[0, dim - 1]``.
    """
    def pair_for(rotations):
        return dim * _cr_log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * _cr_log(base))

    low = pair_for(beta_fast)
    high = pair_for(beta_slow)
    if truncate:
        low = math.floor(low)
        high = math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn(dim, base, factor, original_max_position_embeddings, beta_fast=32.0, beta_slow=1.0,
         mscale=None, mscale_all_dim=None, attention_factor=None, truncate=True):
    """YaRN ("NTK-by-parts" plus temperature) as transformers defines it.

    For pair ``i`` with ``theta_i = base ** (-2i/dim)``, the ramp
    ``g_i = clamp((i - low) / (high - low), 0, 1)`` (``high`` nudged by 0.001
    when equal to ``low``) mixes ``theta_i / factor`` (weight ``g_i``) with
    ``theta_i`` (weight ``1 - g_i``): fast pairs keep their frequency, slow ones
    are interpolated.  The attention factor is the given one, else
    ``yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)`` when
    both are non-zero, else ``yarn_mscale(factor)``.
    """
    low, high = yarn_correction_range(dim, base, original_max_position_embeddings, beta_fast, beta_slow, truncate)
    if low == high:
        high = high + 0.001
    out = []
    for i, theta in enumerate(_theta(dim, float(base))):
        g = (i - low) / (high - low)
        g = min(max(g, 0.0), 1.0)
        out.append(g * (theta / factor) + (1.0 - g) * theta)
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    return out, float(attention_factor)


def llama3(dim, base, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings):
    """Llama 3.1's rule, by wavelength ``lambda_i = 2 pi / theta_i``.

    With ``L0`` the original window: pairs whose wavelength is shorter than
    ``L0 / high_freq_factor`` keep ``theta_i``; longer than ``L0 / low_freq_factor``
    get ``theta_i / factor``; in between,
    ``s = (L0 / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``
    and the result is ``(1 - s) * theta_i / factor + s * theta_i``.
    """
    theta, _ = default(dim, base)
    short_edge = original_max_position_embeddings / high_freq_factor
    long_edge = original_max_position_embeddings / low_freq_factor
    out = []
    for t in theta:
        wavelength = 2 * math.pi / t
        if wavelength < short_edge:
            out.append(t)
        elif wavelength > long_edge:
            out.append(t / factor)
        else:
            s = (original_max_position_embeddings / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - s) * t / factor + s * t)
    return out, 1.0


def longrope(dim, base, short_factor, long_factor, original_max_position_embeddings,
             max_position_embeddings=None, seq_len=None, factor=None, attention_factor=None):
    """LongRoPE (Phi-3): per-pair divisors, long set only past the original window.

    ``base ** (-2i/dim) / f_i`` with ``f = long_factor`` when
    ``seq_len > original_max_position_embeddings`` and ``short_factor`` otherwise
    (including ``seq_len`` None).  Attention factor: the given one, else with
    ``s = factor`` (or ``max_position_embeddings / original`` when no factor)
    ``sqrt(1 + ln s / ln original)``, or 1 when ``s <= 1``.
    """
    if seq_len is not None and seq_len > original_max_position_embeddings:
        chosen = long_factor
    else:
        chosen = short_factor
    out = [theta / f for theta, f in zip(_theta(dim, float(base)), chosen)]
    if attention_factor is None:
        scale = factor if factor is not None else max_position_embeddings / original_max_position_embeddings
        if scale <= 1.0:
            attention_factor = 1.0
        else:
            attention_factor = math.sqrt(1 + _cr_log(scale) / _cr_log(original_max_position_embeddings))
    return out, float(attention_factor)


def proportional(head_dim, base, partial_rotary_factor, factor=1.0):
    """transformers 5 "proportional" RoPE: exponents over the whole head.

    ``n = int(partial_rotary_factor * head_dim // 2)`` pairs rotate with
    ``base ** (-2i / head_dim) / factor``; the remaining ``head_dim // 2 - n``
    pairs get frequency 0 (they never turn).  Returns ``head_dim // 2`` values.
    """
    rotated = int(partial_rotary_factor * head_dim // 2)
    out = []
    for i, theta in enumerate(_theta(head_dim, float(base))):
        out.append(theta / factor if i < rotated else 0.0)
    return out, 1.0


def freq_factors(dim, base, factors, attention_factor=1.0):
    """Explicit per-pair divisors (llama.cpp's ``rope_freqs``): ``theta_i / factors[i]``."""
    theta, _ = default(dim, base)
    return [t / f for t, f in zip(theta, factors)], float(attention_factor)
