"""Bad input: each raises the right exception naming the argument, before any write."""
import numpy as np
import pytest

import pyrope
from pyrope import Rope, RopeError

R = Rope(8, layout="split_half")
X = np.ones((2, 3, 8), dtype=np.float32)


def _readonly():
    a = X.copy()
    a.flags.writeable = False
    return a


CASES = [
    # (description, call, exception, text the message must contain)
    ("layout missing", lambda: Rope(8), TypeError, "layout is required"),
    ("layout unknown", lambda: Rope(8, layout="neox"), ValueError, "layout"),
    ("layout not str", lambda: Rope(8, layout=1), TypeError, "layout"),
    ("head_dim odd", lambda: Rope(7, layout="split_half"), ValueError, "head_dim must be a positive even integer, got 7"),
    ("head_dim zero", lambda: Rope(0, layout="split_half"), ValueError, "head_dim"),
    ("head_dim negative", lambda: Rope(-4, layout="split_half"), ValueError, "head_dim"),
    ("head_dim float", lambda: Rope(8.0, layout="split_half"), TypeError, "head_dim must be an integer"),
    ("head_dim bool", lambda: Rope(True, layout="split_half"), TypeError, "head_dim"),
    ("rotary_dim odd", lambda: Rope(8, layout="split_half", rotary_dim=3), ValueError, "rotary_dim"),
    ("rotary_dim > head_dim", lambda: Rope(8, layout="split_half", rotary_dim=10), ValueError, "rotary_dim must be at most head_dim (8), got 10"),
    ("base <= 1", lambda: Rope(8, layout="split_half", base=1.0), ValueError, "base must be finite and greater than 1"),
    ("base inf", lambda: Rope(8, layout="split_half", base=float("inf")), ValueError, "base"),
    ("base nan", lambda: Rope(8, layout="split_half", base=float("nan")), ValueError, "base"),
    ("base str", lambda: Rope(8, layout="split_half", base="1e4"), TypeError, "base"),
    ("x list", lambda: R.apply(X.tolist()), TypeError, "x must be a numpy.ndarray"),
    ("x int dtype", lambda: R.apply(X.astype(np.int32)), TypeError, "x must have dtype float32"),
    ("x complex", lambda: R.apply(X.astype(np.complex64)), TypeError, "x must have dtype"),
    ("x object", lambda: R.apply(X.astype(object)), TypeError, "x must have dtype"),
    ("x big-endian", lambda: R.apply(X.astype(">f4")), TypeError, "native byte order"),
    ("x too few dims", lambda: R.apply(X[0]), ValueError, "x must have at least 3 dims"),
    ("head_dim mismatch", lambda: R.apply(np.ones((2, 3, 6), np.float32)), ValueError, "x.shape[-1] must equal head_dim=8"),
    ("positions float", lambda: R.apply(X, [0.0, 1.0]), TypeError, "positions must be an integer array"),
    ("positions bool", lambda: R.apply(X, [True, False]), TypeError, "positions"),
    ("positions wrong length", lambda: R.apply(X, [0, 1, 2]), ValueError, "positions must have shape [seq]"),
    ("positions wrong batch", lambda: R.apply(np.ones((2, 2, 3, 8), np.float32), np.zeros((3, 2), int)), ValueError, "positions shape"),
    ("positions scalar", lambda: R.apply(X, 3), ValueError, "positions must have shape"),
    ("positions too large", lambda: R.apply(X, [0, 2**31]), ValueError, "positions must lie within"),
    ("positions too negative", lambda: R.apply(X, [-(2**31), 0]), ValueError, "positions must lie within"),
    ("positions uint64 huge", lambda: R.apply(X, np.array([2**63, 0], dtype=np.uint64)), OverflowError, "positions"),
    ("positions python huge", lambda: R.apply(X, [2**70, 0]), OverflowError, "positions"),
    ("positions and offset", lambda: R.apply(X, [0, 1], offset=3), ValueError, "either positions or offset"),
    ("offset float", lambda: R.apply(X, offset=1.5), TypeError, "offset must be an integer"),
    ("offset past range", lambda: R.apply(X, offset=2**31 - 1), ValueError, "offset"),
    ("seq_axis bad", lambda: R.apply(X, seq_axis=-1), ValueError, "seq_axis must be -3"),
    ("inverse str", lambda: R.apply(X, inverse="no"), TypeError, "inverse must be True or False, got str 'no'"),
    ("inverse list", lambda: R.apply(X, inverse=[]), TypeError, "inverse must be True or False, got list"),
    ("inverse int", lambda: R.apply(X, inverse=1), TypeError, "inverse must be True or False"),
    ("out read-only", lambda: R.apply(X, out=_readonly()), ValueError, "out is read-only"),
    ("out wrong shape", lambda: R.apply(X, out=np.ones((2, 3, 10), np.float32)), ValueError, "out must have the shape"),
    ("out wrong dtype", lambda: R.apply(X, out=np.ones((2, 3, 8), np.float64)), TypeError, "out must have dtype float32"),
    ("x read-only in place", lambda: (lambda a: R.apply(a, out=a))(_readonly()), ValueError, "is read-only"),
    ("qk dtype mismatch", lambda: R.apply_qk(X, X.astype(np.float64)), TypeError, "k must have dtype float32"),
    ("qk seq mismatch", lambda: R.apply_qk(X, np.ones((3, 3, 8), np.float32)), ValueError, "q and k must share"),
    ("qk out not pair", lambda: R.apply_qk(X, X, out=X), TypeError, "out must be None or a pair"),
    ("cos_sin float positions", lambda: R.cos_sin([1.5]), TypeError, "positions"),
    ("cos_sin past range", lambda: R.cos_sin([2**31]), ValueError, "positions"),
    ("isa unknown", lambda: pyrope.set_isa("sse9"), ValueError, "isa must be one of"),
]


