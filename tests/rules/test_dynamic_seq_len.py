"""dynamic_seq_len against transformers' own dynamic NTK, call by call: the rotary
modules of transformers (the pinned version) keep a length across calls
(``dynamic_rope_update``); after each call the length the module kept must be
the one dynamic_seq_len returns, and pyrope's rope for that length must have the
module's frequencies. Lengths grow, stay, drop below the window and back."""
import numpy as np
import pytest

import pyrope
from pyrope import errors
from pyrope._rules.dynamic import dynamic_seq_len
from hf_peer import torch_and_transformers

WINDOW = 32
# (kind, length): a prefill of positions 0..n-1, a single decode token at n-1, or a
# left-padded batch of two whose longer row ends at n-1 (transformers takes the max over the batch)
CALLS = [("prefill", 5), ("prefill", 40), ("decode", 41), ("prefill", 33), ("decode", 32), ("prefill", 31),
         ("decode", 50), ("batch", 45), ("prefill", 10), ("decode", 32), ("batch", 33), ("prefill", 1),
         ("decode", 100), ("prefill", 64), ("batch", 20), ("decode", 33)]


def position_ids(torch, kind, n):
    if kind == "prefill":
        return torch.arange(n)[None]
    if kind == "decode":
        return torch.tensor([[n - 1]])
    pad = min(3, n - 1)
    return torch.stack([torch.arange(n), torch.clamp(torch.arange(n) - pad, min=0)])


def same_frequencies(rope, inv_freq):
    """pyrope's float64 frequencies against transformers' float32 ones: float32 rounding
    apart (a wrong length changes the base, and every frequency but the first, by far more)."""
    theirs = inv_freq.double().numpy()
    return np.allclose(rope.inv_freq, theirs, rtol=4 * 2.0 ** -24, atol=0)


def test_the_documented_sequence():
    state, seen = None, []
    for n in (100, 5000, 4500, 4096, 100, 4500):
        state = dynamic_seq_len(state, n, 4096)
        seen.append(state)
    assert seen == [4096, 5000, 5000, 5000, 4096, 4500]


def test_llama_rotary_module_call_by_call():
    torch, transformers = torch_and_transformers("comparing with transformers' dynamic NTK")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=WINDOW,
                                      rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    module = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, 1, 16)
    state, grown, reset = None, 0, 0
    for kind, n in CALLS:
        before = state
        module(x, position_ids(torch, kind, n))
        state = dynamic_seq_len(state, n, WINDOW)
        assert int(module.max_seq_len_cached) == state, (kind, n)
        rope = pyrope.Rope.from_hf_config(config, seq_len=state)
        assert same_frequencies(rope, module.inv_freq), (kind, n, state)
        grown += before is not None and state > before
        reset += before is not None and before > WINDOW and state == WINDOW
        # the length of the call alone is not what transformers uses, once it has grown
        if state != max(n, WINDOW):
            assert not same_frequencies(pyrope.Rope.from_hf_config(config, seq_len=n), module.inv_freq)
    assert grown >= 4 and reset >= 2   # the sequence exercises every branch


def test_per_layer_type_state_is_kept_per_type():
    """Gemma 3's rotary module keeps one length per layer type ({type}_max_seq_len_cached)."""
    torch, transformers = torch_and_transformers("comparing with transformers' dynamic NTK")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
    config = transformers.Gemma3TextConfig(
        hidden_size=64, num_attention_heads=4, head_dim=16, num_hidden_layers=2, max_position_embeddings=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}})
    module = Gemma3RotaryEmbedding(config)
    x = torch.zeros(1, 1, 16)
    states = {"full_attention": None, "sliding_attention": None}
    for i, (kind, n) in enumerate(CALLS):
        # the two types see different calls: their states part ways
        layer_type = "full_attention" if i % 3 else "sliding_attention"
        module(x, position_ids(torch, kind, n), layer_type)
        states[layer_type] = dynamic_seq_len(states[layer_type], n, WINDOW)
        for t, state in states.items():
            kept = getattr(module, f"{t}_max_seq_len_cached", module.max_seq_len_cached)
            assert int(kept) == (WINDOW if state is None else state), (i, t)
            rope = pyrope.Rope.from_hf_config(config, seq_len=state, layer_type=t)
            assert same_frequencies(rope, getattr(module, f"{t}_inv_freq")), (i, t, state)


@pytest.mark.parametrize("args,error,needle", [
    ((None, 0, 32), errors.ValueError, "seq_len"),
    ((None, 10, 0), errors.ValueError, "original"),
    ((16, 10, 32), errors.ValueError, "previous"),
    ((None, 10.0, 32), errors.TypeError, "seq_len"),
    ((None, True, 32), errors.TypeError, "seq_len"),
    ((None, 10, "32"), errors.TypeError, "original"),
    (("40", 10, 32), errors.TypeError, "previous"),
])
def test_bad_arguments_are_refused_naming_them(args, error, needle):
    with pytest.raises(error, match=needle):
        dynamic_seq_len(*args)


def test_it_is_public_beside_the_rule():
    assert pyrope.scaling.dynamic_seq_len is dynamic_seq_len
    assert "dynamic_seq_len" in pyrope.scaling.__all__
