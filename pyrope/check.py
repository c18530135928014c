"""One-call self-check of a rope, its layout and (optionally) a backend's kernel.

``sanity(rope, ...)`` rotates sample vectors and verifies, each against an
independent computation with a stated float32 bound:

- ``rule``: the rotation equals the standard-library reference
  (``pyrope.reference``) for the rope's own frequencies, layout and factor;
- ``norm``: rotation preserves the norm (times the attention factor on the
  rotated coordinates);
- ``relative``: ``q.k`` scores depend on ``n - m`` only, also at positions
  near 2**30 (an absolute-position error shows up here);
- ``inverse``: rotating back restores the vectors;
- ``table``: cos/sin tables at the largest positions (the target window,
  ``ROPE_MAX_POSITION`` = 2**31 - 1) within 1 float32 ulp of the exact values;
- ``layout`` (with projection weights and ``weights_layout``): scores of
  the weights' projections under the rope equal scores under the weights'
  own layout; a checkpoint in one layout run by a kernel of the other fails;
- ``backend`` (with ``rotate=``): a backend's rotation gives the rope's scores.

The result is a :class:`SanityReport` whose ``str`` is a readable table;
``pyrope check`` prints it.
"""
import builtins
import itertools
from dataclasses import dataclass

import numpy as np

from . import reference
from ._engine.checks import as_int
from ._engine.binding import MAX_POSITION
from .errors import TypeError, ValueError

EPS32 = 2.0**-23
DEFAULT_POSITIONS = (0, 1, 7, 4096, 1_000_003, 2**30 + 5)
DEFAULT_SHIFTS = (1, 1000, 1_000_000, 2**30)
# The most positions (and shifts) one check takes: each is rotated by the standard-library
# reference, so the count bounds the work; read lazily, a range(2**40) is refused at once.
MAX_SAMPLES = 1024


def _int_tuple(name, values):
    """``values`` (any iterable of ints, non-empty, at most MAX_SAMPLES) as a tuple of ints."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be an iterable of integers, got {type(values).__name__}")
    try:
        first = list(itertools.islice(values, MAX_SAMPLES + 1))
    except builtins.TypeError:   # a 0-d array
        raise TypeError(f"{name} must be an iterable of integers, got {type(values).__name__}") from None
    out = tuple(as_int(name, v) for v in first)
    if len(out) > MAX_SAMPLES:
        raise ValueError(f"{name}: at most {MAX_SAMPLES} values are checked, got more")
    if not out:
        raise ValueError(f"{name} must hold at least one integer")
    return out


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, whether it passed, the worst error relative to its bound."""

    name: str
    passed: bool
    ratio: float  # worst |error| / bound; passes when <= 1
    detail: str

    def __str__(self):
        return f"  {'PASS' if self.passed else 'FAIL'}  {self.name:9s} error/bound {self.ratio:9.3g}  {self.detail}"


class SanityError(ValueError):
    """Raised by :meth:`SanityReport.raise_if_failed`; the message is the report."""


@dataclass(frozen=True)
class SanityReport:
    """Every check's result; ``ok`` when all passed; ``str()`` is the table."""

    subject: str
    results: tuple

    @property
    def ok(self):
        """True when every check passed."""
        return all(r.passed for r in self.results)

    def __getitem__(self, name):
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def failed(self):
        """The results that failed."""
        return [r for r in self.results if not r.passed]

    def __str__(self):
        lines = [f"pyrope sanity check: {self.subject}"] + [str(r) for r in self.results]
        n_bad = len(self.failed())
        lines.append("result: OK" if not n_bad else f"result: FAIL ({n_bad} of {len(self.results)} checks failed)")
        return "\n".join(lines)

    def raise_if_failed(self):
        """Raise :class:`SanityError` carrying the report unless every check passed."""
        if not self.ok:
            raise SanityError(str(self))


def _pair_mag(x, rotary_dim, layout):
    """|x0| + |x1| of each coordinate's pair (0 past rotary_dim)."""
    a = np.abs(np.asarray(x, np.float64))
    mag = np.zeros_like(a)
    h = rotary_dim // 2
    if layout == "interleaved":
        s = a[..., 0:rotary_dim:2] + a[..., 1:rotary_dim:2]
        mag[..., 0:rotary_dim:2] = s
        mag[..., 1:rotary_dim:2] = s
    else:
        s = a[..., :h] + a[..., h:rotary_dim]
        mag[..., :h] = s
        mag[..., h:rotary_dim] = s
    return mag


