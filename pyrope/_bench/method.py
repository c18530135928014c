"""How ``pyrope bench`` measures: the timing of a round and the yardstick's
instruction set, one definition read by the timing (:mod:`pyrope.benchmark`,
the scripts under bench/) and by the report that states it
(``pyrope._bench.report``), which therefore never imports the benchmark."""
import contextlib
import sys
import time

IDLE = 0.002     # seconds of sleep before a contender: other pools fall asleep
QUIET = 0.1      # ... and then, while other threads of the process still run, up to this much more
WARM = 0.010     # seconds of calls after the idle gap, before timing
TIMED = 0.001    # a timed block holds about this much work ...
MAX_REPS = 100   # ... in at most this many calls

METHOD = ("Each round, every contender in a rotated order: idle {idle_ms:g} ms (longer, up to {quiet_ms:g} ms, "
          "while another contender's threads still run), ~{warm_ms:g} ms of warm-up calls, "
          "then a timed block of calls (about {timed_ms:g} ms, at most {max_reps} calls, sized in an uncounted "
          "first round). Ratios are per round, then the median; the yardstick is the better of its 1- and "
          "N-thread passes in each round.")


def quiesce(slice_seconds=0.005):
    """Sleep IDLE seconds, then on in slices while the process's other threads
    still use a tenth of a CPU or more (at most QUIET seconds more): ONNX
    Runtime's pool keeps spinning for ~40 ms after ``session.run`` returns
    (measured here: 0.8-1.6 CPUs), and a contender timed beside it had one
    core where it expected two (pyrope's 2-thread prefill of 1x8192x32x128
    float16 took 5.1 ms after ONNX Runtime, 2.0-2.4 ms otherwise)."""
    time.sleep(IDLE)
    deadline = time.perf_counter() + QUIET
    while True:
        w0, c0 = time.perf_counter(), time.process_time()
        time.sleep(slice_seconds)
        w1, c1 = time.perf_counter(), time.process_time()
        if (c1 - c0) < 0.1 * (w1 - w0) or w1 >= deadline:
            return


def timed(call, reps):
    """One contender's turn in a round: idle (``quiesce``), warm for WARM
    seconds, then time ``reps`` calls. Returns (seconds per timed call,
    seconds per warm-up call)."""
    quiesce()
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


class Rounds:
    """The rounds of one case: a mixin for a class holding ``contenders``
    ({key: an object with ``call``, ``reps`` and ``context()``}), ``times``
    ({key: [seconds per call, one per round]}), ``_round`` (rounds so far)
    and ``default_rounds``."""

    def one_round(self, calibrate=False):
        """Time every contender once, in an order rotated by one each round;
        ``calibrate``: size each contender's timed block from its warm-up
        calls instead of recording a time."""
        keys = list(self.contenders)
        self._round += 1
        k = self._round % len(keys)
        for key in keys[k:] + keys[:k]:
            con = self.contenders[key]
            with con.context():
                per_call, warm_per_call = timed(con.call, con.reps)
            if calibrate:
                con.reps = block_reps(warm_per_call)
            else:
                self.times[key].append(per_call)

    def measure(self, rounds=None):
        """A calibrating round (not counted), then ``rounds`` timed ones."""
        self.one_round(calibrate=True)
        for _ in range(rounds or self.default_rounds):
            self.one_round()


@contextlib.contextmanager
def torch_threads(n):
    """Run the body with torch on ``n`` threads (torch is the caller's, already imported)."""
    torch = sys.modules["torch"]
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def per_round(row):
    """{contender: array of per-round seconds} of a saved case (``row["times"]`` keyed
    ``name`` or ``"name @threads"``, the last ``row["rounds"]`` of each kept), a threaded
    contender's thread counts merged: the faster per round."""
    import numpy as np
    n = row["rounds"]
    out = {}
    for key, t in row["times"].items():
        name = key.split(" @")[0]
        t = np.array(t[-n:], dtype=float)
        out[name] = np.minimum(out[name], t) if name in out else t
    return out


def round_ratio(row, num, den):
    """(median, q1, q3) of the per-round ratios time[num] / time[den] of a saved case, or None."""
    import numpy as np
    t = per_round(row)
    if num not in t or den not in t:
        return None
    q1, med, q3 = np.percentile(t[num] / t[den], [25, 50, 75])
    return float(med), float(q1), float(q3)


def block_reps(warm):
    """Calls in a timed block for a call of ``warm`` seconds: about TIMED seconds, 1 to MAX_REPS."""
    return int(max(1, min(MAX_REPS, round(TIMED / max(warm, 1e-9)))))


def method():
    """How the run measured, as data and as a sentence (the values in effect now)."""
    values = {"idle_ms": IDLE * 1e3, "quiet_ms": QUIET * 1e3, "warm_ms": WARM * 1e3, "timed_ms": TIMED * 1e3,
              "max_reps": MAX_REPS}
    return dict(values, text=METHOD.format(**values))


def yardstick_isa():
    """The instruction set the yardstick runs under: the widest this machine has."""
    from .._engine import isa as _isa   # the report reads saved runs without the extension loaded
    return _isa.supported_isas()[-1]
