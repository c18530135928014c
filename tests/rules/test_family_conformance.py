"""Each model family's rotation, layout and softmax factor against transformers' own code.

For every family of ``pyrope.config.LAYOUT_FAMILIES`` (and a few cases of the
keys real configs use: DeepSeek's ``rope_interleave: false``, HunYuan's alpha,
Gemma 3/4 per layer type) a small config goes through transformers' rotary
module and the function its attention applies it with (``hf_families``), on
random float64 q/k, and through ``Rope.from_hf_config(config).apply``.

Tolerance: transformers computes angles as float32 ``position * inv_freq``
and its cos/sin in float32 before casting to float64; pyrope rotates float64
with float32 tables (correctly rounded).  At positions <= 31 both are within
a few 1e-7 of the exact rotation, so ``ATOL = 1e-5`` (values ~N(0, 1)) leaves
room while a wrong layout, frequency or slice is off by O(1).

DeepSeek-style ``apply_rotary_pos_emb_interleave`` returns each head's rope
slice de-interleaved (even coordinates, then odd): the rotation of adjacent
pairs, stored in another order.  Queries and keys move together, so scores
are the same; pyrope's interleaved output is compared after the same
permutation, and the scores are compared without it.
"""

import copy
import pathlib
import re
import warnings

import numpy as np
import pytest

from hf_peer import torch_and_transformers

import hf_families as F
import pyrope
from pyrope._readers import hf_config as C

ATOL = 1e-5
POSITIONS = np.array([0, 1, 2, 5, 13, 31])


@pytest.fixture(scope="module")
def hf():
    """(torch, transformers), or a failure saying how to install them (as test_transformers_conformance)."""
    torch, transformers = torch_and_transformers("the family conformance test")
    transformers.logging.set_verbosity_error()
    return torch, transformers


