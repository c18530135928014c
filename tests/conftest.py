"""Shared fixtures: run kernel tests on every instruction set this CPU has;
a seeded generator; the thread count restored; the plain-Python scaling rules
(tests/support/reference_rules.py) as the oracle. Each folder's conftest.py
holds what only its tests use; the helper modules are in tests/support."""
import numpy as np
import pytest

import pyrope


@pytest.fixture(params=pyrope.supported_isas())
def isa(request):
    """Each test using this fixture runs once per supported kernel (scalar, avx2)."""
    with pyrope.forced_isa(request.param):
        yield request.param


@pytest.fixture
def rng():
    """A seeded generator, so every failure reproduces."""
    return np.random.default_rng(20261129)


@pytest.fixture
def threads():
    """Restore the thread count after the test."""
    before = pyrope.get_num_threads()
    yield
    pyrope.set_num_threads(before)


@pytest.fixture(scope="session")
def ref():
    """The plain-Python scaling rules of tests/support/reference_rules.py (no pyrope imports)."""
    import reference_rules
    return reference_rules


def pytest_terminal_summary(terminalreporter):
    """Report the largest kernel-vs-reference errors the run saw."""
    from tolerance import EPS32, WORST
    if WORST:
        terminalreporter.section("largest kernel-vs-reference errors")
        for (isa, layout), rel in sorted(WORST.items()):
            terminalreporter.write_line(
                f"{isa:6s} {layout:11s}: {rel:.3g} x (|x0|+|x1|) = {rel / EPS32:.3f} float32 eps")
