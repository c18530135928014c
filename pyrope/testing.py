"""A consistency harness a backend (or a test) can run: prefill == decode == chunked.

``Harness(rope)`` builds a tiny causal transformer in numpy (a few layers,
grouped-query attention, float64 or float32 attention) whose queries and
keys are rotated by ``rope`` (or by a backend's ``rotate(x, positions)``).
It runs one token sequence several ways and compares them with the full
causal prefill, layer by layer:

- ``prefill``: the reference, all tokens in one pass, no cache;
- ``decode``: one token at a time against a cache of rotated keys;
- ``chunked``: chunks whose positions continue across chunk boundaries;
- ``paged``: a cache in shuffled physical blocks (slots are not positions);
- ``padded_batch``: a left-padded batch, per-row positions, one rotation call;
- ``packed``: sequences end to end with ``cu_seqlens``, one rotation call;
- ``run(..., cache=...)`` continuing a cached prefix (``PrefixStore``
  refuses a prefix whose rope or model fingerprint differs).

``compare`` returns a :class:`Comparison`: equal within the stated tolerance,
or the first diverging layer and token and, from an audit of the cached
layer-0 keys against their unrotated values, the reason: keys rotated at
the wrong position (chunks restarting at 0, slots used as positions), keys
rotated twice, or a frequency change (phase error ``n * (w_old - w_new)``).

Tolerance: a relative error ``max|run - ref| / max(1, max|ref|)`` of 1e-9
for float64 attention, 1e-5 for float32 (correct runs measure below 1e-15
and 1e-6). Rotation always goes through the
float32 kernel with identical inputs in every mode, so any correct mode
differs from prefill only by summation order.
"""
import copy
import hashlib
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import ValueError
from .positions import varlen_positions

__all__ = ["Harness", "TinyModel", "KVCache", "PagedKVCache", "PrefixStore", "FingerprintMismatch",
           "Trace", "Comparison", "KeyAudit", "audit_keys", "fingerprint_of"]

TOLERANCE = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5}


def fingerprint_of(rope):
    """The rope's contract fingerprint (``rope.fingerprint``): equal exactly
    when two ropes compute the same position function."""
    return rope.fingerprint


class FingerprintMismatch(ValueError):
    """A cached prefix was made under another rope or model; reusing it would be silently wrong."""


# ---- the model -------------------------------------------------------------------

