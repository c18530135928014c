"""What refusing a self-overlapping ``out`` costs, as a ratio to the rotation it refuses.

Issue 21: ``rope.apply(x, out=as_strided(buf, (16384, 8, 128), (0,) +
buf.strides[1:]))`` took a second to raise, 100x the rotation. Here x is
16384x8x128 float32 (the issue's shape, 64 MiB), split half, offset
positions, and the contenders are timed in the same rounds:

- ``rotate``: ``rope.apply(x, out=plain)``, a plain array of x's shape: the
  rotation the call would otherwise do, the yardstick of every ratio;
- ``zero stride``: the issue's out (token stride 0), which a cheap rule
  decides from shape and strides;
- ``tangled``: token and head strides of 12 and 9 heads' worth (3 tokens on
  is 4 heads on), which no cheap rule decides: its differences are listed.

Each refusal is timed as a first call (``first``: the direct path's memo
and the kept listing forgotten before every call, so the direct path plans
the call and the general path refuses it, each checking the out) and as a
repeated call (``again``: both kept). The rules of ``bench/README.md``: every
round idles 2 ms and warms each contender for ~10 ms before timing a block
of about 1 ms of calls (at most 100), the order rotates by one every round,
and each ratio is formed within a round, the median over rounds reported.

``python bench/bench_overlap.py [rounds] [--isa NAME]`` prints the table;
under pytest (``make bench``) it runs with the default rounds.
"""
import sys

import numpy as np

import pyrope
from pyrope import Rope
from pyrope._bench import report as _bench_report
from pyrope._engine import plan as _plan
from pyrope._bench.method import block_reps, timed
from pyrope.benchmark import check_against_reference, placed

SHAPE = (16384, 8, 128)
ROUNDS = 21
ROPE = Rope(SHAPE[-1], layout="split_half")
REFUSED = "out has elements that overlap each other"


def _arrays():
    """x, a plain out, and the two self-overlapping outs (over zeroed buffers of their own)."""
    x = placed(np.random.default_rng(21).standard_normal(SHAPE).astype(np.float32))
    plain = placed(np.zeros(SHAPE, np.float32))
    row = np.zeros((1,) + SHAPE[1:], np.float32)
    zero = np.lib.stride_tricks.as_strided(row, SHAPE, (0,) + row.strides[1:])
    head = SHAPE[-1] * 4
    strides = (12 * head, 9 * head, 4)
    buf = np.zeros(sum((n - 1) * s for n, s in zip(SHAPE, strides)) // 4 + 1, np.float32)
    tangled = np.lib.stride_tricks.as_strided(buf, SHAPE, strides)
    return x, plain, (zero, row), (tangled, buf)


def _forget():
    """The memos a first call finds empty: the direct path's plans and the kept listings."""
    _plan.CALLS.clear()
    _plan._LISTED.clear()


def _refusal(x, out, first):
    """A call of ``rope.apply(x, out=out)`` that must raise; ``first``: as a first call."""
    def call():
        if first:
            _forget()
        try:
            ROPE.apply(x, out=out)
        except pyrope.errors.ValueError:
            return
        raise AssertionError("the out was accepted")
    return call


def contenders():
    """{name: call}: the rotation first, then each refusal, first and again."""
    x, plain, (zero, _), (tangled, _) = arrays = _arrays()
    calls = {"rotate": lambda: ROPE.apply(x, out=plain)}
    for name, out in (("zero stride", zero), ("tangled", tangled)):
        calls[f"{name}, first"] = _refusal(x, out, True)
        calls[f"{name}, again"] = _refusal(x, out, False)
    return calls, arrays


def check(arrays):
    """Both outs are refused naming ``out``, nothing written; the zero stride
    lists nothing, the tangled out is listed once per first call; the rotation
    matches the reference on sampled heads."""
    x, plain, zero, tangled = arrays
    listing, counted = _plan._listed_overlap, []
    _plan._listed_overlap = lambda *a: counted.append(a) or listing(*a)
    try:
        for (out, buffer), lists in ((zero, 0), (tangled, 1)):
            _forget()
            counted.clear()
            try:
                ROPE.apply(x, out=out)
            except pyrope.errors.ValueError as e:
                assert str(e).startswith(REFUSED), e
            else:
                raise AssertionError("the out was accepted")
            assert len(counted) == lists, (out.strides, len(counted))
            assert not buffer.any()   # nothing written
    finally:
        _plan._listed_overlap = listing
    ROPE.apply(x, out=plain)
    positions = np.arange(SHAPE[0])[None]
    check_against_reference("rotate", plain[None], x[None], ROPE, positions, "float32",
                            np.random.default_rng(0), peer=False)


def measure(calls, rounds=ROUNDS):
    """{name: per-round seconds per call}, every contender timed once a round
    in an order rotating by one; an uncounted first round sizes the blocks."""
    names = list(calls)
    reps = {}
    for name in names:
        _, warm = timed(calls[name], 1)
        reps[name] = block_reps(warm)
    times = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(timed(calls[name], reps[name])[0])
    return {name: np.array(t) for name, t in times.items()}, reps


def summary(times, reps, machine, isa):
    """The table: median time, median and IQR of the per-round ratio to the rotation."""
    base = times["rotate"]
    lines = [f"CPU: {_bench_report.cpu_line(machine['cpu'])}; {machine['cpus']} CPUs",
             f"pyrope ISA: {isa} (supported: {', '.join(machine['supported_isas'])}); "
             f"{machine['threads']} threads; Python {machine['versions']['python']}, "
             f"numpy {machine['versions']['numpy']}",
             f"load average (1, 5, 15 min) at start {' '.join(map(str, machine['load_average']))}, "
             f"at end {' '.join(map(str, _bench_report.machine_info()['load_average']))}",
             "",
             f"{'x'.join(map(str, SHAPE))} float32, split half: medians of {base.size} rounds "
             f"(time / rotate: median of the per-round ratios)",
             "",
             "| contender | time | time / rotate | IQR | calls timed |",
             "|---|---:|---:|---:|---:|"]
    for name, t in times.items():
        q1, med, q3 = np.percentile(t / base, [25, 50, 75])
        lines.append(f"| {name} | {_seconds(float(np.median(t)))} | {med:.3g} | {q1:.3g}-{q3:.3g} | "
                     f"{reps[name]} |")
    return "\n".join(lines)


def _seconds(t):
    return f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


def run(rounds=ROUNDS, isa=None):
    """Check, then time every contender under ``isa`` (default: pyrope's); the table."""
    isa = isa or pyrope.get_isa()
    machine = _bench_report.machine_info()
    with pyrope.forced_isa(isa):
        calls, arrays = contenders()
        check(arrays)
        times, reps = measure(calls, rounds)
    return summary(times, reps, machine, isa)


def test_overlap_refusal(benchmark, capsys):
    table = benchmark.pedantic(run, rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + table)


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = None
    if "--isa" in args:
        i = args.index("--isa")
        chosen = args[i + 1]
        del args[i:i + 2]
    print(run(int(args[0]) if args else ROUNDS, chosen))
