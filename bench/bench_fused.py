"""The fused key step against the passes it replaces: norm, rotation and paged-cache write in one call.

A Qwen3-style attention layer (8 KV heads of 128, per-head RMSNorm on k, the
model's rope: base 1e6, split half) writes its keys and values into a paged
cache ``[num_blocks, 16, 8, 128]`` (NHD; the blocks of a sequence shuffled
through the cache, one in five left unused). Cases:

- ``prefill_2048``, ``prefill_8192``: k and v ``[1, tokens, 8, 128]`` at
  positions 0.. (8192 tokens: 32 MiB each in float32);
- ``decode_16``: a decode step of 16 sequences of one token, k and v
  ``[16, 1, 8, 128]``, each sequence at its own position (1000 + 61 i) and in
  its own block.

Every dtype: float32, bfloat16 (ml_dtypes), float16, float64, each into a
cache of its own dtype, and float32 data into a bfloat16 cache. Contenders,
timed in the same rounds:

- ``fused``: ``rope.cache_write(k, v, k_cache, v_cache, slots, norm=norm)``
  (decode: ``positions=``), pyrope's default threads;
- ``fused, no norm``: the same call without ``norm`` (what the norm stage
  adds inside the call);
- ``multi-pass``: pyrope's own sequence without the fusion: a numpy RMSNorm
  in float32 (float64 for float64 data) into a new array of k's dtype, as a
  numpy backend writes it, ``rope.apply(kn, out=kn)``, then numpy's scatter
  ``k_cache.reshape(-1, H, D)[slots] = kn`` and the same for v;
- ``torch eager``: transformers' ``Qwen3RMSNorm`` (its module, the weight in
  the model's dtype), the k half of transformers' ``apply_rotary_pos_emb``
  (``k * cos + rotate_half(k) * sin`` with ``modeling_qwen3.rotate_half``;
  checked bit for bit against ``apply_rotary_pos_emb`` itself, which would
  also rotate a q we do not have) with ``unsqueeze_dim=2`` on the
  ``[batch, seq, heads, dim]`` tensors a paged backend keeps, then
  ``k_cache.view(-1, H, D)[slots] = k`` and the same for v. cos/sin come from
  ``Qwen3RotaryEmbedding`` once per case, outside the timed sequence: the
  model computes them once per forward pass for all its layers (their time
  is shown as ``torch cos/sin``, in no ratio). Run on 1 and on torch's
  default threads, each round keeping the faster (``bench/README.md``);
- ``yardstick``: ``rope_bandwidth_pass`` in place over a buffer of as many
  bytes as the fused call reads and writes ((reads + writes) / 2: k and v
  read, their bytes written into the cache), on 1 and on the default threads,
  each round keeping the faster. It reads and writes every byte once with
  the widest vectors and does nothing else, and in place: its stores land on
  lines it has just read, where the fused call's stores go to other lines
  (the cache), which a write-allocate cache first reads. A fused call can at
  best match it (1.0: on the bandwidth line);
- ``numpy scatter``: the bytes of k and v copied into the same slots, one
  numpy fancy-index assignment of whole token rows (``np.void`` items, one
  memcpy each): what moving these bytes to these slots costs a plain copy,
  write-allocate included (same-dtype caches only);
- ``apply + norm``, ``apply``: ``rope.apply(k, out=k_out, norm=norm)`` and
  ``rope.apply(k, out=k_out)`` on k alone (decode: at the same positions),
  into an array of their own rather than in place: normalising the same k in
  place call after call scales each coordinate by its weight every time, and
  those with a weight below 1 sink into subnormals, which the CPU computes
  many times slower.

Each contender has its own arrays (16 bytes past a 4 KiB boundary, as
numpy places large arrays) and its own Rope. The rules of
``bench/README.md``: every round each contender, in an order rotating by
one, idles 2 ms, is warmed for ~10 ms, then timed over a block of about
1 ms of calls (at most 100, sized in an uncounted first round); every ratio
is formed within a round and its median over rounds reported.

Before timing, every writer runs once into zeroed caches and is checked:
blocks no slot names stay zero; v is stored bit for bit (rounded once, in
the bfloat16 cache); ``fused`` equals ``apply + norm`` scattered and
``fused, no norm`` equals ``apply`` scattered, bit for bit; ``fused``
matches ``pyrope.reference`` (exact rotation of the float64 norm rounded to
float32) on sampled heads; and ``fused`` agrees with ``multi-pass`` and
``torch eager`` within the bounds :func:`tolerances` states, so the bench
cannot time a wrong computation.

    python bench/bench_fused.py [--quick] [--case NAME] [--dtype NAME] [--rounds N] [--json PATH]
    python bench/bench_fused.py --load PATH     # reprint a saved run
    python bench/bench_fused.py --profile       # where the fused call's time goes

``python -m pytest bench/bench_fused.py -q`` (or ``make bench``) runs it as
one benchmark with the default rounds.
"""
import argparse
import contextlib
import cProfile
import functools
import io
import pstats
import sys

