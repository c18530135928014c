"""``pyrope.integrations.transformers.patch``: transformers models rotating q/k with pyrope.

Each case is a tiny random-weight model (no download: built from its config
class, ``torch.manual_seed(0)``, weights drawn with ``initializer_range`` 0.3 so
that attention is sharp enough for positions to matter). The comparison, the
same for every case and for the deliberately wrong ropes that must fail it:

* logits of a two-prompt batch, the second left-padded by 4 tokens (attention
  mask and position ids as ``generate`` derives them), and the logits of every
  step of ``generate(..., max_new_tokens=8, do_sample=False, use_cache=True)``
  on that batch, within ``TOL`` of the unpatched transformers model, relative
  to its largest logit;
* identical greedy tokens.

``TOL`` is the float32 noise of these models, measured: transformers' own apply
function fed pyrope's exact tables (the same rotation, other float32 roundings
and table errors of a few float32 ulps) moves the logits by up to 3.6e-6 of the
largest logit, the patched model by up to 2.3e-6 (``python
tests/interop/test_transformers_patch.py`` prints both for each case). ``TOL = 2**-17``
(7.6e-6) is twice that. A wrong base, layout or layer type moves them by
4.5e-2 to 1.5 of the largest logit, wrong positions or a dynamic-NTK rule that
forgets transformers' state by more than 100 * TOL (checked below).

The patched model must really call pyrope: ``Rope.apply``/``apply_qk`` are
counted independently of the patch's own counter. After ``unpatch`` the model
gives bit-identical outputs and the modeling module's function is the
original object again, also with two models of one family patched.
"""
import copy
import sys
import time

import numpy as np
import pytest

from hf_families import SMALL
from hf_peer import torch_and_transformers
import readme_blocks

import pyrope

torch, transformers = torch_and_transformers("the transformers patch test")
from pyrope.integrations import _hf_rotary, transformers as hf_patch  # noqa: E402  (needs torch)

FROM_HF_CONFIG = pyrope.Rope.from_hf_config.__func__

