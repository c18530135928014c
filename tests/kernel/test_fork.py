"""fork() while another thread holds one of pyrope's locks: the child must get
it unheld and finish its call (before the fix the child hung on the table
cache's lock for ever). Every lock pyrope makes is a ``pyrope._engine.locks.Lock``,
which a fork handler renews in the child; the sweep below holds each lock in
a thread, forks, and runs in the child a call that needs that lock."""
import ast
import os
import pathlib
import select
import signal
import threading
import time
import types

import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._engine import dtypes as _dtypes, isa as _isa, locks as _locks

CHILD_SECONDS = 20   # a child still running after this hangs (it needs well under a second)
PACKAGE = pathlib.Path(pyrope.__file__).parent
X = np.ones((1, 4, 2, 8), np.float32)


def run_in_child(action, hold=None, seconds=CHILD_SECONDS):
    """Fork while a thread is inside context ``hold`` (a lock, say), run
    ``action()`` in the child and return what it printed (``repr`` of its
    result, or the exception); raises if the child runs ``seconds`` or dies."""
    entered, leave = threading.Event(), threading.Event()

    def holder():
        with hold:
            entered.set()
            leave.wait(60)

    thread = None
    if hold is not None:
        thread = threading.Thread(target=holder, daemon=True)
        thread.start()
        assert entered.wait(10)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: one thread, the holder gone, its lock (before the fix) held
        os.close(read_end)
        try:
            signal.alarm(seconds + 5)   # a hang must not outlive the test
            try:
                text = repr(action())
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                text = f"raised {type(exc).__name__}: {exc}"
            os.write(write_end, text.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], seconds)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"the forked child hung for {seconds} s")
        chunks = []
        while chunk := os.read(read_end, 4096):
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status), f"the child died: status {status}"
        return b"".join(chunks).decode()
    finally:
        os.close(read_end)
        leave.set()
        if thread is not None:
            thread.join(10)


def _table_cache_case():
    rope = Rope(8, layout="split_half")
    rope.apply(X, offset=0)             # a window of rows exists ...
    return rope._tables._lock, lambda: float(rope.apply(X, offset=10**6).sum())   # ... this grows it


def _isa_case():
    def action():
        with pyrope.forced_isa("scalar"):
            inner = pyrope.get_isa()
        pyrope.set_isa("auto")
        return inner, pyrope.get_isa() == pyrope.supported_isas()[-1]
    return _isa._isa_lock, action


def _late_types_case():
    return _dtypes._late_lock, lambda: _dtypes._add_late_types(types.SimpleNamespace()) or "added"


def _transformers_patch_case():
    pytest.importorskip("torch")   # torch is in the test extras: make test installs it
    from pyrope.integrations import _hf_apply
    module = types.ModuleType("fork_probe")
    module.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: (q, k)

    def action():
        _hf_apply.install(module, "qk")
        count = _hf_apply.installed(module)
        _hf_apply.uninstall(module)
        return count, _hf_apply.installed(module)
    return _hf_apply._LOCK, action


CASES = {"table cache": _table_cache_case, "instruction set": _isa_case, "late storage types": _late_types_case,
         "transformers patch": _transformers_patch_case}
WANT = {"table cache": repr(float(Rope(8, layout="split_half").apply(X, offset=10**6).sum())),
        "instruction set": "('scalar', True)", "late storage types": "'added'", "transformers patch": "(1, 0)"}


@pytest.mark.parametrize("case", list(CASES))
def test_a_child_forked_while_a_lock_is_held_finishes_its_call(case):
    lock, action = CASES[case]()
    assert isinstance(lock, _locks.Lock)
    assert run_in_child(action, hold=lock) == WANT[case]
    assert not lock.locked()   # the parent's holder let go


def test_the_table_cache_case_hangs_with_a_plain_lock():
    """The test above can fail: the same fork with the lock a plain
    threading.Lock (as before the fix) leaves the child hanging."""
    rope = Rope(8, layout="split_half")
    rope.apply(X, offset=0)
    plain = threading.Lock()
    rope._tables._lock = plain
    start = time.monotonic()
    with pytest.raises(AssertionError, match="hung"):
        run_in_child(lambda: float(rope.apply(X, offset=10**6).sum()), hold=plain, seconds=2)
    assert time.monotonic() - start >= 2


def test_a_child_drops_the_forced_isa_blocks_of_threads_it_does_not_have():
    base = pyrope.get_isa()
    entered, leave = threading.Event(), threading.Event()

    def other_thread():
        with pyrope.forced_isa("scalar"):
            entered.set()
            leave.wait(60)

    thread = threading.Thread(target=other_thread, daemon=True)
    thread.start()
    try:
        assert entered.wait(10) and pyrope.get_isa() == "scalar"

        def in_child():
            with pyrope.forced_isa("scalar"):   # the child's own block holds inside ...
                inner = pyrope.get_isa()
            return inner, pyrope.get_isa()      # ... and the base returns after it
        assert run_in_child(in_child) == repr(("scalar", base))
    finally:
        leave.set()
        thread.join(10)
    assert pyrope.get_isa() == base


def test_every_lock_in_the_package_is_a_fork_safe_lock():
    """A lock made any other way would hang a forked child again."""
    made = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "_engine/locks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("Lock", "RLock", "Condition", "Semaphore",
                                                                  "BoundedSemaphore", "allocate_lock"):
                if isinstance(node.value, ast.Name) and node.value.id in ("threading", "_thread"):
                    made.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not made, made
