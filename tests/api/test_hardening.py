"""Adversarial arguments to every public entry: the work a call does is bounded
by its arrays' sizes (never by the value of an argument) and checked before
anything is allocated, and every refusal is a ``pyrope.errors`` class naming
the argument (no builtin MemoryError, numpy ValueError, IndexError or
OverflowError leaks out), flags are bools, masked arrays are refused."""
import time
import tracemalloc

import numpy as np
import pytest

import pyrope
from pyrope import PartialRotary, Rope, RopeError, layout
from pyrope.errors import OverflowError, TypeError, ValueError

R = Rope(8, layout="split_half")
X = np.ones((2, 3, 8), np.float32)


def bounded(call, exc, match, max_bytes=1 << 20, max_seconds=2.0):
    """Run ``call``: it must raise ``exc`` (a RopeError) matching ``match``, within
    ``max_seconds`` and with at most ``max_bytes`` allocated at its peak
    (``max_bytes`` None: not measured, for a refusal that comes from an
    allocation that failed, which tracemalloc counts as made)."""
    if max_bytes is None:
        start = time.perf_counter()
        with pytest.raises(exc, match=match) as info:
            call()
        assert isinstance(info.value, RopeError)
        assert time.perf_counter() - start <= max_seconds
        return
    call_once = call   # a first call may import or cache what the next ones reuse: not counted
    try:
        call_once()
    except RopeError:
        pass
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(exc, match=match) as info:
            call()
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, RopeError)
    assert peak <= max_bytes, f"peak {peak} bytes before the refusal"
    assert seconds <= max_seconds, f"{seconds:.2f} s before the refusal"


# ---- work before cheap checks ----------------------------------------------------------------

def test_apply_varlen_checks_the_token_count_before_making_positions():
    x = np.ones((10, 2, 8), np.float32)
    for cu in ([0, 2**24, 2**25], [0, 2**29, 2**30], [0, 2**31 - 1]):   # 256 MiB .. 16 GiB of positions
        bounded(lambda: pyrope.apply_varlen(R, x, cu), ValueError, r"x.shape\[0\] must equal cu_seqlens\[-1\]")
    bounded(lambda: pyrope.apply_varlen(R, x, [0, 2**25], offsets=[5]), ValueError, "cu_seqlens")


def test_rerotate_checks_shapes_before_broadcasting():
    k = np.ones((10, 2, 8), np.float32)
    src, dst = np.arange(4000), np.arange(4000)[:, None]   # broadcast: 4000 x 4000 int64, twice
    bounded(lambda: R.rerotate(k, src, dst), ValueError, "from_positions and to_positions must have shape")
    bounded(lambda: R.rerotate(k, np.arange(20000), np.arange(20000)), ValueError, "seq=10")


def test_positions_shapes_are_checked_before_their_values():
    x = np.ones((1, 4, 2, 8), np.float32)
    huge = np.broadcast_to(np.int64(3), (2**40, 4))   # 8 TiB of positions, in 8 bytes
    bounded(lambda: R.apply(x, huge), ValueError, r"positions shape \(1099511627776, 4\) does not match")
    bounded(lambda: R.cos_sin(np.broadcast_to(np.int64(3), (2**40,))), ValueError,
            r"positions: the cos and sin tables of shape \(1099511627776, 4\)", max_bytes=None)


def test_positions_common_to_every_row_are_not_copied_per_row():
    # zero heads: an empty array of 2**26 tokens, positions for one row
    x = np.ones((2**26, 1, 0, 8), np.float32)[:, :, :, :]
    tracemalloc.start()
    try:
        assert R.apply(x, np.array([[5]]), out=x) is x
        assert R.apply(x, [5]).shape == x.shape
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_huge_dimensions_are_refused_before_allocating():
    bounded(lambda: Rope(2**40, layout="split_half"), ValueError, "head_dim must be at most 65536, got 1099511627776")
    bounded(lambda: Rope(128, layout="split_half", rotary_dim=2**40), ValueError, "rotary_dim must be at most 65536")
    bounded(lambda: layout.permutation(2**62, "interleaved", "split_half"), ValueError, "head_dim must be at most")
    bounded(lambda: layout.permute_rows(np.ones((4, 2)), 1, 2**40, "interleaved", "split_half"), ValueError,
            "head_dim must be at most")
    bounded(lambda: layout.permute_rows(np.ones((4, 2)), 2**50, 64, "interleaved", "split_half"), ValueError,
            r"w.shape\[0\] must equal num_heads \* head_dim")
    bounded(lambda: PartialRotary(2**40, 8, convention="proportional", layout="split_half"), ValueError,
            "head_dim must be at most")
    bounded(lambda: pyrope.multimodal_positions([("image", 2**20, 2**20, 2**20)]), ValueError,
            r"segments: the positions of 1152921504606846976 tokens .* cannot be allocated", max_bytes=None)
    bounded(lambda: pyrope.multimodal_positions([("text", 3), ("video", 4096, 4096, 4096)]), ValueError,
            r"segments: .*cannot be allocated", max_bytes=None)


