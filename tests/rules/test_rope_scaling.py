"""Rope with long-context rules: built from configs, attention factor applied, contract round trip."""
import copy
import json
import math

import numpy as np
import pytest

import hf_configs as H
import pyrope
from pyrope import Rope, reference
from pyrope import scaling as S
from pyrope.scaling import resolve
from tolerance import assert_rotation_close

CONFIGS = [
    (H.LLAMA2_7B, None), (H.LLAMA31_8B, None), (H.LLAMA32_1B, None), (H.QWEN25_7B_YARN, None),
    (H.GPT_OSS_20B, None), (H.PHI3_128K, None), (H.PHI3_128K, 8192), (H.PHI2, None), (H.STABLELM2_1_6B, None),
    (H.LLAMA31_8B_V5, None), (H.PROPORTIONAL_V5, None),
]


@pytest.mark.parametrize("config, seq_len", CONFIGS)
def test_from_hf_config_uses_the_resolved_rule(config, seq_len):
    rope = Rope.from_hf_config(config, seq_len=seq_len)
    args = pyrope.rope_arguments_from_hf_config(config, seq_len=seq_len)
    want = resolve(args["scaling"], head_dim=args["head_dim"], rotary_dim=args["rotary_dim"], base=args["base"])
    assert rope.layout == "split_half" and rope.head_dim == args["head_dim"]
    assert rope.rotary_dim == want.rotary_dim
    assert rope.inv_freq.tobytes() == want.inv_freq.tobytes()
    assert rope.attention_factor == want.attention_factor


def test_from_hf_config_reads_a_file_and_takes_a_layout(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(H.GPT_OSS_20B))
    rope = Rope.from_hf_config(tmp_path, layout="interleaved")
    assert rope.layout == "interleaved"
    assert rope.attention_factor == pytest.approx(1 + 0.1 * math.log(32), rel=1e-12)


def test_from_hf_config_longrope_follows_seq_len():
    short = Rope.from_hf_config(H.PHI3_128K, seq_len=4096)
    long = Rope.from_hf_config(H.PHI3_128K, seq_len=4097)
    ratio = short.inv_freq / long.inv_freq
    np.testing.assert_allclose(ratio, np.array(H.PHI3_LONG_FACTOR) / np.array(H.PHI3_SHORT_FACTOR), rtol=1e-12)
    assert short.fingerprint != long.fingerprint


@pytest.mark.parametrize("config", [H.QWEN25_7B_YARN, H.GPT_OSS_20B, H.PHI3_128K])
def test_cos_sin_applies_the_attention_factor(isa, config):
    rope = Rope.from_hf_config(config)
    assert rope.attention_factor > 1.1
    positions = [0, 1, 17, 4095, 4096, 32767, 131071]
    cos, sin = rope.cos_sin(np.array(positions))
    want_cos, want_sin = reference.cos_sin(positions, [float(w) for w in rope.inv_freq])
    a = rope.attention_factor
    # float32 tables of a * (exact cos, sin): within one float32 rounding of the scaled value
    np.testing.assert_allclose(cos, a * np.array(want_cos), rtol=0, atol=a * 2.0**-24 * 1.01)
    np.testing.assert_allclose(sin, a * np.array(want_sin), rtol=0, atol=a * 2.0**-24 * 1.01)
    assert cos[0, 0] == pytest.approx(a, rel=1e-7)