def _samples(rope, q, k, wq, wk, hidden, num_heads, num_kv_heads, rng):
    """q, k as float32 [n, head_dim] from given vectors, projection weights or noise."""
    d = rope.head_dim
    if wq is not None or wk is not None:
        if wq is None or wk is None or num_heads is None or num_kv_heads is None:
            raise ValueError("projection weights need wq, wk, num_heads and num_kv_heads together")
        wq, wk = np.asarray(wq, np.float64), np.asarray(wk, np.float64)
        if wq.ndim != 2 or wq.shape[0] != num_heads * d:
            raise ValueError(f"wq must be [num_heads * head_dim, hidden] = [{num_heads * d}, ...], got {wq.shape}")
        if wk.ndim != 2 or wk.shape != (num_kv_heads * d, wq.shape[1]):
            raise ValueError(f"wk must be [num_kv_heads * head_dim, hidden] = [{num_kv_heads * d}, {wq.shape[1]}], "
                             f"got {wk.shape}")
        h = rng.standard_normal((4, wq.shape[1])) if hidden is None else np.asarray(hidden, np.float64)
        if h.ndim != 2 or h.shape[1] != wq.shape[1]:
            raise ValueError(f"hidden must be [n, {wq.shape[1]}], got {h.shape}")
        q = (h @ wq.T).reshape(-1, d)
        k = (h @ wk.T).reshape(-1, d)
    if q is None:
        q = rng.standard_normal((3, d))
    if k is None:
        k = rng.standard_normal((3, d))
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    for name, v in (("q", q), ("k", k)):
        if v.ndim < 1 or v.shape[-1] != d or not np.all(np.isfinite(v)):
            raise ValueError(f"{name} must be finite vectors [..., head_dim={d}], got shape {v.shape}")
    return q.reshape(-1, d).astype(np.float32), k.reshape(-1, d).astype(np.float32)


def _rot(rope, x, p):
    """x [n, d] rotated at one position p via the rope (float64 result)."""
    return rope.apply(x[:, None, :].copy(), positions=np.full(x.shape[0], p)).astype(np.float64)[:, 0]


def _scores_bound(rope, q, k):
    af2 = rope.attention_factor ** 2
    return 24 * EPS32 * max(af2, 1.0) * np.linalg.norm(q, axis=-1)[:, None] * np.linalg.norm(k, axis=-1)[None, :] + 1e-30


def _check_rule(rope, x, positions):
    worst = 0.0
    for p in positions:
        got = _rot(rope, x[:2], p)
        want = _ref_rot(rope, rope.layout, x[:2], p)
        bound = 4 * EPS32 * abs(rope.attention_factor) * _pair_mag(x[:2], rope.rotary_dim, rope.layout) + 1e-30
        worst = max(worst, float(np.max(np.abs(got - want) / bound)))
    return CheckResult("rule", worst <= 1, worst,
                       f"vs stdlib reference ({rope.layout}, {rope.rotary_dim} rotated dims) at positions "
                       f"{list(positions)}")


def _check_norm(rope, x, positions):
    r = rope.rotary_dim
    x64 = x.astype(np.float64)
    want = np.sqrt(rope.attention_factor**2 * np.sum(x64[:, :r] ** 2, -1) + np.sum(x64[:, r:] ** 2, -1))
    worst = 0.0
    for p in positions:
        got = np.linalg.norm(_rot(rope, x, p), axis=-1)
        bound = 8 * EPS32 * max(abs(rope.attention_factor), 1.0) * np.linalg.norm(x64, axis=-1) + 1e-30
        worst = max(worst, float(np.max(np.abs(got - want) / bound)))
    return CheckResult("norm", worst <= 1, worst, f"||R_m x|| at {len(positions)} positions up to {max(positions)}")


