"""The planner (pyrope/_plan.py) without the kernel: views, element strides,
what the kernel can address, overlaps, positions, copy plans and the memo of
direct calls, each against a brute-force computation on element byte
addresses. No test here runs C: the C library is replaced by an object that
fails on any use."""
import importlib
import itertools
import math
import pkgutil

import numpy as np
import pytest

import pyrope._engine
from pyrope._engine import (binding as _binding, dtypes as _dtypes, isa as _isa, launcher as _launcher,
                          plan as _plan, tables as _tables)

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64)]
# bfloat16 joins the C list as the public entries' dtype checks make it join before they plan,
# and before the fixture below cuts C off: this file passes on its own too
_dtypes.stores(DTYPES[2])


class _NoC:
    def __getattr__(self, name):
        raise AssertionError(f"the planner called C: lib.{name}")


# every engine module that calls C: each holds the binding's lib under its own name
C_CALLERS = (_binding, _dtypes, _isa, _tables, _launcher)


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch):
    """The planner must decide everything without the C library."""
    for module in C_CALLERS:
        monkeypatch.setattr(module, "lib", _NoC())
    monkeypatch.setattr(_plan, "CALLS", {})
    monkeypatch.setattr(_plan, "_LISTED", {})


# ---- brute force ----------------------------------------------------------------------

def address(a):
    return a.__array_interface__["data"][0]


def at(a, idx):
    """The byte address of element ``a[idx]`` (``idx`` a full or leading index)."""
    return address(a) + sum(i * s for i, s in zip(idx, a.strides))


def element_addresses(a):
    """The byte address of every element of ``a``, in C order, one at a time."""
    return [at(a, idx) for idx in np.ndindex(a.shape)]


def covered_bytes(a):
    """Every byte address some element of ``a`` occupies, with multiplicity."""
    return [p + j for p in element_addresses(a) for j in range(a.itemsize)]


def overlaps_itself(a):
    """Do two elements of ``a`` share a byte?"""
    covered = covered_bytes(a)
    return len(set(covered)) < len(covered)


def share_a_byte(a, b):
    return bool(set(covered_bytes(a)) & set(covered_bytes(b)))


def same_memory(a, b):
    return address(a) == address(b) and a.strides == b.strides and a.shape == b.shape


def batch_starts(a):
    """Addresses of the first element of each [seq, heads, dim] block, batch in C order."""
    return [at(a, idx) for idx in np.ndindex(a.shape[:-3])]


def arithmetic(values):
    return len(values) < 3 or all(b - a == values[1] - values[0] for a, b in zip(values, values[1:]))


def addressable(tok):
    """Can one 4-D kernel view with element strides reach ``tok``
    ``[*batch, seq, heads, dim]`` as it is: a contiguous last axis, every
    element at a multiple of its size, batch blocks equally spaced."""
    item = tok.itemsize
    addrs = element_addresses(tok)
    last = all(at(tok, idx + (1,)) - at(tok, idx + (0,)) == item for idx in np.ndindex(tok.shape[:-1]))
    return last and all(p % item == 0 for p in addrs) and arithmetic(batch_starts(tok))


def view(buffer, dtype, shape, strides, offset):
    """An ndarray over ``buffer`` (uint8) at byte ``offset`` (bounds checked by numpy)."""
    return np.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)


def random_view(rng, dtype, shape, stride_choices, misalign=False):
    """A view of a fresh buffer with strides drawn from ``stride_choices`` (bytes)."""
    item = np.dtype(dtype).itemsize
    strides = tuple(int(rng.choice(stride_choices)) for _ in shape)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + item
    start = -lo + 8 + (1 if misalign else 0)
    buffer = np.zeros(start + hi + 8, np.uint8)
    return view(buffer, dtype, shape, strides, start)


# ---- views ----------------------------------------------------------------------------

def test_token_view():
    a = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
    assert _plan.token_view(a, -3) is a
    t = _plan.token_view(a, -2)
    assert t.shape == (2, 3, 5, 4, 6) and np.shares_memory(t, a)
    for idx in np.ndindex(2, 3, 5, 4):
        b0, b1, s, h = idx
        assert at(t, idx) == at(a, (b0, b1, h, s))


def test_as_4d_of_4d_and_3d():
    a = np.zeros((2, 3, 4, 8), np.float32)[:, ::-1]
    assert _plan.as_4d(a) is a
    x = np.zeros((5, 3, 8), np.float16)[::2]
    v = _plan.as_4d(x)
    assert v.shape == (1, 3, 3, 8) and v.strides[1:] == x.strides and address(v[0]) == address(x)
    assert _plan.element_strides(v)[0] == 0


@pytest.mark.parametrize("make, merges", [
    (lambda b: b, True),                                    # C-contiguous: strides nest
    (lambda b: b[:, :3], False),                            # a cut inner batch axis
    (lambda b: b[:, ::2], True),                            # every other: still equally spaced
    (lambda b: b[::-1, ::-1], True),                        # reversed both: nests, negative stride
    (lambda b: np.swapaxes(b, 0, 1), False),                # batch axes swapped
    (lambda b: b[:1], True),                                # a length-1 batch axis is ignored
    (lambda b: b[::2, :1], True),
    (lambda b: np.broadcast_to(b[:1, :1], (2, 4) + b.shape[2:]), True),   # all-zero batch strides
    (lambda b: np.broadcast_to(b[:, :1], (2, 4) + b.shape[2:]), False),   # zero inside, not outside
], ids=["contiguous", "cut", "step", "reversed", "swapped", "length-1", "length-1 inner",
        "broadcast", "half broadcast"])
