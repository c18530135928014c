"""pyrope.scaling against the plain-Python oracle, hand-computed numbers and bad input."""

import dataclasses
import math

import numpy as np
import pytest

from pyrope import scaling as S
from pyrope.scaling import resolve

REL = 1e-12

DIMS = [4, 6, 8, 16, 32, 64, 80, 96, 128, 256]
BASES = [10000.0, 150000.0, 500000.0, 1000000.0]


def check(resolved, expected, attention=1.0):
    """inv_freq and attention factor equal to the oracle's, to the bit."""
    inv, att = expected
    assert resolved.inv_freq.dtype == np.float64
    assert resolved.inv_freq.shape == (len(inv),)
    # bit for bit: the oracle rounds its powers and logarithms once, as the rules must
    assert resolved.inv_freq.tolist() == list(inv)
    assert resolved.attention_factor == att


def go(scaling, d, base, head_dim=None):
    return resolve(scaling, head_dim=head_dim or d, rotary_dim=d, base=base)


# --------------------------------------------------------------------------- the seed's hand numbers (d=8, b=10000, s=8)


def test_default_hand_numbers():
    r = go(None, 8, 10000.0)
    np.testing.assert_allclose(r.inv_freq, [1, 0.1, 0.01, 0.001], rtol=REL)
    assert r.rule == "default" and r.attention_factor == 1.0


def test_position_interpolation_hand_numbers():
    r = go({"rope_type": "linear", "factor": 8}, 8, 10000.0)
    np.testing.assert_allclose(r.inv_freq, [0.125, 0.0125, 0.00125, 0.000125], rtol=REL)
    assert r.attention_factor == 1.0


def test_static_ntk_base_change_hand_numbers():
    r = go({"rope_type": "ntk", "factor": 8}, 8, 10000.0)
    np.testing.assert_allclose(r.inv_freq, [1, 0.05, 0.0025, 0.000125], rtol=REL)
    # b' = b * s ** (d / (d - 2)) = 10000 * 8 ** (4/3) = 160000
    assert r.params["scaled_base"] == pytest.approx(160000.0, rel=REL)
    # same slowest pair as PI, fastest pair untouched
    pi = go(S.Linear(8), 8, 10000.0)
    assert r.inv_freq[-1] == pytest.approx(pi.inv_freq[-1], rel=REL)
    assert r.inv_freq[0] == pytest.approx(1.0, rel=REL)


def test_yarn_attention_factor_hand_numbers():
    r = go({"rope_type": "yarn", "factor": 8, "original_max_position_embeddings": 4096}, 8, 10000.0)
    # a = 1 + 0.1 ln 8, logits scale a^2
    assert r.attention_factor == pytest.approx(1.207944, abs=1e-6)
    assert r.attention_factor ** 2 == pytest.approx(1.45913, abs=1e-5)
    assert r.params["attention_factor_from"] == "0.1*ln(factor)+1"


# --------------------------------------------------------------------------- every rule vs the oracle


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("base", BASES)
def test_default_and_linear_match_reference(ref, d, base):
    check(go(None, d, base), ref.default(d, base))
    check(go({"rope_type": "default"}, d, base), ref.default(d, base))
    for s in (0.5, 1.0, 2.0, 4.0, 8.0, 32.0, 3.7):
        check(go({"rope_type": "linear", "factor": s}, d, base), ref.linear(d, base, s))
        check(go(S.Linear(s), d, base), ref.linear(d, base, s))


@pytest.mark.parametrize("d", [d for d in DIMS if d > 2])
@pytest.mark.parametrize("base", BASES)
def test_ntk_matches_reference(ref, d, base):
    for s in (1.0, 2.0, 4.0, 8.0, 16.0, 1.5):
        r = go({"rope_type": "ntk", "factor": s}, d, base)
        check(r, ref.ntk(d, base, s))
        assert r.params["scaled_base"] == pytest.approx(ref.ntk_base(d, base, s), rel=REL)
        # the slowest pair is divided by exactly s
        assert r.inv_freq[-1] == pytest.approx(ref.default(d, base)[0][-1] / s, rel=1e-10)


