"""The contract's softmax_scale_factor and layout_source: what enters the fingerprint and what does not."""

import copy
import hashlib
import json

import pytest

import hf_configs as H
import pyrope
from pyrope.contract import canonical_json, config_facts_from_contract, fingerprint, make_contract, \
    with_config_facts
from pyrope.scaling import Linear, resolve


def _plain():
    resolved = resolve(Linear(8.0), head_dim=8, rotary_dim=8, base=10000.0)
    return make_contract(layout="split_half", head_dim=8, resolved=resolved)


def test_make_contract_alone_has_neither_key():
    assert not {"softmax_scale_factor", "layout_source"} & set(_plain())


def test_rope_contract_has_both():
    c = pyrope.Rope(8, layout="split_half", scaling=Linear(8.0)).contract()
    assert c["softmax_scale_factor"] == (1.0).hex() and c["layout_source"] == "argument"
    assert {k: v for k, v in c.items() if k not in ("softmax_scale_factor", "layout_source")} == _plain()


def test_canonical_form_without_a_factor_is_the_old_one():
    plain = _plain()
    for source in ("argument", "rope_interleave", "model_type", "default"):
        assert canonical_json(with_config_facts(plain, layout_source=source)) == canonical_json(plain)


def test_canonical_form_with_a_factor_is_pinned():
    # the pinned canonical text of test_contract.test_fingerprint_is_pinned, plus the factor's hex
    c = with_config_facts(_plain(), softmax_scale_factor=1.5, layout_source="model_type")
    canonical = (
        '{"attention_factor":"0x1.0000000000000p+0","format":"pyrope.contract/1","head_dim":8,'
        '"inv_freq":["0x1.0000000000000p-3","0x1.999999999999ap-7","0x1.47ae147ae147bp-10",'
        '"0x1.0624dd2f1a9fcp-13"],"layout":"split_half","original_window":null,'
        '"params":{"base":"0x1.3880000000000p+13","factor":"0x1.0000000000000p+3"},'
        '"rotary_dim":8,"rule":"linear","softmax_scale_factor":"0x1.8000000000000p+0","target_window":null}'
    )
    assert canonical_json(c) == canonical
    assert fingerprint(c) == hashlib.sha256(canonical.encode("ascii")).hexdigest()
    # a non-canonical spelling of the same factor hashes the same
    assert fingerprint({**c, "softmax_scale_factor": "0x1.8p+0"}) == fingerprint(c)


def test_contracts_without_the_keys_still_load():
    back = pyrope.Rope.from_contract(_plain())
    assert (back.softmax_scale_factor, back.layout_source) == (1.0, "argument")
    assert config_facts_from_contract(_plain()) == (1.0, "argument")


def test_deepseek_round_trip_through_json():
    rope = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3)
    text = json.dumps(rope.contract())
    back = pyrope.Rope.from_contract(json.loads(text))
    assert back.softmax_scale_factor == rope.softmax_scale_factor
    assert back.layout_source == rope.layout_source == "model_type"
    assert back.fingerprint == rope.fingerprint


@pytest.mark.parametrize("key, value, text", [
    ("softmax_scale_factor", 1.5, "softmax_scale_factor"),  # a float, not its hex
    ("softmax_scale_factor", "zz", "softmax_scale_factor"),
    ("softmax_scale_factor", (0.0).hex(), "softmax_scale_factor"),
    ("softmax_scale_factor", "-0x1p+0", "softmax_scale_factor"),
    ("softmax_scale_factor", "inf", "softmax_scale_factor"),
    ("layout_source", "guess", "layout_source"),
    ("layout_source", 3, "layout_source"),
])
def test_bad_values_are_refused_by_name(key, value, text):
    c = copy.deepcopy(pyrope.Rope(8, layout="split_half").contract())
    c[key] = value
    with pytest.raises(ValueError, match=text):
        pyrope.Rope.from_contract(c)
    with pytest.raises(ValueError, match=text):
        fingerprint(c)
    with pytest.raises(ValueError, match=text):
        pyrope.contract.resolved_from_contract(c)