def test_as_4d_merges_batch_axes_exactly_when_they_nest(make, merges):
    base = np.arange(2 * 4 * 3 * 2 * 8, dtype=np.float32).reshape(2, 4, 3, 2, 8)
    a = make(base)
    v = _plan.as_4d(a)
    starts = batch_starts(a)
    assert arithmetic(starts) == merges and (v is not None) == merges
    if v is not None:
        n = len(starts)
        assert v.shape == (n,) + a.shape[-3:] and v.strides[1:] == a.strides[-3:]
        assert [address(v[b]) for b in range(n)] == starts
        assert v.flags.writeable == a.flags.writeable


def test_as_4d_against_brute_force_on_random_views(rng):
    checked = merged = 0
    for _ in range(400):
        nb = int(rng.integers(1, 4))
        batch = tuple(int(n) for n in rng.integers(1, 4, size=nb))
        big_shape = tuple(2 * n for n in batch) + (3, 2, 8)
        big = np.arange(int(np.prod(big_shape)), dtype=np.float32).reshape(big_shape)
        sl = tuple(slice(None, None, int(rng.choice([1, 2, -1, -2]))) for _ in batch)
        a = big[sl][tuple(slice(0, n) for n in batch)]
        if rng.random() < 0.3 and nb > 1:
            order = list(rng.permutation(nb)) + [nb, nb + 1, nb + 2]
            a = a.transpose(order)
        v = _plan.as_4d(a)
        starts = batch_starts(a)
        assert (v is not None) == arithmetic(starts), (a.shape, a.strides)
        if v is not None:
            merged += 1
            assert [address(v[b]) for b in range(len(starts))] == starts
            flat = np.array([a[idx] for idx in np.ndindex(a.shape[:-3])]) if a.ndim > 3 else a[None]
            assert np.array_equal(v, flat)
        checked += 1
    assert 0 < merged < checked   # both answers were exercised


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_element_strides_against_brute_force(dtype, rng):
    base = np.zeros((6, 10, 8, 16), dtype)
    for _ in range(200):
        sl = tuple(slice(int(rng.integers(0, 2)), None, int(rng.choice([1, 2, 3, -1, -2]))) for _ in range(3))
        a = base[sl]
        cut = tuple(slice(0, int(rng.integers(1, 4))) for _ in range(3))   # lengths 1..3
        a = a[cut]
        got = _plan.element_strides(a)
        for axis in range(3):
            if a.shape[axis] == 1:
                want = 0
            else:
                one = [0] * 4
                one[axis] = 1
                want = (at(a, one) - at(a, (0, 0, 0, 0))) // a.itemsize
            assert got[axis] == want, (a.shape, a.strides)


# ---- what the kernel can address --------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_kernel_friendly_cases(dtype):
    item = dtype.itemsize
    a = np.zeros((3, 4, 2, 8), dtype)
    assert _plan.kernel_friendly(a)
    assert _plan.kernel_friendly(a[::-1, ::2, 1:])                      # gapped and reversed outer axes
    assert not _plan.kernel_friendly(a[..., ::2])                       # gapped last axis
    assert not _plan.kernel_friendly(a[..., ::-1])                      # reversed last axis
    raw = np.zeros(a.nbytes + item, np.uint8)
    assert not _plan.kernel_friendly(view(raw, dtype, a.shape, a.strides, 1))        # misaligned
    if item > 2:
        assert not _plan.kernel_friendly(view(raw, dtype, a.shape, a.strides, 2))
    odd = (a.strides[0], a.strides[1] + item // 2, a.strides[2], item)          # not a whole number of elements
    assert not _plan.kernel_friendly(view(np.zeros(4096, np.uint8), dtype, a.shape, odd, 0))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_kernel_friendly_against_brute_force(dtype, rng):
    item = dtype.itemsize
    choices = [item, 2 * item, -item, 3, 2, item + 2, 8 * item, -8 * item, 24 * item, 1]
    seen = set()
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(2, 4, size=3))     # no length-1 axes
        a = random_view(rng, dtype, shape, choices, misalign=rng.random() < 0.2)
        last_contiguous = a.strides[-1] == item
        aligned = all(p % item == 0 for p in element_addresses(a))
        want = last_contiguous and aligned
        assert _plan.kernel_friendly(a) == want, (a.shape, a.strides, address(a) % item)
        seen.add(want)
    assert seen == {False, True}


# ---- overlap ----------------------------------------------------------------------------

# no two elements share a byte, yet sorting axes by stride does not show it: listed
INTERLEAVED = [((3, 2), (8, 12)), ((4, 2), (8, 12)), ((2, 3, 2), (32, 8, 12)), ((3, 2), (-8, 12)),
               ((2, 3), (4, 8)), ((2, 2, 2), (4, 16, 8))]
