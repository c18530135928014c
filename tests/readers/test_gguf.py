"""Rope.from_gguf: small GGUF files written with the gguf package's own writer
give the Rope the equivalent transformers config gives (inv_freq bit for bit
where the arithmetic is the same), with the layout llama.cpp runs the
architecture with; broken files raise errors naming the key."""
import copy
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import hf_configs as H
import pyrope
from pyrope import scaling as S

ROOT = pathlib.Path(__file__).resolve().parents[2]


def write(tmp_path, arch, kv=(), tensors=(), name="model.gguf"):
    """A GGUF file holding ``kv`` (``{arch}`` in a key is the architecture; the
    value's Python type picks the GGUF type) and float32 ``tensors``."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / name
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in dict(kv).items():
        key = key.format(arch=arch)
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, list(value))
    for tensor_name, values in dict(tensors).items():
        w.add_tensor(tensor_name, np.asarray(values, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def f32(values):
    """What a GGUF float32 holds of each value."""
    return [float(np.float32(v)) for v in values]


def assert_same(a, b):
    """Same position function: layout, sizes, inv_freq bit for bit, attention factor."""
    assert (a.layout, a.head_dim, a.rotary_dim) == (b.layout, b.head_dim, b.rotary_dim)
    assert a.inv_freq.tobytes() == b.inv_freq.tobytes()
    assert a.attention_factor == b.attention_factor


# --------------------------------------------------------------------------- layouts and plain RoPE


def test_llama_is_interleaved_as_stored_and_matches_its_hf_config(tmp_path):
    # Llama 2 7B as the converter writes it: no freq_base key (llama.cpp's 10000, transformers' too)
    path = write(tmp_path, "llama", {"{arch}.context_length": 4096, "{arch}.embedding_length": 4096,
                                     "{arch}.block_count": 32, "{arch}.attention.head_count": 32,
                                     "{arch}.rope.dimension_count": 128})
    rope = pyrope.Rope.from_gguf(path)
    # the converter permuted q/k so that llama.cpp's NORM rope (adjacent pairs) applies
    assert rope.layout == "interleaved"
    hf = pyrope.Rope.from_hf_config(H.LLAMA2_7B, layout="interleaved")
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint
    assert pyrope.Rope.from_gguf(str(path), layout="split_half").layout == "split_half"   # override


@pytest.mark.parametrize("arch, kv, config", [
    # Qwen2.5 7B: key_length absent, head = 3584 / 28
    ("qwen2", {"{arch}.embedding_length": 3584, "{arch}.attention.head_count": 28,
               "{arch}.rope.freq_base": 1000000.0},
     {"hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1000000.0}),
    # phi-2: 32 of 80 coordinates rotate
    ("phi2", {"{arch}.embedding_length": 2560, "{arch}.attention.head_count": 32,
              "{arch}.rope.dimension_count": 32, "{arch}.rope.freq_base": 10000.0}, H.PHI2),
    # StableLM 2: 16 of 64
    ("stablelm", {"{arch}.embedding_length": 2048, "{arch}.attention.head_count": 32,
                  "{arch}.rope.dimension_count": 16}, H.STABLELM2_1_6B),
    # GPT-NeoX style, head size given directly
    ("gptneox", {"{arch}.attention.key_length": 128, "{arch}.rope.dimension_count": 32},
     {"head_dim": 128, "rotary_pct": 0.25}),
    # phi3 (Phi-3-mini 4k): plain RoPE, NEOX pairing
    ("phi3", {"{arch}.embedding_length": 3072, "{arch}.attention.head_count": 32},
     {"hidden_size": 3072, "num_attention_heads": 32}),
])
def test_neox_architectures_are_split_half(tmp_path, arch, kv, config):
    rope = pyrope.Rope.from_gguf(write(tmp_path, arch, kv))
    assert rope.layout == "split_half"
    hf = pyrope.Rope.from_hf_config(config)
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint


def test_layout_table_names_its_source_and_both_pairings():
    import pyrope.gguf as G
    source = (ROOT / "pyrope" / "gguf.py").read_text()
    assert "llama_model_rope_type()" in source and "src/llama-model.cpp" in source
    assert G.ROPE_TYPES["llama"] == "norm" and G.LAYOUTS["norm"] == "interleaved"
    assert G.ROPE_TYPES["qwen2"] == G.ROPE_TYPES["gpt-oss"] == G.ROPE_TYPES["gemma3"] == "neox"
    assert G.LAYOUTS["neox"] == "split_half"
    assert G.ROPE_TYPES["qwen2vl"] == "mrope" and G.ROPE_TYPES["qwen3vl"] == "imrope"


def test_glm4_is_norm_without_sections(tmp_path):
    # glm4 runs MROPE when the file has sections, NORM otherwise (llama.cpp's use_mrope())
    rope = pyrope.Rope.from_gguf(write(tmp_path, "glm4", {"{arch}.attention.key_length": 128,
                                                          "{arch}.rope.dimension_count": 64}))
    assert (rope.layout, rope.head_dim, rope.rotary_dim) == ("interleaved", 128, 64)


def test_mla_head_is_the_roped_part(tmp_path):
    # DeepSeek-V2-Lite: 192-wide q/k heads of which llama.cpp ropes the separate 64-wide q_pe/k_pe
    rope = pyrope.Rope.from_gguf(write(tmp_path, "deepseek2", {
        "{arch}.attention.key_length": 192, "{arch}.attention.kv_lora_rank": 512,
        "{arch}.rope.dimension_count": 64}))
    assert (rope.layout, rope.head_dim, rope.rotary_dim) == ("interleaved", 64, 64)


# --------------------------------------------------------------------------- scaling rules

LLAMA_8B = {"{arch}.context_length": 8192, "{arch}.embedding_length": 4096, "{arch}.attention.head_count": 32}


def test_linear(tmp_path):
    path = write(tmp_path, "llama", {**LLAMA_8B, "{arch}.rope.scaling.type": "linear",
                                     "{arch}.rope.scaling.factor": 4.0})
    rope = pyrope.Rope.from_gguf(path)
    hf = pyrope.Rope.from_hf_config({"hidden_size": 4096, "num_attention_heads": 32,
                                     "rope_scaling": {"type": "linear", "factor": 4.0}}, layout="interleaved")
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint
    # llama.cpp reads a missing type as linear; 'none' never scales, whatever the factor
    no_type = write(tmp_path, "llama", {**LLAMA_8B, "{arch}.rope.scaling.factor": 4.0}, name="b.gguf")
    assert pyrope.Rope.from_gguf(no_type).fingerprint == hf.fingerprint
    none = write(tmp_path, "llama", {**LLAMA_8B, "{arch}.rope.scaling.type": "none",
                                     "{arch}.rope.scaling.factor": 4.0}, name="c.gguf")
    assert pyrope.Rope.from_gguf(none).fingerprint == pyrope.Rope(128, layout="interleaved").fingerprint


def qwen25_yarn(**extra):
    """Qwen2.5 7B with the YaRN block of its model card, as the converter writes it."""
    return {"{arch}.context_length": 32768, "{arch}.embedding_length": 3584, "{arch}.attention.head_count": 28,
            "{arch}.rope.freq_base": 1000000.0, "{arch}.rope.scaling.type": "yarn",
            "{arch}.rope.scaling.factor": 4.0, "{arch}.rope.scaling.original_context_length": 32768, **extra}


def test_yarn(tmp_path):
    rope = pyrope.Rope.from_gguf(write(tmp_path, "qwen2", qwen25_yarn()))
    hf = pyrope.Rope.from_hf_config(H.QWEN25_7B_YARN)
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint
    assert rope.attention_factor == 0.1 * math.log(4.0) + 1.0


def test_yarn_attention_factors(tmp_path):
    def with_scaling(**rope_scaling):
        cfg = copy.deepcopy(H.QWEN25_7B_YARN)
        cfg["rope_scaling"].update(rope_scaling)
        return pyrope.Rope.from_hf_config(cfg)

    # yarn_attn_factor: transformers' attention_factor, which the converter copies there
    rope = pyrope.Rope.from_gguf(write(tmp_path, "qwen2", qwen25_yarn(
        **{"{arch}.rope.scaling.yarn_attn_factor": 1.25}), name="a.gguf"))
    hf = with_scaling(attention_factor=1.25)
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint and rope.attention_factor == 1.25
    # yarn_log_multiplier: mscale_all_dim, with mscale 1 (llama-context.cpp)
    rope = pyrope.Rope.from_gguf(write(tmp_path, "qwen2", qwen25_yarn(
        **{"{arch}.rope.scaling.yarn_log_multiplier": 0.5}), name="b.gguf"))
    hf = with_scaling(mscale=1.0, mscale_all_dim=0.5)
    assert_same(rope, hf)
    assert rope.attention_factor == (0.1 * math.log(4) + 1) / (0.05 * math.log(4) + 1)
    # rope.scaling.attn_factor multiplies cos and sin on top of the rule, as llama.cpp applies it
    rope = pyrope.Rope.from_gguf(write(tmp_path, "qwen2", qwen25_yarn(
        **{"{arch}.rope.scaling.attn_factor": 2.0}), name="c.gguf"))
    plain = pyrope.Rope.from_hf_config(H.QWEN25_7B_YARN)
    assert rope.inv_freq.tobytes() == plain.inv_freq.tobytes()
    assert rope.attention_factor == 2.0 * plain.attention_factor
    assert rope.fingerprint == with_scaling(attention_factor=2.0 * plain.attention_factor).fingerprint
    # betas as written
    rope = pyrope.Rope.from_gguf(write(tmp_path, "qwen2", qwen25_yarn(
        **{"{arch}.rope.scaling.yarn_beta_fast": 16.0, "{arch}.rope.scaling.yarn_beta_slow": 2.0}), name="d.gguf"))
    assert rope.fingerprint == with_scaling(beta_fast=16.0, beta_slow=2.0).fingerprint


def test_yarn_ramp_is_truncated_as_ggml_computes_it(tmp_path):
    # gpt-oss's config says truncate: false; ggml's corr dims floor/ceil the ramp bounds
    path = write(tmp_path, "gpt-oss", {
        "{arch}.context_length": 131072, "{arch}.attention.key_length": 64, "{arch}.rope.freq_base": 150000.0,
        "{arch}.rope.scaling.type": "yarn", "{arch}.rope.scaling.factor": 32.0,
        "{arch}.rope.scaling.original_context_length": 4096, "{arch}.rope.scaling.yarn_beta_fast": 32.0,
        "{arch}.rope.scaling.yarn_beta_slow": 1.0})
    rope = pyrope.Rope.from_gguf(path)
    truncated = copy.deepcopy(H.GPT_OSS_20B)
    truncated["rope_scaling"]["truncate"] = True
    assert rope.layout == "split_half"
    assert rope.fingerprint == pyrope.Rope.from_hf_config(truncated).fingerprint
    assert rope.inv_freq.tobytes() != pyrope.Rope.from_hf_config(H.GPT_OSS_20B).inv_freq.tobytes()


def phi3_128k(tmp_path, **extra):
    attn = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))   # what the converter stores
    kv = {"{arch}.context_length": 131072, "{arch}.embedding_length": 3072, "{arch}.attention.head_count": 32,
          "{arch}.rope.dimension_count": 96, "{arch}.rope.freq_base": 10000.0,
          "{arch}.rope.scaling.type": "longrope", "{arch}.rope.scaling.original_context_length": 4096,
          "{arch}.rope.scaling.attn_factor": attn, **extra}
    return write(tmp_path, "phi3", kv, {"rope_factors_long.weight": H.PHI3_LONG_FACTOR,
                                        "rope_factors_short.weight": H.PHI3_SHORT_FACTOR})


@pytest.mark.parametrize("seq_len", [None, 4096, 4097, 100000])
def test_longrope(tmp_path, seq_len):
    rope = pyrope.Rope.from_gguf(phi3_128k(tmp_path), seq_len=seq_len)
    # the HF config with the factors a float32 tensor holds (the long set is float32 already)
    cfg = copy.deepcopy(H.PHI3_128K)
    cfg["rope_scaling"]["short_factor"] = f32(H.PHI3_SHORT_FACTOR)
    assert cfg["rope_scaling"]["long_factor"] == f32(H.PHI3_LONG_FACTOR)
    hf = pyrope.Rope.from_hf_config(cfg, seq_len=seq_len)
    assert rope.layout == "split_half" and (rope.head_dim, rope.rotary_dim) == (96, 96)
    assert rope.inv_freq.tobytes() == hf.inv_freq.tobytes()
    assert rope.attention_factor == pytest.approx(hf.attention_factor, rel=2 ** -24)   # stored as float32
    assert rope.contract()["params"]["variant"] == ("long" if seq_len is not None and seq_len > 4096 else "short")


def test_longrope_tensors_without_the_type_key(tmp_path):
    # llama.cpp picks rope_factors_long/short whenever a phi3 file has them
    path = phi3_128k(tmp_path, **{"{arch}.rope.scaling.type": "none"})
    assert pyrope.Rope.from_gguf(path).fingerprint == pyrope.Rope.from_gguf(phi3_128k(tmp_path)).fingerprint


def llama3_divisors(config):
    """rope_freqs as llama.cpp's convert_hf_to_gguf.py bakes Llama 3.1's rule (float32 frequencies)."""
    s = config["rope_scaling"]
    dim = config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (np.float32(config["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    window = s["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < window / s["high_freq_factor"]:
            out.append(1.0)
        elif wavelen > window / s["low_freq_factor"]:
            out.append(s["factor"])
        else:
            smooth = (window / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return f32(out)


def test_rope_freqs_llama31(tmp_path):
    divisors = llama3_divisors(H.LLAMA31_8B)
    path = write(tmp_path, "llama", {"{arch}.context_length": 131072, "{arch}.embedding_length": 4096,
                                     "{arch}.attention.head_count": 32, "{arch}.rope.freq_base": 500000.0},
                 {"rope_freqs.weight": divisors})
    rope = pyrope.Rope.from_gguf(path)
    # the equivalent config: the same divisors as a freq_factors rule, bit for bit
    cfg = {k: v for k, v in H.LLAMA31_8B.items() if k != "rope_scaling"}
    cfg["rope_scaling"] = {"rope_type": "freq_factors", "factors": divisors}
    hf = pyrope.Rope.from_hf_config(cfg, layout="interleaved")
    assert_same(rope, hf)
    assert rope.fingerprint == hf.fingerprint
    # and Llama 3.1's own rule: exact where a pair is kept or divided by 8, float32 rounding in the band
    llama3 = pyrope.Rope.from_hf_config(H.LLAMA31_8B, layout="interleaved")
    exact = np.isin(divisors, (1.0, 8.0))
    assert exact.sum() > 40 and not exact.all()
    assert rope.inv_freq[exact].tobytes() == llama3.inv_freq[exact].tobytes()
    np.testing.assert_allclose(rope.inv_freq, llama3.inv_freq, rtol=3e-7, atol=0)
    assert rope.attention_factor == 1.0


# --------------------------------------------------------------------------- per layer


def test_sliding_window_layers_by_per_layer_pattern(tmp_path):
    path = write(tmp_path, "gemma3", {
        "{arch}.block_count": 3, "{arch}.attention.key_length": 256, "{arch}.rope.freq_base": 1000000.0,
        "{arch}.rope.freq_base_swa": 10000.0, "{arch}.rope.scaling.type": "linear",
        "{arch}.rope.scaling.factor": 8.0, "{arch}.attention.sliding_window_pattern": [True, True, False]})
    full = pyrope.Rope.from_gguf(path)
    assert full.base == 1000000.0 and full.layout == "split_half"
    assert pyrope.Rope.from_gguf(path, layer=2).fingerprint == full.fingerprint
    local = pyrope.Rope.from_gguf(path, layer=0)
    # the sliding layers' base, the shared scaling rule (llama.cpp's default)
    assert local.base == 10000.0
    assert local.fingerprint == pyrope.Rope(256, layout="split_half", base=10000.0, scaling=S.Linear(8.0)).fingerprint
    with pytest.raises(ValueError, match=r"layer must be in \[0, 3\) \(gemma3\.block_count\), got 3"):
        pyrope.Rope.from_gguf(path, layer=3)
    with pytest.raises(TypeError, match="layer must be an int"):
        pyrope.Rope.from_gguf(path, layer=1.0)


def test_sliding_layers_the_file_does_not_mark(tmp_path):
    # an integer period: which layers slide is decided in llama.cpp code, per architecture
    path = write(tmp_path, "cohere2", {
        "{arch}.block_count": 8, "{arch}.attention.key_length": 128, "{arch}.rope.freq_base": 50000.0,
        "{arch}.rope.freq_base_swa": 10000.0, "{arch}.attention.sliding_window_pattern": 4})
    assert pyrope.Rope.from_gguf(path).base == 50000.0
    with pytest.raises(ValueError, match="cohere2.attention.sliding_window_pattern"):
        pyrope.Rope.from_gguf(path, layer=1)


def test_per_layer_head_count(tmp_path):
    # OpenELM-style per-layer head counts and no key_length: the head size depends on the layer
    path = write(tmp_path, "openelm", {"{arch}.block_count": 3, "{arch}.embedding_length": 768,
                                       "{arch}.attention.head_count": [12, 6, 12]})
    assert pyrope.Rope.from_gguf(path, layer=1).head_dim == 128
    assert pyrope.Rope.from_gguf(path, layer=0).head_dim == 64
    with pytest.raises(ValueError, match=r"'openelm.attention.head_count' differs by layer .*pass layer="):
        pyrope.Rope.from_gguf(path)


# --------------------------------------------------------------------------- sections


def test_sections_give_the_hf_configs_multimodal_rope(tmp_path):
    kv = {"{arch}.attention.key_length": 128, "{arch}.rope.freq_base": 1000000.0,
          "{arch}.rope.dimension_sections": [16, 24, 24, 0]}                 # padded to 4, as converted
    qwen2 = pyrope.Rope.from_gguf(write(tmp_path, "qwen2vl", kv))
    want2 = pyrope.Rope(128, layout="split_half", base=1e6, mrope_section=[16, 24, 24])
    assert qwen2.fingerprint == want2.fingerprint and qwen2.mrope_interleaved is False
    kv["{arch}.rope.dimension_sections"] = [24, 20, 20, 0]
    qwen3 = pyrope.Rope.from_gguf(write(tmp_path, "qwen3vl", kv, name="b.gguf"))
    want3 = pyrope.Rope(128, layout="split_half", base=1e6, mrope_section=[24, 20, 20], mrope_interleaved=True)
    assert qwen3.fingerprint == want3.fingerprint
    kv["{arch}.rope.dimension_sections"] = [16, 24, 20, 0]                 # 60 pairs of 64
    with pytest.raises(ValueError, match="mrope_section"):
        pyrope.Rope.from_gguf(write(tmp_path, "qwen2vl", kv, name="d.gguf"))
    del kv["{arch}.rope.dimension_sections"]
    with pytest.raises(ValueError, match="missing key 'qwen2vl.rope.dimension_sections'"):
        pyrope.Rope.from_gguf(write(tmp_path, "qwen2vl", kv, name="c.gguf"))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("arch, kv, tensors, error, match", [
    ("llama", {"{arch}.context_length": 4096}, {}, ValueError,
     r"needs 'llama.attention.key_length', or 'llama.embedding_length' and 'llama.attention.head_count'"),
    ("llama", {**LLAMA_8B, "{arch}.rope.freq_base": "10000"}, {}, ValueError,
     r"'llama.rope.freq_base' must be a finite number, got '10000'"),
    ("llama", {**LLAMA_8B, "{arch}.rope.dimension_count": 0}, {}, ValueError,
     r"'llama.rope.dimension_count' must be an integer >= 1, got 0"),
    ("llama", {**LLAMA_8B, "{arch}.rope.dimension_count": 130}, {}, ValueError,
     r"'llama.rope.dimension_count' = 130 must be even and at most the head size 128"),
    ("llama", {**LLAMA_8B, "{arch}.rope.scaling.type": "dynamic"}, {}, ValueError,
     r"'llama.rope.scaling.type' must be one of none, linear, yarn, longrope, got 'dynamic'"),
    ("llama", {**LLAMA_8B, "{arch}.rope.scaling.factor": -2.0}, {}, ValueError,
     r"'llama.rope.scaling.factor' must be a number > 0"),
    ("llama", {**LLAMA_8B, "{arch}.rope.scaling.wibble": 1.0}, {}, ValueError,
     r"unknown rope key\(s\) \['llama.rope.scaling.wibble'\]"),
    ("llama", {**LLAMA_8B, "{arch}.rope.scaling.yarn_beta_fast": 32.0}, {}, ValueError,
     r"\['llama.rope.scaling.yarn_beta_fast'\] apply to 'llama.rope.scaling.type' = 'yarn' only"),
    ("qwen2", qwen25_yarn(**{"{arch}.rope.scaling.yarn_ext_factor": 0.5}), {}, ValueError,
     r"'qwen2.rope.scaling.yarn_ext_factor' = 0.5"),
    ("llama", LLAMA_8B, {"rope_freqs.weight": [1.0] * 63}, ValueError,
     r"tensor 'rope_freqs.weight' must have rotary_dim/2 = 64 entries .* got 63"),
    ("llama", {**LLAMA_8B, "{arch}.rope.scaling.type": "yarn", "{arch}.rope.scaling.factor": 4.0},
     {"rope_freqs.weight": [1.0] * 64}, ValueError, r"'rope_freqs.weight' with 'llama.rope.scaling.type' = 'yarn'"),
    ("phi3", {**LLAMA_8B, "{arch}.rope.scaling.type": "longrope"}, {}, ValueError,
     r"'phi3.rope.scaling.type' = 'longrope' needs the tensors 'rope_factors_long.weight'"),
    ("phi3", LLAMA_8B, {"rope_factors_long.weight": [1.0] * 64}, ValueError,
     r"tensor 'rope_factors_long.weight' without 'rope_factors_short.weight'"),
    ("hunyuan-dense", {**LLAMA_8B, "{arch}.rope.scaling.alpha": 1000.0}, {}, ValueError,
     r"'hunyuan-dense.rope.scaling.alpha'"),
    ("brand-new-arch", LLAMA_8B, {}, ValueError,
     r"'general.architecture' = 'brand-new-arch' is not in pyrope's table .* pass layout="),
    ("gpt2", LLAMA_8B, {}, ValueError, r"'general.architecture' = 'gpt2' uses no rotary embedding"),
])
def test_bad_files_name_the_key(tmp_path, arch, kv, tensors, error, match):
    path = write(tmp_path, arch, kv, tensors)
    with pytest.raises(error, match=match) as info:
        pyrope.Rope.from_gguf(path)
    assert isinstance(info.value, pyrope.RopeError)


def test_unknown_architecture_reads_with_an_explicit_layout(tmp_path):
    path = write(tmp_path, "brand-new-arch", {**LLAMA_8B, "{arch}.rope.freq_base": 500000.0})
    rope = pyrope.Rope.from_gguf(path, layout="split_half")
    assert (rope.layout, rope.head_dim, rope.base) == ("split_half", 128, 500000.0)


def test_not_a_gguf_file(tmp_path):
    pytest.importorskip("gguf")
    bad = tmp_path / "config.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="is not a readable GGUF file"):
        pyrope.Rope.from_gguf(bad)
    with pytest.raises(ValueError, match="no such file"):
        pyrope.Rope.from_gguf(tmp_path / "missing.gguf")


# --------------------------------------------------------------------------- the optional extra


def test_missing_extra_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)   # `import gguf` now raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install gguf, or in a pyrope checkout pip install '.[gguf]'")) as info:
        pyrope.Rope.from_gguf(tmp_path / "model.gguf")
    assert isinstance(info.value, pyrope.RopeError)


def test_import_pyrope_does_not_import_gguf():
    code = ("import sys, pyrope; a = 'gguf' in sys.modules; import pyrope.gguf; "
            "print(a, 'gguf' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_readme_gguf_example_runs():
    pytest.importorskip("gguf")
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### GGUF"):]
    section = section[:section.index("\n### ", 1)]   # up to the next heading
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    assert "from_gguf" in code
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["rope"].layout == "interleaved"
