"""The contract round-trips exactly; its fingerprint is stable and sensitive to what matters."""

import copy
import hashlib
import json

import numpy as np
import pytest

import hf_configs as H
from contract_oracle import independent_fingerprint
from pyrope import scaling as S
from pyrope.config import rope_arguments_from_hf_config
from pyrope.contract import FORMAT, fingerprint, make_contract, resolved_from_contract
from pyrope.scaling import resolve

RULES = [
    None,
    S.Linear(8.0),
    S.NTK(4.0),
    S.Dynamic(2.0, 4096, seq_len=10000),
    S.Yarn(factor=4.0, original_max_position_embeddings=32768),
    S.Yarn(factor=32.0, original_max_position_embeddings=4096, truncate=False, mscale=0.707, mscale_all_dim=1.0),
    S.Llama3(8.0, 1.0, 4.0, 8192, 131072),
    S.LongRope([1.0 + i / 10 for i in range(32)], [2.0 + i for i in range(32)], 4096, 131072, seq_len=8000),
    S.Proportional(partial_rotary_factor=0.25),
    S.FreqFactors([1.0 + i / 7 for i in range(32)], attention_factor=1.1),
]


def contract_for(rule, *, layout="split_half", head_dim=64, rotary_dim=64, base=10000.0):
    r = resolve(rule, head_dim=head_dim, rotary_dim=rotary_dim, base=base)
    return make_contract(layout=layout, head_dim=head_dim, resolved=r), r


@pytest.mark.parametrize("i", range(len(RULES)))
def test_json_round_trip_is_exact(i):
    contract, r = contract_for(RULES[i])
    text = json.dumps(contract, allow_nan=False)
    layout, head_dim, back = resolved_from_contract(json.loads(text))
    assert (layout, head_dim) == ("split_half", 64)
    # bit-for-bit: same float64 words, not merely close
    assert back.inv_freq.view(np.uint64).tolist() == r.inv_freq.view(np.uint64).tolist()
    assert back.attention_factor.hex() == r.attention_factor.hex()
    assert back == r
    assert not back.inv_freq.flags.writeable
    assert make_contract(layout=layout, head_dim=head_dim, resolved=back) == contract


def test_contract_states_everything():
    contract, r = contract_for(S.Yarn(factor=4.0, original_max_position_embeddings=32768,
                                      max_position_embeddings=131072), head_dim=128, rotary_dim=128, base=1e6)
    assert contract["format"] == FORMAT
    assert contract["layout"] == "split_half"
    assert (contract["head_dim"], contract["rotary_dim"]) == (128, 128)
    assert len(contract["inv_freq"]) == 64
    assert float.fromhex(contract["inv_freq"][0]) == 1.0
    assert float.fromhex(contract["attention_factor"]) == pytest.approx(1.1386294, abs=1e-7)
    assert contract["rule"] == "yarn"
    assert contract["params"]["factor"] == 4.0 and contract["params"]["truncate"] is True
    assert (contract["original_window"], contract["target_window"]) == (32768, 131072)


@pytest.mark.parametrize("i", range(len(RULES)))
def test_fingerprint_matches_independent_computation(i):
    contract, _ = contract_for(RULES[i])
    fp = fingerprint(contract)
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert fp == independent_fingerprint(contract)
    assert fingerprint(json.loads(json.dumps(contract))) == fp


def test_fingerprint_is_pinned():
    # d=8, b=10000, PI factor 8: a change in the canonical form shows up here
    contract, _ = contract_for(S.Linear(8.0), head_dim=8, rotary_dim=8)
    canonical = (
        '{"attention_factor":"0x1.0000000000000p+0","format":"pyrope.contract/1","head_dim":8,'
        '"inv_freq":["0x1.0000000000000p-3","0x1.999999999999ap-7","0x1.47ae147ae147bp-10",'
        '"0x1.0624dd2f1a9fcp-13"],"layout":"split_half","original_window":null,'
        '"params":{"base":"0x1.3880000000000p+13","factor":"0x1.0000000000000p+3"},'
        '"rotary_dim":8,"rule":"linear","target_window":null}'
    )
    assert fingerprint(contract) == hashlib.sha256(canonical.encode("ascii")).hexdigest()