def test_the_largest_head_dim_is_served():
    rope = Rope(65536, layout="interleaved", rotary_dim=16)
    x = np.ones((1, 1, 65536), np.float32)
    assert np.array_equal(rope.apply(x, offset=0), x)   # position 0: the identity


def test_results_too_large_to_allocate_are_refused_naming_the_argument():
    # a broadcast view of 256 TiB: out=None asks for that much memory
    x = np.broadcast_to(np.ones(8, np.float32), (2**20, 2**20, 1, 8))
    bounded(lambda: R.apply(x), ValueError, r"x: the result of shape \(1048576, 1048576, 1, 8\) .* cannot be allocated",
            max_bytes=None)
    k = np.broadcast_to(np.ones(8, np.float32), (2**20, 2**20, 1, 8))
    bounded(lambda: R.apply_qk(x, k), ValueError, r"q: the result .* cannot be allocated", max_bytes=None)
    bounded(lambda: R.prepare(x), ValueError, "cannot be allocated", max_bytes=None)


def test_varlen_positions_make_only_their_result():
    tracemalloc.start()
    try:
        got = pyrope.varlen_positions([0, 3, 3, 2**22], offsets=[7, 0, 100])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= got.nbytes + (1 << 16)
    assert got[:3].tolist() == [7, 8, 9] and got[3] == 100 and got[-1] == 100 + 2**22 - 4
    multimodal = pyrope.multimodal_positions([("text", 2), ("image", 2, 3, 4), ("text", 1)])[0]
    assert multimodal[:, :2].tolist() == [[0, 1]] * 3
    assert multimodal[:, 2:26].tolist() == [list(2 + t for t in range(2) for _ in range(12)),
                                            list(2 + h for _ in range(2) for h in range(3) for _ in range(4)),
                                            list(2 + w for _ in range(6) for w in range(4))]
    assert multimodal[:, 26].tolist() == [6, 6, 6]


# ---- every refusal a pyrope.errors class naming the argument ---------------------------------

def _masked(a, mask=None):
    return np.ma.array(a, mask=np.zeros(np.shape(a), bool) if mask is None else mask)


K = np.ones((2, 3, 8), np.float32)
PR = PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=2)

