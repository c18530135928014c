"""A decode step over a paged KV cache, as a CPU backend runs it with pyrope,
against transformers' own attention modules.

The backend is the first block of docs/BACKENDS.md's section "A decode step over
a paged cache", run here as written: per layer it projects q, k and v with the
model's Linear weights, normalises and rotates q with ``Rope.apply(norm=)``,
writes k (normalised and rotated) and v into a paged cache with
``Rope.cache_write(norm=)`` through out-of-order block tables, and attends over
the cache through the tables (GQA, causal, the model's scale and sliding window,
softmax in float64), then o_proj. Tiny random-weight models of the three QK-norm
families (Qwen3: per head; Gemma 3: per head, scale ``1 + weight``; OLMo 2:
across the token's heads), float32, eager attention: two sequences share one
pool, both prompts are prefilled, then each decode step carries one token of
each sequence. Every layer's output is compared with what the model's own
``self_attn`` gave for the same input, with transformers' ``DynamicCache`` and
position ids (hooks on a plain forward of the model), and the cache's keys and
values with that ``DynamicCache``'s.

Without transformers (or torch) every test skips. That the cache holds what
``Rope.apply`` gives, bit for bit, whatever the slots, is tests/api/test_cache_write.py's."""
import pathlib

import ml_dtypes
import numpy as np
import pytest

import pyrope
import readme_blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = "## A decode step over a paged cache"
BF16 = np.dtype(ml_dtypes.bfloat16)

# Tolerances, relative to the largest value compared (one layer's output for one call,
# or one layer's keys or values):
# - float32 caches: 1e-5. transformers and the backend round differently at every step
#   (torch's and numpy's matmul summation orders; the norm in float32 there, in float64
#   rounded once here; cos/sin from float32 angles there, exact here; softmax in float32
#   there, float64 here), each a few float32 ulps (1.2e-7). Measured on an Intel Xeon
#   (family 6 model 167, avx512bf16), NHD and HND alike: outputs 4.4e-7 (Qwen3), 3.5e-7
#   (Gemma 3), 3.5e-7 (OLMo 2; 2.7e-7 with torch tensors); cached keys and values 3.2e-7,
#   3.0e-7, 2.8e-7.
# - bfloat16 caches, against transformers in float32: bfloat16 keeps 8 significant bits,
#   so each stored key and value is within 2^-8 of itself (checked per element, with the
#   float32 tolerance on top; measured 3.9e-3 at most, per element); the output mixes those
#   errors: 1e-2. Measured: outputs 3.7e-3 (Qwen3), 2.4e-3 (Gemma 3), 2.4e-3 (OLMo 2, numpy
#   and torch).
TOL32 = 1e-5
TOL_BF16_OUT = 1e-2
BF16_HALF_ULP = 2.0 ** -8

FAMILIES = ("qwen3", "gemma3", "olmo2")
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 64, 4, 2, 16, 2
PROMPTS, STEPS = (7, 5), 4                   # two sequences: prompt lengths, then decode steps
BLOCK_SIZE, NUM_BLOCKS = 4, 8
BLOCK_TABLES = (np.array([5, 2, 7]), np.array([0, 6, 3]))   # out of order, interleaved in one pool
GEMMA_WINDOW = 5                             # below the sequences' 11 and 9 tokens: the window matters


