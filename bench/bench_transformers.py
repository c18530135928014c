"""Rotary time inside a transformers model: transformers' own code against the patched model.

One attention shape, Llama-3-8B's (32 query heads, 8 key/value heads,
head_dim 128, its ``llama3`` rope, base 500000), q and k as ``LlamaAttention``
hands them to ``apply_rotary_pos_emb``: ``[1, heads, seq, 128]`` views of the
projections' ``[1, seq, heads * 128]`` output (transposed, not contiguous).
Prefill of 512 tokens (positions 0..511) and one decode token (position 512),
float32 and bfloat16. Each contender runs what a forward pass runs:

- ``tables``: the rotary-embedding module's forward, once per forward pass
  (``LlamaRotaryEmbedding``; patched: pyrope's exact rows in its format);
- ``apply``: ``apply_rotary_pos_emb(q, k, cos, sin)``, once per layer
  (patched: pyrope's rotation of q and k into new tensors, as the function returns);
- ``32 layers``: ``tables + 32 * apply``, the rotary time of one forward pass.

Both run with one torch thread and with torch's default threads, each round
keeping the faster (``bench/README.md`` says why for torch; the patched tables
are torch operations too); pyrope's kernel on its own default threads. Each timed block comes after a 2 ms idle gap and
~10 ms of warm-up calls, the contenders in an order rotating from round to
round; figures are medians over rounds, ratios medians of per-round ratios.
Before timing, the patched rotation is compared with transformers' (printed;
the benchmark checks it is within transformers' own table error: float32
angles off by up to about position * 2**-21, bfloat16 tables).

``python bench/bench_transformers.py [rounds]`` prints the table;
``python -m pytest bench/bench_transformers.py -q`` runs it as one benchmark.
"""
import sys
import time

import numpy as np
import pytest

from pyrope._bench.method import IDLE, WARM, torch_threads

try:
    import torch
    import transformers
    from transformers.models.llama import modeling_llama
except ImportError as exc:  # never skipped quietly: there is nothing to measure without them
    raise ImportError(f"bench/bench_transformers.py needs torch and transformers (pyproject extra "
                      f"'conformance'): {exc}") from exc

from pyrope.integrations.transformers import patch  # noqa: E402

LAYERS = 32
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
CONFIG = dict(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
              max_position_embeddings=131072,
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
CASES = [("prefill 512", 0, 512), ("decode 1", 512, 1)]  # (name, first position, tokens)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TIMED = 0.005  # seconds of calls in a timed block


class Shell(torch.nn.Module):
    """The part of a Llama model that rotates: its rotary embedding (and config), nothing else."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.rotary_emb = modeling_llama.LlamaRotaryEmbedding(config)


def inputs(start, n, dtype):
    """x (hidden states: dtype and device only), position ids, q and k as the attention makes them."""
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(1, n, HEADS * HEAD_DIM, dtype=dtype)
    positions = torch.arange(start, start + n)[None]
    q = torch.randn(1, n, HEADS * HEAD_DIM, generator=gen).to(dtype).view(1, n, HEADS, HEAD_DIM).transpose(1, 2)
    k = torch.randn(1, n, KV_HEADS * HEAD_DIM, generator=gen).to(dtype).view(1, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
    return x, positions, q, k




def timed(call):
    """Idle, warm ~WARM seconds, then time a block of about TIMED seconds; seconds per call."""
    time.sleep(IDLE)
    start = time.perf_counter()
    n = 0
    while True:
        call()
        n += 1
        now = time.perf_counter()
        if now - start >= WARM:
            break
    reps = max(1, min(1000, int(TIMED / ((now - start) / n))))
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - t0) / reps


def contenders(dtype, start, n):
    """{name: (tables call, apply call)} for transformers and the patched model, and the check."""
    config = transformers.LlamaConfig(**CONFIG)
    apply_hf = modeling_llama.apply_rotary_pos_emb
    ours, theirs = Shell(config), Shell(config)
    p = patch(ours)
    apply_patched = modeling_llama.apply_rotary_pos_emb  # the wrapper, while patched
    x, positions, q, k = inputs(start, n, dtype)
    with torch.no_grad():
        tables_hf = theirs.rotary_emb(x, positions)
        tables_pyrope = ours.rotary_emb(x, positions)
        want = apply_hf(q, k, *tables_hf)
        calls = p.calls
        got = apply_patched(q, k, *tables_pyrope)
        assert p.calls == calls + 1, "the patched apply did not rotate with pyrope"
    scale = float(max(t.abs().max() for t in want))
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(want, got)) / scale
    return {
        "transformers": (lambda: theirs.rotary_emb(x, positions), lambda: apply_hf(q, k, *tables_hf)),
        "pyrope patched": (lambda: ours.rotary_emb(x, positions), lambda: apply_patched(q, k, *tables_pyrope)),
    }, diff, p


def measure(rounds=15):
    """{(case, dtype): ({contender: {part: median seconds}}, {part: median ratio transformers / pyrope}, diff)}."""
    results = {}
    for case, start, n in CASES:
        for dname, dtype in DTYPES.items():
            calls, diff, p = contenders(dtype, start, n)
            names = list(calls)
            times = {name: {"tables": [], "apply": []} for name in names}
            with torch.no_grad():
                for r in range(rounds):
                    order = names[r % 2:] + names[:r % 2]
                    for name in order:
                        tables, apply = calls[name]
                        for part, call in (("tables", tables), ("apply", apply)):
                            with torch_threads(1):
                                one = timed(call)
                            times[name][part].append(min(one, timed(call)))
            p.unpatch()
            for name in names:
                t = times[name]
                t[f"{LAYERS} layers"] = [a + LAYERS * b for a, b in zip(t["tables"], t["apply"])]
            med = {name: {part: float(np.median(v)) for part, v in t.items()} for name, t in times.items()}
            ratio = {part: float(np.median(np.array(times["transformers"][part]) / np.array(times["pyrope patched"][part])))
                     for part in times["transformers"]}
            results[(case, dname)] = (med, ratio, diff)
    return results


def format_results(results):
    lines = [f"Llama-3-8B attention shape: q [1, {HEADS}, seq, {HEAD_DIM}], k [1, {KV_HEADS}, seq, {HEAD_DIM}] "
             f"(transposed views), llama3 rope; medians; ratio = transformers / pyrope (median of per-round ratios)",
             f"{'case':12s} {'dtype':9s} {'part':10s} {'transformers':>13s} {'pyrope':>10s} {'ratio':>7s}"]
    for (case, dname), (med, ratio, diff) in results.items():
        for part in med["transformers"]:
            lines.append(f"{case:12s} {dname:9s} {part:10s} {med['transformers'][part] * 1e6:10.1f} us "
                         f"{med['pyrope patched'][part] * 1e6:7.1f} us {ratio[part]:7.2f}")
        lines.append(f"{'':12s} {dname:9s} largest |pyrope - transformers| / largest |q|: {diff:.3g}")
    return "\n".join(lines)


def test_transformers_rotary(benchmark, capsys):
    results = benchmark.pedantic(measure, rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + format_results(results))
    # transformers' float32 angles are off by up to about position * 2**-21 radians; bfloat16 rounds
    # its tables and the result to 8 bits
    for case, start, n in CASES:
        for dname in DTYPES:
            diff = results[(case, dname)][2]
            assert diff <= ((start + n) * 2.0 ** -21 if dname == "float32" else 2.0 ** -6), (case, dname, diff)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    print(format_results(measure(rounds)))