@pytest.mark.parametrize("d", [d for d in DIMS if d > 2])
@pytest.mark.parametrize("base", BASES)
def test_dynamic_matches_reference(ref, d, base):
    window = 4096
    for s in (1.0, 2.0, 4.0, 8.0):
        for seq_len in (None, 1, 2048, 4095, 4096, 4097, 8192, 100000):
            rule = {"rope_type": "dynamic", "factor": s, "max_position_embeddings": window, "seq_len": seq_len}
            r = go(rule, d, base)
            check(r, ref.dynamic(d, base, s, window, seq_len))
            assert r.original_window == window
            assert r.target_window == max(seq_len or window, window)


def test_dynamic_is_default_up_to_the_window(ref):
    plain = go(None, 128, 10000.0)
    for seq_len in (None, 1, 4096):
        r = go(S.Dynamic(factor=4.0, max_position_embeddings=4096, seq_len=seq_len), 128, 10000.0)
        np.testing.assert_allclose(r.inv_freq, plain.inv_freq, rtol=1e-15, atol=0)
        assert r.params["scaled_base"] == pytest.approx(10000.0, rel=1e-15)
    longer = go(S.Dynamic(factor=4.0, max_position_embeddings=4096, seq_len=4097), 128, 10000.0)
    assert np.all(longer.inv_freq[1:] < plain.inv_freq[1:])


YARN_VARIANTS = [
    {},
    {"truncate": False},
    {"beta_fast": 16.0, "beta_slow": 2.0},
    {"beta_fast": 64, "beta_slow": 0.5, "truncate": False},
    {"mscale": 0.707, "mscale_all_dim": 1.0},
    {"mscale": 1.0, "mscale_all_dim": 1.0},
    {"mscale": 1.0},
    {"attention_factor": 0.9},
]


@pytest.mark.parametrize("d", [8, 16, 64, 80, 128])
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("variant", range(len(YARN_VARIANTS)))
def test_yarn_matches_reference(ref, d, base, variant):
    extra = YARN_VARIANTS[variant]
    for s in (1.0, 2.0, 4.0, 8.0, 32.0, 40.0):
        for original in (2048, 4096, 32768):
            rule = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": original, **extra}
            r = go(rule, d, base)
            kwargs = {k: v for k, v in extra.items()}
            check(r, ref.yarn(d, base, s, original, **kwargs))
            assert r.original_window == original


def test_yarn_factor_falls_back_to_window_ratio(ref):
    r = go({"rope_type": "yarn", "original_max_position_embeddings": 4096, "max_position_embeddings": 163840},
           64, 10000.0)
    check(r, ref.yarn(64, 10000.0, 40.0, 4096))
    assert r.params["factor"] == pytest.approx(40.0, rel=REL)
    assert r.target_window == 163840


def test_yarn_original_falls_back_to_max_position_embeddings(ref):
    r = go({"rope_type": "yarn", "factor": 4.0, "max_position_embeddings": 32768}, 128, 1e6)
    check(r, ref.yarn(128, 1e6, 4.0, 32768))
    assert r.original_window == 32768 and r.target_window == 131072


def test_yarn_given_factor_wins_over_window_ratio(ref):
    # Qwen-style: max_position_embeddings is not factor * original; the factor is used as given
    r = go({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
            "max_position_embeddings": 32768}, 128, 1e6)
    check(r, ref.yarn(128, 1e6, 4.0, 32768))


def test_yarn_truncate_moves_the_ramp(ref):
    # gpt-oss numbers: i(32) = 8.09..., i(1) = 17.39...
    common = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    cut = go(common, 64, 150000.0)
    smooth = go({**common, "truncate": False}, 64, 150000.0)
    assert (cut.params["ramp_low"], cut.params["ramp_high"]) == (8, 18)
    low = 64 * math.log(4096 / (2 * math.pi * 32)) / (2 * math.log(150000.0))
    high = 64 * math.log(4096 / (2 * math.pi * 1)) / (2 * math.log(150000.0))
    assert smooth.params["ramp_low"] == pytest.approx(low, rel=REL)
    assert smooth.params["ramp_high"] == pytest.approx(high, rel=REL)
    assert low == pytest.approx(8.0928, abs=1e-4) and high == pytest.approx(17.398, abs=1e-3)
    theta = np.array(ref.default(64, 150000.0)[0])
    # pairs 0..8 keep their frequency and pairs 18.. are fully interpolated in both
    np.testing.assert_allclose(cut.inv_freq[:9], theta[:9], rtol=REL)
    np.testing.assert_allclose(smooth.inv_freq[:9], theta[:9], rtol=REL)
    np.testing.assert_allclose(cut.inv_freq[18:], theta[18:] / 32, rtol=REL)
    np.testing.assert_allclose(smooth.inv_freq[18:], theta[18:] / 32, rtol=REL)
    # in the ramp they differ: a port ignoring the flag is caught here
    assert np.all(np.abs(cut.inv_freq[9:18] / smooth.inv_freq[9:18] - 1) > 1e-3)


