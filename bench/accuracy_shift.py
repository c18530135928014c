"""Shifting quantised keys: the error after 1, 10 and 100 shifts of a cache.

    python bench/accuracy_shift.py [--json PATH] [--tokens 256] [--heads 8] [--seed 0]

Keys ``k`` (Gaussian, ``tokens x heads x 128``, float32, one seed) are
written with ``Rope.cache_write`` at positions ``p0 + t`` into each cache
kind (int8 with a scale per slot and head, float8 e4m3fn with the static
scale 1.0, q8_0, and float32 for contrast), then moved ``n`` times with
``Rope.shift_keys`` along one random walk of the window: every key of the
window moves by the same ``delta`` per shift, ``delta`` uniform in
``[-8192, 8192]`` without 0, turned around where the window would leave
positions ``[0, 131072)``; it starts at ``p0 = 65536`` and after ``n`` shifts
stands at ``p1 = p0 + sum(delta)``. At ``n`` = 1, 10 and 100 the cache
(``pyrope.dequantize``) is compared with:

- (a) the exact key at ``p1``: ``Rope.apply`` of ``k`` in float64;
- (b) the key quantised once at ``p1``: ``cache_write`` of ``k`` at ``p1``
  into a fresh cache, the best a cache of that kind can hold;
- (c) llama.cpp's sequence (tests/support/ggml_shift.py): the same first
  cache moved by the same deltas as ``build_rope_shift`` does it, ggml's
  float32 rope with a dequantisation before and a quantisation after (for
  q8_0 ggml's own x86 quantiser; llama.cpp has no int8 or float8 cache, so
  those use the kind's formula around ggml's rope, and the float32 cache the
  rope alone).

Errors are reported relative to the largest ``|key|`` of the head (max and
RMS over every value) and in quantisation steps of the exact key: int8
``amax(head) / 127``, q8_0 ``amax(block of 32) / 127``, float8 the e4m3
spacing ``2^(e - 3)`` (``e = floor(log2(r / scale))``, at least -6) times the
scale at the length ``r`` of the value's pair (a rotation keeps it; a
coordinate's own spacing is at most that), float32 the float32 ulp of the
head's largest ``|key|``. The last column also gives the share of stored
values pyrope and llama.cpp's sequence agree on exactly.
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

import ml_dtypes  # noqa: E402

import pyrope  # noqa: E402
from pyrope._bench import report as _report  # noqa: E402
import ggml_shift  # noqa: E402

F8 = np.dtype(ml_dtypes.float8_e4m3fn)
KINDS = ("int8", "fp8", "q8_0", "float32")
SHIFTS = (1, 10, 100)
CASES = ((500000.0, "interleaved"), (500000.0, "split_half"), (10000.0, "interleaved"), (10000.0, "split_half"))
HEAD_DIM = 128
BLOCK = 16
P0, SPAN, P_END = 65536, 8192, 131072
FP8_SCALE = 1.0


def walk(rng, n, tokens):
    """``n`` deltas of the window start: uniform in [-SPAN, SPAN] but 0, reversed
    where the window [start, start + tokens) would leave [0, P_END)."""
    start, deltas = P0, []
    for _ in range(n):
        d = 0
        while d == 0:
            d = int(rng.integers(-SPAN, SPAN + 1))
        if not 0 <= start + d <= P_END - tokens:
            d = -d
        start += d
        deltas.append(d)
    return deltas


class Cache:
    """One cache of a kind, written by pyrope and moved by shift_keys."""

    def __init__(self, kind, tokens, heads):
        blocks = tokens // BLOCK
        shape = (blocks, BLOCK, heads)
        self.kind, self.tokens, self.heads = kind, tokens, heads
        self.slots = np.arange(tokens, dtype=np.int64)
        if kind == "q8_0":
            self.data = np.zeros(shape + (HEAD_DIM // 32,), pyrope.Q8_0)
        else:
            self.data = np.zeros(shape + (HEAD_DIM,), {"int8": np.int8, "fp8": F8, "float32": np.float32}[kind])
        self.scale = np.zeros(shape, np.float32) if kind == "int8" else FP8_SCALE if kind == "fp8" else None

    def write(self, rope, k, positions):
        rope.cache_write(k, None, self.data, None, self.slots, positions=positions, k_scale=self.scale)
        return self

    def shift(self, rope, frm, to):
        rope.shift_keys(self.data, self.slots, frm, to, k_scale=self.scale)

    def values(self):
        v = pyrope.dequantize(self.data, scale=self.scale) if self.kind != "float32" else self.data
        return np.asarray(v, np.float32).reshape(self.tokens, self.heads, HEAD_DIM)


def pairs(x, layout):
    """The two coordinates of every rotated pair of ``x [..., head_dim]``."""
    h = x.shape[-1] // 2
    return (x[..., :h], x[..., h:]) if layout == "split_half" else (x[..., 0::2], x[..., 1::2])


def steps(kind, exact, layout):
    """The quantisation step of each exact value (float64, the shape of ``exact``)."""
    a = np.abs(exact)
    if kind == "int8":
        return np.broadcast_to(a.max(axis=-1, keepdims=True) / 127, a.shape)
    if kind == "q8_0":
        b = a.reshape(a.shape[:-1] + (-1, 32))
        return np.broadcast_to(b.max(axis=-1, keepdims=True) / 127, b.shape).reshape(a.shape)
    if kind == "fp8":
        # the spacing at the pair's length, which a rotation keeps (a coordinate's own is at most that)
        x0, x1 = pairs(exact, layout)
        r = np.hypot(x0, x1) / FP8_SCALE
        e = np.maximum(np.floor(np.log2(np.where(r > 0, r, 1.0))), -6)
        e = np.where(r > 0, e, -6)
        step = np.exp2(e - 3) * FP8_SCALE
        out = np.empty_like(a)
        o0, o1 = pairs(out, layout)
        o0[...], o1[...] = step, step
        return out
    return np.broadcast_to(np.exp2(np.floor(np.log2(a.max(axis=-1, keepdims=True))) - 23), a.shape)


def compare(kind, layout, got, ref, exact):
    """max and RMS of ``got - ref``: relative to the head's largest |exact key| and in steps of ``exact``."""
    err = np.asarray(got, np.float64) - np.asarray(ref, np.float64)
    rel = err / np.abs(exact).max(axis=-1, keepdims=True)
    st = err / steps(kind, exact, layout)
    return {"max_rel": float(np.abs(rel).max()), "rms_rel": float(np.sqrt(np.mean(rel ** 2))),
            "max_steps": float(np.abs(st).max()), "rms_steps": float(np.sqrt(np.mean(st ** 2))),
            "identical": float(np.mean(err == 0))}


