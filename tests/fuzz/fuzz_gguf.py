#!/usr/bin/env python3
"""Coverage-guided fuzzing of ``Rope.from_gguf`` (atheris: libFuzzer for Python).

Each input is written as a GGUF file and read with ``Rope.from_gguf`` (also for
layer 2 at a long ``seq_len``, which takes the per-layer and LongRoPE paths).
The input fails (libFuzzer saves it as a crash) when:

- anything but a ``pyrope.RopeError`` escapes, or a refusal does not name the file;
- Python allocates more than ``FIXED_BYTES`` plus ``BYTES_PER_INPUT_BYTE`` per
  byte of the file (tracemalloc's peak): what a file can ask for must be bounded
  by its real size;
- it runs past libFuzzer's ``-timeout`` or the process past ``-rss_limit_mb``; the
  address space is capped (RLIMIT_AS) so that one huge allocation fails at once
  (a ``MemoryError``, which is not a RopeError).

``make fuzz`` runs it for ``FUZZ_SECONDS`` on ``tests/fuzz/gguf_corpus`` (small
files written by gguf's own writer, ``tests/support/gguf_files.py``) and merges new
coverage there; a failing input goes to ``tests/fuzz/gguf_regressions/``, which
``tests/readers/test_gguf_hostile.py`` replays through :func:`check`, as every corpus
file. By hand: ``python tests/fuzz/fuzz_gguf.py -max_total_time=60 tests/fuzz/gguf_corpus``.
"""
import os
import resource
import sys
import tempfile
import tracemalloc

FIXED_BYTES = 4 << 20
BYTES_PER_INPUT_BYTE = 64
ADDRESS_SPACE = 8 << 30
CALLS = ({}, {"layer": 2, "seq_len": 1 << 20})


def read(path, **kw):
    """``Rope.from_gguf(path, **kw)``: a Rope, or the RopeError, which must name the file;
    anything else propagates."""
    import pyrope
    try:
        return pyrope.Rope.from_gguf(path, **kw)
    except pyrope.RopeError as exc:
        if repr(str(path)) not in str(exc):
            raise AssertionError(f"a refusal that does not name the file: {exc}") from exc
        return exc


def check(data, path):
    """Write ``data`` to ``path`` and read it every way in CALLS, within the memory bound.
    tracemalloc must be running (started once: starting and stopping it per input
    leaks ~2.6 KB each)."""
    with open(path, "wb") as f:
        f.write(data)
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    outcomes = [read(path, **kw) for kw in CALLS]
    peak = tracemalloc.get_traced_memory()[1] - base
    if peak > FIXED_BYTES + BYTES_PER_INPUT_BYTE * len(data):
        raise AssertionError(f"{peak} bytes allocated for a {len(data)}-byte file")
    return outcomes


def main():
    import atheris
    with atheris.instrument_imports(include=["pyrope"]):
        import pyrope  # noqa: F401
        import pyrope.gguf  # noqa: F401 - instrumented before the first input imports it
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = ADDRESS_SPACE if hard == resource.RLIM_INFINITY else min(ADDRESS_SPACE, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    where = tempfile.mkdtemp(prefix="fuzz_gguf_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    path = os.path.join(where, "input.gguf")
    tracemalloc.start()
    atheris.Setup(sys.argv, lambda data: check(data, path))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
