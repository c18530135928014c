"""Standard-library reference implementation of rotary position embedding (RoPE).

This module is the independent oracle that pyrope's C kernel is validated
against.  It is written to be obviously right rather than fast:

* only the Python standard library is used (no numpy, no imports from the
  rest of the ``pyrope`` package), so the file can be loaded on its own by
  path, e.g. with ``importlib.util.spec_from_file_location``;
* everything is computed in double precision with plain loops over Python
  lists;
* every bad argument is rejected with an exception that names the argument,
  the rule it breaks and the value received.

Angles ``m * w`` (an integer position times a double frequency) are never
formed as a rounded double product.  Because ``w`` is a double, ``m * w`` is
an exact dyadic rational ``x / 2**e``.  ``_reduce_quarter_turns`` reduces it
modulo pi/2 with integer arithmetic against a fixed-point pi computed at import
with Machin's formula, so ``angle_cos_sin`` and ``cos_sin`` return cos and sin
of the *exact* product, accurate to about one ulp (absolute error below
2e-16, and relative accuracy near the zeros of cos and sin) for any position
that fits in memory, including positions up to 2**53 and beyond.

Conventions
-----------
* Pair ``i`` of a ``dim``-dimensional vector turns with frequency
  ``theta_i = base ** (-2 i / dim)`` (``pair_frequencies`` returns the
  correctly rounded doubles); at position ``m`` it is rotated by the angle
  ``m * theta_i``, formed exactly from that double.
* ``layout="interleaved"`` pairs coordinates (0, 1), (2, 3), ...;
  ``layout="split_half"`` pairs (i, i + r/2), where ``r`` is the number of
  rotated coordinates.
* A pair ``(x0, x1)`` rotated by ``a`` becomes
  ``(x0 cos a - x1 sin a, x0 sin a + x1 cos a)``.
"""

import functools
import math
import numbers
import operator
from fractions import Fraction

__all__ = [
    "pair_frequencies",
    "rotate_pair",
    "angle_cos_sin",
    "cos_sin",
    "rotate_with_inv_freq",
    "section_components",
    "rotate_sections",
    "rotate",
    "rotary_score",
    "sinusoidal_position",
    "additive_score",
    "shift_comparison",
    "turns",
    "pairs_within_one_turn",
]

LAYOUTS = ("interleaved", "split_half")


# ---------------------------------------------------------------------------
# Argument checking
# ---------------------------------------------------------------------------

def _describe(value):
    """Return ``"<type> <repr>"`` for error messages."""
    return f"{type(value).__name__} {value!r}"


def _integer(name, value):
    """Return ``value`` as a Python int; reject bool, float and non-integers.

    Objects implementing ``__index__`` (for example numpy integers) are
    accepted through ``operator.index``.
    """
    if isinstance(value, (bool, float)):
        raise TypeError(f"{name} must be an integer, got {_describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {_describe(value)}"
        ) from None


