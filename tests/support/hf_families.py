"""Small configs of each model family, and how transformers rotates with them.

Each :class:`Family` names a small config (hub-style keys, as config.json
writes them), the transformers module whose text attention it runs, the
rotary-embedding class that attention gets its cos/sin (or complex
frequencies) from, the function the attention applies them with, and the
attention class (its ``forward`` must call that function: the test checks it,
so a family whose code changes is noticed).  :func:`rotate` runs exactly that
pair of calls on given q/k.

``kind`` says how the function is called:

* ``"std"``: ``apply(q, k, cos, sin)`` on ``[batch, heads, seq, dim]``; the
  partial-rotary families' apply slices the rotated prefix itself;
* ``"mla"``: the same on the ``qk_rope_head_dim`` slice only (what DeepSeek-style
  attention passes), with ``apply_rotary_pos_emb_interleave`` when the config
  says ``rope_interleave`` or the family always uses it.  That function returns
  the rotated pairs de-interleaved ``(even..., odd...)``: the same scores, with
  the coordinates permuted (see :func:`rotate`);
* ``"gptj"``: ``apply(x, sin, cos)`` on ``[batch, seq, heads, rotary_dim]``
  (GPT-J, CodeGen: the attention slices ``rotary_dim`` first);
* ``"complex"``: ``apply(q, k, freqs_cis)`` (Llama 4 on ``[batch, seq, heads,
  dim]``, DeepSeek V2 on ``[batch, heads, seq, dim]``);
* ``"single"``: ``apply(x, cos, sin, unsqueeze_dim=2)`` on ``[batch, seq, heads,
  dim]``, q and k separately (Gemma 4);
* ``"roformer"``: ``RoFormerSelfAttention.apply_rotary_position_embeddings(
  sinusoidal_pos, q, k)`` with the sinusoidal table of
  ``RoFormerSinusoidalPositionalEmbedding``.

``positions``: ``"1d"`` (position_ids ``[batch, seq]``) or ``"3d"`` (multimodal
ropes take ``[3, batch, seq]``; text tokens have three equal rows).
"""

import copy
import importlib
import inspect
from dataclasses import dataclass

import numpy as np

import pyrope

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
         "max_position_embeddings": 512, "vocab_size": 128}
MLA = {**SMALL, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "kv_lora_rank": 32,
       "q_lora_rank": 32}


@dataclass
class Family:
    model_type: str
    config: dict  # hub-style keys, model_type included
    module: str  # transformers.models.<module>.modeling_<module>
    rotary: str
    apply: str
    attention: str
    kind: str = "std"
    positions: str = "1d"
    layer_type: str | None = None  # which entry of a per-layer-type rope
    layout: str = "interleaved"  # what the family table says


def _cfg(model_type, base=SMALL, **kw):
    return {"model_type": model_type, **copy.deepcopy(base), **kw}


