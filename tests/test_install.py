"""What a user meets installing pyrope: the license ships with it.

Builds run in a temporary copy of the tree (never the checkout the tests
import). The wheel itself, built and installed, is ``make check-wheel``'s: it
compiles everything, which these checks need not."""
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def tree(tmp_path):
    """A copy of what a build reads, with no build in it."""
    dest = tmp_path / "tree"
    ignore = shutil.ignore_patterns("_pyrope_cffi*", "lib", "include", "__pycache__", "*.o")
    shutil.copytree(os.path.join(ROOT, "pyrope"), dest / "pyrope", ignore=ignore)
    shutil.copytree(os.path.join(ROOT, "csrc"), dest / "csrc", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), dest / name)
    return dest


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
