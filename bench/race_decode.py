"""Race the decode call of this checkout against an older commit's, in one process.

    PYTHONPATH=. python bench/race_decode.py [--old COMMIT] [--rounds N] [--block N] [--tensors]

The calls are a decode step of one sequence, float32, head_dim 128, 32 q
heads and 8 KV heads, in both rope layouts and both cache layouts
(``[batch, seq, heads, dim]`` and ``[batch, heads, seq, dim]``, seq_axis -2):

- ``apply``: ``rope.apply(x, offset=t, out=x)``, x ``[1, 1, 32, 128]``;
- ``apply_qk``: ``rope.apply_qk(q, k, offset=t, out=(q, k_cache[:, t:t+1]))``,
  k ``[1, 1, 8, 128]`` into the slot of position t of a 256-slot cache
  (the slice taken in every call, as a backend writes it);
- ``apply_qk in place``: ``rope.apply_qk(q, k, offset=t, out=(q, k))``;
- each again as a prepared call (``Rope.prepare``/``prepare_qk`` of the same
  arrays), called exactly as above;
- with ``--tensors``, all of it on torch tensors over the same memory (the
  path a torch backend takes through the edge, ``pyrope._interop.edge``).

The old commit is built as the package ``pyrope_old`` (``bench/race.py``), so
both run side by side. Every round, each contender (old and new, apply and
prepared) idles 2 ms, is warmed for ~10 ms of its own calls, then times a
block of ``--block`` calls at successive positions; the order rotates by one
every round. Reported per case: medians (and interquartile ranges) of the
per-round ratios: old/new for apply and for the prepared call (above 1: the
new code is faster), and apply/prepared within each version (above 1: the
prepared call is faster). Before timing, old and new results are compared
bit for bit.
"""
import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from race import build_old  # noqa: E402

WARM = 0.010   # seconds of calls before a timed block
IDLE = 0.002   # seconds of sleep before warming
SLOTS = 256    # cache slots; positions BASE..BASE+SLOTS-1
BASE = 1000


def cpu():
    """``(model name, family, model, flags of interest)`` from /proc/cpuinfo."""
    info = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor(), "?", "?", ""
    flags = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512fp16")
             if f in info.get("flags", "").split()]
    return info.get("model name", "?"), info.get("cpu family", "?"), info.get("model", "?"), " ".join(flags)


def contenders(module, layout, seq_axis, kind, block, tensors=False):
    """``{"apply": f, "prepared": f}``: each ``f()`` runs ``block`` decode calls
    at positions BASE.., on its own arrays and its own Rope; plus the arrays
    the calls write, for the bit-for-bit check. ``tensors``: the calls take
    torch tensors over those arrays' memory."""
    rng = np.random.default_rng(7)
    rope = module.Rope(128, layout=layout)
    rope.apply(np.zeros((1, SLOTS, 1, 128), np.float32), offset=BASE)   # rows for every position
    if seq_axis == -3:
        q = rng.standard_normal((1, 1, 32, 128)).astype(np.float32)
        k = rng.standard_normal((1, 1, 8, 128)).astype(np.float32)
        cache = np.zeros((1, SLOTS, 8, 128), np.float32)

        def slot(t):
            return cache[:, t:t + 1]
    else:
        q = rng.standard_normal((1, 32, 1, 128)).astype(np.float32)
        k = rng.standard_normal((1, 8, 1, 128)).astype(np.float32)
        cache = np.zeros((1, 8, SLOTS, 128), np.float32)

        def slot(t):
            return cache[:, :, t:t + 1]
    arrays = (q, k, cache)
    if tensors:
        import torch
        q, k, cache = (torch.from_numpy(a) for a in arrays)
    if kind == "apply":
        step = rope.prepare(q, out=q, seq_axis=seq_axis)

        def by_apply():
            for t in range(block):
                rope.apply(q, offset=BASE + t, out=q, seq_axis=seq_axis)

        def by_prepared():
            for t in range(block):
                step(q, offset=BASE + t, out=q)
    elif kind == "apply_qk in place":
        step = rope.prepare_qk(q, k, out=(q, k), seq_axis=seq_axis)

        def by_apply():
            for t in range(block):
                rope.apply_qk(q, k, offset=BASE + t, out=(q, k), seq_axis=seq_axis)

        def by_prepared():
            for t in range(block):
                step(q, k, offset=BASE + t, out=(q, k))
    else:
        step = rope.prepare_qk(q, k, out=(q, slot(0)), seq_axis=seq_axis)

        def by_apply():
            for t in range(block):
                rope.apply_qk(q, k, offset=BASE + t, out=(q, slot(t)), seq_axis=seq_axis)

        def by_prepared():
            for t in range(block):
                step(q, k, offset=BASE + t, out=(q, slot(t)))
    return {"apply": by_apply, "prepared": by_prepared}, arrays


