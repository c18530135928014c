"""How ``pyrope bench`` measures: the timing of a round and the yardstick's
instruction set, one definition read by the timing (:mod:`pyrope.benchmark`,
the scripts under bench/) and by the report that states it
(``pyrope._bench.report``), which therefore never imports the benchmark."""
import time

IDLE = 0.002     # seconds of sleep before a contender: other pools fall asleep
WARM = 0.010     # seconds of calls after the idle gap, before timing
TIMED = 0.001    # a timed block holds about this much work ...
MAX_REPS = 100   # ... in at most this many calls

METHOD = ("Each round, every contender in a rotated order: idle {idle_ms:g} ms, ~{warm_ms:g} ms of warm-up calls, "
          "then a timed block of calls (about {timed_ms:g} ms, at most {max_reps} calls, sized in an uncounted "
          "first round). Ratios are per round, then the median; the yardstick is the better of its 1- and "
          "N-thread passes in each round.")


def timed(call, reps):
    """One contender's turn in a round: idle IDLE seconds, warm for WARM
    seconds, then time ``reps`` calls. Returns (seconds per timed call,
    seconds per warm-up call)."""
    time.sleep(IDLE)
    start = time.perf_counter()
    end = start + WARM
    n = 0
    while True:
        call()
        n += 1
        now = time.perf_counter()
        if now >= end:
            break
    warm = (now - start) / n
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - t0) / reps, warm


def block_reps(warm):
    """Calls in a timed block for a call of ``warm`` seconds: about TIMED seconds, 1 to MAX_REPS."""
    return int(max(1, min(MAX_REPS, round(TIMED / max(warm, 1e-9)))))


def method():
    """How the run measured, as data and as a sentence (the values in effect now)."""
    values = {"idle_ms": IDLE * 1e3, "warm_ms": WARM * 1e3, "timed_ms": TIMED * 1e3, "max_reps": MAX_REPS}
    return dict(values, text=METHOD.format(**values))


def yardstick_isa():
    """The instruction set the yardstick runs under: the widest this machine has."""
    from .._engine import isa as _isa   # the report reads saved runs without the extension loaded
    return _isa.supported_isas()[-1]
