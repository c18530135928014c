"""Tests for pyrope/reference.py, the standard-library RoPE oracle.

The module is loaded by path, exactly as a numpy-free consumer would load it,
so these tests do not depend on the rest of the package.  Expected values
come from mpmath at 50+ significant digits, from hand-checkable numbers, or
from properties (norm preservation, relative-position dependence); never
from the code under test.
"""

import importlib.util
import math
import os
import random
import subprocess
import sys
import time

import mpmath as mp
import pytest

REFERENCE_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "pyrope",
    "reference.py",
)


def _load_reference():
    spec = importlib.util.spec_from_file_location(
        "_pyrope_reference_under_test", REFERENCE_PATH
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()

ABS_TOL = 2e-16  # absolute accuracy promised for cos/sin of exact angles


# ---------------------------------------------------------------------------
# Independent helpers (mpmath)
# ---------------------------------------------------------------------------

def exact_cos_sin(m, w, dps=60):
    """cos and sin of the exact product m * w (w taken as its double value)."""
    with mp.workdps(dps):
        angle = mp.mpf(m) * mp.mpf(w)  # exact: <= 64 + 53 bits << dps digits
        return mp.cos(angle), mp.sin(angle)


def exact_theta(i, dim, base):
    """theta_i = base**(-2i/dim) in mpmath (50 digits)."""
    with mp.workdps(50):
        return mp.mpf(base) ** (mp.mpf(-2 * i) / dim)


def mp_rotate(vec, m, inv_freq, layout="interleaved"):
    """Rotate with mpmath, using exactly the double frequencies given."""
    h = len(inv_freq)
    out = [mp.mpf(v) for v in vec]
    with mp.workdps(60):
        for i, w in enumerate(inv_freq):
            c, s = exact_cos_sin(m, w)
            j0, j1 = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + h)
            x0, x1 = mp.mpf(vec[j0]), mp.mpf(vec[j1])
            out[j0] = x0 * c - x1 * s
            out[j1] = x0 * s + x1 * c
    return out


def quarter_turn_convergents(w, limit=2**53):
    """Positions m <= limit where m*w is very close to a multiple of pi/2.

    These are numerators of the continued-fraction convergents of
    (pi/2) / w, so m*w ~ j*pi/2 with |m*w - j*pi/2| ~ 1/m.
    """
    with mp.workdps(80):
        x = mp.pi / 2 / mp.mpf(w)
        h_prev, h = 1, int(mp.floor(x))  # convergent numerators
        frac = x - mp.floor(x)
        found = []
        while h <= limit:
            if h >= 2:
                found.append(h)
            x = 1 / frac
            a = int(mp.floor(x))
            frac = x - a
            h_prev, h = h, a * h + h_prev
    return found


def assert_cos_sin_accurate(c, s, m, w):
    exact_c, exact_s = exact_cos_sin(m, w)
    assert abs(c - exact_c) <= ABS_TOL, (m, w, c, exact_c)
    assert abs(s - exact_s) <= ABS_TOL, (m, w, s, exact_s)


def random_vector(rng, n, scale=1.0):
    return [rng.uniform(-scale, scale) for _ in range(n)]


# ---------------------------------------------------------------------------
# Frequencies and turns
# ---------------------------------------------------------------------------

def test_pair_frequencies_dim8_hand_values():
    got = ref.pair_frequencies(8, 10000.0)
    assert len(got) == 4
    for g, want in zip(got, [1.0, 0.1, 0.01, 0.001]):
        assert g == pytest.approx(want, rel=1e-15, abs=0)


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 2.5])
@pytest.mark.parametrize("dim", [2, 6, 64, 96, 128, 1000])
def test_pair_frequencies_are_correctly_rounded(dim, base):
    got = ref.pair_frequencies(dim, base)
    assert len(got) == dim // 2
    for i, g in enumerate(got):
        exact = exact_theta(i, dim, base)
        # within half an ulp of the exact real value (the naive
        # base ** (-2*i/dim) is off by up to ~5 ulp for these bases)
        assert abs(g - exact) <= 0.5 * math.ulp(g), (dim, base, i)


def test_pair_frequencies_accepts_int_base_and_numpy_like_dim():
    class Index:
        def __index__(self):
            return 8

    got = ref.pair_frequencies(Index(), 10000)
    assert [isinstance(g, float) for g in got] == [True] * 4
    assert got[1] == pytest.approx(0.1, rel=1e-15, abs=0)


