"""A tiny random-weight Llama and a left-padded batch, built the same way in
every process that builds them: the ranks of the distributed tests and the
single-process run they are compared with (same config, same seed, so the
same weights bit for bit)."""
import torch
import transformers

CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "intermediate_size": 96, "max_position_embeddings": 64, "vocab_size": 128, "initializer_range": 0.3,
          "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
SEED = 0
LENGTH = 12    # tokens per row of the batch
PADDING = 4    # left padding of its second row


def build(attn_implementation="sdpa"):
    """The model, eval, float32, its attention run by ``attn_implementation``
    (a name transformers' ``AttentionInterface`` knows)."""
    config = transformers.AutoConfig.for_model("llama", **CONFIG)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return model.eval()


def positions_of(mask):
    """Position ids as ``generate`` derives them from an attention mask: the
    count of real tokens before each one, 0 on the padding."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def batch():
    """``(input_ids, attention_mask, position_ids)`` ``[2, LENGTH]``: row 1 left-padded by PADDING."""
    ids = torch.randint(3, CONFIG["vocab_size"], (2, LENGTH), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :PADDING] = 0
    ids[1, :PADDING] = CONFIG["pad_token_id"]
    return ids, mask, positions_of(mask)
