"""Contracts written by pyrope 0.1.0 (whose frequencies depended on numpy's CPU
dispatch) stay loadable as they are, and ``pyrope.contract.upgrade`` maps each
to the contract today's rules give, refusing one whose numbers its rule does not give.

tests/data/contracts_0.1.0.json holds contracts as 0.1.0 wrote them (input data,
not expected results): what they must become is recomputed here, from the
plain-Python rules (tests/support/contract_oracle.py)."""
import copy
import json
import pathlib
import warnings

import numpy as np
import pytest

import hf_configs as H
import pyrope
from contract_oracle import expected_numbers, independent_fingerprint
from pyrope.contract import upgrade

OLD = json.loads((pathlib.Path(__file__).resolve().parents[1] / "data" / "contracts_0.1.0.json").read_text())["contracts"]


def today(name):
    """The Rope today's release builds for a fixture's key (a config name and its arguments)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "PHI3_128K seq_len=9000":
            return pyrope.Rope.from_hf_config(H.PHI3_128K, seq_len=9000)
        if name == "LLAMA2_7B dynamic 2.0 seq_len=16384":
            return pyrope.Rope.from_hf_config({**H.LLAMA2_7B, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
                                              seq_len=16384)
        if name == "ntk 3.0 head_dim 96":
            return pyrope.Rope(96, layout="split_half", base=1e6, scaling={"rope_type": "ntk", "factor": 3.0})
        if name == "freq_factors head_dim 64":
            return pyrope.Rope(64, layout="interleaved", base=500000.0,
                               scaling=pyrope.scaling.FreqFactors([1.0] * 24 + [8.0] * 8, 1.25))
        if name == "mrope qwen2-vl":
            return pyrope.Rope(128, layout="split_half", base=1e6, mrope_section=[16, 24, 24])
        return pyrope.Rope.from_hf_config(getattr(H, name))


@pytest.mark.parametrize("name", sorted(OLD))
def test_an_old_contract_loads_with_its_own_numbers_and_fingerprint(name):
    old = OLD[name]
    rope = pyrope.Rope.from_contract(copy.deepcopy(old))
    assert [v.hex() for v in rope.inv_freq.tolist()] == [float.fromhex(h).hex() for h in old["inv_freq"]]
    assert rope.fingerprint == independent_fingerprint(old)


@pytest.mark.parametrize("name", sorted(OLD))
def test_upgrade_gives_the_contract_of_todays_rope(name):
    old, now = OLD[name], today(name)
    new = upgrade(copy.deepcopy(old))
    assert new == now.contract()
    assert pyrope.Rope.from_contract(new).fingerprint == now.fingerprint == independent_fingerprint(new)
    inv_freq, attention = expected_numbers(new)
    assert [float.fromhex(h) for h in new["inv_freq"]] == inv_freq and float.fromhex(new["attention_factor"]) == attention
    # what moved is rounding: the frequencies within 4 ulp (2**-50 relative) of the old ones
    a = np.array([float.fromhex(h) for h in old["inv_freq"]])
    b = np.array(inv_freq)
    assert np.all(np.abs(a - b) <= 2.0 ** -50 * np.abs(b))


def test_upgrade_of_a_current_contract_changes_nothing():
    for name in sorted(OLD):
        c = today(name).contract()
        assert upgrade(copy.deepcopy(c)) == c


def _edited(name, edit):
    c = copy.deepcopy(OLD[name])
    edit(c)
    return c


@pytest.mark.parametrize("name, edit, key", [
    ("LLAMA31_8B", lambda c: c["inv_freq"].__setitem__(5, (float.fromhex(c["inv_freq"][5]) * (1 + 2e-12)).hex()),
     "'inv_freq[5]'"),
    ("QWEN25_7B_YARN", lambda c: c.__setitem__("attention_factor", (1.2).hex()), "'attention_factor'"),
    ("LLAMA31_8B", lambda c: c["params"].__setitem__("factor", 16.0), "'inv_freq"),
    ("QWEN25_7B_YARN", lambda c: c["params"].__setitem__("beta_fast", 16.0), "'inv_freq"),
    ("DEEPSEEK_V3", lambda c: c.__setitem__("softmax_scale_factor", (1.5).hex()), "'softmax_scale_factor'"),
    ("LLAMA2_7B", lambda c: c.__setitem__("rule", "no_such_rule"), "'no_such_rule'"),
    ("GPT_OSS_20B", lambda c: c["params"].pop("beta_slow"), "beta_slow"),
    ("HUNYUAN_7B", lambda c: c["params"].__setitem__("scaled_base", 1e9), "'params.scaled_base'"),
])
def test_upgrade_refuses_numbers_its_rule_does_not_give(name, edit, key):
    with pytest.raises(pyrope.errors.ValueError) as info:
        upgrade(_edited(name, edit))
    assert key in str(info.value)