FAMILIES = [
    # ---- interleaved: adjacent pairs of HF weights
    Family("gptj", {"model_type": "gptj", "n_embd": 128, "n_head": 4, "n_layer": 2, "rotary_dim": 16,
                    "n_positions": 512, "vocab_size": 128},
           "gptj", "GPTJRotaryEmbedding", "apply_rotary_pos_emb", "GPTJAttention", kind="gptj"),
    Family("codegen", {"model_type": "codegen", "n_embd": 128, "n_head": 4, "n_layer": 2, "rotary_dim": 16,
                       "n_positions": 512, "n_ctx": 512, "vocab_size": 128},
           "codegen", "CodeGenRotaryEmbedding", "apply_rotary_pos_emb", "CodeGenAttention", kind="gptj"),
    # GLM: partial_rotary_factor absent, 0.5 by GlmConfig's default
    Family("glm", _cfg("glm", head_dim=32, rope_theta=10000.0),
           "glm", "GlmRotaryEmbedding", "apply_rotary_pos_emb", "GlmAttention"),
    Family("glm4", _cfg("glm4", head_dim=32, partial_rotary_factor=0.5, rope_theta=10000.0),
           "glm4", "Glm4RotaryEmbedding", "apply_rotary_pos_emb", "Glm4Attention"),
    Family("helium", _cfg("helium", head_dim=16),  # rope_theta absent: HeliumConfig's 100000
           "helium", "HeliumRotaryEmbedding", "apply_rotary_pos_emb", "HeliumAttention"),
    Family("ernie4_5", _cfg("ernie4_5", head_dim=16, rope_theta=500000.0),
           "ernie4_5", "Ernie4_5RotaryEmbedding", "apply_rotary_pos_emb", "Ernie4_5Attention"),
    Family("ernie4_5_moe", _cfg("ernie4_5_moe", rope_theta=500000.0, moe_num_experts=4, moe_k=2,
                                moe_intermediate_size=32, intermediate_size=64),
           "ernie4_5_moe", "Ernie4_5_MoeRotaryEmbedding", "apply_rotary_pos_emb", "Ernie4_5_MoeAttention"),
    Family("moonshine_streaming", _cfg("moonshine_streaming", head_dim=20, partial_rotary_factor=0.8),
           "moonshine_streaming", "MoonshineStreamingRotaryEmbedding", "apply_rotary_pos_emb",
           "MoonshineStreamingAttention"),
    Family("glm4v_text", _cfg("glm4v_text", partial_rotary_factor=0.5, rope_theta=10000.0,
                              rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2]}),
           "glm4v", "Glm4vTextRotaryEmbedding", "apply_rotary_pos_emb", "Glm4vTextAttention", positions="3d"),
    Family("glm_ocr_text", _cfg("glm_ocr_text", partial_rotary_factor=0.5, rope_theta=10000.0,
                                rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2]}),
           "glm_ocr", "GlmOcrTextRotaryEmbedding", "apply_rotary_pos_emb", "GlmOcrTextAttention", positions="3d"),
    Family("ernie4_5_vl_moe_text", _cfg("ernie4_5_vl_moe_text", hidden_size=128, rope_theta=500000.0,
                                        rope_scaling={"rope_type": "default", "mrope_section": [6, 6, 4]}),
           "ernie4_5_vl_moe", "Ernie4_5_VLMoeTextRotaryEmbedding", "apply_rotary_pos_emb",
           "Ernie4_5_VLMoeTextAttention", positions="3d"),
    Family("cohere", _cfg("cohere"),  # rope_theta absent: CohereConfig's 500000
           "cohere", "CohereRotaryEmbedding", "apply_rotary_pos_emb", "CohereAttention"),
    Family("cohere2", _cfg("cohere2", head_dim=16, rope_theta=10000.0),
           "cohere2", "Cohere2RotaryEmbedding", "apply_rotary_pos_emb", "Cohere2Attention"),
    Family("cohere2_moe", _cfg("cohere2_moe", head_dim=16, rope_theta=10000.0, num_local_experts=4,
                               num_experts_per_tok=2),
           "cohere2_moe", "Cohere2MoeRotaryEmbedding", "apply_rotary_pos_emb", "Cohere2MoeAttention"),
    Family("openai_privacy_filter",
           _cfg("openai_privacy_filter", head_dim=16,
                rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                              "truncate": False, "original_max_position_embeddings": 64},
                rope_theta=150000.0, num_local_experts=4, num_experts_per_tok=2),
           "openai_privacy_filter", "OpenAIPrivacyFilterRotaryEmbedding", "apply_rotary_pos_emb",
           "OpenAIPrivacyFilterAttention"),
    # Llama 4 Scout's rope: llama3 with equal low/high factors
    Family("llama4_text", _cfg("llama4_text", head_dim=16, rope_theta=500000.0,
                               rope_scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 1.0, "original_max_position_embeddings": 64}),
           "llama4", "Llama4TextRotaryEmbedding", "apply_rotary_emb", "Llama4TextAttention", kind="complex"),
    Family("deepseek_v2", _cfg("deepseek_v2", MLA, rope_theta=10000.0,
                               rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707,
                                             "beta_fast": 32, "beta_slow": 1,
                                             "original_max_position_embeddings": 64}),
           "deepseek_v2", "DeepseekV2RotaryEmbedding", "apply_rotary_emb", "DeepseekV2Attention", kind="complex"),
    # DeepSeek V3 as its config.json is written: neither rope_interleave nor head_dim
    Family("deepseek_v3", _cfg("deepseek_v3", MLA, rope_theta=10000.0,
                               rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                             "beta_fast": 32, "beta_slow": 1,
                                             "original_max_position_embeddings": 64}),
           "deepseek_v3", "DeepseekV3RotaryEmbedding", "apply_rotary_pos_emb_interleave", "DeepseekV3Attention",
           kind="mla"),
    Family("sarvam_mla", _cfg("sarvam_mla", MLA, rope_theta=10000.0),
           "deepseek_v3", "DeepseekV3RotaryEmbedding", "apply_rotary_pos_emb_interleave", "DeepseekV3Attention",
           kind="mla"),
    Family("glm4_moe_lite", _cfg("glm4_moe_lite", MLA, rope_theta=10000.0),
           "glm4_moe_lite", "Glm4MoeLiteRotaryEmbedding", "apply_rotary_pos_emb_interleave", "Glm4MoeLiteAttention",
           kind="mla"),
    Family("mistral4", _cfg("mistral4", MLA,
                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                             "original_max_position_embeddings": 128, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                             "partial_rotary_factor": 0.5}),
           "mistral4", "Mistral4RotaryEmbedding", "apply_rotary_pos_emb_interleave", "Mistral4Attention", kind="mla"),
    Family("youtu", _cfg("youtu", MLA, rope_theta=10000.0),
           "youtu", "YoutuRotaryEmbedding", "apply_rotary_pos_emb_interleave", "YoutuAttention", kind="mla"),
    Family("axk1", _cfg("axk1", MLA, rope_theta=10000.0),
           "axk1", "AXK1RotaryEmbedding", "apply_rotary_pos_emb_interleave", "AXK1Attention", kind="mla"),
    Family("deepseek_v32", _cfg("deepseek_v32", MLA, rope_theta=10000.0),
           "deepseek_v32", "DeepseekV32RotaryEmbedding", "apply_rotary_pos_emb_interleave", "DeepseekV32Attention",
           kind="mla"),
    Family("glm_moe_dsa", _cfg("glm_moe_dsa", MLA, rope_theta=10000.0),
           "glm_moe_dsa", "GlmMoeDsaRotaryEmbedding", "apply_rotary_pos_emb_interleave", "GlmMoeDsaAttention",
           kind="mla"),
    # rope_theta absent: LongcatFlashConfig's 1e7; its rotary module sizes cos/sin by head_dim, which
    # must equal qk_rope_head_dim (its config.json says 64 for both)
    Family("longcat_flash", _cfg("longcat_flash", MLA, head_dim=16),
           "longcat_flash", "LongcatFlashRotaryEmbedding", "apply_rotary_pos_emb_interleave", "LongcatFlashMLA",
           kind="mla"),
    # multimodal MLA: rotate_half on adjacent pairs, in place (no de-interleaving)
    Family("hy_v4_vl_text", _cfg("hy_v4_vl_text", MLA, rope_theta=10000.0,
                                 rope_scaling={"rope_type": "default", "mrope_section": [3, 3, 2]}),
           "hy_v4_vl", "HYV4VLRotaryEmbedding", "apply_rotary_pos_emb", "HYV4VLAttention", kind="mla",
           positions="3d"),
    # an encoder: sinusoidal table (base 10000, always) with sin/cos repeated pairwise
    Family("roformer", _cfg("roformer", embedding_size=64),
           "roformer", "RoFormerSinusoidalPositionalEmbedding", "apply_rotary_position_embeddings",
           "RoFormerSelfAttention", kind="roformer"),
    Family("axk2", _cfg("axk2", MLA, rope_theta=10000.0),
           "axk2", "AXK2RotaryEmbedding", "apply_rotary_pos_emb_interleave", "AXK2Attention", kind="mla"),
    Family("bailing_hybrid", _cfg("bailing_hybrid", MLA, rope_theta=10000.0),
           "bailing_hybrid", "BailingHybridRotaryEmbedding", "apply_rotary_pos_emb_interleave",
           "BailingHybridAttention", kind="mla"),
    # rope_interleave false: DeepSeek V3's split-half code path
    Family("deepseek_v3", _cfg("deepseek_v3", MLA, rope_theta=10000.0, rope_interleave=False),
           "deepseek_v3", "DeepseekV3RotaryEmbedding", "apply_rotary_pos_emb_interleave", "DeepseekV3Attention",
           kind="mla", layout="split_half"),
    # ---- checked split-half
    Family("glm4_moe", _cfg("glm4_moe", head_dim=32, rope_theta=10000.0),  # partial 0.5 by default
           "glm4_moe", "Glm4MoeRotaryEmbedding", "apply_rotary_pos_emb", "Glm4MoeAttention", layout="split_half"),
    Family("glm4v_moe_text", _cfg("glm4v_moe_text", head_dim=32, rope_theta=10000.0,
                                  rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]}),
           "glm4v_moe", "Glm4vMoeTextRotaryEmbedding", "apply_rotary_pos_emb", "Glm4vMoeTextAttention",
           positions="3d", layout="split_half"),
    Family("minicpm3", _cfg("minicpm3", MLA, rope_theta=10000.0,
                            rope_scaling={"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                          "original_max_position_embeddings": 128}),
           "minicpm3", "MiniCPM3RotaryEmbedding", "apply_rotary_pos_emb", "MiniCPM3Attention", kind="mla",
           layout="split_half"),
    Family("hy_v4", _cfg("hy_v4", MLA, rope_theta=10000.0),
           "hy_v4", "HYV4RotaryEmbedding", "apply_rotary_pos_emb", "HYV4Attention", kind="mla", layout="split_half"),
    Family("qwen2_vl_text", _cfg("qwen2_vl_text", rope_theta=1000000.0,
                                 rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
           "qwen2_vl", "Qwen2VLRotaryEmbedding", "apply_rotary_pos_emb", "Qwen2VLAttention", positions="3d",
           layout="split_half"),
    Family("qwen3_vl_text", _cfg("qwen3_vl_text", head_dim=16, rope_theta=500000.0,
                                 rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3],
                                               "mrope_interleaved": True}),
           "qwen3_vl", "Qwen3VLTextRotaryEmbedding", "apply_rotary_pos_emb", "Qwen3VLTextAttention",
           positions="3d", layout="split_half"),
    Family("qwen2_5_vl_text", _cfg("qwen2_5_vl_text", rope_theta=1000000.0,
                                   rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]}),
           "qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", "apply_rotary_pos_emb", "Qwen2_5_VLAttention",
           positions="3d", layout="split_half"),
    Family("qwen3_vl_moe_text", _cfg("qwen3_vl_moe_text", head_dim=16, rope_theta=500000.0, num_experts=4,
                                     rope_scaling={"rope_type": "default", "mrope_section": [3, 3, 2]}),
           "qwen3_vl_moe", "Qwen3VLMoeTextRotaryEmbedding", "apply_rotary_pos_emb", "Qwen3VLMoeTextAttention",
           positions="3d", layout="split_half"),
    Family("gemma3_text", _cfg("gemma3_text", head_dim=16, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                               rope_scaling={"rope_type": "linear", "factor": 8.0}, num_hidden_layers=6),
           "gemma3", "Gemma3RotaryEmbedding", "apply_rotary_pos_emb", "Gemma3Attention", layer_type="full_attention",
           layout="split_half"),
    Family("gemma4_text", _cfg("gemma4_text", head_dim=16, global_head_dim=32, num_hidden_layers=6),
           "gemma4", "Gemma4TextRotaryEmbedding", "apply_rotary_pos_emb", "Gemma4TextAttention", kind="single",
           layer_type="sliding_attention", layout="split_half"),
    Family("qwen2_5_vl_text", _cfg("qwen2_5_vl_text", rope_theta=1000000.0,
                                   rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]}),
           "qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", "apply_rotary_pos_emb", "Qwen2_5_VLAttention",
           positions="3d", layout="split_half"),
    Family("qwen3_vl_moe_text", _cfg("qwen3_vl_moe_text", head_dim=16, rope_theta=500000.0, num_experts=4,
                                     rope_scaling={"rope_type": "default", "mrope_section": [3, 3, 2]}),
           "qwen3_vl_moe", "Qwen3VLMoeTextRotaryEmbedding", "apply_rotary_pos_emb", "Qwen3VLMoeTextAttention",
           positions="3d", layout="split_half"),
    Family("gemma3_text", _cfg("gemma3_text", head_dim=16, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                               rope_scaling={"rope_type": "linear", "factor": 8.0}, num_hidden_layers=6),
           "gemma3", "Gemma3RotaryEmbedding", "apply_rotary_pos_emb", "Gemma3Attention",
           layer_type="sliding_attention", layout="split_half"),
    # Gemma 4's full-attention layers: global_head_dim heads, proportional rope (transformers' defaults)
    Family("gemma4_text", _cfg("gemma4_text", head_dim=16, global_head_dim=32, num_hidden_layers=6),
           "gemma4", "Gemma4TextRotaryEmbedding", "apply_rotary_pos_emb", "Gemma4TextAttention", kind="single",
           layer_type="full_attention", layout="split_half"),
    Family("gpt_neox", _cfg("gpt_neox", rotary_emb_base=10000, rotary_pct=0.5),
           "gpt_neox", "GPTNeoXRotaryEmbedding", "apply_rotary_pos_emb", "GPTNeoXAttention", layout="split_half"),
    Family("gpt_oss", _cfg("gpt_oss", head_dim=16, rope_theta=150000.0, num_local_experts=4,
                           rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                         "truncate": False, "original_max_position_embeddings": 64}),
           "gpt_oss", "GptOssRotaryEmbedding", "apply_rotary_pos_emb", "GptOssAttention", layout="split_half"),
    Family("smollm3", _cfg("smollm3"),  # rope_theta absent: SmolLM3Config's 2e6
           "smollm3", "SmolLM3RotaryEmbedding", "apply_rotary_pos_emb", "SmolLM3Attention", layout="split_half"),
    # HunYuan: dynamic NTK with alpha, a fixed base change (not in the layout table: split-half by default)
    Family("hunyuan_v1_dense", _cfg("hunyuan_v1_dense", head_dim=16, rope_theta=10000.0,
                                    rope_scaling={"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                                                  "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}),
           "hunyuan_v1_dense", "HunYuanDenseV1RotaryEmbedding", "apply_rotary_pos_emb", "HunYuanDenseV1Attention",
           layout="split_half"),
    Family("llama", _cfg("llama", rope_theta=10000.0),
           "llama", "LlamaRotaryEmbedding", "apply_rotary_pos_emb", "LlamaAttention", layout="split_half"),
]