def test_yarn_degenerate_ramp_matches_reference(ref):
    # d=4, b=10, L0=8192: both bounds clamp to pair 3, transformers nudges high by 0.001
    r = go({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}, 4, 10.0)
    assert r.params["ramp_low"] == 3 and r.params["ramp_high"] == pytest.approx(3.001, rel=REL)
    check(r, ref.yarn(4, 10.0, 4.0, 8192))


def test_yarn_mscale_rules():
    common = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
    same = go({**common, "mscale": 1.0, "mscale_all_dim": 1.0}, 64, 10000.0)
    assert same.attention_factor == pytest.approx(1.0, rel=REL)
    ratio = go({**common, "mscale": 0.707, "mscale_all_dim": 1.0}, 64, 10000.0)
    m = lambda k: 0.1 * k * math.log(40.0) + 1  # noqa: E731
    assert ratio.attention_factor == pytest.approx(m(0.707) / m(1.0), rel=REL)
    # transformers uses the ratio only when both are non-zero; otherwise 0.1 ln s + 1
    alone = go({**common, "mscale": 0.707}, 64, 10000.0)
    assert alone.attention_factor == pytest.approx(m(1.0), rel=REL)
    assert alone.params["attention_factor_from"] == "0.1*ln(factor)+1"
    given = go({**common, "attention_factor": 1.5, "mscale": 0.707, "mscale_all_dim": 1.0}, 64, 10000.0)
    assert given.attention_factor == 1.5 and given.params["attention_factor_from"] == "given"
    below_one = go({**common, "factor": 0.5}, 64, 10000.0)
    assert below_one.attention_factor == 1.0


LLAMA3_CASES = [
    (8.0, 1.0, 4.0, 8192),
    (32.0, 1.0, 4.0, 8192),
    (16.0, 2.0, 8.0, 4096),
    (4.0, 1.0, 2.0, 2048),
]


@pytest.mark.parametrize("d", [16, 32, 64, 80, 128, 256])
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("case", LLAMA3_CASES)
def test_llama3_matches_reference(ref, d, base, case):
    s, lo, hi, window = case
    rule = {"rope_type": "llama3", "factor": s, "low_freq_factor": lo, "high_freq_factor": hi,
            "original_max_position_embeddings": window}
    r = go(rule, d, base)
    check(r, ref.llama3(d, base, s, lo, hi, window))
    assert r.original_window == window and r.target_window == int(window * s)


def test_llama3_bands_for_llama31_8b():
    r = go(S.Llama3(8.0, 1.0, 4.0, 8192), 128, 500000.0)
    ratio = r.inv_freq / go(None, 128, 500000.0).inv_freq
    # by hand: wavelength 2 pi 500000^(i/64) < 2048 for i <= 28, > 8192 for i >= 35
    np.testing.assert_allclose(ratio[:29], 1.0, rtol=REL)
    np.testing.assert_allclose(ratio[35:], 1 / 8, rtol=REL)
    assert np.all((ratio[29:35] < 1) & (ratio[29:35] > 1 / 8))
    assert np.all(np.diff(ratio[28:36]) < 0)


def _table(n, start, step):
    return [start + step * i + 0.01 * (i % 3) for i in range(n)]


@pytest.mark.parametrize("d", [8, 32, 64, 96, 128])
@pytest.mark.parametrize("base", BASES)
def test_longrope_matches_reference(ref, d, base):
    n = d // 2
    short, long = _table(n, 1.0, 0.05), _table(n, 1.0, 1.3)
    for seq_len in (None, 1, 4095, 4096, 4097, 131072):
        for extra in ({"max_position_embeddings": 131072}, {"factor": 16.0}, {"attention_factor": 1.25},
                      {"max_position_embeddings": 4096}):
            rule = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
                    "original_max_position_embeddings": 4096, "seq_len": seq_len, **extra}
            r = go(rule, d, base)
            check(r, ref.longrope(d, base, short, long, 4096, max_position_embeddings=extra.get(
                "max_position_embeddings"), seq_len=seq_len, factor=extra.get("factor"),
                attention_factor=extra.get("attention_factor")))
            assert r.params["variant"] == ("long" if seq_len is not None and seq_len > 4096 else "short")


