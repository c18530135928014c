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
    """The oracle's numbers to the bit (it rounds powers and logarithms once, as the rules must)."""
    inv, att = expected
    assert r.inv_freq.tolist() == list(inv)
    assert r.attention_factor == att


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


# --------------------------------------------------------------------------- layout from the config

import warnings  # noqa: E402

import pyrope  # noqa: E402
from pyrope._readers import hf_config as C  # noqa: E402  (the reader; layer_ropes is pyrope.config's)
from pyrope.config import layer_ropes, layout_from_hf_config  # noqa: E402
from contract_oracle import expected_numbers, independent_fingerprint  # noqa: E402

# the family configs whose fingerprints must come out as the canonical form of their
# contracts says, with frequencies from the plain-Python rules (tests/support/contract_oracle.py):
# the same on every machine, and unmoved by where the layout came from
FINGERPRINT_CONFIGS = ["LLAMA2_7B", "LLAMA31_8B", "LLAMA32_1B", "QWEN25_7B_YARN", "GPT_OSS_20B", "PHI3_128K", "PHI2",
                       "STABLELM2_1_6B", "LLAMA31_8B_V5", "PHI2_V5", "GPT_OSS_20B_V5", "PROPORTIONAL_V5",
                       "DEEPSEEK_V3", "HUNYUAN_7B", "SMOLLM3_3B"]


def expected_fingerprint(rope):
    """The fingerprint recomputed without pyrope: frequencies and attention factor from the
    rule's parameters (they must match the contract to the bit), then the canonical form."""
    contract = rope.contract()
    inv_freq, attention = expected_numbers(contract)
    assert [float.fromhex(h) for h in contract["inv_freq"]] == inv_freq
    assert float.fromhex(contract["attention_factor"]) == attention
    return independent_fingerprint(contract)


@pytest.mark.parametrize("name", FINGERPRINT_CONFIGS)
def test_fingerprints_of_family_configs_follow_from_their_numbers(name):
    config = getattr(H, name)
    from_config = pyrope.Rope.from_hf_config(config)
    explicit = pyrope.Rope.from_hf_config(config, layout=from_config.layout)
    assert from_config.fingerprint == explicit.fingerprint == expected_fingerprint(from_config)


def test_fingerprints_of_other_ropes_follow_from_their_numbers():
    llama2_dynamic = copy.deepcopy(H.LLAMA2_7B)
    llama2_dynamic["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    ropes = [
        pyrope.Rope.from_hf_config(H.LLAMA31_8B, layout="interleaved"),
        pyrope.Rope.from_hf_config(llama2_dynamic, seq_len=16384),
        pyrope.Rope.from_hf_config(H.PHI3_128K, seq_len=9000),
        pyrope.Rope(64, layout="interleaved", base=500000.0, rotary_dim=32,
                    scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
        pyrope.Rope(96, layout="split_half", base=1e6, scaling={"rope_type": "ntk", "factor": 3.0}),
        pyrope.Rope(80, layout="split_half", base=12345.0,
                    scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048,
                             "truncate": False, "mscale": 0.707, "mscale_all_dim": 1.0}),
    ]
    for rope in ropes:
        assert rope.fingerprint == expected_fingerprint(rope)


LAYOUTS = [
    # (config, layout, source)
    (H.LLAMA31_8B, "split_half", "model_type"),
    (H.QWEN25_7B_YARN, "split_half", "default"),
    (H.DEEPSEEK_V3, "interleaved", "model_type"),  # no rope_interleave in the file: DeepseekV3Config's true
    ({**H.DEEPSEEK_V3, "rope_interleave": False}, "split_half", "rope_interleave"),
    ({**H.DEEPSEEK_V3, "rope_interleave": True}, "interleaved", "rope_interleave"),
    ({**H.LLAMA31_8B, "rope_interleave": True}, "interleaved", "rope_interleave"),  # the key decides first
    (H.DEEPSEEK_V2_LITE, "interleaved", "model_type"),
    (H.LLAMA4_SCOUT, "interleaved", "model_type"),
    (H.LLAMA4_SCOUT["text_config"], "interleaved", "model_type"),  # llama4_text on its own
    (H.GPTJ_6B, "interleaved", "model_type"),
    (H.GLM4_9B, "interleaved", "model_type"),
    (H.COHERE2_7B, "interleaved", "model_type"),
    (H.PYTHIA_1B, "split_half", "model_type"),
    (H.GEMMA3_4B, "split_half", "model_type"),
    ({**H.LLAMA31_8B, "model_type": "glm4_moe"}, "split_half", "model_type"),  # not GLM's pairs
    ({**H.LLAMA31_8B, "model_type": "glm4v_moe_text"}, "split_half", "model_type"),
    ({**H.LLAMA31_8B, "model_type": "qwen2_vl_text"}, "split_half", "model_type"),
    ({**H.LLAMA31_8B, "model_type": "qwen3_vl_text"}, "split_half", "model_type"),
    ({"model_type": "aya_vision", "text_config": {k: v for k, v in H.COHERE2_7B.items() if k != "model_type"}},
     "interleaved", "model_type"),  # text_config without model_type: AyaVisionConfig builds cohere2
    ({"model_type": "kimi_k25", "text_config": {k: v for k, v in H.DEEPSEEK_V3.items() if k != "model_type"}},
     "interleaved", "model_type"),
    ({**H.LLAMA31_8B, "model_type": "some_new_model"}, "split_half", "default"),
    ({k: v for k, v in H.LLAMA31_8B.items() if k != "model_type"}, "split_half", "default"),
]


