"""llama.cpp's K-shift of a quantised cache, written again in numpy float32: the
other side that tests/api/test_shift_accuracy.py and bench/accuracy_shift.py
hold pyrope's ``Rope.shift_keys`` against.

What llama.cpp does (src/llama-kv-cache.cpp, ``llama_kv_cache::build_rope_shift``,
the ``ggml_is_quantized(cur->type)`` branch, "dequantize to f32 -> RoPE ->
quantize back")::

    tmp = ggml_cast(ctx, cur, GGML_TYPE_F32);            // dequantize_row_q8_0
    tmp = ggml_rope_ext(ctx, tmp, shift, factors, n_rot, rope_type, n_ctx_orig,
                        freq_base, freq_scale, yarn_ext_factor, yarn_attn_factor,
                        yarn_beta_fast, yarn_beta_slow);  // ggml-cpu/ops.cpp, rope_f32
    tmp = ggml_cpy(ctx, tmp, cur);                       // CPU from_float: quantize_row_q8_0

with ``shift`` each cell's accumulated position change (``set_input_k_shift``:
``cells.get_shift(i)``), an int32 passed to the rope as its *position*. A
float cache is rotated in place (``ggml_rope_ext_inplace``), no cast. Newer
llama.cpp inserts a Walsh-Hadamard product before and after the rope when the
K cache stores Hadamard-rotated keys; this module emulates the sequence
without it.

The rope, ggml/src/ggml-cpu/ops.cpp (``ggml_compute_forward_rope_flt``,
``ggml_rope_cache_init``, ``rope_yarn``, ``rotate_pairs``), for plain RoPE
(``freq_scale = 1``, ``ext_factor = 0``, ``attn_factor = 1``, no frequency
factors), all in float::

    const float theta_scale = powf(freq_base, -2.0f/n_dims);
    float theta = theta_base;                 // the position p, converted to float
    for (i0 = 0; i0 < ne0; i0 += 2) {
        cache[i0 + 0] = cosf(theta) * mscale; // rope_yarn: theta_interp = freq_scale * theta_extrap
        cache[i0 + 1] = sinf(theta) * mscale;
        theta *= theta_scale;
    }
    // rotate_pairs: NEOX (split half) n_offset = n_dims/2, pair (i0/2, i0/2 + n_dims/2);
    //               NORMAL (interleaved) n_offset = 1, pair (i0, i0 + 1)
    dst[0]        = x0*cos_theta - x1*sin_theta;
    dst[n_offset] = x0*sin_theta + x1*cos_theta;

``powf``, ``cosf`` and ``sinf`` are the C library's (loaded with ctypes); on a
system without one they are float64 results rounded to float32
(:data:`LIBM` says which). The rotation is two float32 products and a float32
sum, each rounded: a compiler that contracts them into a fused multiply-add
(GCC's default for C++ on a target with FMA) changes the result by at most one
float32 rounding, far below any 8-bit step.

The quantisers, q8_0 (34 bytes: float16 ``d``, 32 int8 ``qs``):

- :func:`quantize_q8_0_cpu`: what ``ggml_cpy`` (and the cache write,
  ``ggml_set_rows``) calls on an x86 CPU with AVX or AVX2, ``quantize_row_q8_0``
  in ggml/src/ggml-cpu/arch/x86/quants.c: ``d = maxScalar / 127.f``,
  ``id = maxScalar != 0 ? 127.f / maxScalar : 0``, ``_mm256_round_ps(v * id,
  _MM_ROUND_NEAREST)`` (ties to even), ``d`` stored by ``GGML_CPU_FP32_TO_FP16``
  (to nearest even);
- :func:`quantize_q8_0_ref`: ``quantize_row_q8_0_ref`` (ggml/src/ggml-quants.c),
  the generic fallback and the formula pyrope follows: ``d = amax / 127``,
  ``id = d ? 1.0f/d : 0.0f``, ``roundf(x * id)`` (ties away from zero).

They differ where ``127/amax`` and ``1/(amax/127)`` round apart, and at exact
ties. Finite inputs only: NaN handling is not emulated.
"""
import ctypes
import ctypes.util

import numpy as np

F32 = np.float32
#: ggml's ``block_q8_0``: float16 ``d``, then 32 int8 ``qs``; 34 bytes, unaligned.
Q8_0 = np.dtype([("d", np.float16), ("qs", np.int8, (32,))])


def _load_libm():
    name = ctypes.util.find_library("m")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        lib = None
    if lib is None:
        return None
    for fn in ("powf", "cosf", "sinf"):
        getattr(lib, fn).restype = ctypes.c_float
    lib.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    lib.cosf.argtypes = [ctypes.c_float]
    lib.sinf.argtypes = [ctypes.c_float]
    return lib