def backend():
    """The namespace of the section's first python block, run as written (a traceback points
    into docs/BACKENDS.md)."""
    path = ROOT / "docs" / "BACKENDS.md"
    blocks = [b for b in readme_blocks.fenced_blocks(path) if b.section == SECTION and b.language == "python"]
    assert blocks, f"docs/BACKENDS.md has no python block under {SECTION!r}"
    namespace = {"__name__": "decode_step_backend"}
    exec(compile("\n" * (blocks[0].line - 1) + blocks[0].text, str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def ns():
    return backend()


# ---- the models and what transformers computes --------------------------------------------

def tiny_model(family, head_dim=HEAD_DIM):
    """(config, model): 2 layers, 4 query and 2 kv heads of head_dim (16; 32 for q8_0
    caches, whose blocks hold 32 values), random weights (norms too), float32, eager attention."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    common = dict(vocab_size=64, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=head_dim,
                  max_position_embeddings=128, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, attn_implementation="eager")
    if family == "qwen3":
        config = transformers.Qwen3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        model = transformers.Qwen3Model(config)
    elif family == "gemma3":
        # a sliding layer (its own base, a window shorter than the sequences) and a full
        # one (linear scaling, as Gemma 3 4B and up); the softmax scale is
        # query_pre_attn_scalar**-0.5, not head_dim**-0.5
        config = transformers.Gemma3TextConfig(
            **common, query_pre_attn_scalar=24, sliding_window=GEMMA_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}})
        model = transformers.Gemma3TextModel(config)
    else:
        config = transformers.Olmo2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
        model = transformers.Olmo2Model(config)
    assert config._attn_implementation == "eager"
    gen = torch.Generator().manual_seed(FAMILIES.index(family))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):   # initialised to ones (Gemma: zeros, scaling by 1 + weight)
                p.copy_((0.0 if family == "gemma3" else 1.0) + 0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))
    return config, model.eval()


def layers_of(ns, family, config, model):
    """The backend's Layer of each of the model's layers, as docs/BACKENDS.md's table reads them."""
    layers = []
    for i, block in enumerate(model.layers):
        attn = block.self_attn
        norm = dict(eps=config.rms_norm_eps)
        scale, window, layer_type = config.head_dim ** -0.5, None, None
        if family == "gemma3":
            norm["unit_offset"] = True
            scale = config.query_pre_attn_scalar ** -0.5
            layer_type = config.layer_types[i]
            window = config.sliding_window if layer_type == "sliding_attention" else None
        elif family == "olmo2":
            norm["over"] = "token"

        def weight(linear):
            return linear.weight.detach().numpy()
        layers.append(ns["Layer"](pyrope.Rope.from_hf_config(config, layer_type=layer_type),
                                  weight(attn.q_proj), weight(attn.k_proj), weight(attn.v_proj), weight(attn.o_proj),
                                  pyrope.RMSNorm(attn.q_norm.weight, **norm), pyrope.RMSNorm(attn.k_norm.weight, **norm),
                                  scale, window))
    return layers


def transformers_run(model, ids):
    """One sequence through transformers: its prompt, then one token a step. Returns
    ([call][layer] (self_attn's input, its output), both [tokens, hidden] float32 numpy),
    and the DynamicCache."""
    import torch
    import transformers
    seen = {}

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        seen[module.layer_idx] = (hidden[0].numpy().copy(), output[0][0].numpy().copy())
    handles = [block.self_attn.register_forward_hook(hook, with_kwargs=True) for block in model.layers]
    cache = transformers.DynamicCache(config=model.config)
    calls = []
    try:
        with torch.no_grad():
            prompt = len(ids) - STEPS
            for chunk in [ids[:prompt]] + [ids[t:t + 1] for t in range(prompt, len(ids))]:
                seen.clear()
                model(input_ids=torch.tensor(chunk)[None], cache=cache, use_cache=True)
                calls.append([seen[i] for i in range(len(model.layers))])
    finally:
        for h in handles:
            h.remove()
    return calls, cache


_RUNS = {}


def reference(ns, family, head_dim=HEAD_DIM):
    """(layers, [per sequence (calls, DynamicCache)]) of one family, made once per module run."""
    if (family, head_dim) not in _RUNS:
        config, model = tiny_model(family, head_dim)
        rng = np.random.default_rng(7)
        runs = [transformers_run(model, rng.integers(0, config.vocab_size, n + STEPS).tolist()) for n in PROMPTS]
        _RUNS[family, head_dim] = (layers_of(ns, family, config, model), runs)
    return _RUNS[family, head_dim]


# ---- the backend, step by step --------------------------------------------------------------

def new_caches(layers, layout, dtype):
    shape = ((NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM) if layout == "NHD"
             else (NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, HEAD_DIM))
    return [(np.zeros(shape, dtype), np.zeros(shape, dtype)) for _ in layers]


def run_backend(ns, layers, runs, layout, dtype, caches=None, scales=None):
    """The prefills (one call per sequence), then STEPS decode calls with one token of each
    sequence, per layer on the input transformers' layer had. Returns the caches and
    [(what the backend gave, what transformers gave)] per call and layer. ``caches`` and
    ``scales`` (per layer (k, v)): quantised caches and their k_scale/v_scale."""
    caches = new_caches(layers, layout, dtype) if caches is None else caches
    scales = [(None, None)] * len(layers) if scales is None else scales
    pairs = []
    for s, (calls, _) in enumerate(runs):
        for i, (h, want) in enumerate(calls[0]):
            n = h.shape[0]
            got = ns["attention"](layers[i], h, *caches[i], BLOCK_TABLES, [s] * n, np.arange(n), layout, *scales[i])
            pairs.append((got, want))
    for step in range(STEPS):
        positions = [n + step for n in PROMPTS]
        for i, layer in enumerate(layers):
            h = np.concatenate([runs[s][0][1 + step][i][0] for s in range(len(runs))])
            want = np.concatenate([runs[s][0][1 + step][i][1] for s in range(len(runs))])
            got = ns["attention"](layer, h, *caches[i], BLOCK_TABLES, list(range(len(runs))), positions, layout,
                                  *scales[i])
            pairs.append((got, want))
    return caches, pairs


def gathered(ns, cache, table, positions, layout, scale=None):
    """A sequence's [kv_heads, len(positions), head_dim] of one cache, through its block table,
    in float64 (a quantised cache dequantised by the section's ``read``)."""
    blocks, within = np.divmod(ns["slots"](table, positions, BLOCK_SIZE), BLOCK_SIZE)
    return ns["read"](cache, scale, blocks, within, layout).transpose(1, 0, 2)


def worst(pairs):
    return max(float(np.abs(got - want).max() / np.abs(want).max()) for got, want in pairs)


# ---- against transformers --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_step_matches_transformers(ns, family, layout, dtype):
    layers, runs = reference(ns, family)
    caches, pairs = run_backend(ns, layers, runs, layout, dtype)
    tolerance = TOL32 if dtype == np.float32 else TOL_BF16_OUT
    for got, want in pairs:
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * np.abs(want).max())

    # the cache holds transformers' keys (normalised, rotated) and values, at their
    # positions, through the block tables; a sliding layer's DynamicCache keeps only its
    # last tokens, compared with the same positions here
    for s, (_, cache) in enumerate(runs):
        total = PROMPTS[s] + STEPS
        for i, (k_cache, v_cache) in enumerate(caches):
            for ours, theirs in ((k_cache, cache.layers[i].keys), (v_cache, cache.layers[i].values)):
                theirs = theirs[0].numpy().astype(np.float64)          # [kv_heads, tokens kept, head_dim]
                positions = np.arange(total - theirs.shape[1], total)
                got = gathered(ns, ours, BLOCK_TABLES[s], positions, layout)
                bound = TOL32 * np.abs(theirs).max()
                if dtype != np.float32:
                    bound = bound + BF16_HALF_ULP * np.abs(theirs)
                assert (np.abs(got - theirs) <= bound).all(), (family, layout, s, i)


# ---- quantised caches ---------------------------------------------------------------------

QUANT_KINDS = ("int8", "float8_e4m3fn", "q8_0")
FP8_SCALE = 2.0 ** -5   # a static scale per cache: e4m3's +-448 covers +-14, its normal range down to 2^-11
# Tolerance of the outputs against transformers in float32, relative to the largest output
# (each quantised key and value within the bound quant_bound checks, the softmax and o_proj
# mixing those errors): int8 and q8_0 keep 8 bits per head or block of 32, float8 e4m3 4
# significant bits per value. Measured (Intel Xeon family 6 model 167, avx512bf16, NHD and HND):
# int8 9.7e-3 (Qwen3), 5.7e-3 (Gemma 3), 7.3e-3 (OLMo 2); float8 7.0e-2, 3.6e-2, 4.9e-2;
# q8_0 8.3e-3, 9.3e-3, 1.0e-2.
TOL_QUANT_OUT = {"int8": 3e-2, "float8_e4m3fn": 1e-1, "q8_0": 3e-2}


def quant_caches(layers, layout, kind, head_dim):
    """Per layer ((k_cache, v_cache), (k_scale, v_scale)) of one quantised kind."""
    token = (NUM_BLOCKS, BLOCK_SIZE, KV_HEADS) if layout == "NHD" else (NUM_BLOCKS, KV_HEADS, BLOCK_SIZE)
    out = []
    for _ in layers:
        if kind == "int8":
            pair = tuple(np.zeros(token + (head_dim,), np.int8) for _ in range(2))
            out.append((pair, tuple(np.zeros(token, np.float32) for _ in range(2))))
        elif kind == "float8_e4m3fn":
            pair = tuple(np.zeros(token + (head_dim,), ml_dtypes.float8_e4m3fn) for _ in range(2))
            out.append((pair, (FP8_SCALE, FP8_SCALE)))
        else:
            pair = tuple(np.zeros(token + (head_dim // 32,), pyrope.Q8_0) for _ in range(2))
            out.append((pair, (None, None)))
    return out


def quant_bound(kind, theirs):
    """How far a stored value may lie from transformers' float32 value ``theirs`` [heads, tokens,
    head_dim]: half a quantisation step, from the formulas (int8: s / 2 with s = amax / 127
    per head; q8_0: d / 2 per block of 32, plus d's rounding to float16, 2^-11 of 127 steps,
    bounded with the head's amax; float8 e4m3: half an ulp of 3 mantissa bits, 2^-4 of the
    value, or 2^-10 * scale among subnormals), plus the float32 tolerance."""
    amax = np.abs(theirs).max(axis=-1, keepdims=True)
    if kind == "int8":
        step = amax / 254
    elif kind == "q8_0":
        step = amax * (1 / 254 + 2.0 ** -11)
    else:
        step = np.maximum(np.abs(theirs) * 2.0 ** -4, 2.0 ** -10 * FP8_SCALE)
    return step * 1.001 + TOL32 * np.abs(theirs).max()


@pytest.mark.parametrize("kind", QUANT_KINDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_step_over_quantised_caches(ns, family, layout, kind):
    """The same step over int8, float8 e4m3 and q8_0 caches (heads of 32 for q8_0):
    every stored key and value within half a quantisation step of transformers' own, the
    outputs within TOL_QUANT_OUT."""
    head_dim = 32 if kind == "q8_0" else HEAD_DIM
    layers, runs = reference(ns, family, head_dim)
    quant = quant_caches(layers, layout, kind, head_dim)
    caches, pairs = run_backend(ns, layers, runs, layout, None, [c for c, _ in quant], [s for _, s in quant])
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL_QUANT_OUT[kind] * np.abs(want).max())
    for s, (_, cache) in enumerate(runs):
        total = PROMPTS[s] + STEPS
        for i, ((k_cache, v_cache), (k_scale, v_scale)) in enumerate(quant):
            for ours, scale, theirs in ((k_cache, k_scale, cache.layers[i].keys),
                                        (v_cache, v_scale, cache.layers[i].values)):
                theirs = theirs[0].numpy().astype(np.float64)
                positions = np.arange(total - theirs.shape[1], total)
                got = gathered(ns, ours, BLOCK_TABLES[s], positions, layout, scale)
                assert (np.abs(got - theirs) <= quant_bound(kind, theirs)).all(), (family, layout, kind, s, i)


MUTATIONS = {
    # Gemma 3 scales by 1 + weight: the plain weight is another norm
    "gemma3 norm without unit_offset": ("gemma3", lambda layer: dict(
        q_norm=pyrope.RMSNorm(layer.q_norm.weight, eps=layer.q_norm.eps),
        k_norm=pyrope.RMSNorm(layer.k_norm.weight, eps=layer.k_norm.eps))),
    "qwen3 rope interleaved": ("qwen3", lambda layer: dict(
        rope=pyrope.Rope(HEAD_DIM, layout="interleaved", base=1e6))),
    "olmo2 keys not normalised": ("olmo2", lambda layer: dict(k_norm=None)),
    "qwen3 softmax scale of head_dim 64": ("qwen3", lambda layer: dict(scale=64 ** -0.5)),
    "gemma3 sliding window left out": ("gemma3", lambda layer: dict(window=None)),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_the_comparison_sees_a_wrong_step(ns, mutation):
    """Each mistake a backend could make moves the output far past the tolerance: the
    comparison above is not blind to it."""
    import dataclasses
    family, change = MUTATIONS[mutation]
    layers, runs = reference(ns, family)
    wrong = [dataclasses.replace(layer, **change(layer)) for layer in layers]
    _, pairs = run_backend(ns, wrong, runs, "NHD", np.float32)
    assert worst(pairs) > 1000 * TOL32, mutation


@pytest.mark.parametrize("cache_dtype", ["float32", "bfloat16"])
def test_torch_tensors_through_the_same_step(ns, cache_dtype):
    """A backend holding torch tensors: q rotated and the caches (torch.float32 or
    torch.bfloat16, HND) written in their own storage, slot_mapping and positions as
    tensors; attention through the block tables with the section's ``attend``."""
    torch = pytest.importorskip("torch")
    layers, runs = reference(ns, "olmo2")
    shape = (NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, HEAD_DIM)
    dtype = getattr(torch, cache_dtype)
    caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in layers]
    pointers = [(k.data_ptr(), v.data_ptr()) for k, v in caches]

    def step(i, h, seq_ids, positions):
        layer, (k_cache, v_cache) = layers[i], caches[i]
        h = torch.from_numpy(h)
        n = h.shape[0]
        q = torch.nn.functional.linear(h, torch.from_numpy(layer.wq)).view(n, HEADS, HEAD_DIM)
        k = torch.nn.functional.linear(h, torch.from_numpy(layer.wk)).view(n, KV_HEADS, HEAD_DIM)
        v = torch.nn.functional.linear(h, torch.from_numpy(layer.wv)).view(n, KV_HEADS, HEAD_DIM)
        positions = torch.tensor(positions, dtype=torch.int64)
        slot_mapping = torch.tensor([int(ns["slots"](BLOCK_TABLES[s], int(p), BLOCK_SIZE))
                                     for s, p in zip(seq_ids, positions)])
        q = layer.rope.apply(q, positions, norm=layer.q_norm)
        assert isinstance(q, torch.Tensor)
        written = layer.rope.cache_write(k, v, k_cache, v_cache, slot_mapping, positions=positions,
                                         norm=layer.k_norm, layout="HND")
        assert written[0] is k_cache and written[1] is v_cache
        kc, vc = k_cache.float().numpy(), v_cache.float().numpy()
        out = np.stack([ns["attend"](q[t].numpy(), kc, vc, ns["slots"](BLOCK_TABLES[s], np.arange(int(p) + 1),
                                                                     BLOCK_SIZE), layer.scale, "HND")
                        for t, (s, p) in enumerate(zip(seq_ids, positions))])
        return (torch.from_numpy(out.reshape(n, -1)) @ torch.from_numpy(layer.wo).double().T).float().numpy()

    pairs = []
    for s, (calls, _) in enumerate(runs):
        for i, (h, want) in enumerate(calls[0]):
            pairs.append((step(i, h, [s] * h.shape[0], list(range(h.shape[0]))), want))
    for t in range(STEPS):
        for i in range(len(layers)):
            h = np.concatenate([runs[s][0][1 + t][i][0] for s in range(2)])
            want = np.concatenate([runs[s][0][1 + t][i][1] for s in range(2)])
            pairs.append((step(i, h, [0, 1], [n + t for n in PROMPTS]), want))
    tolerance = TOL32 if cache_dtype == "float32" else TOL_BF16_OUT
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * np.abs(want).max())
    assert pointers == [(k.data_ptr(), v.data_ptr()) for k, v in caches]
