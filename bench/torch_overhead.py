"""What a torch tensor adds to a decode call: the same in-place call on tensors and on
numpy arrays over the same memory, in one run.

    PYTHONPATH=. python bench/torch_overhead.py [--rounds N] [--batch B]

Shapes: q [B, 1, 32, 128], k [B, 1, 8, 128] (default B 16), float32 and bfloat16,
``apply(q, offset=t, out=q)`` and ``apply_qk(q, k, offset=t, out=(q, k))``. Each round
times a block of calls of every contender, in a rotated order, each warmed for ~10 ms
first; the figure is the median over rounds of the per-round difference tensor - numpy
(µs per call), with its interquartile range. Prints the CPU (family/model) and the ISA.
"""
import argparse
import os
import statistics
import sys

import ml_dtypes
import numpy as np
import torch

import pyrope
from pyrope._bench.method import timed
from pyrope._bench.report import cpu_info, cpu_line


def contenders(rope, batch, dtype):
    npdt = ml_dtypes.bfloat16 if dtype is torch.bfloat16 else np.float32
    q, k = torch.randn(batch, 1, 32, 128).to(dtype), torch.randn(batch, 1, 8, 128).to(dtype)

    def view(t):
        return t.view(torch.int16).numpy().view(npdt) if dtype is torch.bfloat16 else t.numpy()
    qa, ka = view(q), view(k)
    return {("apply", "numpy"): lambda: rope.apply(qa, offset=100, out=qa),
            ("apply", "torch"): lambda: rope.apply(q, offset=100, out=q),
            ("apply_qk", "numpy"): lambda: rope.apply_qk(qa, ka, offset=100, out=(qa, ka)),
            ("apply_qk", "torch"): lambda: rope.apply_qk(q, k, offset=100, out=(q, k))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=2000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rope = pyrope.Rope(128, layout="split_half")
    print(f"{cpu_line(cpu_info())}; ISA {pyrope.get_isa()}; torch {torch.__version__}; {args.rounds} rounds of "
          f"{args.block} calls; load average {os.getloadavg()[0]:.2f}")
    for dtype in (torch.float32, torch.bfloat16):
        fns = contenders(rope, args.batch, dtype)
        for fn in fns.values():
            fn()
        diffs = {"apply": [], "apply_qk": []}
        times = {key: [] for key in fns}
        order = list(fns)
        for r in range(args.rounds):
            order = order[1:] + order[:1]
            got = {}
            for key in order:
                got[key] = timed(fns[key], args.block)[0] * 1e6   # idle 2 ms, warm ~10 ms, time
                times[key].append(got[key])
            for call in diffs:
                diffs[call].append(got[(call, "torch")] - got[(call, "numpy")])
        for call, d in diffs.items():
            q1, _, q3 = statistics.quantiles(d, n=4)
            print(f"{str(dtype).replace('torch.', ''):9s} {call:8s} [{args.batch}x1x32x128] numpy "
                  f"{statistics.median(times[(call, 'numpy')]):6.2f} us, torch "
                  f"{statistics.median(times[(call, 'torch')]):6.2f} us: +{statistics.median(d):.2f} us "
                  f"(IQR {q1:+.2f} to {q3:+.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
