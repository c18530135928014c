"""Every tail and alignment: nothing outside the given rows is ever written.

For every dtype, every head_dim 2..80, every rotary_dim, both layouts and
every kernel, rows are placed at element-aligned byte offsets 0..63 inside a
buffer whose guard bytes before and after must come back unchanged; the
rotated values must equal the scalar specification bit for bit. Offsets that
are not a multiple of the element size (handled by an aligned copy) are
checked separately.
"""
import functools
import os

import numpy as np
import pytest

import pyrope
from pyrope import Rope
from pyrope._engine.dtypes import storage_dtypes

GUARD = 64
PATTERN = 0xA5
POSITIONS = np.array([3, 1000], dtype=np.int64)   # an int64 array: the direct path, as a decode batch takes it
DTYPES = list(storage_dtypes())   # bfloat16 too: ml_dtypes is imported for it
# `make sanitize` sets PYROPE_TEST_OFFSETS=few: under ASan the point is an access
# past the rows, which the tails decide; three offsets (aligned, one element past,
# one short of the next 64 bytes) still take every path, as kernels_identical's
# --quick does under emulation and ASan. `make test` sweeps every offset.
FEW_OFFSETS = os.environ.get("PYROPE_TEST_OFFSETS") == "few"


@functools.lru_cache(maxsize=None)
def cached_rope(head_dim, layout, rotary_dim):
    """One Rope per shape for the whole module: its tables (a pure function of
    the positions, the same bits under every ISA) are then built once, not once
    per ISA and storage type, the sweeps' largest cost."""
    return Rope(head_dim, layout=layout, rotary_dim=rotary_dim)


def aligned_offsets(item, span=64):
    """The element-aligned byte offsets within ``span`` a sweep places rows at."""
    return (0, item, span - item) if FEW_OFFSETS else range(0, span, item)


def guarded(n, dtype, offset, rng):
    """(byte buffer, view of n elements of dtype at byte `offset` after GUARD bytes)."""
    size = n * dtype.itemsize
    buf = np.full(GUARD + offset + size + GUARD, PATTERN, dtype=np.uint8)
    view = buf[GUARD + offset: GUARD + offset + size].view(dtype)
    view[...] = rng.standard_normal(n).astype(np.float32).astype(dtype)
    return buf, view


