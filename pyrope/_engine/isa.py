"""Instruction-set and thread state: which kernels C runs and how many threads
one call may use.

The instruction sets are read from the C registry (through the binding); the
choice is process-wide and republished to C whenever it changes
(:func:`set_isa`, :func:`forced_isa`, ``PYROPE_ISA``). The thread count is
Python's: ``NUM_THREADS``, rebound by :func:`set_num_threads`
(``PYROPE_NUM_THREADS``) and read on every launch, so readers take it as an
attribute of this module, never a copy; by default the CPUs of the affinity
mask, shared among torchrun's ``LOCAL_WORLD_SIZE`` ranks. A bad environment
variable is kept in ``ENVIRONMENT_ERRORS``, not raised. A forked child keeps
only its own thread's ``forced_isa`` blocks (a hook of ``locks``).
"""
import builtins
import os
import threading
from contextlib import contextmanager

import numpy as np

from . import locks as _locks
from .binding import MAX_THREADS, ffi, lib
from ..errors import RopeError, TypeError, ValueError

# ---- instruction sets (the C registry) -----------------------------------------

ISAS = tuple(ffi.string(lib.rope_isa_name(i)).decode() for i in range(lib.rope_isa_count()))


def supported_isas():
    """Names of the instruction sets this CPU and OS can run, best last."""
    return [name for code, name in enumerate(ISAS) if lib.rope_isa_supported(code)]


# The choice is process-wide (C publishes one kernel table for every thread).
# Python keeps what decides it, under one lock: the base choice (set_isa,
# PYROPE_ISA, else the best supported) and the forced_isa blocks active in
# any thread, in the order they were entered. The ISA in effect is always
# the most recently entered active block's, or the base when none is active,
# and it is republished whenever either changes. So blocks may overlap and
# end in any order, in any threads: the last one to end restores the base.
_isa_lock = _locks.Lock()   # a forked child gets it unheld (and its own blocks only)
_isa_base = None      # the base choice, a name of ISAS (set at import, below)
_isa_blocks = []      # [(token, name, thread id)] of the active forced_isa blocks, oldest first


def _publish():
    """Make the ISA the state says the one C uses (``_isa_lock`` held)."""
    name = _isa_blocks[-1][1] if _isa_blocks else _isa_base
    if lib.rope_set_isa(ISAS.index(name)) != lib.ROPE_OK:  # pragma: no cover - names are checked
        raise ValueError(f"isa {name!r} is not supported on this CPU/OS")


def get_isa():
    """The instruction set the kernels use now, e.g. ``"scalar"`` or ``"avx2"``."""
    return ISAS[lib.rope_get_isa()]


def _isa_name(name):
    """``name`` checked: a name of ``supported_isas()``, or ``"auto"`` for the best."""
    if isinstance(name, str) and name == "auto":
        return supported_isas()[-1]
    if not isinstance(name, str) or name not in ISAS:
        raise ValueError(f"isa must be one of 'auto', {', '.join(map(repr, ISAS))}; got {name!r}")
    if not lib.rope_isa_supported(ISAS.index(name)):
        raise ValueError(f"isa {name!r} is not supported on this CPU/OS (supported: {supported_isas()})")
    return name


def set_isa(name):
    """Choose the instruction set (a name of ``supported_isas()``) or ``"auto"`` for the best one.

    Process-wide: every thread's calls use it. Inside ``forced_isa`` blocks
    (in any thread) their ISA holds; this choice takes effect when the last
    of them ends. Raises ``ValueError`` for an unknown name or one this
    machine cannot run.
    """
    global _isa_base
    name = _isa_name(name)
    with _isa_lock:
        _isa_base = name
        _publish()


