"""Collects every case's rows and prints the tables and the targets after the
run (``--bench-json PATH`` also writes them as ``pyrope bench --json`` does)."""
import pytest

RESULTS = []  # rows, filled by bench_rotate.py
MACHINE = {}


def pytest_addoption(parser):
    parser.addoption("--bench-json", metavar="PATH", default=None,
                     help="write the rotation rows, the machine and the targets as JSON")


def pytest_sessionstart(session):
    from pyrope._bench import report as _bench_report
    from pyrope.benchmark import Case
    MACHINE.update(_bench_report.machine_info())
    MACHINE["peer_notes"] = Case.peer_notes(True)


@pytest.fixture(scope="session")
def results():
    """The run's result rows (shared by every benchmark)."""
    return RESULTS


def pytest_terminal_summary(terminalreporter, config):
    """Print the tables: time, GB/s, ratio to the yardstick, speed-ups, targets."""
    if not RESULTS:
        return
    from pyrope._bench import report as _bench_report
    MACHINE["load_average_end"] = _bench_report.machine_info()["load_average"]
    terminalreporter.section("pyrope rotation: medians of per-round ratios")
    for line in _bench_report.markdown(RESULTS, MACHINE).splitlines():
        terminalreporter.write_line(line)
    path = config.getoption("--bench-json")
    if path:
        _bench_report.write_json(path, RESULTS, MACHINE)
        terminalreporter.write_line(f"wrote {path}")
