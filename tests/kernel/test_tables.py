"""cos/sin tables against mpmath: the accuracy contract, entry by entry.

Contract (docs/ACCURACY.md): for |m| < 2**31 and a float64 frequency w, the
float32 entry is within 1 ulp of float32 of scale * cos(m * w) (and sin) with
the product m * w taken exactly, including near the zeros of cos and sin.
pyrope does better: entries are correctly rounded (within half an ulp), which
is what these tests check, with a margin of 1e-6 ulp for the float64 rounding
of the oracle. The oracle is mpmath at 320 bits on the exact product. Every
instruction set the machine has must meet the bound, and the SIMD kernels
must also agree with the scalar specification bit for bit.
"""
import mpmath as mp
import numpy as np
import pytest

import pyrope
from pyrope._engine import tables as _tables

BASES = [10.0, 1e4, 5e5, 1e6, 1e7]
HALVES = [1, 3, 32, 64, 256]          # rotary_dim / 2 for dims 2, 6, 64, 128, 512
MAX_POS = 2**31 - 1
ATTENTION = 1.0 + 0.1 * np.log(8.0)  # a YaRN-style attention factor


def frequencies(base, half):
    """w_i = base ** (-2i / (2 half)), computed here independently of pyrope."""
    return np.ascontiguousarray(base ** (-np.arange(half, dtype=np.float64) / half))


def exact_cos_sin(ms, ws, scale=1.0):
    """scale * cos/sin of the exact products ms[j] * ws[j], rounded to float64."""
    c = np.empty(len(ms))
    s = np.empty(len(ms))
    with mp.workprec(320):
        sc = mp.mpf(float(scale))
        for j, (m, w) in enumerate(zip(ms, ws)):
            cj, sj = mp.cos_sin(mp.mpf(int(m)) * mp.mpf(float(w)))  # exact product
            c[j], s[j] = float(sc * cj), float(sc * sj)
    return c, s


def ulp_errors(got, exact):
    """|got - exact| in float32 ulps of the exact value (subnormal ulp below 2**-126)."""
    e = np.frexp(exact)[1]                       # exact = f * 2**e, 1/2 <= |f| < 1
    ulp = np.ldexp(1.0, np.maximum(e - 24, -149))
    return np.abs(np.asarray(got, dtype=np.float64) - exact) / ulp


HALF_ULP = 0.5 + 1e-6   # correctly rounded, up to the oracle's own float64 rounding


def assert_correctly_rounded(got, exact, what):
    """The contract (1 ulp) and pyrope's stronger promise: correctly rounded."""
    err = ulp_errors(got, exact)
    j = int(np.argmax(err))
    assert err[j] <= HALF_ULP, f"{what}: {err[j]:.3f} ulp at flat index {j}: got {got.flat[j]!r}, exact {exact[j]!r}"
    return float(err.max())


def band_positions(rng):
    """Two positions in every band [2**k, 2**(k+1)) up to 2**31 - 1, either sign,
    plus powers of two, 2**24 +- 1 and the extremes."""
    ms = [0, 1, -1, 2**24 - 1, 2**24, 2**24 + 1, MAX_POS, -MAX_POS]
    ms += [2**k for k in range(31)] + [-(2**k) for k in range(0, 31, 5)]
    for k in range(31):
        hi = min(2 ** (k + 1), MAX_POS + 1)
        ms += list(rng.integers(2**k, hi, 2) * rng.choice([-1, 1], 2))
    return np.array(ms, dtype=np.int64)


def near_quarter_turns(w, limit=MAX_POS):
    """Positions m (|m| <= limit) where m * w comes closest to a multiple of pi/2:
    the denominators of the continued-fraction convergents of w / (pi/2) and the
    next semiconvergent, with the distances |m w - k pi/2| in quarter turns."""
    out = {}
    with mp.workprec(400):
        t = mp.mpf(float(w)) * 2 / mp.pi
        x = t
        q_prev, q = 1, 0
        for _ in range(80):
            a = int(mp.floor(x))
            q_prev, q = q, a * q + q_prev
            if q > limit:
                break
            for m in (q, q + q_prev):
                if 0 < m <= limit:
                    out[m] = abs(m * t - mp.nint(m * t))
            frac = x - a
            if frac == 0:
                break
            x = 1 / frac
    return out


