"""Quantised KV caches: the fused rotate-and-quantise write and the key shift against the passes they replace.

A Qwen3-style attention layer (8 KV heads of 128, the model's rope: base 1e6,
split half; no k-norm here) writes its keys and values into a paged cache
``[num_blocks, 16, 8, 128]`` (NHD; the blocks of a sequence shuffled through
the cache, one in five left unused) that holds them quantised, in each of
the three kinds ``Rope.cache_write`` writes:

- ``int8``: int8 values with a float32 scale per (slot, head) in
  ``k_scale``/``v_scale`` arrays ``[num_blocks, 16, 8]`` the call fills in
  (s = amax / 127, q = rint(x / s));
- ``fp8``: ``ml_dtypes.float8_e4m3fn`` values over a static scale per cache
  (0.05 for k, 0.02 for v: the largest |value| of the data lands near 220 and
  265 of e4m3's 448), clamp(x / scale, +-448) rounded to nearest even;
- ``q8_0``: ggml's blocks (``pyrope.Q8_0``, last axis 128 / 32 = 4 blocks),
  ``quantize_row_q8_0_ref``.

Cases:

- ``prefill_8192``: k and v ``[1, 8192, 8, 128]`` at positions 0.. (32 MiB
  each in float32), cache ``[640, 16, 8, 128]``;
- ``decode_16``: a decode step of 16 sequences of one token, k and v
  ``[16, 1, 8, 128]``, each sequence at its own position (1000 + 61 i) and in
  its own block of a ``[64, 16, 8, 128]`` cache;
- ``shift_4096``: ``Rope.shift_keys`` on a k cache ``[320, 16, 8, 128]`` with
  4096 occupied slots (shuffled blocks), keys written at positions 512..4607
  and moved to 0..4095 (llama.cpp's context shift after 512 tokens are
  dropped), in place, call after call.

Data (prefill and decode): float32 and bfloat16 (ml_dtypes). The shift's
keys are written from float32. Contenders, each with its own arrays (16 bytes
past a 4 KiB boundary, as numpy places large arrays) and its own Rope, all of
one case and dtype in the same rounds:

- ``fused <kind>``: ``rope.cache_write(k, v, kc, vc, slots, k_scale=...,
  v_scale=...)`` into the quantised caches (decode: ``positions=``), pyrope's
  default threads;
- ``two-pass <kind>``: pyrope without the fusion, then numpy: ``rope.cache_write(k,
  None, stage, None, ...)`` into a float32 cache whose slots are the tokens in
  order (a staging buffer: numpy then reads contiguous rows, no gather), then
  numpy quantises those rows and v (widened to float32) by the same formula
  and scatters them into the quantised caches by the slots
  (``kc.reshape(-1, H, D)[slots] = q``): int8 ``s = amax / 127``, ``rint``,
  ``clip``; fp8 ``clip(x / scale)`` then ``astype(float8_e4m3fn)``; q8_0 gguf's
  vectorised numpy quantiser (``gguf.quants.Q8_0.quantize_blocks``: amax, d,
  ``id = 1 / d``, its ``np_roundf``) written into ``Q8_0`` blocks;
- ``torch eager <kind>``: the k half of transformers' ``apply_rotary_pos_emb``
  (``k * cos + rotate_half(k) * sin``, ``modeling_qwen3.rotate_half``,
  ``unsqueeze_dim=2``; checked bit for bit against the function itself), in
  the data's dtype as the model computes it, then torch quantisation ops in
  float32 on k and v: int8 ``abs().amax``, div, ``round`` (half to even),
  ``clamp``, ``to(int8)``; fp8 div, ``clamp``, ``to(torch.float8_e4m3fn)``;
  q8_0 blocks of 32, ``amax``, d, ``id``, round half away from zero as
  ``sign(v) * floor(|v| + 0.5)`` (wrong for 0.49999997, which it rounds to 1:
  fine for timing; the check counts such values), d to float16 and the 34-byte
  blocks ``cat``; then ``cache.view(-1, H, ...)[slots] = q`` (and the scales).
  cos/sin come from ``Qwen3RotaryEmbedding`` once per case, outside the timed
  sequence (the model computes them once per forward pass). Run on 1 and on
  torch's default threads, each round keeping the faster;
- ``float16 cache_write``: ``rope.cache_write`` of the same k and v into a
  float16 cache of the same shape: the unquantised write the target is set
  against (quantised within 1.3x of it).

For ``shift_4096``, contenders for each kind:

- ``shift_keys <kind>``: ``rope.shift_keys(kc, slots, from, to, k_scale=...)``;
- ``three-pass <kind>``: numpy gathers the occupied heads (``kc.reshape(-1, H,
  ...)[slots]``, and their int8 scales), ``pyrope.dequantize`` makes them
  float32, ``pyrope.cache.rerotate`` moves them in float32, the numpy
  quantiser above requantises them and numpy scatters them (and the scales)
  back;
- ``float16 shift_keys``: ``rope.shift_keys`` on a float16 cache of the same
  keys (no quantiser: what the rotation and the slotted read and write cost).

The rules of ``bench/README.md``: every round each contender, in an order
rotating by one, idles 2 ms, is warmed for ~10 ms, then timed over a block of
about 1 ms of calls (at most 100, sized in an uncounted first round); every
ratio is formed within a round and its median over rounds reported.

Checked before timing, every writer run once into zeroed caches (the shift:
every cache filled alike, then shifted once):

- slots no slot names stay zero (caches and int8 scales);
- ``two-pass`` equals ``fused`` bit for bit (k, v, int8 scales), which
  validates both: the numpy formulas are the engines' (tests/support/
  quant_formulas.py); ``three-pass`` equals ``shift_keys`` bit for bit;
- ``float16 cache_write`` holds the float32 rotation (the staging buffer)
  rounded once to float16, and v rounded once;
- ``fused`` against ``pyrope.reference`` (the exact rotation) on 16 sampled
  heads, dequantised: within half a quantisation step (int8: s; q8_0: d,
  plus d's float16 rounding times 127; fp8: half an e4m3 unit of the value)
  plus the float32 rotation's bound; the shifted keys within two such steps of
  the exact rotation at their new positions;
- ``torch eager`` dequantised against ``fused`` dequantised, per head as a
  fraction of its largest value: within transformers' angle error (as in
  bench_fused.py) and two quantisation steps; and torch's quantised values
  against the numpy formula applied to torch's own rotation (the count of
  values that differ is printed: the q8_0 rounding above, torch's division).

    python bench/bench_quant.py [--quick] [--case NAME] [--dtype NAME] [--rounds N] [--json PATH]
    python bench/bench_quant.py --load PATH     # reprint a saved run
    python bench/bench_quant.py --profile       # where the fused calls' time goes (C against Python)

``python -m pytest bench/bench_quant.py -q`` (or ``make bench``) runs it as
one benchmark with the default rounds.
"""
import argparse
import contextlib
import cProfile
import functools
import io
import pstats
import sys
import time