TOL = 2.0 ** -17
NEW_TOKENS = 8
BASE = {**SMALL, "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
        "initializer_range": 0.3, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
SHORT = [1.0 + 0.1 * i for i in range(8)]  # LongRoPE factors for 8 pairs (head_dim 16)
LONG = [1.0 + 2.0 * i for i in range(8)]

# id -> (model_type, config keys); windows of 16 are crossed by the 20-token runs below
CASES = {
    "llama": ("llama", {}),
    "llama-linear": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "llama-dynamic": ("llama", {"max_position_embeddings": 16,
                                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "llama-yarn": ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 16}}),
    "llama-llama3": ("llama", {"rope_theta": 500000.0,
                               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "llama-longrope": ("llama", {"rope_scaling": {"rope_type": "longrope", "short_factor": SHORT,
                                                  "long_factor": LONG, "factor": 4.0,
                                                  "original_max_position_embeddings": 16}}),
    # Phi-3 128k's form: top-level original window, LongRoPE; half of each head rotates
    "phi3": ("phi3", {"original_max_position_embeddings": 16, "partial_rotary_factor": 0.5,
                      "rope_scaling": {"type": "longrope", "short_factor": SHORT[:4], "long_factor": LONG[:4]}}),
    "phi": ("phi", {"partial_rotary_factor": 0.5}),  # the attention slices q/k before its apply
    "gpt_neox": ("gpt_neox", {"rotary_pct": 0.5, "rotary_emb_base": 10000}),
    "qwen2": ("qwen2", {"rope_theta": 1000000.0}),
    "gemma": ("gemma", {"head_dim": 16}),
    "cohere": ("cohere", {"logit_scale": 1.0}),  # adjacent pairs, tables repeat_interleave'd
    "glm": ("glm", {"head_dim": 16}),  # adjacent pairs in the first half of each head (0.5 by default)
    "gptj": ("gptj", {"n_embd": 64, "n_head": 4, "n_layer": 2, "rotary_dim": 8, "n_positions": 64,
                      "vocab_size": 128, "initializer_range": 0.3, "bos_token_id": 1, "eos_token_id": 2}),
    # gpt-oss: YaRN without truncation; half-width tables, heads split by torch.chunk
    "gpt_oss": ("gpt_oss", {"head_dim": 16, "num_local_experts": 4, "rope_theta": 150000.0,
                            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 16}}),
    # Gemma 3 per layer type: sliding layers base 10000, full layers base 1e6 with linear 8
    "gemma3": ("gemma3_text", {"head_dim": 16, "num_hidden_layers": 3, "sliding_window_pattern": 3,
                               "sliding_window": 64, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny matrices: torch's pool only contends with other processes (and pyrope's) for the cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def build(case):
    model_type, keys = CASES[case]
    base = {} if model_type == "gptj" else BASE
    config = transformers.AutoConfig.for_model(model_type, **{**base, **keys})
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def prompts():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 128, (2, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    ids[1, :4] = 0
    return ids, mask


def run(model):
    """What the comparison compares: logits of the padded batch, step logits and tokens of generate."""
    ids, mask = prompts()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate derives them
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=True,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return {"logits": logits, "steps": torch.stack(out.logits), "tokens": out.sequences}


def difference(ref, got):
    """Largest logit difference relative to the reference's largest logit."""
    scale = max(float(ref["logits"].abs().max()), float(ref["steps"].abs().max()), 1.0)
    return max(float((ref[k] - got[k]).abs().max()) for k in ("logits", "steps")) / scale


def assert_matches(ref, got):
    rel = difference(ref, got)
    assert rel <= TOL, f"logits differ by {rel:.3g} of the largest logit (tolerance {TOL:.3g})"
    assert torch.equal(ref["tokens"], got["tokens"]), f"greedy tokens differ:\n{ref['tokens']}\n{got['tokens']}"


def assert_identical(ref, got):
    for key in ref:
        assert torch.equal(ref[key], got[key]), key


class Counted:
    """Counts Rope.apply / Rope.apply_qk calls on torch tensors, whoever makes them (pyrope
    itself calls them again on the tensors' numpy views: those are not counted)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in ("apply", "apply_qk"):
            method = getattr(pyrope.Rope, name)
            monkeypatch.setattr(pyrope.Rope, name, self._counting(method))

    def _counting(self, method):
        def counted(rope, *args, **kwargs):
            self.calls += isinstance(args[0], torch.Tensor)
            return method(rope, *args, **kwargs)
        return counted


def modeling(model):
    return sys.modules[type(model).__module__]


@pytest.fixture(scope="module")
def references():
    """Each case's unpatched outputs, computed once."""
    return {}


def reference(references, case):
    if case not in references:
        references[case] = run(build(case))
    return references[case]


@pytest.mark.parametrize("case", list(CASES))
def test_patched_model_matches_transformers(case, references, monkeypatch):
    ref = reference(references, case)
    model = build(case)
    module = modeling(model)
    original = module.apply_rotary_pos_emb
    with hf_patch.patch(model) as p:
        assert module.apply_rotary_pos_emb is not original
        counted = Counted(monkeypatch)  # after patch(): its own check rotates too
        got = run(model)
    assert_matches(ref, got)
    # every rotation went through pyrope: a call per layer (GPT-J: q and k apart) per forward pass,
    # the batch's and generate's (one for the prompt, one per further token)
    per_pass = 2 if case == "gptj" else 1
    assert counted.calls == p.calls == per_pass * model.config.num_hidden_layers * (1 + NEW_TOKENS)
    assert p.fallbacks == 0
    # unpatched: the original function object, and transformers' own results bit for bit
    assert module.apply_rotary_pos_emb is original and not p.active
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert_identical(ref, run(model))


# --------------------------------------------------------------------------------------------
# The same comparison fails with a wrong rope (injected after patch(), past its own check)

def _forget_ropes(model):
    """Drop the ropes patch() built (after its check), so that the next forward builds them again."""
    for m in model.modules():
        hook = m.__dict__.get("forward")
        if isinstance(hook, _hf_rotary.RotaryHook):
            hook.ropes.clear()


def _wrong_from_hf_config(monkeypatch, change):
    def wrong(cls, config, **kwargs):
        rope = FROM_HF_CONFIG(cls, config, **kwargs)
        layout, inv_freq = change(rope, kwargs)
        return pyrope.Rope(rope.head_dim, layout=layout, rotary_dim=rope.rotary_dim,
                           scaling=pyrope.Resolved(inv_freq=inv_freq, attention_factor=rope.attention_factor,
                                                   rule="explicit", params={}))
    monkeypatch.setattr(_hf_rotary.Rope, "from_hf_config", classmethod(wrong))


WRONG = {
    # base 10000 read as 20000
    "base": ("llama", lambda rope, kw: (rope.layout, rope.inv_freq ** (np.log(20000.0) / np.log(10000.0)))),
    "layout": ("llama", lambda rope, kw: ("interleaved", rope.inv_freq)),
    "layout-glm": ("glm", lambda rope, kw: ("split_half", rope.inv_freq)),
    # Gemma 3: every layer with the full-attention rope
    "layer-type": ("gemma3", None),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_wrong_rope_fails_the_comparison(wrong, references, monkeypatch):
    case, change = WRONG[wrong]
    ref = reference(references, case)
    model = build(case)
    with hf_patch.patch(model):
        if change is None:
            monkeypatch.setattr(_hf_rotary.Rope, "from_hf_config", classmethod(
                lambda cls, config, **kw: FROM_HF_CONFIG(cls, config, **{**kw, "layer_type": "full_attention"})))
        else:
            _wrong_from_hf_config(monkeypatch, change)
        _forget_ropes(model)
        got = run(model)
    with pytest.raises(AssertionError, match="logits differ"):
        assert_matches(ref, got)


def test_positions_ignoring_left_padding_fail_the_comparison(references, monkeypatch):
    """Rotating the padded prompt at 0..seq-1 while decode continues from the mask's count."""
    ref = reference(references, "llama")
    model = build("llama")
    call = _hf_rotary.RotaryHook.__call__

    def arange_positions(hook, x, position_ids, layer_type=None):
        if position_ids.shape[-1] > 1:
            position_ids = torch.arange(position_ids.shape[-1])[None].expand_as(position_ids)
        return call(hook, x, position_ids, layer_type)
    monkeypatch.setattr(_hf_rotary.RotaryHook, "__call__", arange_positions)
    with hf_patch.patch(model):
        got = run(model)
    with pytest.raises(AssertionError, match="logits differ"):
        assert_matches(ref, got)


def test_wrong_rope_is_refused_by_patch(monkeypatch):
    """Injected before patch(), the check on the rotary module's copy refuses it."""
    model = build("llama")
    _wrong_from_hf_config(monkeypatch, WRONG["base"][1])
    with pytest.raises(pyrope.RopeError, match="cannot patch LlamaForCausalLM.*LlamaRotaryEmbedding"):
        hf_patch.patch(model)
    _wrong_from_hf_config(monkeypatch, WRONG["layout"][1])
    with pytest.raises(ValueError, match="cannot patch LlamaForCausalLM.*apply_rotary_pos_emb"):
        hf_patch.patch(model)
    assert "forward" not in model.model.rotary_emb.__dict__


# --------------------------------------------------------------------------------------------
# Dynamic NTK: transformers' stateful rule, call by call

def test_dynamic_ntk_state_follows_transformers(monkeypatch):
    """Window 16: a 24-token call grows the frequencies; a 20-token call keeps them (transformers
    resets only below the window); an 8-token call resets. Each call compared with the same
    sequence of calls on the unpatched model; a rule that forgets the state fails."""
    lengths = [24, 20, 8, 20]
    gen = torch.Generator().manual_seed(2)
    inputs = [torch.randint(3, 128, (1, n), generator=gen) for n in lengths]

    def logits(model):
        with torch.no_grad():
            return [model(ids).logits for ids in inputs]

    unpatched = build("llama-dynamic")
    ref = logits(unpatched)
    model = build("llama-dynamic")
    with hf_patch.patch(model) as p:
        got = logits(model)
    for n, r, g in zip(lengths, ref, got):
        rel = float((r - g).abs().max()) / float(r.abs().max())
        assert rel <= TOL, f"{n} tokens: {rel:.3g}"
    assert p.calls == 2 * len(lengths)
    # the module's state is transformers' own: the same as after the unpatched run
    ours, theirs = model.model.rotary_emb, unpatched.model.rotary_emb
    assert int(ours.max_seq_len_cached) == int(theirs.max_seq_len_cached) == 20
    assert torch.equal(ours.inv_freq, theirs.inv_freq)

    stateless = build("llama-dynamic")

    def current_length(hook, x, position_ids, positions, layer_type):
        n = int(positions.max()) + 1
        return n if n > hook.rotary.original_max_seq_len else None
    monkeypatch.setattr(_hf_rotary.RotaryHook, "_length", current_length)
    with hf_patch.patch(stateless):
        wrong = logits(stateless)
    assert float((ref[1] - wrong[1]).abs().max()) / float(ref[1].abs().max()) > 100 * TOL


# --------------------------------------------------------------------------------------------
# unpatch restores everything, with several models of one family

def test_two_models_of_one_family(monkeypatch):
    ref = run(build("qwen2"))
    first, second, bystander = build("qwen2"), build("qwen2"), build("qwen2")
    module = modeling(first)
    original = module.apply_rotary_pos_emb
    p1, p2 = hf_patch.patch(first), hf_patch.patch(second)
    wrapper = module.apply_rotary_pos_emb
    assert wrapper is not original
    # an unpatched model of the family runs transformers' code through the shared wrapper
    counted = Counted(monkeypatch)
    assert_identical(ref, run(bystander))
    assert counted.calls == 0
    hf_patch.unpatch(first)
    assert module.apply_rotary_pos_emb is wrapper  # the second model still needs it
    assert_identical(ref, run(first))
    assert counted.calls == 0
    assert_matches(ref, run(second))
    assert counted.calls == p2.calls > 0 and p1.calls == 0
    p2.unpatch()
    assert module.apply_rotary_pos_emb is original
    assert_identical(ref, run(second))
    # patch again after a full unpatch
    with hf_patch.patch(first):
        assert_matches(ref, run(first))
    assert module.apply_rotary_pos_emb is original


# --------------------------------------------------------------------------------------------
# Refusals: clear errors naming the model class

def _tiny(model_type, auto=transformers.AutoModelForCausalLM, **keys):
    config = transformers.AutoConfig.for_model(model_type, **keys)
    torch.manual_seed(0)
    return auto.from_config(config).eval()


MLA = {**BASE, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "kv_lora_rank": 32,
       "q_lora_rank": 32, "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
       "n_group": 1, "topk_group": 1, "first_k_dense_replace": 2}


@pytest.mark.parametrize("make, message", [
    (lambda: _tiny("gpt2", n_embd=64, n_head=4, n_layer=2, vocab_size=128),
     "cannot patch GPT2LMHeadModel: .*exactly one rotary-embedding module; found none"),
    # Llama 4 rotates complex numbers (apply_rotary_emb with freqs_cis)
    (lambda: _tiny("llama4_text", **{**BASE, "head_dim": 16, "intermediate_size_mlp": 96, "num_local_experts": 2}),
     "cannot patch Llama4ForCausalLM: .*modeling_llama4 has no apply_rotary_pos_emb"),
    # DeepSeek V3 (rope_interleave, its default) calls apply_rotary_pos_emb_interleave
    (lambda: _tiny("deepseek_v3", **MLA),
     "cannot patch DeepseekV3ForCausalLM: .*apply_rotary_pos_emb and pyrope's interleaved rotation"),
    (lambda: _tiny("qwen2_vl_text", auto=transformers.AutoModel,
                   **{**BASE, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}),
     "cannot patch Qwen2VLTextModel: multimodal rotary positions"),
])
def test_refused(make, message):
    model = make()
    with pytest.raises(pyrope.errors.ValueError, match=message):
        hf_patch.patch(model)
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_misuse():
    model = build("llama")
    with pytest.raises(pyrope.errors.TypeError, match=r"torch.nn.Module\), got dict"):
        hf_patch.patch({})
    with pytest.raises(ValueError, match="this LlamaForCausalLM is not patched"):
        hf_patch.unpatch(model)
    p = hf_patch.patch(model)
    with pytest.raises(ValueError, match="already patched"):
        hf_patch.patch(model)
    p.unpatch()
    with pytest.raises(ValueError, match="not patched"):
        p.unpatch()


def test_bfloat16_model_rotates_with_pyrope():
    """bfloat16 weights: transformers rounds its tables to bfloat16, pyrope rotates with float32
    rows and rounds once, so only the order of magnitude is compared; pyrope must do every call."""
    model_type, keys = CASES["llama"]
    config = transformers.AutoConfig.for_model(model_type, **{**BASE, **keys})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    ids, _ = prompts()
    with torch.no_grad():
        ref = model(ids).logits.float()
        with hf_patch.patch(model) as p:
            got = model(ids).logits.float()
    assert p.calls == model.config.num_hidden_layers and p.fallbacks == 0
    assert float((ref - got).abs().max()) <= 0.05 * float(ref.abs().max())


@pytest.mark.parametrize("case", ["llama", "phi3", "glm", "gptj"])
def test_training_gradients_match(case):
    """With grad enabled pyrope rotates through autograd (backward: the inverse rotation): every
    parameter's gradient of the loss within 2**-15 of its largest entry (measured: up to 7.1e-6,
    the float32 noise of these models' backward passes)."""
    ids, mask = prompts()

    def gradients(model):
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}

    ref = gradients(build(case))
    model = build(case)
    with hf_patch.patch(model) as p:
        got = gradients(model)
    assert p.calls == (2 if case == "gptj" else 1) * model.config.num_hidden_layers and p.fallbacks == 0
    assert ref.keys() == got.keys()
    for name, g in ref.items():
        rel = float((g - got[name]).abs().max()) / float(g.abs().max())
        assert rel <= 2.0 ** -15, f"{name}: {rel:.3g}"


def test_readme_example():
    """README's "A transformers model" example runs as written."""
    (block,) = readme_blocks.code_blocks("### A transformers model")
    exec(compile(block, "README example", "exec"), {})


if __name__ == "__main__":
    # python tests/interop/test_transformers_patch.py: each case's largest logit difference, relative to the
    # largest logit: patched vs transformers, and transformers' own apply function on pyrope's exact
    # tables vs transformers (the same rotation with other float32 roundings: the model's noise)
    torch.set_num_threads(1)
    for case in CASES:
        t0 = time.perf_counter()
        ref = run(build(case))
        model = build(case)
        with hf_patch.patch(model):
            got = run(model)
        with hf_patch.patch(model):
            rotate = _hf_rotary.Rotation.qk, _hf_rotary.Rotation.one
            _hf_rotary.Rotation.qk = _hf_rotary.Rotation.one = lambda *args: None  # always fall back
            try:
                own = run(model)
            finally:
                _hf_rotary.Rotation.qk, _hf_rotary.Rotation.one = rotate
        scale = max(float(ref["logits"].abs().max()), float(ref["steps"].abs().max()))
        print(f"{case:16s} max |logit| {scale:7.3f}  patched: {difference(ref, got) * scale:.3g} "
              f"({difference(ref, got):.3g} relative)  own apply on exact tables: {difference(ref, own):.3g} "
              f"relative  tokens equal {torch.equal(ref['tokens'], got['tokens'])}  {time.perf_counter() - t0:.2f} s")
