"""The direct path (``_direct`` in pyrope/rope.py): C-contiguous arrays with
cached table rows go through a memoised kernel call; every result must be the
general path's, bit for bit."""
import numpy as np
import pytest

from pyrope import Rope

import ml_dtypes  # noqa: E402 - the test extra installs it
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    return np.ascontiguousarray(a).view(UINT[a.dtype.itemsize])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_direct_path_equals_general_path(isa, dtype, rng):
    # Contiguous arrays with offset= take the memoised direct path once rows are
    # cached; the same data through a strided view takes the general path.
    rope = Rope(32, layout="split_half", rotary_dim=24)
    for seq_axis, shape in ((-3, (2, 5, 3, 32)), (-2, (2, 3, 5, 32))):
        q = rng.standard_normal(shape).astype(dtype)
        k_shape = (2, 5, 1, 32) if seq_axis == -3 else (2, 1, 5, 32)   # one k head
        k = rng.standard_normal(k_shape).astype(dtype)
        rope.apply(q, offset=40, seq_axis=seq_axis)          # fills the cache
        slow_q = rope.apply(np.asfortranarray(q), offset=40, seq_axis=seq_axis)
        slow_k = rope.apply(np.asfortranarray(k), offset=40, seq_axis=seq_axis)
        assert np.array_equal(bits(rope.apply(q, offset=40, seq_axis=seq_axis)), bits(slow_q))
        fq, fk = rope.apply_qk(q, k, offset=40, seq_axis=seq_axis)
        assert np.array_equal(bits(fq), bits(slow_q)) and np.array_equal(bits(fk), bits(slow_k))
        q2, k2 = q.copy(), k.copy()
        rope.apply_qk(q2, k2, offset=40, seq_axis=seq_axis, out=(q2, k2))
        assert np.array_equal(bits(q2), bits(slow_q)) and np.array_equal(bits(k2), bits(slow_k))
        back = rope.apply(fq, offset=40, seq_axis=seq_axis, inverse=True)
        assert np.array_equal(bits(back), bits(rope.apply(np.asfortranarray(fq), offset=40,
                                                          seq_axis=seq_axis, inverse=True)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_direct_path_with_explicit_positions(isa, dtype, rng):
    # int64 C-contiguous positions take the direct path; int32 positions the general one.
    rope = Rope(32, layout="interleaved")
    x = rng.standard_normal((4, 1, 3, 32)).astype(dtype)          # ragged decode: one token each
    k = rng.standard_normal((4, 1, 1, 32)).astype(dtype)
    pos = np.array([[7], [300], [5000], [12]], dtype=np.int64)
    first = rope.apply(x, pos)                                     # general path, fills the cache
    assert np.array_equal(bits(rope.apply(x, pos)), bits(first))  # direct path
    assert np.array_equal(bits(first), bits(rope.apply(x, pos.astype(np.int32))))
    fq, fk = rope.apply_qk(x, k, pos)
    assert np.array_equal(bits(fq), bits(first))
    assert np.array_equal(bits(fk), bits(rope.apply(k, pos.astype(np.int32))))
    seq_pos = np.arange(3, dtype=np.int64) + 40                    # shape [seq], shared by the batch
    y = rng.standard_normal((2, 3, 2, 32)).astype(dtype)
    want = rope.apply(y, seq_pos.astype(np.int32))
    assert np.array_equal(bits(rope.apply(y, seq_pos)), bits(want))
    # Outside the cached rows: the direct path steps aside, the cache grows, the result is right.
    far = np.array([[10**9], [10**9 + 1], [3], [4]], dtype=np.int64)
    got = rope.apply(x, far)
    assert np.array_equal(bits(got), bits(rope.apply(x, far, angles="on_the_fly")))
    # Bad positions still raise, and nothing is written.
    keep = x.copy()
    with pytest.raises(ValueError, match="positions must lie within"):
        rope.apply(x, np.array([[0], [2**31], [0], [0]], dtype=np.int64), out=x)
    assert np.array_equal(bits(x), bits(keep))
