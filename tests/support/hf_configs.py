"""Real model configs (the RoPE-relevant part of each config.json), as test fixtures.

Copied by hand from the published config.json files; keys that do not bear on
positions (vocab, norms, MLP sizes) are left out.
"""

# meta-llama/Llama-2-7b-hf: no rope_theta key at all (transformers defaults it to 10000)
LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "rope_scaling": None,
}

# meta-llama/Llama-3.1-8B: factor 8 although 131072 / 8192 = 16
LLAMA31_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}

# meta-llama/Llama-3.2-1B: explicit head_dim 64, factor 32
LLAMA32_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}

# Qwen/Qwen2.5-7B-Instruct with the YaRN block its model card tells users to add
QWEN25_7B_YARN = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
}

# openai/gpt-oss-20b: YaRN without truncation of the ramp bounds
GPT_OSS_20B = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_theta": 150000,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
}

# Phi-3 128k LongRoPE tables (48 pairs, head_dim 96) as shipped in
# microsoft/Phi-3-vision-128k-instruct's config.json, whose text model is
# Phi-3-mini-128k; written in the early "su" spelling that transformers'
# Phi3Config renames to "longrope".
PHI3_LONG_FACTOR = [
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
    1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
    1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
    3.68999981880188, 5.419999599456787, 5.489999771118164, 5.489999771118164,
    9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
    30.009998321533203, 32.35000228881836, 32.590003967285156, 35.56000518798828,
    39.95000457763672, 53.840003967285156, 56.20000457763672, 57.95000457763672,
    59.29000473022461, 59.77000427246094, 59.920005798339844, 61.190006256103516,
    61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
    63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922,
    64.760009765625, 64.80001068115234, 64.81001281738281, 64.81001281738281,
]
PHI3_SHORT_FACTOR = [
    1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
    1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
    1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996,
    2.3499999999999996, 2.3499999999999996, 2.3499999999999996, 2.3999999999999995,
    2.3999999999999995, 2.6499999999999986, 2.6999999999999984, 2.8999999999999977,
    2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997,
]
PHI3_128K = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {"long_factor": PHI3_LONG_FACTOR, "short_factor": PHI3_SHORT_FACTOR, "type": "su"},
}

# microsoft/phi-2: 40% of each 80-wide head rotates (32 coordinates)
PHI2 = {
    "model_type": "phi",
    "hidden_size": 2560,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "partial_rotary_factor": 0.4,
    "rope_theta": 10000.0,
    "rope_scaling": None,
}

# stabilityai/stablelm-2-1_6b: 25% of each 64-wide head rotates (16 coordinates)
STABLELM2_1_6B = {
    "model_type": "stablelm",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "max_position_embeddings": 4096,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000,
    "rope_scaling": None,
}

# Llama 3.1 8B as transformers 5 writes it: everything under rope_parameters
LLAMA31_8B_V5 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}

# Phi-2 as transformers 5 writes it: the rotated share moves into rope_parameters
PHI2_V5 = {
    "model_type": "phi",
    "hidden_size": 2560,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4},
}

# gpt-oss-20b as transformers 5 writes it
GPT_OSS_20B_V5 = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "original_max_position_embeddings": 4096,
        "truncate": False,
    },
}

# transformers 5 "proportional" rope: 25% of a 256-wide head rotates, exponents over 256
PROPORTIONAL_V5 = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_attention_heads": 8,
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "rope_parameters": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
}


# ---------------------------------------------------------------------------------------------------
# Families whose keys or layout differ from Llama's: the RoPE part of each model's config.json, with
# its keys spelled as that file spells them.  The numbers were written down from the published files
# without a copy at hand to diff against; what the tests rely on is the keys each carries (and lacks),
# checked against transformers' own config classes and modeling code in test_family_conformance.

# deepseek-ai/DeepSeek-V3: MLA; neither rope_interleave nor head_dim in the file (DeepseekV3Config
# defaults rope_interleave to true and sets head_dim = qk_rope_head_dim); YaRN with mscale
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "num_hidden_layers": 61,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
}

# deepseek-ai/DeepSeek-V2-Lite: MLA, complex-number rotation (adjacent pairs), mscale 0.707
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 27,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
}

# Llama 4 (multimodal): the text model under text_config, llama4_text; equal low/high factors in its
# llama3 rule, and no_rope_layers [] (every 4th layer without rope)
LLAMA4_SCOUT = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_hidden_layers": 48,
        "max_position_embeddings": 10485760,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 16.0,
            "high_freq_factor": 1.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "no_rope_layers": [],
        "attention_chunk_size": 8192,
    },
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408},
}

# EleutherAI/pythia-1b: GPT-NeoX spellings, a quarter of each 256-wide head rotates
PYTHIA_1B = {
    "model_type": "gpt_neox",
    "hidden_size": 2048,
    "num_attention_heads": 8,
    "num_hidden_layers": 16,
    "max_position_embeddings": 2048,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
}

# EleutherAI/gpt-j-6b: n_embd / n_head, 64 of 256 coordinates rotate, adjacent pairs; base 10000 fixed
GPTJ_6B = {
    "model_type": "gptj",
    "n_embd": 4096,
    "n_head": 16,
    "n_layer": 28,
    "n_positions": 2048,
    "rotary_dim": 64,
}

# THUDM/glm-4-9b-chat-hf: adjacent pairs, half of each head (partial_rotary_factor 0.5)
GLM4_9B = {
    "model_type": "glm",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "num_hidden_layers": 40,
    "max_position_embeddings": 131072,
    "partial_rotary_factor": 0.5,
    "rope_theta": 10000.0,
}

# CohereForAI/c4ai-command-r7b-12-2024: adjacent pairs; rope on the sliding-window layers only
COHERE2_7B = {
    "model_type": "cohere2",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 8192,
    "rope_theta": 50000,
    "sliding_window": 4096,
    "sliding_window_pattern": 4,
}

# HuggingFaceTB/SmolLM3-3B: every 4th layer without rope (no_rope_layers spelled out)
SMOLLM3_3B = {
    "model_type": "smollm3",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "num_hidden_layers": 36,
    "max_position_embeddings": 65536,
    "rope_theta": 5000000.0,
    "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(36)],
}

# google/gemma-3-4b-it's text model (transformers-4 keys): full layers rope_theta with linear 8,
# sliding layers rope_local_base_freq
GEMMA3_4B = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "num_hidden_layers": 34,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152},
}

# tencent/Hunyuan-7B-Instruct: "dynamic" with alpha, a fixed base change, and keys nothing reads
HUNYUAN_7B = {
    "model_type": "hunyuan_v1_dense",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 32,
    "max_position_embeddings": 32768,
    "rope_theta": 10000.0,
    "rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "type": "dynamic"},
}