def timed(fn):
    """Idle, warm for WARM seconds, then time one block; seconds."""
    time.sleep(IDLE)
    end = time.perf_counter() + WARM
    while time.perf_counter() < end:
        fn()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def same_results(old, new, layout, seq_axis, kind, tensors=False):
    """Old and new give the same bits, by apply and by the prepared call, and
    the same as the general path (angles="table", the same rows)."""
    for how in ("apply", "prepared"):
        got = []
        for module in (old, new):
            fns, arrays = contenders(module, layout, seq_axis, kind, 8, tensors)
            fns[how]()
            got.append(arrays)
        for a, b in zip(*got):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (layout, seq_axis, kind, how)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 32, 128) if seq_axis == -3 else (1, 32, 1, 128)).astype(np.float32)
    rope = new.Rope(128, layout=layout)
    rope.apply(x, offset=BASE, seq_axis=seq_axis)
    direct = rope.apply(x, offset=BASE, seq_axis=seq_axis)
    general = rope.apply(x, offset=BASE, seq_axis=seq_axis, angles="table")
    assert np.array_equal(direct.view(np.uint32), general.view(np.uint32)), (layout, seq_axis)


def race_case(old, new, layout, seq_axis, kind, rounds, block, tensors=False):
    fns = {}
    for tag, module in (("old", old), ("new", new)):
        calls, _ = contenders(module, layout, seq_axis, kind, block, tensors)
        for how, fn in calls.items():
            fns[f"{tag} {how}"] = fn
    names = list(fns)
    for fn in fns.values():
        fn()
    per_round = []
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        per_round.append({n: timed(fns[n]) for n in order})
    ratios = {
        "old/new apply": [t["old apply"] / t["new apply"] for t in per_round],
        "old/new prepared": [t["old prepared"] / t["new prepared"] for t in per_round],
        "new apply/prepared": [t["new apply"] / t["new prepared"] for t in per_round],
        "old apply/prepared": [t["old apply"] / t["old prepared"] for t in per_round],
    }
    times = {n: float(np.median([t[n] for t in per_round])) / block for n in names}
    return ratios, times


def main(argv=None):
    import pyrope

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", default="main", help="the commit to race against (default main)")
    p.add_argument("--rounds", type=int, default=61)
    p.add_argument("--block", type=int, default=200, help="calls per timed block (at most %d)" % SLOTS)
    p.add_argument("--tensors", action="store_true", help="torch tensors instead of ndarrays (needs torch)")
    args = p.parse_args(argv)
    block = max(1, min(SLOTS, args.block))
    name, family, model, flags = cpu()
    with tempfile.TemporaryDirectory() as where:
        old = build_old(args.old, where)
        print(f"CPU: {name}, family {family} model {model}; flags: {flags}; {os.cpu_count()} CPUs")
        print(f"new: {pyrope.__file__} (ISA {pyrope.get_isa()}), old: {args.old} (ISA {old.get_isa()}); "
              f"{pyrope.get_num_threads()} threads; Python {platform.python_version()}, numpy {np.__version__}")
        print(f"{'torch tensors' if args.tensors else 'ndarrays'}; {args.rounds} rounds, blocks of {block} calls; load average at start "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        print("ratios: medians of per-round ratios (interquartile range); times: medians per call")
        head = ("| call | layout | cache | old/new apply | old/new prepared | new apply/prepared | "
                "old apply/prepared | new apply | new prepared | old apply |")
        print(head)
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for kind in ("apply", "apply_qk", "apply_qk in place"):
            for seq_axis in (-3, -2):
                for layout in ("split_half", "interleaved"):
                    same_results(old, pyrope, layout, seq_axis, kind, args.tensors)
                    ratios, times = race_case(old, pyrope, layout, seq_axis, kind, args.rounds, block, args.tensors)
                    cells = []
                    for key in ("old/new apply", "old/new prepared", "new apply/prepared", "old apply/prepared"):
                        q1, med, q3 = np.percentile(ratios[key], [25, 50, 75])
                        cells.append(f"{med:.3f} ({q1:.3f}-{q3:.3f})")
                    cache = "bshd" if seq_axis == -3 else "bhsd"
                    print(f"| {kind} | {layout} | {cache} | " + " | ".join(cells) + " | " +
                          " | ".join(f"{times[n] * 1e6:.2f} us" for n in ("new apply", "new prepared", "old apply"))
                          + " |", flush=True)
        print(f"load average at end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