@pytest.mark.parametrize("config, layout, source", LAYOUTS, ids=[f"layout{i}" for i in range(len(LAYOUTS))])
def test_layout_comes_from_the_config(config, layout, source):
    assert layout_from_hf_config(config) == (layout, source)
    per_type = {"layer_type": "full_attention"} if config.get("model_type") == "gemma3" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rope = pyrope.Rope.from_hf_config(config, **per_type)
    assert (rope.layout, rope.layout_source) == (layout, source)
    assert rope.contract()["layout_source"] == source


def test_explicit_layout_wins_over_the_family_but_not_over_rope_interleave():
    rope = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3, layout="split_half")  # weights converted to split-half
    assert (rope.layout, rope.layout_source) == ("split_half", "argument")
    rope = pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "rope_interleave": True}, layout="interleaved")
    assert (rope.layout, rope.layout_source) == ("interleaved", "argument")
    with pytest.raises(ValueError, match="rope_interleave"):
        pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "rope_interleave": True}, layout="split_half")
    with pytest.raises(ValueError, match="rope_interleave"):
        pyrope.Rope.from_hf_config({**H.LLAMA31_8B, "rope_interleave": False}, layout="interleaved")
    with pytest.raises(ValueError, match="rope_interleave"):
        layout_from_hf_config({**H.LLAMA31_8B, "rope_interleave": "yes"})
    with pytest.raises(ValueError, match="layout"):
        pyrope.Rope.from_hf_config(H.LLAMA31_8B, layout="diagonal")


def test_layout_source_stays_out_of_the_fingerprint():
    by_table = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3)
    by_flag = pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "rope_interleave": True})
    by_argument = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3, layout="interleaved")
    assert {by_table.layout_source, by_flag.layout_source, by_argument.layout_source} == \
        {"model_type", "rope_interleave", "argument"}
    assert by_table.fingerprint == by_flag.fingerprint == by_argument.fingerprint
    assert "layout_source" not in pyrope.contract.canonical_json(by_table.contract())


# --------------------------------------------------------------------------- the keys real configs use


def test_gpt_neox_spellings():
    args = rope_arguments_from_hf_config(H.PYTHIA_1B)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (256, 64, 10000.0)
    bare = {k: v for k, v in H.PYTHIA_1B.items() if k not in ("rotary_pct", "rotary_emb_base")}
    assert rope_arguments_from_hf_config(bare)["rotary_dim"] == 64  # rotary_pct 0.25 when absent
    assert rope_arguments_from_hf_config({**bare, "rotary_emb_base": 500000})["base"] == 500000.0
    with pytest.raises(ValueError, match="rotary_emb_base"):
        rope_arguments_from_hf_config({**H.PYTHIA_1B, "rope_theta": 500000.0})
    # another family's missing rotary_pct is 1
    assert rope_arguments_from_hf_config({**bare, "model_type": "gpt_neox_japanese"})["rotary_dim"] == 256


