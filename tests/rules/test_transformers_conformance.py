"""Conformance with transformers' own RoPE code, on real model configs.

For each config in ``hf_configs`` (and sequence-length variants for LongRoPE
and dynamic NTK) transformers builds its config object the way it does when
loading the model (``AutoConfig.for_model``), then the model's own rotary
embedding module (``LlamaRotaryEmbedding``, ``Phi3RotaryEmbedding``, ...)
yields the inverse frequencies and attention factor it would use; for
``seq_len`` variants the module's forward is run at that length, which is how
transformers switches LongRoPE tables and grows the dynamic-NTK base.  The
model's attention module, built on the meta device, gives head_dim and the
rotated width.  ``pyrope.Rope.from_hf_config`` must agree:

* inv_freq: transformers computes in float32, pyrope in float64.  Per pair
  ``|t - p| <= (8 + E) * 2**-24 * p``: up to 8 float32 roundings (pow is
  within 1 ulp, the reciprocal, division and ramp blend within half an ulp
  each, i.e. 2**-24 relative), and ``E = ln(base) / 2`` when the exponent
  ``2i/d`` is not exact in float32 (d not a power of two: half an ulp of the
  exponent, at most 2**-25, grows by ln(base) through the pow).  Zero
  frequencies (proportional RoPE's unrotated pairs) must be zero in both.
* attention factor: within 1e-6 (transformers computes it in float64).
* head_dim and rotary_dim equal.

Other families' keys (DeepSeek's ``qk_rope_head_dim`` slice and YaRN mscale,
HunYuan's alpha, GPT-NeoX's ``rotary_pct``/``rotary_emb_base``, GLM's
partial rotation) are read from their real configs here too; the layout and
the rotation itself, family by family, are in ``test_family_conformance.py``.

transformers (version pinned in pyproject's ``conformance`` extra, installed
by ``make test``) reads both config styles: ``rope_scaling`` (4.x) and
``rope_parameters`` (5.x).  It does not read Phi-3's early ``"su"`` spelling
(it renames "su" to "longrope" only after moving
``original_max_position_embeddings`` into the rope dict, then refuses the dict
for lacking it), so transformers is given the ``"longrope"`` spelling that
the current Phi-3 config.json uses, and pyrope the fixture as shipped.

``python tests/rules/test_transformers_conformance.py`` prints the differences.
"""

import copy
import importlib
import math

import numpy as np
import pytest

from hf_peer import pinned_transformers, torch_and_transformers

import hf_configs as H
import pyrope

ULP = 2.0 ** -24  # float32 relative rounding unit
ATTENTION_TOL = 1e-6

# Phi-3 as transformers 5 can read it: the same tables, spelled "longrope"
PHI3_LONGROPE = copy.deepcopy(H.PHI3_128K)
PHI3_LONGROPE["rope_scaling"]["type"] = "longrope"

# Llama 2 with dynamic NTK scaling (factor 2) added, as users do for long prompts
LLAMA2_DYNAMIC = copy.deepcopy(H.LLAMA2_7B)
LLAMA2_DYNAMIC["rope_scaling"] = {"type": "dynamic", "factor": 2.0}