TANGLED = [((3, 3), (4, 8)), ((2, 2), (4, 2)), ((4,), (0,)), ((2, 3), (0, 4)), ((3, 2), (12, 16))]


@pytest.mark.parametrize("shape, strides", INTERLEAVED + TANGLED,
                         ids=[f"{s}@{t}" for s, t in INTERLEAVED + TANGLED])
def test_self_overlapping_named_cases(shape, strides):
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    a = view(np.zeros(256, np.uint8), np.float32, shape, strides, 64 - lo)
    assert _plan.self_overlapping(a) == overlaps_itself(a)


@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_self_overlapping_against_brute_force(itemsize, rng):
    dtype = {2: np.float16, 4: np.float32, 8: np.float64}[itemsize]
    choices = [0, itemsize, -itemsize, 2 * itemsize, 3 * itemsize, -4 * itemsize, 1, 3, 6, 10, 12, -12, 24, 40]
    seen = set()
    for _ in range(1500):
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(n) for n in rng.integers(1, 5, size=ndim))
        a = random_view(rng, dtype, shape, choices)
        want = overlaps_itself(a)
        assert _plan.self_overlapping(a) == want, (a.shape, a.strides)
        seen.add(want)
    assert seen == {False, True}


def test_self_overlapping_beyond_the_enumeration_limit(monkeypatch):
    interleaved = view(np.zeros(256, np.uint8), np.float32, (3, 2), (8, 12), 0)
    assert not overlaps_itself(interleaved)
    monkeypatch.setattr(_plan, "_ENUMERATE_LIMIT", 1)         # the shorter axis's one step
    assert not _plan.self_overlapping(interleaved)            # listed: apart
    monkeypatch.setattr(_plan, "_LISTED", {})                 # the decision is kept: forget it
    monkeypatch.setattr(_plan, "_ENUMERATE_LIMIT", 0)
    assert _plan.self_overlapping(interleaved)                # cannot be shown apart: treated as overlapping
    plain = np.zeros((3, 5), np.float32)[:, ::2]
    assert not _plan.self_overlapping(plain)                  # decided without listing elements
    far = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (3, 3), (1 << 62, (1 << 62) + 8))
    assert _plan.self_overlapping(far)                        # past int64 offsets: treated as overlapping


def byte_ranges_overlap(shape, strides, itemsize):
    """Plain Python: do two of the byte ranges [offset, offset + itemsize) of
    the elements of a view with ``shape`` and ``strides`` intersect?"""
    starts = sorted(sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*map(range, shape)))
    return any(b < a + itemsize for a, b in zip(starts, starts[1:]))


def strided(shape, strides, dtype):
    """``as_strided`` over a fresh buffer just large enough (any signs, zeros)."""
    item = np.dtype(dtype).itemsize
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + item
    buffer = np.zeros(hi - lo + item, np.uint8)
    first = buffer[-lo:-lo + item].view(dtype)   # the element at index 0
    return np.lib.stride_tricks.as_strided(first, shape, strides)


@pytest.fixture
def listed(monkeypatch):
    """Counts the views that fall to listing, and which search each takes."""
    seen = {"views": 0, "steps": 0, "sorted": 0}

    def count(name, key):
        real = getattr(_plan, name)

        def counted(*args):
            seen[key] += 1
            return real(*args)
        monkeypatch.setattr(_plan, name, counted)
    count("_listed_overlap", "views")
    count("_near_steps", "steps")
    count("_near_sorted", "sorted")
    return seen


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_self_overlapping_against_byte_ranges(dtype, rng, listed, monkeypatch):
    # Random shapes up to 6 dims and strides of any sign, zero included, in
    # units of 1, the itemsize or twice it: every decision, cheap or listed,
    # against the byte ranges themselves.
    item = np.dtype(dtype).itemsize
    outcomes = set()
    for _ in range(2500):
        ndim = int(rng.integers(1, 7))
        shape = tuple(int(n) for n in rng.integers(0 if rng.random() < 0.03 else 1, 5, size=ndim))
        if math.prod(shape) > 2000:
            continue
        unit = int(rng.choice([1, item, 2 * item]))
        strides = tuple(int(rng.integers(-12, 13)) * unit for _ in shape)
        monkeypatch.setattr(_plan, "_LISTED", {})
        before = listed["views"]
        got = _plan.self_overlapping(strided(shape, strides, dtype))
        assert got == byte_ranges_overlap(shape, strides, item), (shape, strides)
        outcomes.add((got, listed["views"] > before))
    assert outcomes == {(False, False), (True, False), (False, True), (True, True)}
    assert listed["steps"] and listed["sorted"]    # both searches ran


def test_self_overlapping_many_axes_against_byte_ranges(rng, listed, monkeypatch):
    # 3 to 8 axes of 2 or 3 elements: sides of several axes each are listed and sorted.
    outcomes = set()
    for _ in range(1500):
        shape = tuple(int(n) for n in rng.integers(2, 4, size=int(rng.integers(3, 9))))
        if math.prod(shape) > 3000:
            continue
        strides = tuple(int(rng.integers(-300, 301)) for _ in shape)
        monkeypatch.setattr(_plan, "_LISTED", {})
        got = _plan.self_overlapping(strided(shape, strides, np.float32))
        assert got == byte_ranges_overlap(shape, strides, 4), (shape, strides)
        outcomes.add(got)
    assert outcomes == {False, True} and listed["sorted"] > 100


