"""Real model configs -> Rope arguments -> frequencies, checked against the oracle and by hand."""

import copy
import json
import math

import numpy as np
import pytest

import hf_configs as H
from pyrope import scaling as S
from pyrope.config import load_hf_config, rope_arguments_from_hf_config
from pyrope.scaling import resolve

REL = 1e-12


def resolved(config, **kw):
    args = rope_arguments_from_hf_config(config, **kw)
    return args, resolve(args["scaling"], head_dim=args["head_dim"], rotary_dim=args["rotary_dim"],
                         base=args["base"])


def check(r, expected):
    inv, att = expected
    np.testing.assert_allclose(r.inv_freq, inv, rtol=REL, atol=0)
    assert r.attention_factor == pytest.approx(att, rel=REL, abs=0)


# --------------------------------------------------------------------------- real configs


def test_llama2_7b(ref):
    args, r = resolved(H.LLAMA2_7B)
    # no rope_theta in the file: transformers' default 10000
    assert args == {"head_dim": 128, "rotary_dim": 128, "base": 10000.0, "scaling": None}
    check(r, ref.default(128, 10000.0))
    assert r.rule == "default" and r.attention_factor == 1.0
    assert r.inv_freq[1] == pytest.approx(10000.0 ** (-2 / 128), rel=REL)


def test_llama31_8b(ref):
    args, r = resolved(H.LLAMA31_8B)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (128, 128, 500000.0)
    assert isinstance(args["scaling"], S.Llama3)
    check(r, ref.llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192))
    # factor 8 used as given, not 131072 / 8192 = 16
    plain = ref.default(128, 500000.0)[0]
    assert r.inv_freq[-1] == pytest.approx(plain[-1] / 8, rel=REL)
    assert (r.original_window, r.target_window) == (8192, 131072)


def test_llama32_1b(ref):
    args, r = resolved(H.LLAMA32_1B)
    assert (args["head_dim"], args["rotary_dim"]) == (64, 64)  # explicit head_dim, = 2048 / 32 too
    check(r, ref.llama3(64, 500000.0, 32.0, 1.0, 4.0, 8192))
    assert r.inv_freq[-1] == pytest.approx(ref.default(64, 500000.0)[0][-1] / 32, rel=REL)
    assert r.params["factor"] == 32.0


def test_qwen25_yarn(ref):
    args, r = resolved(H.QWEN25_7B_YARN)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (128, 128, 1000000.0)
    check(r, ref.yarn(128, 1e6, 4.0, 32768))
    assert r.attention_factor == pytest.approx(1 + 0.1 * math.log(4), rel=REL)
    assert r.attention_factor == pytest.approx(1.1386294, abs=1e-7)
    assert r.params["truncate"] is True
    assert (r.original_window, r.target_window) == (32768, 131072)


def test_gpt_oss_yarn_without_truncate(ref):
    args, r = resolved(H.GPT_OSS_20B)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (64, 64, 150000.0)
    check(r, ref.yarn(64, 150000.0, 32.0, 4096, truncate=False))
    assert r.attention_factor == pytest.approx(1.3465736, abs=1e-7)
    assert r.params["truncate"] is False
    # with the flag ignored the ramp would differ
    truncated, _ = ref.yarn(64, 150000.0, 32.0, 4096, truncate=True)
    assert np.max(np.abs(r.inv_freq / np.array(truncated) - 1)) > 1e-3


@pytest.mark.parametrize("seq_len, variant", [(None, "short"), (1, "short"), (4096, "short"),
                                              (4097, "long"), (131072, "long")])
def test_phi3_128k_longrope(ref, seq_len, variant):
    args, r = resolved(H.PHI3_128K, seq_len=seq_len)
    assert (args["head_dim"], args["rotary_dim"]) == (96, 96)
    assert isinstance(args["scaling"], S.LongRope)
    check(r, ref.longrope(96, 10000.0, H.PHI3_SHORT_FACTOR, H.PHI3_LONG_FACTOR, 4096, 131072, seq_len))
    assert r.params["variant"] == variant
    # sqrt(1 + ln(131072/4096) / ln 4096) = sqrt(1 + 5/12)
    assert r.attention_factor == pytest.approx(math.sqrt(17 / 12), rel=REL)
    assert r.attention_factor == pytest.approx(1.1902381, abs=1e-7)
    table = H.PHI3_LONG_FACTOR if variant == "long" else H.PHI3_SHORT_FACTOR
    assert r.inv_freq[-1] == pytest.approx(10000.0 ** (-94 / 96) / table[-1], rel=REL)


