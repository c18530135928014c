"""Table generation: pyrope against the recipes CPU backends use today.

Tables of ``n`` positions x 64 frequency pairs (head_dim 128, base 1e4),
float32, single thread:

- ``pyrope``: ``Rope.cos_sin(arange(n))``, correctly rounded (dense kernel);
- ``pyrope scattered``: the same positions shuffled (per-position kernel);
- ``pyrope scalar``: the scalar specification;
- ``numpy float64``: ``np.outer`` in float64, ``np.cos``/``np.sin``, cast to float32;
- ``numpy float32``: the same in float32 (what float32-angle backends compute);
- ``torch float32 (HF)``: the transformers recipe, float32 ``inv_freq`` and
  angles, halves duplicated by ``cat`` (only when torch is installed).

Each contender has its own pytest-benchmark; ``test_table_summary`` times all
of them round-robin in one loop (order rotating, each warmed ~10 ms after an
idle gap, so machine noise hits all alike), prints median times, entries/s
(an entry is one (position, pair): one cos and one sin), medians of
per-round speed ratios, and the largest error in float32 ulps of each method at
positions near 4096, 131072 and 1e6, against mpmath on the exact angle.
"""
import time

import mpmath as mp
import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._bench.method import IDLE, WARM

try:
    import torch
except ImportError:  # torch is an optional peer
    torch = None

HEAD_DIM = 128
BASE = 10000.0
SIZES = [4096, 131072]
ERROR_AT = [4096, 131072, 1_000_000]
ROPE = Rope(HEAD_DIM, layout="split_half", base=BASE)
INV_FREQ = ROPE.inv_freq                      # float64: the frequencies the model means


def _pyrope(pos):
    return ROPE.cos_sin(pos)


def _pyrope_scalar(pos):
    with pyrope.forced_isa("scalar"):
        return ROPE.cos_sin(pos)


def _numpy64(pos):
    ang = np.outer(pos.astype(np.float64), INV_FREQ)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


_INV_FREQ32 = INV_FREQ.astype(np.float32)


def _numpy32(pos):
    ang = np.outer(pos.astype(np.float32), _INV_FREQ32)
    return np.cos(ang), np.sin(ang)