@pytest.mark.parametrize("layout", ["split_half", "interleaved"])
@pytest.mark.parametrize("config", [H.QWEN25_7B_YARN, H.PHI2, H.PHI3_128K, H.PROPORTIONAL_V5])
def test_apply_applies_the_attention_factor(isa, rng, layout, config):
    rope = Rope.from_hf_config(config, layout=layout)
    positions = np.array([0, 3, 4097, 100000])
    x = rng.standard_normal((len(positions), 2, rope.head_dim)).astype(np.float32)
    got = rope.apply(x, positions)
    inv = [float(w) for w in rope.inv_freq]
    want = np.array([[reference.rotate_with_inv_freq([float(v) for v in x[t, h]], int(positions[t]), inv, layout,
                                                     attention_factor=rope.attention_factor)
                      for h in range(2)] for t in range(len(positions))])
    assert_rotation_close(got, want, x, rope.rotary_dim, layout, rope.attention_factor)
    # cos and sin both carry the factor, so the rotated share's squared norm (and
    # the logits q.k) scale by its square
    r2 = np.sum(got[..., :rope.rotary_dim].astype(np.float64) ** 2)
    x2 = np.sum(x[..., :rope.rotary_dim].astype(np.float64) ** 2)
    assert r2 / x2 == pytest.approx(rope.attention_factor ** 2, rel=1e-5)
    np.testing.assert_array_equal(got[..., rope.rotary_dim:], x[..., rope.rotary_dim:])


RULES = [None, S.Linear(4.0), {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                                "truncate": False},
         S.Llama3(8.0, 1.0, 4.0, 8192), S.Dynamic(2.0, 4096, seq_len=5000), "proportional"]


@pytest.mark.parametrize("i", range(len(RULES)))
def test_contract_round_trip_rebuilds_the_identical_rope(i):
    rope = Rope(128, layout="interleaved", rotary_dim=64, base=500000.0, scaling=RULES[i])
    contract = rope.contract()
    back = Rope.from_contract(json.loads(json.dumps(contract)))
    assert (back.layout, back.head_dim, back.rotary_dim) == (rope.layout, rope.head_dim, rope.rotary_dim)
    assert back.inv_freq.tobytes() == rope.inv_freq.tobytes()
    assert back.attention_factor.hex() == rope.attention_factor.hex()
    assert back.fingerprint == rope.fingerprint
    assert back.contract() == contract
    positions = np.array([0, 5, 70000])
    for a, b in zip(back.cos_sin(positions), rope.cos_sin(positions)):
        assert a.tobytes() == b.tobytes()


def test_fingerprint_changes_with_base_factor_layout_rotary_dim():
    ref = Rope(128, layout="split_half", base=10000.0, scaling=S.Linear(4.0))
    same = Rope(128, layout="split_half", base=10000, scaling={"type": "linear", "factor": 4})
    assert same.fingerprint == ref.fingerprint
    others = [
        Rope(128, layout="split_half", base=20000.0, scaling=S.Linear(4.0)),
        Rope(128, layout="split_half", base=10000.0, scaling=S.Linear(8.0)),
        Rope(128, layout="interleaved", base=10000.0, scaling=S.Linear(4.0)),
        Rope(128, layout="split_half", base=10000.0, rotary_dim=64, scaling=S.Linear(4.0)),
    ]
    fps = {ref.fingerprint} | {r.fingerprint for r in others}
    assert len(fps) == 5


def test_from_contract_refuses_a_bad_contract():
    contract = Rope(64, layout="split_half").contract()
    broken = copy.deepcopy(contract)
    broken["rotary_dim"] = 32
    with pytest.raises(pyrope.RopeError, match="rotary_dim"):
        Rope.from_contract(broken)
    broken = copy.deepcopy(contract)
    broken["layout"] = "diagonal"
    with pytest.raises(ValueError, match="layout"):
        Rope.from_contract(broken)


def test_scaling_errors_are_rope_errors():
    with pytest.raises(pyrope.RopeError, match="factor"):
        Rope(64, layout="split_half", scaling={"rope_type": "linear"})
    with pytest.raises(ValueError, match="beta_fast"):
        Rope(64, layout="split_half", scaling={"rope_type": "yarn", "factor": 2.0, "beta_fast": 1.0,
                                               "original_max_position_embeddings": 4096})
    with pytest.raises(pyrope.RopeError, match="max_position_embeddings"):
        Rope.from_hf_config({"hidden_size": 64, "num_attention_heads": 1, "rope_scaling": {"type": "dynamic",
                                                                                       "factor": 2.0}})


def test_repr_names_the_rule():
    rope = Rope.from_hf_config(H.LLAMA31_8B)
    assert "llama3" in repr(rope)