def guards_intact(buf, offset, nbytes):
    return bool(np.all(buf[:GUARD + offset] == PATTERN) and np.all(buf[GUARD + offset + nbytes:] == PATTERN))


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_every_tail_and_alignment_keeps_guards(isa, layout, dtype, rng):
    item = dtype.itemsize
    checked = 0
    for head_dim in range(2, 81, 2):
        for rotary_dim in range(2, head_dim + 1, 2):
            rope = cached_rope(head_dim, layout, rotary_dim)
            every = rotary_dim in (2, head_dim) or rotary_dim % 16 == 2
            offsets = aligned_offsets(item) if every else (item, 64 - item)
            n = 2 * head_dim
            # one input and its scalar result per (head_dim, rotary_dim), placed at every offset
            src = rng.standard_normal((2, 1, head_dim)).astype(np.float32).astype(dtype)
            with pyrope.forced_isa("scalar"):
                want = rope.apply(src, POSITIONS)
            for offset in offsets:
                buf, x = guarded(n, dtype, offset, rng)
                x[...] = src.reshape(-1)
                v = x.reshape(2, 1, head_dim)
                rope.apply(v, POSITIONS, out=v)                      # in place
                assert guards_intact(buf, offset, n * item), (head_dim, rotary_dim, offset)
                assert same_bits(v, want), (head_dim, rotary_dim, offset)
                o_off = (offset + 8 * item) % 64 // item * item
                obuf, out = guarded(n, dtype, o_off, rng)
                rope.apply(src, POSITIONS, out=out.reshape(2, 1, head_dim))   # into another buffer
                assert guards_intact(obuf, o_off, n * item)
                assert same_bits(out.reshape(2, 1, head_dim), want)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_common_head_dims_several_heads_keep_guards(isa, layout, dtype, rng):
    # The kernels have paths of their own for rotary_dim 128 (head_dim 128,
    # the common case) and, interleaved float32, for a token's heads back to
    # back when there are 512 pairs or more: nine heads of a token, every
    # element-aligned byte offset in 64, in place and into another buffer,
    # both directions.
    item, heads = dtype.itemsize, 9
    for head_dim, rotary_dim in [(128, 128), (136, 128), (256, 128), (256, 256), (128, 64)]:
        rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
        n = 2 * heads * head_dim
        for offset in aligned_offsets(item):
            for inverse in (False, True):
                buf, x = guarded(n, dtype, offset, rng)
                src = x.copy().reshape(2, heads, head_dim)
                with pyrope.forced_isa("scalar"):
                    want = rope.apply(src, POSITIONS, inverse=inverse)
                v = x.reshape(2, heads, head_dim)
                rope.apply(v, POSITIONS, out=v, inverse=inverse)
                assert guards_intact(buf, offset, n * item), (head_dim, rotary_dim, offset)
                assert same_bits(v, want), (head_dim, rotary_dim, offset, inverse)
                obuf, out = guarded(n, dtype, (offset + 16) % 64 // item * item, rng)
                rope.apply(src, POSITIONS, out=out.reshape(2, heads, head_dim), inverse=inverse)
                assert guards_intact(obuf, (offset + 16) % 64 // item * item, n * item)
                assert same_bits(out.reshape(2, heads, head_dim), want)


def test_random_large_tokens_match_scalar_and_keep_guards(isa, rng):
    # Random tokens of up to 40 heads (the kernels pick their path by pairs
    # per token, head stride and alignment), full or partial rotary, any
    # element-aligned offset, heads back to back or with a gap between them.
    for _ in range(150):
        dtype = DTYPES[rng.integers(len(DTYPES))]
        layout = ("interleaved", "split_half")[rng.integers(2)]
        head_dim = int(rng.choice([64, 96, 128, 256]))
        rotary_dim = head_dim if rng.random() < 0.6 else int(rng.integers(1, head_dim // 2 + 1)) * 2
        heads, gap, seq = int(rng.integers(1, 41)), int(rng.choice([0, 0, 2, 8])), int(rng.integers(1, 4))
        item = dtype.itemsize
        offset = int(rng.integers(0, 64 // item)) * item
        stride = head_dim + gap
        n = seq * heads * stride
        buf, flat = guarded(n, dtype, offset, rng)
        x = np.lib.stride_tricks.as_strided(flat, (seq, heads, head_dim),
                                            (heads * stride * item, stride * item, item))
        rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
        positions = rng.integers(-2**31 + 1, 2**31, size=seq)
        inverse = bool(rng.integers(2))
        before = flat.copy()
        with pyrope.forced_isa("scalar"):
            want = rope.apply(np.array(x), positions, inverse=inverse)
        rope.apply(x, positions, out=x, inverse=inverse)
        case = (dtype.name, layout, head_dim, rotary_dim, heads, gap, seq, offset, inverse)
        assert guards_intact(buf, offset, n * item), case
        assert same_bits(x, want), case
        if gap:  # the gaps between heads are not touched either
            mask = np.ones((seq, heads, stride), bool)
            mask[:, :, :head_dim] = False
            assert same_bits(flat.reshape(seq, heads, stride)[mask], before.reshape(seq, heads, stride)[mask]), case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_misaligned_offsets_are_handled(isa, dtype, rng):
    # Views at byte offsets that are not a multiple of the element size.
    rope = Rope(20, layout="interleaved", rotary_dim=14)
    for offset in range(1, 64):
        if offset % dtype.itemsize == 0:
            continue
        buf, x = guarded(3 * 20, dtype, offset, rng)
        v = x.reshape(3, 1, 20)
        want = rope.apply(np.array(v), [0, 1, 2])
        rope.apply(v, [0, 1, 2], out=v)
        assert guards_intact(buf, offset, 60 * dtype.itemsize)
        assert same_bits(v, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", ["interleaved", "split_half"])
def test_heads_off_a_32_byte_boundary_match_scalar(isa, layout, dtype, rng):
    # Several heads whose stride is a multiple of 32 bytes, starting at every
    # element-aligned offset inside 32 bytes (numpy puts large arrays 16 bytes
    # past a page): the float32 split-half kernel first rotates the pairs
    # before the boundary, then whole vectors; every kernel must match the
    # scalar one bit for bit.
    for head_dim, rotary_dim in ((64, 64), (128, 128), (128, 96), (48, 40)):
        rope = Rope(head_dim, layout=layout, rotary_dim=rotary_dim)
        n = 3 * 5 * head_dim
        for offset in aligned_offsets(dtype.itemsize, 32):
            buf, x = guarded(n, dtype, offset, rng)
            v = x.reshape(3, 5, head_dim)
            with pyrope.forced_isa("scalar"):
                want = rope.apply(np.array(v), [7, 500, 90000], inverse=offset % 3 == 1)
            rope.apply(v, [7, 500, 90000], out=v, inverse=offset % 3 == 1)
            assert guards_intact(buf, offset, n * dtype.itemsize), (head_dim, offset)
            assert same_bits(v, want), (head_dim, rotary_dim, offset)
