"""Test setup: import pyrope from this checkout, and load the plain-Python oracle by path."""

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _load_reference_rules():
    # by path, so the oracle never goes through the package it checks
    path = ROOT / "pyrope" / "reference_rules.py"
    spec = importlib.util.spec_from_file_location("pyrope_reference_rules_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REF = _load_reference_rules()


@pytest.fixture(scope="session")
def ref():
    """The plain-Python rules of pyrope/reference_rules.py, loaded by path."""
    return REF
