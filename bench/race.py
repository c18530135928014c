"""Race this checkout's pyrope against an older commit's, in one process.

    python bench/race.py [--old COMMIT] [--rounds N] [--cases decode,small] [--dtypes float32]

The old commit's ``pyrope`` and ``csrc`` are taken with ``git archive``,
renamed to the package ``pyrope_old`` (its cffi module too, so both
libraries load side by side) and built in a temporary folder. Then, for
every case of ``pyrope.benchmark.SHAPES`` x dtype x layout, both run
``Rope.apply(x, offset=..., out=x)`` in round-robin rounds: each contender
idles (the other library's pool falls asleep), is warmed for ~10 ms, then
timed; the order alternates between rounds. Reported: the median of the
per-round ratios old/new (above 1: the new code is faster) and its
interquartile range, plus the decode call's Python overhead (apply on a
1-token, 1-head array, where the C work is negligible) for both.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WARM = 0.010   # seconds of calls before a timed one: caches and the second core come back
IDLE = 0.002   # seconds of sleep before warming: the other library's pool falls asleep


def build_old(commit, where):
    """``pyrope_old``: COMMIT's package built in ``where``; returns the module."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "pyrope", "csrc"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    os.rename(os.path.join(where, "pyrope"), os.path.join(where, "pyrope_old"))
    for folder, _, files in os.walk(os.path.join(where, "pyrope_old")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                text = text.replace("pyrope._pyrope_cffi", "pyrope_old._pyrope_old_cffi")
                text = text.replace("_pyrope_cffi", "_pyrope_old_cffi")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    subprocess.run([sys.executable, os.path.join("pyrope_old", "_build.py")], cwd=where, check=True,
                   capture_output=True)
    sys.path.insert(0, where)
    import pyrope_old
    return pyrope_old


def placed(x0, phase=16):
    """A copy of x0 starting ``phase`` bytes past a 4 KiB boundary (where numpy
    puts large arrays): the kernels' speed depends on alignment, so both
    contenders get the same."""
    raw = np.empty(x0.nbytes + 4096, dtype=np.uint8)
    skip = (phase - raw.ctypes.data) % 4096
    x = raw[skip:skip + x0.nbytes].view(x0.dtype).reshape(x0.shape)
    x[...] = x0
    return x


def timed(call):
    """Idle, warm for WARM seconds, then time one call."""
    time.sleep(IDLE)
    end = time.perf_counter() + WARM
    while time.perf_counter() < end:
        call()
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def race(calls, rounds):
    """Per-round ratio old/new of two contenders {"old": f, "new": f}."""
    ratios = []
    for r in range(rounds):
        order = ("old", "new") if r % 2 else ("new", "old")
        t = {name: timed(calls[name]) for name in order}
        ratios.append(t["old"] / t["new"])
    return np.array(ratios)


def overhead(module, repeats=20000):
    """Median time of a 1-token, 1-head decode apply (the Python around a tiny C call)."""
    rope = module.Rope(128, layout="split_half")
    x = np.random.default_rng(1).standard_normal((1, 1, 1, 128)).astype(np.float32)
    rope.apply(x, offset=100)
    samples = []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(repeats // 15):
            rope.apply(x, offset=100, out=x)
        samples.append((time.perf_counter() - t0) / (repeats // 15))
    return float(np.median(samples))


def main(argv=None):
    import pyrope
    from pyrope.benchmark import DTYPES, SHAPES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", default="HEAD~1", help="the commit to race against (default HEAD~1)")
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--cases", default=",".join(SHAPES))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--layouts", default="split_half,interleaved")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as where:
        old = build_old(args.old, where)
        print(f"new: {pyrope.__file__} ({pyrope.get_isa()}), old: {args.old} ({old.get_isa()}), "
              f"{pyrope.get_num_threads()} threads, {args.rounds} rounds")
        print(f"{'case':10s} {'dtype':9s} {'layout':12s} {'old/new':>8s} {'IQR':>13s}")
        for case in args.cases.split(","):
            shape, first, _ = SHAPES[case]
            for dtype in args.dtypes.split(","):
                for layout in args.layouts.split(","):
                    x0 = np.random.default_rng(7).standard_normal(shape).astype(DTYPES[dtype])
                    ropes = {"old": old.Rope(shape[-1], layout=layout), "new": pyrope.Rope(shape[-1], layout=layout)}
                    xs = {n: placed(x0) for n in ropes}
                    calls = {n: (lambda r=ropes[n], x=xs[n]: r.apply(x, offset=first, out=x)) for n in ropes}
                    for n in calls:
                        calls[n]()
                    ratios = race(calls, args.rounds)
                    q1, q3 = np.percentile(ratios, [25, 75])
                    print(f"{case:10s} {dtype:9s} {layout:12s} {np.median(ratios):8.3f} "
                          f"{q1:6.3f}-{q3:6.3f}", flush=True)
        over = {}
        for r in range(6):
            for name, module in ((("old", old), ("new", pyrope)) if r % 2 else (("new", pyrope), ("old", old))):
                over.setdefault(name, []).append(overhead(module))
        print("1-token decode apply (in place): " +
              ", ".join(f"{n} {np.median(v) * 1e6:.2f} us" for n, v in over.items()))


if __name__ == "__main__":
    main()