import numpy as np

import ml_dtypes   # the bench extra installs it: the float8 and bfloat16 cases always run
import pyrope
from pyrope import Rope, reference
from pyrope._bench import method as _method, profile as _profile, report as _bench_report
from pyrope.benchmark import placed

try:
    import torch
    import transformers
    from transformers.models.qwen3 import modeling_qwen3
except ImportError as exc:  # never skipped quietly: the torch contender is part of the comparison
    raise ImportError(f"bench/bench_quant.py needs torch and transformers (pyproject extra 'bench'): {exc}") from exc

FORMAT = "pyrope-bench-quant/1"
HEADS, HEAD_DIM, BLOCK = 8, 128, 16
CONFIG = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
              rope_theta=1000000.0, max_position_embeddings=40960, rms_norm_eps=1e-6)
CASES = {  # name: (kind, sequences, tokens per sequence, rounds)
    "prefill_8192": ("prefill", 1, 8192, 11),
    "decode_16": ("decode", 16, 1, 41),
    "shift_4096": ("shift", 1, 4096, 21),
}
SHIFT_FROM, SHIFT_BY = 512, -512   # the shift's keys sit at 512.. and move to 0..
QUICK_ROUNDS = 5
BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
Q8_0 = pyrope.Q8_0
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16}   # the data's (prefill, decode)
KINDS = ("int8", "fp8", "q8_0")
CACHE_DTYPE = {"int8": np.dtype(np.int8), "fp8": F8, "q8_0": Q8_0}
FP8_SCALE = {"k": 0.05, "v": 0.02}   # the float8 caches' static scales
FP8_MAX = 448.0
UNIT = {"float32": 2.0**-24, "bfloat16": 2.0**-8}
TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FUSED, TWO, TORCH, F16 = "fused", "two-pass", "torch eager", "float16 cache_write"
SHIFT, THREE, F16_SHIFT = "shift_keys", "three-pass", "float16 shift_keys"


def _dname(dtype):
    return "bfloat16" if dtype == BF16 else dtype.name


def _key(name, kind=None):
    return name if kind is None else f"{name} {kind}"


def _last(kind):
    """The cache's last axis for a kind: head_dim values, or head_dim / 32 q8_0 blocks."""
    return HEAD_DIM // 32 if kind == "q8_0" else HEAD_DIM


# ---- the numpy quantisers: the engines' formulas, vectorised ---------------------------

def np_int8(x):
    """``(q int8, s float32)`` of float32 heads ``x [..., head_dim]``: s = amax / 127
    in float32, q = rint(x / s) (ties to even) clipped to +-127."""
    s = np.abs(x).max(axis=-1)
    s /= np.float32(127)
    q = x / s[..., None]
    np.rint(q, out=q)
    np.clip(q, -127, 127, out=q)
    return q.astype(np.int8), s


def np_fp8(x, scale):
    """float8_e4m3fn values of float32 ``x`` over a static ``scale``: x / scale in
    float32, clipped to +-448, rounded to nearest even by ml_dtypes' conversion."""
    v = x / np.float32(scale)
    np.clip(v, -FP8_MAX, FP8_MAX, out=v)
    return v.astype(F8)


def np_q8_0(x):
    """ggml q8_0 blocks (``Q8_0`` ``[..., head_dim // 32]``) of float32 ``x [..., head_dim]``
    by gguf's numpy quantiser (``Q8_0.quantize_blocks``, bit-exact with ggml's
    ``quantize_row_q8_0_ref``): d = amax / 127, id = 1 / d (0 for d = 0), qs =
    np_roundf(x * id) (half away from zero: floor(a) + floor(2 (a - floor(a)))),
    d to float16."""
    b = x.reshape(x.shape[:-1] + (-1, 32))
    d = np.abs(b).max(axis=-1)
    d /= np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    v = b * inv[..., None]
    a = np.abs(v)
    fl = np.floor(a)
    a -= fl
    a *= 2
    np.floor(a, out=a)
    a += fl
    a *= np.sign(v)
    out = np.empty(b.shape[:-1], Q8_0)
    out["d"] = d
    out["qs"] = a
    return out


def np_store(kind, x, cache_rows, scale_rows, slots, fp8_scale):
    """Quantise float32 heads ``x [n, H, D]`` and scatter them to ``slots`` of
    ``cache_rows [slots, H, last]`` (int8: their scales into ``scale_rows [slots, H]``)."""
    if kind == "int8":
        q, s = np_int8(x)
        cache_rows[slots] = q
        scale_rows[slots] = s
    elif kind == "fp8":
        cache_rows[slots] = np_fp8(x, fp8_scale)
    else:
        cache_rows[slots] = np_q8_0(x)


def dequantised(kind, heads, scales=None, fp8_scale=None):
    """float32 values of quantised heads (numpy, the engines' products)."""
    if kind == "int8":
        return heads.astype(np.float32) * scales[..., None]
    if kind == "fp8":
        return heads.astype(np.float32) * np.float32(fp8_scale)
    v = heads["qs"].astype(np.float32) * heads["d"].astype(np.float32)[..., None]
    return v.reshape(heads.shape[:-1] + (-1,))