def test_turns_over_4096_dim8():
    got = ref.turns(4096, 8)
    want = [651.899, 65.190, 6.519, 0.652]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=6e-4)
    for i, g in enumerate(got):
        with mp.workdps(50):
            exact = 4096 * exact_theta(i, 8, 10000.0) / (2 * mp.pi)
        assert abs((g - exact) / exact) < 1e-14


def test_pairs_within_one_turn_gap_one_is_all_pairs():
    assert ref.pairs_within_one_turn(1, 64, 10000.0) == 32


GAPS = [1, 2, 3, 5, 6, 7, 10, 50, 100, 1000, 4096, 10**4, 10**5, 10**6,
        10**7, 10**9, 10**12]


def test_pairs_within_one_turn_matches_mpmath_count_and_is_monotone():
    counts = []
    for gap in GAPS:
        with mp.workdps(50):
            direct = sum(
                1 for i in range(32)
                if gap * exact_theta(i, 64, 10000.0) < 2 * mp.pi
            )
        got = ref.pairs_within_one_turn(gap, 64, 10000.0)
        assert got == direct, gap
        counts.append(got)
    assert all(a >= b for a, b in zip(counts, counts[1:]))
    assert counts[0] == 32 and counts[-1] < 32  # it does decrease


# ---------------------------------------------------------------------------
# Exact angles: fixed-point pi, angle_cos_sin, cos_sin
# ---------------------------------------------------------------------------

