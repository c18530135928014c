"""Two gloo ranks on one thread each, each rotating its tensor-parallel half of a
prefill's q and k, against one process rotating all of it on two threads.

    PYTHONPATH=. python bench/distributed_ranks.py [--rounds N] [--tokens 2048,256]
    PYTHONPATH=. torchrun --nproc-per-node 2 bench/distributed_ranks.py [...]

Run plainly, the script starts its two ranks itself with torchrun's
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` on 127.0.0.1, ``OMP_NUM_THREADS=1``;
``GLOO_SOCKET_IFNAME=lo``) and prints the threads pyrope defaults to in each.
The work, per case of T tokens: ``apply_qk(q, k, offset=0, out=(q, k))`` on
torch tensors, float32, split half, head_dim 128, q ``[1, T, 32, 128]`` and k
``[1, T, 8, 128]`` (a prefill with 8 KV heads). Contenders, all in the same
rounds:

- ``2 ranks x 1``: both ranks, ``pyrope.set_num_threads(1)`` (and torch on one
  thread), each on its own arrays of its half of the heads (q ``[1, T, 16,
  128]``, k ``[1, T, 4, 128]``), at once; a block's time is the slower rank's;
- ``1 process x 2``: rank 0 alone on all the heads with two threads, while
  rank 1 waits in a collective (its CPU time meanwhile is printed: the
  second core was free for rank 0's pool); the baseline of the ratios;
- ``1 process x 1``: the same on one thread;
- ``2 ranks x 2``: both ranks with two threads each: what each rank took
  before pyrope's default divided the CPUs by ``LOCAL_WORLD_SIZE`` (two
  pool threads per core).

Method (as ``pyrope/_bench/method.py`` and bench/README.md): wait, up to
``--settle`` seconds, for the 1-minute load average to fall below 1; each
round, every contender in an order rotated by one. A turn starts at an
instant rank 0 names ``LEAD`` seconds ahead (a collective takes milliseconds
on this VM, so a barrier would release the ranks that far apart): each rank
taking part sleeps until then (the idle gap), makes warm-up calls for ~10
ms, spins until one and a half calls past that, so that both ranks' timed
blocks start at the same instant, then times a block of calls, sized in an
uncounted first round to about ``BLOCK`` seconds. Each rank times its own
block (CLOCK_MONOTONIC, comparable across processes); the ranks exchange the
times after, so no collective is inside a timed block. A two-rank block
takes as long as its slower rank; the share of it during which both ranks
were timing, and the turns in which a rank learned the start too late, are
printed. Ratios are formed per round, then the median (and interquartile
range) over rounds: each contender's time over ``1 process x 2``'s. Before
timing, each rank's half is checked bit for bit against its heads of the
whole rotation.
"""
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import pyrope
from pyrope._bench.method import IDLE, WARM
from pyrope._bench.report import cpu_info, cpu_line, load_text

WORLD = 2
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
BLOCK = 0.05        # seconds of work in a timed block
LEAD = 0.05         # seconds from naming a turn's start to the start (gloo takes milliseconds here)
MAX_REPS = 500
# name -> (ranks working, pyrope threads each)
CONTENDERS = {"2 ranks x 1": (2, 1), "1 process x 2": (1, 2), "1 process x 1": (1, 1), "2 ranks x 2": (2, 2)}
BASELINE = "1 process x 2"


def work(tokens, share=None):
    """``(rope, q, k)`` of one prefill (the same values on every rank: one seed),
    or of rank ``share``'s half of its heads."""
    gen = torch.Generator().manual_seed(tokens)
    q = torch.randn(1, tokens, Q_HEADS, HEAD_DIM, generator=gen)
    k = torch.randn(1, tokens, KV_HEADS, HEAD_DIM, generator=gen)
    if share is not None:
        q, k = (t[:, :, heads_of(share, t.shape[2])].contiguous() for t in (q, k))
    return pyrope.Rope(HEAD_DIM, layout="split_half", base=500000.0), q, k


def heads_of(rank, heads):
    n = heads // WORLD
    return slice(rank * n, (rank + 1) * n)


def call_of(rope, q, k):
    def call():
        rope.apply_qk(q, k, offset=0, out=(q, k))
    return call


