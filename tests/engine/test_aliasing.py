"""Aliasing of every input with every output, at every entry point.

The cases are in ``alias_cases.py``: positions (and cu_seqlens, offsets,
sectioned positions, ONNX position ids and caches, torch tensors viewing
one storage) laid in the memory of an output of the same call, each result
compared with the call on separate copies; at the C entry points, refusals
(``ROPE_E_OVERLAP``, nothing written) and what is read once (the op, the
angles, the pair map). Such calls used to crash the process (SIGSEGV), so
they run in a child process: one that dies fails the case it was running,
and a new child runs the cases after it.
"""
import os
import signal
import subprocess
import sys

import pytest

import alias_cases

HERE = os.path.dirname(os.path.abspath(alias_cases.__file__))   # tests/support
ROOT = os.path.dirname(os.path.dirname(HERE))
NAMES = list(alias_cases.CASES)


def _child(names):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, os.path.join(HERE, "alias_cases.py"), *names], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def _why(returncode):
    if returncode < 0:
        try:
            return f"the process died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"the process died of signal {-returncode}"
    return f"the process exited with status {returncode}"


@pytest.fixture(scope="module")
def verdicts():
    """``{name: (kind, detail)}`` for every case, kind OK, SKIP or FAIL."""
    found = {}
    while len(found) < len(NAMES):
        todo = [n for n in NAMES if n not in found]
        proc = _child(todo)
        running = None
        for line in proc.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            name = max((n for n in todo if rest == n or rest.startswith(n + " ")), key=len, default=None)
            if name is None:
                continue
            if kind == "START":
                running = name
            elif kind in ("OK", "SKIP", "FAIL"):
                found[name] = (kind, rest[len(name):].strip())
                running = None
        if running is not None:   # it killed the child: the rest run in the next one
            found[running] = ("FAIL", f"{_why(proc.returncode)} ({proc.stderr.strip()[-400:]})")
        elif len(found) < len(NAMES):   # the child failed before a case started
            for name in todo:
                found.setdefault(name, ("FAIL", f"{_why(proc.returncode)}: {proc.stderr.strip()[-400:]}"))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_aliasing(verdicts, name):
    kind, detail = verdicts[name]
    if kind == "SKIP":
        pytest.skip(detail)
    assert kind == "OK", f"{name}: {detail}"


def test_every_entry_point_is_swept():
    """The sweep names each public entry point that takes an array C reads."""
    prefixes = {name.split("/")[0] for name in NAMES}
    assert prefixes >= {"apply", "apply_qk", "cos_sin", "prepare", "prepare_qk", "cache.rerotate",
                        "cache.convert_keys", "apply_varlen", "sections", "onnx", "torch", "PartialRotary",
                        "C rope_rotate", "C rope_cos_sin"}
