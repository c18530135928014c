"""Correctly rounded logarithms and powers: the same bits on every machine.

The frequency rules compute their floats here instead of with numpy's ``**`` or
``math.log``: numpy picks its power routine by CPU (an AVX-512 one, another
with AVX2 only) and a C library may pick its own by CPU or differ between
operating systems, so the same configuration gave different frequencies,
tables and fingerprints on different machines.  A correctly rounded result is
a property of the real number alone: the double nearest to it (ties to even).

How (Ziv's method): the value is evaluated in decimal arithmetic (the standard
library's ``decimal``, exact software arithmetic, the same on every platform)
at ``P`` significant digits, with a proven bound ``E`` on its relative error.
Rounding to the nearest double is monotonic, so when ``v (1 - E)`` and
``v (1 + E)`` round to the same double, so does the exact value, which lies
between them.  Otherwise ``P`` is doubled.  A power can be exactly halfway
between two doubles (``t**2 ** 1.5 = t**3`` with 54 significant bits); after a
few doublings the last bit is settled exactly, by comparing the power with the
midpoint in rational arithmetic.  A logarithm of a double other than 1 is
transcendental, never a midpoint, so its loop ends.

Each decimal operation (``ln``, ``exp``, a product, a quotient) rounds once to
``P`` digits, a relative error of at most ``u = 10**(1 - P)``.  The bounds
below add those ``u`` generously, in ``u`` units; ``docs/ACCURACY.md`` states
the contract and tests/test_same_bits.py checks it against mpmath.
"""

from __future__ import annotations

import decimal
import functools
import math
import sys
from decimal import Decimal
from fractions import Fraction

__all__ = ["log", "power", "pair_frequencies"]

_FIRST_DIGITS = 40          # about 2**-130 relative: a double's rounding needs 2**-53 and a margin
_EXACT_AFTER_DIGITS = 320   # past this a power is decided in rational arithmetic (_rational_power)


def _context(digits):
    # its own context: the caller's decimal settings (precision, traps) never leak in
    return decimal.Context(prec=digits, rounding=decimal.ROUND_HALF_EVEN, Emin=-999999, Emax=999999,
                           traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow])


def _decided(ctx, value, bound):
    """The double nearest to every number within relative ``bound`` of ``value`` (a
    positive Decimal), or None when that interval holds a rounding boundary."""
    low = float(ctx.multiply(value, ctx.subtract(1, bound)))
    high = float(ctx.multiply(value, ctx.add(1, bound)))
    return low if low == high else None


def log(x: float) -> float:
    """``ln(x)`` correctly rounded to a double, for a finite double ``x > 0``."""
    x = float(x)
    if not 0.0 < x < math.inf:
        raise ValueError(f"log needs a finite x > 0, got {x!r}")
    if x == 1.0:
        return 0.0
    digits = _FIRST_DIGITS
    while True:
        ctx = _context(digits)
        value = ctx.ln(Decimal(x))  # one rounding: relative error <= u
        got = _decided(ctx, ctx.abs(value), ctx.multiply(4, ctx.power(10, 1 - digits)))
        if got is not None:
            return math.copysign(got, float(value))
        digits *= 2  # ln x is transcendental: some precision decides it


def power(x: float, num: int, den: int = 1, *, times: float = 1.0) -> float:
    """``times * x ** (num/den)`` correctly rounded to a double: one rounding of the
    exact real number, the exponent an exact fraction (``num``, ``den`` ints, ``den > 0``).

    ``x`` and ``times`` are finite doubles > 0.  A result beyond the largest double
    is ``inf``, one below half the smallest subnormal ``0.0``; subnormal results are
    rounded at their own granularity.
    """
    x, times = float(x), float(times)
    if not (0.0 < x < math.inf and 0.0 < times < math.inf):
        raise ValueError(f"power needs finite x > 0 and times > 0, got x={x!r}, times={times!r}")
    exponent = Fraction(num, den)
    if exponent == 0 or x == 1.0:
        return times
    digits = _FIRST_DIGITS
    while True:
        ctx = _context(digits)
        arg = ctx.divide(ctx.multiply(ctx.ln(Decimal(x)), exponent.numerator), exponent.denominator)
        total = ctx.add(arg, ctx.ln(Decimal(times)))  # ln of the result, to far better than 0.1
        if total > _LN_OVERFLOW:
            return math.inf
        if total < _LN_UNDERFLOW:
            return 0.0
        value = ctx.multiply(ctx.exp(arg), Decimal(times))
        if digits > _EXACT_AFTER_DIGITS:
            return _rational_power(x, exponent, times, float(value))
        # ln x rounds once (u relative), so arg, after two more roundings, is off
        # by at most 3u |arg|; exp turns that absolute error into a relative one
        # and rounds (u); the product rounds (u); 1.01 covers second-order terms
        bound = ctx.multiply(ctx.add(ctx.multiply(ctx.abs(arg), 3), 3),
                             ctx.multiply(Decimal("1.01"), ctx.power(10, 1 - digits)))
        got = _decided(ctx, value, bound)
        if got is not None:
            return got
        digits *= 2