class _NoNumpy:
    def __getattr__(self, name):
        raise AssertionError(f"an array was built: np.{name}")


# (shape, strides, overlapping): float32 views each decided by one rule, in O(ndim)
CHEAP = [
    ((16384, 8, 128), (0, 512, 4), True),         # the issue's: a zero stride on a long axis
    ((1, 8, 128), (0, 512, 4), False),            # ... on an axis of one element: nothing repeats
    ((0, 8, 128), (0, 0, 4), False),              # no element
    ((5, 4), (16, 2), True),                      # a stride below the itemsize
    ((3, 4, 5), (64, -8, 8), True),               # equal |strides|, opposite signs
    ((3, 4, 5), (64, 10, 8), True),               # strides less than an itemsize apart
    ((7, 3, 2), (-96, 32, 4), False),             # nested (negative strides too)
    ((7, 3, 2), (8, 12, 4), True),                # more elements than their reach holds, one apiece
    ((50, 40, 3), (4, 12, 2000), True),           # the same below an outer axis that nests
    ((3, 2, 100), (8, 12, 10000), False),         # the same apart: outer axis dropped, the rest listed
]


@pytest.mark.parametrize("shape, strides, want", CHEAP, ids=[f"{s}@{t}" for s, t, _ in CHEAP])
def test_self_overlapping_cheap_decisions_build_no_array(shape, strides, want, monkeypatch):
    a = strided(shape, strides, np.float32)
    if math.prod(shape) <= 1 << 12:
        assert byte_ranges_overlap(shape, strides, 4) == want
    listed_ = shape == (3, 2, 100)
    if not listed_:
        monkeypatch.setattr(_plan, "np", _NoNumpy())         # shape and strides alone decide it
    monkeypatch.setattr(_plan, "_listed_overlap", lambda *a, _r=_plan._listed_overlap: (
        _r(*a) if listed_ else pytest.fail("listed a view a cheap rule decides")))
    assert _plan.self_overlapping(a) == want


@pytest.mark.parametrize("ndim", range(2, 8))
def test_self_overlapping_lists_at_most_half_the_elements(ndim):
    # The listing's length bounds the work of a tangled view: against the
    # element count (a rotation touches each one), for every shape of lengths
    # 2..9 and a few long axes.
    for shape in itertools.combinations_with_replacement([2, 3, 4, 5, 7, 9, 64, 1000], ndim):
        axes = [(i + 1, n) for i, n in enumerate(shape)]
        count = _plan._listed_count(_plan._sides(axes))
        assert count <= math.prod(shape) // 2 + 1, (shape, count)


def test_self_overlapping_lists_once_per_view(listed):
    a = strided((3, 2, 100), (8, 12, 10000), np.float32)
    for _ in range(3):
        assert not _plan.self_overlapping(a)
    assert listed["views"] == 1


@pytest.mark.parametrize("module", C_CALLERS, ids=lambda m: m.__name__.rpartition(".")[2])
def test_the_kernel_is_out_of_reach(module):
    with pytest.raises(AssertionError, match="the planner called C"):
        module.lib.rope_rotate


def test_every_engine_module_holding_the_c_library_is_cut_off():
    holding = {name for _, name, _ in pkgutil.iter_modules(pyrope._engine.__path__)
               if hasattr(importlib.import_module(f"pyrope._engine.{name}"), "lib")}
    assert holding == {m.__name__.rpartition(".")[2] for m in C_CALLERS}


# ---- resolve_overlaps -----------------------------------------------------------------------

def _candidates(B, C):
    """Arrays of shape [2, 3, 2, 8] over buffers B and C [2, 3, 6, 8]."""
    out = [B[:, :, a:a + 2] for a in range(5)] + [C[:, :, a:a + 2] for a in (0, 1, 4)]
    out.append(B[:, :, 0:4:2])
    out.append(np.lib.stride_tricks.as_strided(C[:, :, :2], strides=C.strides[:2] + (0, C.strides[3])))
    return out


def _expected(items):
    """What resolve_overlaps must decide, by brute force: an error message
    fragment, or for each item whether its source is read from a copy."""
    for i, (name, x, _, _) in enumerate(items):
        for other, y, _, _ in items[i + 1:]:
            if same_memory(x, y):
                return f"{name} and {other} must be different arrays"
    written = [(out_name, out) for _, _, out, out_name in items if out is not None]
    for i, (name, out) in enumerate(written):
        if overlaps_itself(out):
            return f"{name} has elements that overlap each other"
        for other, out2 in written[i + 1:]:
            if share_a_byte(out, out2):
                return f"{name} and {other} overlap"
    copies = []
    for name, x, out, _ in items:
        own = out is not None and same_memory(x, out)
        copies.append(any(share_a_byte(w, x) for _, w in written if not (own and w is out)))
    return copies