def _torch_hf(pos):
    # transformers' default RoPE: float32 inv_freq and angles, halves duplicated.
    inv = 1.0 / (BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
    freqs = torch.outer(torch.from_numpy(pos).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = HEAD_DIM // 2
    return emb.cos()[:, :half].numpy(), emb.sin()[:, :half].numpy()


CONTENDERS = {
    "pyrope": (_pyrope, "arange"),
    "pyrope scattered": (_pyrope, "shuffled"),
    "pyrope scalar": (_pyrope_scalar, "arange"),
    "numpy float64": (_numpy64, "arange"),
    "numpy float32": (_numpy32, "arange"),
}
if torch is not None:
    CONTENDERS["torch float32 (HF)"] = (_torch_hf, "arange")


def _positions(n, kind):
    pos = np.arange(n, dtype=np.int64)
    if kind == "shuffled":
        np.random.default_rng(0).shuffle(pos)
    return pos


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    if torch is not None:
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(previous)
    else:
        yield


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(CONTENDERS))
def test_table(benchmark, name, n):
    fn, kind = CONTENDERS[name]
    pos = _positions(n, kind)
    benchmark.extra_info["entries"] = n * INV_FREQ.size
    cos, sin = benchmark(fn, pos)
    assert cos.shape == sin.shape == (n, INV_FREQ.size)


# ---- errors against mpmath --------------------------------------------------

def _closest_to_zero(w, top):
    """The position m < top where m * w comes closest to a multiple of pi/2
    (the last continued-fraction convergent of w / (pi/2) below top)."""
    with mp.workprec(200):
        x = mp.mpf(float(w)) * 2 / mp.pi
        q_prev, q, best = 1, 0, 1
        for _ in range(60):
            a = int(mp.floor(x))
            q_prev, q = q, a * q + q_prev
            if q >= top:
                return best
            best = q
            if x == a:
                return best
            x = 1 / (x - a)
    return best


def _sample_positions(top):
    """The 32 positions just below ``top``, 32 random ones below it, and for
    each frequency the position below ``top`` where cos or sin is nearest 0."""
    rng = np.random.default_rng(top)
    near_zero = [_closest_to_zero(w, top) for w in INV_FREQ]
    return np.concatenate([np.arange(top - 32, top), rng.integers(0, top, 32),
                           near_zero]).astype(np.int64)


def _exact(pos):
    c = np.empty((pos.size, INV_FREQ.size))
    s = np.empty_like(c)
    with mp.workprec(200):
        for j, m in enumerate(pos):
            for i, w in enumerate(INV_FREQ):
                cj, sj = mp.cos_sin(mp.mpf(int(m)) * mp.mpf(float(w)))  # exact product
                c[j, i], s[j, i] = float(cj), float(sj)
    return c, s


def _errors(got, exact):
    """(max error in float32 ulps of the exact value, max absolute error)."""
    err = np.abs(np.asarray(got, dtype=np.float64) - exact)
    ulp = np.ldexp(1.0, np.maximum(np.frexp(exact)[1] - 24, -149))
    return float(np.max(err / ulp)), float(np.max(err))


def max_errors():
    """{contender: [(max ulp error, max absolute error) near each of ERROR_AT]}."""
    out = {name: [] for name in CONTENDERS}
    for top in ERROR_AT:
        pos = _sample_positions(top)
        want_c, want_s = _exact(pos)
        for name, (fn, _) in CONTENDERS.items():
            c, s = fn(pos)
            (uc, ac), (us, as_) = _errors(c, want_c), _errors(s, want_s)
            out[name].append((max(uc, us), max(ac, as_)))
    return out


# ---- the summary: every contender timed in each repetition -----------------

def round_robin(n, repeats=7):
    """{contender: (median seconds, median of the per-round ratios time / pyrope's)}
    for n positions. Every round times each contender once, in an order that
    rotates from round to round, after an idle gap and ~10 ms of warm-up calls
    (this VM's caches and second core come back slowly after idling)."""
    names = list(CONTENDERS)
    times = {name: [] for name in names}
    inputs = {name: _positions(n, kind) for name, (_, kind) in CONTENDERS.items()}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, x = CONTENDERS[name][0], inputs[name]
            time.sleep(IDLE)
            end = time.perf_counter() + WARM
            fn(x)
            while time.perf_counter() < end:
                fn(x)
            t0 = time.perf_counter()
            fn(x)
            times[name].append(time.perf_counter() - t0)
    base = np.array(times["pyrope"])
    return {name: (float(np.median(t)), float(np.median(np.array(t) / base))) for name, t in times.items()}


def format_summary(medians, errors):
    """The printed table: per size, time, entries/s, ratios; then errors."""
    lines = []
    for n, med in medians.items():
        entries = n * INV_FREQ.size
        lines.append(f"\n{n} positions x {INV_FREQ.size} pairs, single thread, medians of a round-robin loop "
                     "(time / pyrope: median of per-round ratios)")
        lines.append(f"{'method':22s} {'ms':>9s} {'Mentries/s':>11s} {'time / pyrope':>14s}")
        for name, (t, ratio) in med.items():
            lines.append(f"{name:22s} {t * 1e3:9.2f} {entries / t / 1e6:11.1f} {ratio:14.2f}")
    for k, title in ((0, "max error in float32 ulps of the exact value"), (1, "max absolute error")):
        lines.append(f"\n{title} (vs mpmath on the exact angle), near position")
        lines.append(f"{'method':22s} " + " ".join(f"{p:>10d}" for p in ERROR_AT))
        for name, errs in errors.items():
            lines.append(f"{name:22s} " + " ".join(f"{e[k]:10.3g}" for e in errs))
    return "\n".join(lines)


def test_table_summary(benchmark, capsys):
    def run():
        return {n: round_robin(n) for n in SIZES}

    medians = benchmark.pedantic(run, rounds=1, iterations=1)
    errors = max_errors()
    with capsys.disabled():
        print(format_summary(medians, errors))
    # pyrope's own entries are correctly rounded everywhere.
    for name in ("pyrope", "pyrope scattered", "pyrope scalar"):
        assert max(e[0] for e in errors[name]) <= 0.5 + 1e-6


if __name__ == "__main__":
    # python bench/bench_tables.py [n1,n2,...] [repeats]: the summary alone.
    import sys
    sizes = [int(float(v)) for v in sys.argv[1].split(",")] if len(sys.argv) > 1 else SIZES
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    if torch is not None:
        torch.set_num_threads(1)
    print(format_summary({n: round_robin(n, repeats) for n in sizes}, max_errors()))
