"""The thread pool (csrc/core/threads.c) and Python threads: the thread count,
its default (shared among torchrun's local ranks), its setting and
environment variable, the bandwidth pass, fork, many Python threads calling
at once (the GIL is released in C), the split rule and an idle pool's CPU
time. None may change a single bit."""
import glob
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._engine import isa as _isa, launcher as _launcher
from array_bits import bits
from checkout import ROOT, env_with_checkout

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_thread_counts_are_bit_identical(isa, threads, dtype, layout, rng):
    # Large enough (>= 1 MiB of traffic per thread, even for 16-bit types) for
    # the size rule to give 2..4 threads; whether a call is split also depends
    # on the pool's state (threads.c), so test_split_calls_in_c forces splits.
    # 4 * 509 tokens do not split evenly.
    rope = Rope(64, layout=layout, rotary_dim=56)
    x = rng.standard_normal((4, 509, 8, 64)).astype(dtype)
    k = rng.standard_normal((4, 509, 2, 64)).astype(dtype)
    pos = rng.integers(0, 5000, size=(4, 509))
    results = []
    for n in (1, 2, 3, 4):
        pyrope.set_num_threads(n)
        inplace = x.copy()
        rope.apply(inplace, offset=11, out=inplace)
        results.append([rope.apply(x, pos), rope.apply(x, pos, angles="on_the_fly"),
                        inplace, *rope.apply_qk(x, k, offset=3)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(bits(a), bits(b))


def test_set_num_threads_checks_its_argument(threads):
    pyrope.set_num_threads(3)
    assert pyrope.get_num_threads() == 3
    for bad, exc in ((0, ValueError), (65, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="n must be"):
            pyrope.set_num_threads(bad)
    assert pyrope.get_num_threads() == 3


def test_num_threads_from_environment():
    code = "import pyrope; print(pyrope.get_num_threads())"
    env = env_with_checkout(PYROPE_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr
    # a bad value is a RuntimeWarning naming the variable, and the default is used
    env["PYROPE_NUM_THREADS"] = "lots"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == str(_isa._default_threads()), out.stderr
    assert "RuntimeWarning" in out.stderr and "PYROPE_NUM_THREADS" in out.stderr and "'lots'" in out.stderr
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "PYROPE_NUM_THREADS" in out.stderr


# LOCAL_WORLD_SIZE -> the ranks sharing the CPUs (None: the value is not torchrun's count, ignored)
LOCAL_SIZES = [("2", 2), ("3", 3), (" 4 ", 4), ("1", 1), ("100", 100), ("", None), ("0", None), ("-2", None),
               ("two", None), ("2.0", None)]


@pytest.mark.parametrize("value,ranks", LOCAL_SIZES, ids=[repr(v) for v, _ in LOCAL_SIZES])
@pytest.mark.parametrize("cpus", [1, 2, 8, 200])
def test_default_threads_are_the_cpus_shared_among_local_ranks(monkeypatch, value, ranks, cpus):
    monkeypatch.setattr(_isa, "_cpus", lambda: cpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    assert _isa._default_threads() == max(1, min(_isa.MAX_THREADS, cpus // (ranks or 1)))


def test_default_threads_under_a_torchrun_launch():
    # what a rank started by torchrun gets at import, from this process's own affinity mask;
    # PYROPE_NUM_THREADS and set_num_threads still override it
    code = ("import os, pyrope; cpus = len(os.sched_getaffinity(0)); default = pyrope.get_num_threads(); "
            "pyrope.set_num_threads(3); print(cpus, default, pyrope.get_num_threads())")
    for local, pinned, expected in (("2", None, lambda c: max(1, c // 2)), ("5", None, lambda c: max(1, c // 5)),
                                    ("many", None, lambda c: min(64, c)), ("2", "3", lambda c: 3)):
        env = env_with_checkout(LOCAL_WORLD_SIZE=local)
        env.pop("PYROPE_NUM_THREADS", None)
        if pinned:
            env["PYROPE_NUM_THREADS"] = pinned
        out = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr   # a bad LOCAL_WORLD_SIZE is not ours to warn about
        cpus, default, later = map(int, out.stdout.split())
        assert (default, later) == (expected(cpus), 3), (local, pinned, out.stdout)


@pytest.mark.parametrize("n_threads", [1, 2, 4])
def test_bandwidth_pass_reads_and_writes_every_byte(isa, n_threads, rng):
    for n in (0, 1, 3, 4, 129, 3 << 20):
        a = rng.integers(0, 256, size=n, dtype=np.uint8)
        keep = a.copy()
        _launcher.bandwidth_pass(a, 0, n_threads)
        assert np.array_equal(a, keep)
        _launcher.bandwidth_pass(a, 0xA5C30F81, n_threads)
        mask = np.resize(np.array([0x81, 0x0F, 0xC3, 0xA5], np.uint8), n)
        assert np.array_equal(a, keep ^ mask)


def test_pool_survives_fork():
    # A child forked after the pool started has no workers: it must start its
    # own (or run alone), never wait for the parent's.
    code = ("import os, numpy as np, pyrope\n"
            "pyrope.set_num_threads(2)\n"
            "r = pyrope.Rope(64, layout='split_half')\n"
            "x = np.ones((4, 512, 8, 64), np.float32)\n"
            "want = r.apply(x, offset=5)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    ok = np.array_equal(r.apply(x, offset=5), want)\n"
            "    os._exit(0 if ok else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print('child', os.waitstatus_to_exitcode(status))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env_with_checkout(), capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "child 0", (out.stdout, out.stderr)


def test_concurrent_calls_from_python_threads(rng):
    rope = Rope(32, layout="split_half")
    xs = [rng.standard_normal((1, 64, 4, 32)).astype(np.float32) for _ in range(8)]
    offsets = [0, 5000, 64, 100000, 7, 2**30, 128, 3]
    want = [Rope(32, layout="split_half").apply(x, offset=o, angles="on_the_fly") for x, o in zip(xs, offsets)]
    got = [None] * 8

    def work(i):
        for _ in range(20):
            got[i] = rope.apply(xs[i], offset=offsets[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for a, b in zip(got, want):
        assert np.array_equal(bits(a), bits(b))


def test_threads_match_serial(rng):
    ropes = [Rope(128, layout="split_half", base=5e5), Rope(64, layout="interleaved", rotary_dim=48)]
    jobs = []
    for i in range(24):
        rope = ropes[i % 2]
        q = rng.standard_normal((2, 64, 8, rope.head_dim)).astype(np.float32)
        k = rng.standard_normal((2, 64, 2, rope.head_dim)).astype(np.float32)
        pos = rng.integers(0, 2**31 - 1, size=64)
        jobs.append((rope, q, k, pos))
    serial = [(r.apply(q, pos), *r.apply_qk(q, k, offset=i * 1000), *r.cos_sin(pos))
              for i, (r, q, k, pos) in enumerate(jobs)]

    results = [None] * len(jobs)
    start = threading.Barrier(8)

    def worker(ids):
        start.wait()
        for _ in range(3):
            for i in ids:
                r, q, k, pos = jobs[i]
                qi, ki = q.copy(), k.copy()
                r.apply_qk(qi, ki, offset=i * 1000, out=(qi, ki))
                results[i] = (r.apply(q, pos), qi, ki, *r.cos_sin(pos))

    threads = [threading.Thread(target=worker, args=(list(range(t, len(jobs), 8)),)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, serial):
        for a, b in zip(got, want):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))




def test_split_calls_in_c(tmp_path):
    # tests/c/threads_race.c without the sanitizer (`make tsan` runs it with
    # it): every instruction set with every call split over 2 and 4 threads
    # (parts run on workers) bit-identical to the scalar kernels on one, the
    # split rule through the pool's counters, idle CPU time, concurrent calls.
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    assert cc, "a C compiler is needed to build tests/c/threads_race.c"
    exe = tmp_path / "threads_race"
    csrc = os.path.join(ROOT, "csrc")
    sources = [os.path.join(ROOT, "tests", "c", "threads_race.c")]
    sources += sorted(glob.glob(os.path.join(csrc, "**", "*.c"), recursive=True))
    build = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
                            "-pthread", "-I", csrc, *sources, "-lm", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_idle_pool_burns_no_cpu(threads, rng):
    # After a burst of calls large enough to split, the workers spin briefly
    # and then sleep: the process uses (almost) no CPU time while idle.
    pyrope.set_num_threads(2)
    rope = Rope(128, layout="split_half")
    x = rng.standard_normal((1, 2048, 32, 128)).astype(np.float32)  # 64 MiB of traffic
    for _ in range(20):
        rope.apply(x, offset=3, out=x)
    time.sleep(0.05)
    c0, t0 = time.process_time(), time.monotonic()
    time.sleep(0.5)
    used, wall = time.process_time() - c0, time.monotonic() - t0
    assert used < 0.05, f"{used * 1e3:.1f} ms of CPU time in {wall * 1e3:.0f} ms idle"
