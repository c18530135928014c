"""Where a call's time goes: its C call against the whole call, for the bench
scripts' ``--profile`` (bench/bench_fused.py, bench/bench_quant.py). The C call
is timed inside the Python call, its arrays alive, by wrapping the launcher's
entry points for that one call."""
import time

import numpy as np

# the launcher's names for the C entry points a Call runs
_ENTRIES = ("_rotate", "_rotate_staged", "_rotate_quantised")


def c_time(call, repeats, blocks=5):
    """Seconds per C call of ``call()``'s one ``rope_rotate``/``rope_rotate_staged``/
    ``rope_rotate_quantised``, per block: inside the call (its arrays alive), the
    same C call repeated ``repeats`` times, ``blocks`` times over; then the call
    completes normally."""
    from .._engine import launcher
    found = []

    def timing(real):
        def wrapped(*args):
            real(*args)
            for _ in range(blocks):
                t0 = time.perf_counter()
                for _ in range(repeats):
                    real(*args)
                found.append((time.perf_counter() - t0) / repeats)
            return real(*args)
        return wrapped
    saved = [getattr(launcher, n) for n in _ENTRIES]
    for n, real in zip(_ENTRIES, saved):
        setattr(launcher, n, timing(real))
    try:
        call()
    finally:
        for n, real in zip(_ENTRIES, saved):
            setattr(launcher, n, real)
    return found


def whole_time(call, n):
    """Seconds per call of ``n`` calls of ``call()`` in a row."""
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t0) / n


def split(call, n, repeats=7):
    """(whole call, its C call, the rest), medians of ``repeats`` alternating
    blocks of ``n`` whole calls and ``n`` C calls (the rest: of the per-block
    differences), seconds."""
    for _ in range(max(3, n // 10)):
        call()
    whole, c_only = [], []
    for _ in range(repeats):
        whole.append(whole_time(call, n))
        c_only.append(float(np.median(c_time(call, n, 1))))
    whole, c_only = np.array(whole), np.array(c_only)
    return float(np.median(whole)), float(np.median(c_only)), float(np.median(whole - c_only))