def test_resolve_overlaps_against_brute_force(rng):
    outcomes = set()
    for trial in range(400):
        B = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
        C = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
        pool = _candidates(B, C)
        pick = lambda: pool[int(rng.integers(len(pool)))]   # noqa: E731
        q, k = pick(), pick()

        def out_for(x):
            r = rng.random()
            if r < 0.25:
                return None
            if r < 0.4:
                return x                                          # in place
            if r < 0.5:
                return x[...]                                     # in place, another object
            return pick()
        items = [("q", q, out_for(q), "out[0]")]
        if trial % 4:
            items.append(("k", k, out_for(k), "out[1]"))
        want = _expected(items)
        keep = [x.copy() for _, x, _, _ in items]
        if isinstance(want, str):
            with pytest.raises(ValueError, match=want.replace("[", r"\[").replace("]", r"\]")):
                _plan.resolve_overlaps(items)
            outcomes.add(want.split()[-1])
            continue
        sources = _plan.resolve_overlaps(items)
        assert len(sources) == len(items)
        for (name, x, _, _), src, copied, before in zip(items, sources, want, keep):
            assert np.array_equal(src, before)
            if copied:
                assert src is not x
                for _, _, out, _ in items:
                    assert out is None or not share_a_byte(src, out)
            else:
                assert src is x
            outcomes.add(copied)
    assert {True, False} <= outcomes and len(outcomes) >= 5   # copies, none, and several refusals


def test_resolve_overlaps_messages_name_the_arguments():
    B = np.zeros((2, 3, 6, 8), np.float32)
    x, y = B[:, :, :2], B[:, :, 2:4]
    with pytest.raises(ValueError, match=r"^q and k must be different arrays"):
        _plan.resolve_overlaps([("q", x, None, "out[0]"), ("k", B[:, :, :2], None, "out[1]")])
    zero = np.lib.stride_tricks.as_strided(y, strides=(0,) + y.strides[1:])
    with pytest.raises(ValueError, match=r"^out has elements that overlap each other"):
        _plan.resolve_overlaps([("x", x, zero, "out")])
    with pytest.raises(ValueError, match=r"^out\[0\] and out\[1\] overlap"):
        _plan.resolve_overlaps([("q", x, B[:, :, 4:6], "out[0]"), ("k", y, B[:, :, 3:5], "out[1]")])
    with pytest.raises(ValueError, match=r"^out\[1\] has elements that overlap each other"):
        _plan.resolve_overlaps([("q", x, None, "out[0]"), ("k", y, zero, "out[1]")])


def test_resolve_overlaps_in_place_is_not_copied():
    B = np.arange(2 * 3 * 6 * 8, dtype=np.float32).reshape(2, 3, 6, 8)
    x = B[:, :, :2]
    for out in (x, B[:, :, :2], x[...]):
        (src,) = _plan.resolve_overlaps([("x", x, out, "out")])
        assert src is x
    (src,) = _plan.resolve_overlaps([("x", x, B[:, :, 1:3], "out")])       # shifted by one head
    assert src is not x and not np.shares_memory(src, B) and np.array_equal(src, x)


def _byte_span(a):
    """[first byte, last byte + 1) of the elements of ``a``, by brute force."""
    ends = [at(a, idx) for idx in np.ndindex(*a.shape)]
    return min(ends), max(ends) + a.itemsize


def test_positions_apart_copies_positions_within_an_output_span(rng):
    """Positions C reads while it writes are copied exactly when they meet an
    output's span of bytes, gaps included (what C refuses), else passed on."""
    B = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    flat = B.reshape(-1)
    outs = [B[:, :, :2], B[:, :, ::3], B[1:, 1:, 4:]]
    for start in range(0, flat.size - 8, 6):
        pos = flat[start:start + 8].view(np.int64).reshape(2, 2)
        for out in outs:
            lo, hi = _byte_span(out)
            plo, phi = _byte_span(pos)
            got = _plan.positions_apart(pos, [np.zeros(3), out])
            if plo < hi and lo < phi:
                assert got is not pos and not np.shares_memory(got, B) and np.array_equal(got, pos)
                assert got.flags.c_contiguous and got.dtype == np.int64
            else:
                assert got is pos


# ---- positions ---------------------------------------------------------------------------

def _broadcast_by_hand(pos, batch, n_seq):
    """pos [seq] or [*batch', seq] as [prod(batch), seq], broadcasting index by index."""
    rows = []
    for idx in np.ndindex(*batch):
        if pos.ndim == 1:
            rows.append([int(pos[s]) for s in range(n_seq)])
            continue
        lead = idx[len(idx) - (pos.ndim - 1):]
        src = tuple(0 if n == 1 else i for i, n in zip(lead, pos.shape[:-1]))
        rows.append([int(pos[src + (s,)]) for s in range(n_seq)])
    return np.array(rows, dtype=np.int64).reshape(-1, n_seq)