_LIBM = _load_libm()
#: where powf, cosf and sinf come from: the C library's name, or the float64 stand-in.
LIBM = ctypes.util.find_library("m") if _LIBM is not None else "float64 rounded to float32"


def powf(x, y):
    if _LIBM is not None:
        return F32(_LIBM.powf(float(F32(x)), float(F32(y))))
    return F32(np.float64(F32(x)) ** np.float64(F32(y)))


def _elementwise(fn, fallback, theta):
    theta = np.asarray(theta, F32)
    if _LIBM is None:
        return fallback(theta.astype(np.float64)).astype(F32)
    out = np.empty_like(theta)
    flat, res = theta.reshape(-1), out.reshape(-1)
    for i, t in enumerate(flat.tolist()):
        res[i] = fn(t)
    return out


def cosf(theta):
    return _elementwise(getattr(_LIBM, "cosf", None), np.cos, theta)


def sinf(theta):
    return _elementwise(getattr(_LIBM, "sinf", None), np.sin, theta)


def theta_scale(freq_base, n_dims):
    """``powf(freq_base, -2.0f/n_dims)``: the float ratio of consecutive frequencies."""
    return powf(F32(freq_base), F32(-2.0) / F32(n_dims))


def rope_cache(positions, n_dims, freq_base):
    """``(cos, sin)`` float32 ``[len(positions), n_dims/2]``: ggml_rope_cache_init
    at each (int32) position, theta multiplied by theta_scale pair after pair."""
    ts = theta_scale(freq_base, n_dims)
    pos = np.asarray(positions, np.int64).reshape(-1)
    assert np.all(np.abs(pos) < 2 ** 31), "ggml positions are int32"
    theta = pos.astype(F32)                      # float theta = theta_base (an int64 p)
    thetas = np.empty((pos.size, n_dims // 2), F32)
    for i in range(n_dims // 2):
        thetas[:, i] = theta
        theta = (theta * ts).astype(F32)         # theta *= theta_scale
    # rope_yarn with ext_factor 0, freq_scale 1, mscale 1: cosf(theta) * 1, sinf(theta) * 1
    uniq, inverse = np.unique(thetas, return_inverse=True)
    cos, sin = cosf(uniq)[inverse].reshape(thetas.shape), sinf(uniq)[inverse].reshape(thetas.shape)
    return cos, sin


def rope_f32(x, positions, freq_base, layout):
    """ggml_rope_ext on float32 ``x [tokens, heads, head_dim]``, every dimension
    rotated (``n_rot = head_dim``), token t at ``positions[t]``. ``layout``:
    "split_half" (GGML_ROPE_TYPE_NEOX) or "interleaved" (GGML_ROPE_TYPE_NORMAL)."""
    x = np.asarray(x, F32)
    n_dims = x.shape[-1]
    cos, sin = rope_cache(np.broadcast_to(positions, x.shape[:1]), n_dims, freq_base)
    cos, sin = cos[:, None, :], sin[:, None, :]
    if layout == "split_half":
        x0, x1 = x[..., : n_dims // 2], x[..., n_dims // 2:]
    elif layout == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
    else:
        raise ValueError(layout)
    # two rounded products and a rounded difference (or sum), all float32
    y0 = (x0 * cos).astype(F32) - (x1 * sin).astype(F32)
    y1 = (x0 * sin).astype(F32) + (x1 * cos).astype(F32)
    out = np.empty_like(x)
    if layout == "split_half":
        out[..., : n_dims // 2], out[..., n_dims // 2:] = y0, y1
    else:
        out[..., 0::2], out[..., 1::2] = y0, y1
    return out


def dequantize_q8_0(blocks):
    """dequantize_row_q8_0: ``qs * d`` in float32, ``blocks [..., n]`` of :data:`Q8_0`
    -> ``[..., n * 32]`` (each product exact: 8 by 11 significant bits)."""
    blocks = np.asarray(blocks).view(Q8_0)
    values = blocks["qs"].astype(F32) * blocks["d"].astype(F32)[..., None]
    return values.reshape(blocks.shape[:-1] + (-1,))


def _blocks_of(x):
    x = np.asarray(x, F32)
    assert x.shape[-1] % 32 == 0
    return x.reshape(x.shape[:-1] + (-1, 32))


def quantize_q8_0_cpu(x):
    """quantize_row_q8_0 of ggml-cpu/arch/x86/quants.c (AVX/AVX2 path) on float32
    ``x [..., head_dim]`` -> blocks ``[..., head_dim/32]`` of :data:`Q8_0`."""
    b = _blocks_of(x)
    max_scalar = np.max(np.abs(b), axis=-1)                        # maxAbs over the 32 values
    d = (max_scalar / F32(127)).astype(F32)                        # const float d = maxScalar / 127.f
    with np.errstate(divide="ignore"):
        inv = np.where(max_scalar != 0, F32(127) / max_scalar, F32(0)).astype(F32)   # 127.f / maxScalar
    v = (b * inv[..., None]).astype(F32)                           # _mm256_mul_ps(v, mul)
    q = np.rint(v)                                                 # _MM_ROUND_NEAREST: ties to even
    out = np.empty(b.shape[:-1], Q8_0)
    out["d"] = d.astype(np.float16)                                # GGML_CPU_FP32_TO_FP16: to nearest even
    out["qs"] = np.clip(q, -128, 127).astype(np.int8)              # packs_epi32 / packs_epi16 saturate
    return out


def quantize_q8_0_ref(x):
    """quantize_row_q8_0_ref (ggml-quants.c) on float32 ``x [..., head_dim]``."""
    b = _blocks_of(x)
    amax = np.max(np.abs(b), axis=-1)
    d = (amax / F32(127)).astype(F32)                              # const float d = amax / ((1 << 7) - 1)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)     # const float id = d ? 1.0f/d : 0.0f
    v = (b * inv[..., None]).astype(F32)                           # x[i*QK8_0 + j]*id
    t = np.trunc(v)
    q = np.where(np.abs(v - t) >= 0.5, t + np.sign(v), t)          # roundf: ties away from zero
    out = np.empty(b.shape[:-1], Q8_0)
    out["d"] = d.astype(np.float16)                                # GGML_FP32_TO_FP16
    out["qs"] = q.astype(np.int8)
    return out


def k_shift_q8_0(blocks, shift, freq_base, layout, quantize=quantize_q8_0_cpu):
    """One K-shift of a q8_0 cache ``blocks [tokens, heads, head_dim/32]``: cast to
    float32, rope by ``shift`` (one int per token, or one for all), copy back."""
    tmp = dequantize_q8_0(blocks)                                  # ggml_cast(ctx, cur, GGML_TYPE_F32)
    tmp = rope_f32(tmp, shift, freq_base, layout)                  # ggml_rope_ext(..., shift, ...)
    return quantize(tmp)                                           # ggml_cpy(ctx, tmp, cur)


def k_shift_f32(x, shift, freq_base, layout):
    """One K-shift of a float32 cache: ggml_rope_ext_inplace, no cast."""
    return rope_f32(x, shift, freq_base, layout)


class KShift:
    """A cache of ``tokens x heads`` keys of one kind ("q8_0", "int8", "fp8", "float32"),
    moved shift after shift as llama.cpp moves it: q8_0 by :func:`k_shift_q8_0`; int8
    and float8 (which llama.cpp lacks: the same cast, ggml rope, cast back) dequantised,
    rotated by :func:`rope_f32` and quantised by the formulas of quant_formulas.py;
    float32 rotated in place. ``cache``, ``scale``: the first cache and its int8 scales
    (float8: ``fp8_scale``)."""

    def __init__(self, kind, cache, scale, tokens, heads, fp8_scale):
        import quant_formulas
        self.kind, self.fp8_scale, self._quant = kind, fp8_scale, quant_formulas
        flat = np.asarray(cache).reshape(tokens, heads, -1)
        if kind == "q8_0":
            self.state = flat.view(Q8_0).copy()
        elif kind == "int8":
            self.state = (flat.copy(), np.asarray(scale).reshape(tokens, heads).copy())
        elif kind == "fp8":
            self.state = flat.view(np.uint8).copy()
        else:
            self.state = flat.copy()

    def values(self):
        """float32 ``[tokens, heads, head_dim]`` of what the cache holds."""
        if self.kind == "q8_0":
            return dequantize_q8_0(self.state)
        if self.kind == "int8":
            q, s = self.state
            return q.astype(F32) * s[..., None]
        if self.kind == "fp8":
            import ml_dtypes
            return self.state.view(ml_dtypes.float8_e4m3fn).astype(F32) * F32(self.fp8_scale)
        return self.state

    def shift(self, delta, base, layout):
        """Every key moved by ``delta`` positions (an int, or one per token)."""
        if self.kind == "q8_0":
            self.state = k_shift_q8_0(self.state, delta, base, layout)
            return
        x = rope_f32(self.values(), delta, base, layout)
        if self.kind == "int8":
            self.state = self._quant.int8(x)
        elif self.kind == "fp8":
            self.state = self._quant.fp8(x, self.fp8_scale)
        else:
            self.state = x