def test_gptj_spellings(ref):
    args, r = resolved(H.GPTJ_6B)
    assert (args["head_dim"], args["rotary_dim"], args["base"]) == (256, 64, 10000.0)
    check(r, ref.default(64, 10000.0))
    bare = {k: v for k, v in H.GPTJ_6B.items() if k != "rotary_dim"}
    assert rope_arguments_from_hf_config(bare)["rotary_dim"] == 64  # GPTJConfig's default
    assert rope_arguments_from_hf_config({**bare, "model_type": "codegen", "rotary_dim": 32})["rotary_dim"] == 32
    for bad in (None, 63, 512, 64.0):
        with pytest.raises(ValueError, match="rotary_dim"):
            rope_arguments_from_hf_config({**H.GPTJ_6B, "rotary_dim": bad})
    with pytest.raises(ValueError, match="n_embd"):
        rope_arguments_from_hf_config({**H.GPTJ_6B, "hidden_size": 2048})


def test_glm_partial_rotary_factor_defaults_to_half():
    bare = {k: v for k, v in H.GLM4_9B.items() if k != "partial_rotary_factor"}
    assert rope_arguments_from_hf_config(bare)["rotary_dim"] == 64
    for model_type in ("glm4", "glm4_moe"):
        assert rope_arguments_from_hf_config({**bare, "model_type": model_type})["rotary_dim"] == 64
    assert rope_arguments_from_hf_config({**bare, "model_type": "llama"})["rotary_dim"] == 128
    assert rope_arguments_from_hf_config({**bare, "partial_rotary_factor": 1.0})["rotary_dim"] == 128


def test_family_default_base():
    bare = {k: v for k, v in H.COHERE2_7B.items() if k != "rope_theta"}
    assert rope_arguments_from_hf_config(bare)["base"] == 10000.0
    assert rope_arguments_from_hf_config({**bare, "model_type": "cohere"})["base"] == 500000.0
    assert rope_arguments_from_hf_config({**bare, "model_type": "gpt_oss"})["base"] == 150000.0
    assert rope_arguments_from_hf_config({**bare, "model_type": "smollm3"})["base"] == 2000000.0
    assert rope_arguments_from_hf_config(bare, default_base=1e6)["base"] == 1e6


def test_deepseek_v3_is_the_rope_of_the_rope_slice(ref):
    rope = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3)
    assert (rope.head_dim, rope.rotary_dim, rope.layout) == (64, 64, "interleaved")
    check(resolved(H.DEEPSEEK_V3)[1], ref.yarn(64, 10000.0, 40.0, 4096, mscale=1.0, mscale_all_dim=1.0))
    assert rope.attention_factor == 1.0
    m = 0.1 * math.log(40) + 1
    assert rope.softmax_scale_factor == pytest.approx(m * m, rel=1e-15)
    assert float.fromhex(rope.contract()["softmax_scale_factor"]) == rope.softmax_scale_factor
    # a head_dim key (vLLM-era configs wrote kv_lora_rank + qk_rope_head_dim) does not change the slice
    assert pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "head_dim": 576}).fingerprint == rope.fingerprint


def test_deepseek_v2_lite_softmax_factor():
    rope = pyrope.Rope.from_hf_config(H.DEEPSEEK_V2_LITE)
    m = 0.1 * 0.707 * math.log(40) + 1
    assert rope.softmax_scale_factor == pytest.approx(m * m, rel=1e-15)
    assert rope.attention_factor == pytest.approx(1.0, abs=1e-15)


def test_softmax_factor_is_one_elsewhere():
    plain = copy.deepcopy(H.DEEPSEEK_V3)
    plain["rope_scaling"] = None
    assert pyrope.Rope.from_hf_config(plain).softmax_scale_factor == 1.0  # default rope: no mscale
    no_all_dim = copy.deepcopy(H.DEEPSEEK_V3)
    no_all_dim["rope_scaling"].pop("mscale_all_dim")
    assert pyrope.Rope.from_hf_config(no_all_dim).softmax_scale_factor == 1.0
    # the same YaRN block on a family whose attention does not scale its softmax
    other = {**H.DEEPSEEK_V3, "model_type": "llama", "head_dim": 64}
    other.pop("qk_rope_head_dim")
    assert pyrope.Rope.from_hf_config(other).softmax_scale_factor == 1.0
    for config in (H.LLAMA31_8B, H.QWEN25_7B_YARN, H.GPT_OSS_20B, H.PHI3_128K):
        assert pyrope.Rope.from_hf_config(config).softmax_scale_factor == 1.0