@pytest.fixture(scope="module")
def band_cases():
    """(ms, ws, exact cos, exact sin) for every band position x every frequency of
    every base and dim (frequencies of dim 512 subsampled to keep mpmath cheap)."""
    rng = np.random.default_rng(3)
    pos = band_positions(rng)
    cases = []
    for base in BASES:
        for half in HALVES:
            w = frequencies(base, half)
            cols = np.arange(half) if half <= 64 else np.arange(0, half, 4)
            ms = np.repeat(pos, cols.size)
            ws = np.tile(w[cols], pos.size)
            cases.append((base, half, pos, cols, *exact_cos_sin(ms, ws)))
    return cases


def test_bands_every_base_and_dim_within_one_ulp(isa, band_cases):
    for base, half, pos, cols, want_c, want_s in band_cases:
        c, s = _tables.cos_sin_table(pos, frequencies(base, half), 1.0)
        what = f"{isa} base={base} half={half}"
        assert_correctly_rounded(c[:, cols].ravel(), want_c, what + " cos")
        assert_correctly_rounded(s[:, cols].ravel(), want_s, what + " sin")


@pytest.fixture(scope="module")
def near_zero_cases():
    """Entries whose angle lies closest to a multiple of pi/2, for every
    frequency of every base and dim: the hardest cases for the reduction."""
    ms, ws, dist = [], [], []
    for base in BASES:
        for half in HALVES:
            for w in frequencies(base, half):
                for m, d in near_quarter_turns(w).items():
                    ms += [m, -m]
                    ws += [w, w]
                    dist += [d, d]
    ms, ws = np.array(ms, dtype=np.int64), np.array(ws)
    return ms, ws, np.array([float(d) for d in dist]), *exact_cos_sin(ms, ws)


def test_near_multiples_of_half_pi_within_one_ulp(isa, near_zero_cases):
    ms, ws, dist, want_c, want_s = near_zero_cases
    # The search must really reach angles within 2**-30 quarter turns of a zero.
    assert dist.min() < 2.0**-30
    got_c, got_s = np.empty(ms.size), np.empty(ms.size)
    for w in np.unique(ws):
        sel = ws == w
        c, s = _tables.cos_sin_table(np.ascontiguousarray(ms[sel]), np.array([w]), 1.0)
        got_c[sel], got_s[sel] = c[:, 0], s[:, 0]
    assert_correctly_rounded(got_c, want_c, f"{isa} cos near zeros")
    assert_correctly_rounded(got_s, want_s, f"{isa} sin near zeros")


