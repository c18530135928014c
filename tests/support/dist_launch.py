"""Run N local gloo ranks as ``torchrun --nproc-per-node N`` would on one
machine: torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, and
``OMP_NUM_THREADS=1``, which torchrun sets for more than one process), on
localhost only (``GLOO_SOCKET_IFNAME=lo``).

:func:`run` (in the test process) starts one new Python process, the
launcher, running a worker module; the module imports what the ranks need
and calls :func:`fork_ranks`, which forks the ranks from it. Why so: the
test process cannot fork them itself, since it has run torch's OpenMP pool
(a child forked after that hangs in its first matrix product: libgomp waits
for the parent's workers), while the launcher, with ``OMP_NUM_THREADS=1``,
never starts one; and ranks started as new processes would each import
torch and transformers again, the longest part of a run."""
import os
import signal
import socket
import subprocess
import sys

from checkout import ROOT, env_with_checkout

SUPPORT = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """A TCP port of 127.0.0.1 that was free a moment ago (bound to port 0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_environment(world, port, **variables):
    """The environment torchrun gives every rank of ``world`` on one machine
    (but ``RANK``/``LOCAL_RANK``, which :func:`fork_ranks` sets per rank)."""
    env = env_with_checkout(**variables)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], SUPPORT])
    env.update(WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    if "PYROPE_NUM_THREADS" not in variables:   # the ranks take pyrope's own default
        env.pop("PYROPE_NUM_THREADS", None)
    return env


def run(module, args, world, out_dir, timeout=120.0, **variables):
    """Run ``python -m module *args`` as the launcher of ``world`` ranks and wait for it.

    Its output (and the ranks') goes to ``out_dir/launcher.log``. A launcher
    that fails, or still runs after ``timeout`` seconds (it and its ranks are
    then killed), raises ``RuntimeError`` with the end of that log."""
    path = os.path.join(out_dir, "launcher.log")
    with open(path, "w+", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                                env=launch_environment(world, free_port(), **variables),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:   # the launcher's own session: it and any rank still left of it
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if code != 0:
            log.seek(0)
            why = f"exited with {code}" if code is not None else f"was still running after {timeout:g} s"
            raise RuntimeError(f"the launcher of {world} ranks {why}:\n{log.read()[-6000:]}")


def fork_ranks(main, *args):
    """In the launcher: run ``main(rank, world, *args)`` in one forked process per
    rank (``RANK`` and ``LOCAL_RANK`` set); return when all have returned, raise
    if one failed (torch stops the others)."""
    import torch.multiprocessing as mp
    world = int(os.environ["WORLD_SIZE"])
    mp.start_processes(_rank, args=(world, main, args), nprocs=world, start_method="fork")


def _rank(rank, world, main, args):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    sys.stdout.flush()
    main(rank, world, *args)
    sys.stdout.flush()
