"""Every tail and alignment: nothing outside the given rows is ever written.

For every head_dim 2..80, every rotary_dim, both layouts and every kernel,
a row is placed at each start offset 0..63 bytes inside a buffer whose guard
bytes before and after it must come back unchanged; the rotated values are
checked against the scalar specification.
"""
import numpy as np
import pytest

import pyrope
from pyrope import Rope

GUARD = 64
PATTERN = 0xA5


def guarded(n_floats, offset, rng):
    """(buffer, float32 view of n_floats at byte offset `offset` after GUARD bytes)."""
    buf = np.full(GUARD + offset + 4 * n_floats + GUARD, PATTERN, dtype=np.uint8)
    view = buf[GUARD + offset: GUARD + offset + 4 * n_floats].view(np.float32)
    view[...] = rng.standard_normal(n_floats).astype(np.float32)
    return buf, view


def guards_intact(buf, offset, n_floats):
    before = buf[:GUARD + offset]
    after = buf[GUARD + offset + 4 * n_floats:]
    return bool(np.all(before == PATTERN) and np.all(after == PATTERN))


@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_every_tail_and_alignment_keeps_guards(isa, layout, rng):
    checked = 0
    for head_dim in range(2, 81, 2):
        for rotary_dim in range(2, head_dim + 1, 2):
            rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
            offsets = range(0, 64, 4) if rotary_dim in (2, head_dim) or rotary_dim % 16 == 2 else (0, 4, 28, 60)
            for offset in offsets:
                # in place, two tokens of one head: [seq=2, heads=1, head_dim]
                buf, x = guarded(2 * head_dim, offset, rng)
                src = x.copy()
                with pyrope.forced_isa("scalar"):
                    want = rope.apply(src.reshape(2, 1, head_dim), [3, 70000])
                rope.apply(x.reshape(2, 1, head_dim), [3, 70000], out=x.reshape(2, 1, head_dim))
                assert guards_intact(buf, offset, 2 * head_dim), (head_dim, rotary_dim, offset)
                assert np.array_equal(x.view(np.uint32), want.reshape(-1).view(np.uint32))
                # out of place into a guarded output
                obuf, out = guarded(2 * head_dim, (offset + 8) % 64, rng)
                rope.apply(src.reshape(2, 1, head_dim), [3, 70000], out=out.reshape(2, 1, head_dim))
                assert guards_intact(obuf, (offset + 8) % 64, 2 * head_dim)
                assert np.array_equal(out.view(np.uint32), want.reshape(-1).view(np.uint32))
                checked += 1
    assert checked > 3000


def test_odd_byte_offsets_are_handled(isa, rng):
    # Views at 1..3 bytes past alignment: results equal the aligned computation.
    rope = Rope(20, layout="interleaved", rotary_dim=14)
    for offset in (1, 2, 3, 5, 63):
        buf, x = guarded(3 * 20, offset, rng)
        v = x.reshape(3, 1, 20)
        want = rope.apply(np.array(v), [0, 1, 2])
        rope.apply(v, [0, 1, 2], out=v)
        assert guards_intact(buf, offset, 60)
        assert np.array_equal(np.array(v).view(np.uint32), want.view(np.uint32))
