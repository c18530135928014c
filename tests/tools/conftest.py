"""Fixtures of the tools' tests: a scratch copy of what a build reads."""
import shutil

import pytest

from checkout import ROOT


@pytest.fixture
def tree(tmp_path):
    """A copy of what a build reads (the package, the C core, the build files and
    the license), with no build in it."""
    dest = tmp_path / "tree"
    ignore = shutil.ignore_patterns("_pyrope_cffi*", "lib", "include", "__pycache__", "*.o")
    shutil.copytree(f"{ROOT}/pyrope", dest / "pyrope", ignore=ignore)
    shutil.copytree(f"{ROOT}/csrc", dest / "csrc", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"):
        shutil.copy(f"{ROOT}/{name}", dest / name)
    return dest