def _check_positions(pos, batch, n_seq):
    got = _plan.positions_2d(pos, batch, n_seq)
    assert got.dtype == np.int64 and got.flags.c_contiguous and got.flags.aligned
    want = _broadcast_by_hand(np.asarray(pos), batch, n_seq)
    if np.asarray(pos).ndim == 1 or np.prod(np.shape(pos)[:-1]) == 1:   # one row serves every batch row
        assert got.shape == (1, n_seq) and np.array_equal(got[0], want[0])
    else:
        assert np.array_equal(got, want)
    # the strides C gets address position [b, s] at b * strides[0] + s * strides[1]
    st = _plan.position_strides(got)
    flat = got.reshape(-1)
    for b in range(want.shape[0]):
        for s in range(n_seq):
            assert flat[b * st[0] + s * st[1]] == want[b, s]
    assert st[2] == 0
    return got


def test_positions_2d_shapes_and_broadcasting(rng):
    _check_positions([5, 3, 9], (2, 4), 3)
    _check_positions(rng.integers(-100, 100, size=(2, 4, 3)), (2, 4), 3)
    _check_positions(rng.integers(-100, 100, size=(1, 3)), (5,), 3)
    _check_positions(rng.integers(-100, 100, size=(2, 1, 3)), (2, 4), 3)
    _check_positions(rng.integers(-100, 100, size=(4, 3)), (2, 4), 3)          # fewer batch dims
    _check_positions(rng.integers(-100, 100, size=(1, 1, 3)), (2, 4), 3)
    _check_positions(rng.integers(0, 2**31 - 1, size=(3, 1)), (3,), 1)
    assert _plan.position_strides(np.zeros((1, 7), np.int64)) == (0, 1, 0)


def test_positions_2d_dtypes_and_layouts(rng):
    pos = rng.integers(0, 120, size=(3, 5))
    for other in (pos.astype(np.int32), pos.astype(np.uint8), pos.astype(np.int16), pos.astype(">i8"),
                  pos.astype(np.uint64), np.asfortranarray(pos), np.repeat(pos, 2, axis=1)[:, ::2],
                  pos[::-1][::-1], pos.tolist()):
        _check_positions(other, (3,), 5)
    raw = np.zeros(pos.size * 8 + 1, np.uint8)
    misaligned = raw[1:].view(np.int64).reshape(3, 5)
    misaligned[...] = pos
    assert not misaligned.flags.aligned
    got = _check_positions(misaligned, (3,), 5)
    assert not np.shares_memory(got, raw)
    _check_positions(misaligned[0], (3,), 5)
    for seq in (np.arange(10)[::2], np.arange(5)[::-1], np.arange(5, dtype=np.int32)):   # [seq] too
        _check_positions(seq, (3,), 5)


def test_positions_2d_refusals():
    for pos, exc, message in (
            (7, ValueError, r"positions must have shape \[seq\] or \[\*batch, seq\] with seq=3, got \(\)"),
            ([1, 2], ValueError, r"with seq=3, got \(2,\)"),
            (np.zeros((3, 3), int), ValueError, r"positions shape \(3, 3\) does not match batch \(2,\) and seq 3"),
            (np.zeros(3), TypeError, "positions must be an integer array"),
            (np.zeros(3, bool), TypeError, "positions must be an integer array"),
            ([0, 1, 2**31], ValueError, r"positions must lie within"),
            ([0, 1, -2**31], ValueError, r"positions must lie within"),
    ):
        with pytest.raises(exc, match=message):
            _plan.positions_2d(pos, (2,), 3)


# ---- plan_rotation -------------------------------------------------------------------------

def _layouts(rng, shape, dtype):
    """Arrays of ``shape`` laid out in many ways: plain, gapped heads, gapped or
    reversed last axis, misaligned, unmergeable batch, batch-swapped."""
    item = np.dtype(dtype).itemsize
    yield "contiguous", lambda: np.zeros(shape, dtype)
    yield "gapped heads", lambda: np.zeros(shape[:-2] + (2 * shape[-2], shape[-1]), dtype)[..., ::2, :]
    yield "gapped last", lambda: np.zeros(shape[:-1] + (2 * shape[-1],), dtype)[..., ::2]
    yield "reversed seq", lambda: np.zeros(shape, dtype)[..., ::-1, :, :]

    def misaligned():
        raw = np.zeros(int(np.prod(shape)) * item + 1, np.uint8)
        return raw[1:].view(dtype).reshape(shape)
    yield "misaligned", misaligned
    yield "cut batch", lambda: np.zeros((shape[0], shape[1] + 1) + shape[2:], dtype)[:, :shape[1]]
    yield "swapped batch", lambda: np.swapaxes(np.zeros((shape[1], shape[0]) + shape[2:], dtype), 0, 1)