def _check_relative(rope, q, k, shifts):
    base_pairs = ((0, 0), (3, 0), (10, 37), (500, 2))
    bound = _scores_bound(rope, q, k)
    worst, where = 0.0, None
    for m, n in base_pairs:
        s0 = _rot(rope, q, m) @ _rot(rope, k, n).T
        for t in shifts:
            s1 = _rot(rope, q, m + t) @ _rot(rope, k, n + t).T
            ratio = float(np.max(np.abs(s1 - s0) / bound))
            if ratio > worst:
                worst, where = ratio, (m, n, t)
    detail = f"q_m.k_n == q_(m+T).k_(n+T) for T in {list(shifts)}"
    if worst > 1:
        detail += f"; worst at m={where[0]}, n={where[1]}, T={where[2]}"
    return CheckResult("relative", worst <= 1, worst, detail)


def _check_inverse(rope, x, positions):
    af2 = rope.attention_factor ** 2
    worst = 0.0
    for p in positions:
        fwd = rope.apply(x[:, None, :].copy(), positions=np.full(x.shape[0], p))
        back = rope.apply(fwd, positions=np.full(x.shape[0], p), inverse=True).astype(np.float64)[:, 0]
        want = x.astype(np.float64).copy()
        want[:, :rope.rotary_dim] *= af2
        bound = 8 * EPS32 * max(af2, 1.0) * (_pair_mag(x, rope.rotary_dim, rope.layout) + 1e-30)
        bound[:, rope.rotary_dim:] = 1e-30
        worst = max(worst, float(np.max(np.abs(back - want) / bound)))
    return CheckResult("inverse", worst <= 1, worst, "apply then apply(inverse=True) restores x (times factor**2)")


def _check_table(rope, positions):
    """cos/sin entries within 1 float32 ulp of the exactly computed values."""
    cos, sin = rope.cos_sin(np.array(positions, dtype=np.int64))
    inv = [float(w) for w in rope.inv_freq]
    want_cos, want_sin = reference.cos_sin(list(positions), inv)
    worst = 0.0
    for got, want in ((cos, want_cos), (sin, want_sin)):
        exact = rope.attention_factor * np.array(want, dtype=np.float64)
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - exact) / ulp)))
    return CheckResult("table", worst <= 1, worst,
                       f"cos/sin within 1 float32 ulp (ratio = ulps) at positions {list(positions)}")


def _ref_rot(rope, layout, x, p):
    """Rows of x [n, d] rotated at position p by the stdlib reference in ``layout``
    with the rope's frequencies and factor (float64)."""
    inv = [float(w) for w in rope.inv_freq]
    return np.array([reference.rotate_with_inv_freq([float(v) for v in row], int(p), inv, layout=layout,
                                                    attention_factor=rope.attention_factor) for row in x])


def _ref_scores(rope, layout, q, k, m, n):
    """Scores with the stdlib reference rotating in ``layout`` with the rope's frequencies."""
    return _ref_rot(rope, layout, q, m) @ _ref_rot(rope, layout, k, n).T


def _check_layout(rope, q, k, weights_layout):
    bound = _scores_bound(rope, q, k)
    worst = 0.0
    for m, n in ((5, 2), (40, 1), (1000, 990)):
        got = _rot(rope, q, m) @ _rot(rope, k, n).T
        want = _ref_scores(rope, weights_layout, q, k, m, n)
        worst = max(worst, float(np.max(np.abs(got - want) / bound)))
    if worst <= 1:
        detail = f"scores of the weights' projections match their layout {weights_layout!r}"
    else:
        detail = (f"the weights are {weights_layout!r} but the rope rotates {rope.layout!r} pairs: scores are "
                  f"wrong; convert with pyrope.layout.convert_attention(from_layout={weights_layout!r}, "
                  f"to_layout={rope.layout!r}, ...) or build the rope with layout={weights_layout!r}")
    return CheckResult("layout", worst <= 1, worst, detail)


