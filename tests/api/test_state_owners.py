"""One owner per piece of state: only ``pyrope/rope.py`` writes a Rope's slots
(config and GGUF readers return arguments), and the tools read the resolved
rule through the public, copied ``Rope.resolved``."""
import ast
import pathlib

import numpy as np

import pyrope
from pyrope import Rope

PACKAGE = pathlib.Path(pyrope.__file__).parent


def test_no_module_but_rope_writes_a_ropes_slots():
    slots = set(Rope.__slots__)
    writes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "rope.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and t.attr in slots and not (
                            isinstance(t.value, ast.Name) and t.value.id == "self"):
                        writes.append(f"{path.relative_to(PACKAGE)}:{t.lineno} .{t.attr}")
    assert not writes, writes


def test_no_module_but_rope_reads_the_private_resolved_rule():
    reads = [f"{p.relative_to(PACKAGE)}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "rope.py" and "._resolved" in p.read_text()]
    assert not reads, reads


def test_resolved_is_a_copy_of_the_rule():
    rope = Rope(64, layout="split_half", scaling={"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 4096})
    view = rope.resolved
    assert view.rule == "yarn" and view.original_window == 4096 and view.target_window == 16384
    assert np.array_equal(view.inv_freq, rope.inv_freq) and not view.inv_freq.flags.writeable
    assert view.attention_factor == rope.attention_factor
    before = rope.fingerprint
    view.params["factor"] = 99.0
    assert rope.resolved.params["factor"] == 4.0 and rope.contract()["params"]["factor"] == 4.0
    assert Rope(64, layout="split_half", scaling=rope.resolved).inv_freq.tobytes() == rope.inv_freq.tobytes()
    assert rope.fingerprint == before


def test_config_readers_return_arguments_the_rope_records():
    config = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
              "qk_rope_head_dim": 64, "max_position_embeddings": 163840, "rope_theta": 10000.0,
              "rope_scaling": {"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                               "original_max_position_embeddings": 4096}}
    rope = Rope.from_hf_config(config)
    assert rope.softmax_scale_factor == pyrope.config.softmax_scale_factor_from_hf_config(config)
    assert (rope.layout, rope.layout_source) == pyrope.config.layout_from_hf_config(config)
    [layer] = set(pyrope.config.layer_ropes({**config, "num_hidden_layers": 3}))
    assert layer.fingerprint == rope.fingerprint and layer.softmax_scale_factor == rope.softmax_scale_factor
