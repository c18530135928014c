"""Context parallelism of a Llama: rank ``r`` of ``world`` holds the ``r``-th
contiguous chunk of the sequence and runs the whole model on it, with the
chunk's *global* position ids. Attention needs every key: the attention
function registered as :data:`NAME` gathers the already-rotated k (and v)
of all ranks' chunks, in rank order (the whole sequence), and masks by
global index, causal and padding, before torch's sdpa."""
import torch
import torch.distributed as dist
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "pyrope_test_context_parallel"


def chunk_of(rank, world, length):
    """The token indices rank ``rank`` holds (``length`` must split evenly)."""
    if length % world:
        raise ValueError(f"{length} tokens do not split over {world} ranks")
    share = length // world
    return slice(rank * share, (rank + 1) * share)


class ContextParallelAttention:
    """An attention function (transformers' signature) for one rank: set
    :attr:`padding` (the whole batch's ``[batch, length]`` attention mask, which
    every rank has) and :attr:`start` (the chunk's first global index) before
    the forward. Records each layer's q and local k into ``layers``."""

    def __init__(self, layers, group=None):
        self.layers, self.group = layers, group
        self.padding = self.start = None

    def gather(self, x):
        """The chunks of every rank, in rank order, along the sequence axis."""
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=2)

    def mask(self, q_length, kv_length):
        """``[batch, 1, q, kv]``: key j is seen by query i (global indices) when j <= i and j is no padding."""
        q = torch.arange(self.start, self.start + q_length)
        kv = torch.arange(kv_length)
        causal = kv[None, :] <= q[:, None]
        return causal[None, None] & self.padding.bool()[:, None, None, :]

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        # transformers builds no mask for an attention it does not know: the mask is ours
        assert attention_mask is None, "a mask was built for the chunk alone"
        self.layers.put(module.layer_idx, q=query, k=key)
        keys, values = self.gather(key), self.gather(value)
        return sdpa_attention_forward(module, query, keys, values, self.mask(query.shape[2], keys.shape[2]),
                                      **kwargs)


def register(attention):
    """Make :data:`NAME` run ``attention``."""
    AttentionInterface.register(NAME, attention)
