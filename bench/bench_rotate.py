"""Rotation speed against a bandwidth yardstick and the peers, in one run.

The contenders (pyrope under each instruction set, in both layouts, the
yardstick on 1 and N threads, numpy, torch, onnxruntime), the correctness
check against the reference and the round-robin timing live in
``pyrope.benchmark`` (also behind ``pyrope bench``); this file runs every
case x dtype under pytest-benchmark and adds the Python overhead of a decode
call. ``bench/README.md`` describes the method; the tables, the targets and,
with ``--bench-json PATH``, the JSON of the run are written at the end.
"""
import time

import numpy as np
import pytest

import ml_dtypes  # noqa: F401 - the bench extra installs it: bfloat16 cases always run
from pyrope import Rope
from pyrope.benchmark import DTYPES, SHAPES, Case


def _cases():
    for case in SHAPES:
        for dtype in DTYPES:
            yield pytest.param(case, dtype, id=f"{case}-{dtype}")


@pytest.mark.parametrize("case,dtype_name", list(_cases()))
def test_rotate(benchmark, results, case, dtype_name):
    c = Case(case, dtype_name)
    c.check()
    c.one_round(calibrate=True)   # sizes each contender's timed block; not counted
    benchmark.pedantic(c.one_round, rounds=c.default_rounds, iterations=1)
    rows = c.rows()
    benchmark.extra_info["yard_ratio"] = {f"{r['isa']} {r['layout']} {r['call']}": r["yard_ratio"]
                                          for r in rows if r["kind"] == "rotate"}
    results.extend(rows)


def test_call_overhead(benchmark, results):
    """The Python layer of a decode call: apply() minus the bare C call it makes
    (the same descriptors, already filled)."""
    from pyrope._engine import plan as _plan
    from pyrope._engine.binding import lib
    shape = (16, 1, 32, 128)
    rope = Rope(128, layout="split_half")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    k = x[:, :, :8].copy()
    rope.apply(x, offset=1000, out=x)   # builds the rows
    rope.apply(x, offset=1000, out=x)   # plans the direct call
    call = _plan.CALLS[_plan.direct_key(rope._plan_tag, -3, False, x, None)]
    op, _, _, tensors, angles, _ = call._local.bound

    def c_call():
        lib.rope_rotate(op, tensors, 1, angles)

    calls = {"apply": lambda: rope.apply(x, offset=1000, out=x), "c_call": c_call,
             "apply_qk": lambda: rope.apply_qk(x, k, offset=1000, out=(x, k))}
    times = {n: [] for n in calls}

    def one_round():
        for n, f in calls.items():
            t0 = time.perf_counter()
            for _ in range(20):
                f()
            times[n].append((time.perf_counter() - t0) / 20)

    benchmark.pedantic(one_round, rounds=300, iterations=1, warmup_rounds=5)
    med = {n: float(np.median(v)) for n, v in times.items()}
    over = float(np.median(np.array(times["apply"]) - np.array(times["c_call"])))
    results.append({"kind": "overhead", "shape": "16x1x32x128", "dtype": "float32",
                    "apply": med["apply"], "c_call": med["c_call"], "overhead": over,
                    "apply_qk": med["apply_qk"]})
    benchmark.extra_info.update(med)