# (id, config pyrope reads, config transformers reads, seq_len)
CASES = [
    ("llama2-7b", H.LLAMA2_7B, H.LLAMA2_7B, None),
    ("llama3.1-8b", H.LLAMA31_8B, H.LLAMA31_8B, None),
    ("llama3.1-8b-v5", H.LLAMA31_8B_V5, H.LLAMA31_8B_V5, None),
    ("llama3.2-1b", H.LLAMA32_1B, H.LLAMA32_1B, None),
    ("qwen2.5-7b-yarn", H.QWEN25_7B_YARN, H.QWEN25_7B_YARN, None),
    ("gpt-oss-20b", H.GPT_OSS_20B, H.GPT_OSS_20B, None),
    ("gpt-oss-20b-v5", H.GPT_OSS_20B_V5, H.GPT_OSS_20B_V5, None),
    ("phi2", H.PHI2, H.PHI2, None),
    ("phi2-v5", H.PHI2_V5, H.PHI2_V5, None),
    ("stablelm2-1.6b", H.STABLELM2_1_6B, H.STABLELM2_1_6B, None),
    ("proportional-v5", H.PROPORTIONAL_V5, H.PROPORTIONAL_V5, None),
    ("phi3-128k-short", H.PHI3_128K, PHI3_LONGROPE, None),
    ("phi3-128k-short-4096", H.PHI3_128K, PHI3_LONGROPE, 4096),
    ("phi3-128k-long-4097", H.PHI3_128K, PHI3_LONGROPE, 4097),
    ("phi3-128k-long-131072", H.PHI3_128K, PHI3_LONGROPE, 131072),
    ("llama2-dynamic", LLAMA2_DYNAMIC, LLAMA2_DYNAMIC, None),
    ("llama2-dynamic-4096", LLAMA2_DYNAMIC, LLAMA2_DYNAMIC, 4096),
    ("llama2-dynamic-16384", LLAMA2_DYNAMIC, LLAMA2_DYNAMIC, 16384),
    # the keys other families' config.json files use (tests/rules/test_family_conformance.py rotates with them)
    ("deepseek-v3", H.DEEPSEEK_V3, H.DEEPSEEK_V3, None),
    ("deepseek-v2-lite", H.DEEPSEEK_V2_LITE, H.DEEPSEEK_V2_LITE, None),
    ("hunyuan-7b-alpha", H.HUNYUAN_7B, H.HUNYUAN_7B, None),
    ("hunyuan-7b-alpha-65536", H.HUNYUAN_7B, H.HUNYUAN_7B, 65536),
    ("pythia-1b", H.PYTHIA_1B, H.PYTHIA_1B, None),
    ("glm-4-9b", H.GLM4_9B, H.GLM4_9B, None),
    ("command-r7b", H.COHERE2_7B, H.COHERE2_7B, None),
    ("smollm3-3b", H.SMOLLM3_3B, H.SMOLLM3_3B, None),
]


@pytest.fixture(scope="module")
def hf():
    """(torch, transformers), or a failure saying how to install them."""
    return torch_and_transformers("the transformers conformance test")


def _model_class(transformers, model_type, suffix):
    """The ``<Model>RotaryEmbedding`` / ``<Model>Attention`` class of a model type."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    prefix = MODEL_MAPPING_NAMES[model_type].removesuffix("Model")
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    return getattr(module, prefix + suffix)


def transformers_rope(hf, raw, seq_len):
    """transformers' (inv_freq float64, attention_factor, head_dim, rotary_dim, base) for ``raw``."""
    torch, transformers = hf
    kwargs = copy.deepcopy(raw)
    model_type = kwargs.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    rotary = _model_class(transformers, model_type, "RotaryEmbedding")(config)
    if seq_len is not None:  # the forward pass is where transformers re-derives frequencies for a length
        rotary(torch.zeros(1, dtype=torch.float32), torch.tensor([[seq_len - 1]]))
    inv_freq = rotary.inv_freq.detach().to(torch.float64).numpy()
    with torch.device("meta"):
        attention = _model_class(transformers, model_type, "Attention")(config, 0)
    rotary_dim = 2 * inv_freq.shape[0]
    # partial-rotary models slice q/k at rotary_ndims: it must be the width cos/sin cover
    assert getattr(attention, "rotary_ndims", rotary_dim) == rotary_dim
    base = float(config.rope_parameters["rope_theta"])
    # MLA attention rotates its qk_rope_head_dim slice; GPT-NeoX names the head head_size
    head_dim = getattr(attention, "qk_rope_head_dim", None) or getattr(attention, "head_dim", None) \
        or attention.head_size
    return inv_freq, float(rotary.attention_scaling), int(head_dim), rotary_dim, base


def _bound(base, n_pairs, denominator):
    """Per-pair relative bound (see the module docstring)."""
    exact_exponent = denominator & (denominator - 1) == 0
    return (8.0 + (0.0 if exact_exponent else math.log(base) / 2)) * ULP * np.ones(n_pairs)