def test_same_numbers_same_fingerprint():
    a, _ = contract_for(S.Linear(8))
    b, _ = contract_for({"type": "linear", "factor": 8.0})
    assert fingerprint(a) == fingerprint(b)
    # a non-canonical but equal hex spelling hashes the same
    c = copy.deepcopy(a)
    c["inv_freq"][0] = "0x1p-3"
    assert float.fromhex(c["inv_freq"][0]) == float.fromhex(a["inv_freq"][0])
    assert fingerprint(c) == fingerprint(a)


def test_fingerprint_changes_with_what_defines_the_function():
    ref, _ = contract_for(S.Linear(8.0))
    variants = {
        "base": contract_for(S.Linear(8.0), base=500000.0)[0],
        "factor": contract_for(S.Linear(4.0))[0],
        "layout": contract_for(S.Linear(8.0), layout="interleaved")[0],
        "rotary_dim": contract_for(S.Linear(8.0), rotary_dim=32)[0],
        "head_dim": contract_for(S.Linear(8.0), head_dim=128)[0],
        "rule": contract_for(S.NTK(8.0))[0],
    }
    seen = {fingerprint(ref)}
    for name, contract in variants.items():
        fp = fingerprint(contract)
        assert fp not in seen, name
        seen.add(fp)


def test_fingerprint_sees_attention_factor_and_last_bit():
    contract, _ = contract_for(S.Yarn(factor=4.0, original_max_position_embeddings=4096))
    fp = fingerprint(contract)
    other = copy.deepcopy(contract)
    other["attention_factor"] = float.fromhex(other["attention_factor"]).__mul__(1.0 + 2 ** -52).hex()
    assert fingerprint(other) != fp
    other = copy.deepcopy(contract)
    last = float.fromhex(other["inv_freq"][-1])
    other["inv_freq"][-1] = np.nextafter(last, 1.0).item().hex()
    assert fingerprint(other) != fp


def test_real_config_contracts_differ():
    fps = set()
    for cfg, seq in ((H.LLAMA31_8B, None), (H.LLAMA32_1B, None), (H.PHI3_128K, None), (H.PHI3_128K, 5000),
                     (H.QWEN25_7B_YARN, None), (H.GPT_OSS_20B, None), (H.PHI2, None)):
        args = rope_arguments_from_hf_config(cfg, seq_len=seq)
        r = resolve(args["scaling"], head_dim=args["head_dim"], rotary_dim=args["rotary_dim"], base=args["base"])
        fps.add(fingerprint(make_contract(layout="split_half", head_dim=args["head_dim"], resolved=r)))
    assert len(fps) == 7


# --------------------------------------------------------------------------- bad contracts


def _good():
    return contract_for(S.Linear(2.0), head_dim=16, rotary_dim=8)[0]


def _edit(**changes):
    d = _good()
    for key, value in changes.items():
        if value is _DROP:
            del d[key]
        else:
            d[key] = value
    return d


_DROP = object()

