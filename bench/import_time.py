"""How long `import pyrope` and the command's start take, in fresh interpreters.

    python bench/import_time.py [--runs N]

Each measurement is the median wall time of N fresh processes (default 11),
minus the median of as many bare ``python -c pass``: what pyrope adds to a
process's start. Run in turns (one of each per round), so a slower moment of
a shared machine falls on all of them alike. The command is run as
``python -m pyrope`` (the ``pyrope`` script imports the same ``pyrope.cli``).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass": ["-c", "pass"],
    "import pyrope": ["-c", "import pyrope"],
    "import pyrope, ml_dtypes": ["-c", "import pyrope, ml_dtypes"],
    "pyrope --version": ["-m", "pyrope", "--version"],
    "pyrope --help": ["-m", "pyrope", "--help"],
}


def cpu():
    """The CPU as /proc/cpuinfo names it: model name, family, model."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return f"{fields.get('model name', '?')}, family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"


def once(argv):
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    return elapsed, proc.returncode, proc.stderr.decode(errors="replace").strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    times = {name: [] for name in CASES}
    failed = {}
    for _ in range(args.runs):
        for name, argv in CASES.items():
            elapsed, code, err = once(argv)
            if code != 0:
                failed[name] = err.splitlines()[-1] if err else f"exit {code}"
            times[name].append(elapsed)
    bare = statistics.median(times["python -c pass"])
    print(f"{cpu()}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}; "
          f"median of {args.runs} runs, minus `python -c pass` ({bare * 1e3:.0f} ms)")
    for name in CASES:
        if name == "python -c pass":
            continue
        if name in failed:
            print(f"  {name:26} failed: {failed[name]}")
            continue
        print(f"  {name:26} {(statistics.median(times[name]) - bare) * 1e3:6.0f} ms")


if __name__ == "__main__":
    main()
