"""A tiny random-weight Qwen2-VL text model run twice on one text+image prompt:
once as transformers computes it, once with its rotary application replaced by
pyrope's (sections, positions from pyrope.multimodal_positions). The hidden
states must agree to float32 rounding, and must not with the sections left out."""
import numpy as np
import pytest

import pyrope


@pytest.fixture(scope="module")
def model():
    import torch
    from transformers.models.qwen2_vl import modeling_qwen2_vl as mod
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    config = Qwen2VLTextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                "mrope_section": [2, 3, 3]},
                               bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    torch.manual_seed(0)
    return mod, mod.Qwen2VLTextModel(config).eval()


def _run(mod, net, ids, positions, rope=None, monkeypatch=None, rope_positions=None):
    import torch
    if rope is not None:
        rope_positions = positions if rope_positions is None else rope_positions

        def apply_with_pyrope(q, k, cos, sin, unsqueeze_dim=1):   # q, k: [batch, heads, seq, dim]
            q2, k2 = rope.apply_qk(q.detach().numpy(), k.detach().numpy(), rope_positions, seq_axis=-2)
            return torch.from_numpy(q2), torch.from_numpy(k2)
        monkeypatch.setattr(mod, "apply_rotary_pos_emb", apply_with_pyrope)
    with torch.no_grad():
        out = net(input_ids=torch.from_numpy(ids), position_ids=torch.from_numpy(positions)).last_hidden_state
    return out.numpy()


def test_tiny_qwen2_vl_text_model_with_pyrope_rotation(model, monkeypatch):
    mod, net = model
    positions, next_position = pyrope.multimodal_positions([("text", 3), ("image", 2, 3, 4), ("text", 5)])
    n = positions.shape[1]
    ids = np.random.default_rng(0).integers(0, 100, size=(1, n))
    pos = np.ascontiguousarray(positions[:, None, :])                 # [3, batch, seq]
    want = _run(mod, net, ids, pos)
    rope = pyrope.Rope(16, layout="split_half", base=1e4, mrope_section=[2, 3, 3])
    with monkeypatch.context() as m:
        got = _run(mod, net, ids, pos, rope, m)
    assert np.max(np.abs(got - want)) < 1e-5 * max(1.0, np.max(np.abs(want)))
    with monkeypatch.context() as m:                                    # sections left out: wrong
        plain = _run(mod, net, ids, pos, pyrope.Rope(16, layout="split_half", base=1e4), m, pos[0])
    assert np.max(np.abs(plain - want)) > 1e-3
    assert next_position == int(positions.max()) + 1