@pytest.mark.parametrize("desc,call,exc,text", CASES, ids=[c[0] for c in CASES])
def test_bad_input(desc, call, exc, text):
    with pytest.raises(exc) as info:
        call()
    assert isinstance(info.value, RopeError), f"{desc}: {type(info.value)} is not a RopeError"
    assert text in str(info.value), f"{desc}: message {str(info.value)!r} lacks {text!r}"


def test_nothing_written_before_an_error():
    x = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    keep = x.copy()
    with pytest.raises(ValueError):
        R.apply(x, [0, 2**31], out=x)
    assert np.array_equal(x, keep)


def test_unknown_scaling_rejected():
    with pytest.raises(ValueError, match="scaling"):
        Rope(8, layout="split_half", scaling="nope")


def test_partially_overlapping_out_acts_as_if_separate():
    # out shifted one token along the same buffer: the result is what a
    # separate output would hold (numpy's "as if no overlap" rule).
    rope = Rope(8, layout="interleaved")
    buf = np.random.default_rng(3).standard_normal((6, 1, 8)).astype(np.float32)
    x, out = buf[0:5], buf[1:6]
    want = rope.apply(x.copy(), offset=7)
    got = rope.apply(x, offset=7, out=out)
    assert got is out
    assert np.array_equal(np.array(out).view(np.uint32), want.view(np.uint32))


def test_overlapping_qk_outputs_in_place_still_correct():
    rope = Rope(8, layout="split_half")
    base = np.random.default_rng(4).standard_normal((4, 2, 8)).astype(np.float32)
    q = base.copy()
    k = base[:, :1].copy()
    want_q, want_k = rope.apply(q, offset=2), rope.apply(k, offset=2)
    rope.apply_qk(q, k, offset=2, out=(q, k))
    assert np.array_equal(q.view(np.uint32), want_q.view(np.uint32))
    assert np.array_equal(k.view(np.uint32), want_k.view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_out_dtype_must_match_x(dtype):
    x = np.ones((2, 3, 8), dtype=dtype)
    with pytest.raises(TypeError, match="out must have dtype"):
        R.apply(x, out=np.ones((2, 3, 8), np.float32))