def run_case(base, layout, tokens, heads, seed):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((tokens, heads, HEAD_DIM)).astype(np.float32)
    deltas = walk(rng, max(SHIFTS), tokens)
    rope = pyrope.Rope(head_dim=HEAD_DIM, base=base, layout=layout)
    t = np.arange(tokens, dtype=np.int64)
    rows = []
    for kind in KINDS:
        cache = Cache(kind, tokens, heads).write(rope, k, P0 + t)
        ggml = ggml_shift.KShift(cache.kind, cache.data, cache.scale, cache.tokens, cache.heads, FP8_SCALE)
        start = P0
        for n, delta in enumerate(deltas, 1):
            cache.shift(rope, start + t, start + delta + t)
            ggml.shift(delta, base, layout)
            start += delta
            if n not in SHIFTS:
                continue
            p1 = start + t
            exact = rope.apply(k.astype(np.float64)[None], positions=p1[None])[0]
            once = Cache(kind, tokens, heads).write(rope, k, p1).values()
            got, theirs = cache.values(), ggml.values()
            rows.append({"base": base, "layout": layout, "kind": kind, "shifts": n, "p1": int(start),
                         "exact": compare(kind, layout, got, exact, exact), "once": compare(kind, layout, got, once, exact),
                         "once_exact": compare(kind, layout, once, exact, exact),
                         "ggml": compare(kind, layout, got, theirs, exact),
                         "ggml_exact": compare(kind, layout, theirs, exact, exact)})
    return rows, deltas


def machine():
    versions = {"python": platform.python_version(), "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                "pyrope": pyrope.__version__}
    return {"cpu": _report.cpu_line(_report.cpu_info()), "versions": versions, "isa": pyrope.get_isa(),
            "libm": ggml_shift.LIBM}


def fmt(x):
    return f"{x:.2g}" if x < 0.01 else f"{x:.3f}" if x < 1 else f"{x:.2f}"


def pair(m, key):
    return f"{fmt(m['max_' + key])} / {fmt(m['rms_' + key])}"


def share(m):
    return f"{100 * m['identical']:.1f} %"


def markdown(rows, info, deltas):
    out = [f"{info['cpu']}; Python {info['versions']['python']}, numpy {info['versions']['numpy']}, "
           f"ml_dtypes {info['versions']['ml_dtypes']}, pyrope {info['versions']['pyrope']} ({info['isa']}); "
           f"ggml's powf/cosf/sinf: {info['libm']}",
           f"{info['tokens']} tokens x {info['heads']} heads x {HEAD_DIM}, seed {info['seed']}; "
           f"window walk from {P0}: first deltas {deltas[:10]}", ""]
    for base, layout in sorted({(r["base"], r["layout"]) for r in rows}, key=lambda c: (-c[0], c[1])):
        out += [f"base {base:g}, {layout} (llama.cpp: {'NEOX' if layout == 'split_half' else 'NORMAL'})", "",
                "| cache | shifts | pyrope - exact, of max\\|k\\| | pyrope - exact, steps | once at p1 - exact, steps "
                "| pyrope - once at p1, steps | llama.cpp - exact, steps | pyrope - llama.cpp, steps (same) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if (r["base"], r["layout"]) != (base, layout):
                continue
            out.append(f"| {r['kind']} | {r['shifts']} | {pair(r['exact'], 'rel')} | {pair(r['exact'], 'steps')} "
                       f"| {pair(r['once_exact'], 'steps')} | {pair(r['once'], 'steps')} "
                       f"| {pair(r['ggml_exact'], 'steps')} | {pair(r['ggml'], 'steps')} ({share(r['ggml'])}) |")
        out += ["", "each cell: max / RMS over every value", ""]
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=256, help="a multiple of 16 (the block size)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also write the rows and the machine as JSON")
    args = p.parse_args(argv)
    started = time.perf_counter()
    rows, deltas = [], None
    for base, layout in CASES:
        case_rows, deltas = run_case(base, layout, args.tokens, args.heads, args.seed)
        rows += case_rows
    info = dict(machine(), tokens=args.tokens, heads=args.heads, seed=args.seed,
                seconds=round(time.perf_counter() - started, 1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": info, "deltas": deltas, "rows": rows}, f, indent=1)
    print(markdown(rows, info, deltas))


if __name__ == "__main__":
    main()