def _check_backend(rope, q, k, rotate):
    bound = _scores_bound(rope, q, k)
    worst, where = 0.0, None
    for m, n in ((5, 2), (40, 1), (1000, 990), (2**30 + 7, 2**30)):
        bq = np.asarray(rotate(q[:, None, :].copy(), np.full(q.shape[0], m)), np.float64).reshape(q.shape)
        bk = np.asarray(rotate(k[:, None, :].copy(), np.full(k.shape[0], n)), np.float64).reshape(k.shape)
        got = bq @ bk.T
        want = _rot(rope, q, m) @ _rot(rope, k, n).T
        ratio = float(np.max(np.abs(got - want) / bound))
        if ratio > worst:
            worst, where = ratio, (m, n)
    detail = "the backend's rotation gives the rope's q.k scores"
    if worst > 1:
        detail = (f"the backend's scores differ from the rope's at m={where[0]}, n={where[1]}: wrong layout "
                  f"(weights of one, kernel of the other), frequencies or positions")
    return CheckResult("backend", worst <= 1, worst, detail)


def sanity(rope, q=None, k=None, *, wq=None, wk=None, hidden=None, num_heads=None, num_kv_heads=None,
           weights_layout=None, rotate=None, positions=DEFAULT_POSITIONS, shifts=DEFAULT_SHIFTS, seed=0,
           progress=None):
    """Check ``rope`` (and optionally weights or a backend kernel); returns a :class:`SanityReport`.

    - ``q``, ``k``: sample vectors ``[..., head_dim]`` (default: seeded noise).
    - ``wq``, ``wk``, ``num_heads``, ``num_kv_heads``: projection weights
      (``[heads * head_dim, hidden]``) whose projections of ``hidden``
      (``[n, hidden]``, default noise) are the samples.
    - ``weights_layout``: the layout the weights are stored in; adds the
      ``layout`` check (weights of one layout under a rope of the other fail).
    - ``rotate``: a backend's rotation ``rotate(x[n, 1, head_dim] float32,
      positions[n]) -> rotated``; adds the ``backend`` check against the rope.
    - ``positions``, ``shifts``: where to test (defaults reach 2**30; the
      edges of the rope's target window, else its original window (a default
      rope read from a config: the config's ``max_position_embeddings``), and
      twice it are added, up to ``ROPE_MAX_POSITION``).
    - ``progress``: optional ``progress(done, total, name)`` called after each check.

    Never raises for a failed check (see :meth:`SanityReport.raise_if_failed`);
    raises ``ValueError``/``TypeError`` for malformed arguments.
    """
    from .rope import Rope
    if not isinstance(rope, Rope):
        raise TypeError(f"rope must be a pyrope.Rope, got {type(rope).__name__}")
    if weights_layout is not None and weights_layout not in ("interleaved", "split_half"):
        raise ValueError(f"weights_layout must be None, 'interleaved' or 'split_half', got {weights_layout!r}")
    if rotate is not None and not callable(rotate):
        raise TypeError(f"rotate must be callable (x, positions) -> rotated, got {type(rotate).__name__}")
    window = rope.resolved.target_window or rope.resolved.original_window
    if window is not None and window > MAX_POSITION:  # beyond the positions the kernel serves: its edge instead
        window = MAX_POSITION
    positions = _int_tuple("positions", positions)
    shifts = _int_tuple("shifts", shifts)
    if window:  # up to the target window and beyond it (as far as the kernel's positions go)
        edges = (window - 1, window, 2 * window)
        positions += tuple(p for p in edges if p not in positions and p <= MAX_POSITION)
    rng = np.random.default_rng(seed)
    q, k = _samples(rope, q, k, wq, wk, hidden, num_heads, num_kv_heads, rng)
    both = np.concatenate([q, k])
    steps = [
        lambda: _check_rule(rope, both, positions),
        lambda: _check_norm(rope, both, positions),
        lambda: _check_relative(rope, q, k, shifts),
        lambda: _check_inverse(rope, both, positions),
        lambda: _check_table(rope, tuple(sorted({max(positions), MAX_POSITION} | ({window} if window else set())))),
    ]
    if weights_layout is not None:
        steps.append(lambda: _check_layout(rope, q, k, weights_layout))
    if rotate is not None:
        steps.append(lambda: _check_backend(rope, q, k, rotate))
    results = []
    for i, step in enumerate(steps):
        results.append(step())
        if progress is not None:
            progress(i + 1, len(steps), results[-1].name)
    return SanityReport(repr(rope), tuple(results))
