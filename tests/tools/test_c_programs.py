"""The measuring programs of tests/c that no other step builds (the speed and
cycle counters, the thread-split timer: docs/ARCHITECTURE.md quotes them) still
compile warning-free against the C core's headers. Only their own file is
compiled (-fsyntax-only): the C core itself is built, and warning-checked, by
every other step."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = ["rotate_speed.c", "kernel_cycles.c", "stage_cycles.c", "thread_split.c"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_measuring_program_compiles_warning_free(program):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    assert cc, "a C compiler is needed"
    run = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-pthread",
                          "-I", os.path.join(ROOT, "csrc"), os.path.join(ROOT, "tests", "c", program)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