def test_longrope_switches_strictly_past_the_window():
    n = 48
    rule = dict(short_factor=[1.0] * n, long_factor=[4.0] * n, original_max_position_embeddings=4096,
                max_position_embeddings=131072)
    at = go(S.LongRope(**rule, seq_len=4096), 96, 10000.0)
    past = go(S.LongRope(**rule, seq_len=4097), 96, 10000.0)
    np.testing.assert_allclose(past.inv_freq * 4, at.inv_freq, rtol=REL)
    # sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12), the same for both sets
    assert at.attention_factor == pytest.approx(math.sqrt(17 / 12), rel=REL)
    assert past.attention_factor == at.attention_factor


@pytest.mark.parametrize("head_dim", [64, 80, 128, 256, 512])
@pytest.mark.parametrize("p", [0.25, 0.4, 0.5, 1.0])
def test_proportional_matches_reference(ref, head_dim, p):
    for s in (1.0, 2.0):
        r = resolve({"rope_type": "proportional", "partial_rotary_factor": p, "factor": s},
                    head_dim=head_dim, rotary_dim=head_dim, base=1e6)
        check(r, ref.proportional(head_dim, 1e6, p, s))
        assert r.rotary_dim == head_dim
        rotated = int(p * head_dim // 2)
        assert np.count_nonzero(r.inv_freq) == rotated
        # exponents run over the whole head, not over the rotated share
        assert r.inv_freq[1] == pytest.approx(1e6 ** (-2 / head_dim) / s, rel=REL)


def test_proportional_share_from_rotary_dim(ref):
    r = resolve({"rope_type": "proportional"}, head_dim=256, rotary_dim=64, base=1e6)
    check(r, ref.proportional(256, 1e6, 0.25))
    same = resolve({"rope_type": "proportional", "partial_rotary_factor": 0.25}, head_dim=256, rotary_dim=64,
                   base=1e6)
    np.testing.assert_allclose(same.inv_freq, r.inv_freq, rtol=REL, atol=0)
    assert r.params["rotated_pairs"] == same.params["rotated_pairs"] == 32


@pytest.mark.parametrize("d", [4, 8, 64, 128])
def test_freq_factors_match_reference(ref, d):
    factors = _table(d // 2, 1.0, 0.5)
    r = go({"rope_type": "freq_factors", "factors": factors}, d, 500000.0)
    check(r, ref.freq_factors(d, 500000.0, factors))
    r = go(S.FreqFactors(factors, attention_factor=1.1), d, 500000.0)
    check(r, ref.freq_factors(d, 500000.0, factors, 1.1))


# --------------------------------------------------------------------------- the result and the rule objects


def test_resolved_is_read_only_float64():
    r = go(S.Linear(2.0), 64, 10000.0)
    assert r.inv_freq.dtype == np.float64 and not r.inv_freq.flags.writeable
    with pytest.raises(ValueError):
        r.inv_freq[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.attention_factor = 2.0
    assert r.rotary_dim == 64


def test_resolved_does_not_alias_caller_array():
    arr = np.array([1.0, 0.5])
    r = S.Resolved(arr, 1.0, "default", {})
    arr[0] = 7.0
    assert r.inv_freq[0] == 1.0


def test_rule_objects_are_frozen():
    rule = S.Yarn(factor=4.0, original_max_position_embeddings=4096)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.factor = 8.0


@pytest.mark.parametrize("rule, obj", [
    ({"rope_type": "linear", "factor": 4}, S.Linear(4.0)),
    ({"type": "linear", "factor": 4}, S.Linear(4.0)),
    ({"type": "yarn", "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
     S.Yarn(factor=4.0, original_max_position_embeddings=32768)),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": None},
     S.Yarn(factor=4.0, original_max_position_embeddings=32768)),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_theta": 500000.0},
     S.Llama3(8.0, 1.0, 4.0, 8192)),
])
def test_dict_and_object_resolve_alike(rule, obj):
    assert S.rule_from_dict(rule) == obj
    a = resolve(rule, head_dim=128, rotary_dim=128, base=500000.0)
    b = resolve(obj, head_dim=128, rotary_dim=128, base=500000.0)
    assert a == b


def test_params_are_json_serialisable():
    import json
    rules = [None, S.Linear(2.0), S.NTK(2.0), S.Dynamic(2.0, 4096, 9000),
             S.Yarn(factor=4.0, original_max_position_embeddings=4096),
             S.Llama3(8.0, 1.0, 4.0, 8192), S.LongRope([1.0] * 32, [2.0] * 32, 4096, 131072, seq_len=5000),
             S.Proportional(partial_rotary_factor=0.5), S.FreqFactors([1.0] * 32)]
    for rule in rules:
        r = go(rule, 64, 10000.0)
        assert json.loads(json.dumps(r.params, allow_nan=False)) == r.params
        assert r.params["base"] == 10000.0


# --------------------------------------------------------------------------- bad input

GOOD_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
GOOD_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
GOOD_LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32,
                 "original_max_position_embeddings": 4096, "max_position_embeddings": 131072}

BAD = [
    # (scaling, resolve kwargs override, exception, text the message must contain)
    ({"rope_type": "nope"}, {}, ValueError, "'nope'"),
    ({"rope_type": 5}, {}, TypeError, "rope_type"),
    ({"type": "linear", "rope_type": "yarn", "factor": 2.0}, {}, ValueError, "'type'"),
    ({"rope_type": "linear"}, {}, ValueError, "factor"),
    ({"rope_type": "linear", "factor": None}, {}, ValueError, "factor"),
    ({"rope_type": "linear", "factor": 0}, {}, ValueError, "'factor'"),
    ({"rope_type": "linear", "factor": -2.0}, {}, ValueError, "'factor'"),
    ({"rope_type": "linear", "factor": float("nan")}, {}, ValueError, "'factor'"),
    ({"rope_type": "linear", "factor": float("inf")}, {}, ValueError, "'factor'"),
    ({"rope_type": "linear", "factor": "8"}, {}, TypeError, "'factor'"),
    ({"rope_type": "linear", "factor": True}, {}, TypeError, "'factor'"),
    ({"rope_type": "linear", "factor": 8.0, "low_freq_factor": 1.0}, {}, ValueError, "low_freq_factor"),
    ({"rope_type": "default", "factor": 8.0}, {}, ValueError, "factor"),
    ({"rope_type": "ntk", "factor": 2.0}, {"rotary_dim": 2, "head_dim": 2}, ValueError, "rotary_dim"),
    ({"rope_type": "dynamic", "factor": 2.0}, {}, ValueError, "max_position_embeddings"),
    ({"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096, "seq_len": 0}, {}, ValueError,
     "seq_len"),
    ({"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096.0}, {}, TypeError,
     "max_position_embeddings"),
    ({**GOOD_YARN, "beta_fast": 1.0, "beta_slow": 32.0}, {}, ValueError, "beta_fast"),
    ({**GOOD_YARN, "beta_fast": 2.0, "beta_slow": 2.0}, {}, ValueError, "beta_fast"),
    ({**GOOD_YARN, "beta_slow": -1.0}, {}, ValueError, "beta_slow"),
    ({**GOOD_YARN, "truncate": "false"}, {}, TypeError, "truncate"),
    ({**GOOD_YARN, "attention_factor": 0.0}, {}, ValueError, "attention_factor"),
    ({**GOOD_YARN, "mscale": -1.0}, {}, ValueError, "mscale"),
    ({"rope_type": "yarn", "factor": 4.0}, {}, ValueError, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 4096}, {}, ValueError, "factor"),
    ({**GOOD_YARN, "rope_theta": 500000.0}, {}, ValueError, "rope_theta"),
    ({**GOOD_YARN, "partial_rotary_factor": 0.5}, {}, ValueError, "partial_rotary_factor"),
    ({**GOOD_YARN, "mrope_section": [16, 24, 24]}, {}, ValueError, "mrope_section"),
    ({k: v for k, v in GOOD_LLAMA3.items() if k != "high_freq_factor"}, {}, ValueError, "high_freq_factor"),
    ({**GOOD_LLAMA3, "high_freq_factor": 0.5}, {}, ValueError, "high_freq_factor"),  # below low; equal warns
    ({**GOOD_LLAMA3, "original_max_position_embeddings": 8192.0}, {}, TypeError,
     "original_max_position_embeddings"),
    ({**GOOD_LONGROPE, "short_factor": [1.0] * 31}, {}, ValueError, "short_factor"),
    ({**GOOD_LONGROPE, "long_factor": [1.0] * 31}, {}, ValueError, "long_factor"),
    ({**GOOD_LONGROPE, "short_factor": [1.0, 0.0] + [1.0] * 30}, {}, ValueError, "short_factor[1]"),
    ({**GOOD_LONGROPE, "short_factor": "1.0"}, {}, TypeError, "short_factor"),
    ({**GOOD_LONGROPE, "seq_len": -5}, {}, ValueError, "seq_len"),
    ({k: v for k, v in GOOD_LONGROPE.items() if k != "long_factor"}, {}, ValueError, "long_factor"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32,
      "original_max_position_embeddings": 4096}, {}, ValueError, "factor"),
    ({"rope_type": "freq_factors", "factors": [1.0] * 3}, {}, ValueError, "factors"),
    ({"rope_type": "proportional", "partial_rotary_factor": 1.5}, {}, ValueError, "partial_rotary_factor"),
    ({"rope_type": "proportional", "partial_rotary_factor": 0.25}, {"rotary_dim": 32}, ValueError, "rotary_dim"),
    (None, {"rotary_dim": 63}, ValueError, "rotary_dim"),
    (None, {"rotary_dim": 0}, ValueError, "rotary_dim"),
    (None, {"rotary_dim": 128}, ValueError, "rotary_dim"),
    (None, {"head_dim": 64.0}, TypeError, "head_dim"),
    (None, {"head_dim": True}, TypeError, "head_dim"),
    (None, {"base": 1.0}, ValueError, "base"),
    (None, {"base": "10000"}, TypeError, "base"),
    (None, {"base": float("nan")}, ValueError, "base"),
    ("nope", {}, ValueError, "'nope'"),
    ("yarn", {}, ValueError, "original_max_position_embeddings"),
    ([("rope_type", "linear")], {}, TypeError, "scaling"),
]


@pytest.mark.parametrize("scaling, override, exc, text", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_scaling_is_refused_by_name(scaling, override, exc, text):
    kwargs = {"head_dim": 64, "rotary_dim": 64, "base": 10000.0, **override}
    with pytest.raises(exc) as info:
        resolve(scaling, **kwargs)
    assert text in str(info.value)


def test_bad_value_is_quoted_in_the_message():
    with pytest.raises(ValueError, match=r"'factor'.*-2\.5"):
        resolve({"rope_type": "linear", "factor": -2.5}, head_dim=64, rotary_dim=64, base=10000.0)
    with pytest.raises(ValueError, match="linear"):
        resolve({"rope_type": "linear", "factor": -2.5}, head_dim=64, rotary_dim=64, base=10000.0)


# --------------------------------------------------------------------------- overflow, underflow, size

import pyrope  # noqa: E402
from pyrope import errors  # noqa: E402

GOOD_LONGROPE_NO_MAX = {k: v for k, v in GOOD_LONGROPE.items() if k != "max_position_embeddings"}

EXTREMES = [
    # (scaling, base, exception, texts the message must contain)
    ({"rope_type": "ntk", "factor": 1e300}, 10000.0, errors.OverflowError, ["'factor'", "1e+300"]),
    ({"rope_type": "ntk", "factor": 10**400}, 10000.0, errors.ValueError, ["'factor'", "401 digits"]),
    ({"rope_type": "dynamic", "alpha": 1e308}, 10000.0, errors.OverflowError, ["'alpha'"]),
    ({"rope_type": "dynamic", "factor": 1e308, "max_position_embeddings": 4096}, 10000.0, errors.OverflowError,
     ["'factor'"]),
    ({"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096, "seq_len": 2**63}, 10000.0,
     errors.OverflowError, ["'seq_len'", "int64"]),
    ({**GOOD_YARN, "factor": 1e308}, 10000.0, errors.OverflowError, ["'factor'", "window"]),
    ({**GOOD_YARN, "original_max_position_embeddings": 10**400}, 10000.0, errors.OverflowError,
     ["'original_max_position_embeddings'", "int64"]),
    ({"rope_type": "yarn", "max_position_embeddings": 2**64, "original_max_position_embeddings": 4096}, 10000.0,
     errors.OverflowError, ["'max_position_embeddings'"]),
    ({**GOOD_LLAMA3, "factor": 1e308}, 10000.0, errors.OverflowError, ["'factor'"]),
    ({**GOOD_LONGROPE_NO_MAX, "factor": 1e308}, 10000.0, errors.OverflowError, ["'factor'"]),
    ({**GOOD_LONGROPE, "max_position_embeddings": 10**400}, 10000.0, errors.OverflowError,
     ["'max_position_embeddings'"]),
    # a divisor so large that a frequency underflows to 0: that pair would never turn
    ({"rope_type": "linear", "factor": 1e308}, 1e300, errors.ValueError, ["'factor'", "inv_freq[", "= 0"]),
    ({"rope_type": "freq_factors", "factors": [1.0] * 31 + [1e308]}, 1e300, errors.ValueError,
     ["'factors[31]'", "= 0"]),
    ({**GOOD_LONGROPE, "short_factor": [1.0] * 31 + [1e308]}, 1e300, errors.ValueError, ["'short_factor[31]'"]),
]


@pytest.mark.parametrize("scaling, base, exc, texts", EXTREMES, ids=[f"extreme{i}" for i in range(len(EXTREMES))])
def test_extreme_parameters_are_refused_naming_them(scaling, base, exc, texts):
    with pytest.raises(exc) as info:
        resolve(scaling, head_dim=64, rotary_dim=64, base=base)
    assert isinstance(info.value, pyrope.RopeError)
    for text in texts:
        assert text in str(info.value)
    assert len(str(info.value)) < 400  # a huge integer is described, not printed


def test_ntk_whose_frequencies_would_become_zero_is_refused_at_construction():
    # factor 1e300: b * s**(d/(d-2)) overflows, and 63 of 64 frequencies were 0 (a fingerprint failed later)
    with pytest.raises(errors.OverflowError, match=r"ntk: 'factor' = 1e\+300.*at most"):
        pyrope.Rope(128, layout="split_half", scaling={"rope_type": "ntk", "factor": 1e300})
    # the largest factor the message states is accepted, and every frequency stays positive
    d, b = 128, 10000.0
    limit = (1.7976931348623157e308 / b) ** ((d - 2) / d)
    r = pyrope.Rope(d, layout="split_half", base=b, scaling={"rope_type": "ntk", "factor": limit * 0.999})
    assert np.all(r.inv_freq > 0) and len(r.fingerprint) == 64


def test_extreme_yarn_betas_and_a_base_near_one_resolve(ref):
    # beta * 2 pi overflowing (or its quotient doing so) took math.log(0) or floor(inf)
    for betas in ((1e308, 1.0), (32.0, 1e-320)):
        r = resolve({**GOOD_YARN, "beta_fast": betas[0], "beta_slow": betas[1]}, head_dim=64, rotary_dim=64,
                    base=10000.0)
        assert np.all(np.isfinite(r.inv_freq)) and np.all(r.inv_freq > 0)
    # a base just above 1 puts the ramp's low bound past int64: numpy could not subtract it
    base = math.nextafter(1.0, 2.0)
    r = resolve(GOOD_YARN, head_dim=8192, rotary_dim=8192, base=base)
    check(r, ref.yarn(8192, base, 4.0, 4096))


def test_dims_beyond_max_dim_are_refused_before_any_allocation():
    from pyrope._engine.checks import MAX_HEAD_DIM  # the bound Rope itself checks
    for kwargs in ({"head_dim": 2**40, "rotary_dim": 64}, {"head_dim": 2**40, "rotary_dim": 2**40},
                   {"head_dim": MAX_HEAD_DIM + 2, "rotary_dim": MAX_HEAD_DIM + 2}):
        with pytest.raises(errors.ValueError, match=f"at most {MAX_HEAD_DIM}"):
            resolve(None, base=10000.0, **kwargs)
    assert resolve(None, head_dim=MAX_HEAD_DIM, rotary_dim=MAX_HEAD_DIM, base=10000.0).rotary_dim == MAX_HEAD_DIM