def test_adversarial_frequencies_within_one_ulp(isa):
    # Frequencies built so that m * w misses k * pi/2 by about 2**-53 k or less:
    # w = k (pi/2) / m rounded, and its neighbours a few ulps away.
    rng = np.random.default_rng(11)
    ms, ws, dist = [], [], []
    with mp.workprec(400):
        for m in [3, 1000003, 2**24 + 1, *rng.integers(2**20, MAX_POS, 12), MAX_POS]:
            for k in [1, 2, 3, 7, 1001, int(m) // 2]:
                w0 = float(k * mp.pi / 2 / int(m))
                for j in range(-2, 3):
                    w = float(np.nextafter(w0, np.inf if j > 0 else -np.inf)) if j else w0
                    for _ in range(abs(j) - 1):
                        w = float(np.nextafter(w, np.inf if j > 0 else -np.inf))
                    if 0 < w <= 4:
                        f = mp.mpf(int(m)) * mp.mpf(w) * 2 / mp.pi
                        ms.append(int(m)); ws.append(w); dist.append(float(abs(f - mp.nint(f))))
    ms, ws = np.array(ms, dtype=np.int64), np.array(ws)
    assert min(dist) < 2.0**-50
    want_c, want_s = exact_cos_sin(ms, ws)
    got_c, got_s = np.empty(ms.size), np.empty(ms.size)
    for j in range(ms.size):
        c, s = _tables.cos_sin_table(ms[j:j + 1], ws[j:j + 1], 1.0)
        got_c[j], got_s[j] = c[0, 0], s[0, 0]
    assert_correctly_rounded(got_c, want_c, f"{isa} cos, adversarial w")
    assert_correctly_rounded(got_s, want_s, f"{isa} sin, adversarial w")


def test_edge_frequencies(isa):
    # Zero, negative, the largest accepted, subnormal and tiny frequencies.
    w = np.array([0.0, -1e-3, 4.0, -4.0, 5e-324, 1e-300, 2.0**-30, -0.7])
    pos = np.array([0, 1, -1, 7, 2**24 + 1, MAX_POS, -MAX_POS], dtype=np.int64)
    ms, ws = np.repeat(pos, w.size), np.tile(w, pos.size)
    for scale in (1.0, ATTENTION):
        want_c, want_s = exact_cos_sin(ms, ws, scale)
        c, s = _tables.cos_sin_table(pos, w, scale)
        assert_correctly_rounded(c.ravel(), want_c, f"{isa} cos, edge w")
        assert_correctly_rounded(s.ravel(), want_s, f"{isa} sin, edge w")
        c, s = _tables.cos_sin_range(-3, 7, w, scale)
        want_c, want_s = exact_cos_sin(np.repeat(np.arange(-3, 4), w.size), np.tile(w, 7), scale)
        assert_correctly_rounded(c.ravel(), want_c, f"{isa} range cos, edge w")
        assert_correctly_rounded(s.ravel(), want_s, f"{isa} range sin, edge w")
    # Zeros are +0 on every path.
    assert not np.signbit(_tables.cos_sin_table(pos, w, 1.0)[1][:, 0]).any()
    assert not np.signbit(_tables.cos_sin_range(-3, 7, w, 1.0)[1][:, 0]).any()


def test_attention_factor_is_rounded_once(isa):
    rng = np.random.default_rng(5)
    w = frequencies(5e5, 64)
    pos = band_positions(rng)
    c, s = _tables.cos_sin_table(pos, w, ATTENTION)
    ms, ws = np.repeat(pos, w.size), np.tile(w, pos.size)
    want_c, want_s = exact_cos_sin(ms, ws, ATTENTION)
    assert_correctly_rounded(c.ravel(), want_c, f"{isa} scaled cos")
    assert_correctly_rounded(s.ravel(), want_s, f"{isa} scaled sin")


# Dense ranges: starts in several bands, across zero, next to near-zero angles;
# 70 rows cross blocks of the angle-addition path, 67 frequencies cross its
# frequency chunk and leave a SIMD tail.
RANGE_STARTS = [0, -35, 1000, 2**24 - 33, 131072 - 40, 10**6, 2**31 - 70, -(2**31 - 1)]


@pytest.mark.parametrize("scale", [1.0, ATTENTION])
def test_dense_ranges_within_one_ulp(isa, scale):
    w = frequencies(1e4, 67)
    starts = list(RANGE_STARTS)
    # A range around a position whose angle lies close to a multiple of pi/2.
    m, _ = max(near_quarter_turns(w[5]).items(), key=lambda kv: kv[0])
    starts.append(min(m, MAX_POS - 69) - 35)
    near_zero = 0
    for start in starts:
        n = 70
        c, s = _tables.cos_sin_range(start, n, w, scale)
        ms = np.repeat(np.arange(start, start + n, dtype=np.int64), w.size)
        want_c, want_s = exact_cos_sin(ms, np.tile(w, n), scale)
        assert_correctly_rounded(c.ravel(), want_c, f"{isa} range start={start} cos")
        assert_correctly_rounded(s.ravel(), want_s, f"{isa} range start={start} sin")
        near_zero += int(np.sum(np.minimum(abs(want_c), abs(want_s)) < 2.0**-12 * scale))
    # The exact fallback of the angle-addition path must have been exercised.
    assert near_zero > 10


def test_range_with_few_rows_and_frequencies(isa):
    for n, half in [(1, 1), (2, 5), (31, 4), (33, 3), (1, 130)]:
        w = frequencies(1e6, half)
        c, s = _tables.cos_sin_range(-7, n, w, 1.0)
        ms = np.repeat(np.arange(-7, -7 + n, dtype=np.int64), half)
        want_c, want_s = exact_cos_sin(ms, np.tile(w, n))
        assert_correctly_rounded(c.ravel(), want_c, f"{isa} n={n} half={half} cos")
        assert_correctly_rounded(s.ravel(), want_s, f"{isa} n={n} half={half} sin")


# ---- float64 tables: within 4 ulp of float64 ---------------------------------

def float64_ulp_errors(got, ms, ws, scale=1.0):
    """|got - exact| / ulp_f64(exact) per entry, computed in mpmath."""
    out = []
    with mp.workprec(320):
        sc = mp.mpf(float(scale))
        for (m, w), (gc, gs) in zip(zip(ms, ws), got):
            for g, want in zip((gc, gs), (sc * y for y in mp.cos_sin(mp.mpf(int(m)) * mp.mpf(float(w))))):
                ulp = mp.mpf(2) ** (max(int(mp.floor(mp.log(abs(want), 2))), -1022) - 52) if want else mp.mpf(2) ** -1074
                out.append(float(abs(mp.mpf(float(g)) - want) / ulp))
    return np.array(out)


@pytest.mark.parametrize("scale", [1.0, ATTENTION])
def test_float64_tables_within_4_ulp(scale, near_zero_cases):
    rng = np.random.default_rng(17)
    pos = band_positions(rng)
    for base in (10.0, 1e4, 1e7):
        w = frequencies(base, 8)
        c, s = _tables.cos_sin_table_f64(pos, w, scale)
        err = float64_ulp_errors(zip(c.ravel(), s.ravel()), np.repeat(pos, w.size), np.tile(w, pos.size), scale)
        assert err.max() <= 4.0, f"base={base}: {err.max():.3f} ulp"
    ms, ws = near_zero_cases[0][::23], near_zero_cases[1][::23]
    got = [tuple(v[0, 0] for v in _tables.cos_sin_table_f64(ms[j:j + 1], ws[j:j + 1], scale))
           for j in range(ms.size)]
    err = float64_ulp_errors(got, ms, ws, scale)
    assert err.max() <= 4.0, f"near zeros: {err.max():.3f} ulp"


def test_public_cos_sin_float64_and_bad_dtype():
    rope = pyrope.Rope(64, layout="split_half", base=5e5)
    pos = np.array([[3, 2**31 - 1], [-(2**24 + 1), 131071]])
    c, s = rope.cos_sin(pos, dtype=np.float64)
    assert c.dtype == s.dtype == np.float64 and c.shape == (2, 2, 32)
    flat = pos.reshape(-1)
    err = float64_ulp_errors(zip(c.reshape(-1, 32).ravel(), s.reshape(-1, 32).ravel()),
                             np.repeat(flat, 32), np.tile(rope.inv_freq, flat.size))
    assert err.max() <= 4.0
    for bad in (np.int32, np.float16, "foo", None):
        with pytest.raises(TypeError, match="dtype must be float32 or float64"):
            rope.cos_sin(pos, dtype=bad)


# ---- SIMD kernels reproduce the scalar specification bit for bit ----------

def _both(fn):
    out = {}
    for name in pyrope.supported_isas():
        with pyrope.forced_isa(name):
            c, s = fn()
        out[name] = (c.view(np.uint32), s.view(np.uint32))
    return out


@pytest.mark.parametrize("half", [1, 3, 4, 5, 63, 64, 65, 255, 256, 257, 300])
def test_simd_lists_match_scalar_bit_for_bit(half):
    rng = np.random.default_rng(half)
    pos = np.concatenate([rng.integers(-MAX_POS, MAX_POS + 1, 300), band_positions(rng)])
    w = np.concatenate([frequencies(10 ** rng.uniform(1, 7), half)[:-1], [rng.uniform(0, 4)]])
    scale = float(rng.choice([1.0, ATTENTION, -0.5]))
    got = _both(lambda: _tables.cos_sin_table(pos, w, scale))
    for name, (c, s) in got.items():
        assert np.array_equal(c, got["scalar"][0]), f"{name} cos differs from scalar (half={half})"
        assert np.array_equal(s, got["scalar"][1]), f"{name} sin differs from scalar (half={half})"


@pytest.mark.parametrize("start,n,half", [(0, 4096, 64), (-5000, 3001, 67), (2**31 - 2000, 2000, 5),
                                          (123456789, 257, 256), (-(2**31 - 1), 100, 130)])
def test_simd_ranges_match_scalar_bit_for_bit(start, n, half):
    w = frequencies(1e7, half)
    for scale in (1.0, ATTENTION):
        got = _both(lambda: _tables.cos_sin_range(start, n, w, scale))
        for name, (c, s) in got.items():
            assert np.array_equal(c, got["scalar"][0]), f"{name} cos differs from scalar"
            assert np.array_equal(s, got["scalar"][1]), f"{name} sin differs from scalar"


def test_every_path_gives_the_same_bits():
    # Correct rounding makes an entry a function of (m, w, scale) alone: dense
    # ranges (angle addition), position lists (direct) and every ISA agree.
    w = frequencies(5e5, 67)
    for start in (-100, 0, 2**24 - 50, 2**31 - 300):
        pos = np.arange(start, start + 200, dtype=np.int64)
        bits = []
        for name in pyrope.supported_isas():
            with pyrope.forced_isa(name):
                bits.append([a.view(np.uint32) for a in _tables.cos_sin_range(start, 200, w, ATTENTION)])
                bits.append([a.view(np.uint32) for a in _tables.cos_sin_table(pos, w, ATTENTION)])
        for c, s in bits[1:]:
            assert np.array_equal(c, bits[0][0]), f"cos differs at start={start}"
            assert np.array_equal(s, bits[0][1]), f"sin differs at start={start}"


def test_position_lists_mixing_runs_and_scattered_positions(isa):
    # Runs of consecutive positions take the dense kernel, the rest the direct
    # one: entries must not depend on that split (nor on their neighbours).
    rng = np.random.default_rng(13)
    w = frequencies(1e6, 9)
    pos = np.concatenate([rng.integers(-MAX_POS, MAX_POS, 5), np.arange(1000, 1100),
                          rng.integers(0, 5000, 7), np.arange(-20, 27), np.arange(2**31 - 48, 2**31),
                          [5, 5, 4, 3]]).astype(np.int64)
    c, s = _tables.cos_sin_table(pos, w, 1.0)
    for j in range(pos.size):
        cj, sj = _tables.cos_sin_table(pos[j:j + 1], w, 1.0)
        assert np.array_equal(c[j].view(np.uint32), cj[0].view(np.uint32)), f"row {j}"
        assert np.array_equal(s[j].view(np.uint32), sj[0].view(np.uint32)), f"row {j}"
    rows = np.arange(0, pos.size, 3)
    want_c, want_s = exact_cos_sin(np.repeat(pos[rows], w.size), np.tile(w, rows.size))
    assert_correctly_rounded(c[rows].ravel(), want_c, f"{isa} mixed list cos")
    assert_correctly_rounded(s[rows].ravel(), want_s, f"{isa} mixed list sin")


def test_entries_next_to_rounding_midpoints_are_correctly_rounded(isa):
    # Where the exact value lies within 2**-17 ulp of a midpoint between two
    # floats, the fast bound often cannot decide and the double-double path must.
    # Find such entries cheaply: m * w exact in float64 (w has 30 bits), cos
    # from numpy's float64 (error far below 2**-17 ulp of float32).
    rng = np.random.default_rng(7)
    ms = rng.integers(1, 2**20, 2_000_000)
    ws = np.ldexp(rng.integers(2**29, 2**30, ms.size).astype(np.float64), -30 - rng.integers(0, 12, ms.size))
    picked_m, picked_w = [], []
    for fn in (np.cos, np.sin):
        y = fn(ms * ws)                                # ms * ws is exact
        e = np.frexp(y)[1]
        frac = np.abs(y) / np.ldexp(1.0, e - 24)        # |y| in float32 ulps
        near = np.abs(frac - np.floor(frac) - 0.5) < 2.0**-17
        picked_m += list(ms[near][:40])
        picked_w += list(ws[near][:40])
    assert len(picked_m) >= 10
    ms, ws = np.array(picked_m, dtype=np.int64), np.array(picked_w)
    want_c, want_s = exact_cos_sin(ms, ws)
    got_c, got_s = np.empty(ms.size), np.empty(ms.size)
    for j in range(ms.size):
        c, s = _tables.cos_sin_table(ms[j:j + 1], ws[j:j + 1], 1.0)
        got_c[j], got_s[j] = c[0, 0], s[0, 0]
        c, s = _tables.cos_sin_range(int(ms[j]) - 3, 5, ws[j:j + 1], 1.0)
        assert c[3, 0] == got_c[j] and s[3, 0] == got_s[j]
    assert_correctly_rounded(got_c, want_c, f"{isa} cos next to midpoints")
    assert_correctly_rounded(got_s, want_s, f"{isa} sin next to midpoints")


@pytest.mark.parametrize("n,half,dtype,align_from", [
    (4096, 64, np.float32, 1 << 20), (3000, 67, np.float64, 1), (100, 64, np.float32, 1),
    (100, 64, np.float32, None), (131072, 64, np.float32, None)])
def test_large_tables_are_separate_fresh_arrays(n, half, dtype, align_from, monkeypatch):
    # Large tables (from _ALIGN_FROM bytes on; lowered here to test the path
    # on small ones too) are the two halves of one 2 MiB-aligned buffer: each
    # must still be its own writable C-contiguous array, apart from the other
    # and from earlier results, holding the bits of tables made one row at a
    # time (small, separate allocations).
    if align_from is not None:
        monkeypatch.setattr(_tables, "_ALIGN_FROM", align_from)
    rope = pyrope.Rope(2 * half, layout="split_half", base=1e4)
    pos = np.arange(-7, n - 7)
    c, s = rope.cos_sin(pos, dtype=dtype)
    c2, s2 = rope.cos_sin(pos, dtype=dtype)
    for a in (c, s, c2, s2):
        assert a.shape == (n, half) and a.dtype == dtype
        assert a.flags.c_contiguous and a.flags.writeable
    pairs = [(c, s), (c, c2), (c, s2), (s, c2), (s, s2), (c2, s2)]
    assert not any(np.shares_memory(a, b) for a, b in pairs)
    for j in (0, 1, n // 2, n - 1):
        cj, sj = rope.cos_sin(pos[j:j + 1], dtype=dtype)
        if dtype == np.float32:   # correctly rounded: the same bits
            assert np.array_equal(c[j].view(np.uint32), cj[0].view(np.uint32)), f"cos row {j}"
            assert np.array_equal(s2[j].view(np.uint32), sj[0].view(np.uint32)), f"sin row {j}"
        else:                     # within 4 ulp each
            np.testing.assert_allclose(c[j], cj[0], rtol=0, atol=2e-15)
            np.testing.assert_allclose(s2[j], sj[0], rtol=0, atol=2e-15)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    before = s.copy()
    c[...] = 7.0   # writing one table leaves the other alone
    assert np.array_equal(s.view(bits), before.view(bits))
