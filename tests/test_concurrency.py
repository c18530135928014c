"""Many Python threads calling into the kernel at once (the GIL is released
in C) get exactly what serial calls get."""
import threading

import numpy as np

from pyrope import Rope


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
