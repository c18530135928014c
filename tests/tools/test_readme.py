"""Every code block of README.md, docs/BACKENDS.md and docs/examples/README.md
runs as written, so the documents cannot drift from the code.

How each kind of block runs:

- ```python: the blocks of one top-level (``##``) section run in order in one
  namespace, from the repository's root: a block may use what an earlier block
  of its section defined, never another section's.
- ```sh: the block runs as one ``sh -e`` script, with ``pyrope`` being
  ``python -m pyrope`` and ``python3`` this interpreter, both importing this
  checkout; from the root of a scratch copy of ``docs/`` (README.md's blocks, whose
  paths are the repository's) or of its directory (the other documents), so
  nothing they write lands in the checkout. The commands of :data:`NOT_RUN` are
  left out, each for the reason given.
- a ``` block whose first line starts with ``$ `` is a terminal session: each
  command runs as an ``sh`` block does, and its output must be the lines shown,
  a line ``...`` standing for any number of lines.

Any other block fails the test: give it one of these forms.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import pyrope
import readme_blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
# document -> where its shell blocks run, relative to the repository's root
DOCUMENTS = {"README.md": ".", "docs/BACKENDS.md": "docs", "docs/examples/README.md": "docs/examples"}

# the shell commands documented but not run here, and why
NOT_RUN = {
    "make demo": "installs the package into the environment (pip install -e .); "
                 "the demo it then runs is `pyrope demo`, which the Command line block runs",
    "make test": "installs the test extras into the environment and runs this whole suite",
    "pip install .": "installs into the environment; make check-wheel installs the wheel of the same "
                     "build into a throwaway venv and runs pyrope --version from it",
    "pip install '.[bfloat16,gguf,plot]'": "installs into the environment; the extras' packages are "
                                           "among the test extras make test installs",
    "pip wheel --no-deps -w dist .": "compiles the whole kernel; make check-wheel builds the wheel and "
                                     "checks what it holds (tests/tools/test_install.py: the license)",
    "pip install dist/pyrope_rotary-*.whl": "installs into the environment; make check-wheel does, into a venv",
}
SH_TIMEOUT = 120   # seconds per block; each takes about one


def blocks(document):
    return readme_blocks.fenced_blocks(ROOT / document)


def python_sections():
    """(document, section, [blocks]) for each top-level section that has python blocks."""
    found = {}
    for document in DOCUMENTS:
        for b in blocks(document):
            if b.language == "python":
                found.setdefault((document, b.section), []).append(b)
    return [(doc, section, bs) for (doc, section), bs in found.items()]


def shell_blocks():
    return [(document, b) for document in DOCUMENTS for b in blocks(document) if b.language == "sh"]


def sessions():
    return [(document, b) for document in DOCUMENTS for b in blocks(document)
            if b.language == "" and b.text.startswith("$ ")]


def command(line):
    """A shell line without its trailing comment (none of the documented commands quotes a #)."""
    return re.sub(r"\s+#.*$", "", line).strip()


def test_every_block_has_a_form_this_test_runs():
    for document in DOCUMENTS:
        for b in blocks(document):
            assert b.language in ("python", "sh") or (b.language == "" and b.text.startswith("$ ")), (
                f"{document}:{b.line}: a ```{b.language} block this test does not run")


def test_every_command_left_out_is_documented():
    documented = {command(line) for _, b in shell_blocks() for line in b.text.splitlines()}
    assert set(NOT_RUN) <= documented, f"NOT_RUN lists commands no document has: {set(NOT_RUN) - documented}"


@pytest.fixture
def restored():
    """The process-wide settings a README block may change (set_isa, set_num_threads), put back."""
    isa, threads = pyrope.get_isa(), pyrope.get_num_threads()
    yield
    pyrope.set_isa(isa)
    pyrope.set_num_threads(threads)


@pytest.mark.parametrize("document,section,section_blocks", python_sections(),
                         ids=[f"{d}:{s.lstrip('# ')}" for d, s, _ in python_sections()])
def test_python_blocks_run(document, section, section_blocks, monkeypatch, restored):
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__readme__"}
    for b in section_blocks:
        # compiled with the document's line numbers, so a traceback points into it
        code = compile("\n" * (b.line - 1) + b.text, str(ROOT / document), "exec")
        exec(code, namespace)


@pytest.fixture
def shell(tmp_path):
    """run(script, where) -> CompletedProcess: ``sh -e`` in a scratch copy of docs/."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pyrope").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pyrope "$@"\n')
    (bin_dir / "pyrope").chmod(0o755)
    for name in ("python3", "python"):
        (bin_dir / name).symlink_to(sys.executable)
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    def run(script, where):
        return subprocess.run(["sh", "-e", "-c", script], cwd=tmp_path / where, env=env,
                              capture_output=True, text=True, timeout=SH_TIMEOUT)
    return run


@pytest.mark.parametrize("document,block", shell_blocks(), ids=[f"{d}:{b.line}" for d, b in shell_blocks()])
def test_shell_blocks_run(document, block, shell):
    lines = [line for line in block.text.splitlines() if command(line) and command(line) not in NOT_RUN]
    if not lines:
        assert all(command(line) in NOT_RUN for line in block.text.splitlines() if command(line))
        return
    proc = shell("\n".join(lines) + "\n", DOCUMENTS[document])
    assert proc.returncode == 0, f"{document}:{block.line}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def transcript(text):
    """[(command, expected output lines)] of a terminal session."""
    steps = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line.rstrip())
    return steps


def shown(expected):
    """A regex for output shown as ``expected`` lines, ``...`` standing for any lines."""
    parts = [r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line) + r"[ \t]*\n" for line in expected]
    return re.compile("".join(parts))


@pytest.mark.parametrize("document,block", sessions(), ids=[f"{d}:{b.line}" for d, b in sessions()])
def test_terminal_sessions_print_what_they_show(document, block, shell):
    for cmd, expected in transcript(block.text):
        proc = shell(cmd, DOCUMENTS[document])
        assert proc.returncode == 0, f"{document}:{block.line}: {cmd}: exit {proc.returncode}\n{proc.stderr}"
        output = "".join(line.rstrip() + "\n" for line in proc.stdout.splitlines())
        assert shown(expected).fullmatch(output), (
            f"{document}:{block.line}: {cmd} printed\n{output}\nwhere the document shows\n" + "\n".join(expected))


def test_a_session_that_differs_is_caught():
    """The matcher itself: ``...`` elides lines, anything else must be there, in order, to the end."""
    out = "head\na\nb\nc\ntail\n"
    assert shown(["head", "...", "c", "tail"]).fullmatch(out)
    assert shown(["head", "  ...", "tail"]).fullmatch(out)
    assert not shown(["head", "...", "c"]).fullmatch(out)          # the end must be shown
    assert not shown(["head", "b", "...", "tail"]).fullmatch(out)   # no line skipped silently
    assert not shown(["head", "...", "x", "tail"]).fullmatch(out)