def test_phi3_longrope_spelling_is_equivalent():
    cfg = copy.deepcopy(H.PHI3_128K)
    cfg["rope_scaling"]["type"] = "longrope"
    assert resolved(cfg, seq_len=5000)[1] == resolved(H.PHI3_128K, seq_len=5000)[1]


def test_su_is_only_a_phi3_spelling():
    cfg = copy.deepcopy(H.PHI3_128K)
    cfg["model_type"] = "llama"
    with pytest.raises(ValueError, match="'su'"):
        rope_arguments_from_hf_config(cfg)


@pytest.mark.parametrize("config, head_dim, rotary_dim", [(H.PHI2, 80, 32), (H.STABLELM2_1_6B, 64, 16),
                                                          (H.PHI2_V5, 80, 32)])
def test_partial_rotary(ref, config, head_dim, rotary_dim):
    args, r = resolved(config)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (head_dim, rotary_dim, 10000.0)
    check(r, ref.default(rotary_dim, 10000.0))
    # exponents run over the rotated share: pair 1 turns at 10000^(-2/rotary_dim)
    assert r.inv_freq[1] == pytest.approx(10000.0 ** (-2 / rotary_dim), rel=REL)


def test_transformers5_style_matches_transformers4_style(ref):
    _, old = resolved(H.LLAMA31_8B)
    args, new = resolved(H.LLAMA31_8B_V5)
    assert args["base"] == 500000.0
    assert new == old
    check(new, ref.llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192))
    _, old = resolved(H.GPT_OSS_20B)
    _, new = resolved(H.GPT_OSS_20B_V5)
    assert new == old


def test_proportional_v5(ref):
    args, r = resolved(H.PROPORTIONAL_V5)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (256, 256, 1e6)
    check(r, ref.proportional(256, 1e6, 0.25))
    assert np.count_nonzero(r.inv_freq) == 32 and len(r.inv_freq) == 128


def test_dynamic_follows_seq_len(ref):
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0,
           "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    for seq_len in (None, 4096, 6000, 16384):
        _, r = resolved(cfg, seq_len=seq_len)
        check(r, ref.dynamic(128, 10000.0, 2.0, 4096, seq_len))


def test_per_layer_rope_parameters(ref):
    cfg = {"hidden_size": 2048, "num_attention_heads": 8, "head_dim": 256, "max_position_embeddings": 131072,
           "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {
               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
               "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
           }}
    _, sliding = resolved(cfg, layer_type="sliding_attention")
    check(sliding, ref.default(256, 10000.0))
    _, full = resolved(cfg, layer_type="full_attention")
    check(full, ref.proportional(256, 1e6, 0.25))


def test_text_config_is_read(ref):
    cfg = {"model_type": "llava", "text_config": copy.deepcopy(H.LLAMA31_8B), "vision_config": {"hidden_size": 1024}}
    _, r = resolved(cfg)
    check(r, ref.llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192))


def test_top_level_original_window_reaches_yarn(ref):
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 16384,
           "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    _, r = resolved(cfg)
    check(r, ref.yarn(128, 10000.0, 4.0, 4096))


def test_rope_scaling_repeated_in_rope_parameters_is_accepted():
    cfg = copy.deepcopy(H.LLAMA31_8B_V5)
    cfg["rope_scaling"] = copy.deepcopy(H.LLAMA31_8B["rope_scaling"])
    assert resolved(cfg)[1] == resolved(H.LLAMA31_8B)[1]


def test_seq_len_is_inert_for_static_rules():
    assert resolved(H.LLAMA31_8B, seq_len=200000)[1] == resolved(H.LLAMA31_8B)[1]


def test_input_config_is_not_modified():
    cfg = copy.deepcopy(H.PHI3_128K)
    rope_arguments_from_hf_config(cfg, seq_len=9000)
    assert cfg == H.PHI3_128K


# --------------------------------------------------------------------------- loading


def test_load_from_file_and_folder(tmp_path, ref):
    (tmp_path / "config.json").write_text(json.dumps(H.QWEN25_7B_YARN))
    assert load_hf_config(tmp_path) == H.QWEN25_7B_YARN
    assert load_hf_config(tmp_path / "config.json") == H.QWEN25_7B_YARN
    assert load_hf_config(str(tmp_path)) == H.QWEN25_7B_YARN
    _, r = resolved(tmp_path)
    check(r, ref.yarn(128, 1e6, 4.0, 32768))


def test_load_from_object_with_to_dict():
    class Config:
        def to_dict(self):
            return copy.deepcopy(H.LLAMA2_7B)

    assert load_hf_config(Config()) == H.LLAMA2_7B