def test_softmax_factor_is_in_the_fingerprint_when_not_one():
    rope = pyrope.Rope.from_hf_config(H.DEEPSEEK_V3)
    contract = rope.contract()
    assert '"softmax_scale_factor"' in pyrope.contract.canonical_json(contract)
    without = {**contract, "softmax_scale_factor": (1.0).hex()}
    assert pyrope.contract.fingerprint(without) != rope.fingerprint
    back = pyrope.Rope.from_contract(json.loads(json.dumps(contract)))
    assert (back.softmax_scale_factor, back.layout_source) == (rope.softmax_scale_factor, "model_type")
    assert back.fingerprint == rope.fingerprint and back.contract() == contract


def test_mla_partial_rotary_factor_may_only_name_the_slice():
    mistral4_style = {**H.DEEPSEEK_V3, "qk_nope_head_dim": 64, "partial_rotary_factor": 0.5}
    assert rope_arguments_from_hf_config(mistral4_style)["rotary_dim"] == 64
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        rope_arguments_from_hf_config({**H.DEEPSEEK_V3, "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        rope_arguments_from_hf_config({**H.DEEPSEEK_V3, "qk_rope_head_dim": 63})


def test_llama4_equal_factors_warn_and_give_finite_frequencies(ref):
    text = H.LLAMA4_SCOUT["text_config"]
    with pytest.warns(UserWarning, match="high_freq_factor"):
        rope = pyrope.Rope.from_hf_config(H.LLAMA4_SCOUT)
    assert np.isfinite(rope.inv_freq).all()
    theta = np.array(ref.default(128, 500000.0)[0])
    wavelength = 2 * np.pi / theta
    expected = np.where(wavelength > 8192, theta / 16, theta)  # no band in between
    np.testing.assert_allclose(rope.inv_freq, expected, rtol=1e-15)
    assert 0 < np.count_nonzero(wavelength > 8192) < 64  # both sides present
    assert text["rope_scaling"]["low_freq_factor"] == text["rope_scaling"]["high_freq_factor"]


def test_dynamic_ntk_with_alpha(ref):
    args, r = resolved(H.HUNYUAN_7B)
    scaled = ref.ntk_base(128, 10000.0, 1000.0)
    check(r, ref.default(128, scaled))
    assert r.params == {"base": 10000.0, "alpha": 1000.0, "scaled_base": scaled}
    assert r.attention_factor == 1.0
    # fixed: the length does not move it, and no window is needed
    assert resolved(H.HUNYUAN_7B, seq_len=100000)[1] == r
    no_window = {k: v for k, v in H.HUNYUAN_7B.items() if k != "max_position_embeddings"}
    assert resolved(no_window)[1] == r
    # the keys HunYuan carries are accepted only beside alpha; an unknown key still raises
    without_alpha = copy.deepcopy(H.HUNYUAN_7B)
    del without_alpha["rope_scaling"]["alpha"]
    with pytest.raises(ValueError, match="beta_fast"):
        rope_arguments_from_hf_config(without_alpha)
    unknown = copy.deepcopy(H.HUNYUAN_7B)
    unknown["rope_scaling"]["gamma"] = 2.0
    with pytest.raises(ValueError, match="gamma"):
        rope_arguments_from_hf_config(unknown)
    with pytest.raises(ValueError, match="alpha"):
        rope_arguments_from_hf_config({**H.HUNYUAN_7B, "rope_scaling": {"type": "dynamic", "alpha": -1.0}})


def test_unknown_key_still_raises():
    for config in (H.DEEPSEEK_V3, H.LLAMA4_SCOUT["text_config"], H.GEMMA3_4B["text_config"]):
        bad = copy.deepcopy(config)
        bad["rope_scaling"]["surprise"] = 1
        with pytest.raises(ValueError, match="surprise"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rope_arguments_from_hf_config(bad, layer_type="full_attention" if "rope_local_base_freq" in bad
                                              else None)


def test_gemma3_transformers4_keys(ref):
    full = pyrope.Rope.from_hf_config(H.GEMMA3_4B, layer_type="full_attention")
    sliding = pyrope.Rope.from_hf_config(H.GEMMA3_4B, layer_type="sliding_attention")
    check(resolved(H.GEMMA3_4B, layer_type="full_attention")[1], ref.linear(256, 1e6, 8.0))
    check(resolved(H.GEMMA3_4B, layer_type="sliding_attention")[1], ref.default(256, 10000.0))
    assert full.layout == sliding.layout == "split_half"
    with pytest.raises(ValueError, match="layer_type"):
        pyrope.Rope.from_hf_config(H.GEMMA3_4B)


def test_refused_families():
    with pytest.raises(ValueError, match="deepseek_v4"):
        pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "model_type": "deepseek_v4"})
    with pytest.raises(ValueError, match="no rotary embedding"):
        pyrope.Rope.from_hf_config({**H.DEEPSEEK_V3, "model_type": "kimi_linear"})
    assert layer_ropes({**H.DEEPSEEK_V3, "model_type": "kimi_linear"}) == [None] * 61


# --------------------------------------------------------------------------- per-layer ropes


def test_llama4_layers():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ropes = layer_ropes(H.LLAMA4_SCOUT)
        explicit = layer_ropes({**H.LLAMA4_SCOUT["text_config"], "num_hidden_layers": 4,
                                "no_rope_layers": [1, 0, 0, 1]})
    assert len(ropes) == 48
    assert [r is None for r in ropes] == [(i + 1) % 4 == 0 for i in range(48)]  # [] = every 4th NoPE
    with_rope = [r for r in ropes if r is not None]
    assert all(r is with_rope[0] for r in with_rope)  # one shared Rope
    assert with_rope[0].layout == "interleaved"
    assert [r is None for r in explicit] == [False, True, True, False]  # 1 = rope, 0 = NoPE


def test_smollm3_layers():
    ropes = layer_ropes(H.SMOLLM3_3B)
    assert [r is None for r in ropes] == [(i + 1) % 4 == 0 for i in range(36)]
    bare = {k: v for k, v in H.SMOLLM3_3B.items() if k != "no_rope_layers"}
    assert [r is None for r in layer_ropes(bare)] == [(i + 1) % 4 == 0 for i in range(36)]
    with pytest.raises(ValueError, match="no_rope_layers"):
        layer_ropes({**H.SMOLLM3_3B, "no_rope_layers": []})  # transformers cannot index it
    with pytest.raises(ValueError, match="no_rope_layers"):
        layer_ropes({**H.SMOLLM3_3B, "no_rope_layers": [1] * 35})
    with pytest.raises(ValueError, match="no_rope_layers"):
        layer_ropes({**H.SMOLLM3_3B, "no_rope_layers": [2] * 36})


def test_cohere2_layers():
    ropes = layer_ropes(H.COHERE2_7B)
    assert [r is None for r in ropes] == [(i + 1) % 4 == 0 for i in range(32)]  # full attention: no rope
    assert all(r.layout == "interleaved" for r in ropes if r is not None)
    assert layer_ropes({**H.COHERE2_7B, "sliding_window": None}) == [None] * 32


def test_gemma3_layers(ref):
    ropes = layer_ropes(H.GEMMA3_4B)
    assert len(ropes) == 34
    full = [i for i in range(34) if (i + 1) % 6 == 0]
    full_rope = pyrope.Rope.from_hf_config(H.GEMMA3_4B, layer_type="full_attention")
    sliding_rope = pyrope.Rope.from_hf_config(H.GEMMA3_4B, layer_type="sliding_attention")
    for i, rope in enumerate(ropes):
        assert rope.fingerprint == (full_rope if i in full else sliding_rope).fingerprint
    assert ropes[0] is ropes[1] and ropes[5] is ropes[11]


def test_gemma4_layers():
    text = {"model_type": "gemma4_text", "hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256,
            "global_head_dim": 512, "num_hidden_layers": 6}
    ropes = layer_ropes(text)
    assert [r.head_dim for r in ropes] == [256] * 5 + [512]
    assert ropes[5].contract()["rule"] == "proportional" and ropes[5].rotary_dim == 512
    assert np.count_nonzero(ropes[5].inv_freq) == 64  # a quarter of 512 rotates
    with pytest.warns(UserWarning, match="full attention"):
        forced = layer_ropes({**text, "layer_types": ["sliding_attention"] * 6})
    assert forced[5].head_dim == 512
    # one layer type at a time: the same ropes
    assert rope_arguments_from_hf_config(text, layer_type="full_attention")["head_dim"] == 512
    assert pyrope.Rope.from_hf_config(text, layer_type="full_attention").fingerprint == ropes[5].fingerprint
    assert pyrope.Rope.from_hf_config(text, layer_type="sliding_attention").fingerprint == ropes[0].fingerprint


def test_gpt_oss_layers_share_one_rope():
    ropes = layer_ropes({**H.GPT_OSS_20B, "num_hidden_layers": 4,
                         "layer_types": ["sliding_attention", "full_attention"] * 2})
    assert all(r is ropes[0] for r in ropes)
    assert ropes[0].fingerprint == pyrope.Rope.from_hf_config(H.GPT_OSS_20B).fingerprint


def test_null_rope_parameters_entry_is_a_layer_without_rope():
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
              "layer_types": ["sliding_attention", "full_attention"] * 2,
              "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": None}}
    ropes = layer_ropes(config)
    assert [r is None for r in ropes] == [False, True, False, True]
    with pytest.raises(ValueError, match="no rotary embedding"):
        pyrope.Rope.from_hf_config(config, layer_type="full_attention")
    with pytest.raises(ValueError, match="chunked_attention"):
        layer_ropes({**config, "layer_types": ["chunked_attention"] * 4})
    with pytest.raises(ValueError, match="layer_types"):
        layer_ropes({**config, "layer_types": ["sliding_attention"] * 3})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        layer_ropes({k: v for k, v in H.LLAMA31_8B.items()})


