"""The quantisation formulas of the engines, written again in numpy: the tests'
independent side of pyrope's quantised caches.

- int8 (per head): ``s = float32(max|x|) / 127``, ``q = rint(x / s)`` (ties
  to even) clipped to +-127.
- float8 e4m3fn (vLLM): ``x / scale`` in float32, clamped to +-448, rounded
  by ml_dtypes' own conversion.
- q8_0 (ggml): the gguf package's numpy quantiser and dequantiser, kept in
  llama.cpp's repository.

Where a formula would turn NaN or infinity into an integer (undefined in
C), pyrope defines the result (pyrope.h, rope_quant): a NaN value stores 0
(float8: 0x7F), and a NaN or infinite amax is the scale itself. The NaN
cases below follow that definition; every finite case is the formula alone.
"""
import numpy as np


def int8(x):
    """``(q, s)`` of float32 heads ``x [..., head_dim]``."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = (np.max(np.abs(x), axis=-1) / np.float32(127)).astype(np.float32)
        r = np.rint(x / s[..., None])
    q = np.where(np.isnan(r), 0, np.clip(np.nan_to_num(r, nan=0.0, posinf=127, neginf=-127), -127, 127))
    return q.astype(np.int8), s


def fp8(x, scale):
    """float8_e4m3fn bits (uint8) of float32 ``x`` over a static ``scale``."""
    import ml_dtypes
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.clip(x / np.float32(scale), -448, 448).astype(np.float32)
    bits = v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
    bits[np.isnan(v)] = 0x7F
    return bits


def q8_0(x):
    """ggml q8_0 blocks (uint8, 34 bytes per 32 values) of float32 ``x [..., head_dim]``, via gguf."""
    import gguf
    x = np.asarray(x, np.float32)
    flat = x.reshape(-1, x.shape[-1])
    blocks = gguf.quants.quantize(flat, gguf.GGMLQuantizationType.Q8_0)
    return blocks.reshape(x.shape[:-1] + (x.shape[-1] // 32 * 34,))


def quantised(kind, x, scale=None):
    """``(bytes [..., n], scales or None)`` of float32 heads ``x [..., head_dim]`` quantised as
    ``kind`` ("int8", "fp8" with its static ``scale``, "q8_0")."""
    if kind == "int8":
        q, s = int8(x)
        return q.view(np.uint8), s
    if kind == "fp8":
        return fp8(x, scale), None
    return q8_0(x), None


def q8_0_formula(x):
    """q8_0 blocks of float32 ``x [..., head_dim]`` by ggml's formulas written
    out (quantize_row_q8_0_ref), with the clip to +-127 where ggml converts
    an infinite ``x * id`` to int8 (undefined in C; 1/d overflows for
    amax below about 4e-37): for the corners gguf's numpy code cannot judge."""
    x = np.asarray(x, np.float32)
    b = x.reshape(x.shape[:-1] + (-1, 32))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = (np.max(np.abs(b), axis=-1) / np.float32(127)).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        v = (b * inv[..., None]).astype(np.float32)
    r = np.where(np.isnan(v), 0, np.clip(_roundf(v), -127, 127))
    out = np.empty(b.shape[:-1], [("d", np.float16), ("qs", np.int8, (32,))])
    out["d"] = d.astype(np.float16)
    out["qs"] = r.astype(np.int8)
    return out.view(np.uint8).reshape(x.shape[:-1] + (-1,))


def _roundf(v):
    """C's roundf: to nearest, ties away from zero (infinities kept)."""
    t = np.trunc(v)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(v - t) >= 0.5, t + np.sign(v), t)


def q8_0_values(blocks):
    """float32 values of q8_0 blocks (uint8 ``[..., n * 34]``), via gguf."""
    import gguf
    b = np.ascontiguousarray(blocks).view(np.uint8)
    flat = b.reshape(-1, b.shape[-1])
    values = gguf.quants.dequantize(flat, gguf.GGMLQuantizationType.Q8_0)
    return values.reshape(b.shape[:-1] + (b.shape[-1] // 34 * 32,)).astype(np.float32)