CASES = [
    # (description, call, exception, regex the message must match)
    ("positions [2**63, 0]", lambda: R.apply(X, [2**63, 0]), OverflowError, "positions must hold integers"),
    ("positions [2**63, -1]", lambda: R.apply(X, [2**63, -1]), OverflowError, "positions"),
    ("positions [[2**63], [0]]", lambda: R.apply(np.ones((2, 1, 2, 8), np.float32), [[2**63], [0]]), OverflowError,
     "positions"),
    ("positions -2**63 - 1", lambda: R.apply(X, [-2**63 - 1, 0]), OverflowError, "positions"),
    ("cos_sin [2**63]", lambda: R.cos_sin([2**63]), OverflowError, "positions"),
    ("cu_seqlens 2**63", lambda: pyrope.varlen_positions([0, 2**63]), OverflowError, "cu_seqlens"),
    ("offsets 2**63", lambda: pyrope.varlen_positions([0, 2], [2**63]), OverflowError, "offsets"),
    ("offsets 2**70", lambda: pyrope.varlen_positions([0, 2], [2**70]), OverflowError, "offsets"),
    ("from_positions 2**63", lambda: R.rerotate(K.copy(), [2**63, 0], [0, 1]), OverflowError, "from_positions"),
    ("to_positions 2**64", lambda: R.rerotate(K.copy(), [0, 1], [2**64, 0]), OverflowError, "to_positions"),
    ("positions ragged", lambda: R.apply(X, [[1], [1, 2]]), ValueError, "positions must be a rectangular"),
    ("cu_seqlens ragged", lambda: pyrope.varlen_positions([[0], [0, 2]]), ValueError, "cu_seqlens must be a rect"),
    ("positions list of floats", lambda: R.apply(X, [0.0, 1.0]), TypeError, "positions must be an integer array"),
    ("positions float beyond int64", lambda: R.apply(X, [2**63, 0.5]), TypeError, "positions must be an integer"),
    ("positions bool array", lambda: R.apply(X, np.array([True, False])), TypeError, "positions"),
    ("positions object array", lambda: R.apply(X, np.array([1, "a"], object)), TypeError, "positions"),
    ("positions 0-d", lambda: R.apply(X, np.int64(3)), ValueError, "positions must have shape"),
    ("positions string", lambda: R.apply(X, "01"), TypeError, "positions"),
    ("positions None in list", lambda: R.apply(X, [0, None]), TypeError, "positions"),
    ("cos_sin positions dict", lambda: R.cos_sin({1: 2}), TypeError, "positions"),
    ("cos_sin dtype subarray", lambda: R.cos_sin([1], dtype=(np.float32, 2**40)), TypeError, "dtype must be"),
    ("cos_sin dtype bogus", lambda: R.cos_sin([1], dtype="float99"), TypeError, "dtype must be"),
    ("cos_sin dtype int", lambda: R.cos_sin([1], dtype=np.int32), TypeError, "dtype must be"),
    ("x 0-d", lambda: R.apply(np.array(1.0, np.float32)), ValueError, "x must have at least 3 dims"),
    ("x numpy scalar", lambda: R.apply(np.float32(1)), TypeError, "x must be a numpy.ndarray"),
    ("x object array", lambda: R.apply(X.astype(object)), TypeError, "x must have dtype"),
    ("x bool array", lambda: R.apply(X.astype(bool)), TypeError, "x must have dtype"),
    ("k object array", lambda: R.apply_qk(X, X.astype(object)), TypeError, "k must have dtype"),
    ("offset nan", lambda: R.apply(X, offset=float("nan")), TypeError, "offset must be an integer"),
    ("offset inf", lambda: R.apply(X, offset=float("inf")), TypeError, "offset must be an integer"),
    ("offset 2**70", lambda: R.apply(X, offset=2**70), ValueError, "offset"),
    ("offset -2**70", lambda: R.apply(X, offset=-2**70), ValueError, "offset"),
    ("offset int64 max", lambda: R.apply(X, offset=np.int64(2**63 - 1)), ValueError, "offset"),
    ("prepared offset 2**70", lambda: R.prepare(X.copy())(X.copy(), offset=2**70), ValueError, "offset"),
    ("prepared offset nan", lambda: R.prepare(X.copy())(X.copy(), offset=float("nan")), TypeError, "offset"),
    ("PartialRotary offset 2**70", lambda: PR.apply(X, offset=2**70), ValueError, "offset"),
    ("varlen offsets nan", lambda: pyrope.varlen_positions([0, 2], [float("nan")]), TypeError, "offsets"),
    ("varlen offsets inf", lambda: pyrope.apply_varlen(R, X, [0, 2], [float("inf")]), TypeError, "offsets"),
    ("varlen offsets 2**70", lambda: pyrope.apply_varlen(R, X[:2], [0, 2], [2**70]), OverflowError, "offsets"),
    ("varlen cu 0-d", lambda: pyrope.apply_varlen(R, X, np.int64(2)), ValueError, "cu_seqlens must be a 1-D"),
    ("varlen cu bools", lambda: pyrope.apply_varlen(R, X, [False, True]), TypeError, "cu_seqlens"),
    ("varlen x negative strides", lambda: pyrope.apply_varlen(R, X[::-1], [0, 3, 1]), ValueError, "non-decreasing"),
    ("seq_axis nan", lambda: R.apply(X, seq_axis=float("nan")), TypeError, "seq_axis"),
    ("seq_axis 2**70", lambda: R.apply(X, seq_axis=2**70), ValueError, "seq_axis"),
    ("angles unhashable", lambda: R.apply(X, angles=["auto"]), ValueError, "angles must be one of"),
    ("convention unhashable", lambda: PartialRotary(8, 4, convention=["prefix"], layout="split_half"), ValueError,
     "convention must be one of"),
    ("convention array", lambda: PartialRotary(8, 4, convention=np.array(["prefix", "offset"]), layout="split_half"),
     ValueError, "convention must be one of"),
    ("multimodal size 2**70", lambda: pyrope.multimodal_positions([("text", 2**70)]), ValueError, "segments"),
    ("multimodal size nan", lambda: pyrope.multimodal_positions([("text", float("nan"))]), TypeError, "segments"),
    ("mrope_section 2**70", lambda: Rope(8, layout="split_half", mrope_section=[2**70, 0, 0]), ValueError,
     "mrope_section"),
    ("permute_rows ragged w", lambda: layout.permute_rows([[1.0], [1.0, 2.0]], 1, 2, "interleaved", "split_half"),
     TypeError, "w must be an array"),
    ("set_num_threads 2**70", lambda: pyrope.set_num_threads(2**70), ValueError, "n must be between"),
    ("set_isa unhashable", lambda: pyrope.set_isa(["avx2"]), ValueError, "isa must be one of"),
    ("forced_isa bogus", lambda: pyrope.forced_isa("sse9").__enter__(), ValueError, "isa must be one of"),
]