def _simulate(plan):
    """Do what the kernel and Plan.run do, in numpy: fill each kernel
    destination with a pattern, then the write-backs. Returns the patterns."""
    patterns = []
    for i, (s4, d4) in enumerate(plan.buffers):
        p = (np.arange(d4.size, dtype=np.float64).reshape(d4.shape) * 0.25 + 1000 * (i + 1)).astype(d4.dtype)
        d4[...] = p
        patterns.append(p)
    for dst, tmp in plan.write_back:
        dst[...] = tmp
    return patterns


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
def test_plan_rotation_copy_plans_against_brute_force(dtype, seq_axis, rng):
    tok_shape = (2, 3, 4, 2, 8)                       # [b0, b1, seq, heads, dim]
    shape = tok_shape if seq_axis == -3 else tok_shape[:2] + (2, 4, 8)
    layouts = list(_layouts(rng, shape, dtype))
    seen = set()
    for (xname, make_x), out_kind in itertools.product(layouts, ["fresh", "in place", "same memory"]
                                                       + [n for n, _ in layouts]):
        x = make_x()
        x[...] = rng.standard_normal(shape).astype(dtype)
        x_before = x.copy()
        if out_kind == "fresh":
            out = None
        elif out_kind == "in place":
            out = x
        elif out_kind == "same memory":
            out = x[...]
        else:
            out = dict(layouts)[out_kind]()
        items = [("x", x, out, "out")]
        plan = _plan.plan_rotation(items, seq_axis, "split_half", False, 6)
        (result,) = plan.outputs
        assert result is out if out is not None else (result.shape == x.shape and result.dtype == x.dtype)
        tok_x, tok_r = _plan.token_view(x, seq_axis), _plan.token_view(result, seq_axis)
        in_place = out is not None and same_memory(x, out)
        (s4, d4), = plan.buffers
        # the sources the kernel reads hold x's values as [B, seq, heads, dim]
        assert np.array_equal(s4, np.array(tok_x).reshape(s4.shape))
        if in_place:
            assert s4 is d4                                          # one view, read and written
            assert len(plan.write_back) == (0 if addressable(tok_x) else 1)
            assert (address(s4) == address(tok_x)) == addressable(tok_x)
        else:
            assert len(plan.write_back) == (0 if addressable(tok_r) else 1)
            reads_x = np.shares_memory(s4, x)
            assert reads_x == (addressable(tok_x) and addressable(tok_r))
            if not addressable(tok_r):
                assert s4 is d4 and not reads_x and d4.flags.c_contiguous  # a temporary rotated in place
        for dst, tmp in plan.write_back:
            assert same_memory(dst, tok_r) and tmp.flags.c_contiguous and not np.shares_memory(tmp, result)
        # the kernel's view of the destination maps onto the result token by token
        (pattern,) = _simulate(plan)
        assert np.array_equal(np.array(tok_r).reshape(pattern.shape), pattern)
        if not in_place:
            assert np.array_equal(x, x_before)                      # the source is never written
        # the descriptors: counts and element strides of the kernel views
        call = plan.call
        assert (call.n_batch, call.n_seq, call.n_heads) == (6, 4, (2,))
        assert (plan.batch_shape, plan.n_seq) == ((2, 3), 4)
        (_, _, heads, xs, os_), = call._template
        assert heads == 2 and xs == _plan.element_strides(s4) and os_ == _plan.element_strides(d4)
        seen.add((in_place, bool(plan.write_back), np.shares_memory(s4, x)))
    assert len(seen) >= 4


def test_plan_rotation_of_q_and_k():
    q = np.zeros((2, 5, 3, 8), np.float32)
    kbuf = np.zeros((2, 5, 3, 16), np.float32)
    k = kbuf[..., ::2][:, :, :1]                                          # not addressable: copied
    q_out = np.zeros((2, 5, 3, 16), np.float32)[..., :8]                  # addressable, gapped
    plan = _plan.plan_rotation([("q", q, q_out, "out[0]"), ("k", k, None, "out[1]")],
                               -3, "interleaved", True, 8)
    (sq, dq), (sk, dk) = plan.buffers
    assert np.shares_memory(sq, q) and np.shares_memory(dq, q_out) and not plan.write_back
    assert not np.shares_memory(sk, kbuf) and np.shares_memory(dk, plan.outputs[1])
    assert plan.outputs[0] is q_out
    assert (plan.call.n_batch, plan.call.n_seq, plan.call.n_heads, plan.call.n_tensors) == (2, 5, (3, 1), 2)
    assert plan.call._fields["inverse"] == 1 and plan.call._fields["layout"] == _binding.LAYOUTS["interleaved"]


def test_plan_rotation_in_place_keeps_one_view():
    x = np.zeros((3, 4, 2, 8), np.float64)
    for out in (x, x[...]):
        plan = _plan.plan_rotation([("x", x, out, "out")], -3, "split_half", False, 8)
        ((s4, d4),) = plan.buffers
        assert s4 is d4 and address(s4) == address(x) and not plan.write_back and plan.outputs[0] is out


def test_plan_rotation_reads_a_copy_of_a_source_an_output_overlaps():
    B = np.arange(2 * 3 * 6 * 8, dtype=np.float32).reshape(2, 3, 6, 8)
    x = B[:, :, :2]
    out = B[:, :, 1:3]
    plan = _plan.plan_rotation([("x", x, out, "out")], -3, "split_half", False, 8)
    ((s4, d4),) = plan.buffers
    assert not np.shares_memory(s4, B) and np.shares_memory(d4, out) and not plan.write_back
    assert np.array_equal(s4, np.array(x)[None].reshape(s4.shape))


# ---- the memo of direct calls ----------------------------------------------------------------

ROPE_KEY = ("split_half", 8, 8)


def _key(arrays, seq_axis=-3, inverse=False, rope_key=ROPE_KEY):
    """The memo key of ``arrays`` rotated in place."""
    marks = [a for x in arrays for a in (x, None)]
    return _plan.direct_key(_plan.plan_tag(rope_key), seq_axis, inverse, *marks)