def half_step(kind, heads, values, scales=None, fp8_scale=None):
    """Per value, half a quantisation step at the stored head (the largest error
    of one rounding), with the q8_0 scale's float16 rounding (127 d 2**-11)."""
    if kind == "int8":
        return np.broadcast_to(0.5 * np.asarray(scales, np.float64)[..., None], values.shape)
    if kind == "fp8":
        y = np.abs(values) / fp8_scale
        return fp8_scale * np.maximum(y * 2.0**-4, 2.0**-10)
    d = heads["d"].astype(np.float64)
    return np.repeat(d * (0.5 + 127 * 2.0**-11), 32, axis=-1)


def tolerances(data_name, max_position):
    """Per head, the largest |torch eager - fused| (both dequantised) allowed as a
    multiple of the head's largest |value|, before the quantisation steps:
    transformers' float32 angles (about position * 2**-21 radians,
    bench/bench_transformers.py), 32 units of float32 rounding, and for 16-bit
    data 8 units of the data's rounding (torch rotates in the data's dtype; the
    fused call in float32, rounded once by the quantiser)."""
    u = UNIT[data_name]
    return (max_position + 1) * 2.0**-21 + 32 * 2.0**-24 + (8 * u if u > 2.0**-24 else 0)


QUANT_TOL = {"int8": 2 * 1.01 / 127, "q8_0": 2 * (1 + 127 * 2.0**-11) * 1.01 / 127, "fp8": 2 * 2.0**-3}
"""Two quantisation steps per head, as a fraction of its largest value: a step
is amax / 127 (int8; q8_0 per block, at most that, with d's float16 rounding);
an e4m3 unit is 2**-3 of the value (fp8; the subnormal floor is added per
head)."""


# ---- one case: the data, the contenders, the check ------------------------------------