@pytest.mark.parametrize("call, exc, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_refusal_is_a_rope_error_naming_the_argument(call, exc, match):
    with pytest.raises(exc, match=match) as info:
        call()
    assert isinstance(info.value, RopeError), type(info.value).__mro__


# ---- masked arrays: their masks would be ignored -----------------------------------------------

MASKED = [
    ("positions", lambda: R.apply(X, _masked([1, 2], [0, 1]))),
    ("positions", lambda: R.apply_qk(X, K, _masked([1, 2]))),
    ("positions", lambda: R.cos_sin(_masked([1, 2]))),
    ("x", lambda: R.apply(_masked(X))),
    ("x", lambda: R.apply(_masked(X), out=_masked(X))),
    ("out", lambda: R.apply(X, out=_masked(np.empty_like(X)))),
    ("q", lambda: R.apply_qk(_masked(X), K)),
    ("k", lambda: R.apply_qk(X, _masked(K))),
    ("out\\[1\\]", lambda: R.apply_qk(X, K, out=(None, _masked(K)))),
    ("x", lambda: R.prepare(_masked(X))),
    ("cu_seqlens", lambda: pyrope.apply_varlen(R, X[:2], _masked([0, 2]))),
    ("offsets", lambda: pyrope.varlen_positions([0, 2], _masked([3]))),
    ("x", lambda: pyrope.apply_varlen(R, _masked(X[:2]), [0, 2])),
    ("from_positions", lambda: R.rerotate(K.copy(), _masked([0, 1]), [1, 2])),
    ("to_positions", lambda: R.rerotate(K.copy(), [0, 1], _masked([1, 2]))),
    ("k", lambda: R.rerotate(_masked(K), [0, 1], [1, 2])),
    ("positions", lambda: R.convert_keys(K, _masked([0, 1]), R)),
    ("out", lambda: R.convert_keys(K, [0, 1], R, out=_masked(K.copy()))),
    ("x", lambda: PR.apply(_masked(X))),
    ("out", lambda: PR.apply(X, out=_masked(X.copy()))),
    ("positions", lambda: PR.apply(X, _masked([0, 1]))),
]


@pytest.mark.parametrize("name, call", MASKED, ids=[f"{i}-{m[0]}" for i, m in enumerate(MASKED)])
def test_masked_arrays_are_refused_naming_them(name, call):
    with pytest.raises(TypeError, match=f"^{name} must not be a masked array"):
        call()


def test_other_ndarray_subclasses_are_read_as_arrays(tmp_path):
    with pytest.warns(PendingDeprecationWarning):
        pos = np.matrix([[3, 4]])   # 2-D: [1, seq]
    want = R.apply(X[None], np.array([[3, 4]]))
    assert np.array_equal(R.apply(X[None], pos), want)
    mm = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=X[None].shape)
    mm[...] = X
    assert R.apply(mm, [3, 4], out=mm) is mm and np.array_equal(mm, want)


# ---- flags are bools -------------------------------------------------------------------------