def wait_until(t, spin=0.0005):
    """Sleep, then spin for the last ``spin`` seconds, until ``time.perf_counter()`` reaches ``t``."""
    left = t - time.perf_counter()
    if left > spin:
        time.sleep(left - spin)
    while time.perf_counter() < t:
        pass


def play(call, start, per_call, reps):
    """A contender's turn from the agreed instant ``start`` (an idle gap before it):
    warm-up calls until ``start + WARM``, a spin to ``start + WARM`` plus one
    call and a half (``per_call``: the previous estimate), so every rank's
    timed block starts at the same instant, then ``reps`` timed calls. Returns
    ``(warm-up seconds per call, (start, end) of the block)``, CLOCK_MONOTONIC
    seconds, which are comparable across processes."""
    wait_until(start)
    begun, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() < start + WARM:   # a rank told late still warms once
        call()
        n += 1
    warmed = (time.perf_counter() - begun) / n
    wait_until(start + WARM + 1.5 * per_call)
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return warmed, (t0, time.perf_counter())


def check_halves(rank, tokens):
    """A rank's half rotated alone must be its heads of the whole rotation, bit for bit."""
    rope, q, k = work(tokens)
    whole = rope.apply_qk(q, k, offset=0)
    rope, q, k = work(tokens, rank)
    half = rope.apply_qk(q, k, offset=0)
    return (torch.equal(half[0], whole[0][:, :, heads_of(rank, Q_HEADS)])
            and torch.equal(half[1], whole[1][:, :, heads_of(rank, KV_HEADS)]))


class Case:
    """One case's contenders on this rank. :meth:`turn` plays this rank's part
    of a contender's turn; rank 0 alone for a one-process contender (rank 1
    waits in the next collective meanwhile)."""

    def __init__(self, rank, tokens):
        self.rank = rank
        self.half = call_of(*work(tokens, rank))
        self.whole = call_of(*work(tokens)) if rank == 0 else None
        self.waiting_cpu = []   # rank 1's CPU seconds per second while rank 0 ran alone

    def turn(self, name, reps, per_call):
        """``(seconds per call, warm-up seconds per call, overlap)`` on rank 0; the
        time of a two-rank block is the slower rank's, ``overlap`` the share of it
        during which both ranks were timing. Rank 0 names the instant the turn
        starts, LEAD seconds ahead: more than a collective takes to reach rank 1,
        and the idle gap before the warm-up."""
        ranks, threads = CONTENDERS[name]
        start = [time.perf_counter() + LEAD if self.rank == 0 else None]
        dist.broadcast_object_list(start, src=0)
        warmed = span = None
        c0, t0 = time.process_time(), time.perf_counter()
        if ranks == 2 or self.rank == 0:
            pyrope.set_num_threads(threads)
            late = time.perf_counter() > start[0] - IDLE
            warmed, span = play(self.half if ranks == 2 else self.whole, start[0], per_call, reps)
            span = (*span, late)
        spans = [None] * WORLD
        dist.all_gather_object(spans, span)
        if ranks == 1:
            if self.rank == 1:
                self.waiting_cpu.append((time.process_time() - c0) / (time.perf_counter() - t0))
            return (spans[0][1] - spans[0][0]) / reps, warmed, 1.0, spans[0][2]
        longest = max(end - begin for begin, end, _ in spans)
        both = min(end for _, end, _ in spans) - max(begin for begin, _, _ in spans)
        return longest / reps, warmed, both / longest, any(late for _, _, late in spans)


def barrier_seconds(n=100):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.barrier()
    return (time.perf_counter() - t0) / n


def measure(rank, tokens, rounds):
    """Per contender, on rank 0: seconds per call and overlap in each round, the
    block's calls, and the turns a rank started late."""
    case = Case(rank, tokens)
    names = list(CONTENDERS)
    reps = dict.fromkeys(names, 1)
    per_call = dict.fromkeys(names, 0.0)
    times = {name: [] for name in names}
    overlaps = {name: [] for name in names}
    late = 0
    for r in range(rounds + 1):   # round 0 sizes the blocks and is not counted
        k = r % len(names)
        for name in names[k:] + names[:k]:
            t, warmed, overlap, was_late = case.turn(name, reps[name], per_call[name])
            if rank != 0:
                continue
            per_call[name] = max(t, warmed)
            if r > 0:
                times[name].append(t)
                overlaps[name].append(overlap)
                late += was_late
            else:
                reps[name] = int(max(1, min(MAX_REPS, round(BLOCK / warmed))))
        sized = [(reps, per_call)]
        dist.broadcast_object_list(sized, src=0)   # every rank times the same block
        reps, per_call = sized[0]
    return times, overlaps, reps, case.waiting_cpu, late


