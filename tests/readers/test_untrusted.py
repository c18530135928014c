"""Untrusted configs, contracts, rule arguments and counts through every entry point
that reads them (GGUF files: tests/readers/test_gguf_hostile.py).

Two classes, each swept over the public API as tests/api/test_hardening.py sweeps
array arguments:

- counts: every count or size a config, contract or argument states (layers, dense
  prefixes, patterns, head sizes, windows, factor lists, frequency vectors,
  positions) is checked against its limit before anything of that size is built:
  a result or a RopeError naming the key, refusals within a second, Python's
  allocations bounded whatever number is written;
- bare exceptions from dependencies: whatever value sits at a key (nested 700 or
  2000 deep (past Python's recursion limit), containing itself, a 5000-digit integer, NaN, a numpy array of 2**40
  entries, a string where a count belongs ...), only a RopeError leaves pyrope:
  never the RecursionError of copy.deepcopy, the IndexError, TypeError or
  OverflowError of a list or range built from the value, numpy's MemoryError, or
  the ValueError of printing a huge integer in a message.
"""
import contextlib
import io
import json
import math
import time
import tracemalloc

import numpy as np
import pytest

from bounded_call import measured
import pyrope
from pyrope import Rope, RopeError
from pyrope import check as pyrope_check
from pyrope import cli, config as C
from pyrope import scaling as S

# A refusal takes well under a second on a quiet machine; timed here with tracemalloc
# running (which slows Python several times) on a shared one, so the bound is generous:
# the work is bounded by the memory peak each case also checks, not by this.
SECONDS = 5.0
PAIRS = [1.0 + i / 32 for i in range(32)]   # one factor per pair of a 64-wide head

# ---- configs of every family whose reader takes counts; each valid as written ---------------

