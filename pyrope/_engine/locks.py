"""Locks a forked child can still take.

``fork()`` copies the process with only the thread that called it: a lock
another thread held at that moment stays held in the child forever, and the
child's first call that needs it would hang. Every lock pyrope takes is made
here, and a fork handler gives the child fresh ones. What they guard is
published by single stores (a new table window, a new ISA list), so the child
sees a whole state, never half of one; state owned by threads the child lacks
is dropped by the hooks registered with :func:`after_fork_in_child`.
"""
import os
import threading
import weakref

_LOCKS = weakref.WeakSet()   # every Lock alive, to renew in a forked child
_CHILD_HOOKS = []            # run in a forked child after the locks are renewed


class Lock:
    """A ``threading.Lock`` (as a context manager) that a forked child gets unheld."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self):
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()

    def locked(self):
        """Is it held now (by any thread)?"""
        return self._lock.locked()


def after_fork_in_child(hook):
    """Run ``hook()`` in every forked child, after the locks are renewed (for
    state that threads which do not exist in the child left behind)."""
    _CHILD_HOOKS.append(hook)
    return hook


def _renew_in_child():
    for lock in list(_LOCKS):
        lock._lock = threading.Lock()
    for hook in _CHILD_HOOKS:
        hook()


os.register_at_fork(after_in_child=_renew_in_child)