# ln of the largest double is 709.78 and of half the smallest subnormal (2**-1075)
# -745.13: past these margins the rounded result is inf or 0 whatever the error
_LN_OVERFLOW = 710
_LN_UNDERFLOW = -746


def _rational_power(x, exponent, times, guess):
    """``power`` decided exactly, from a ``guess`` within a few doubles of it.

    With ``y = times * x**(a/b)`` (``b > 0``) and a rational ``t > 0``:
    ``y > t`` iff ``x**a > (t/times)**b`` (for ``a < 0``: iff
    ``1 > (t/times)**b * x**-a``).  The guess walks to the double whose
    rounding interval holds ``y``, ties to the even significand.  Slow for a
    large ``b`` (numbers of ``53 b`` bits), so used only where the decimal
    evaluation could not decide: an exact midpoint, or one closer than
    ``10**-320`` relative."""
    a, b = exponent.numerator, exponent.denominator
    base = Fraction(x)

    def above(t):  # sign of y - t
        ratio = Fraction(t) / Fraction(times)
        left, right = (base ** a, ratio ** b) if a > 0 else (1, ratio ** b * base ** (-a))
        return (left > right) - (left < right)

    t = min(max(guess, 0.0), sys.float_info.max)
    while True:
        up = math.nextafter(t, math.inf)
        upper_mid = Fraction(t) + Fraction(math.ulp(t)) / 2 if up == math.inf else (Fraction(t) + Fraction(up)) / 2
        side = above(upper_mid)
        if side > 0 or (side == 0 and _odd(t)):
            if up == math.inf:
                return math.inf
            t = up
            continue
        if t == 0.0:
            return 0.0
        down = math.nextafter(t, 0.0)
        side = above((Fraction(t) + Fraction(down)) / 2)
        if side < 0 or (side == 0 and _odd(t)):
            t = down
            continue
        return t


def _odd(t):
    """Is the last bit of the significand of the double ``t >= 0`` a one?"""
    return t != 0.0 and (Fraction(t) / Fraction(math.ulp(t))).numerator % 2 == 1


@functools.lru_cache(maxsize=512)
def pair_frequencies(base: float, dim: int) -> tuple:
    """``base ** (-2i/dim)`` for ``i = 0 .. dim//2 - 1``, each correctly rounded.

    One power per pair would cost a decimal ``exp`` each (~20 us); instead
    ``r_i = r_(i-1) * q`` with ``q = base ** (-2/dim)``, and the error bound
    grows with ``i``: ``q`` carries ``|ln q| (3u) + 2u`` relative, each product
    adds ``u``, so ``r_i`` is within ``i |ln q| 3u + 3u i + u`` of the exact
    ``base ** (-2i/dim)``, and ``i |ln q| <= |ln base|``.  An entry the bound
    cannot decide is computed alone by :func:`power`.
    """
    base = float(base)
    pairs = dim // 2
    ctx = _context(_FIRST_DIGITS + len(str(pairs)))
    u = ctx.power(10, 1 - ctx.prec)
    ln_q = ctx.divide(ctx.multiply(ctx.ln(Decimal(base)), -2), dim)
    q = ctx.exp(ln_q)
    per_pair = ctx.multiply(ctx.add(ctx.multiply(ctx.abs(ln_q), 3), 4), ctx.multiply(Decimal("1.01"), u))
    out = [1.0]
    r = Decimal(1)
    for i in range(1, pairs):
        r = ctx.multiply(r, q)
        got = _decided(ctx, r, ctx.multiply(i + 1, per_pair))
        out.append(got if got is not None else power(base, -2 * i, dim))
    return tuple(out[:pairs])