BAD_CONTRACTS = [
    (_edit(format="pyrope.contract/0"), ValueError, "format"),
    (_edit(format=_DROP), ValueError, "format"),
    (_edit(inv_freq=_DROP), ValueError, "inv_freq"),
    (_edit(extra=1), ValueError, "extra"),
    (_edit(layout=""), ValueError, "layout"),
    (_edit(layout=3), ValueError, "layout"),
    (_edit(head_dim=True), ValueError, "head_dim"),
    (_edit(head_dim=4), ValueError, "head_dim"),
    (_edit(rotary_dim=6), ValueError, "rotary_dim"),
    (_edit(inv_freq=[]), ValueError, "inv_freq"),
    (_edit(inv_freq=[0.5, 0.25, 0.125, 0.0625]), ValueError, "inv_freq[0]"),
    (_edit(inv_freq=["0x1p-1", "zz", "0x1p-3", "0x1p-4"]), ValueError, "inv_freq[1]"),
    (_edit(inv_freq=["0x1p-1", "inf", "0x1p-3", "0x1p-4"]), ValueError, "inv_freq[1]"),
    (_edit(inv_freq=["0x1p-1", "-0x1p-2", "0x1p-3", "0x1p-4"]), ValueError, "inv_freq"),
    (_edit(attention_factor="0x0p+0"), ValueError, "attention_factor"),
    (_edit(attention_factor=1.0), ValueError, "attention_factor"),
    (_edit(rule=""), ValueError, "rule"),
    (_edit(params=[]), ValueError, "params"),
    (_edit(params={"x": float("nan")}), ValueError, "params.x"),
    (_edit(params={"x": object()}), ValueError, "params.x"),
    (_edit(original_window=0), ValueError, "original_window"),
    (_edit(target_window="4096"), ValueError, "target_window"),
    ([1, 2], TypeError, "contract"),
]


@pytest.mark.parametrize("d, exc, text", BAD_CONTRACTS, ids=[f"bad{i}" for i in range(len(BAD_CONTRACTS))])
def test_bad_contract_is_refused_by_name(d, exc, text):
    with pytest.raises(exc) as info:
        resolved_from_contract(d)
    assert text in str(info.value)
    with pytest.raises(exc):
        fingerprint(d)


def test_make_contract_checks_its_arguments():
    r = resolve(None, head_dim=64, rotary_dim=64, base=10000.0)
    with pytest.raises(TypeError, match="resolved"):
        make_contract(layout="split_half", head_dim=64, resolved={"inv_freq": [1.0]})
    with pytest.raises(ValueError, match="head_dim"):
        make_contract(layout="split_half", head_dim=32, resolved=r)
    with pytest.raises(ValueError, match="layout"):
        make_contract(layout=None, head_dim=64, resolved=r)


# --------------------------------------------------------------------------- strict hex, int64, informational windows

from pyrope import errors  # noqa: E402


@pytest.mark.parametrize("text", ["1.5", "1", "0x1.8", " 0x1p+0", "0x1p+0 ", "Infinity", "+nan", "0x1.8p", "1e0",
                                  "0x1p+0" + "0" * 80], ids=lambda t: repr(t)[:16])
def test_a_hex_float_must_have_float_hex_form(text):
    d = _edit(attention_factor=text)
    with pytest.raises(errors.ValueError, match="attention_factor.*float.hex"):
        resolved_from_contract(d)


@pytest.mark.parametrize("text, value", [("0x1.8000000000000p+0", 1.5), ("0x1.8p+0", 1.5), ("-0x1p-3", -0.125),
                                         ("0X1.8P+0", 1.5), ("+0x1p+1", 2.0), ("0x0.0p+0", 0.0)])
def test_float_hex_forms_are_read(text, value):
    from pyrope.contract import _from_hex
    assert _from_hex("x", text) == value


def test_ints_in_a_contract_must_be_int64():
    with pytest.raises(errors.ValueError, match="params.x"):
        resolved_from_contract(_edit(params={"x": 2**63}))
    with pytest.raises(errors.ValueError, match="original_window"):
        resolved_from_contract(_edit(original_window=10**5000))
    assert resolved_from_contract(_edit(params={"x": 2**63 - 1}))[2].params == {"x": 2**63 - 1}


def test_default_rule_windows_stay_out_of_the_fingerprint_other_rules_keep_theirs():
    plain = make_contract(layout="split_half", head_dim=64, resolved=resolve(None, head_dim=64, rotary_dim=64,
                                                                           base=10000.0))
    windowed = {**plain, "original_window": 4096, "target_window": 4096}
    assert fingerprint(windowed) == fingerprint(plain)
    yarn = make_contract(layout="split_half", head_dim=64, resolved=resolve(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, head_dim=64, rotary_dim=64,
        base=10000.0))
    assert fingerprint({**yarn, "target_window": 8192}) != fingerprint(yarn)