def _real(name, value):
    """Return ``value`` as a float; reject bool, strings and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_describe(value)}")
    return float(value)


def _finite(name, value):
    """Return ``value`` as a finite float."""
    result = _real(name, value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _positive_even(name, value):
    """Return ``value`` as an int, requiring a positive even integer."""
    value = _integer(name, value)
    if value <= 0 or value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {value}")
    return value


def _base(value):
    """Return the RoPE base as a float, requiring finite and > 1."""
    result = _real("base", value)
    if not (math.isfinite(result) and result > 1.0):
        raise ValueError(
            f"base must be a finite number greater than 1, got {value!r}"
        )
    return result


def _layout(value):
    """Check that ``value`` names a known layout."""
    if not (isinstance(value, str) and value in LAYOUTS):
        raise ValueError(
            f"layout must be 'interleaved' or 'split_half', got {value!r}"
        )
    return value


def _vector(name, values):
    """Return ``values`` as a list of floats of even length."""
    if isinstance(values, (str, bytes)):
        raise TypeError(
            f"{name} must be a sequence of numbers, got {_describe(values)}"
        )
    try:
        items = list(values)
    except TypeError:
        raise TypeError(
            f"{name} must be a sequence of numbers, got {_describe(values)}"
        ) from None
    result = [_real(f"{name}[{i}]", v) for i, v in enumerate(items)]
    if len(result) % 2:
        raise ValueError(
            f"{name} must have an even length, got length {len(result)}"
        )
    return result


def _frequencies(values):
    """Return the angular frequencies ``inv_freq`` as a list of finite floats."""
    if isinstance(values, (str, bytes)):
        raise TypeError(
            f"inv_freq must be a sequence of numbers, got {_describe(values)}"
        )
    try:
        items = list(values)
    except TypeError:
        raise TypeError(
            f"inv_freq must be a sequence of numbers, got {_describe(values)}"
        ) from None
    result = []
    for i, v in enumerate(items):
        w = _real(f"inv_freq[{i}]", v)
        if not math.isfinite(w):
            raise ValueError(f"inv_freq entries must be finite, got {v!r} at index {i}")
        result.append(w)
    return result


def _same_length_pair(q, k):
    """Return q and k as float lists of equal, positive, even length."""
    q = _vector("q", q)
    k = _vector("k", k)
    if len(q) != len(k):
        raise ValueError(
            f"q and k must have the same length, got {len(q)} and {len(k)}"
        )
    if not q:
        raise ValueError("q and k must be non-empty, got length 0")
    return q, k


def _dot(u, v):
    """Dot product of two equal-length float lists (accurately summed)."""
    return math.fsum(a * b for a, b in zip(u, v))


# ---------------------------------------------------------------------------
# Exact argument reduction
# ---------------------------------------------------------------------------

def _pi_fixed_point(bits):
    """Return an integer P with ``|P - pi * 2**bits| <= 1``.

    Uses Machin's formula ``pi = 16 atan(1/5) - 4 atan(1/239)`` in integer
    fixed point with 64 guard bits; every truncated term is off by less than
    one guard unit, so the total error is far below one unit of the result.
    """
    guard = 64
    one = 1 << (bits + guard)

    def arctan_of_inverse(n):
        # atan(1/n) = 1/n - 1/(3 n^3) + 1/(5 n^5) - ..., scaled by `one`
        total = 0
        power = one // n  # one / n^(2j+1)
        j = 0
        while power:
            term = power // (2 * j + 1)
            total += -term if j % 2 else term
            power //= n * n
            j += 1
        return total

    pi = 16 * arctan_of_inverse(5) - 4 * arctan_of_inverse(239)
    return (pi + (1 << (guard - 1))) >> guard


# pi in fixed point: _PI[1] ~= pi * 2**_PI[0].  1088 bits are enough for the
# first reduction pass of every angle m * w with |m| < 2**63 and any double
# |w| < 2**300 (subnormals included); larger needs grow it (_half_pi_fixed).
_PI = (1088, _pi_fixed_point(1088))


def _half_pi_fixed(p):
    """Return an integer H with ``|H - (pi/2) * 2**p| <= 1``.

    Recomputes the fixed-point pi with more bits when ``p`` asks for it.
    """
    global _PI
    bits, pi = _PI
    if p + 2 > bits:
        bits = max(2 * bits, p + 64)
        pi = _pi_fixed_point(bits)
        _PI = (bits, pi)
    shift = bits - p + 1  # (pi/2) * 2**p == pi * 2**bits / 2**shift
    return (pi + (1 << (shift - 1))) >> shift


def _reduce_quarter_turns(x, e):
    """Reduce the exact angle ``x / 2**e`` modulo pi/2.

    ``x`` and ``e >= 0`` are integers.  Returns ``(quadrant, r)`` with
    ``x / 2**e = k * pi/2 + r`` for an integer ``k`` with ``k % 4 ==
    quadrant`` and ``|r|`` at most slightly above pi/4; ``r`` is a float
    whose relative error is below 2**-64 before its final (correctly rounded)
    conversion to double.

    The angle is scaled to ``a = x * 2**(p-e)`` (exact because ``p >= e``),
    ``k`` is the nearest integer to ``a / H`` with ``H ~ (pi/2) * 2**p``, and
    the remainder ``a - k*H`` is off by at most ``|k|`` units of ``2**-p``.
    If that bound is not 64 bits below the remainder (the angle is very close
    to a multiple of pi/2) the precision is doubled and the step repeated; as
    pi is irrational the remainder is never zero for ``k != 0``, so this ends.
    """
    if 4 * abs(x) <= 3 << e:  # |angle| <= 3/4 < pi/4: nothing to reduce
        return 0, x / (1 << e)
    # ~log2 |k| + 100 bits: enough for an ordinary remainder on the first pass
    p = max(e, x.bit_length() - e + 100)
    while True:
        half_pi = _half_pi_fixed(p)
        a = x << (p - e)
        k = (2 * a + half_pi) // (2 * half_pi)  # round(a / half_pi)
        r = a - k * half_pi
        if abs(r) > (abs(k) + 1) << 64:
            return k % 4, r / (1 << p)  # int / int is correctly rounded
        p *= 2


def _dyadic(w):
    """Return ``(num, e)`` with ``w == num / 2**e`` exactly and ``e >= 0``."""
    num, den = w.as_integer_ratio()
    return num, den.bit_length() - 1


def _cos_sin_dyadic(m, num, e):
    """Return ``(cos, sin)`` of the exact angle ``m * num / 2**e``."""
    if m == 0 or num == 0:
        return 1.0, 0.0
    quadrant, r = _reduce_quarter_turns(m * num, e)
    c, s = math.cos(r), math.sin(r)
    if quadrant == 0:
        return c, s
    if quadrant == 1:  # angle = r + pi/2
        return -s, c
    if quadrant == 2:  # angle = r + pi
        return -c, -s
    return s, -c  # angle = r + 3 pi/2


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def _power_exceeds(base, a, b, y):
    """Return whether ``base ** (a/b) > y`` exactly (``base``, ``y`` > 0, ``b`` > 0)."""
    return Fraction(base) ** a > Fraction(y) ** b


def _correctly_rounded_power(base, exponent):
    """Return ``base ** exponent`` correctly rounded to a double.

    ``base`` is a float > 1 and ``exponent`` a ``Fraction``.  A first estimate
    is within about one ulp: ``exponent`` rounded to a double (``hi``) loses
    ``lo = exponent - hi``, which is put back to first order as
    ``base**hi * (1 + lo * ln(base))``.  The last bit is then settled exactly
    by comparing the true power with the midpoints to the neighbouring
    doubles, in rational arithmetic (``base**(a/b) > y  <=>  base**a > y**b``).
    """
    a, b = exponent.numerator, exponent.denominator
    hi = float(exponent)
    lo = float(exponent - Fraction(hi))
    t = base ** hi * (1.0 + lo * math.log(base))
    while True:
        up = math.nextafter(t, math.inf)
        if _power_exceeds(base, a, b, (Fraction(t) + Fraction(up)) / 2):
            t = up
            continue
        down = math.nextafter(t, 0.0)
        if not _power_exceeds(base, a, b, (Fraction(t) + Fraction(down)) / 2):
            t = down
            continue
        return t


@functools.lru_cache(maxsize=256)
def _pair_frequencies(dim, base):
    """Cached body of ``pair_frequencies`` for checked arguments."""
    return tuple(
        _correctly_rounded_power(base, Fraction(-2 * i, dim))
        for i in range(dim // 2)
    )


def pair_frequencies(dim, base=10000.0):
    """Return the ``dim // 2`` angular frequencies ``theta_i = base**(-2i/dim)``.

    Pair ``i`` of a ``dim``-dimensional vector is rotated by ``m * theta_i``
    at position ``m``.  Each entry is the correctly rounded double of the
    exact real number ``base**(-2i/dim)`` (``base`` taken as its double).

    Raises ``ValueError`` unless ``dim`` is a positive even integer and
    ``base`` is finite and greater than 1.
    """
    dim = _positive_even("dim", dim)
    base = _base(base)
    return list(_pair_frequencies(dim, base))


def rotate_pair(x0, x1, angle):
    """Rotate the 2-vector ``(x0, x1)`` by ``angle`` radians.

    Returns ``(x0 cos a - x1 sin a, x0 sin a + x1 cos a)``.  ``angle`` is
    used as the double it is; to rotate by ``m * w`` exactly for a large
    integer position ``m`` use ``angle_cos_sin``.
    """
    x0 = _real("x0", x0)
    x1 = _real("x1", x1)
    angle = _finite("angle", angle)
    c, s = math.cos(angle), math.sin(angle)
    return (x0 * c - x1 * s, x0 * s + x1 * c)


def angle_cos_sin(position, w):
    """Return ``(cos(position * w), sin(position * w))`` of the exact product.

    ``position`` is an integer (bool and float are rejected with
    ``TypeError``; numpy integers are accepted) and ``w`` a finite real,
    taken as a double.  The product is not rounded: it is reduced modulo
    pi/2 exactly, so the results are accurate to about one ulp (absolute
    error below 2e-16) at any position, with full relative accuracy near the
    zeros of cos and sin.
    """
    m = _integer("position", position)
    w = _finite("w", w)
    return _cos_sin_dyadic(m, *_dyadic(w))


def cos_sin(positions, inv_freq):
    """Return the tables ``(cos_rows, sin_rows)`` for ``positions x inv_freq``.

    ``cos_rows[j][i] = cos(positions[j] * inv_freq[i])`` and likewise for
    sin, each computed from the exact product as in ``angle_cos_sin``.  Both
    are lists of lists of floats (one row per position, one column per
    frequency).  This is the function to use for exact reference tables.
    """
    if isinstance(positions, (str, bytes)):
        raise TypeError(
            f"positions must be a sequence of integers, got {_describe(positions)}"
        )
    try:
        items = list(positions)
    except TypeError:
        raise TypeError(
            f"positions must be a sequence of integers, got {_describe(positions)}"
        ) from None
    ms = [_integer(f"positions[{j}]", m) for j, m in enumerate(items)]
    dyadics = [_dyadic(w) for w in _frequencies(inv_freq)]
    cos_rows, sin_rows = [], []
    for m in ms:
        cos_row, sin_row = [], []
        for num, e in dyadics:
            c, s = _cos_sin_dyadic(m, num, e)
            cos_row.append(c)
            sin_row.append(s)
        cos_rows.append(cos_row)
        sin_rows.append(sin_row)
    return cos_rows, sin_rows


def rotate_with_inv_freq(vec, position, inv_freq, layout="interleaved",
                         inverse=False, attention_factor=1.0):
    """Rotate ``vec`` at ``position`` with explicit frequencies ``inv_freq``.

    With ``h = len(inv_freq)``, the first ``2h`` coordinates form ``h`` pairs
    (``(2i, 2i+1)`` for ``"interleaved"``, ``(i, i+h)`` for ``"split_half"``);
    pair ``i`` is rotated by the exact angle ``position * inv_freq[i]``
    (by its negative when ``inverse`` is true), with cos and sin both
    multiplied by ``attention_factor``.  Coordinates from ``2h`` on are
    copied unchanged.  Returns a new list of floats; ``vec`` must have even
    length of at least ``2h``.

    Each rotated coordinate is ``x0*c - x1*s`` (or ``x0*s + x1*c``) evaluated
    in double precision from correctly reduced ``c``, ``s``, so its error is
    within a few ulps of ``max(|x0|, |x1|) * |attention_factor|``.
    """
    vec = _vector("vec", vec)
    m = _integer("position", position)
    freqs = _frequencies(inv_freq)
    layout = _layout(layout)
    factor = _finite("attention_factor", attention_factor)
    half = len(freqs)
    if 2 * half > len(vec):
        raise ValueError(
            f"vec must have at least 2 * len(inv_freq) = {2 * half} "
            f"coordinates, got length {len(vec)}"
        )
    out = list(vec)
    for i, w in enumerate(freqs):
        c, s = _cos_sin_dyadic(m, *_dyadic(w))
        c *= factor
        s *= factor
        if inverse:
            s = -s
        if layout == "interleaved":
            j0, j1 = 2 * i, 2 * i + 1
        else:
            j0, j1 = i, i + half
        x0, x1 = vec[j0], vec[j1]
        out[j0] = x0 * c - x1 * s
        out[j1] = x0 * s + x1 * c
    return out


def section_components(mrope_section, mrope_interleaved, n_pairs):
    """The position component each of ``n_pairs`` rotation pairs turns by
    (multimodal RoPE), as a list of ints.

    In order (Qwen2-VL): ``mrope_section[0]`` pairs take component 0, the
    next ``mrope_section[1]`` component 1, and so on.  Interleaved (Qwen3-VL,
    transformers' ``apply_interleaved_mrope``, written there for 3
    components): pair ``j`` takes component ``c >= 1`` when ``j % k == c``
    and ``j < k * mrope_section[c]``, component 0 otherwise, for any counts
    (as transformers).  In order, raises ``ValueError`` unless the counts add
    up to ``n_pairs``.
    """
    sections = [_integer(f"mrope_section[{i}]", n) for i, n in enumerate(mrope_section)]
    k = len(sections)
    n_pairs = _integer("n_pairs", n_pairs)
    if mrope_interleaved:
        comp = [0] * n_pairs
        for c in range(1, k):
            for j in range(c, min(k * sections[c], n_pairs), k):
                comp[j] = c
    else:
        comp = [c for c, n in enumerate(sections) for _ in range(n)]
    if len(comp) != n_pairs:
        raise ValueError(f"mrope_section {sections} does not assign {n_pairs} pairs in order")
    return comp


def rotate_sections(vec, positions, inv_freq, mrope_section, mrope_interleaved=False,
                    layout="interleaved", inverse=False, attention_factor=1.0):
    """Rotate ``vec`` with one position per component: pair ``i`` turns by
    ``positions[c_i] * inv_freq[i]`` where ``c_i`` is its component
    (:func:`section_components`).  Otherwise as :func:`rotate_with_inv_freq`,
    whose arithmetic it uses pair by pair."""
    vec = _vector("vec", vec)
    freqs = _frequencies(inv_freq)
    layout = _layout(layout)
    half = len(freqs)
    comp = section_components(mrope_section, mrope_interleaved, half)
    if len(positions) != len(mrope_section):
        raise ValueError(f"positions must hold one position per component ({len(mrope_section)}), "
                         f"got {len(positions)}")
    out = list(vec)
    for i, w in enumerate(freqs):
        j0, j1 = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
        out[j0], out[j1] = rotate_with_inv_freq([vec[j0], vec[j1]], positions[comp[i]], [w],
                                                layout="interleaved", inverse=inverse,
                                                attention_factor=attention_factor)
    return out


def rotate(vec, position, base=10000.0, layout="interleaved", rotary_dim=None):
    """Apply RoPE to ``vec`` at integer ``position``; return a new list.

    The first ``r = rotary_dim`` coordinates (default: all of them) are
    rotated in ``r/2`` pairs with frequencies ``theta_i = base**(-2i/r)``
    (``pair_frequencies(r, base)``), paired according to ``layout``;
    coordinates from ``r`` on are returned unchanged.

    Raises ``ValueError`` for an odd-length ``vec``, an odd, non-positive or
    too large ``rotary_dim``, a bad ``base`` or an unknown ``layout``.
    """
    vec = _vector("vec", vec)
    if rotary_dim is None:
        if not vec:
            raise ValueError("vec must be non-empty, got length 0")
        rotary_dim = len(vec)
    rotary_dim = _positive_even("rotary_dim", rotary_dim)
    if rotary_dim > len(vec):
        raise ValueError(
            f"rotary_dim must not exceed len(vec) = {len(vec)}, got {rotary_dim}"
        )
    inv_freq = pair_frequencies(rotary_dim, base)
    return rotate_with_inv_freq(vec, position, inv_freq, layout=layout)


def rotary_score(q, k, m, n, base=10000.0, layout="interleaved"):
    """Return the attention logit ``rotate(q, m) . rotate(k, n)``.

    By construction it depends on the positions only through ``n - m``.
    """
    q, k = _same_length_pair(q, k)
    return _dot(rotate(q, m, base, layout), rotate(k, n, base, layout))


def sinusoidal_position(position, dim, base=10000.0):
    """Return the additive sinusoidal position vector ``P[position]``.

    ``P[m][2i] = sin(m theta_i)`` and ``P[m][2i+1] = cos(m theta_i)`` with
    ``theta_i = base**(-2i/dim)``, the angles being exact products.
    """
    m = _integer("position", position)
    out = []
    for theta in pair_frequencies(dim, base):
        c, s = _cos_sin_dyadic(m, *_dyadic(theta))
        out.append(s)
        out.append(c)
    return out


def additive_score(q, k, m, n, base=10000.0):
    """Return ``(q + P[m]) . (k + P[n])`` with sinusoidal ``P``.

    This is the logit of the original additive position encoding; unlike
    ``rotary_score`` it is not a function of ``n - m`` alone.
    """
    q, k = _same_length_pair(q, k)
    dim = len(q)
    pm = sinusoidal_position(m, dim, base)
    pn = sinusoidal_position(n, dim, base)
    return _dot([a + b for a, b in zip(q, pm)], [a + b for a, b in zip(k, pn)])


def shift_comparison(q, k, gap=2, starts=(3, 10, 100, 4000), base=10000.0):
    """Compare rotary and additive logits for position pairs a fixed gap apart.

    Returns one row ``(start, rotary_score, additive_score)`` per start, for
    query position ``start`` and key position ``start + gap``.  The rotary
    column is constant (up to rounding); the additive one is not.
    """
    q, k = _same_length_pair(q, k)
    gap = _integer("gap", gap)
    if isinstance(starts, (str, bytes)):
        raise TypeError(f"starts must be a sequence of integers, got {_describe(starts)}")
    rows = []
    for j, start in enumerate(starts):
        start = _integer(f"starts[{j}]", start)
        rows.append((
            start,
            rotary_score(q, k, start, start + gap, base),
            additive_score(q, k, start, start + gap, base),
        ))
    return rows


def turns(delta, dim, base=10000.0):
    """Return, per pair, how many revolutions it makes over ``delta`` positions.

    Entry ``i`` is ``delta * theta_i / (2 pi)``.
    """
    delta = _integer("delta", delta)
    return [delta * theta / (2.0 * math.pi) for theta in pair_frequencies(dim, base)]


def pairs_within_one_turn(delta, dim, base=10000.0):
    """Return how many pairs turn less than one full revolution over ``delta``.

    These are the pairs whose angle ``delta * theta_i`` stays below 2 pi in
    magnitude, i.e. that can still tell distances up to ``delta`` apart
    without wrapping around.
    """
    return sum(1 for t in turns(delta, dim, base) if abs(t) < 1.0)