@contextmanager
def forced_isa(name):
    """Context manager: run the body with instruction set ``name`` (as :func:`set_isa` takes).

    The choice is process-wide, not per thread: while a block is active,
    every thread's calls use the ISA of the most recently entered active
    block. Blocks may overlap across threads and end in any order: when one
    ends, the ISA becomes that of the most recent block still active, and
    when the last ends, the base choice (:func:`set_isa`, ``PYROPE_ISA``,
    else the best) again, even if ``set_isa`` ran meanwhile. Overlapping
    blocks of *different* ISAs in different threads therefore do not each
    get their own; run such measurements one at a time.
    """
    name = _isa_name(name)
    token = object()
    with _isa_lock:
        _isa_blocks.append((token, name, threading.get_ident()))
        _publish()
    try:
        yield
    finally:
        with _isa_lock:
            _isa_blocks[:] = [b for b in _isa_blocks if b[0] is not token]
            _publish()


@_locks.after_fork_in_child
def _forget_other_threads_blocks():
    """A forked child has only the forking thread: blocks other threads had
    entered can never end there, so they end now (the forking thread's stay)."""
    me = threading.get_ident()
    _isa_blocks[:] = [b for b in _isa_blocks if b[2] == me]
    if _isa_base is not None:   # None: forked while this module was being imported
        _publish()


def _isa_from_environment():
    name = os.environ.get("PYROPE_ISA", "").strip().lower()
    if name:
        try:
            set_isa(name)
        except RopeError as exc:
            raise ValueError(f"environment variable PYROPE_ISA: {exc}") from None


# A bad variable is not an import error: `pyrope --help` must still run, and
# the command line refuses it in one line (cli.py). A library user gets a
# RuntimeWarning naming it and the default (as torch does for OMP_NUM_THREADS),
# from pyrope/__init__.py, which knows whether the command line is starting.
ENVIRONMENT_ERRORS = []
try:
    _isa_from_environment()
except ValueError as exc:
    ENVIRONMENT_ERRORS.append(exc)
if _isa_base is None:
    _isa_base = get_isa()   # C's own choice: the best supported


# ---- threads -------------------------------------------------------------------

def _cpus():
    """The CPUs this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _local_world_size():
    """How many processes of a distributed run share this machine, as torchrun's
    ``LOCAL_WORLD_SIZE`` says (None when unset). The variable is torchrun's, not
    pyrope's: a value that is not a positive integer is ignored, never refused."""
    try:
        n = int(os.environ.get("LOCAL_WORLD_SIZE", "").strip())
    except builtins.ValueError:
        return None
    return n if n > 0 else None


def _default_threads():
    """The CPUs of the affinity mask, shared among the local ranks of a
    distributed launch: N ranks on one machine each calling with all its
    CPUs would put N threads on every core."""
    return max(1, min(MAX_THREADS, _cpus() // (_local_world_size() or 1)))


NUM_THREADS = _default_threads()  # read by every call; set_num_threads changes it


def set_num_threads(n):
    """Use at most ``n`` threads per call (1..64); large calls split across
    them, small ones stay on the calling thread. Results never depend on it."""
    global NUM_THREADS
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {type(n).__name__} {n!r}")
    if not 1 <= int(n) <= MAX_THREADS:
        raise ValueError(f"n must be between 1 and {MAX_THREADS}, got {n}")
    NUM_THREADS = int(n)


def get_num_threads():
    """The most threads one call may use.

    Default: the CPUs this process may run on (its affinity mask), divided
    among the ranks of a distributed launch on this machine when torchrun's
    ``LOCAL_WORLD_SIZE`` is set (``max(1, cpus // LOCAL_WORLD_SIZE)``; a value
    that is not a positive integer is ignored). ``PYROPE_NUM_THREADS`` and
    :func:`set_num_threads` override it."""
    return NUM_THREADS


def _threads_from_environment():
    text = os.environ.get("PYROPE_NUM_THREADS", "").strip()
    if text:
        try:
            set_num_threads(int(text))
        except (builtins.ValueError, RopeError) as exc:
            raise ValueError(f"environment variable PYROPE_NUM_THREADS must be an integer "
                             f"1..{MAX_THREADS}, got {text!r} ({exc})") from None


try:
    _threads_from_environment()
except ValueError as exc:
    ENVIRONMENT_ERRORS.append(exc)
