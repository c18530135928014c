"""What a Llama's attention layers compute around the rotation, per layer:
the projections' q and k before it (forward hooks on ``q_proj``/``k_proj``) and
the rotated q and k the attention function receives (a wrapper of that
function, registered with transformers' ``AttentionInterface``). The
comparisons of the distributed tests are made on these."""
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from pyrope.integrations.transformers import patch

SDPA = "pyrope_test_capture_sdpa"   # torch's sdpa, transformers' sdpa mask, q/k recorded


class Layers(dict):
    """layer index -> {"q_in", "k_in", "q", "k"}: ``[batch, heads, seq, head_dim]`` copies."""

    def put(self, layer, **tensors):
        self.setdefault(layer, {}).update({k: t.detach().clone() for k, t in tensors.items()})


def recording(attention, layers):
    """``attention`` (an attention function) recording the q and k it is given."""
    def record(module, query, key, value, attention_mask, **kwargs):
        layers.put(module.layer_idx, q=query, k=key)
        return attention(module, query, key, value, attention_mask, **kwargs)
    return record


def register_sdpa(layers):
    """Make :data:`SDPA` transformers' sdpa attention recording into ``layers``."""
    AttentionInterface.register(SDPA, recording(sdpa_attention_forward, layers))
    AttentionMaskInterface.register(SDPA, sdpa_mask)


def _projection_hook(layers, layer, name, head_dim):
    def hook(module, args, output):   # [batch, seq, heads * head_dim], as the attention views it
        b, s = output.shape[:2]
        layers.put(layer, **{name: output.view(b, s, -1, head_dim).transpose(1, 2)})
    return hook


def run(model, layers, **inputs):
    """The patched ``model``'s logits on ``inputs``, with every layer's q/k
    before and after the rotation put in ``layers`` (the attention function
    must record into it). Returns ``{"logits", "layers", "calls", "fallbacks"}``."""
    handles = []
    for index, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        for name, proj in (("q_in", attn.q_proj), ("k_in", attn.k_proj)):
            handles.append(proj.register_forward_hook(_projection_hook(layers, index, name, attn.head_dim)))
    layers.clear()
    try:
        with patch(model) as p, torch.no_grad():
            logits = model(**inputs, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return {"logits": logits, "layers": {i: dict(t) for i, t in layers.items()},
            "calls": p.calls, "fallbacks": p.fallbacks}
