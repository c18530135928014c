"""Collects every case's medians and prints the summary table after the run."""
import pytest

RESULTS = []  # one dict per case, filled by bench_rotate.py


@pytest.fixture(scope="session")
def results():
    """The run's result rows (shared by every benchmark)."""
    return RESULTS


def pytest_terminal_summary(terminalreporter):
    """Print the table: time, GB/s, ratio to the yardstick, speed-up over each peer."""
    if not RESULTS:
        return
    from pyrope.benchmark import format_summary
    terminalreporter.section("pyrope rotation: medians of round-robin repetitions")
    for line in format_summary(RESULTS).splitlines():
        terminalreporter.write_line(line)
