"""One call measured: its result or the RopeError it raised, with the peak of
Python's allocations (tracemalloc) and the seconds it took. The hostile-input
tests bound both."""
import time
import tracemalloc

from pyrope import RopeError


def measured(call):
    """``(outcome, peak bytes, seconds)`` of ``call()``; ``outcome`` is its result or
    the RopeError it raised (any other exception propagates)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        try:
            outcome = call()
        except RopeError as exc:
            outcome = exc
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return outcome, peak, seconds