def ids(families):
    seen, out = {}, []
    for f in families:
        name = f.model_type if f.layer_type is None else f"{f.model_type}-{f.layer_type}"
        if f.model_type == "deepseek_v3" and f.layout == "split_half":
            name += "-no-interleave"
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def build(family, raw=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Llama 4's equal factors warn, as in transformers
        return pyrope.Rope.from_hf_config(F.pyrope_config(family) if raw is None else raw,
                                          layer_type=family.layer_type)


def qk(rope, seed):
    rng = np.random.default_rng(seed)
    shape = (2, len(POSITIONS), 3, rope.head_dim)
    return rng.standard_normal(shape), rng.standard_normal(shape)


# --------------------------------------------------------------------------- the table


def test_every_table_family_has_a_case():
    tested = {f.model_type for f in F.FAMILIES}
    assert set(C.LAYOUT_FAMILIES) <= tested, sorted(set(C.LAYOUT_FAMILIES) - tested)
    for f in F.FAMILIES:
        if f.model_type in C.LAYOUT_FAMILIES and "rope_interleave" not in f.config:
            assert C.LAYOUT_FAMILIES[f.model_type] == f.layout, f.model_type


@pytest.mark.parametrize("family", F.FAMILIES, ids=ids(F.FAMILIES))
def test_attention_calls_the_function_the_case_calls(hf, family):
    """The harness rotates with what the family's attention forward calls."""
    assert F.attention_calls(family), f"{family.attention}.forward no longer calls {family.apply}"


@pytest.mark.parametrize("family", F.FAMILIES, ids=ids(F.FAMILIES))
def test_rotation_matches_transformers(hf, family):
    rope = build(family)
    expected_source = ("rope_interleave" if "rope_interleave" in family.config
                       else "model_type" if family.model_type in C.LAYOUT_FAMILIES else "default")
    assert (rope.layout, rope.layout_source) == (family.layout, expected_source)
    q, k = qk(rope, 1)
    tq, tk, deinterleaved = F.rotate(*hf, family, q, k, POSITIONS)
    pq, pk = rope.apply(q, positions=POSITIONS), rope.apply(k, positions=POSITIONS)
    scores = lambda a, b: np.einsum("bshd,bthd->bhst", a, b)
    np.testing.assert_allclose(scores(pq, pk), scores(tq, tk), atol=ATOL * rope.head_dim, rtol=0)
    if deinterleaved:
        pq, pk = F.deinterleave(pq), F.deinterleave(pk)
    np.testing.assert_allclose(pq, tq, atol=ATOL, rtol=0)
    np.testing.assert_allclose(pk, tk, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", F.FAMILIES, ids=ids(F.FAMILIES))
def test_wrong_layout_is_far_off(hf, family):
    """The comparison sees the layout: the other one is O(1) away."""
    rope = build(family)
    other = "split_half" if rope.layout == "interleaved" else "interleaved"
    flipped = pyrope.Rope.from_contract({**rope.contract(), "layout": other})
    q, k = qk(flipped, 2)
    tq, _, deinterleaved = F.rotate(*hf, family, q, k, POSITIONS)
    pq = flipped.apply(q, positions=POSITIONS)
    if deinterleaved:
        pq = F.deinterleave(pq)
    assert np.abs(pq - tq).max() > 0.1


@pytest.mark.parametrize("family", F.FAMILIES, ids=ids(F.FAMILIES))
def test_transformers5_dict_reads_the_same(hf, family):
    """transformers' own serialisation (config.to_dict(): rope_parameters, derived keys) gives the same rope."""
    raw = F.transformers_config(hf[1], family).to_dict()
    expected = build(family)
    got = build(family, F.pyrope_config(F.Family(**{**family.__dict__, "config": raw})))
    assert got.fingerprint == expected.fingerprint
    assert (got.layout, got.softmax_scale_factor) == (expected.layout, expected.softmax_scale_factor)


@pytest.mark.parametrize("parent, child", sorted(F.PARENTS.items()))
def test_composite_config_reads_its_text_model(parent, child):
    """A multimodal config whose text_config names no model_type: the composite class's default text config."""
    family = F.BY_TYPE[child]
    text = {k: v for k, v in F.pyrope_config(family).items() if k != "model_type"}
    composite = {"model_type": parent, "text_config": text, "vision_config": {"hidden_size": 32}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = pyrope.Rope.from_hf_config(composite, layer_type=family.layer_type)
    assert (got.layout, got.layout_source) == (family.layout, "model_type")
    assert got.fingerprint == build(family).fingerprint


def test_composite_parents_name_transformers_defaults(hf):
    """Each parent's text config class, as transformers builds it from a text_config without model_type."""
    for parent, child in F.PARENTS.items():
        config = hf[1].AutoConfig.for_model(parent, text_config={"hidden_size": 64, "num_attention_heads": 4})
        assert config.text_config.model_type == child, parent
    assert set(F.PARENTS.items()) == set(C._TEXT_MODEL_TYPE.items())


# --------------------------------------------------------------------------- completeness against the code


# modeling files that slice adjacent pairs somewhere, and why their model types have no interleaved entry
NOT_INTERLEAVED_ENTRIES = {
    "gpt_oss": "the pairs are its MLP's gate/up columns; its rope is split-half (a table entry)",
    "blt": "sub-configs only (local encoder/decoder, global transformer): no top-level attention to read",
    "moonshine": "encoder/decoder head counts only (encoder_num_attention_heads ...): not read",
    "deepseek_v4": "refused by pyrope.config (last-channel rope, main/compress per layer, output de-rotation)",
    "dots3_note": "refused by pyrope.config (per-layer head sizes)",
    "mistral_large4": "text config mistral_large4_text: its required keys are not read here",
    "kimi_k25": "composite: its text config is deepseek_v3 (a table entry)",
    "glm4v": "composite: text config glm4v_text", "glm_ocr": "composite: text config glm_ocr_text",
    "ernie4_5_vl_moe": "composite: text config ernie4_5_vl_moe_text", "llama4": "composite: text config llama4_text",
    "hy_v4_vl": "composite: text config hy_v4_vl_text",
    "qwen2_5_omni": "the pairs are the audio code predictor's, not the thinker's text rotary",
    "neomme": "2-D vision frequencies", "pe_audio": "perception encoder", "pe_video": "perception encoder",
    "pe_audio_video": "perception encoder", "musicflamingo": "audio time embedding",
    "conditional_detr": "vision", "dab_detr": "vision", "grounding_dino": "vision", "mm_grounding_dino": "vision",
    "lw_detr": "vision", "rf_detr": "vision", "efficientloftr": "vision", "lightglue": "vision",
    "edgetam_video": "vision", "sam2_video": "vision", "sam3": "vision", "sam3_tracker_video": "vision",
    "inkling2": "vision",
}
_PAIRS = re.compile(r"rotate_every_two|view_as_complex|rope_interleave|apply_rotary_pos_emb_interleave"
                    r"|\[\.\.\., ?0::2\]|\[\.\.\., ?::2\]|\[\.\.\., ?1::2\]")


def _module_of(model_type):
    return {f.model_type: f.module for f in F.FAMILIES}.get(model_type)


def test_every_adjacent_pair_modeling_file_is_accounted_for(hf):
    root = pathlib.Path(hf[1].__file__).parent / "models"
    found = {p.parent.name for p in root.glob("*/modeling_*.py") if _PAIRS.search(p.read_text(encoding="utf-8"))}
    covered = {_module_of(t) for t, layout in C.LAYOUT_FAMILIES.items() if layout == "interleaved"}
    missing = sorted(found - covered - set(NOT_INTERLEAVED_ENTRIES))
    assert not missing, f"modeling files rotating adjacent pairs with no table entry or reason: {missing}"


def test_softmax_families_are_those_whose_attention_scales_by_mscale(hf):
    root = pathlib.Path(hf[1].__file__).parent / "models"
    found = {p.parent.name for p in root.glob("*/modeling_*.py")
             if "yarn_apply_mscale(config.rope_parameters" in p.read_text(encoding="utf-8")}
    modules = {"sarvam_mla": "deepseek_v3", "mistral_large4_text": "mistral_large4", "hy_v4_vl_text": "hy_v4_vl"}
    assert {modules.get(t, t) for t in C.SOFTMAX_MSCALE_FAMILIES} == found


def test_family_defaults_are_the_config_classes(hf):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    for model_type, theta in C._DEFAULT_THETA.items():
        assert CONFIG_MAPPING[model_type].default_theta == theta, model_type
    for model_type, partial in C._PARTIAL_DEFAULT.items():
        config = hf[1].AutoConfig.for_model(model_type)
        assert config.rope_parameters["partial_rotary_factor"] == partial, model_type
    for model_type, rotary_dim in C._ROTARY_DIM_DEFAULT.items():
        assert hf[1].AutoConfig.for_model(model_type).rotary_dim == rotary_dim, model_type
    gemma3 = CONFIG_MAPPING["gemma3_text"].default_theta
    assert (gemma3["global"], gemma3["local"]) == (C._GEMMA3_THETA["full_attention"],
                                                   C._GEMMA3_THETA["sliding_attention"])
    gemma4 = hf[1].AutoConfig.for_model("gemma4_text", num_hidden_layers=6)
    assert gemma4.rope_parameters == C._GEMMA4_ROPE
    assert gemma4.to_dict()["per_layer_config"]["5"]["head_dim"] == C._GEMMA4_GLOBAL_HEAD_DIM


def test_rope_interleave_defaults_are_the_config_classes(hf):
    """The table lists a family reading rope_interleave with its config class's default."""
    for f in F.FAMILIES:
        if f.kind == "mla" and f.apply.endswith("interleave") and "rope_interleave" not in f.config:
            config = F.transformers_config(hf[1], f)
            default = getattr(config, "rope_interleave", True)  # families without the key always interleave
            assert C.LAYOUT_FAMILIES[f.model_type] == ("interleaved" if default else "split_half"), f.model_type


# --------------------------------------------------------------------------- softmax scale


SOFTMAX_CASES = [f for f in F.FAMILIES if f.model_type in C.SOFTMAX_MSCALE_FAMILIES] + [F.BY_TYPE["llama"]]


@pytest.mark.parametrize("family", SOFTMAX_CASES, ids=ids(SOFTMAX_CASES))
def test_softmax_scale_factor_is_the_attention_s(hf, family):
    torch, transformers = hf
    config = F.transformers_config(transformers, family)
    with torch.device("meta"):
        attention = getattr(F.modeling(family), family.attention)(config, 0)
    head = getattr(attention, "qk_head_dim", None) or attention.head_dim
    rope = build(family)
    assert rope.softmax_scale_factor == pytest.approx(attention.scaling * head ** 0.5, rel=1e-12)
    assert C.softmax_scale_factor_from_hf_config(F.pyrope_config(family)) == rope.softmax_scale_factor


def test_deepseek_v3_softmax_factor_by_hand():
    rope = build(F.BY_TYPE["deepseek_v3"])
    m = 0.1 * 1.0 * np.log(40.0) + 1.0
    assert rope.softmax_scale_factor == pytest.approx(m * m, rel=1e-15)
    assert rope.attention_factor == 1.0  # mscale == mscale_all_dim: the cos/sin factor cancels
    assert rope.head_dim == 16 and rope.rotary_dim == 16  # the qk_rope_head_dim slice


# --------------------------------------------------------------------------- per-layer ropes


def transformers_uses_rope(hf, family, config, i):
    """Whether transformers' attention of layer ``i`` applies rope, read from the module it builds."""
    torch, _ = hf
    with torch.device("meta"):
        attention = getattr(F.modeling(family), family.attention)(config, i)
    if hasattr(attention, "use_rope"):
        return bool(attention.use_rope)
    if family.model_type in ("cohere2", "cohere2_moe"):
        return attention.sliding_window is not None or getattr(attention, "force_rope", False)
    return True


LAYER_CASES = {
    "llama4-empty": ("llama4_text", {"no_rope_layers": [], "num_hidden_layers": 8}),
    "llama4-list": ("llama4_text", {"no_rope_layers": [1, 0, 1, 1, 0, 1], "num_hidden_layers": 6}),
    "smollm3-default": ("smollm3", {"num_hidden_layers": 8}),
    "smollm3-list": ("smollm3", {"no_rope_layers": [1, 1, 0, 1, 0], "num_hidden_layers": 5}),
    "cohere2": ("cohere2", {"num_hidden_layers": 8}),
    "cohere2-pattern": ("cohere2", {"num_hidden_layers": 6, "sliding_window_pattern": 3}),
    "cohere2-types": ("cohere2", {"layer_types": ["full_attention", "sliding_attention", "full_attention"],
                                  "num_hidden_layers": 3}),
    "cohere2_moe-prefix": ("cohere2_moe", {"num_hidden_layers": 6, "first_k_dense_replace": 2}),
    "gemma3": ("gemma3_text", {"num_hidden_layers": 7}),
    "gemma4": ("gemma4_text", {"num_hidden_layers": 7}),
    "gpt_oss": ("gpt_oss", {"num_hidden_layers": 4}),
}


def _layer_family(name):
    model_type, changes = LAYER_CASES[name]
    family = F.BY_TYPE[model_type]
    raw = {**copy.deepcopy(family.config), **changes}
    return family, raw


def transformers_layer_rope(hf, family, config, i):
    """``(inv_freq float64, attention factor)`` transformers' rotary gives layer ``i``, or None without rope."""
    torch, _ = hf
    if not transformers_uses_rope(hf, family, config, i):
        return None
    rotary = getattr(F.modeling(family), family.rotary)(config)
    layer_types = getattr(config, "layer_types", None)
    params = config.rope_parameters
    if layer_types is not None and isinstance(params, dict) and layer_types[i] in params:
        layer_type = layer_types[i]
        inv = getattr(rotary, f"{layer_type}_inv_freq")
        return inv.double().numpy(), getattr(rotary, f"{layer_type}_attention_scaling")
    return rotary.inv_freq.double().numpy(), rotary.attention_scaling


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layer_ropes_match_transformers(hf, name):
    family, raw = _layer_family(name)
    config = F.transformers_config(hf[1], family, raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ropes = pyrope.config.layer_ropes(F.pyrope_config(F.Family(**{**family.__dict__, "config": raw})))
    assert len(ropes) == config.num_hidden_layers
    for i, rope in enumerate(ropes):
        theirs = transformers_layer_rope(hf, family, config, i)
        if theirs is None:
            assert rope is None, f"layer {i}: transformers applies no rope"
            continue
        assert rope is not None, f"layer {i}: transformers applies a rope"
        inv, att = theirs
        np.testing.assert_allclose(rope.inv_freq, inv, rtol=4e-6, atol=0, err_msg=f"layer {i}")
        assert rope.attention_factor == pytest.approx(att, abs=1e-6)
        assert rope.layout == C.LAYOUT_FAMILIES[family.model_type]
