"""A patched transformers model's decode tables against transformers' own: the
rotary-embedding module's forward for one decode step, patched and unpatched, in one run.

    PYTHONPATH=. python bench/hf_decode_tables.py [--rounds N] [--batch B]

A Llama config of Llama-2-7B's attention shape (hidden 4096, 32 heads of 128),
x [B, 1, 4096] and position ids [B, 1] (default B 16, each at position 200, as
in a batched decode step). Contenders: ``LlamaRotaryEmbedding(config)(x, pos)``
(transformers) and the same call on the module of a model patched with
``pyrope.integrations.transformers.patch`` (exact tables, tagged for pyrope's
apply). Each round times a block of calls of each, in alternating order, each
warmed for ~10 ms first; the figure is the median over rounds of the per-round
ratio pyrope / transformers, with its interquartile range. Prints the CPU
(family/model) and the ISA.
"""
import argparse
import os
import statistics
import sys

import torch
import transformers

import pyrope
from pyrope._bench.method import timed
from pyrope._bench.report import cpu_info, cpu_line
from pyrope.integrations.transformers import patch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=2000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                      num_hidden_layers=1, intermediate_size=16, vocab_size=16)
    model = transformers.LlamaForCausalLM(config).eval()
    patch(model)
    own = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(config)
    x, pos = torch.randn(args.batch, 1, 4096), torch.full((args.batch, 1), 200)
    fns = {"transformers": lambda: own(x, pos), "pyrope": lambda: model.model.rotary_emb(x, pos)}
    print(f"{cpu_line(cpu_info())}; ISA {pyrope.get_isa()}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {args.rounds} rounds of {args.block} calls; "
          f"load average {os.getloadavg()[0]:.2f}")
    times = {key: [] for key in fns}
    ratios = []
    order = list(fns)
    with torch.no_grad():
        for _ in range(args.rounds):
            order.reverse()
            got = {}
            for key in order:
                got[key] = timed(fns[key], args.block)[0] * 1e6   # idle 2 ms, warm ~10 ms, time
                times[key].append(got[key])
            ratios.append(got["pyrope"] / got["transformers"])
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"decode tables [{args.batch}x1], head_dim 128: transformers {statistics.median(times['transformers']):.2f} us, "
          f"pyrope {statistics.median(times['pyrope']):.2f} us; pyrope / transformers "
          f"{statistics.median(ratios):.3f} (IQR {q1:.3f} to {q3:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