import numpy as np

import ml_dtypes   # the bench extra installs it: the bfloat16 cases always run
import pyrope
from pyrope import RMSNorm, Rope, reference
from pyrope._bench import method as _method, profile as _profile, report as _bench_report
from pyrope._engine.launcher import bandwidth_pass
from pyrope.benchmark import placed

try:
    import torch
    import transformers
    from transformers.models.qwen3 import modeling_qwen3
except ImportError as exc:  # never skipped quietly: the torch contender is part of the comparison
    raise ImportError(f"bench/bench_fused.py needs torch and transformers (pyproject extra 'bench'): {exc}") from exc

FORMAT = "pyrope-bench-fused/1"
HEADS, HEAD_DIM, BLOCK = 8, 128, 16
EPS = 1e-6
CONFIG = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
              rope_theta=1000000.0, max_position_embeddings=40960, rms_norm_eps=EPS)
CASES = {  # name: (kind, sequences, tokens per sequence, rounds)
    "prefill_2048": ("prefill", 1, 2048, 21),
    "prefill_8192": ("prefill", 1, 8192, 11),
    "decode_16": ("decode", 16, 1, 41),
}
QUICK_ROUNDS = 5
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {  # name: (data dtype, cache dtype)
    "float32": (np.dtype(np.float32), np.dtype(np.float32)),
    "bfloat16": (BF16, BF16),
    "float16": (np.dtype(np.float16), np.dtype(np.float16)),
    "float64": (np.dtype(np.float64), np.dtype(np.float64)),
    "float32>bfloat16": (np.dtype(np.float32), BF16),
}
UNIT = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11, "float64": 2.0**-53}
TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
               "float64": torch.float64}
FUSED, FUSED_PLAIN, MULTI, TORCH, TORCH_TABLES = "fused", "fused, no norm", "multi-pass", "torch eager", "torch cos/sin"
YARD, SCATTER, APPLY_NORM, APPLY = "yardstick", "numpy scatter", "apply + norm", "apply"
THREADED = (TORCH, YARD)   # timed on 1 and on N threads; each round keeps the faster
WRITERS = (FUSED, FUSED_PLAIN, MULTI, TORCH, SCATTER)


def _dname(dtype):
    return "bfloat16" if dtype == BF16 else dtype.name


def tolerances(data_name, cache_name, max_position):
    """Per head, the largest |a - b| allowed as a multiple of the head's largest |value|:
    ``multi-pass`` against ``fused``, and ``torch eager`` against ``fused``.

    multi-pass: its norm runs in float32 (a few float32 roundings), the fused
    call's in float64 rounded once to float32; for a 16-bit k the multi-pass
    norm also rounds to k's dtype before the rotation rounds again: 32 units
    of float32 rounding (2**-24), plus 2 units of the cache's rounding when
    the cache is narrower than float32 (a value on the edge of a rounding step
    may go either way), plus 2 more of the data's when the data are 16-bit
    (the extra rounding of the normalised k); float64: 32 units of 2**-53.
    torch eager: transformers' angles are float32 products with float32
    frequencies, off by up to about position * 2**-21 radians
    (bench/bench_transformers.py), its norm runs in float32 even for float64
    data, and for 16-bit data it rounds the norm, cos and sin and three
    products and sums to the data's dtype: the angle bound, 32 units of
    2**-24, and 8 units of the data's rounding (2 of the cache's too when it is
    narrower)."""
    u_cache, u_data = UNIT[cache_name], UNIT[data_name]
    if data_name == "float64" and cache_name == "float64":
        multi = 32 * u_data
    else:
        multi = 32 * 2.0**-24 + (2 * u_cache if u_cache > 2.0**-24 else 0) + (2 * u_data if u_data > 2.0**-24 else 0)
    torch_tol = ((max_position + 1) * 2.0**-21 + 32 * 2.0**-24 + (8 * u_data if u_data > 2.0**-24 else 0)
                 + (2 * u_cache if u_cache > 2.0**-24 else 0))
    return multi, torch_tol


