"""What a user meets installing pyrope: the license ships with it, and a
machine without a C compiler (or Python's C headers) gets one line saying what
to install, not a traceback.

Builds run in a temporary copy of the tree (never the checkout the tests
import). The wheel itself, built and installed, is ``make check-wheel``'s: it
compiles everything, which these checks need not."""
import importlib.util
import os
import re
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILER_LINE = "pyrope needs a C compiler (C11: gcc or clang) to build its kernel, and "


def builder():
    spec = importlib.util.spec_from_file_location("_pyrope_build_install", os.path.join(ROOT, "pyrope", "_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return f.read()


def test_the_license_is_mit_and_pyproject_names_its_file():
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the pyrope authors\n")
    assert "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND" in text
    assert re.search(r'^license = "MIT"$', pyproject(), re.M)
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject(), re.M)


def test_the_sdist_and_the_wheels_metadata_carry_the_license(tree, tmp_path):
    env = dict(os.environ, PYTHONPATH="")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=tree,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("pyrope_rotary-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        info = tar.extractfile(next(n for n in names if n.endswith("/PKG-INFO") and n.count("/") == 1)).read()
    assert any(n.endswith("/LICENSE") and n.count("/") == 1 for n in names), names
    assert b"License-File: LICENSE" in info and b"License-Expression: MIT" in info
    # the dist-info pip builds the wheel's from (PEP 517), without compiling anything
    meta = tmp_path / "meta"
    meta.mkdir()
    code = ("import sys, setuptools.build_meta as b; "
            "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(meta)], cwd=tree, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dist_info = meta / proc.stdout.strip().splitlines()[-1]
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        assert (dist_info / "licenses" / "LICENSE").read_text(encoding="utf-8") == f.read()


def without_a_compiler(how):
    """The environment of a machine without a C compiler: CC naming none, or
    no compiler on PATH (CC unset; Python's own compiler is then looked up on it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "PYTHONPATH")}
    if how == "CC":
        env["CC"] = "/nonexistent/bin/cc"
    else:
        env["PATH"] = ""
    return env


def python_cc_is_on_path():
    cc = builder()._compiler()
    return bool(cc) and not os.path.isabs(cc[0])


@pytest.mark.parametrize("how", ["CC", "PATH"])
def test_a_missing_compiler_stops_the_build_in_one_line(tree, how):
    if how == "PATH" and not python_cc_is_on_path():
        pytest.skip("Python's compiler is an absolute path here: PATH cannot hide it")
    for argv in (["setup.py", "build_ext", "--inplace"], ["pyrope/_build.py"]):
        proc = subprocess.run([sys.executable, *argv], cwd=tree, env=without_a_compiler(how),
                              capture_output=True, text=True)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
        assert lines[0].startswith(COMPILER_LINE) and "apt-get install gcc" in lines[0], lines[0]
        assert ("CC='/nonexistent/bin/cc'" if how == "CC" else "Python's own compiler") in lines[0]


def test_pip_shows_the_line_and_no_traceback(tree, tmp_path):
    # pip install . and pip wheel . stop at the same step (the build's requirements,
    # or without build isolation its metadata); no isolation: the test needs no index
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-w", str(tmp_path / "w"), str(tree)],
                          env=without_a_compiler("CC"), capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert COMPILER_LINE in output and "Traceback" not in output, output[-3000:]
    assert "[1 lines of output]" in output, output[-3000:]


def test_missing_python_headers_are_one_line_too(monkeypatch):
    b = builder()
    assert b.missing_compiler() is None and b.missing_python_headers() is None   # this machine builds
    real = b.sysconfig.get_paths
    monkeypatch.setattr(b.sysconfig, "get_paths", lambda *a, **k: dict(real(*a, **k), include="/nonexistent/include"))
    line = b.missing_python_headers()
    assert line == ("pyrope needs Python's C headers to build its extension, and /nonexistent/include has no "
                    "Python.h: install them (Debian/Ubuntu: apt-get install python3-dev; Fedora: dnf install "
                    "python3-devel)")
    with pytest.raises(SystemExit) as exit_:
        b.require(line)
    assert exit_.value.code == line