NOT_BOOLS = ["False", "True", "", 0, 1, None, [], np.array([True]), 0.0]
FLAGGED = {
    "apply": lambda v: R.apply(X, inverse=v),
    "prepare": lambda v: R.prepare(X.copy(), inverse=v),
    "apply_varlen": lambda v: pyrope.apply_varlen(R, X, [0, 2], inverse=v),
    "PartialRotary prefix": lambda v: PartialRotary(8, 4, convention="prefix", layout="split_half").apply(
        X, inverse=v),
    "PartialRotary proportional": lambda v: PartialRotary(8, 4, convention="proportional",
                                                          layout="split_half").apply(X, inverse=v),
    "PartialRotary offset": lambda v: PR.apply(X, inverse=v),
    "PartialRotary offset out": lambda v: PR.apply(X, out=X.copy(), inverse=v),
}


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
@pytest.mark.parametrize("entry", list(FLAGGED))
def test_inverse_must_be_a_bool_on_every_entry(entry, value):
    with pytest.raises(TypeError, match="inverse must be True or False"):
        FLAGGED[entry](value)


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_mrope_interleaved_must_be_a_bool(value):
    with pytest.raises(TypeError, match="mrope_interleaved must be True or False"):
        Rope(8, layout="split_half", mrope_section=[2, 1, 1], mrope_interleaved=value)


def test_numpy_bools_are_bools():
    for flag in (np.bool_(True), np.bool_(False)):
        want = R.apply(X, [1, 2], inverse=bool(flag))
        assert np.array_equal(R.apply(X, [1, 2], inverse=flag), want)
        assert np.array_equal(pyrope.apply_varlen(R, X, [0, 2], [1], inverse=flag), want)
        assert np.array_equal(PR.apply(X, [1, 2], inverse=flag), PR.apply(X, [1, 2], inverse=bool(flag)))


# ---- every entry against every adversarial value: a RopeError or a result, nothing else -------