def test_load_copies_dicts():
    cfg = copy.deepcopy(H.LLAMA31_8B)
    loaded = load_hf_config(cfg)
    loaded["rope_scaling"]["factor"] = 99.0
    assert cfg["rope_scaling"]["factor"] == 8.0


def test_load_errors_name_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "config.json"
    with pytest.raises(ValueError, match="nowhere"):
        load_hf_config(missing)
    with pytest.raises(ValueError, match="config.json"):
        load_hf_config(tmp_path)  # folder without config.json
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 4096,')
    with pytest.raises(ValueError, match="bad.json.*not valid JSON"):
        load_hf_config(bad)
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(ValueError, match="array.json.*JSON object"):
        load_hf_config(array)
    with pytest.raises(TypeError, match="config"):
        load_hf_config(42)


# --------------------------------------------------------------------------- bad configs


def _with(base, **changes):
    cfg = copy.deepcopy(base)
    for key, value in changes.items():
        if value is _DROP:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return cfg


_DROP = object()
_L = H.LLAMA31_8B
_LS = _L["rope_scaling"]

BAD_CONFIGS = [
    (_with(H.LLAMA2_7B, hidden_size=_DROP), {}, ValueError, "hidden_size"),
    (_with(H.LLAMA2_7B, num_attention_heads=_DROP), {}, ValueError, "num_attention_heads"),
    (_with(H.LLAMA2_7B, head_dim=64.5), {}, ValueError, "head_dim"),
    (_with(H.LLAMA2_7B, rope_theta="10000"), {}, ValueError, "rope_theta"),
    (_with(H.LLAMA2_7B, rope_theta=1.0), {}, ValueError, "rope_theta"),
    (_with(H.LLAMA2_7B, rope_scaling=[1, 2]), {}, ValueError, "rope_scaling"),
    (_with(H.LLAMA2_7B, rope_scaling={"type": "linear", "rope_type": "dynamic", "factor": 2.0}), {}, ValueError,
     "'type'"),
    (_with(H.LLAMA2_7B, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}), {}, ValueError, "mrope"),
    (_with(H.LLAMA2_7B, rope_scaling={"type": "linear"}), {}, ValueError, "factor"),
    (_with(H.LLAMA2_7B, rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=_DROP), {},
     ValueError, "max_position_embeddings"),
    (_with(_L, rope_scaling={k: v for k, v in _LS.items() if k != "low_freq_factor"}), {}, ValueError,
     "low_freq_factor"),
    (_with(_L, rope_scaling={**_LS, "original_max_position_embeddings": 4096}, original_max_position_embeddings=8192),
     {}, ValueError, "original_max_position_embeddings"),
    (_with(_L, rope_scaling={**_LS, "rope_theta": 10000.0}), {}, ValueError, "rope_theta"),
    (_with(H.LLAMA31_8B_V5, rope_theta=10000.0), {}, ValueError, "rope_theta"),
    (_with(H.LLAMA31_8B_V5, rope_scaling={"rope_type": "linear", "factor": 8.0}), {}, ValueError, "rope_scaling"),
    (_with(H.PHI2, partial_rotary_factor=0), {}, ValueError, "partial_rotary_factor"),
    (_with(H.PHI2, partial_rotary_factor=1.5), {}, ValueError, "partial_rotary_factor"),
    (_with(H.STABLELM2_1_6B, partial_rotary_factor=0.3), {}, ValueError, "partial_rotary_factor"),  # 19: odd
    (_with(H.PHI2, rotary_pct=0.5), {}, ValueError, "rotary_pct"),
    (_with(H.PHI3_128K, num_attention_heads=24), {}, ValueError, "short_factor"),  # head 128: 64 pairs
    (_with(H.PHI3_128K), {"seq_len": 0}, ValueError, "seq_len"),
    (_with(H.PHI3_128K), {"seq_len": 4097.0}, TypeError, "seq_len"),
    (_with(H.PROPORTIONAL_V5), {"layer_type": "full_attention"}, ValueError, "layer_type"),
    ({"hidden_size": 64, "num_attention_heads": 1, "layer_types": ["full_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}}, {}, ValueError,
     "layer_type"),
    ({"hidden_size": 64, "num_attention_heads": 1,
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     {"layer_type": "sliding_attention"}, ValueError, "sliding_attention"),
]


@pytest.mark.parametrize("config, kwargs, exc, text", BAD_CONFIGS, ids=[f"bad{i}" for i in range(len(BAD_CONFIGS))])
def test_bad_config_is_refused_by_name(config, kwargs, exc, text):
    with pytest.raises(exc) as info:
        rope_arguments_from_hf_config(config, **kwargs)
    assert text in str(info.value)