def _direct(arrays, seq_axis=-3, inverse=False, rope_key=ROPE_KEY):
    key = _key(arrays, seq_axis, inverse, rope_key)
    call = _plan.direct_call(key, arrays, seq_axis, inverse, rope_key)
    assert key in _plan.CALLS and _plan.CALLS[key] is call
    return call


def test_direct_call_refusals_are_memoised_as_none():
    f32 = np.zeros((2, 3, 4, 8), np.float32)
    refused = [
        (np.zeros((2, 0, 4, 8), np.float32),),                         # empty
        (np.zeros((2, 3, 0, 8), np.float32),),
        (np.zeros((2, 3, 4, 6), np.float32),),                         # another head_dim
        (np.zeros((3, 8), np.float32),),                               # fewer than 3 dims
        (np.zeros((2, 3, 4, 8), np.int32),),                           # a dtype the kernel lacks
        (np.zeros((2, 3, 4, 8), ">f4"),),                              # not native byte order
        (f32, np.zeros((2, 3, 1, 8), np.float64)),                     # q and k of other dtypes
        (f32, np.zeros((2, 4, 1, 8), np.float32)),                     # other tokens
        (f32, np.zeros((2, 3, 1, 6), np.float32)),                     # k of another head_dim
    ]
    for arrays in refused:
        assert _direct(arrays) is None
    assert len(_plan.CALLS) == len(refused)
    # seq_axis=-2 reads tokens from axis -2: q [2, 4, 3, 8] and k [2, 1, 3, 8] share them
    assert _direct((np.zeros((2, 4, 3, 8), np.float32), np.zeros((2, 1, 3, 8), np.float32)), -2) is not None
    assert _direct((np.zeros((2, 4, 3, 8), np.float32), np.zeros((2, 4, 2, 8), np.float32)), -2) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("seq_axis", [-3, -2])
def test_direct_call_descriptors_against_brute_force(dtype, seq_axis):
    arrays = (np.zeros((2, 3, 5, 4, 8), dtype), np.zeros((2, 3, 5, 1, 8), dtype)) if seq_axis == -3 else \
             (np.zeros((2, 3, 4, 5, 8), dtype), np.zeros((2, 3, 1, 5, 8), dtype))
    call = _direct(arrays, seq_axis, True)
    assert (call.n_batch, call.n_seq, call.n_heads) == (6, 5, (4, 1))
    assert call._fields["dtype"] == _dtypes.DTYPE_CODES[dtype] and call._fields["inverse"] == 1
    for a, (_, _, heads, xs, os_) in zip(arrays, call._template):
        tok = _plan.token_view(a, seq_axis)
        item = a.itemsize
        b_stride = (at(tok, (0, 1)) - at(tok, (0, 0))) // item                 # batch: [0, 0] to [0, 1]
        s_stride = (at(tok, (0, 0, 1)) - at(tok, (0, 0, 0))) // item
        h_stride = 0 if tok.shape[-2] == 1 else (at(tok, (0, 0, 0, 1)) - at(tok, (0, 0, 0, 0))) // item
        assert heads == tok.shape[-2] and xs == os_ == (b_stride, s_stride, h_stride)


def test_direct_keys_tell_calls_apart():
    a = np.zeros((2, 3, 4, 8), np.float32)
    keys = {_key((a,)), _key((a,), -2), _key((a,), -3, True), _key((a.astype(np.float64),)),
            _key((a[:1].copy(),)), _key((a,), -3, False, ("interleaved", 8, 8)),
            _key((a,), -3, False, ("split_half", 6, 8)), _key((a, a)), _key((a, a[:, :, :1]))}
    assert len(keys) == 9
    assert _key((a,)) == _key((a.copy(),))
    # outputs: in place, new and another array's strides are other entries
    b = np.zeros((2, 5, 4, 8), np.float32)[:, 1:4]
    tag = _plan.plan_tag(ROPE_KEY)
    assert len({_plan.direct_key(tag, -3, False, a, _plan.out_mark(a, out)) for out in (a, None, b)}) == 3


def test_the_memo_is_bounded(monkeypatch):
    full = {("filler", i): None for i in range(_plan._MAX_CALLS)}
    monkeypatch.setattr(_plan, "CALLS", full)
    call = _direct((np.zeros((2, 3, 4, 8), np.float32),))
    assert call is not None and len(_plan.CALLS) == 1


def test_same_tokens_against_the_shapes():
    for q, k, axis in itertools.product([(2, 5, 3, 8), (5, 3, 8), (2, 3, 5, 8), (1, 2, 5, 3, 8)],
                                        [(2, 5, 1, 8), (5, 1, 8), (2, 1, 5, 8), (2, 3, 5, 8), (1, 2, 5, 1, 8)],
                                        [-3, -2]):
        tq = _plan.token_view(np.zeros(q), axis).shape
        tk = _plan.token_view(np.zeros(k), axis).shape
        want = tq[:-2] == tk[:-2]
        assert _plan.same_tokens(np.zeros(q), np.zeros(k), axis) == want, (q, k, axis)