RS = Rope(8, layout="split_half", mrope_section=[2, 1, 1])
PRO = PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=2)
ADVERSARIAL = {
    "None": None, "3": 3, "-5": -5, "2**70": 2**70, "-2**70": -2**70, "2**63-1": 2**63 - 1,
    "nan": float("nan"), "inf": float("inf"), "1.5": 1.5, "True": True, "str": "ab", "bytes": b"ab", "1j": 1j,
    "dict": {1: 2}, "tuple": (1, 2), "[0.0, 1.0]": [0.0, 1.0], "[0, 1]": [0, 1], "[2**63, 0]": [2**63, 0],
    "ragged": [[1], [1, 2]], "[[]]": [[]], "object array": np.array([1, "a"], object),
    "bool array": np.array([True, False]), "0-d array": np.array(3), "empty int64": np.array([], np.int64),
    "negative strides": np.arange(4)[::-1][:2], "broadcast 2**21": np.broadcast_to(np.int64(1), (2**20, 2)),
    "2-D int64": np.zeros((2, 2), np.int64), "uint64 max": np.array([2**64 - 1, 0], np.uint64),
    "masked": np.ma.array([1, 2]), "x": X, "x 0-d": np.array(1.0, np.float32), "x object": X.astype(object),
    "x negative strides": X[::-1, ::-1, ::-1],
    "x broadcast 2 TiB": np.broadcast_to(np.ones(8, np.float32), (2**18, 2**18, 1, 8)),
}
ENTRIES = {
    "apply(x)": lambda v: R.apply(v), "apply(positions)": lambda v: R.apply(X, v),
    "apply(offset)": lambda v: R.apply(X, offset=v), "apply(out)": lambda v: R.apply(X, out=v),
    "apply(seq_axis)": lambda v: R.apply(X, seq_axis=v), "apply(angles)": lambda v: R.apply(X, angles=v),
    "apply(inverse)": lambda v: R.apply(X, inverse=v),
    "apply_qk(k)": lambda v: R.apply_qk(X, v), "apply_qk(out)": lambda v: R.apply_qk(X, X[:, :1], out=v),
    "apply_qk(positions)": lambda v: R.apply_qk(X, X[:, :1].copy(), v),
    "apply_qk(angles)": lambda v: R.apply_qk(X, X[:, :1].copy(), angles=v),
    "cos_sin(positions)": lambda v: R.cos_sin(v), "cos_sin(dtype)": lambda v: R.cos_sin([1], dtype=v),
    "sectioned cos_sin": lambda v: RS.cos_sin(v), "sectioned apply": lambda v: RS.apply(X, v),
    "rerotate(from)": lambda v: R.rerotate(X.copy(), v, [0, 1]), "rerotate(to)": lambda v: R.rerotate(X.copy(), [0, 1], v),
    "rerotate(k)": lambda v: R.rerotate(v, [0, 1], [1, 2]),
    "convert_keys(positions)": lambda v: R.convert_keys(X, v, R),
    "convert_keys(to_rope)": lambda v: R.convert_keys(X, [0, 1], v),
    "convert_keys(out)": lambda v: R.convert_keys(X, [0, 1], R, out=v),
    "varlen_positions(cu)": lambda v: pyrope.varlen_positions(v),
    "varlen_positions(offsets)": lambda v: pyrope.varlen_positions([0, 2], v),
    "apply_varlen(x)": lambda v: pyrope.apply_varlen(R, v, [0, 2]),
    "apply_varlen(cu)": lambda v: pyrope.apply_varlen(R, X, v),
    "apply_varlen(rope)": lambda v: pyrope.apply_varlen(v, X, [0, 2]),
    "apply_varlen(inverse)": lambda v: pyrope.apply_varlen(R, X, [0, 2], inverse=v),
    "multimodal(segments)": lambda v: pyrope.multimodal_positions(v),
    "multimodal(size)": lambda v: pyrope.multimodal_positions([("image", v, 2, 2)]),
    "PartialRotary(head_dim)": lambda v: PartialRotary(v, 4, convention="prefix", layout="split_half"),
    "PartialRotary(dim_offset)": lambda v: PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=v),
    "PartialRotary(convention)": lambda v: PartialRotary(8, 4, convention=v, layout="split_half"),
    "PartialRotary.apply(x)": lambda v: PRO.apply(v), "PartialRotary.apply(out)": lambda v: PRO.apply(X, out=v),
    "PartialRotary.apply(positions)": lambda v: PRO.apply(X, v),
    "permutation(head_dim)": lambda v: layout.permutation(v, "interleaved", "split_half"),
    "permutation(rotary_dim)": lambda v: layout.permutation(8, "interleaved", "split_half", rotary_dim=v),
    "convert_heads(x)": lambda v: layout.convert_heads(v, "interleaved", "split_half"),
    "permute_rows(w)": lambda v: layout.permute_rows(v, 2, 4, "interleaved", "split_half"),
    "permute_rows(num_heads)": lambda v: layout.permute_rows(np.ones((8, 3)), v, 4, "interleaved", "split_half"),
    "convert_attention(num_heads)": lambda v: layout.convert_attention(
        num_heads=v, num_kv_heads=1, head_dim=4, from_layout="interleaved", to_layout="split_half", wq=np.ones((8, 2))),
    "prepare(x)": lambda v: R.prepare(v), "prepare(out)": lambda v: R.prepare(X, out=v),
    "prepare(inverse)": lambda v: R.prepare(X, inverse=v),
    "prepared(x)": lambda v: R.prepare(X.copy())(v), "prepared(offset)": lambda v: R.prepare(X.copy())(X.copy(), offset=v),
    "prepared(positions)": lambda v: (lambda a: R.prepare(a, out=a)(a, out=a, positions=v))(X.copy()),
    "Rope(head_dim)": lambda v: Rope(v, layout="split_half"),
    "Rope(rotary_dim)": lambda v: Rope(8, layout="split_half", rotary_dim=v),
    "Rope(base)": lambda v: Rope(8, layout="split_half", base=v), "Rope(layout)": lambda v: Rope(8, layout=v),
    "Rope(mrope_section)": lambda v: Rope(8, layout="split_half", mrope_section=v),
    "Rope(mrope_interleaved)": lambda v: Rope(8, layout="split_half", mrope_section=[2, 1, 1], mrope_interleaved=v),
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_no_builtin_exception_escapes_an_entry(entry):
    leaks = []
    for name, value in ADVERSARIAL.items():
        try:
            ENTRIES[entry](value)
        except RopeError:
            pass
        except Exception as exc:   # noqa: BLE001 - what the test looks for
            leaks.append(f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc}"[:200])
    assert not leaks, leaks
