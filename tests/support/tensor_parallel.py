"""Tensor parallelism of a Llama's attention, Megatron's way: rank ``r`` of
``world`` keeps the ``r``-th contiguous group of the q heads and of the kv
heads (the rows of ``q_proj``, ``k_proj``, ``v_proj`` that make them), and the
matching input columns of ``o_proj``, whose partial products the ranks add
with ``all_reduce(SUM)``. The MLP, norms, embeddings and head stay replicated.
Every rank rotates its own heads at the same positions."""
import torch.distributed as dist
from torch import nn


def heads_of(rank, world, heads):
    """The heads rank ``rank`` holds, as a range (``heads`` must divide evenly)."""
    if heads % world:
        raise ValueError(f"{heads} heads do not split over {world} ranks")
    share = heads // world
    return range(rank * share, (rank + 1) * share)


def _rows(heads, head_dim):
    return slice(heads.start * head_dim, heads.stop * head_dim)


def _linear(weight):
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    layer.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
    return layer


class RowParallelLinear(nn.Module):
    """``o_proj`` on this rank's input columns, its partial products summed over the ranks."""

    def __init__(self, weight, group=None):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.group = group

    def forward(self, x):
        y = nn.functional.linear(x, self.weight)
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=self.group)
        return y


class GroupedLinear(nn.Module):
    """The unsharded ``o_proj`` summing its input columns in the ranks' groups,
    as :class:`RowParallelLinear` does on ``world`` ranks: one partial product
    per rank, added in rank order. For two ranks this is the all-reduce's sum
    bit for bit (float addition commutes); a plain ``o_proj`` sums all columns
    at once and differs from it by rounding."""

    def __init__(self, weight, world, head_dim):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        heads = weight.shape[1] // head_dim
        self.columns = [_rows(heads_of(r, world, heads), head_dim) for r in range(world)]

    def forward(self, x):
        parts = [nn.functional.linear(x[..., c], self.weight[:, c]) for c in self.columns]
        out = parts[0]
        for part in parts[1:]:
            out = out + part
        return out


def shard(model, rank, world, group=None):
    """Keep rank ``rank``'s heads in every attention layer of ``model`` (in place)."""
    config = model.config
    for layer in model.model.layers:
        attn = layer.self_attn
        d = attn.head_dim
        q = _rows(heads_of(rank, world, config.num_attention_heads), d)
        kv = _rows(heads_of(rank, world, config.num_key_value_heads), d)
        attn.q_proj = _linear(attn.q_proj.weight[q])
        attn.k_proj = _linear(attn.k_proj.weight[kv])
        attn.v_proj = _linear(attn.v_proj.weight[kv])
        attn.o_proj = RowParallelLinear(attn.o_proj.weight[:, q], group)
    return model


def group_sums(model, world):
    """Make every ``o_proj`` of the unsharded ``model`` a :class:`GroupedLinear` (in place)."""
    for layer in model.model.layers:
        attn = layer.self_attn
        attn.o_proj = GroupedLinear(attn.o_proj.weight, world, attn.head_dim)
    return model
