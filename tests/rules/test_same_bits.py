"""The same bits on every machine: powers and logarithms correctly rounded (checked
against mpmath), every rule equal to the plain-Python rules bit for bit, and the
rules, fingerprints, tables and rotations unchanged when numpy's CPU dispatch is
limited to its baseline (numpy picks its power routine by CPU, which is what
made frequencies differ between an AVX-512 and an AVX2-only machine)."""
import json
import math
import os
import pathlib
import random
import subprocess
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import bits_digest
import reference_rules as R
from pyrope._rules import correctly_rounded as CR
from pyrope import scaling as S

HERE = pathlib.Path(bits_digest.__file__).resolve().parent   # tests/support
ROOT = HERE.parents[1]


def mp_nearest(compute):
    """The double nearest to an mpmath value, the same at 320 and 640 bits."""
    with mpmath.workprec(320):
        once = float(compute())
    with mpmath.workprec(640):
        assert float(compute()) == once
    return once


# --------------------------------------------------------------------------- the functions


def test_power_is_correctly_rounded_against_mpmath():
    rng = random.Random(2026)
    for _ in range(1500):
        x = math.exp(rng.uniform(-60, 60)) if rng.random() < 0.7 else rng.choice([1e4, 5e5, 1e6, 0.5, 3.0, 1.1])
        den = rng.choice([1, 2, 3, 7, 62, 63, 64, 94, 96, 126, 128, 32767])
        num = rng.randint(-3 * den, 3 * den)
        times = rng.choice([1.0, 1e4, 0.3, 5e5, 1.25])
        want = mp_nearest(lambda: mpmath.mpf(times) * mpmath.mpf(x) ** (mpmath.mpf(num) / den))
        assert CR.power(x, num, den, times=times) == want, (x, num, den, times)


def test_log_is_correctly_rounded_against_mpmath():
    rng = random.Random(7)
    xs = [math.exp(rng.uniform(-700, 700)) for _ in range(1500)]
    xs += [2.0, 10.0, 4096.0, 32768.0, 2 * math.pi, math.nextafter(1.0, 2.0), math.nextafter(1.0, 0.0), 5e-324,
           sys.float_info.max, 1.0000000000000002, 0.9999999999999999]
    for x in xs:
        assert CR.log(x) == mp_nearest(lambda: mpmath.log(mpmath.mpf(x))), x
    assert CR.log(1.0) == 0.0 and math.copysign(1.0, CR.log(1.0)) == 1.0


@pytest.mark.parametrize("t", [2**18 - 1, 2**18 - 3, 208067, 250001])
def test_a_power_exactly_halfway_between_two_doubles_ties_to_even(t):
    # (t^2)^(3/2) = t^3, an odd number of 54 bits: the midpoint of two doubles.
    # Python rounds an int to the nearest double, ties to even: the independent answer.
    assert (t ** 3).bit_length() == 54 and t ** 3 % 2 == 1
    assert CR.power(float(t * t), 3, 2) == float(t ** 3)
    assert CR.power(float(t * t), 3, 2, times=0.25) == float(Fraction(t ** 3, 4))