def test_fixed_point_pi_matches_mpmath():
    bits, value = ref._PI
    assert bits >= 300
    with mp.workdps(bits // 3 + 40):
        exact = mp.pi * mp.mpf(2) ** bits
        assert abs(value - exact) <= 1
        for p in (60, 100, 300, bits - 2):
            assert abs(ref._half_pi_fixed(p) - mp.pi / 2 * mp.mpf(2) ** p) <= 1


POSITIONS = [0, 1, 2, 3, 7, 100, 4095, 2**24 - 1, 2**24, 2**24 + 1,
             2**31 - 1, 2**32 + 5, 2**40, 2**52 + 1, 2**53 - 1, 2**53,
             -1, -(2**24 + 1), -(2**40), -(2**53 - 1)]
FREQUENCIES = [1.0, 0.1, 1e-4, 1.0 / 3.0, 0.7853981633974483, 1e3, 999.9,
               2.0**-30, 1e-300, -0.37]


@pytest.mark.parametrize("w", FREQUENCIES)
def test_angle_cos_sin_matches_mpmath(w):
    for m in POSITIONS:
        c, s = ref.angle_cos_sin(m, w)
        assert isinstance(c, float) and isinstance(s, float)
        assert_cos_sin_accurate(c, s, m, w)


def test_angle_cos_sin_rope_frequencies_at_large_positions():
    inv_freq = ref.pair_frequencies(128, 500000.0)
    for w in inv_freq[::7]:
        for m in (2**31 - 1, 2**40 + 3, 2**53 - 1, -(2**45)):
            assert_cos_sin_accurate(*ref.angle_cos_sin(m, w), m, w)


def test_angle_cos_sin_trivial_angles():
    for m, w in [(0, 1.0), (0, 1e300), (2**53, 0.0), (-5, -0.0), (0, 0.0)]:
        c, s = ref.angle_cos_sin(m, w)
        assert c == pytest.approx(1.0, abs=1e-17)
        assert s == pytest.approx(0.0, abs=1e-300)


def test_angle_cos_sin_is_not_the_rounded_product():
    # 2**53 - 1 times 0.1 is not representable; the rounded product's cosine
    # is off by far more than the promised accuracy.
    m, w = 2**53 - 1, 0.1
    exact_c, _ = exact_cos_sin(m, w)
    assert abs(math.cos(m * w) - exact_c) > 1e-3
    assert abs(ref.angle_cos_sin(m, w)[0] - exact_c) <= ABS_TOL


def test_seed_near_multiples_of_pi():
    # 355 ~ 113 pi, 710 ~ 226 pi, 103993 ~ 33102 pi: sin is tiny there.
    for m, approx_sin in [(355, -3.0144e-5), (710, 6.0288e-5),
                          (103993, -1.9129e-5)]:
        c, s = ref.angle_cos_sin(m, 1.0)
        _, exact_s = exact_cos_sin(m, 1.0)
        assert s == pytest.approx(approx_sin, rel=1e-4)
        assert abs((s - exact_s) / exact_s) < 1e-15
        assert abs(abs(c) - 1.0) < 1e-8


@pytest.mark.parametrize("w", [1.0, 0.1, 1e-4, 3.0, 777.125])
def test_relative_accuracy_near_multiples_of_half_pi(w):
    positions = quarter_turn_convergents(w)
    closest = 1.0
    for m in positions:
        c, s = ref.angle_cos_sin(m, w)
        exact_c, exact_s = exact_cos_sin(m, w, dps=80)
        assert abs(c - exact_c) <= ABS_TOL and abs(s - exact_s) <= ABS_TOL
        small, exact_small = (c, exact_c) if abs(exact_c) < abs(exact_s) else (s, exact_s)
        assert abs((small - exact_small) / exact_small) < 1e-15, (m, w)
        closest = min(closest, abs(exact_small))
    assert closest < 1e-9  # the search really found angles near k*pi/2


def test_extreme_arguments_needing_more_precision():
    # A subnormal frequency with a huge position, and a huge frequency: both
    # need more fixed-point bits of pi than are computed at import.
    for m, w in [(2**1100 + 12345, 2.0**-1074), (3, 1e300), (-(2**70), 1e250)]:
        c, s = ref.angle_cos_sin(m, w)
        with mp.workdps(800):
            angle = mp.mpf(m) * mp.mpf(w)
            exact_c, exact_s = mp.cos(angle), mp.sin(angle)
        assert abs(c - exact_c) <= ABS_TOL and abs(s - exact_s) <= ABS_TOL
    # and ordinary arguments are still right afterwards
    assert_cos_sin_accurate(*ref.angle_cos_sin(2**53 - 1, 0.1), 2**53 - 1, 0.1)


def test_angle_cos_sin_accepts_index_objects():
    class Position:
        def __index__(self):
            return 355

    c, s = ref.angle_cos_sin(Position(), 1.0)
    assert_cos_sin_accurate(c, s, 355, 1.0)


def test_cos_sin_table_shape_and_values():
    positions = [0, 1, 355, 2**24 + 1, 2**53 - 1, -(2**40)]
    inv_freq = ref.pair_frequencies(16, 10000.0) + [1e3]
    cos_rows, sin_rows = ref.cos_sin(positions, inv_freq)
    assert len(cos_rows) == len(sin_rows) == len(positions)
    for j, m in enumerate(positions):
        assert len(cos_rows[j]) == len(sin_rows[j]) == len(inv_freq)
        for i, w in enumerate(inv_freq):
            assert_cos_sin_accurate(cos_rows[j][i], sin_rows[j][i], m, w)


def test_cos_sin_accepts_iterables():
    cos_rows, sin_rows = ref.cos_sin(range(3), (x for x in [0.5]))
    for m in range(3):
        assert cos_rows[m][0] == pytest.approx(math.cos(0.5 * m), abs=1e-16)
        assert sin_rows[m][0] == pytest.approx(math.sin(0.5 * m), abs=1e-16)


def test_cos_sin_is_fast_enough():
    positions = list(range(2**53 - 300, 2**53))
    inv_freq = ref.pair_frequencies(128, 10000.0)  # 300 x 64 entries
    start = time.perf_counter()
    ref.cos_sin(positions, inv_freq)
    per_entry = (time.perf_counter() - start) / (len(positions) * len(inv_freq))
    assert per_entry < 2e-5  # measured ~1.5 microseconds; generous bound


# ---------------------------------------------------------------------------
# Rotations
# ---------------------------------------------------------------------------

def test_rotate_pair_seed_example():
    omega = math.pi / 6
    q, k = (1.0, 2.0), (3.0, 4.0)
    for shift in (0, 10):
        m, n = 2 + shift, 5 + shift
        rq = ref.rotate_pair(*q, m * omega)
        rk = ref.rotate_pair(*k, n * omega)
        assert rq[0] * rk[0] + rq[1] * rk[1] == pytest.approx(2.0, abs=1e-13)


def test_rotate_pair_quarter_turn():
    x0, x1 = ref.rotate_pair(3.0, 4.0, math.pi / 2)
    assert x0 == pytest.approx(-4.0, abs=1e-15)
    assert x1 == pytest.approx(3.0, abs=1e-15)


@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_rotate_preserves_norm(layout):
    rng = random.Random(1)
    vec = random_vector(rng, 64)
    norm = math.sqrt(math.fsum(v * v for v in vec))
    for m in (0, 1, 17, 4096, 2**31 - 1, 2**53 - 1, -999):
        out = ref.rotate(vec, m, layout=layout)
        assert len(out) == 64
        assert math.sqrt(math.fsum(v * v for v in out)) == pytest.approx(norm, rel=1e-14)


@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_rotate_matches_mpmath(layout):
    rng = random.Random(2)
    vec = random_vector(rng, 32, scale=3.0)
    for m in (5, 2**40 + 1, -(2**53 - 1)):
        got = ref.rotate(vec, m, base=500000.0, layout=layout)
        # reference frequencies must be the double theta_i = base**(-2i/32)
        inv_freq = [float(exact_theta(i, 32, 500000.0)) for i in range(16)]
        want = mp_rotate(vec, m, inv_freq, layout)
        for g, w in zip(got, want):
            assert abs(g - w) < 3e-15


def test_rotate_small_position_matches_exact_frequencies():
    # At small positions the double rounding of theta_i is irrelevant: compare
    # with a fully exact mpmath rotation (exact theta, exact angle).
    vec = [1.0, -2.0, 0.5, 4.0, -1.5, 3.0]
    m = 37
    got = ref.rotate(vec, m, base=10000.0)
    with mp.workdps(50):
        for i in range(3):
            a = m * exact_theta(i, 6, 10000.0)
            x0, x1 = vec[2 * i], vec[2 * i + 1]
            assert abs(got[2 * i] - (x0 * mp.cos(a) - x1 * mp.sin(a))) < 1e-14
            assert abs(got[2 * i + 1] - (x0 * mp.sin(a) + x1 * mp.cos(a))) < 1e-14


@pytest.mark.parametrize("rotary_dim", [None, 4, 8, 12])
def test_layouts_agree_after_permutation(rotary_dim):
    rng = random.Random(3)
    n = 12
    r = n if rotary_dim is None else rotary_dim
    v = random_vector(rng, n)
    # u holds the same pairs as v, but in split-half order within [0, r)
    u = list(v)
    for i in range(r // 2):
        u[i] = v[2 * i]
        u[i + r // 2] = v[2 * i + 1]
    for m in (3, 2**33 + 7):
        rv = ref.rotate(v, m, layout="interleaved", rotary_dim=rotary_dim)
        ru = ref.rotate(u, m, layout="split_half", rotary_dim=rotary_dim)
        for i in range(r // 2):
            assert ru[i] == pytest.approx(rv[2 * i], rel=1e-15, abs=1e-16)
            assert ru[i + r // 2] == pytest.approx(rv[2 * i + 1], rel=1e-15, abs=1e-16)
        for j in range(r, n):
            assert ru[j] == pytest.approx(rv[j], rel=1e-15, abs=0)


@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_partial_rotary_dim_leaves_tail_unchanged_and_rotates_head(layout):
    rng = random.Random(4)
    vec = random_vector(rng, 10)
    out = ref.rotate(vec, 1234, base=10000.0, layout=layout, rotary_dim=6)
    # the tail is copied, so it must be bit-for-bit identical
    assert out[6:] == vec[6:]
    # the head uses frequencies with exponent over rotary_dim: base**(-2i/6)
    inv_freq = [float(exact_theta(i, 6, 10000.0)) for i in range(3)]
    want = mp_rotate(vec[:6], 1234, inv_freq, layout)
    for g, w in zip(out[:6], want):
        assert abs(g - w) < 1e-15


def test_rotate_returns_new_list():
    vec = [1.0, 2.0, 3.0, 4.0]
    out = ref.rotate(vec, 5)
    assert vec == [1.0, 2.0, 3.0, 4.0] and out is not vec
    assert ref.rotate(vec, 0) is not vec


@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_inverse_after_forward_is_identity(layout):
    rng = random.Random(5)
    vec = random_vector(rng, 16)
    inv_freq = ref.pair_frequencies(12, 10000.0)  # rotate 12 of 16 coordinates
    for m in (1, 999, 2**53 - 1, -(2**30)):
        forward = ref.rotate_with_inv_freq(vec, m, inv_freq, layout=layout)
        back = ref.rotate_with_inv_freq(forward, m, inv_freq, layout=layout,
                                        inverse=True)
        for b, v in zip(back, vec):
            assert b == pytest.approx(v, abs=1e-15)
        negative = ref.rotate_with_inv_freq(vec, -m, inv_freq, layout=layout)
        inverse = ref.rotate_with_inv_freq(vec, m, inv_freq, layout=layout,
                                           inverse=True)
        for a, b in zip(negative, inverse):
            assert a == pytest.approx(b, abs=1e-15)


def test_attention_factor_scales_rotated_part_only():
    vec = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    inv_freq = [1.0, 0.01]
    plain = mp_rotate(vec, 77, inv_freq)
    scaled = ref.rotate_with_inv_freq(vec, 77, inv_freq, attention_factor=1.5)
    for j in range(4):
        assert abs(scaled[j] - 1.5 * plain[j]) < 1e-14
    assert scaled[4:] == [5.0, 6.0]


def test_rotate_with_inv_freq_explicit_split_half_pairs():
    # pair (i, i+h): with h = 2, coordinate 0 pairs with 2 and 1 with 3
    got = ref.rotate_with_inv_freq([1.0, 0.0, 0.0, 1.0], 1, [math.pi / 2, math.pi],
                                   layout="split_half")
    assert got[0] == pytest.approx(0.0, abs=1e-15)   # (1, 0) turned 90 deg
    assert got[2] == pytest.approx(1.0, abs=1e-15)
    assert got[1] == pytest.approx(0.0, abs=1e-15)   # (0, 1) turned 180 deg
    assert got[3] == pytest.approx(-1.0, abs=1e-15)


def test_seed_non_monotone_example():
    q = k = [1.0, 0.0]
    def score(distance, start=0):
        rq = ref.rotate_with_inv_freq(q, start, [1.0])
        rk = ref.rotate_with_inv_freq(k, start + distance, [1.0])
        return rq[0] * rk[0] + rq[1] * rk[1]
    assert score(3) == pytest.approx(-0.989992, abs=1e-6)
    assert score(6) == pytest.approx(0.960170, abs=1e-6)
    assert score(6, start=10**6) == pytest.approx(0.960170, abs=1e-6)


# ---------------------------------------------------------------------------
# Scores
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_rotary_score_depends_only_on_offset(layout):
    rng = random.Random(6)
    q, k = random_vector(rng, 64), random_vector(rng, 64)
    scores = [ref.rotary_score(q, k, s, s + 2, layout=layout)
              for s in (3, 10, 100, 4000)]
    for s in scores[1:]:
        assert s == pytest.approx(scores[0], rel=1e-9)
    # and it does depend on the offset
    assert abs(ref.rotary_score(q, k, 3, 40, layout=layout) - scores[0]) > 1e-6


def test_rotary_score_seed_example():
    # q=(1,2), k=(3,4), dim 2: theta_0 = 1, angle (n - m) = 3 radians
    got = ref.rotary_score([1.0, 2.0], [3.0, 4.0], 2, 5)
    # q . R(3) k = (q0 k0 + q1 k1) cos 3 + (q1 k0 - q0 k1) sin 3
    want = (1 * 3 + 2 * 4) * math.cos(3) + (2 * 3 - 1 * 4) * math.sin(3)
    assert got == pytest.approx(want, abs=1e-14)


def test_additive_score_varies_with_start():
    rng = random.Random(7)
    q, k = random_vector(rng, 64), random_vector(rng, 64)
    scores = [ref.additive_score(q, k, s, s + 2) for s in (3, 10, 100, 4000)]
    assert max(scores) - min(scores) > 1e-3


def test_sinusoidal_position_matches_mpmath():
    dim = 10
    for m in (0, 1, 50, 2**40 + 1):
        got = ref.sinusoidal_position(m, dim)
        assert len(got) == dim
        for i in range(dim // 2):
            theta = float(exact_theta(i, dim, 10000.0))
            c, s = exact_cos_sin(m, theta)
            assert abs(got[2 * i] - s) <= ABS_TOL
            assert abs(got[2 * i + 1] - c) <= ABS_TOL


def test_shift_comparison_rows():
    rng = random.Random(8)
    q, k = random_vector(rng, 8), random_vector(rng, 8)
    rows = ref.shift_comparison(q, k)
    assert [row[0] for row in rows] == [3, 10, 100, 4000]
    assert all(len(row) == 3 for row in rows)
    rotary = [row[1] for row in rows]
    assert max(rotary) - min(rotary) < 1e-12
    for start, rot, add in rows:
        with mp.workdps(50):
            pm, pn = [], []
            for i in range(4):
                theta = exact_theta(i, 8, 10000.0)
                a, b = start * theta, (start + 2) * theta
                pm += [mp.sin(a), mp.cos(a)]
                pn += [mp.sin(b), mp.cos(b)]
            want_add = mp.fsum((q[j] + pm[j]) * (k[j] + pn[j]) for j in range(8))
            want_rot = mp.fsum(
                (q[2 * i] * k[2 * i] + q[2 * i + 1] * k[2 * i + 1])
                * mp.cos(2 * exact_theta(i, 8, 10000.0))
                + (q[2 * i + 1] * k[2 * i] - q[2 * i] * k[2 * i + 1])
                * mp.sin(2 * exact_theta(i, 8, 10000.0))
                for i in range(4)
            )
        assert abs(add - want_add) < 1e-12
        assert abs(rot - want_rot) < 1e-12
    assert len(ref.shift_comparison(q, k, gap=5, starts=[0, 7])) == 2


# ---------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------

V4 = [1.0, 2.0, 3.0, 4.0]
NAN, INF = float("nan"), float("inf")

BAD_CALLS = [
    ("dim odd", lambda: ref.pair_frequencies(7), ValueError, ["dim", "7"]),
    ("dim zero", lambda: ref.pair_frequencies(0), ValueError, ["dim", "0"]),
    ("dim negative", lambda: ref.pair_frequencies(-4), ValueError, ["dim", "-4"]),
    ("dim float", lambda: ref.pair_frequencies(8.0), TypeError, ["dim", "8.0"]),
    ("dim bool", lambda: ref.pair_frequencies(True), TypeError, ["dim", "bool"]),
    ("base one", lambda: ref.pair_frequencies(8, base=1.0), ValueError, ["base", "1.0"]),
    ("base small", lambda: ref.pair_frequencies(8, base=0.5), ValueError, ["base", "0.5"]),
    ("base inf", lambda: ref.pair_frequencies(8, base=INF), ValueError, ["base", "inf"]),
    ("base nan", lambda: ref.turns(4, 8, base=NAN), ValueError, ["base", "nan"]),
    ("base str", lambda: ref.rotate(V4, 0, base="10000"), TypeError, ["base", "10000"]),
    ("vec odd", lambda: ref.rotate([1.0, 2.0, 3.0], 0), ValueError, ["vec", "3"]),
    ("vec empty", lambda: ref.rotate([], 0), ValueError, ["vec", "0"]),
    ("vec str entry", lambda: ref.rotate(["a", 1.0], 0), TypeError, ["vec[0]", "'a'"]),
    ("vec string", lambda: ref.rotate("abcd", 0), TypeError, ["vec", "abcd"]),
    ("rotary_dim odd", lambda: ref.rotate(V4, 0, rotary_dim=3), ValueError, ["rotary_dim", "3"]),
    ("rotary_dim big", lambda: ref.rotate(V4, 0, rotary_dim=6), ValueError, ["rotary_dim", "6"]),
    ("rotary_dim zero", lambda: ref.rotate(V4, 0, rotary_dim=0), ValueError, ["rotary_dim", "0"]),
    ("rotary_dim float", lambda: ref.rotate(V4, 0, rotary_dim=2.0), TypeError, ["rotary_dim", "2.0"]),
    ("position float", lambda: ref.rotate(V4, 1.0), TypeError, ["position", "1.0"]),
    ("position bool", lambda: ref.rotate(V4, True), TypeError, ["position", "True"]),
    ("position str", lambda: ref.rotate(V4, "3"), TypeError, ["position", "'3'"]),
    ("layout", lambda: ref.rotate(V4, 0, layout="neox"), ValueError, ["layout", "neox"]),
    ("layout none", lambda: ref.rotate_with_inv_freq(V4, 0, [1.0], layout=None),
     ValueError, ["layout", "None"]),
    ("q k lengths", lambda: ref.rotary_score([1.0, 2.0], V4, 0, 1), ValueError,
     ["q and k", "2 and 4"]),
    ("q odd", lambda: ref.rotary_score([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 0, 1),
     ValueError, ["q", "3"]),
    ("additive lengths", lambda: ref.additive_score(V4, [1.0, 2.0], 0, 1), ValueError,
     ["q and k", "4 and 2"]),
    ("score m float", lambda: ref.rotary_score(V4, V4, 0.5, 1), TypeError, ["position", "0.5"]),
    ("inv_freq inf", lambda: ref.rotate_with_inv_freq(V4, 0, [1.0, INF]), ValueError,
     ["inv_freq", "inf"]),
    ("inv_freq nan", lambda: ref.cos_sin([0], [NAN]), ValueError, ["inv_freq", "nan"]),
    ("inv_freq str", lambda: ref.cos_sin([0], ["x"]), TypeError, ["inv_freq[0]", "'x'"]),
    ("vec too short", lambda: ref.rotate_with_inv_freq([1.0, 2.0], 0, [1.0, 2.0]),
     ValueError, ["vec", "2"]),
    ("attention_factor", lambda: ref.rotate_with_inv_freq(V4, 0, [1.0], attention_factor=INF),
     ValueError, ["attention_factor", "inf"]),
    ("angle position", lambda: ref.angle_cos_sin(1.5, 1.0), TypeError, ["position", "1.5"]),
    ("angle w str", lambda: ref.angle_cos_sin(1, "x"), TypeError, ["w", "'x'"]),
    ("angle w nan", lambda: ref.angle_cos_sin(1, NAN), ValueError, ["w", "nan"]),
    ("positions entry", lambda: ref.cos_sin([0, 1.0], [1.0]), TypeError,
     ["positions[1]", "1.0"]),
    ("positions scalar", lambda: ref.cos_sin(5, [1.0]), TypeError, ["positions", "5"]),
    ("delta float", lambda: ref.turns(1.5, 8), TypeError, ["delta", "1.5"]),
    ("turns dim", lambda: ref.turns(10, 9), ValueError, ["dim", "9"]),
    ("within base", lambda: ref.pairs_within_one_turn(10, 8, base=1), ValueError, ["base", "1"]),
    ("sinusoidal dim", lambda: ref.sinusoidal_position(0, 5), ValueError, ["dim", "5"]),
    ("sinusoidal pos", lambda: ref.sinusoidal_position(0.0, 4), TypeError, ["position", "0.0"]),
    ("gap float", lambda: ref.shift_comparison(V4, V4, gap=1.5), TypeError, ["gap", "1.5"]),
    ("starts entry", lambda: ref.shift_comparison(V4, V4, starts=(1, 2.0)), TypeError,
     ["starts[1]", "2.0"]),
    ("rotate_pair str", lambda: ref.rotate_pair("1", 2.0, 0.5), TypeError, ["x0", "'1'"]),
]


@pytest.mark.parametrize("call, error, pieces", [c[1:] for c in BAD_CALLS],
                         ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments(call, error, pieces):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for piece in pieces:
        assert piece in message


# ---------------------------------------------------------------------------
# Standalone use
# ---------------------------------------------------------------------------

def test_loads_and_works_without_numpy_or_the_package():
    script = "\n".join([
        "import importlib.util, sys",
        "sys.modules['numpy'] = None  # any 'import numpy' now fails",
        f"spec = importlib.util.spec_from_file_location('standalone', {REFERENCE_PATH!r})",
        "mod = importlib.util.module_from_spec(spec)",
        "spec.loader.exec_module(mod)",
        "assert not any(n == 'pyrope' or n.startswith('pyrope.') for n in sys.modules)",
        "print(*mod.pair_frequencies(8))",
        "print(*mod.angle_cos_sin(355, 1.0))",
        "print(*mod.rotate([1.0, 0.0], 3, base=10000.0))",
    ])
    result = subprocess.run([sys.executable, "-I", "-c", script],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [[float(x) for x in line.split()] for line in result.stdout.splitlines()]
    assert len(lines) == 3
    for got, want in zip(lines[0], [1.0, 0.1, 0.01, 0.001]):
        assert got == pytest.approx(want, rel=1e-15)
    assert lines[1][0] == pytest.approx(math.cos(355), abs=2e-16)
    assert lines[1][1] == pytest.approx(-3.0144353359488e-05, rel=1e-12)
    assert lines[2][0] == pytest.approx(math.cos(3), abs=2e-16)
    assert lines[2][1] == pytest.approx(math.sin(3), abs=2e-16)
