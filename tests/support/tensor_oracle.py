"""The oracle of the tensor tests: pyrope.reference's exact rotation of any
``[*batch, seq, heads, dim]`` array, and the error bound of each storage type.

Bounds (derived in tests/kernel/test_dtypes.py's notes), with M = |x0| + |x1| of
the pair and f the attention factor: float32 4 * 2**-23 * |f| * M; float16
and bfloat16 that plus one rounding to the storage type (unit u) of the
result, plus half the smallest float16 subnormal; float64 6 * 2**-52 * |f| * M.
"""
import ml_dtypes
import numpy as np

from pyrope import reference
from tolerance import EPS32, pair_magnitudes

BF16 = np.dtype(ml_dtypes.bfloat16)
UNIT = {np.dtype(np.float16): 2.0**-11, BF16: 2.0**-8}


def numpy_of(t):
    """A float64 numpy copy of a torch tensor (any float dtype, bfloat16 too)."""
    return t.detach().to("cpu").double().numpy().copy()


def positions_per_token(positions, offset, batch_shape, n_seq):
    """int positions ``[*batch, seq]`` of every token."""
    if positions is None:
        pos = np.arange(offset, offset + n_seq)
    else:
        pos = np.asarray(positions)
    return np.broadcast_to(pos, tuple(batch_shape) + (n_seq,))


def expected(rope, x, positions=None, offset=0, seq_axis=-3, inverse=False):
    """float64 exact rotation of numpy ``x`` by the standard-library reference."""
    x64 = np.asarray(x, dtype=np.float64)
    tok = x64 if seq_axis == -3 else np.swapaxes(x64, -3, -2)
    batch_shape, n_seq = tok.shape[:-3], tok.shape[-3]
    pos = positions_per_token(positions, offset, batch_shape, n_seq)
    out = np.empty_like(tok)
    inv_freq = [float(w) for w in rope.inv_freq]
    for b in np.ndindex(*batch_shape):
        for s in range(n_seq):
            for h in range(tok.shape[-2]):
                out[b + (s, h)] = reference.rotate_with_inv_freq(
                    [float(v) for v in tok[b + (s, h)]], int(pos[b + (s,)]), inv_freq, layout=rope.layout,
                    inverse=inverse, attention_factor=rope.attention_factor)
    return out if seq_axis == -3 else np.swapaxes(out, -3, -2)


def assert_close(got, want, x, rope, dtype):
    """``got`` (float64 numpy) within the bound of storage ``dtype`` of ``want``,
    the exact rotation of ``x``."""
    mag = pair_magnitudes(np.asarray(x, np.float64), rope.rotary_dim, rope.layout) * abs(rope.attention_factor)
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        bound = 6 * 2.0**-52 * mag + 1e-300
    elif dtype == np.float32:
        bound = 4 * EPS32 * mag + 1e-37
    else:
        e32 = 4 * EPS32 * mag
        bound = e32 + UNIT[dtype] * (np.abs(want) + e32) + 2.0**-25
    err = np.abs(np.asarray(got, np.float64) - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (dtype, worst, err[worst], bound[worst])