def _rms(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


class TinyModel:
    """Seeded random weights of a tiny causal transformer with GQA attention.

    Each layer: ``h += Wo attn(RMSNorm(h))``, ``h += W2 tanh(W1 RMSNorm(h))``.
    Queries and keys are rotated by the caller; values never are.
    """

    def __init__(self, head_dim, *, n_layers=2, n_heads=4, n_kv_heads=2, vocab=32, dtype=np.float64, seed=0):
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads must be a multiple of n_kv_heads, got {n_heads} and {n_kv_heads}")
        self.dtype = np.dtype(dtype)
        if self.dtype not in TOLERANCE:
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype}")
        self.head_dim, self.n_layers, self.n_heads, self.n_kv_heads = head_dim, n_layers, n_heads, n_kv_heads
        self.vocab = vocab
        d = self.d_model = n_heads * head_dim
        rng = np.random.default_rng(seed)

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(self.dtype)

        self.embed = (rng.standard_normal((vocab, d))).astype(self.dtype)
        self.layers = [dict(wq=w(n_heads * head_dim, d), wk=w(n_kv_heads * head_dim, d),
                            wv=w(n_kv_heads * head_dim, d), wo=w(d, n_heads * head_dim),
                            w1=w(2 * d, d), w2=w(d, 2 * d)) for _ in range(n_layers)]
        self.unembed = w(vocab, d)

    @property
    def fingerprint(self):
        """Hash of every weight: a prefix cache belongs to one model."""
        h = hashlib.sha256()
        for a in [self.embed, self.unembed] + [m for layer in self.layers for m in layer.values()]:
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]

    def qkv(self, layer, h):
        """Unrotated q ``[t, H, D]``, k and v ``[t, Hk, D]`` of layer ``layer`` for hidden ``h [t, d]``."""
        p, x, D = self.layers[layer], _rms(h), self.head_dim
        return ((x @ p["wq"].T).reshape(-1, self.n_heads, D), (x @ p["wk"].T).reshape(-1, self.n_kv_heads, D),
                (x @ p["wv"].T).reshape(-1, self.n_kv_heads, D))

    def finish_layer(self, layer, h, q_rot, keys, values, allowed):
        """Attention of ``q_rot [t, H, D]`` over ``keys/values [n, Hk, D]`` under the
        boolean mask ``allowed [t, n]``, then the MLP; returns the new hidden ``[t, d]``."""
        p = self.layers[layer]
        group = self.n_heads // self.n_kv_heads
        k = np.repeat(keys, group, axis=1)
        v = np.repeat(values, group, axis=1)
        scores = np.einsum("thd,nhd->htn", q_rot, k) / np.sqrt(self.head_dim).astype(self.dtype)
        scores = np.where(allowed[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        attn = np.einsum("htn,nhd->thd", weights, v).reshape(h.shape[0], -1)
        h = h + attn @ p["wo"].T
        return h + np.tanh(_rms(h) @ p["w1"].T) @ p["w2"].T

    def logits(self, h):
        """Output logits ``[t, vocab]``."""
        return _rms(h) @ self.unembed.T


# ---- caches ---------------------------------------------------------------------

class KVCache:
    """Rotated keys and values of one sequence, per layer, in logical order.

    Records the rope fingerprint the keys were rotated under and the model's.
    ``reserve(n)`` returns the slots of the next ``n`` tokens; ``write`` and
    ``read`` move keys by slot.
    """

    def __init__(self, model, rope_fingerprint):
        self.model_fingerprint = model.fingerprint
        self.rope_fingerprint = rope_fingerprint
        shape = (model.n_layers, 0, model.n_kv_heads, model.head_dim)
        self.k, self.v = np.zeros(shape, model.dtype), np.zeros(shape, model.dtype)
        self.tokens = np.zeros(0, dtype=np.int64)

    @property
    def length(self):
        """Tokens held."""
        return self.tokens.size

    def reserve(self, tokens):
        """Room for ``tokens``; returns their slots (here: logical indices)."""
        n0 = self.length
        grow = np.zeros((self.k.shape[0], len(tokens)) + self.k.shape[2:], self.k.dtype)
        self.k, self.v = np.concatenate([self.k, grow], 1), np.concatenate([self.v, grow], 1)
        self.tokens = np.concatenate([self.tokens, np.asarray(tokens, np.int64)])
        return np.arange(n0, n0 + len(tokens))

    def write(self, layer, slots, k, v):
        """Store rotated keys ``k`` and values ``v`` at ``slots``."""
        self.k[layer, slots], self.v[layer, slots] = k, v

    def read(self, layer):
        """(keys, values) ``[length, Hk, D]`` in logical order."""
        return self.k[layer], self.v[layer]

    def copy(self):
        """An independent copy (what a prefix store hands out)."""
        return copy.deepcopy(self)


class PagedKVCache(KVCache):
    """A paged cache: fixed-size physical blocks taken from a shuffled free list.

    Physical slot ``block * block_size + offset`` has nothing to do with the
    token's position; a block table maps logical blocks to physical ones.
    """

    def __init__(self, model, rope_fingerprint, *, block_size=4, n_blocks=64, seed=0):
        super().__init__(model, rope_fingerprint)
        self.block_size = block_size
        shape = (model.n_layers, n_blocks * block_size, model.n_kv_heads, model.head_dim)
        self.k, self.v = np.zeros(shape, model.dtype), np.zeros(shape, model.dtype)
        self.free = list(np.random.default_rng(seed).permutation(n_blocks))
        self.block_table = []

    def _slot(self, i):
        return self.block_table[i // self.block_size] * self.block_size + i % self.block_size

    def reserve(self, tokens):
        n0, n = self.length, len(tokens)
        while len(self.block_table) * self.block_size < n0 + n:
            if not self.free:
                raise ValueError("PagedKVCache is out of blocks; pass a larger n_blocks")
            self.block_table.append(int(self.free.pop()))
        self.tokens = np.concatenate([self.tokens, np.asarray(tokens, np.int64)])
        return np.array([self._slot(i) for i in range(n0, n0 + n)], dtype=np.int64)

    def read(self, layer):
        slots = np.array([self._slot(i) for i in range(self.length)], dtype=np.int64)
        return self.k[layer, slots], self.v[layer, slots]


class PrefixStore:
    """Cached prefixes keyed by token ids, reusable only under the same rope and model."""

    def __init__(self):
        self._entries = {}

    def save(self, cache):
        """Remember a copy of ``cache`` under its token ids."""
        self._entries[tuple(cache.tokens.tolist())] = cache.copy()

    def load(self, tokens, *, rope_fingerprint, model_fingerprint, check=True):
        """A copy of the cache saved for exactly ``tokens``, or None.

        Raises :class:`FingerprintMismatch` when it was made under another
        rope or model (``check=False`` skips this: only for demonstrating
        the damage).
        """
        entry = self._entries.get(tuple(int(t) for t in tokens))
        if entry is None:
            return None
        if check and entry.rope_fingerprint != rope_fingerprint:
            raise FingerprintMismatch(
                f"prefix cache of {len(tokens)} tokens was rotated under rope {entry.rope_fingerprint}, the "
                f"request uses rope {rope_fingerprint}: token ids match but cached keys do not; re-prefill")
        if check and entry.model_fingerprint != model_fingerprint:
            raise FingerprintMismatch(f"prefix cache belongs to model {entry.model_fingerprint}, the request "
                                      f"uses model {model_fingerprint}")
        return entry.copy()


# ---- traces, audits, comparisons --------------------------------------------------

@dataclass
class Trace:
    """What a run produced for tokens ``first..first+n-1`` of a sequence."""

    mode: str
    tokens: np.ndarray          # the whole sequence's token ids (prefix included)
    first: int                  # sequence index of the first token this run computed
    logits: np.ndarray          # [n, vocab]
    hidden: np.ndarray          # [n_layers, n, d_model], each layer's output
    cached_keys: Optional[np.ndarray] = None  # [seq_len, Hk, D] layer-0 keys as cached (logical order)
    start: int = 0              # logical position of the sequence's first token


@dataclass
class KeyAudit:
    """Layer-0 cached keys versus their unrotated values rotated by the reference rope."""

    ok: bool
    reason: str
    bad_tokens: list = field(default_factory=list)          # sequence indices of wrong keys
    applied_positions: dict = field(default_factory=dict)   # token -> position it was rotated at
    delta_freq: Optional[np.ndarray] = None                 # fitted w_used - w_rope per pair


def _pairs(x, rope):
    """Complex pairs ``[..., rotary_dim/2]`` in the rope's layout."""
    r = rope.rotary_dim
    if rope.layout == "interleaved":
        return x[..., 0:r:2] + 1j * x[..., 1:r:2]
    return x[..., :r // 2] + 1j * x[..., r // 2:r]


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def audit_keys(rope, model, tokens, cached_keys, *, start=0, angle_tol=1e-3):
    """Which angle each cached layer-0 key carries, and why it is wrong if it is.

    Layer-0 keys depend only on the tokens, so their unrotated values are
    recomputed here; the angle of each rotation pair is measured (summed
    over kv heads) and compared with ``position * inv_freq``, the position
    being ``start + index`` in the sequence.
    """
    raw = model.qkv(0, model.embed[np.asarray(tokens)])[1].astype(np.float64)
    z = np.sum(np.conj(_pairs(raw, rope)) * _pairs(np.asarray(cached_keys, np.float64), rope), axis=1)
    phi = np.angle(z)                                             # [n, pairs]
    w = rope.inv_freq
    expected = np.arange(len(tokens)) + start
    resid = _wrap(phi - expected[:, None] * w[None, :])
    bad = [int(t) for t in np.nonzero(np.max(np.abs(resid), axis=1) > angle_tol)[0]]
    if not bad:
        return KeyAudit(True, "every cached layer-0 key carries the angle of its logical position")
    applied = {}
    span = int(2 * (start + len(tokens)) + 2)
    candidates = np.arange(-span, span + 1)
    for t in bad:
        err = np.max(np.abs(_wrap(phi[t][None, :] - candidates[:, None] * w[None, :])), axis=1)
        if err.min() <= angle_tol:
            applied[t] = int(candidates[np.argmin(err)])
    if len(applied) == len(bad):
        first = bad[0]
        if all(applied[t] == 2 * (start + t) for t in bad):
            return KeyAudit(False, f"keys rotated twice: cached key of token {first} carries position "
                                   f"{applied[first]} = 2 x {start + first}", bad, applied)
        hint = ""
        if applied[first] == 0:
            hint = " (positions restarted at 0: a chunk or prefix boundary not continued?)"
        return KeyAudit(False, f"keys rotated at the wrong positions: token {first} (position {start + first}) "
                               f"was rotated as position {applied[first]}{hint}; {len(bad)} wrong keys", bad, applied)
    # No integer position explains the angles: fit a frequency difference, phase = n * dw,
    # from token-to-token phase steps (free of the 2*pi ambiguity of the phase itself).
    sel = np.array(bad)
    n = expected[sel].astype(np.float64)
    if sel.size >= 2:
        dn, dphi = np.diff(n), _wrap(np.diff(resid[sel], axis=0))
        dw = (dn @ dphi) / float(dn @ dn)
    else:
        dw = resid[sel[0]] / max(abs(n[0]), 1.0)
    fit = np.max(np.abs(_wrap(resid[sel] - n[:, None] * dw[None, :])))
    if fit <= 10 * angle_tol:
        i = int(np.argmax(np.abs(dw)))
        return KeyAudit(False, f"frequency rule mismatch: the phase error of cached keys grows as "
                               f"n * (w_old - w_new) (largest at pair {i}: {dw[i]:.3g} rad/token); "
                               f"{len(bad)} keys from token {bad[0]} were rotated under another rule",
                        bad, applied, dw)
    return KeyAudit(False, f"cached keys match no position under this rope (first bad token {bad[0]})", bad, applied)


@dataclass
class Comparison:
    """Run versus reference: ``ok``, or where they first diverge and why."""

    mode: str
    ok: bool
    tolerance: float
    error: float                   # largest relative error over all layers and tokens compared
    layer: Optional[int] = None    # first diverging layer (n_layers means the logits)
    position: Optional[int] = None  # sequence index of the first diverging token in that layer
    reason: str = ""
    where: str = ""                 # "layer 0", "layer 1", ..., "logits"

    def __str__(self):
        if self.ok:
            return f"{self.mode}: OK (max relative error {self.error:.3g} <= {self.tolerance:.3g})"
        return (f"{self.mode}: DIVERGES at {self.where}, token {self.position} (relative error "
                f"{self.error:.3g} > {self.tolerance:.3g}); {self.reason}")


# ---- the harness ------------------------------------------------------------------

class Harness:
    """Run one model and rope through every execution path and compare them.

    ``Harness(rope, *, rotate=None, n_layers=2, n_heads=4, n_kv_heads=2,
    vocab=32, dtype=np.float64, seed=0)``. ``rotate(x, positions)`` is the
    rotation under test (float32 ``[t, heads, head_dim]``, int64 positions
    ``[t]`` or ``[B, t]``); default ``rope.apply``. The reference prefill
    always uses ``rope.apply``.
    """

    def __init__(self, rope, *, rotate=None, n_layers=2, n_heads=4, n_kv_heads=2, vocab=32,
                 dtype=np.float64, seed=0):
        self.rope = rope
        self.model = TinyModel(rope.head_dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                               vocab=vocab, dtype=dtype, seed=seed)
        self.rotate = rotate if rotate is not None else self._rope_rotate
        self.tolerance = TOLERANCE[self.model.dtype]
        self.fingerprint = fingerprint_of(rope)

    def _rope_rotate(self, x, positions):
        return self.rope.apply(x, positions=positions)

    def _rot(self, rotate, x, positions):
        y = rotate(np.ascontiguousarray(x, dtype=np.float32), np.asarray(positions, dtype=np.int64))
        return np.asarray(y, dtype=np.float32).astype(self.model.dtype)

    def tokens(self, n, seed=1):
        """``n`` seeded random token ids."""
        return np.random.default_rng(seed).integers(0, self.model.vocab, n)

    # -- execution paths ------------------------------------------------------

    def prefill(self, tokens, *, start=0):
        """The reference: every token in one pass, causal mask, positions ``start + i``."""
        m, tokens = self.model, np.asarray(tokens, np.int64)
        n = tokens.size
        pos = start + np.arange(n)
        allowed = np.tril(np.ones((n, n), dtype=bool))
        h, hidden, keys0 = m.embed[tokens], [], None
        for layer in range(m.n_layers):
            q, k, v = m.qkv(layer, h)
            qr, kr = self._rot(self._rope_rotate, q, pos), self._rot(self._rope_rotate, k, pos)
            keys0 = kr if layer == 0 else keys0
            h = m.finish_layer(layer, h, qr, kr, v, allowed)
            hidden.append(h)
        return Trace("prefill", tokens, 0, m.logits(h), np.stack(hidden), keys0, start)

    def new_cache(self, *, paged=False, block_size=4, n_blocks=64, seed=0):
        """An empty cache for this harness's model and rope (paged: shuffled blocks)."""
        if paged:
            return PagedKVCache(self.model, self.fingerprint, block_size=block_size, n_blocks=n_blocks, seed=seed)
        return KVCache(self.model, self.fingerprint)

    def run(self, tokens, *, chunks=1, cache=None, start=0, rotate=None, positions_fn=None,
            write_keys=None, before_chunk=None, mode=None):
        """Process ``tokens`` in chunks against a KV cache; returns a :class:`Trace`.

        - ``chunks``: a chunk size (1 = decode) or a list of sizes.
        - ``cache``: continue this cache (a reused prefix); default a new one.
        - ``start``: logical position of the sequence's first token.
        - hooks, for backends and failure demonstrations:
          ``rotate(x, positions)`` the rotation (default the harness's);
          ``positions_fn(index, n, slots)`` the positions of a chunk whose
          first token has sequence index ``index`` (default
          ``start + index + arange(n)``); ``write_keys(k_rot, positions)``
          transforms keys on their way into the cache (default identity);
          ``before_chunk(cache, index)`` runs before each chunk.
        """
        m, tokens = self.model, np.asarray(tokens, np.int64)
        rotate = rotate if rotate is not None else self.rotate
        cache = cache if cache is not None else self.new_cache()
        sizes = self._chunk_sizes(chunks, tokens.size)
        logits, hidden = [], []
        first = cache.length
        i = 0
        for size in sizes:
            chunk = tokens[i:i + size]
            index = cache.length
            if before_chunk is not None:
                before_chunk(cache, index)
            slots = cache.reserve(chunk)
            pos = (start + index + np.arange(size)) if positions_fn is None else \
                np.asarray(positions_fn(index, size, slots), np.int64)
            allowed = np.arange(index + size)[None, :] <= (index + np.arange(size))[:, None]
            h, hs = m.embed[chunk], []
            for layer in range(m.n_layers):
                q, k, v = m.qkv(layer, h)
                qr, kr = self._rot(rotate, q, pos), self._rot(rotate, k, pos)
                if write_keys is not None:
                    kr = np.asarray(write_keys(kr.astype(np.float32), pos), np.float32).astype(m.dtype)
                cache.write(layer, slots, kr, v)
                keys, values = cache.read(layer)
                h = m.finish_layer(layer, h, qr, keys, values, allowed)
                hs.append(h)
            logits.append(m.logits(h))
            hidden.append(np.stack(hs))
            i += size
        name = mode or ("decode" if sizes and max(sizes) == 1 else "chunked")
        return Trace(name, cache.tokens.copy(), first, np.concatenate(logits), np.concatenate(hidden, axis=1),
                     cache.read(0)[0].copy(), start)

    @staticmethod
    def _chunk_sizes(chunks, n):
        if isinstance(chunks, (list, tuple)):
            sizes = [int(c) for c in chunks]
            if any(c <= 0 for c in sizes) or sum(sizes) != n:
                raise ValueError(f"chunks must be positive sizes summing to len(tokens)={n}, got {sizes}")
            return sizes
        size = int(chunks)
        if size <= 0:
            raise ValueError(f"chunks must be a positive chunk size or a list of sizes, got {chunks!r}")
        return [min(size, n - i) for i in range(0, n, size)]

    def decode(self, tokens, **kw):
        """Token-by-token decode against a cache of rotated keys (see :meth:`run`)."""
        return self.run(tokens, chunks=1, mode="decode", **kw)

    def chunked(self, tokens, chunk, **kw):
        """Chunked prefill, positions continuing across chunks (see :meth:`run`)."""
        return self.run(tokens, chunks=chunk, mode=f"chunked({chunk})", **kw)

    def paged(self, tokens, *, block_size=4, chunks=3, seed=0, **kw):
        """Chunked prefill into a paged cache whose physical blocks are shuffled."""
        cache = self.new_cache(paged=True, block_size=block_size, n_blocks=len(tokens) // block_size + 4, seed=seed)
        return self.run(tokens, chunks=chunks, cache=cache, mode=f"paged(block={block_size})", **kw)

    def padded_batch(self, seqs, *, positions_fn=None):
        """A left-padded batch in one pass: per-row positions, one rotation call.

        Returns one :class:`Trace` per sequence (its real tokens only).
        ``positions_fn(pad, width)`` gives a row's positions (default: 0 at
        the first real token, pads clamped to 0).
        """
        m = self.model
        seqs = [np.asarray(s, np.int64) for s in seqs]
        width = max(s.size for s in seqs)
        pads = [width - s.size for s in seqs]
        tok = np.array([np.concatenate([np.zeros(p, np.int64), s]) for p, s in zip(pads, seqs)])
        if positions_fn is None:
            pos = np.array([np.maximum(np.arange(width) - p, 0) for p in pads])
        else:
            pos = np.array([positions_fn(p, width) for p in pads], np.int64)
        col = np.arange(width)
        real = col[None, :] >= np.array(pads)[:, None]                  # [B, S]
        causal = col[None, :] <= col[:, None]
        h = m.embed[tok]                                                  # [B, S, d]
        hidden = []
        for layer in range(m.n_layers):
            q, k, v = m.qkv(layer, h.reshape(-1, m.d_model))
            shape = (len(seqs), width)
            q, k, v = (a.reshape(shape + a.shape[1:]) for a in (q, k, v))
            qr = self._rot(self.rotate, q, pos)
            kr = self._rot(self.rotate, k, pos)
            out = []
            for b in range(len(seqs)):
                allowed = causal & real[b][None, :]
                allowed[~real[b]] = np.eye(width, dtype=bool)[~real[b]]   # pad rows see themselves only
                out.append(m.finish_layer(layer, h[b], qr[b], kr[b], v[b], allowed))
            h = np.stack(out)
            hidden.append(h)
        hidden = np.stack(hidden)                                         # [L, B, S, d]
        logits = m.logits(h)
        return [Trace(f"padded_batch[{b}]", seqs[b], 0, logits[b, pads[b]:], hidden[:, b, pads[b]:])
                for b in range(len(seqs))]

    def packed(self, seqs, *, offsets=None, rotate_positions=None):
        """Sequences end to end (``cu_seqlens``) in one pass with a block-diagonal
        causal mask; positions from :func:`pyrope.positions.varlen_positions`.
        Returns one :class:`Trace` per sequence. ``rotate_positions`` overrides
        the positions (failure demonstrations)."""
        m = self.model
        seqs = [np.asarray(s, np.int64) for s in seqs]
        cu = np.concatenate([[0], np.cumsum([s.size for s in seqs])])
        pos = varlen_positions(cu, offsets) if rotate_positions is None else np.asarray(rotate_positions, np.int64)
        seq_id = np.repeat(np.arange(len(seqs)), np.diff(cu))
        idx = np.arange(cu[-1])
        allowed = (seq_id[None, :] == seq_id[:, None]) & (idx[None, :] <= idx[:, None])
        h, hidden = m.embed[np.concatenate(seqs)], []
        for layer in range(m.n_layers):
            q, k, v = m.qkv(layer, h)
            h = m.finish_layer(layer, h, self._rot(self.rotate, q, pos), self._rot(self.rotate, k, pos), v, allowed)
            hidden.append(h)
        hidden, logits = np.stack(hidden), m.logits(h)
        return [Trace(f"packed[{s}]", seqs[s], 0, logits[cu[s]:cu[s + 1]], hidden[:, cu[s]:cu[s + 1]],
                      start=0 if offsets is None else int(offsets[s])) for s in range(len(seqs))]

    # -- comparison -----------------------------------------------------------

    def compare(self, ref, run, *, tolerance=None, first=None):
        """Compare ``run`` with the reference trace over the tokens ``run`` computed
        (from sequence index ``first`` on, when given).

        Returns a :class:`Comparison` naming the first diverging layer (then
        token) and, when ``run`` carries cached keys, the audit's reason.
        """
        tol = self.tolerance if tolerance is None else float(tolerance)
        lo, hi = run.first, run.first + run.logits.shape[0]
        if ref.logits.shape[0] < hi:
            raise ValueError(f"reference covers {ref.logits.shape[0]} tokens, run needs {hi}")
        skip = 0 if first is None else max(0, int(first) - lo)
        lo += skip
        layers = list(ref.hidden[:, lo:hi]) + [ref.logits[lo:hi]]
        got = list(run.hidden[:, skip:]) + [run.logits[skip:]]
        worst = 0.0
        for layer, (want, have) in enumerate(zip(layers, got)):
            err = np.max(np.abs(have - want), axis=-1) / max(1.0, float(np.max(np.abs(want))))
            worst = max(worst, float(err.max(initial=0.0)))
            if err.size and err.max() > tol:
                token = lo + int(np.argmax(err > tol))
                reason = ""
                if run.cached_keys is not None:
                    audit = audit_keys(self.rope, self.model, run.tokens, run.cached_keys, start=run.start)
                    reason = audit.reason if not audit.ok else (
                        "layer-0 cached keys are right, so the difference comes from state computed "
                        "earlier: hidden states under an old rule, a reused prefix, or masks")
                where = "logits" if layer == len(layers) - 1 else f"layer {layer}"
                return Comparison(run.mode, False, tol, float(err.max()), layer, token,
                                  reason or "cached keys unavailable; check positions and masks", where)
        return Comparison(run.mode, True, tol, worst)

    def check(self, tokens=None, *, chunk=3, block_size=4):
        """Run decode, chunked and paged on ``tokens`` (default 23 seeded ids)
        plus a left-padded batch and a packed batch; returns every
        :class:`Comparison` against the reference prefill."""
        tokens = self.tokens(23) if tokens is None else np.asarray(tokens, np.int64)
        ref = self.prefill(tokens)
        out = [self.compare(ref, self.decode(tokens)), self.compare(ref, self.chunked(tokens, chunk)),
               self.compare(ref, self.paged(tokens, block_size=block_size))]
        seqs = [tokens, tokens[:7], tokens[3:15]]
        for runs in (self.padded_batch(seqs), self.packed(seqs)):
            for seq, run in zip(seqs, runs):
                out.append(self.compare(self.prefill(seq), run))
        return out

    def assert_consistent(self, tokens=None, **kw):
        """:meth:`check`, raising ``AssertionError`` listing every divergence."""
        bad = [c for c in self.check(tokens, **kw) if not c.ok]
        if bad:
            raise AssertionError("\n".join(str(c) for c in bad))
