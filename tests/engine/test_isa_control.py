"""``forced_isa`` and ``set_isa`` under threads: the choice is process-wide,
the ISA in effect is the most recently entered active ``forced_isa`` block's
(else the base choice of ``set_isa``), and blocks may overlap and end in any
order in any threads: the last to end restores the base.

Interleavings are fixed by events (each thread waits for the step before
its own), never by sleeps."""
import threading

import numpy as np
import pytest

import pyrope

SUPPORTED = pyrope.supported_isas()
# "scalar", one between and the best this CPU runs (all equal where only scalar runs)
LOW, MID, HIGH = SUPPORTED[0], SUPPORTED[len(SUPPORTED) // 2], SUPPORTED[-1]


@pytest.fixture(autouse=True)
def base_restored():
    """Each test starts from, and leaves, the best ISA as the base choice."""
    pyrope.set_isa("auto")
    yield
    pyrope.set_isa("auto")
    assert pyrope.get_isa() == HIGH


class Steps:
    """Named steps run in a fixed global order by several threads: ``step(i)``
    waits until steps ``0..i-1`` are done, runs, and marks ``i`` done."""

    def __init__(self, n):
        self.done = [threading.Event() for _ in range(n)]
        self.seen = {}
        self.errors = []

    def at(self, i, record=None):
        if i:
            assert self.done[i - 1].wait(10), f"step {i - 1} never came"
        if record is not None:
            self.seen[record] = pyrope.get_isa()

    def finish(self, i):
        self.done[i].set()


def run_threads(*targets):
    steps_errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # reported by the test, not lost in the thread
                steps_errors.append(exc)
        return run
    threads = [threading.Thread(target=guard(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    if steps_errors:
        raise steps_errors[0]


@pytest.mark.parametrize("first_out", ["A", "B"])
def test_overlapping_blocks_of_one_isa_restore_the_base(first_out):
    # A enters, B enters, one leaves, the other leaves: the reported case left
    # the process on scalar for good.
    s = Steps(4)

    def a():
        s.at(0)
        with pyrope.forced_isa(LOW):
            s.finish(0)
            s.at(2 if first_out == "A" else 3, "A inside")
            if first_out == "B":
                s.seen["A alone"] = pyrope.get_isa()
        s.finish(2 if first_out == "A" else 3)

    def b():
        s.at(1)
        with pyrope.forced_isa(LOW):
            s.seen["both"] = pyrope.get_isa()
            s.finish(1)
            s.at(2 if first_out == "B" else 3)
            if first_out == "A":
                s.seen["B alone"] = pyrope.get_isa()
        s.finish(2 if first_out == "B" else 3)

    run_threads(a, b)
    assert s.seen["both"] == LOW and s.seen.get("A alone", s.seen.get("B alone")) == LOW
    assert pyrope.get_isa() == HIGH


def test_blocks_of_different_isas_end_in_any_order():
    # base HIGH; A forces LOW, B forces MID, A leaves first: B's block holds
    # until it ends, then the base.
    s = Steps(4)

    def a():
        with pyrope.forced_isa(LOW):
            s.seen["A entered"] = pyrope.get_isa()
            s.finish(0)
            s.at(2)
        s.seen["A left, B active"] = pyrope.get_isa()
        s.finish(2)

    def b():
        s.at(1)
        with pyrope.forced_isa(MID):
            s.seen["both, B last"] = pyrope.get_isa()
            s.finish(1)
            s.at(3)
        s.finish(3)

    run_threads(a, b)
    assert s.seen == {"A entered": LOW, "both, B last": MID, "A left, B active": MID}
    assert pyrope.get_isa() == HIGH


def test_the_most_recent_active_block_holds_when_a_later_one_ends():
    # A forces HIGH, B forces LOW, B leaves first: A's HIGH again, then the base.
    pyrope.set_isa(LOW)
    s = Steps(3)

    def a():
        with pyrope.forced_isa(HIGH):
            s.finish(0)
            s.at(2, "B left")
        s.seen["all left"] = pyrope.get_isa()

    def b():
        s.at(1)
        with pyrope.forced_isa(LOW):
            s.seen["B inside"] = pyrope.get_isa()
        s.finish(1)
        s.finish(2)

    run_threads(a, b)
    assert s.seen == {"B inside": LOW, "B left": HIGH, "all left": LOW}


def test_set_isa_during_blocks_takes_effect_when_the_last_ends():
    s = Steps(3)

    def a():
        with pyrope.forced_isa(LOW):
            s.finish(0)
            s.at(2, "after set_isa")
        s.seen["after the block"] = pyrope.get_isa()

    def b():
        s.at(1)
        pyrope.set_isa(HIGH)
        s.finish(1)
        s.finish(2)

    pyrope.set_isa(LOW)
    run_threads(a, b)
    assert s.seen == {"after set_isa": LOW, "after the block": HIGH}


def test_a_block_ended_by_an_exception_restores_too():
    with pytest.raises(RuntimeError):
        with pyrope.forced_isa(LOW):
            with pyrope.forced_isa(HIGH):
                raise RuntimeError("inside")
    assert pyrope.get_isa() == HIGH


def test_nested_blocks_in_one_thread():
    with pyrope.forced_isa(LOW):
        with pyrope.forced_isa(HIGH):
            assert pyrope.get_isa() == HIGH
        assert pyrope.get_isa() == LOW
        pyrope.set_isa(LOW)                  # the base, for after the blocks
        assert pyrope.get_isa() == LOW
    assert pyrope.get_isa() == LOW
    pyrope.set_isa("auto")
    assert pyrope.get_isa() == HIGH


def test_many_threads_entering_and_leaving_in_a_scrambled_order(rng):
    # 8 threads enter blocks (alternating ISAs) in one random order and leave
    # in another; after each step the ISA is the most recent active block's.
    n = 8
    names = [LOW if i % 2 else HIGH for i in range(n)]
    order = [("enter", i) for i in rng.permutation(n)]
    leave = [("leave", i) for i in rng.permutation(n)]
    script = order + leave
    s = Steps(len(script))
    active, expected = [], []
    for kind, i in script:           # what the ISA must be after each step
        if kind == "enter":
            active.append(i)
        else:
            active.remove(i)
        expected.append(names[active[-1]] if active else HIGH)
    got = [None] * len(script)

    def worker(i):
        def run():
            enter = script.index(("enter", i))
            leave_at = script.index(("leave", i))
            s.at(enter)
            with pyrope.forced_isa(names[i]):
                got[enter] = pyrope.get_isa()
                s.finish(enter)
                s.at(leave_at)
            got[leave_at] = pyrope.get_isa()
            s.finish(leave_at)
        return run

    run_threads(*(worker(i) for i in range(n)))
    assert got == expected


def test_rotations_inside_a_block_use_its_kernels_and_agree():
    rope = pyrope.Rope(64, layout="interleaved")
    x = np.random.default_rng(1).standard_normal((3, 4, 64)).astype(np.float32)
    results = {}
    for name in SUPPORTED:
        with pyrope.forced_isa(name):
            assert pyrope.get_isa() == name
            results[name] = rope.apply(x, offset=11)
    for name in SUPPORTED:   # every kernel computes the scalar specification, bit for bit
        assert np.array_equal(results[name].view(np.uint32), results[LOW].view(np.uint32))