def test_layer_ropes_takes_layout_and_seq_len():
    ropes = layer_ropes({**H.PHI3_128K, "num_hidden_layers": 2}, layout="interleaved", seq_len=9000)
    expected = pyrope.Rope.from_hf_config(H.PHI3_128K, layout="interleaved", seq_len=9000)
    assert [r.fingerprint for r in ropes] == [expected.fingerprint] * 2
    with pytest.raises(ValueError, match="rope_interleave"):
        layer_ropes({**H.DEEPSEEK_V3, "rope_interleave": True}, layout="split_half")


# --------------------------------------------------------------------------- hostile files, windows, layer types

from pyrope import errors  # noqa: E402


@pytest.mark.parametrize("text, needle", [
    ('{"head_dim": 64, "head_dim": 128}', "'head_dim' twice"),
    ('{"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": 2, "factor": 8}}', "'factor' twice"),
    ("[" * 5000 + "]" * 5000, "too deeply"),
    ('{"head_dim": ' + "9" * 4301 + "}", "4300 digits"),
    ('{"head_dim": 64,}', "not valid JSON"),
], ids=["key twice", "nested key twice", "nested 5000 deep", "4301 digits", "trailing comma"])
def test_hostile_json_is_refused_naming_the_file_and_key(text, needle, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(errors.ValueError) as info:
        load_hf_config(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize("key, value", [("rope_theta", 10**400), ("hidden_size", 10**400), ("head_dim", 2**40),
                                        ("head_dim", 100_000_000), ("qk_rope_head_dim", 2**40)],
                         ids=["rope_theta 10**400", "hidden_size 10**400", "head_dim 2**40", "head_dim 1e8",
                              "qk_rope_head_dim 2**40"])
def test_huge_numbers_in_a_config_are_refused_naming_the_key(key, value):
    config = {**H.LLAMA2_7B, key: value}
    with pytest.raises(errors.ValueError) as info:
        pyrope.Rope.from_hf_config(config)
    assert key in str(info.value)
    assert len(str(info.value)) < 300


def test_a_default_rule_config_carries_its_window_without_changing_the_fingerprint():
    rope = pyrope.Rope.from_hf_config(H.LLAMA2_7B)
    contract = rope.contract()
    assert (contract["original_window"], contract["target_window"]) == (4096, 4096)
    hand_built = pyrope.Rope(128, layout="split_half")  # the same position function, no window
    assert hand_built.contract()["original_window"] is None
    assert rope.fingerprint == hand_built.fingerprint == expected_fingerprint(hand_built)
    back = pyrope.Rope.from_contract(json.loads(json.dumps(contract)))
    assert back.contract() == contract and back.fingerprint == rope.fingerprint
    # a rule with windows of its own keeps them, and the config's max_position_embeddings is not forced on it
    yarn = pyrope.Rope.from_hf_config(H.QWEN25_7B_YARN).contract()
    assert (yarn["original_window"], yarn["target_window"]) == (32768, 131072)


def test_rope_layer_types():
    from pyrope.config import rope_layer_types
    assert rope_layer_types(H.GEMMA3_4B) == ["full_attention", "sliding_attention"]
    assert rope_layer_types(H.LLAMA31_8B) is None
    for layer_type in rope_layer_types(H.GEMMA3_4B):
        assert pyrope.Rope.from_hf_config(H.GEMMA3_4B, layer_type=layer_type).head_dim == 256
