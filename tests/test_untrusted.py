"""Counts given as arguments to the rules, contracts and tools are checked against
their limits before anything of that size is built or any element is read: a
result or a RopeError naming the argument, refusals within a second, Python's
allocations bounded whatever number is passed (broadcast views of 2**40 entries,
ranges of 2**64, lists past one factor per pair)."""
import time
import tracemalloc

import numpy as np
import pytest

import pyrope
from pyrope import Rope, RopeError
from pyrope import check as pyrope_check
from pyrope import scaling as S

PAIRS = [1.0 + i / 32 for i in range(32)]   # one factor per pair of a 64-wide head

MAX_PEAK = 64 << 20   # what the largest head a limit admits may allocate; a count's value never raises it


def _too_much(outcome, peak):
    """Whether Python allocated more than MAX_PEAK. An allocation numpy failed to make (a
    refusal saying "cannot be allocated") is counted by tracemalloc although nothing was
    used, as in tests/test_hardening.py."""
    failed = isinstance(outcome, RopeError) and "cannot be allocated" in str(outcome)
    return peak > MAX_PEAK and not failed


def _bounded(call):
    """``call()``: its result or RopeError, with the peak of Python's allocations and the seconds."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        try:
            outcome = call()
        except RopeError as exc:
            outcome = exc
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return outcome, peak, seconds


# ---- counts given as arguments -----------------------------------------------------------------

HUGE = np.broadcast_to(1.0, (2**40,))   # 8 TiB of float64 in 8 bytes
COUNTED = {
    "FreqFactors(factors)": lambda v: S.FreqFactors(v),
    "LongRope(short_factor)": lambda v: S.LongRope(short_factor=v, long_factor=PAIRS,
                                                   original_max_position_embeddings=4096, factor=2.0),
    "LongRope(long_factor)": lambda v: S.LongRope(short_factor=PAIRS, long_factor=v,
                                                  original_max_position_embeddings=4096, factor=2.0),
    "rule_from_dict(freq_factors)": lambda v: S.rule_from_dict({"rope_type": "freq_factors", "factors": v}),
    "rule_from_dict(longrope)": lambda v: S.rule_from_dict({"rope_type": "longrope", "short_factor": v,
                                                            "long_factor": v, "factor": 2.0,
                                                            "original_max_position_embeddings": 4096}),
    "resolve(dict)": lambda v: S.resolve({"rope_type": "freq_factors", "factors": v}, head_dim=64,
                                         rotary_dim=64, base=10000.0),
    "Rope(scaling=dict)": lambda v: Rope(64, layout="split_half", scaling={"rope_type": "freq_factors",
                                                                          "factors": v}),
    "Resolved(inv_freq)": lambda v: S.Resolved(inv_freq=v, attention_factor=1.0, rule="x", params={}),
    "resolved_from_contract(inv_freq)": lambda v: pyrope.resolved_from_contract(
        {**Rope(64, layout="split_half").contract(), "inv_freq": v}),
    "Rope.from_contract(inv_freq)": lambda v: Rope.from_contract(
        {**Rope(64, layout="split_half").contract(), "inv_freq": v}),
    "onnx_caches(max_pos)": lambda v: pyrope.onnx_caches(Rope(64, layout="split_half"), v),
    "sanity(positions)": lambda v: pyrope_check.sanity(Rope(8, layout="split_half"), positions=v),
    "sanity(shifts)": lambda v: pyrope_check.sanity(Rope(8, layout="split_half"), shifts=v),
}
COUNTED_VALUES = {
    "broadcast 2**40": HUGE, "range(2**40)": range(2**40), "range(2**64)": range(2**64),
    "list of 40000": [1.0] * 40000, "[broadcast 2**40]": [HUGE], "2-D broadcast": np.broadcast_to(1.0, (2**20, 2**20)),
    "0-d array": np.array(1.0), "empty": [], "2**40": 2**40, "2**31": 2**31, "2**64": 2**64, "10**5000": 10**5000,
    "['0x1p-1'] * 40000": ["0x1p-1"] * 40000, "generator": (1.0 for _ in range(3)), "dict": {1: 2}, "str": "1.0",
}


@pytest.mark.parametrize("entry", list(COUNTED))
def test_counts_given_as_arguments_are_checked_first(entry):
    problems = []
    for name, value in COUNTED_VALUES.items():
        outcome, peak, seconds = _bounded(lambda: COUNTED[entry](value))
        if _too_much(outcome, peak):
            problems.append(f"{name}: {peak} bytes")
        if isinstance(outcome, RopeError) and seconds > 1.0:
            problems.append(f"{name}: refused after {seconds:.2f} s")
    assert not problems, problems


@pytest.mark.parametrize("call, match", [
    (lambda: S.FreqFactors(HUGE), r"freq_factors: 'factors' must have at most 32768 entries .* got 1099511627776"),
    (lambda: S.FreqFactors({"a": 1}), r"'factors' must be a non-empty list of numbers"),
    (lambda: S.LongRope(short_factor=HUGE, long_factor=[1.0], original_max_position_embeddings=4096),
     r"longrope: 'short_factor' must have at most 32768 entries"),
    (lambda: S.rule_from_dict({"rope_type": "longrope", "short_factor": PAIRS, "long_factor": HUGE,
                               "original_max_position_embeddings": 4096, "factor": 2.0}),
     r"'long_factor' must have at most 32768"),
    (lambda: S.Resolved(inv_freq=np.broadcast_to(0.1, (2**40,)), attention_factor=1.0, rule="x", params={}),
     r"'inv_freq' must have at most 32768 entries .* got 1099511627776"),
    (lambda: S.Resolved(inv_freq=[np.broadcast_to(0.1, (2**40,))], attention_factor=1.0, rule="x", params={}),
     r"inv_freq must be a vector of real numbers"),
    (lambda: S.FreqFactors(range(2**64)), r"'factors' must be a non-empty list of numbers"),
    (lambda: S.FreqFactors(np.array(2.0)), r"'factors' must be a non-empty list of numbers"),
    (lambda: pyrope.onnx_caches(Rope(64, layout="split_half"), 2**31),
     r"max_pos: the cos and sin caches of shape \(2147483648, 32\) .* cannot be allocated|max_pos must be"),
    (lambda: pyrope_check.sanity(Rope(8, layout="split_half"), positions=range(2**40)),
     r"positions: at most 1024 values"),
    (lambda: pyrope.resolved_from_contract({**Rope(64, layout="split_half").contract(),
                                            "inv_freq": ["0x1p-1"] * 10**6}),
     r"'rotary_dim' 64 must be 2 \* len\(inv_freq\) = 2000000"),
])
def test_an_argument_count_is_refused_naming_it(call, match):
    with pytest.raises(RopeError, match=match):
        call()


def test_factor_lists_at_the_limit_are_served():
    pairs = np.linspace(1.0, 2.0, S.MAX_PAIRS)
    rope = Rope(2 * S.MAX_PAIRS, layout="split_half", scaling=S.FreqFactors(pairs))
    plain = Rope(2 * S.MAX_PAIRS, layout="split_half")
    assert np.array_equal(rope.inv_freq, plain.inv_freq / pairs)
    assert S.Resolved(inv_freq=rope.inv_freq, attention_factor=1.0, rule="x", params={}).rotary_dim == 2 * S.MAX_PAIRS