def settle(limit):
    """Wait up to ``limit`` seconds for the 1-minute load average to fall below 1."""
    start = time.monotonic()
    while os.getloadavg()[0] >= 1.0 and time.monotonic() - start < limit:
        time.sleep(2)
    return time.monotonic() - start


def quartiles(values):
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return med, q1, q3


def rank_main(args):
    rank = int(os.environ["RANK"])
    default_threads = pyrope.get_num_threads()   # before anything sets it
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=600))
    try:
        defaults = [None] * WORLD
        dist.all_gather_object(defaults, default_threads)
        waited = settle(args.settle) if rank == 0 else 0.0
        dist.barrier()
        if rank == 0:
            print(f"{cpu_line(cpu_info())}; {len(os.sched_getaffinity(0))} CPUs; ISA {pyrope.get_isa()}; "
                  f"torch {torch.__version__}; LOCAL_WORLD_SIZE {os.environ.get('LOCAL_WORLD_SIZE')}: "
                  f"pyrope's default threads per rank {defaults}")
            print(f"load average {load_text(os.getloadavg())} after waiting {waited:.0f} s; "
                  f"{args.rounds} rounds; gloo barrier {barrier_seconds() * 1e6:.0f} us")
        else:
            barrier_seconds()
        for tokens in args.tokens:
            ok = [None] * WORLD
            dist.all_gather_object(ok, check_halves(rank, tokens))
            if not all(ok):
                raise SystemExit(f"T={tokens}: a rank's half differs from its heads of the whole rotation")
            times, overlaps, reps, waiting, late = measure(rank, tokens, args.rounds)
            report = [float(np.median(waiting)) if rank == 1 else None]
            dist.broadcast_object_list(report, src=1)
            if rank == 0:
                print_case(tokens, times, overlaps, reps, report[0], late)
        if rank == 0:
            print(f"load average at end {load_text(os.getloadavg())}")
    finally:
        dist.destroy_process_group()


def print_case(tokens, times, overlaps, reps, waiting_cpu, late):
    mib = 4 * tokens * (Q_HEADS + KV_HEADS) * HEAD_DIM / 2 ** 20
    base = np.asarray(times[BASELINE])
    print(f"\nT={tokens}: q [1, {tokens}, {Q_HEADS}, {HEAD_DIM}], k [1, {tokens}, {KV_HEADS}, {HEAD_DIM}] float32 "
          f"({mib:g} MiB; each rank's half bit for bit its heads of the whole); rank 1's CPU while rank 0 "
          f"ran alone: {waiting_cpu:.1%} of a core; turns a rank started late: {late}")
    print(f"| contender | median time per call | block | time / {BASELINE}, median of rounds | IQR | "
          f"ranks' blocks overlapping (median) |")
    print("|---|---:|---:|---:|---|---:|")
    for name in CONTENDERS:
        t = np.asarray(times[name])
        med, q1, q3 = quartiles(t / base)
        both = f"{np.median(overlaps[name]):.1%}" if CONTENDERS[name][0] == 2 else "-"
        print(f"| {name} | {np.median(t) * 1e3:.3f} ms | {reps[name]} calls | {med:.3f} | {q1:.3f}-{q3:.3f} | "
              f"{both} |")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv):
    """Start the ranks as torchrun would on this machine; the exit status of the worst."""
    port = free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                   LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME="lo")
        env.setdefault("OMP_NUM_THREADS", "1")
        env.pop("PYROPE_NUM_THREADS", None)   # the ranks show pyrope's own default
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=[2048, 256])
    p.add_argument("--settle", type=float, default=60.0, help="seconds to wait at most for the load to fall")
    args = p.parse_args(argv)
    if "RANK" not in os.environ:
        return launch(argv)
    if int(os.environ["WORLD_SIZE"]) != WORLD:
        raise SystemExit(f"run with {WORLD} ranks")
    rank_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
