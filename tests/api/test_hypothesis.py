"""Property-based search over shapes, strides, offsets, layouts, rotary dims
and positions: every result must match the reference within the derived
bound, whatever view of memory the arrays are."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyrope import Rope, reference
from tolerance import assert_rotation_close

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    head_dim = 2 * draw(st.integers(1, 40))
    rotary_dim = 2 * draw(st.integers(1, head_dim // 2))
    layout = draw(st.sampled_from(["interleaved", "split_half"]))
    base = draw(st.sampled_from([10.0, 1e4, 5e5, 1e7]))
    n_batch, n_seq, n_heads = draw(st.integers(0, 3)), draw(st.integers(0, 5)), draw(st.integers(1, 4))
    seq_axis = draw(st.sampled_from([-3, -2]))
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in range(3)]
    pad = draw(st.integers(0, 3))              # extra coordinates beyond head_dim, sliced away
    big = draw(st.booleans())
    if draw(st.booleans()):
        positions, offset = None, draw(st.integers(-2**31 + 1, 2**31 - 6) if big else st.integers(-50, 5000))
    else:
        lim = 2**31 - 1 if big else 5000
        positions = np.array(draw(st.lists(st.integers(-lim, lim), min_size=n_seq, max_size=n_seq)),
                             dtype=np.int64)
        offset = 0
        if draw(st.booleans()) and n_batch:
            positions = np.stack([positions + i for i in range(n_batch)])
            positions = np.clip(positions, -lim, lim)
    mode = draw(st.sampled_from(["new", "in_place", "out"]))
    inverse = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return (head_dim, rotary_dim, layout, base, n_batch, n_seq, n_heads, seq_axis, steps, pad,
            positions, offset, mode, inverse, seed)


@SETTINGS
@given(cases())
def test_matches_reference_on_any_view(case):
    (head_dim, rotary_dim, layout, base, n_batch, n_seq, n_heads, seq_axis, steps, pad,
     positions, offset, mode, inverse, seed) = case
    rng = np.random.default_rng(seed)
    rope = Rope(head_dim, layout=layout, base=base, rotary_dim=rotary_dim)
    shape = [n_batch, n_seq, n_heads] if seq_axis == -3 else [n_batch, n_heads, n_seq]
    full = rng.standard_normal([abs(s) * max(n, 1) for s, n in zip(steps, shape)] + [head_dim + pad])
    full = full.astype(np.float32)
    x = full[tuple(slice(None, None, s) for s in steps)][:shape[0], :shape[1], :shape[2], :head_dim]
    assert list(x.shape) == shape + [head_dim]
    before = full.copy()
    original = np.array(x)
    if mode == "new":
        y = rope.apply(x, positions, offset=offset, seq_axis=seq_axis, inverse=inverse)
        assert np.array_equal(full.view(np.uint32), before.view(np.uint32))  # input untouched
    elif mode == "in_place":
        y = rope.apply(x, positions, offset=offset, seq_axis=seq_axis, inverse=inverse, out=x)
        assert y is x
        # the coordinates sliced away past head_dim are never written
        assert np.array_equal(full[..., head_dim:].view(np.uint32), before[..., head_dim:].view(np.uint32))
    else:
        out = np.full(x.shape, np.nan, dtype=np.float32)
        y = rope.apply(x, positions, offset=offset, seq_axis=seq_axis, inverse=inverse, out=out)
        assert y is out
    tok = np.moveaxis(np.array(y), -2, -3) if seq_axis == -2 else np.array(y)
    src = np.moveaxis(original, -2, -3) if seq_axis == -2 else original
    inv = [float(w) for w in rope.inv_freq]
    want = np.empty(src.shape, dtype=np.float64)
    for b in range(n_batch):
        for s in range(n_seq):
            if positions is None:
                pos = offset + s
            else:
                pos = int(positions[s] if positions.ndim == 1 else positions[b, s])
            for h in range(n_heads):
                want[b, s, h] = reference.rotate_with_inv_freq(
                    [float(v) for v in src[b, s, h]], pos, inv, layout=layout, inverse=inverse)
    assert_rotation_close(tok, want, src, rotary_dim, layout)