def compare(hf, ours_raw, theirs_raw, seq_len):
    """Both sides and their differences for one case."""
    inv, att, head_dim, rotary_dim, base = transformers_rope(hf, theirs_raw, seq_len)
    rope = pyrope.Rope.from_hf_config(ours_raw, seq_len=seq_len)
    p = np.asarray(rope.inv_freq, dtype=np.float64)
    # transformers' exponents are 2i/rotary_dim, except proportional's 2i/head_dim
    denominator = head_dim if rope.contract()["rule"] == "proportional" else rotary_dim
    rel = np.abs(inv - p) / np.where(p > 0, p, 1.0) if inv.shape == p.shape else None
    return dict(inv=inv, att=att, head_dim=head_dim, rotary_dim=rotary_dim, rope=rope, p=p, rel=rel,
                bound=_bound(base, p.shape[0], denominator))


def test_pinned_transformers_is_installed(hf):
    """The figures below are for the pinned version, not whatever happens to be installed."""
    assert hf[1].__version__ == pinned_transformers(), (
        f"transformers {hf[1].__version__} installed, pyproject pins {pinned_transformers()}: run `make test`")


@pytest.mark.parametrize("name,ours,theirs,seq_len", CASES, ids=[c[0] for c in CASES])
def test_matches_transformers(hf, name, ours, theirs, seq_len):
    """inv_freq within the float32 bound, attention factor within 1e-6, same dims."""
    c = compare(hf, ours, theirs, seq_len)
    rope = c["rope"]
    assert rope.head_dim == c["head_dim"], f"{name}: head_dim {rope.head_dim} vs transformers {c['head_dim']}"
    assert rope.rotary_dim == c["rotary_dim"], f"{name}: rotary_dim {rope.rotary_dim} vs transformers {c['rotary_dim']}"
    bad = np.abs(c["inv"] - c["p"]) > c["bound"] * c["p"]  # also demands exact zeros where pyrope has 0
    assert not bad.any(), (
        f"{name}: inv_freq differs from transformers at pairs {np.flatnonzero(bad).tolist()}: "
        f"max relative {c['rel'].max():.3e} > bound {c['bound'][0]:.3e}")
    assert abs(rope.attention_factor - c["att"]) <= ATTENTION_TOL, (
        f"{name}: attention factor {rope.attention_factor!r} vs transformers {c['att']!r}")


@pytest.mark.parametrize("raw,short,long", [(PHI3_LONGROPE, 4096, 4097), (LLAMA2_DYNAMIC, 4096, 16384)],
                         ids=["phi3-longrope", "llama2-dynamic"])
def test_length_variants_reach_transformers(hf, raw, short, long):
    """The forward pass at a longer length really changes transformers' frequencies
    (else the seq_len cases above would compare two unscaled tables)."""
    t_short = transformers_rope(hf, raw, short)[0]
    t_long = transformers_rope(hf, raw, long)[0]
    assert np.max(np.abs(t_long - t_short) / t_short) > 1e-3


def test_transformers_refuses_phi3_su_spelling(hf):
    """Why Phi-3 goes to transformers spelled "longrope": the pinned version cannot read "su".

    When a later pin reads it, this fails; then give transformers the fixture as shipped.
    """
    kwargs = copy.deepcopy(H.PHI3_128K)
    model_type = kwargs.pop("model_type")
    with pytest.raises(KeyError, match="original_max_position_embeddings"):
        hf[1].AutoConfig.for_model(model_type, **kwargs)


def test_a_rule_change_is_caught(hf):
    """The comparison can fail: gpt-oss with YaRN beta_fast 31 instead of 32 is far outside the bound.

    (Not Qwen: its truncated ramp bounds floor/ceil both betas to the same pairs.)
    """
    theirs = copy.deepcopy(H.GPT_OSS_20B)
    theirs["rope_scaling"]["beta_fast"] = 31.0
    c = compare(hf, H.GPT_OSS_20B, theirs, None)
    assert (np.abs(c["inv"] - c["p"]) > c["bound"] * c["p"]).any()


if __name__ == "__main__":
    import torch
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"{'case':24s} {'max rel inv_freq':>16s} {'(float32 ulps)':>14s} {'bound':>9s} {'|d attention|':>13s}")
    for name, ours, theirs, seq_len in CASES:
        c = compare((torch, transformers), ours, theirs, seq_len)
        worst = c["rel"].max()
        print(f"{name:24s} {worst:16.3e} {worst / ULP:14.2f} {c['bound'][0]:9.2e} "
              f"{abs(c['rope'].attention_factor - c['att']):13.1e}")
