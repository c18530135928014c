"""The ropes pickled by pyrope 0.2.0 (tests/data/ropes_0.2.0.pickle), each
built here again by its public constructor."""
import numpy as np

import pyrope
from pyrope import Rope

DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
            "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "max_position_embeddings": 163840,
            "rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32.0,
                                                    "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                    "original_max_position_embeddings": 4096}}
GPTJ = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048}


def build():
    """{name: rope}, as 0.2.0 built them."""
    return {
        "plain split_half": Rope(128, layout="split_half"),
        "interleaved base 5e5 partial": Rope(128, layout="interleaved", base=500000.0, rotary_dim=64),
        "yarn": Rope(128, layout="split_half", scaling={"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 4096}),
        "llama3": Rope(128, layout="split_half", base=500000.0,
                       scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "explicit inv_freq, base 5e5": Rope(8, layout="split_half", base=500000.0,
                                            scaling=pyrope.Resolved(inv_freq=np.array([1.0, 0.5, 0.25, 0.125]), attention_factor=1.5,
                                                                    rule="custom", params={})),
        "mrope": Rope(128, layout="split_half", base=1000000.0, mrope_section=[16, 24, 24]),
        "mrope interleaved": Rope(128, layout="split_half", mrope_section=[24, 20, 20], mrope_interleaved=True),
        "deepseek config": Rope.from_hf_config(DEEPSEEK),
        "gptj config": Rope.from_hf_config(GPTJ),
    }


def used(ropes):
    """The same ropes after calls that fill their row caches (float32 and float64)."""
    for rope in ropes.values():
        x = np.ones((1, 4, 1, rope.head_dim), np.float32)
        rope.apply(x, offset=3)
        rope.apply(x.astype(np.float64), offset=100)
    return ropes
