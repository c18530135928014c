"""An interrupt (Ctrl-C: KeyboardInterrupt, raised by Python between two
bytecodes) during a call leaves what the caller can see all written or all
untouched, never some rows rotated and others not.

Interrupts are raised at the points where Python could deliver one: right
after the C call returns, and between the copies that write temporaries
back. Expected values come from pyrope.reference (tests/tensor_oracle.py)."""
import numpy as np
import pytest

from pyrope import PartialRotary, Rope
from pyrope._engine import launcher as _launcher, plan as _plan
from tensor_oracle import assert_close, expected

ROPE = Rope(16, layout="split_half")
POSITIONS = [3, 70, 9, 1000, 5]


def unmergeable(rng, heads):
    """A [2, 2, 5, heads, 16] view whose batch dims do not merge: the kernel
    cannot address it, so C rotates a copy that is written back."""
    base = rng.standard_normal((2, 3, 5, heads, 16)).astype(np.float32)
    view = base[:, :2]
    assert _plan.as_4d(view) is None
    return view


def interrupt_after_the_call(monkeypatch):
    """Calls through ``_launcher.Call.launch`` (every rotation) complete in C,
    then Python delivers a KeyboardInterrupt before the next bytecode of the
    caller."""
    launch = _launcher.Call.launch

    def launch_then_interrupt(self, *args, **kwargs):
        launch(self, *args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(_launcher.Call, "launch", launch_then_interrupt)


def interrupt_between_copies(monkeypatch, at=0):
    """The ``at``-th write-back copy is interrupted before it starts; the copies
    after the interrupt run as usual."""
    copy, seen = _plan._copy, []

    def copy_or_interrupt(dst, src):
        seen.append(dst)
        if len(seen) == at + 1:
            raise KeyboardInterrupt
        copy(dst, src)
    monkeypatch.setattr(_plan, "_copy", copy_or_interrupt)
    return seen


def cases(rng):
    """(name, call, arrays the caller sees written): in-place and out= calls
    mixing results C can write directly with ones it writes back."""
    q = rng.standard_normal((2, 2, 5, 4, 16)).astype(np.float32)   # addressable
    k = unmergeable(rng, 2)
    q2, k2 = unmergeable(rng, 4), unmergeable(rng, 2)              # both written back
    x = unmergeable(rng, 3)
    q_out, k_out = np.full_like(q, 7.0), unmergeable(rng, 2)
    return [
        ("apply_qk in place, q direct", lambda: ROPE.apply_qk(q, k, POSITIONS, out=(q, k)), (q, k), (q, k)),
        ("apply_qk in place, both copied", lambda: ROPE.apply_qk(q2, k2, POSITIONS, out=(q2, k2)), (q2, k2),
         (q2, k2)),
        ("apply_qk out=, q_out direct", lambda: ROPE.apply_qk(q, k, POSITIONS, out=(q_out, k_out)),
         (q_out, k_out), (q, k)),
        ("apply in place", lambda: ROPE.apply(x, POSITIONS, out=x), (x,), (x,)),
    ]


@pytest.mark.parametrize("case", range(4))
def test_an_interrupt_after_the_kernel_leaves_every_result_untouched(rng, monkeypatch, case):
    name, call, written, _ = cases(rng)[case]
    before = [w.copy() for w in written]
    interrupt_after_the_call(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        call()
    for w, b in zip(written, before):
        assert np.array_equal(w, b), name


@pytest.mark.parametrize("at", [0, 1])
@pytest.mark.parametrize("case", range(3))
def test_an_interrupt_between_write_backs_still_writes_every_result(rng, monkeypatch, case, at):
    name, call, written, inputs = cases(rng)[case]
    want = [expected(ROPE, x, POSITIONS) for x in inputs]
    given = [x.copy() for x in inputs]
    seen = interrupt_between_copies(monkeypatch, at)
    with pytest.raises(KeyboardInterrupt):
        call()
    assert len(seen) > at, name   # the interrupt was raised
    for w, e, x in zip(written, want, given):
        assert_close(w, e, x, ROPE, np.float32)


def test_without_interrupt_the_results_are_right(rng):
    for name, call, written, inputs in cases(rng):
        want = [expected(ROPE, x, POSITIONS) for x in inputs]
        given = [x.copy() for x in inputs]
        call()
        for w, e, x in zip(written, want, given):
            assert_close(w, e, x, ROPE, np.float32)


def test_convert_keys_writes_out_once(rng, monkeypatch):
    old, new = Rope(16, layout="split_half"), Rope(16, layout="split_half", base=5e5)
    k = rng.standard_normal((5, 2, 16)).astype(np.float32)
    out = np.full_like(k, 7.0)
    apply, calls = Rope.apply, []

    def second_pass_interrupted(self, *args, **kwargs):
        calls.append(kwargs.get("out"))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return apply(self, *args, **kwargs)
    monkeypatch.setattr(Rope, "apply", second_pass_interrupted)
    for target in (out, k):
        before = target.copy()
        calls.clear()
        with pytest.raises(KeyboardInterrupt):
            old.convert_keys(k, POSITIONS, new, out=target)
        assert np.array_equal(target, before) and calls[0] is None   # the first pass wrote a new array


def test_partial_rotary_offset_writes_out_once(rng, monkeypatch):
    pr = PartialRotary(16, 8, convention="offset", layout="split_half", dim_offset=4)
    x = rng.standard_normal((5, 2, 16)).astype(np.float32)
    out = np.full_like(x, 7.0)
    writes = []
    real = np.ndarray.__setitem__

    class Watched(np.ndarray):
        def __setitem__(self, key, value):
            writes.append(key)
            real(self, key, value)
    watched = out.view(Watched)
    got = pr.apply(x, POSITIONS, out=watched)
    assert got is watched and len(writes) == 1   # one copy: an interrupt finds out whole or untouched
    want = x.astype(np.float64)
    want[..., 4:12] = expected(pr.rope, x[..., 4:12], POSITIONS)
    assert_close(np.asarray(got), want, x, Rope(16, layout="split_half"), np.float32)