def test_exact_powers_overflow_underflow_and_subnormals():
    assert CR.power(2.0, 1023) == 2.0 ** 1023 and CR.power(2.0, 1024) == math.inf
    assert CR.power(2.0, -1074) == 5e-324
    assert CR.power(2.0, -1075) == 0.0           # half the smallest subnormal: ties to even, 0
    assert CR.power(2.0, -1076) == 0.0
    assert CR.power(3.0, -680) == float(Fraction(1, 3 ** 680))   # a subnormal, rounded at its granularity
    assert CR.power(10.0, 308) == float(10 ** 308)
    assert CR.power(10.0, 309) == math.inf
    assert CR.power(16.0, 1, 4) == 2.0 and CR.power(10000.0, -1, 2) == 0.01
    assert CR.power(7.5, 0) == 1.0 and CR.power(1.0, 12345, 7) == 1.0 and CR.power(1.0, 3, times=2.5) == 2.5
    for bad in [(0.0, 1), (-2.0, 1), (math.inf, 1), (math.nan, 1)]:
        with pytest.raises(ValueError):
            CR.power(*bad)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            CR.log(bad)


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 12345.678, 1.5, 2.0e8, 0.7])
@pytest.mark.parametrize("dim", [2, 4, 6, 80, 96, 128, 160, 256, 1000])
def test_pair_frequencies_are_the_correctly_rounded_powers(base, dim):
    want = tuple(mp_nearest(lambda: mpmath.mpf(base) ** (mpmath.mpf(-2 * i) / dim)) for i in range(dim // 2))
    assert CR.pair_frequencies(base, dim) == want


def test_pair_frequencies_at_the_largest_head_dim():
    dim = 65536  # the library's bound: the running product's error bound grows with the pair index
    got = CR.pair_frequencies(10000.0, dim)
    assert len(got) == dim // 2
    for i in list(range(0, 40)) + list(range(dim // 2 - 40, dim // 2)) + random.Random(3).sample(range(dim // 2), 60):
        assert got[i] == mp_nearest(lambda: mpmath.mpf(10000.0) ** (mpmath.mpf(-2 * i) / dim)), i


def test_the_caller_decimal_context_does_not_leak_in():
    import decimal
    want = CR.pair_frequencies.__wrapped__(10000.0, 128)
    with decimal.localcontext(decimal.Context(prec=3, rounding=decimal.ROUND_FLOOR, traps=[decimal.Inexact])):
        assert CR.pair_frequencies.__wrapped__(10000.0, 128) == want
        assert CR.log(3.0) == mp_nearest(lambda: mpmath.log(3))


# --------------------------------------------------------------------------- every rule, bit for bit


def _rule_cases():
    for base in (10000.0, 500000.0, 1e6, 12345.678):
        for d in (32, 80, 96, 128, 256):
            half = d // 2
            short = [1.0 + i / 10 for i in range(half)]
            long = [2.0 + i for i in range(half)]
            yield S.Linear(8.0), base, d, R.linear(d, base, 8.0)
            yield S.NTK(3.0), base, d, R.ntk(d, base, 3.0)
            yield S.Dynamic(2.0, 4096, seq_len=10000), base, d, R.dynamic(d, base, 2.0, 4096, 10000)
            yield S.Dynamic(alpha=1000.0), base, d, R.default(d, R.ntk_base(d, base, 1000.0))
            yield (S.Yarn(factor=4.0, original_max_position_embeddings=32768), base, d,
                   R.yarn(d, base, 4.0, 32768))
            yield (S.Yarn(factor=40.0, original_max_position_embeddings=4096, truncate=False, mscale=0.707,
                          mscale_all_dim=1.0), base, d,
                   R.yarn(d, base, 40.0, 4096, mscale=0.707, mscale_all_dim=1.0, truncate=False))
            yield (S.Yarn(factor=16.0, original_max_position_embeddings=8192, beta_fast=16.0, beta_slow=0.5),
                   base, d, R.yarn(d, base, 16.0, 8192, beta_fast=16.0, beta_slow=0.5))
            yield S.Llama3(8.0, 1.0, 4.0, 8192), base, d, R.llama3(d, base, 8.0, 1.0, 4.0, 8192)
            yield (S.LongRope(short, long, 4096, 131072, seq_len=8000), base, d,
                   R.longrope(d, base, short, long, 4096, 131072, seq_len=8000))
            yield (S.LongRope(short, long, 4096, 131072), base, d, R.longrope(d, base, short, long, 4096, 131072))
            yield S.Proportional(partial_rotary_factor=0.25), base, d, R.proportional(d, base, 0.25)
            yield S.FreqFactors(short, 1.25), base, d, R.freq_factors(d, base, short, 1.25)
            yield None, base, d, R.default(d, base)


CASES = list(_rule_cases())


@pytest.mark.parametrize("i", range(len(CASES)), ids=lambda i: f"{CASES[i][0].__class__.__name__}-{i}")
def test_every_rule_gives_the_plain_python_rules_bits(i):
    rule, base, d, (inv_freq, attention) = CASES[i]
    r = S.resolve(rule, head_dim=d, rotary_dim=d, base=base)
    assert r.inv_freq.tolist() == inv_freq
    assert r.attention_factor == attention


def test_the_scaled_base_is_rounded_once():
    for d, factor in [(128, 1000.0), (96, 3.0), (6, 4.0), (10, 17.0)]:
        r = S.resolve(S.NTK(factor), head_dim=d, rotary_dim=d, base=10000.0)
        want = mp_nearest(lambda: mpmath.mpf(10000.0) * mpmath.mpf(factor) ** (mpmath.mpf(d) / (d - 2)))
        assert r.params["scaled_base"] == want


# --------------------------------------------------------------------------- numpy at its baseline


def test_numpy_limited_to_its_baseline_gives_the_same_bits():
    targets = bits_digest.dispatch_targets()
    assert targets, "this numpy has no run-time dispatch to limit"
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(targets),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), str(HERE), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(HERE / "bits_digest.py")], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    limited = json.loads(proc.stdout)
    here = bits_digest.numpy_features()
    # the premise: the child's numpy really runs with fewer features (on a CPU with any
    # dispatch target above the baseline; every x86-64 CPU this runs on has AVX2 at least)
    assert not set(targets) & set(limited["numpy_features"]), limited["numpy_features"]
    if set(targets) & set(here):
        assert set(limited["numpy_features"]) < set(here)
    assert limited["digests"] == bits_digest.digests()

