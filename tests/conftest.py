"""Shared fixtures: run kernel tests on every instruction set this CPU has;
load the plain-Python scaling rules by path as the oracle."""
import importlib.util
import pathlib

import numpy as np
import pytest

import pyrope

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(params=pyrope.supported_isas())
def isa(request):
    """Each test using this fixture runs once per supported kernel (scalar, avx2)."""
    with pyrope.forced_isa(request.param):
        yield request.param


@pytest.fixture
def rng():
    """A seeded generator, so every failure reproduces."""
    return np.random.default_rng(20261129)


def _load_reference_rules():
    # by path, so the oracle never goes through the package it checks
    path = ROOT / "pyrope" / "reference_rules.py"
    spec = importlib.util.spec_from_file_location("pyrope_reference_rules_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ref():
    """The plain-Python scaling rules of pyrope/reference_rules.py, loaded by path."""
    return _load_reference_rules()


def pytest_terminal_summary(terminalreporter):
    """Report the largest kernel-vs-reference errors the run saw."""
    from tolerance import EPS32, WORST
    if WORST:
        terminalreporter.section("largest kernel-vs-reference errors")
        for (isa, layout), rel in sorted(WORST.items()):
            terminalreporter.write_line(
                f"{isa:6s} {layout:11s}: {rel:.3g} x (|x0|+|x1|) = {rel / EPS32:.3f} float32 eps")