def _as_torch(a):
    """A torch tensor over ndarray ``a``'s memory (bfloat16 through its bits)."""
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _torch_bytes(cache, kind):
    """The quantised cache as torch sees it: ``[slots, H, D]`` int8 or uint8
    (float8 bits), or ``[slots, H, blocks, 34]`` uint8 (q8_0)."""
    n = cache.shape[0] * cache.shape[1]
    if kind == "int8":
        return torch.from_numpy(cache).view(n, HEADS, HEAD_DIM)
    t = torch.from_numpy(cache.view(np.uint8))
    return t.view(n, HEADS, HEAD_DIM) if kind == "fp8" else t.view(n, HEADS, HEAD_DIM // 32, 34)


def torch_store(kind, x, cache_t, scale_t, slots, fp8_scale):
    """torch quantisation ops on float32 heads ``x [n, H, D]``, scattered to ``slots``."""
    if kind == "int8":
        s = x.abs().amax(-1, keepdim=True) / 127
        q = torch.round(x / s).clamp_(-127, 127).to(torch.int8)
        cache_t[slots] = q
        scale_t[slots] = s.squeeze(-1)
    elif kind == "fp8":
        q = (x / fp8_scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        cache_t[slots] = q.view(torch.uint8)
    else:
        b = x.view(x.shape[0], HEADS, HEAD_DIM // 32, 32)
        d = b.abs().amax(-1, keepdim=True) / 127
        inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
        v = b * inv
        qs = (torch.sign(v) * torch.floor(torch.abs(v) + 0.5)).to(torch.int8)   # wrong at 0.49999997: timing only
        cache_t[slots] = torch.cat([d.to(torch.float16).view(torch.uint8), qs.view(torch.uint8)], -1)


_torch_threads = _method.torch_threads


class _Contender:
    """A call to time, the context it runs in (torch's threads), the arrays it
    writes (checked: {"k": (cache, scales or None), "v": ...}), its timed block's
    size, and (for the profile) its passes."""
    __slots__ = ("call", "context", "caches", "reps", "passes")

    def __init__(self, call, context=contextlib.nullcontext, caches=None, passes=None):
        self.call, self.context, self.caches, self.reps, self.passes = call, context, caches, 1, passes


def _zeros(shape, dtype):
    return placed(np.zeros(shape, dtype))


class Case(_method.Rounds):
    """One write case x data dtype (every kind, the float16 cache), or the shift
    case: its data, every contender, the check and the rounds."""

    def __init__(self, case, dtype_name="float32", seed=25):
        kind, batch, seq, self.default_rounds = CASES[case]
        self.case, self.kind, self.dtype_name = case, kind, dtype_name
        self.dtype = DTYPES[dtype_name]
        self.data_name = _dname(self.dtype)
        self.threads = pyrope.get_num_threads()
        rng = np.random.default_rng(seed)
        shape = (batch, seq, HEADS, HEAD_DIM)
        self.shape = shape
        self.k0 = (2.0 * rng.standard_normal(shape)).astype(self.dtype)
        self.v0 = rng.standard_normal(shape).astype(self.dtype)
        tokens = batch * seq
        self.values = (2 if kind != "shift" else 1) * tokens * HEADS * HEAD_DIM   # quantised per call
        if kind == "decode":
            self.positions = (1000 + 61 * np.arange(batch, dtype=np.int64))[:, None]   # [batch, 1]
            n_blocks = 4 * batch
            table = rng.permutation(n_blocks)[:batch]                      # a block per sequence
            self.slots = (table * BLOCK + self.positions[:, 0] % BLOCK).astype(np.int64)[:, None]
        else:
            start = SHIFT_FROM if kind == "shift" else 0
            self.positions = start + np.arange(seq, dtype=np.int64)[None]  # [1, seq]
            used = seq // BLOCK
            n_blocks = used + used // 4                                    # one in five unused
            table = rng.permutation(n_blocks)[:used]
            slots = table[np.arange(seq) // BLOCK] * BLOCK + np.arange(seq) % BLOCK
            self.slots = slots.astype(np.int64)[None]                      # [1, seq]
        self.n_blocks, self.tokens = n_blocks, tokens
        self.flat_slots = self.slots.reshape(-1)
        self.config = transformers.Qwen3Config(**CONFIG)
        self.rope = Rope.from_hf_config(self.config)
        self.contenders = {}
        self.check_info = {}
        if kind == "shift":
            self._add_shift()
        else:
            for k in KINDS:
                self._add_fused(k)
                self._add_two_pass(k)
            self._add_float16()
            self._add_torch()
        self.times = {name: [] for name in self.contenders}
        self._round = 0

    # -- arrays --

    def _cache(self, kind):
        """A zeroed cache of ``kind`` (or a float dtype) and its int8 scales (else None)."""
        dtype = CACHE_DTYPE.get(kind, kind)
        cache = _zeros((self.n_blocks, BLOCK, HEADS, _last(kind)), dtype)
        scales = _zeros((self.n_blocks, BLOCK, HEADS), np.float32) if kind == "int8" else None
        return cache, scales

    def _scale_kw(self, kind, k_scales, v_scales=None):
        if kind == "int8":
            return {"k_scale": k_scales, **({"v_scale": v_scales} if v_scales is not None else {})}
        if kind == "fp8":
            return {"k_scale": FP8_SCALE["k"], **({"v_scale": FP8_SCALE["v"]} if self.kind != "shift" else {})}
        return {}

    def _pos_kw(self):
        # prefill: offset 0 (positions 0..); decode: each sequence's own position
        return {"positions": self.positions} if self.kind == "decode" else {}

    @staticmethod
    def _rows(cache, scales):
        """``[slots, H, last]`` and ``[slots, H]`` views of a cache and its scales."""
        rows = cache.reshape(-1, HEADS, cache.shape[-1])
        return rows, None if scales is None else scales.reshape(-1, HEADS)

    # -- write contenders --

    def _add_fused(self, kind):
        rope = Rope.from_hf_config(self.config)
        k, v = placed(self.k0), placed(self.v0)
        (kc, ks), (vc, vs) = self._cache(kind), self._cache(kind)
        slots = self.slots.copy()
        kw = dict(self._pos_kw(), **self._scale_kw(kind, ks, vs))
        self.contenders[_key(FUSED, kind)] = _Contender(
            lambda: rope.cache_write(k, v, kc, vc, slots, **kw), caches={"k": (kc, ks), "v": (vc, vs)})

    def _add_two_pass(self, kind):
        rope = Rope.from_hf_config(self.config)
        k, v = placed(self.k0), placed(self.v0)
        (kc, ks), (vc, vs) = self._cache(kind), self._cache(kind)
        (kr, ksr), (vr, vsr) = self._rows(kc, ks), self._rows(vc, vs)
        t = self.tokens
        stage = _zeros((-(-t // BLOCK), BLOCK, HEADS, HEAD_DIM), np.float32)
        stage_rows = stage.reshape(-1, HEADS, HEAD_DIM)[:t]
        stage_slots = np.arange(t, dtype=np.int64).reshape(self.slots.shape)
        v_rows = v.reshape(t, HEADS, HEAD_DIM)
        slots, pos = self.flat_slots.copy(), self._pos_kw()

        def rotate():
            rope.cache_write(k, None, stage, None, stage_slots, **pos)

        def quantise():
            np_store(kind, stage_rows, kr, ksr, slots, FP8_SCALE["k"])
            np_store(kind, v_rows if v_rows.dtype == np.float32 else v_rows.astype(np.float32), vr, vsr, slots,
                     FP8_SCALE["v"])

        def call():
            rotate()
            quantise()
        self.contenders[_key(TWO, kind)] = _Contender(call, caches={"k": (kc, ks), "v": (vc, vs)},
                                                      passes={"pyrope cache_write into float32": rotate,
                                                              "numpy quantise + scatter": quantise})
        self._stage = stage_rows

    def _add_float16(self):
        rope = Rope.from_hf_config(self.config)
        k, v = placed(self.k0), placed(self.v0)
        (kc, _), (vc, _) = self._cache(np.float16), self._cache(np.float16)
        slots, pos = self.slots.copy(), self._pos_kw()
        self.contenders[F16] = _Contender(lambda: rope.cache_write(k, v, kc, vc, slots, **pos),
                                          caches={"k": (kc, None), "v": (vc, None)})

    def _add_torch(self):
        tdtype = TORCH_DTYPE[self.data_name]
        rotary = modeling_qwen3.Qwen3RotaryEmbedding(self.config)
        k, v = _as_torch(placed(self.k0)), _as_torch(placed(self.v0))
        position_ids = torch.from_numpy(self.positions.copy())
        x = torch.zeros(1, dtype=tdtype)   # the hidden states: dtype and device only
        with torch.no_grad():
            cos, sin = rotary(x, position_ids)   # [batch, seq, head_dim], once per forward pass
        rotate_half = modeling_qwen3.rotate_half
        slots = torch.from_numpy(self.flat_slots.copy())
        self._torch_apply = (k, cos, sin)
        for kind in KINDS:
            for n in sorted({1, torch.get_num_threads()}):
                (kc, ks), (vc, vs) = self._cache(kind), self._cache(kind)
                kct, vct = _torch_bytes(kc, kind), _torch_bytes(vc, kind)
                kst = None if ks is None else torch.from_numpy(ks).view(-1, HEADS)
                vst = None if vs is None else torch.from_numpy(vs).view(-1, HEADS)

                def call(kind=kind, kct=kct, vct=vct, kst=kst, vst=vst):
                    with torch.no_grad():
                        c, s = cos.unsqueeze(2), sin.unsqueeze(2)      # apply_rotary_pos_emb, unsqueeze_dim=2
                        ke = (k * c) + (rotate_half(k) * s)             # ... its k half
                        torch_store(kind, ke.flatten(0, 1).float(), kct, kst, slots, FP8_SCALE["k"])
                        torch_store(kind, v.flatten(0, 1).float(), vct, vst, slots, FP8_SCALE["v"])
                self.contenders[(_key(TORCH, kind), n)] = _Contender(
                    call, functools.partial(_torch_threads, n), caches={"k": (kc, ks), "v": (vc, vs)})

    # -- shift contenders --

    def _filled(self, kind):
        """A cache of ``kind`` holding k0 written at the case's positions (and its scales)."""
        cache, scales = self._cache(kind)
        Rope.from_hf_config(self.config).cache_write(self.k0, None, cache, None, self.slots,
                                                     positions=self.positions, **self._scale_kw(kind, scales))
        return cache, scales

    def _add_shift(self):
        self.to_positions = self.positions + SHIFT_BY
        self.filled = {kind: self._filled(kind) for kind in KINDS + (np.float16,)}
        src, dst = self.positions.reshape(-1).copy(), self.to_positions.reshape(-1).copy()
        self._refill = []   # (cache, scales, kind): filled again before the check
        for kind in KINDS:
            rope = Rope.from_hf_config(self.config)
            kc, ks = (placed(a) if a is not None else None for a in self.filled[kind])
            slots = self.flat_slots.copy()
            kw = self._scale_kw(kind, ks)
            self.contenders[_key(SHIFT, kind)] = _Contender(lambda rope=rope, kc=kc, slots=slots, kw=kw:
                                                            rope.shift_keys(kc, slots, src, dst, **kw),
                                                            caches={"k": (kc, ks)})
            self._refill.append((kc, ks, kind))
            rope = Rope.from_hf_config(self.config)
            kc, ks = (placed(a) if a is not None else None for a in self.filled[kind])
            self._refill.append((kc, ks, kind))
            kr, ksr = self._rows(kc, ks)
            src1, dst1 = src[None].copy(), dst[None].copy()
            passes = self._three_passes(kind, rope, kr, ksr, self.flat_slots.copy(), src1, dst1)

            def call(passes=passes):
                for p in passes.values():
                    p()
            self.contenders[_key(THREE, kind)] = _Contender(call, caches={"k": (kc, ks)}, passes=passes)
        rope = Rope.from_hf_config(self.config)
        kc = placed(self.filled[np.float16][0])
        self._refill.append((kc, None, np.float16))
        slots = self.flat_slots.copy()
        self.contenders[F16_SHIFT] = _Contender(lambda: rope.shift_keys(kc, slots, src, dst),
                                                caches={"k": (kc, None)})

    @staticmethod
    def _three_passes(kind, rope, kr, ksr, slots, src, dst):
        """The three-pass shift as its passes, sharing the float32 keys between them."""
        held = {}

        def dequantise():
            heads = kr[slots]
            if kind == "int8":
                held["x"] = pyrope.dequantize(heads, scale=ksr[slots])
            elif kind == "fp8":
                held["x"] = pyrope.dequantize(heads, scale=FP8_SCALE["k"])
            else:
                held["x"] = pyrope.dequantize(heads)

        def rerotate():
            pyrope.cache.rerotate(rope, held["x"][None], src, dst)

        def requantise():
            np_store(kind, held["x"], kr, ksr, slots, FP8_SCALE["k"])
        return {"numpy gather + pyrope.dequantize": dequantise, "pyrope.cache.rerotate (float32)": rerotate,
                "numpy requantise + scatter": requantise}

    # -- the check --

    def _gather(self, a):
        return a.reshape((-1, HEADS) + a.shape[3:])[self.flat_slots]

    def check(self):
        """Run every writer once into zeroed (shift: alike filled) caches and compare
        (the module docstring says what)."""
        for con in self.contenders.values():
            for cache, scales in con.caches.values():
                cache.view(np.uint8)[...] = 0
                if scales is not None:
                    scales[...] = 0
        for cache, scales, kind in getattr(self, "_refill", ()):
            cache[...] = self.filled[kind][0]
            if scales is not None:
                scales[...] = self.filled[kind][1]
        for con in self.contenders.values():
            with con.context():
                con.call()
        unused = np.setdiff1d(np.arange(self.n_blocks * BLOCK), self.flat_slots)
        for name, con in self.contenders.items():
            for which, (cache, scales) in con.caches.items():
                rows = cache.reshape(-1, HEADS, cache.shape[-1])
                label = name if isinstance(name, str) else name[0]
                assert not rows[unused].view(np.uint8).any(), f"{label}: {which} in a slot the mapping does not name"
                if scales is not None:
                    assert not scales.reshape(-1, HEADS)[unused].view(np.uint8).any(), \
                        f"{label}: a {which} scale in a slot the mapping does not name"
        if self.kind == "shift":
            self._check_shift()
        else:
            self._check_write()

    def _bits_equal(self, a, b, what):
        (ca, sa), (cb, sb) = a, b
        assert np.array_equal(ca.view(np.uint8), cb.view(np.uint8)), f"{what}: the caches differ"
        if sa is not None:
            assert np.array_equal(sa.view(np.uint32), sb.view(np.uint32)), f"{what}: the int8 scales differ"

    def _check_write(self):
        for kind in KINDS:
            fused, two = self.contenders[_key(FUSED, kind)].caches, self.contenders[_key(TWO, kind)].caches
            for which in ("k", "v"):
                self._bits_equal(fused[which], two[which], f"two-pass {kind} against fused, {which}")
        k16, v16 = (self._gather(c) for c, _ in self.contenders[F16].caches.values())
        assert np.array_equal(k16.view(np.uint16), self._stage.astype(np.float16).view(np.uint16)), \
            "float16 cache_write: k is not the float32 rotation rounded once"
        v_want = self.v0.reshape(self.tokens, HEADS, HEAD_DIM).astype(np.float32).astype(np.float16)
        assert np.array_equal(v16.view(np.uint16), v_want.view(np.uint16)), "float16 cache_write: v differs"
        self._check_reference()
        self._check_torch()

    def _fused_values(self, kind, caches, which="k"):
        """(stored heads, float32 values, scales) of ``which`` at the slots, in token order."""
        cache, scales = caches[which]
        heads = self._gather(cache)
        s = None if scales is None else self._gather(scales)
        return heads, dequantised(kind, heads, s, FP8_SCALE[which]), s

    def _exact(self, t, h, position, k0=None):
        """The exact rotation (float64) of token t's head h of k0 at ``position``."""
        b, s = divmod(t, self.shape[1])
        x = (self.k0 if k0 is None else k0)[b, s, h].astype(np.float64)
        inv_freq = [float(f) for f in self.rope.inv_freq]
        return np.array(reference.rotate_with_inv_freq([float(u) for u in x], int(position), inv_freq,
                                                       layout=self.rope.layout)), x

    def _check_reference(self):
        """Sampled heads of each fused k cache, dequantised, against the exact
        rotation: within half a step (:func:`half_step`) plus the float32
        rotation's bound (bench_fused.py's: 2 (2**-24 + 8 2**-24) of the pair's
        magnitude)."""
        rng = np.random.default_rng(0)
        samples = [(int(rng.integers(0, self.tokens)), int(rng.integers(0, HEADS))) for _ in range(16)]
        pos = self.positions.reshape(-1)   # [tokens]: a position per token in both write cases
        half = HEAD_DIM // 2
        for kind in KINDS:
            heads, values, scales = self._fused_values(kind, self.contenders[_key(FUSED, kind)].caches)
            worst = 0.0
            for t, h in samples:
                want, x = self._exact(t, h, pos[t])
                pair = np.abs(x[:half]) + np.abs(x[half:])
                rot = 2 * (2.0**-24 + 8 * 2.0**-24) * np.concatenate([pair, pair])
                step = half_step(kind, heads[t, h], want, None if scales is None else scales[t, h], FP8_SCALE["k"])
                bound = (step + rot) * (1 + 2.0**-10) + 2.0**-60
                err = np.abs(values[t, h].astype(np.float64) - want)
                assert np.all(err <= bound), f"fused {kind} is wrong at token {t} head {h}: {err.max():.3g}"
                worst = max(worst, float((err / bound).max()))
            self.check_info[f"reference {kind}"] = {"error": worst, "bound": 1.0}

    def _check_torch(self):
        """torch eager against fused (dequantised, per head), and torch's quantised
        values against the numpy formula on torch's own rotation."""
        k, cos, sin = self._torch_apply
        with torch.no_grad():
            got = (k * cos.unsqueeze(2)) + (modeling_qwen3.rotate_half(k) * sin.unsqueeze(2))
            _, want = modeling_qwen3.apply_rotary_pos_emb(k, k, cos, sin, unsqueeze_dim=2)
            assert torch.equal(got, want), "the torch contender's rotation is not apply_rotary_pos_emb's"
            ke = got.flatten(0, 1).float().numpy()
        rot_tol = tolerances(self.data_name, int(self.positions.max()))
        v32 = self.v0.reshape(self.tokens, HEADS, HEAD_DIM).astype(np.float32)
        for kind in KINDS:
            fused = self.contenders[_key(FUSED, kind)].caches
            torch_caches = self.contenders[(_key(TORCH, kind), 1)].caches
            worst, differ, total = 0.0, 0, 0
            for which, src in (("k", ke), ("v", v32)):
                _, fv, _ = self._fused_values(kind, fused, which)
                heads, tv, ts = self._fused_values(kind, torch_caches, which)
                amax = np.abs(fv).max(axis=-1)
                floor = 2 * 2.0**-10 * FP8_SCALE[which] / amax if kind == "fp8" else 0.0
                tol = (rot_tol if which == "k" else 0.0) + QUANT_TOL[kind] + floor
                err = np.abs(tv - fv).max(axis=-1) / amax
                assert np.all(err <= tol), (f"torch eager {kind} {which} differs from fused by {float(err.max()):.3g} "
                                            f"of a head's largest value (bound {float(np.min(tol)):.3g})")
                worst = max(worst, float((err / tol).max()))
                # torch's quantisation ops against the formula on the same (torch-rotated) values
                rows = np.zeros((self.tokens, HEADS, _last(kind)), CACHE_DTYPE[kind])
                srows = np.zeros((self.tokens, HEADS), np.float32) if kind == "int8" else None
                np_store(kind, np.ascontiguousarray(src), rows, srows, np.arange(self.tokens), FP8_SCALE[which])
                if kind == "q8_0":
                    differ += int((rows["qs"] != heads["qs"]).sum() + (rows["d"].view(np.uint16) !=
                                                                       heads["d"].view(np.uint16)).sum())
                    total += rows["qs"].size + rows["d"].size
                else:
                    differ += int((rows.view(np.uint8) != heads.view(np.uint8)).sum())
                    total += rows.size
                    if srows is not None:
                        differ += int((srows.view(np.uint32) != ts.view(np.uint32)).sum())
                        total += srows.size
            self.check_info[f"torch eager {kind}"] = {"error": worst, "bound": 1.0,
                                                      "formula_differences": differ, "values": total}

    def _check_shift(self):
        for kind in KINDS:
            self._bits_equal(self.contenders[_key(SHIFT, kind)].caches["k"],
                             self.contenders[_key(THREE, kind)].caches["k"], f"three-pass {kind} against shift_keys")
        # the moved keys against the exact rotation at their new positions: two roundings, each half a step
        rng = np.random.default_rng(0)
        src, dst = self.positions.reshape(-1), self.to_positions.reshape(-1)
        for kind in KINDS:
            heads, values, scales = self._fused_values(kind, self.contenders[_key(SHIFT, kind)].caches)
            heads0, _, scales0 = self._fused_values(kind, {"k": self.filled[kind]})
            worst = 0.0
            for _ in range(16):
                t, h = int(rng.integers(0, self.tokens)), int(rng.integers(0, HEADS))
                want, _ = self._exact(t, h, dst[t])
                was, _ = self._exact(t, h, src[t])
                amax = float(np.abs(want).max())
                # the first rounding's error, turned with its pair: up to sqrt(2) of the pair's larger one
                first = half_step(kind, heads0[t, h], was, None if scales0 is None else scales0[t, h], FP8_SCALE["k"])
                pair = np.maximum(first[:HEAD_DIM // 2], first[HEAD_DIM // 2:])
                first = np.sqrt(2) * np.concatenate([pair, pair])
                second = half_step(kind, heads[t, h], want, None if scales is None else scales[t, h], FP8_SCALE["k"])
                bound = (first + second) * (1 + 2.0**-10) + 2.0**-18 * amax
                err = np.abs(values[t, h].astype(np.float64) - want)
                assert np.all(err <= bound), f"shift_keys {kind} is wrong at token {t} head {h}: {err.max():.3g}"
                worst = max(worst, float((err / bound).max()))
            self.check_info[f"reference {kind}"] = {"error": worst, "bound": 1.0}
        k16 = self._gather(self.contenders[F16_SHIFT].caches["k"][0]).astype(np.float64)
        worst = 0.0
        for _ in range(16):
            t, h = int(rng.integers(0, self.tokens)), int(rng.integers(0, HEADS))
            want, _ = self._exact(t, h, dst[t])
            err = float(np.abs(k16[t, h] - want).max() / np.abs(want).max())
            assert err <= 4 * 2.0**-11, f"float16 shift_keys is wrong at token {t} head {h}: {err:.3g}"
            worst = max(worst, err / (4 * 2.0**-11))
        self.check_info["reference float16"] = {"error": worst, "bound": 1.0}

    # -- the rounds: _method.Rounds --

    def row(self):
        """What a run keeps of this case: the per-round times of each contender
        (threaded ones: per thread count), its block size and the check."""
        times = {}
        for name, t in self.times.items():
            times[name if isinstance(name, str) else f"{name[0]} @{name[1]}"] = t
        values = self.values
        return {"case": self.case, "kind": self.kind, "dtype": self.dtype_name, "data": self.data_name,
                "shape": "x".join(map(str, self.shape)), "tokens": self.tokens, "blocks": self.n_blocks,
                "values": values, "bytes_read": (values * self.dtype.itemsize if self.kind != "shift" else 0),
                "threads": self.threads, "torch_threads": torch.get_num_threads(),
                "rounds": min(len(t) for t in times.values()),
                "reps": {(n if isinstance(n, str) else f"{n[0]} @{n[1]}"): c.reps for n, c in self.contenders.items()},
                "check": self.check_info, "times": times}


# ---- the report --------------------------------------------------------------------

_per_round = _method.per_round
ratio = _method.round_ratio
_t = _bench_report.short_time
_r = _bench_report.ratio_text


def cache_bytes(kind, values):
    """Bytes a quantised (or float16) store of ``values`` writes, scales included."""
    if kind == "int8":
        return values + values // HEAD_DIM * 4
    if kind == "fp8":
        return values
    if kind == "q8_0":
        return values // 32 * 34
    return values * 2


def _case_heading(row, rounds):
    b, s = row["shape"].split("x")[:2]
    cache = f"paged cache NHD [{row['blocks']}, {BLOCK}, {HEADS}, {HEAD_DIM}], blocks shuffled"
    if row["kind"] == "shift":
        return (f"{row['case']}: shift_keys of {s} occupied slots (keys written from float32 at {SHIFT_FROM}.., "
                f"moved by {SHIFT_BY}); {cache}; pyrope on {row['threads']} threads; medians of {rounds} rounds")
    what = (f"prefill, k and v [{b}, {s}, {HEADS}, {HEAD_DIM}]" if row["kind"] == "prefill"
            else f"decode, {b} sequences x {s} token, k and v [{b}, {s}, {HEADS}, {HEAD_DIM}]")
    return (f"{row['case']}: {what}; {cache}; fp8 scales k {FP8_SCALE['k']}, v {FP8_SCALE['v']}; pyrope on "
            f"{row['threads']} threads; medians of {rounds} rounds")


def format_run(rows, machine):
    """The machine, then per case a table of ratios and times, then the targets."""
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
        if case_rows[0]["kind"] == "shift":
            row = case_rows[0]
            lines += ["| cache | three-pass / shift_keys | shift_keys / float16 shift_keys | shift_keys | three-pass "
                      "| float16 shift_keys | ns per value, shift_keys |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            med = {name: float(np.median(v)) for name, v in _per_round(row).items()}
            for kind in KINDS:
                s, th = _key(SHIFT, kind), _key(THREE, kind)
                lines.append(f"| {kind} | {_r(ratio(row, th, s), True)} | {_r(ratio(row, s, F16_SHIFT), True)} | "
                             f"{_t(med[s])} | {_t(med[th])} | {_t(med[F16_SHIFT])} | "
                             f"{med[s] / row['values'] * 1e9:.2f} |")
        else:
            lines += ["| data | cache | two-pass / fused | fused / float16 cache_write | torch eager / fused | "
                      "two-pass / float16 cache_write | fused | two-pass | torch eager | float16 cache_write | "
                      "GB/s fused |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for row in case_rows:
                med = {name: float(np.median(v)) for name, v in _per_round(row).items()}
                for kind in KINDS:
                    f, tw, to = _key(FUSED, kind), _key(TWO, kind), _key(TORCH, kind)
                    gbps = (row["bytes_read"] + cache_bytes(kind, row["values"])) / med[f] / 1e9
                    lines.append(f"| {row['dtype']} | {kind} | {_r(ratio(row, tw, f), True)} | "
                                 f"{_r(ratio(row, f, F16), True)} | {_r(ratio(row, to, f))} | "
                                 f"{_r(ratio(row, tw, F16))} | {_t(med[f])} | {_t(med[tw])} | {_t(med[to])} | "
                                 f"{_t(med[F16])} | {gbps:.1f} |")
        lines += ["", "checked before timing (largest error as a fraction of its bound; torch eager: values "
                  "differing from the numpy formula on its own rotation): " + "; ".join(
                      f"{row['dtype']}: " + ", ".join(
                          f"{name} {c['error']:.2g}" + (f" ({c['formula_differences']} of {c['values']})"
                                                        if "formula_differences" in c else "")
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
    """The issue's targets, each over the rows and kinds it concerns: [{name, holds, count, held, worst, where}]."""
    def target(name, picked, num, den, threshold, at_least=True):
        values = [(ratio(r, num(kind), den(kind)), f"{r['case']} {r['dtype']} {kind}")
                  for r in picked for kind in KINDS]
        values = [(v[0], w) for v, w in values if v is not None]
        ok = [(v >= threshold) if at_least else (v <= threshold) for v, _ in values]
        worst = (min if at_least else max)(values, default=(None, None))
        return {"name": name, "holds": bool(values) and all(ok), "count": len(values), "held": sum(ok),
                "worst": worst[0], "where": worst[1]}
    prefill = [r for r in rows if r["kind"] == "prefill"]
    shift = [r for r in rows if r["kind"] == "shift"]
    return [
        target("prefill 8192: two-pass / fused >= 2", prefill, lambda k: _key(TWO, k), lambda k: _key(FUSED, k), 2.0),
        target("prefill 8192: fused within 1.3x of float16 cache_write (time ratio <= 1.3)", prefill,
               lambda k: _key(FUSED, k), lambda k: F16, 1.3, False),
        target("shift 4096: three-pass / shift_keys >= 3", shift, lambda k: _key(THREE, k), lambda k: _key(SHIFT, k),
               3.0),
    ]


def write_json(path, rows, machine):
    """The run: machine, method, one row per case x dtype (per-round times), targets; a row per line."""
    data = _bench_report.rounded({"format": FORMAT, "machine": machine, "method": _method.method(),
                                  "targets": targets(rows)})
    _bench_report.write_lines(path, data, [_bench_report.rounded(r) for r in rows])


def read_json(path):
    return _bench_report.read_saved(path, FORMAT)


# ---- running -----------------------------------------------------------------------

def _jobs(cases, dtypes):
    """(case, dtype) pairs: every data dtype for the writes, float32 keys for the shift."""
    return [(case, dtype) for case in cases
            for dtype in (dtypes if CASES[case][0] != "shift" else ("float32",))]


def run(cases=tuple(CASES), dtypes=tuple(DTYPES), rounds=None, progress=None):
    """Check and time every case x dtype: (rows, machine)."""
    machine = _bench_report.machine_info()
    machine["torch_threads"] = torch.get_num_threads()
    rows = []
    for case, dtype in _jobs(cases, dtypes):
        c = Case(case, dtype)
        c.check()
        c.measure(rounds)
        rows.append(c.row())
        del c
        if progress:
            progress(f"{case} {dtype}")
    machine["load_average_end"] = _bench_report.machine_info()["load_average"]
    return rows, machine


def _pass_times(passes, n, repeats=5):
    """{pass: median seconds per call} of each pass of a multi-pass contender, the
    passes run in their order (each reads what the one before it left), each timed."""
    seq = list(passes.items())
    for _ in range(max(1, n // 3)):
        for _, p in seq:
            p()
    got = {name: [] for name in passes}
    for _ in range(repeats):
        acc = dict.fromkeys(passes, 0.0)
        for _ in range(n):
            for name, p in seq:
                t0 = time.perf_counter()
                p()
                acc[name] += time.perf_counter() - t0
        for name in passes:
            got[name].append(acc[name] / n)
    return {name: float(np.median(v)) for name, v in got.items()}


PROFILE_CALLS = {"prefill_8192": 4, "decode_16": 500, "shift_4096": 10}


def profile(dtype="float32", cases=tuple(CASES), top=20):
    """Where the time goes, per case: each fused call (and the float16 one) whole,
    its C call alone (the same arguments, repeated inside the call) and the rest
    (Python), on pyrope's threads and on one; the C time the quantiser adds over
    the float16 store, per value; each pass of the unfused sequence; then cProfile
    of the int8 call, by own time."""
    out = [f"pyrope ISA {pyrope.get_isa()}, {pyrope.get_num_threads()} threads; data {dtype}", ""]
    for case in cases:
        n = PROFILE_CALLS[case]
        c = Case(case, dtype if CASES[case][0] != "shift" else "float32")
        shift = c.kind == "shift"
        values = c.values
        fused, multi, plain = (SHIFT, THREE, F16_SHIFT) if shift else (FUSED, TWO, F16)
        out += [f"== {case} {c.dtype_name}", "",
                "| call | threads | whole call | C call | rest (Python) | C ns per value "
                "| C over float16, ns per value |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        threads = pyrope.get_num_threads()
        c_plain = {}
        for name in [plain] + [_key(fused, k) for k in KINDS]:
            call = c.contenders[name].call
            for t in sorted({threads, 1}, reverse=True):
                pyrope.set_num_threads(t)
                try:
                    whole, c_only, rest = _profile.split(call, n)
                finally:
                    pyrope.set_num_threads(threads)
                if name == plain:
                    c_plain[t] = c_only
                extra = "" if name == plain else f"{(c_only - c_plain[t]) / values * 1e9:.2f}"
                out.append(f"| {name} | {t} | {_t(whole)} | {_t(c_only)} | {_t(rest)} | "
                           f"{c_only / values * 1e9:.2f} | {extra} |")
        out += ["", f"| {multi}: pass | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
        per_kind = {k: _pass_times(c.contenders[_key(multi, k)].passes, n) for k in KINDS}
        for p in per_kind[KINDS[0]]:
            out.append(f"| {p} | " + " | ".join(_t(per_kind[k][p]) for k in KINDS) + " |")
        prof = cProfile.Profile()
        call = c.contenders[_key(fused, "int8")].call
        prof.enable()
        for _ in range(n * 5):
            call()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
        out += ["", f"cProfile of {n * 5} {fused} int8 calls by own time (inflated by the profiler):",
                s.getvalue().strip(), ""]
        del c
    return "\n".join(out)


def test_quant_cache(benchmark, capsys):
    rows, machine = benchmark.pedantic(run, rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + format_run(rows, machine))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds per case")
    p.add_argument("--case", action="append", choices=list(CASES))
    p.add_argument("--dtype", action="append", choices=list(DTYPES))
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--json", metavar="PATH", help="also write the run as JSON (bench/runs/quant-DATE.json)")
    p.add_argument("--load", metavar="PATH", help="reprint a saved run, timing nothing")
    p.add_argument("--profile", action="store_true", help="profile the fused calls instead of the race")
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