BASES = {
    "llama": {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
              "max_position_embeddings": 4096, "rope_theta": 10000.0},
    "gptj": {"model_type": "gptj", "n_embd": 256, "n_head": 4, "rotary_dim": 32, "n_layer": 2},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4, "rotary_pct": 0.25,
                 "num_hidden_layers": 2},
    "gemma3": {"model_type": "gemma3_text", "head_dim": 64, "num_hidden_layers": 4, "sliding_window_pattern": 2,
               "rope_local_base_freq": 10000.0, "rope_theta": 1000000.0},
    "gemma4": {"model_type": "gemma4_text", "head_dim": 64, "global_head_dim": 128, "num_hidden_layers": 6},
    "cohere2": {"model_type": "cohere2", "head_dim": 64, "num_hidden_layers": 4, "sliding_window_pattern": 2,
                "sliding_window": 4096},
    "cohere2_moe": {"model_type": "cohere2_moe", "head_dim": 64, "num_hidden_layers": 4,
                    "first_k_dense_replace": 1, "prefix_dense_sliding_window_pattern": 1,
                    "sliding_window_pattern": 2},
    "cohere2_moe_mlp": {"model_type": "cohere2_moe", "head_dim": 64, "num_hidden_layers": 3,
                        "mlp_layer_types": ["dense", "sparse", "sparse"]},
    "llama4": {"model_type": "llama4_text", "head_dim": 64, "num_hidden_layers": 4, "no_rope_layer_interval": 2},
    "smollm3": {"model_type": "smollm3", "head_dim": 64, "num_hidden_layers": 4, "no_rope_layers": [1, 0, 1, 1]},
    "layer_types": {"model_type": "llama", "head_dim": 64, "num_hidden_layers": 2,
                    "layer_types": ["sliding_attention", "full_attention"],
                    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                        "full_attention": {"rope_type": "default", "rope_theta": 1e6}}},
    "per_layer": {"model_type": "llama", "head_dim": 64, "num_hidden_layers": 3,
                  "per_layer_config": {"1": {"head_dim": 128}}},
    "deepseek": {"model_type": "deepseek_v3", "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                 "num_hidden_layers": 2, "max_position_embeddings": 16384,
                 "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                                  "mscale": 1.0, "mscale_all_dim": 1.0}},
    "yarn": {"head_dim": 64, "max_position_embeddings": 16384, "num_hidden_layers": 2,
             "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}},
    "llama3": {"head_dim": 64, "num_hidden_layers": 2, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    "longrope": {"model_type": "phi3", "head_dim": 64, "max_position_embeddings": 131072, "num_hidden_layers": 2,
                 "original_max_position_embeddings": 4096,
                 "rope_scaling": {"type": "longrope", "short_factor": PAIRS, "long_factor": PAIRS}},
    "dynamic": {"head_dim": 64, "max_position_embeddings": 4096, "num_hidden_layers": 2,
                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "qwen2_vl": {"model_type": "qwen2_vl", "text_config": {"model_type": "qwen2_vl_text", "head_dim": 128, "num_hidden_layers": 2,
                                                           "rope_scaling": {"type": "mrope",
                                                                            "mrope_section": [16, 24, 24]}}},
}


def _layer_type(cfg):
    types = C.rope_layer_types(cfg)
    return None if types is None else types[0]


def _cli(args):
    """``pyrope ...`` in this process: its exit status, and stderr (a refusal is one line, status 2)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(args)
    if code == 2:
        raise _CliRefusal(err.getvalue())
    return code


class _CliRefusal(RopeError):
    """A refusal of the command line (status 2), caught as a RopeError is."""


def _file(cfg, tmp):
    path = tmp / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


# entry -> (call, takes a file): a file entry gets the config written as JSON
ENTRIES = {
    "load_hf_config": (lambda cfg: C.load_hf_config(cfg), False),
    "load_hf_config(file)": (lambda path: C.load_hf_config(path), True),
    "rope_arguments_from_hf_config": (lambda cfg: C.rope_arguments_from_hf_config(
        cfg, layer_type=_layer_type(cfg)), False),
    "layout_from_hf_config": (lambda cfg: C.layout_from_hf_config(cfg), False),
    "softmax_scale_factor_from_hf_config": (lambda cfg: C.softmax_scale_factor_from_hf_config(
        cfg, layer_type=_layer_type(cfg)), False),
    "rope_layer_types": (lambda cfg: C.rope_layer_types(cfg), False),
    "layer_ropes": (lambda cfg: C.layer_ropes(cfg), False),
    "Rope.from_hf_config": (lambda cfg: Rope.from_hf_config(cfg, layer_type=_layer_type(cfg)), False),
    "Rope.from_hf_config(full_attention)": (lambda cfg: Rope.from_hf_config(cfg, layer_type="full_attention"),
                                            False),
    "Rope.from_hf_config(file)": (lambda path: Rope.from_hf_config(path, layer_type=_layer_type(path)), True),
    "pyrope contract": (lambda path: _cli(["contract", path] + (
        ["--layer-type", _layer_type(path)] if _layer_type(path) else [])), True),
    "pyrope contract --layer-type full_attention": (
        lambda path: _cli(["contract", path, "--layer-type", "full_attention"]), True),
}


def _with(cfg, path, value):
    """``cfg`` with ``value`` at ``path`` (a tuple of keys), copied along the path."""
    out = dict(cfg)
    node = out
    for key in path[:-1]:
        node[key] = dict(node.get(key) or {})
        node = node[key]
    node[path[-1]] = value
    return out


def _call(entry, cfg, tmp):
    call, takes_file = ENTRIES[entry]
    return call(_file(cfg, tmp) if takes_file else cfg)


def _json_able(value):
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_every_base_config_is_read_by_every_entry(entry, tmp_path):
    """The sweep below mutates configs that work: each base is accepted (or, through an
    entry that needs what it lacks, refused with a RopeError) as written."""
    for name, cfg in BASES.items():
        try:
            _call(entry, cfg, tmp_path)
        except RopeError as exc:
            assert entry.endswith("full_attention") or "layer type" in str(exc), (name, str(exc))


# ---- class 1: counts checked against their limits before anything of that size is built ------

# (base, path of the count in it)
COUNT_KEYS = [
    ("llama", ("num_hidden_layers",)), ("gptj", ("n_layer",)), ("gemma3", ("num_hidden_layers",)),
    ("gemma4", ("num_hidden_layers",)), ("cohere2", ("num_hidden_layers",)), ("cohere2_moe", ("num_hidden_layers",)),
    ("cohere2_moe_mlp", ("num_hidden_layers",)), ("llama4", ("num_hidden_layers",)),
    ("smollm3", ("num_hidden_layers",)), ("layer_types", ("num_hidden_layers",)),
    ("per_layer", ("num_hidden_layers",)), ("cohere2_moe", ("first_k_dense_replace",)),
    ("gemma3", ("sliding_window_pattern",)), ("cohere2", ("sliding_window_pattern",)),
    ("cohere2_moe", ("sliding_window_pattern",)), ("cohere2_moe", ("prefix_dense_sliding_window_pattern",)),
    ("llama4", ("no_rope_layer_interval",)), ("llama", ("hidden_size",)), ("llama", ("num_attention_heads",)),
    ("llama", ("head_dim",)), ("gptj", ("n_embd",)), ("gptj", ("n_head",)), ("gptj", ("rotary_dim",)),
    ("gemma4", ("global_head_dim",)), ("deepseek", ("qk_rope_head_dim",)), ("deepseek", ("qk_nope_head_dim",)),
    ("per_layer", ("per_layer_config", "1", "head_dim")), ("llama", ("max_position_embeddings",)),
    ("deepseek", ("max_position_embeddings",)), ("yarn", ("rope_scaling", "original_max_position_embeddings")),
    ("llama3", ("rope_scaling", "original_max_position_embeddings")),
    ("longrope", ("original_max_position_embeddings",)), ("longrope", ("max_position_embeddings",)),
    ("dynamic", ("max_position_embeddings",)), ("cohere2", ("sliding_window",)),
    ("qwen2_vl", ("text_config", "rope_scaling", "mrope_section")),
]
COUNT_VALUES = {"2**64": 2**64, "2**63": 2**63, "2**63-1": 2**63 - 1, "10**12": 10**12, "2**31": 2**31,
                "65537": 65537, "-1": -1, "0": 0, "-2**63": -2**63, "10**5000": 10**5000, "-10**5000": -10**5000}
MAX_PEAK = 64 << 20   # what the largest head a limit admits may allocate; a count's value never raises it


def _too_much(outcome, peak):
    """Whether Python allocated more than MAX_PEAK. An allocation numpy failed to make (a
    refusal saying "cannot be allocated") is counted by tracemalloc although nothing was
    used, as in tests/api/test_hardening.py."""
    failed = isinstance(outcome, RopeError) and "cannot be allocated" in str(outcome)
    return peak > MAX_PEAK and not failed


_bounded = measured  # call() -> (result or RopeError, peak of Python's allocations, seconds)


@pytest.mark.parametrize("base, path", COUNT_KEYS, ids=[f"{b}:{'.'.join(p)}" for b, p in COUNT_KEYS])
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_every_count_is_checked_before_it_sizes_anything(entry, base, path, tmp_path):
    problems = []
    for name, value in COUNT_VALUES.items():
        if path[-1] == "mrope_section":
            value = [value, 24, 24]
        cfg = _with(BASES[base], path, value)
        if ENTRIES[entry][1] and not _json_able(cfg):   # a file holds no int past 4300 digits
            continue
        outcome, peak, seconds = _bounded(lambda: _call(entry, cfg, tmp_path))
        if _too_much(outcome, peak):
            problems.append(f"{name}: {peak} bytes")
        if isinstance(outcome, RopeError):
            if seconds > SECONDS:
                problems.append(f"{name}: refused after {seconds:.2f} s")
            if len(str(outcome)) > 1000:
                problems.append(f"{name}: a message of {len(str(outcome))} characters")
    assert not problems, problems


def test_a_count_names_its_key_and_limit():
    for cfg, match in [
        ({"head_dim": 64, "num_hidden_layers": 2**64}, r"'num_hidden_layers' must be an int in \[1, 65536\], got "
                                                        "18446744073709551616"),
        ({"head_dim": 64, "num_hidden_layers": 10**12}, r"'num_hidden_layers' must be an int in \[1, 65536\]"),
        ({"head_dim": 64, "n_layer": -10**5000}, r"'num_hidden_layers' .* got a negative integer of about 5001 digits"),
        ({**BASES["cohere2_moe"], "first_k_dense_replace": "2"}, r"'first_k_dense_replace' must be an int in "
                                                                  r"\[0, num_hidden_layers=4\], got '2'"),
        ({**BASES["cohere2_moe"], "first_k_dense_replace": 2**64}, r"'first_k_dense_replace' must be an int in"),
        ({**BASES["cohere2_moe"], "first_k_dense_replace": 5}, r"'first_k_dense_replace' must be an int in"),
        ({**BASES["cohere2_moe_mlp"], "mlp_layer_types": ["dense"]}, r"'mlp_layer_types' has 1 entries for 3"),
        ({**BASES["cohere2_moe_mlp"], "mlp_layer_types": ["dense", 2, None]}, r"'mlp_layer_types' must be a list"),
    ]:
        with pytest.raises(pyrope.errors.ValueError, match=match):
            C.layer_ropes(cfg)


def test_the_gemma4_full_attention_config_of_the_issue_is_refused_at_once(tmp_path):
    # 180 bytes that ran 52 s before running out of memory, by Rope.from_hf_config and the CLI alike
    cfg = {"model_type": "gemma4_text", "head_dim": 256, "num_hidden_layers": 10**12,
           "global_head_dim": 512, "rope_theta": 10000.0}
    path = _file(cfg, tmp_path)
    for call in (lambda: Rope.from_hf_config(cfg, layer_type="full_attention"),
                 lambda: Rope.from_hf_config(path, layer_type="full_attention"),
                 lambda: _cli(["contract", path, "--layer-type", "full_attention"])):
        outcome, peak, seconds = _bounded(call)
        assert isinstance(outcome, RopeError) and "num_hidden_layers" in str(outcome)
        assert peak < 1 << 20 and seconds < SECONDS


def test_layer_counts_at_the_limit_are_served():
    # the limit is a bound on work, not a guess about models: 65536 layers are read, in well under a second
    cfg = {"head_dim": 64, "num_hidden_layers": C.MAX_LAYERS}
    ropes = C.layer_ropes(cfg)
    assert len(ropes) == C.MAX_LAYERS and all(r is ropes[0] for r in ropes)
    moe = C.layer_ropes({**BASES["cohere2_moe"], "num_hidden_layers": C.MAX_LAYERS,
                         "first_k_dense_replace": C.MAX_LAYERS})
    assert all(r is not None for r in moe)   # every layer dense: every layer rotates
    with pytest.raises(pyrope.errors.ValueError, match="65536"):
        C.layer_ropes({**cfg, "num_hidden_layers": C.MAX_LAYERS + 1})


def test_cohere2_moe_layers_as_transformers_derives_them():
    # Cohere2MoeConfig: the first k layers dense (mlp), rotating when prefix_dense_sliding_window_pattern == 1,
    # the others by the sliding pattern (rope on sliding layers only)
    cfg = {**BASES["cohere2_moe"], "num_hidden_layers": 6, "first_k_dense_replace": 2, "sliding_window_pattern": 3}
    got = [r is not None for r in C.layer_ropes(cfg)]
    rest = ["sliding_attention" if (i + 1) % 3 else "full_attention" for i in range(4)]
    assert got == [True, True] + [t == "sliding_attention" for t in rest]
    given = [r is not None for r in C.layer_ropes({**cfg, "mlp_layer_types": ["sparse"] * 5 + ["dense"]})]
    # given: the prefix's layer types still follow first_k_dense_replace, but its layers are sparse
    assert given == [False, False] + [t == "sliding_attention" for t in rest[:-1]] + [True]


# ---- counts given as arguments -----------------------------------------------------------------

HUGE = np.broadcast_to(1.0, (2**40,))   # 8 TiB of float64 in 8 bytes
COUNTED = {
    "FreqFactors(factors)": lambda v: S.FreqFactors(v),
    "LongRope(short_factor)": lambda v: S.LongRope(short_factor=v, long_factor=PAIRS,
                                                   original_max_position_embeddings=4096, factor=2.0),
    "LongRope(long_factor)": lambda v: S.LongRope(short_factor=PAIRS, long_factor=v,
                                                  original_max_position_embeddings=4096, factor=2.0),
    "rule_from_dict(freq_factors)": lambda v: S.rule_from_dict({"rope_type": "freq_factors", "factors": v}),
    "rule_from_dict(longrope)": lambda v: S.rule_from_dict({"rope_type": "longrope", "short_factor": v,
                                                            "long_factor": v, "factor": 2.0,
                                                            "original_max_position_embeddings": 4096}),
    "resolve(dict)": lambda v: S.resolve({"rope_type": "freq_factors", "factors": v}, head_dim=64,
                                         rotary_dim=64, base=10000.0),
    "Rope(scaling=dict)": lambda v: Rope(64, layout="split_half", scaling={"rope_type": "freq_factors",
                                                                          "factors": v}),
    "Resolved(inv_freq)": lambda v: S.Resolved(inv_freq=v, attention_factor=1.0, rule="x", params={}),
    "from_hf_config(longrope)": lambda v: Rope.from_hf_config(
        _with(BASES["longrope"], ("rope_scaling", "short_factor"), v)),
    "resolved_from_contract(inv_freq)": lambda v: pyrope.resolved_from_contract(
        {**Rope(64, layout="split_half").contract(), "inv_freq": v}),
    "Rope.from_contract(inv_freq)": lambda v: Rope.from_contract(
        {**Rope(64, layout="split_half").contract(), "inv_freq": v}),
    "onnx_caches(max_pos)": lambda v: pyrope.onnx_caches(Rope(64, layout="split_half"), v),
    "sanity(positions)": lambda v: pyrope_check.sanity(Rope(8, layout="split_half"), positions=v),
    "sanity(shifts)": lambda v: pyrope_check.sanity(Rope(8, layout="split_half"), shifts=v),
}
COUNTED_VALUES = {
    "broadcast 2**40": HUGE, "range(2**40)": range(2**40), "range(2**64)": range(2**64),
    "list of 40000": [1.0] * 40000, "[broadcast 2**40]": [HUGE], "2-D broadcast": np.broadcast_to(1.0, (2**20, 2**20)),
    "0-d array": np.array(1.0), "empty": [], "2**40": 2**40, "2**31": 2**31, "2**64": 2**64, "10**5000": 10**5000,
    "['0x1p-1'] * 40000": ["0x1p-1"] * 40000, "generator": (1.0 for _ in range(3)), "dict": {1: 2}, "str": "1.0",
}


@pytest.mark.parametrize("entry", list(COUNTED))
def test_counts_given_as_arguments_are_checked_first(entry):
    problems = []
    for name, value in COUNTED_VALUES.items():
        outcome, peak, seconds = _bounded(lambda: COUNTED[entry](value))
        if _too_much(outcome, peak):
            problems.append(f"{name}: {peak} bytes")
        if isinstance(outcome, RopeError) and seconds > SECONDS:
            problems.append(f"{name}: refused after {seconds:.2f} s")
    assert not problems, problems


@pytest.mark.parametrize("call, match", [
    (lambda: S.FreqFactors(HUGE), r"freq_factors: 'factors' must have at most 32768 entries .* got 1099511627776"),
    (lambda: S.FreqFactors({"a": 1}), r"'factors' must be a non-empty list of numbers"),
    (lambda: S.LongRope(short_factor=HUGE, long_factor=[1.0], original_max_position_embeddings=4096),
     r"longrope: 'short_factor' must have at most 32768 entries"),
    (lambda: S.rule_from_dict({"rope_type": "longrope", "short_factor": PAIRS, "long_factor": HUGE,
                               "original_max_position_embeddings": 4096, "factor": 2.0}),
     r"'long_factor' must have at most 32768"),
    (lambda: S.Resolved(inv_freq=np.broadcast_to(0.1, (2**40,)), attention_factor=1.0, rule="x", params={}),
     r"'inv_freq' must have at most 32768 entries .* got 1099511627776"),
    (lambda: S.Resolved(inv_freq=[np.broadcast_to(0.1, (2**40,))], attention_factor=1.0, rule="x", params={}),
     r"inv_freq must be a vector of real numbers"),
    (lambda: S.FreqFactors(range(2**64)), r"'factors' must be a non-empty list of numbers"),
    (lambda: S.FreqFactors(np.array(2.0)), r"'factors' must be a non-empty list of numbers"),
    (lambda: pyrope.onnx_caches(Rope(64, layout="split_half"), 2**31),
     r"max_pos: the cos and sin caches of shape \(2147483648, 32\) .* cannot be allocated|max_pos must be"),
    (lambda: pyrope_check.sanity(Rope(8, layout="split_half"), positions=range(2**40)),
     r"positions: at most 1024 values"),
    (lambda: pyrope.resolved_from_contract({**Rope(64, layout="split_half").contract(),
                                            "inv_freq": ["0x1p-1"] * 10**6}),
     r"'rotary_dim' 64 must be 2 \* len\(inv_freq\) = 2000000"),
])
def test_an_argument_count_is_refused_naming_it(call, match):
    with pytest.raises(RopeError, match=match):
        call()


def test_factor_lists_at_the_limit_are_served():
    pairs = np.linspace(1.0, 2.0, S.MAX_PAIRS)
    rope = Rope(2 * S.MAX_PAIRS, layout="split_half", scaling=S.FreqFactors(pairs))
    plain = Rope(2 * S.MAX_PAIRS, layout="split_half")
    assert np.array_equal(rope.inv_freq, plain.inv_freq / pairs)
    assert S.Resolved(inv_freq=rope.inv_freq, attention_factor=1.0, rule="x", params={}).rotary_dim == 2 * S.MAX_PAIRS


# ---- class 2: whatever a config holds, only a RopeError leaves pyrope ---------------------------

def _deep(n, leaf=1):
    out = leaf
    for _ in range(n):
        out = {"a": out}
    return out


def _deep_list(n):
    out = 1
    for _ in range(n):
        out = [out]
    return out


def _cycle():
    d = {"rope_type": "default"}
    d["again"] = d
    return d


HOSTILE = {
    "dict 700 deep": _deep(700), "list 700 deep": _deep_list(700), "dict 2000 deep": _deep(2000),
    "cycle": _cycle(), "10**5000": 10**5000, "-10**5000": -10**5000, "nan": math.nan, "inf": math.inf,
    "-inf": -math.inf, "'2'": "2", "2.5": 2.5, "True": True, "None": None, "[]": [], "{}": {},
    "[1] * 10**4": [1] * 10**4, "str 10**5": "x" * 10**5, "np.int64(3)": np.int64(3),
    "np.float64(nan)": np.float64("nan"), "np.array([1, 2])": np.array([1, 2]), "broadcast 2**40": HUGE,
    "object()": object(), "b'x'": b"x", "1j": 1j, "[None]": [None], "[[1]]": [[1]], "{'a': 1}": {"a": 1},
    "-0.0": -0.0, "1e308": 1e308, "[2**64]": [2**64], "{1: 'a', 'b': 2}": {1: "a", "b": 2},
}
# every key a reader looks at (and one it does not), by base
READ_KEYS = ["model_type", "head_dim", "hidden_size", "num_attention_heads", "num_hidden_layers", "n_layer",
             "n_embd", "n_head", "rotary_dim", "rope_theta", "rotary_emb_base", "partial_rotary_factor",
             "rotary_pct", "rope_scaling", "rope_parameters", "max_position_embeddings",
             "original_max_position_embeddings", "layer_types", "mlp_layer_types", "first_k_dense_replace",
             "sliding_window_pattern", "prefix_dense_sliding_window_pattern", "sliding_window",
             "no_rope_layers", "no_rope_layer_interval", "per_layer_config", "rope_interleave", "text_config",
             "rope_local_base_freq", "global_head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "unrelated"]
NESTED_KEYS = {"yarn": ("rope_scaling", ["rope_type", "factor", "original_max_position_embeddings", "beta_fast",
                                         "mscale", "truncate", "attention_factor"]),
               "longrope": ("rope_scaling", ["type", "short_factor", "long_factor", "factor"]),
               "llama3": ("rope_scaling", ["low_freq_factor", "high_freq_factor"]),
               "deepseek": ("rope_scaling", ["mscale_all_dim"]),
               "layer_types": ("rope_parameters", ["full_attention", "sliding_attention"]),
               "per_layer": ("per_layer_config", ["1", "2"]),
               "qwen2_vl": ("text_config", ["rope_scaling", "head_dim", "model_type"])}
PLACES = [(base, (key,)) for base in BASES for key in READ_KEYS if key in BASES[base] or key == "unrelated"] + \
         [(base, (outer, key)) for base, (outer, keys) in NESTED_KEYS.items() for key in keys] + \
         [("llama", ("unrelated",)), ("gemma3", ("num_hidden_layers",)), ("gemma4", ("layer_types",)),
          ("cohere2_moe", ("mlp_layer_types",)), ("smollm3", ("no_rope_layers",))]


@pytest.mark.parametrize("value", list(HOSTILE))
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_only_rope_errors_leave_a_config_reader(entry, value, tmp_path):
    leaks = []
    hostile = HOSTILE[value]
    for base, path in PLACES:
        cfg = _with(BASES[base], path, hostile)
        if ENTRIES[entry][1] and not _json_able(cfg):   # the text of a file cannot hold it
            continue
        start = time.perf_counter()
        try:
            _call(entry, cfg, tmp_path)
        except RopeError as exc:
            seconds = time.perf_counter() - start
            if seconds > SECONDS or len(str(exc)) > 1000:
                leaks.append(f"{base}:{'.'.join(path)}: {seconds:.2f} s, {len(str(exc))} characters: "
                             f"{str(exc)[:100]}")
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            leaks.append(f"{base}:{'.'.join(path)}: {type(exc).__module__}.{type(exc).__name__}: {exc}"[:240])
    assert not leaks, leaks


def test_a_deep_unrelated_key_reads_as_it_does_from_a_file(tmp_path):
    # issue 22, item 11: copy.deepcopy raised RecursionError on the dict; json.loads read the text
    cfg = {**BASES["llama"], "unrelated": _deep(700)}
    from_dict = Rope.from_hf_config(cfg)
    assert from_dict.fingerprint == Rope.from_hf_config(_file(cfg, tmp_path)).fingerprint
    loaded = C.load_hf_config(cfg)
    assert loaded == cfg and loaded is not cfg and loaded["unrelated"] is not cfg["unrelated"]
    node, copy = cfg["unrelated"], loaded["unrelated"]
    while isinstance(node, dict):   # every level a fresh dict
        assert copy is not node and copy.keys() == node.keys()
        node, copy = node["a"], copy["a"]


def test_load_hf_config_copies_as_deepcopy_does():
    shared = [1, 2]
    cfg = {"a": shared, "b": shared, "c": (shared, {"d": 3}), "e": {"f": [{"g": None}]}}
    got = C.load_hf_config(cfg)
    import copy
    want = copy.deepcopy(cfg)
    assert got == want and type(got["c"]) is tuple
    assert got["a"] is got["b"] and got["a"] is not shared and got["c"][0] is got["a"]
    assert got["e"]["f"][0] is not cfg["e"]["f"][0]
    with pytest.raises(pyrope.errors.ValueError, match=r"the value at .*\['again'\].* contains itself"):
        C.load_hf_config({"rope_scaling": _cycle()})


# contracts: what a backend reads back from disk or another process
from pyrope import contract as K  # noqa: E402

CONTRACTS = {
    "plain": Rope(64, layout="split_half").contract(),
    "yarn": Rope.from_hf_config(BASES["yarn"]).contract(),
    "deepseek": Rope.from_hf_config(BASES["deepseek"]).contract(),
    "sections": Rope.from_hf_config(BASES["qwen2_vl"]).contract(),
}
CONTRACT_ENTRIES = {
    "resolved_from_contract": K.resolved_from_contract, "sections_from_contract": K.sections_from_contract,
    "Rope.from_contract": Rope.from_contract, "fingerprint": K.fingerprint, "canonical_json": K.canonical_json,
    "upgrade": K.upgrade,
}
CONTRACT_PLACES = [(name, (key,)) for name, c in CONTRACTS.items() for key in list(c) + ["unknown"]] + \
                  [(name, ("params", key)) for name, c in CONTRACTS.items() for key in list(c["params"]) + ["x"]]


@pytest.mark.parametrize("value", list(HOSTILE))
@pytest.mark.parametrize("entry", list(CONTRACT_ENTRIES))
def test_only_rope_errors_leave_a_contract_reader(entry, value):
    leaks = []
    for name, path in CONTRACT_PLACES:
        contract = _with(CONTRACTS[name], path, HOSTILE[value])
        start = time.perf_counter()
        try:
            CONTRACT_ENTRIES[entry](contract)
        except RopeError as exc:
            seconds = time.perf_counter() - start
            if seconds > SECONDS or len(str(exc)) > 1000:
                leaks.append(f"{name}:{'.'.join(path)}: {seconds:.2f} s, {len(str(exc))} characters: "
                             f"{str(exc)[:100]}")
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            leaks.append(f"{name}:{'.'.join(path)}: {type(exc).__module__}.{type(exc).__name__}: {exc}"[:240])
    assert not leaks, leaks


def test_every_base_contract_reads():
    for contract in CONTRACTS.values():
        assert Rope.from_contract(contract).fingerprint == K.fingerprint(contract)