# ---- one case: the data, the contenders, the check ------------------------------------

def _as_torch(a):
    """A torch tensor over ndarray ``a``'s memory (bfloat16 through its bits)."""
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _numpy_rms_norm(x, w, eps, dtype):
    """RMSNorm over the last axis, the way a numpy backend writes it: float32
    (float64 for float64 data) throughout, one rounding to ``dtype`` at the end;
    a new array."""
    wide = np.float64 if x.dtype == np.float64 else np.float32
    y = x.astype(wide)
    ms = np.mean(np.square(y), axis=-1, keepdims=True)
    ms += wide(eps)
    np.sqrt(ms, out=ms)
    np.divide(1, ms, out=ms)
    y *= ms
    y *= w
    return y.astype(dtype, copy=False)


_torch_threads = _method.torch_threads


class _Contender:
    """A call to time, the context it runs in (torch's threads, the yardstick's
    instruction set), the arrays it writes (checked), and its timed block's size."""
    __slots__ = ("call", "context", "caches", "reps")

    def __init__(self, call, context=contextlib.nullcontext, caches=None):
        self.call, self.context, self.caches, self.reps = call, context, caches, 1


class Case(_method.Rounds):
    """One case x dtype: its data, every contender, the check and the rounds."""

    def __init__(self, case, dtype_name, seed=24):
        kind, batch, seq, self.default_rounds = CASES[case]
        self.case, self.kind, self.dtype_name = case, kind, dtype_name
        self.dtype, self.cache_dtype = DTYPES[dtype_name]
        self.data_name, self.cache_name = _dname(self.dtype), _dname(self.cache_dtype)
        self.threads = pyrope.get_num_threads()
        rng = np.random.default_rng(seed)
        shape = (batch, seq, HEADS, HEAD_DIM)
        self.shape = shape
        self.k0 = (2.0 * rng.standard_normal(shape)).astype(self.dtype)
        self.v0 = rng.standard_normal(shape).astype(self.dtype)
        # the model's k_norm weight, in the model's dtype (float32 for the mixed case)
        self.w = (1.0 + 0.25 * rng.standard_normal(HEAD_DIM)).astype(self.dtype)
        tokens = batch * seq
        if kind == "prefill":
            self.positions = np.arange(seq, dtype=np.int64)[None]           # [1, seq]
            used = seq // BLOCK
            n_blocks = used + used // 4                                    # one in five unused
            table = rng.permutation(n_blocks)[:used]
            slots = table[np.arange(seq) // BLOCK] * BLOCK + np.arange(seq) % BLOCK
            self.slots = slots.astype(np.int64)[None]                      # [1, seq]
        else:
            self.positions = (1000 + 61 * np.arange(batch, dtype=np.int64))[:, None]   # [batch, 1]
            n_blocks = 4 * batch
            table = rng.permutation(n_blocks)[:batch]                      # a block per sequence
            self.slots = (table * BLOCK + self.positions[:, 0] % BLOCK).astype(np.int64)[:, None]
        self.n_blocks, self.tokens = n_blocks, tokens
        self.flat_slots = self.slots.reshape(-1)
        self.config = transformers.Qwen3Config(**CONFIG)
        self.rope = Rope.from_hf_config(self.config)
        self.bytes_read = 2 * self.k0.nbytes
        self.bytes_written = 2 * tokens * HEADS * HEAD_DIM * self.cache_dtype.itemsize
        self.contenders = {}
        self._add_pyrope()
        self._add_multi_pass()
        self._add_torch()
        self._add_yardsticks()
        self.times = {name: [] for name in self.contenders}
        self.check_info = {}
        self._round = 0

    # -- contenders --

    def _caches(self):
        shape = (self.n_blocks, BLOCK, HEADS, HEAD_DIM)
        return placed(np.zeros(shape, self.cache_dtype)), placed(np.zeros(shape, self.cache_dtype))

    def _pos_kw(self):
        # prefill: offset 0 (positions 0..); decode: each sequence's own position
        return {} if self.kind == "prefill" else {"positions": self.positions}

    def _add_pyrope(self):
        c, pos = self.contenders, self._pos_kw()
        norm = RMSNorm(self.w, eps=EPS)
        for name, with_norm in ((FUSED, True), (FUSED_PLAIN, False)):
            rope = Rope.from_hf_config(self.config)
            k, v = placed(self.k0), placed(self.v0)
            kc, vc = self._caches()
            slots = self.slots.copy()
            kw = dict(pos, norm=norm if with_norm else None)
            c[name] = _Contender(lambda r=rope, k=k, v=v, kc=kc, vc=vc, s=slots, kw=kw:
                                 r.cache_write(k, v, kc, vc, s, **kw), caches=(kc, vc))
        for name, with_norm in ((APPLY_NORM, True), (APPLY, False)):
            # into an out of its own, never in place: normalising the same k again and again scales each
            # coordinate by its weight every call, and those with a weight below 1 sink into subnormals
            rope = Rope.from_hf_config(self.config)
            k, out = placed(self.k0), placed(np.zeros_like(self.k0))
            kw = dict(pos, norm=norm if with_norm else None)
            c[name] = _Contender(lambda r=rope, k=k, o=out, kw=kw: r.apply(k, out=o, **kw), caches=(out,))

    def _add_multi_pass(self):
        rope = Rope.from_hf_config(self.config)
        k, v = placed(self.k0), placed(self.v0)
        kc, vc = self._caches()
        kc3, vc3 = kc.reshape(-1, HEADS, HEAD_DIM), vc.reshape(-1, HEADS, HEAD_DIM)
        slots = self.flat_slots.copy()
        w = self.w.astype(np.float64 if self.dtype == np.float64 else np.float32)
        pos, dtype = self._pos_kw(), self.dtype

        def call():
            kn = _numpy_rms_norm(k, w, EPS, dtype)
            rope.apply(kn, out=kn, **pos)
            kc3[slots] = kn.reshape(-1, HEADS, HEAD_DIM)
            vc3[slots] = v.reshape(-1, HEADS, HEAD_DIM)
        self.contenders[MULTI] = _Contender(call, caches=(kc, vc))

    def _add_torch(self):
        tdtype = TORCH_DTYPE[self.data_name]
        rotary = modeling_qwen3.Qwen3RotaryEmbedding(self.config)
        k_norm = modeling_qwen3.Qwen3RMSNorm(HEAD_DIM, eps=EPS).to(tdtype)
        with torch.no_grad():
            k_norm.weight.copy_(_as_torch(self.w.copy()))
        k, v = _as_torch(placed(self.k0)), _as_torch(placed(self.v0))
        position_ids = torch.from_numpy(self.positions.copy())
        x = torch.zeros(1, dtype=tdtype)   # the hidden states: dtype and device only
        with torch.no_grad():
            cos, sin = rotary(x, position_ids)   # [batch, seq, head_dim], once per forward pass
        self.torch_tables = (rotary, x, position_ids, cos, sin)
        rotate_half = modeling_qwen3.rotate_half
        ctype = TORCH_DTYPE[self.cache_name]
        slots = torch.from_numpy(self.flat_slots.copy())
        for n in sorted({1, torch.get_num_threads()}):
            kc, vc = self._caches()
            kct, vct = _as_torch(kc).view(-1, HEADS, HEAD_DIM), _as_torch(vc).view(-1, HEADS, HEAD_DIM)

            def call(kct=kct, vct=vct):
                with torch.no_grad():
                    ks = k_norm(k)
                    c, s = cos.unsqueeze(2), sin.unsqueeze(2)      # apply_rotary_pos_emb, unsqueeze_dim=2
                    ke = (ks * c) + (rotate_half(ks) * s)           # ... its k half
                    kct[slots] = ke.flatten(0, 1).to(ctype)
                    vct[slots] = v.flatten(0, 1).to(ctype)
            self.contenders[(TORCH, n)] = _Contender(call, functools.partial(_torch_threads, n), caches=(kc, vc))
        self.contenders[TORCH_TABLES] = _Contender(lambda: rotary(x, position_ids),
                                                   functools.partial(_torch_threads, 1))
        self._torch_apply = (k_norm, k, cos, sin)

    def _add_yardsticks(self):
        n_bytes = (self.bytes_read + self.bytes_written) // 2
        buf = placed(np.zeros(n_bytes // 4, np.float32))
        under = functools.partial(pyrope.forced_isa, _method.yardstick_isa())
        for n in sorted({1, self.threads}):
            self.contenders[(YARD, n)] = _Contender(lambda n=n: bandwidth_pass(buf, 0, n), under)
        if self.dtype == self.cache_dtype:
            row = np.dtype((np.void, HEADS * HEAD_DIM * self.dtype.itemsize))
            k, v = placed(self.k0), placed(self.v0)
            kc, vc = self._caches()
            kr, vr = (a.reshape(self.tokens, -1).view(np.uint8).view(row).reshape(-1) for a in (k, v))
            kcr, vcr = (a.reshape(self.n_blocks * BLOCK, -1).view(np.uint8).view(row).reshape(-1) for a in (kc, vc))
            slots = self.flat_slots.copy()

            def scatter():
                kcr[slots] = kr
                vcr[slots] = vr
            self.contenders[SCATTER] = _Contender(scatter, caches=(kc, vc))

    # -- the check --

    def _gather(self, cache):
        return cache.reshape(-1, HEADS, HEAD_DIM)[self.flat_slots].reshape(self.shape)

    def check(self):
        """Run every writer once into zeroed caches and compare (the module docstring says what)."""
        for con in self.contenders.values():
            for a in con.caches or ():
                a[...] = 0
        for name, con in self.contenders.items():
            if con.caches is not None:
                with con.context():
                    con.call()
        unused = np.setdiff1d(np.arange(self.n_blocks * BLOCK), self.flat_slots)
        writers = {name: con.caches for name, con in self.contenders.items()
                   if (name[0] if isinstance(name, tuple) else name) in WRITERS}
        for name, (kc, vc) in writers.items():
            for c in (kc, vc):
                assert not c.reshape(-1, HEADS, HEAD_DIM)[unused].view(np.uint8).any(), \
                    f"{name} wrote a slot the mapping does not name"
        fused_k, fused_v = (self._gather(c).astype(np.float64) for c in self.contenders[FUSED].caches)
        want_v = self.v0.astype(self.cache_dtype)
        for name, (kc, vc) in writers.items():
            assert np.array_equal(self._gather(vc).view(np.uint8), want_v.view(np.uint8)), f"{name}: v differs"
        # bit for bit: the fused call against apply(norm=) then a store, without norm against apply
        for fused, applied in ((FUSED, APPLY_NORM), (FUSED_PLAIN, APPLY)):
            got = self._gather(self.contenders[fused].caches[0])
            want = self.contenders[applied].caches[0].astype(self.cache_dtype)
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{fused} differs from {applied}"
        if SCATTER in writers:
            got = self._gather(writers[SCATTER][0])
            assert np.array_equal(got.view(np.uint8), self.k0.view(np.uint8)), "numpy scatter: k differs"
        self._check_reference(fused_k)
        multi_tol, torch_tol = tolerances(self.data_name, self.cache_name, int(self.positions.max()))
        scale = np.abs(fused_k).max(axis=-1)
        for name, tol in ((MULTI, multi_tol), ((TORCH, 1), torch_tol)):
            got = self._gather(writers[name][0]).astype(np.float64)
            err = float((np.abs(got - fused_k).max(axis=-1) / scale).max())
            label = name if isinstance(name, str) else name[0]
            assert err <= tol, f"{label} differs from fused by {err:.3g} of a head's largest value (bound {tol:.3g})"
            self.check_info[label] = {"error": err, "bound": tol}
        self._check_torch_function()

    def _check_reference(self, fused_k):
        """Sampled heads of the fused cache against the exact rotation of the
        float64 norm, rounded as the kernel rounds it (to float32; float64 data
        stay float64)."""
        rng = np.random.default_rng(0)
        w = self.w.astype(np.float64)
        inv_freq = [float(f) for f in self.rope.inv_freq]
        u = UNIT[self.cache_name]
        compute = 2.0**-53 if self.data_name == "float64" and self.cache_name == "float64" else 2.0**-24
        worst = 0.0
        for _ in range(16):
            b, s, h = (int(rng.integers(0, n)) for n in self.shape[:3])
            x = self.k0[b, s, h].astype(np.float64)
            y = x * (1.0 / np.sqrt(np.mean(x * x) + EPS) * w)
            if compute != 2.0**-53:
                y = y.astype(np.float32).astype(np.float64)
            want = np.array(reference.rotate_with_inv_freq([float(t) for t in y], int(self.positions[b, s]), inv_freq,
                                                           layout=self.rope.layout))
            half = HEAD_DIM // 2
            pair = np.abs(y[:half]) + np.abs(y[half:])
            m = np.concatenate([pair, pair])
            err = np.abs(fused_k[b, s, h] - want)
            bound = 2 * (u + 8 * compute) * m + 2.0**-60
            assert np.all(err <= bound), f"fused is wrong at {(b, s, h)}: error {err.max():.3g}"
            worst = max(worst, float((err / m).max()))
        self.check_info["reference"] = {"error": worst, "bound": 2 * (u + 8 * compute)}

    def _check_torch_function(self):
        """The k half timed is transformers' ``apply_rotary_pos_emb``'s, bit for bit."""
        k_norm, k, cos, sin = self._torch_apply
        with torch.no_grad():
            ks = k_norm(k)
            _, want = modeling_qwen3.apply_rotary_pos_emb(ks, ks, cos, sin, unsqueeze_dim=2)
            got = (ks * cos.unsqueeze(2)) + (modeling_qwen3.rotate_half(ks) * sin.unsqueeze(2))
        assert torch.equal(got, want), "the torch contender's rotation is not apply_rotary_pos_emb's"

    # -- the rounds: _method.Rounds --

    def row(self):
        """What a run keeps of this case: the per-round times of each contender
        (threaded ones: per thread count), its block size and the check."""
        times = {}
        for name, t in self.times.items():
            key = name if isinstance(name, str) else f"{name[0]} @{name[1]}"
            times[key] = t
        return {"case": self.case, "kind": self.kind, "dtype": self.dtype_name, "data": self.data_name,
                "cache": self.cache_name, "shape": "x".join(map(str, self.shape)), "tokens": self.tokens,
                "blocks": self.n_blocks, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "threads": self.threads, "torch_threads": torch.get_num_threads(),
                "rounds": min(len(t) for t in times.values()),
                "reps": {(n if isinstance(n, str) else f"{n[0]} @{n[1]}"): c.reps for n, c in self.contenders.items()},
                "check": self.check_info, "times": times}


# ---- the report --------------------------------------------------------------------

_per_round = _method.per_round
ratio = _method.round_ratio
_t = _bench_report.short_time
_r = _bench_report.ratio_text


def _case_heading(row, rounds):
    b, s = row["shape"].split("x")[:2]
    what = (f"prefill, k and v [{b}, {s}, {HEADS}, {HEAD_DIM}]" if row["kind"] == "prefill"
            else f"decode, {b} sequences x {s} token, k and v [{b}, {s}, {HEADS}, {HEAD_DIM}]")
    return (f"{row['case']}: {what}; paged cache NHD [{row['blocks']}, {BLOCK}, {HEADS}, {HEAD_DIM}], blocks "
            f"shuffled; Qwen3 k-norm; pyrope on {row['threads']} threads; medians of {rounds} rounds")


TIMES = (FUSED, FUSED_PLAIN, MULTI, TORCH, YARD, SCATTER, APPLY_NORM, APPLY, TORCH_TABLES)


def format_run(rows, machine):
    """The machine, then per case a table of ratios and one of times, then the targets."""
    lines = []
    for line in _bench_report.machine_lines(machine):
        lines += [line, ""]
    lines += ["Ratios are medians of per-round ratios (interquartile range); 'a / b' is a's time over b's: above 1, "
              "b is faster. Times are medians per call.", ""]
    by_case = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
    for case, case_rows in by_case.items():
        lines += [_case_heading(case_rows[0], case_rows[0]["rounds"]), ""]
        if case_rows[0]["kind"] == "prefill":
            lines += ["| dtype | multi-pass / fused | torch eager / fused | yardstick / fused | numpy scatter / fused "
                      "| apply + norm / apply | fused / fused, no norm |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            for row in case_rows:
                lines.append(f"| {row['dtype']} | {_r(ratio(row, MULTI, FUSED), True)} | "
                             f"{_r(ratio(row, TORCH, FUSED))} | {_r(ratio(row, YARD, FUSED), True)} | "
                             f"{_r(ratio(row, SCATTER, FUSED))} | {_r(ratio(row, APPLY_NORM, APPLY), True)} | "
                             f"{_r(ratio(row, FUSED, FUSED_PLAIN))} |")
        else:
            lines += ["| dtype | fused / apply + norm | fused / apply | torch eager / fused | "
                      "torch eager / apply + norm | torch eager / apply | multi-pass / fused | yardstick / fused |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for row in case_rows:
                lines.append(f"| {row['dtype']} | {_r(ratio(row, FUSED, APPLY_NORM), True)} | "
                             f"{_r(ratio(row, FUSED, APPLY), True)} | {_r(ratio(row, TORCH, FUSED), True)} | "
                             f"{_r(ratio(row, TORCH, APPLY_NORM))} | {_r(ratio(row, TORCH, APPLY))} | "
                             f"{_r(ratio(row, MULTI, FUSED))} | {_r(ratio(row, YARD, FUSED))} |")
        lines += ["", "| dtype | " + " | ".join(TIMES) + " | GB/s fused |",
                  "|---|" + "---:|" * (len(TIMES) + 1)]
        for row in case_rows:
            t = _per_round(row)
            med = {name: float(np.median(v)) for name, v in t.items()}
            gbps = (row["bytes_read"] + row["bytes_written"]) / med[FUSED] / 1e9
            lines.append(f"| {row['dtype']} | " + " | ".join(_t(med[n]) if n in med else "n/a" for n in TIMES)
                         + f" | {gbps:.1f} |")
        lines += ["", "checked before timing (largest error / bound, per head's largest value; reference: per "
                  "pair magnitude): " + "; ".join(
                      f"{row['dtype']}: " + ", ".join(f"{name} {c['error']:.2g}/{c['bound']:.2g}"
                                                      for name, c in row["check"].items())
                      for row in case_rows), ""]
    lines += ["Targets:", ""]
    for t in targets(rows):
        if not t["count"]:
            lines.append(f"- {t['name']}: not measured in this run")
            continue
        lines.append(f"- {t['name']}: {'HOLDS' if t['holds'] else 'MISSED'} ({t['held']} of {t['count']}; "
                     f"worst {t['worst']:.2f} at {t['where']})")
    lines.append("")
    lines.append(f"load average (1, 5, 15 min) at start {_bench_report.load_text(machine.get('load_average'))}, at end "
                 f"{_bench_report.load_text(machine.get('load_average_end'))}")
    return "\n".join(lines)


def targets(rows):
    """The issue's targets, each over the rows it concerns: [{name, holds, count, held, worst, where}]."""
    def target(name, picked, num, den, threshold, at_least=True):
        values = [(ratio(r, num, den), f"{r['case']} {r['dtype']}") for r in picked]
        values = [(v[0], w) for v, w in values if v is not None]
        ok = [(v >= threshold) if at_least else (v <= threshold) for v, _ in values]
        worst = (min if at_least else max)(values, default=(None, None))
        return {"name": name, "holds": bool(values) and all(ok), "count": len(values), "held": sum(ok),
                "worst": worst[0], "where": worst[1]}
    prefill = [r for r in rows if r["kind"] == "prefill"]
    decode = [r for r in rows if r["kind"] == "decode"]
    big = [r for r in prefill if r["case"] == "prefill_8192" and r["dtype"] in ("float32", "bfloat16")]
    return [
        target("prefill 8192, float32 and bfloat16: multi-pass / fused >= 2", big, MULTI, FUSED, 2.0),
        target("prefill: yardstick / fused >= 0.8", prefill, YARD, FUSED, 0.8),
        target("prefill: apply + norm within 1.15x of apply (time ratio <= 1.15)", prefill, APPLY_NORM, APPLY, 1.15,
               False),
        target("decode 16: fused within 1.3x of apply without norm (time ratio <= 1.3)", decode, FUSED, APPLY, 1.3,
               False),
        target("decode 16: fused within 1.3x of apply with the same norm (time ratio <= 1.3)", decode, FUSED,
               APPLY_NORM, 1.3, False),
        target("decode 16: torch eager / fused >= 3", decode, TORCH, FUSED, 3.0),
        target("decode 16: torch eager / apply (without norm) >= 3", decode, TORCH, APPLY, 3.0),
        target("decode 16: torch eager / apply + norm >= 3", decode, TORCH, APPLY_NORM, 3.0),
    ]


def write_json(path, rows, machine):
    """The run: machine, method, one row per case x dtype (per-round times), targets; a row per line."""
    data = _bench_report.rounded({"format": FORMAT, "machine": machine, "method": _method.method(),
                                  "targets": targets(rows)})
    _bench_report.write_lines(path, data, [_bench_report.rounded(r) for r in rows])


def read_json(path):
    return _bench_report.read_saved(path, FORMAT)


# ---- running -----------------------------------------------------------------------

def run(cases=tuple(CASES), dtypes=tuple(DTYPES), rounds=None, progress=None):
    """Check and time every case x dtype: (rows, machine)."""
    machine = _bench_report.machine_info()
    machine["torch_threads"] = torch.get_num_threads()
    rows = []
    for case in cases:
        for dtype in dtypes:
            c = Case(case, dtype)
            c.check()
            c.measure(rounds)
            rows.append(c.row())
            del c
            if progress:
                progress(f"{case} {dtype}")
    machine["load_average_end"] = _bench_report.machine_info()["load_average"]
    return rows, machine


PROFILE_CALLS = {"prefill_2048": 10, "prefill_8192": 3, "decode_16": 500}


def profile(dtype="float32", cases=tuple(CASES), top=25):
    """Where the fused call's time goes, per case: the whole call, its C call
    alone (the same arguments, repeated inside the call), the rest (Python),
    for the fused call, apply + norm and apply, on pyrope's threads and on one;
    then cProfile of the fused call, by own time."""
    out = [f"pyrope ISA {pyrope.get_isa()}, {pyrope.get_num_threads()} threads; {dtype}", ""]
    for case in cases:
        n = PROFILE_CALLS[case]
        c = Case(case, dtype)
        out += [f"== {case} {dtype}", "", "| call | threads | whole call | C call | rest (Python) |",
                "|---|---:|---:|---:|---:|"]
        threads = pyrope.get_num_threads()
        for name in (FUSED, FUSED_PLAIN, APPLY_NORM, APPLY):
            call = c.contenders[name].call
            for t in sorted({threads, 1}, reverse=True):
                pyrope.set_num_threads(t)
                try:
                    whole, c_only, rest = _profile.split(call, n)
                finally:
                    pyrope.set_num_threads(threads)
                out.append(f"| {name} | {t} | {_t(whole)} | {_t(c_only)} | {_t(rest)} |")
        prof = cProfile.Profile()
        call = c.contenders[FUSED].call
        prof.enable()
        for _ in range(n * 5):
            call()
        prof.disable()
        for order in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(order).print_stats(top)
            out += ["", f"cProfile of {n * 5} fused calls by {order} time (inflated by the profiler):",
                    s.getvalue().strip()]
        del c
    return "\n".join(out)


def test_fused_step(benchmark, capsys):
    rows, machine = benchmark.pedantic(run, rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + format_run(rows, machine))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds per case")
    p.add_argument("--case", action="append", choices=list(CASES))
    p.add_argument("--dtype", action="append", choices=list(DTYPES))
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--json", metavar="PATH", help="also write the run as JSON (bench/runs/fused-DATE.json)")
    p.add_argument("--load", metavar="PATH", help="reprint a saved run, timing nothing")
    p.add_argument("--profile", action="store_true", help="profile the fused call instead of the race")
    args = p.parse_args(argv)
    if args.load:
        print(format_run(*read_json(args.load)))
        return
    if args.profile:
        for dtype in args.dtype or ["float32"]:
            print(profile(dtype, args.case or tuple(CASES)))
        return
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else None)
    rows, machine = run(args.case or tuple(CASES), args.dtype or tuple(DTYPES), rounds,
                        progress=lambda what: print(f"  done: {what}", file=sys.stderr, flush=True))
    if args.json:
        write_json(args.json, rows, machine)
        rows, machine = read_json(args.json)   # print what was saved, as --load would
    print(format_run(rows, machine))


if __name__ == "__main__":
    main()