# multimodal parents: the same text model, reached through text_config without a model_type
PARENTS = {"llama4": "llama4_text", "glm4v": "glm4v_text", "glm46v": "glm4v_text", "glm_ocr": "glm_ocr_text",
           "glm4v_moe": "glm4v_moe_text", "ernie4_5_vl_moe": "ernie4_5_vl_moe_text", "cohere2_vision": "cohere2",
           "aya_vision": "cohere2", "kimi_k25": "deepseek_v3", "qwen2_vl": "qwen2_vl_text",
           "qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text",
           "gemma3": "gemma3_text", "gemma4": "gemma4_text",
           "hy_v4_vl": "hy_v4_vl_text"}

BY_TYPE = {}  # the first case of each model type
for _f in FAMILIES:
    BY_TYPE.setdefault(_f.model_type, _f)


def modeling(family):
    return importlib.import_module(f"transformers.models.{family.module}.modeling_{family.module}")


def transformers_config(transformers, family, raw=None):
    kwargs = copy.deepcopy(family.config if raw is None else raw)
    model_type = kwargs.pop("model_type")
    return transformers.AutoConfig.for_model(model_type, **kwargs)


def attention_calls(family):
    """Whether the family's attention forward calls its apply function (the harness calls the same)."""
    attention = getattr(modeling(family), family.attention)
    source = inspect.getsource(attention.forward)
    return f"{family.apply}(" in source


def rotate(torch, transformers, family, q, k, positions, raw=None):
    """transformers' rotated ``(q, k, deinterleaved)`` for ``[batch, seq, heads, dim]`` float64
    arrays, as numpy ``[batch, seq, heads, dim]``; for ``kind == "mla"`` q and k are the rope
    slices.  ``deinterleaved``: the function was ``apply_rotary_pos_emb_interleave``, whose output
    is returned as it is (even coordinates first, then odd)."""
    config = transformers_config(transformers, family, raw)
    mod = modeling(family)
    if family.kind == "roformer":
        rotary = getattr(mod, family.rotary)
    else:
        rotary = getattr(mod, family.rotary)(config)
        apply = getattr(mod, family.apply)
    pos = torch.as_tensor(positions, dtype=torch.long)
    if pos.ndim == 1:
        pos = pos[None]
    if family.positions == "3d":
        pos = pos[None].expand(3, *pos.shape)
    tq, tk = torch.as_tensor(q), torch.as_tensor(k)
    x = torch.zeros(1, dtype=torch.float64)
    kwargs = {} if family.layer_type is None else {"layer_type": family.layer_type}
    heads_first = lambda t: t.transpose(1, 2)  # [b, s, h, d] <-> [b, h, s, d]
    deinterleaved = False
    if family.kind == "roformer":
        table = rotary(config.max_position_embeddings, config.hidden_size // config.num_attention_heads)
        with torch.no_grad():
            table.weight.copy_(table.create_weight())
        sinusoidal = table(tq.shape[:2], position_ids=pos[0])[None, None].to(torch.float64)
        attention = getattr(mod, family.attention)
        out = [heads_first(t) for t in attention.apply_rotary_position_embeddings(
            sinusoidal, heads_first(tq), heads_first(tk))]
        return [t.detach().numpy() for t in out] + [deinterleaved]
    if family.kind == "gptj":
        sin, cos = rotary(x, pos)
        r = cos.shape[-1] * 2
        out = [torch.cat([apply(t[..., :r], sin, cos), t[..., r:]], dim=-1) for t in (tq, tk)]
    elif family.kind == "complex":
        freqs = rotary(x, pos)
        if family.model_type == "llama4_text":
            out = apply(tq, tk, freqs)
        else:
            out = [heads_first(t) for t in apply(heads_first(tq), heads_first(tk), freqs)]
    elif family.kind == "single":
        cos, sin = rotary(x, pos, **kwargs)
        out = [apply(t, cos, sin, unsqueeze_dim=2) for t in (tq, tk)]
    else:
        cos, sin = rotary(x, pos, **kwargs)
        if family.kind == "mla" and family.apply.endswith("interleave"):
            deinterleaved = getattr(config, "rope_interleave", True)
            apply = getattr(mod, "apply_rotary_pos_emb_interleave" if deinterleaved else "apply_rotary_pos_emb")
        out = [heads_first(t) for t in apply(heads_first(tq), heads_first(tk), cos, sin)]
    return [t.detach().numpy() for t in out] + [deinterleaved]


def deinterleave(y):
    """pyrope's interleaved output in the order apply_rotary_pos_emb_interleave returns: even coordinates, then odd."""
    d = y.shape[-1]
    return y[..., pyrope.layout.permutation(d, "interleaved", "split_half")]


def pyrope_config(family):
    """The config pyrope reads: the family's; the multimodal section keys only for the families
    pyrope reads them for (pyrope.config.MROPE_FAMILIES, checked in tests/api/test_sections.py;
    the rotation here uses one position on every component, so sections change nothing)."""
    raw = copy.deepcopy(family.config)
    if family.model_type in pyrope.config.MROPE_FAMILIES:
        return raw
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(raw.get(key), dict):
            for drop in ("mrope_section", "mrope_interleaved"):
                raw[key].pop(drop, None)
            if raw[key].get("type") == "mrope":
                raw[key]["type"] = "default"
    return raw
