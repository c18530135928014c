"""pyrope's tensor entry points as torch custom ops (``torch.ops.pyrope``), for
``torch.compile``, ``torch.export`` and anything else that traces torch.

Imported (and the ops registered) when ``torch.compile`` or ``torch.export``
first traces a pyrope call on tensors, or by ``import pyrope.torch``; never by
``import pyrope``. Eager calls never pass through these ops: the edge
(``edge.py``) takes them directly, with less Python per call. Each op's kernel
is that eager call, so compiled, exported and eager calls give the same bits.

The ops, each with an in-place twin (trailing ``_``, ``mutates_args``):

- ``apply(x, positions, rope, offset, seq_axis, inverse, norm)``, ``apply_``
  (x in place), ``apply_out`` (into ``out``: a slot of a KV cache);
- ``apply_qk(q, k, positions, rope, offset, seq_axis, q_norm, k_norm)``,
  ``apply_qk_``;
- ``cos_sin(positions, rope, dtype)``;
- ``rerotate_(k, from_positions, to_positions, rope, seq_axis)``;
- ``cache_write_(k, v, k_cache, v_cache, slot_mapping, positions, offset,
  rope, norm, layout, k_scales, v_scales, k_scale, v_scale)``;
- ``shift_keys_(k_cache, slot_mapping, from_positions, to_positions, rope,
  layout, k_scales, k_scale)``.

A rope travels as its contract (``pyrope.contract``: the exact frequencies,
as sorted JSON), a norm as its own JSON, so a traced or
exported program names the very position function it was traced with, and
runs in any process where pyrope is installed (:func:`rope_of` rebuilds and
keeps it). Their fake (meta) kernels give shapes and dtypes without running C.
``apply`` and ``apply_qk`` are differentiable (without a norm): the backward
is the inverse rotation at the same positions, itself an op, so double
backward works.
"""
import builtins
import json
import sys
from typing import Optional, Tuple

import torch

from .._engine.checks import table_dtype
from ..errors import TypeError, ValueError

Tensor = torch.Tensor
NAMESPACE = "pyrope"

# ---- ropes and norms as op arguments --------------------------------------------------

_ROPES = {}   # canonical contract -> Rope (a model has few; each is small)
_NORMS = {}   # canonical norm -> RMSNorm
_MALFORMED = (builtins.ValueError, builtins.TypeError, KeyError, IndexError)   # what a bad key string raises


def _pyrope():
    return sys.modules["pyrope"]


@torch.compiler.assume_constant_result
def rope_key(rope):
    """The op argument standing for ``rope``: its contract (exact frequencies) as
    sorted JSON, computed when tracing, never traced."""
    key = json.dumps(rope.contract(), sort_keys=True, separators=(",", ":"))
    _ROPES.setdefault(key, rope)
    return key


def rope_of(key):
    """The Rope of an op argument made by :func:`rope_key` (rebuilt once per process
    from the contract: the same bits)."""
    rope = _ROPES.get(key)
    if rope is None:
        try:
            contract = json.loads(key)
        except _MALFORMED as exc:
            raise ValueError(f"rope: not a pyrope contract ({exc})") from None
        rope = _ROPES.setdefault(key, _pyrope().Rope.from_contract(contract))
    return rope


@torch.compiler.assume_constant_result
def norm_key(norm):
    """The op argument standing for an RMSNorm (or None: ""): eps, offset, over and
    the weights, exactly."""
    if norm is None:
        return ""
    weight = None if norm.weight is None else [float(w).hex() for w in norm.weight]
    key = json.dumps([float(norm.eps).hex(), bool(norm.unit_offset), norm.over, weight], separators=(",", ":"))
    _NORMS.setdefault(key, norm)
    return key


def norm_of(key):
    """The RMSNorm of an op argument made by :func:`norm_key` (None for "")."""
    if not key:
        return None
    norm = _NORMS.get(key)
    if norm is None:
        try:
            eps, unit_offset, over, weight = json.loads(key)
            weight = None if weight is None else [float.fromhex(w) for w in weight]
            eps = float.fromhex(eps)
        except _MALFORMED as exc:
            raise ValueError(f"norm: not a pyrope norm ({exc})") from None
        import numpy as np
        norm = _NORMS.setdefault(key, _pyrope().RMSNorm(
            None if weight is None else np.array(weight), eps=eps, unit_offset=unit_offset, over=over))
    return norm


# ---- the ops ---------------------------------------------------------------------------

def _op(name, mutates=()):
    return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=mutates, device_types="cpu")


def _rotated_like(x):
    # what the fake and real kernels both return: torch's layout for a new tensor like x
    return torch.empty_like(x)


@_op("apply")
def apply(x: Tensor, positions: Optional[Tensor], rope: str, offset: int, seq_axis: int, inverse: bool,
          norm: str) -> Tensor:
    out = _rotated_like(x)
    rope_of(rope).apply(x, positions, offset=offset, seq_axis=seq_axis, out=out, inverse=inverse,
                        norm=norm_of(norm))
    return out


@_op("apply_", mutates=("x",))
def apply_(x: Tensor, positions: Optional[Tensor], rope: str, offset: int, seq_axis: int, inverse: bool,
           norm: str) -> None:
    rope_of(rope).apply(x, positions, offset=offset, seq_axis=seq_axis, out=x, inverse=inverse, norm=norm_of(norm))


@_op("apply_out", mutates=("out",))
def apply_out(x: Tensor, out: Tensor, positions: Optional[Tensor], rope: str, offset: int, seq_axis: int,
              inverse: bool, norm: str) -> None:
    rope_of(rope).apply(x, positions, offset=offset, seq_axis=seq_axis, out=out, inverse=inverse,
                        norm=norm_of(norm))


@_op("apply_qk")
def apply_qk(q: Tensor, k: Tensor, positions: Optional[Tensor], rope: str, offset: int, seq_axis: int,
             q_norm: str, k_norm: str) -> Tuple[Tensor, Tensor]:
    out = (_rotated_like(q), _rotated_like(k))
    rope_of(rope).apply_qk(q, k, positions, offset=offset, seq_axis=seq_axis, out=out, q_norm=norm_of(q_norm),
                           k_norm=norm_of(k_norm))
    return out


@_op("apply_qk_", mutates=("q", "k"))
def apply_qk_(q: Tensor, k: Tensor, positions: Optional[Tensor], rope: str, offset: int, seq_axis: int,
              q_norm: str, k_norm: str) -> None:
    rope_of(rope).apply_qk(q, k, positions, offset=offset, seq_axis=seq_axis, out=(q, k), q_norm=norm_of(q_norm),
                           k_norm=norm_of(k_norm))


@_op("cos_sin")
def cos_sin(positions: Tensor, rope: str, dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    cos, sin = rope_of(rope).cos_sin(positions, dtype)
    return cos, sin


@_op("rerotate_", mutates=("k",))
def rerotate_(k: Tensor, from_positions: Tensor, to_positions: Tensor, rope: str, seq_axis: int) -> None:
    rope_of(rope).rerotate(k, from_positions, to_positions, seq_axis=seq_axis)


@_op("cache_write_", mutates=("k_cache", "v_cache", "k_scales", "v_scales"))
def cache_write_(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], slot_mapping: Tensor,
                 positions: Optional[Tensor], offset: int, rope: str, norm: str, layout: str,
                 k_scales: Optional[Tensor], v_scales: Optional[Tensor], k_scale: Optional[float],
                 v_scale: Optional[float]) -> None:
    rope_of(rope).cache_write(k, v, k_cache, v_cache, slot_mapping, positions=positions, offset=offset,
                              norm=norm_of(norm), layout=layout,
                              k_scale=k_scales if k_scales is not None else k_scale,
                              v_scale=v_scales if v_scales is not None else v_scale)


@_op("shift_keys_", mutates=("k_cache", "k_scales"))
def shift_keys_(k_cache: Tensor, slot_mapping: Tensor, from_positions: Tensor, to_positions: Tensor, rope: str,
                layout: str, k_scales: Optional[Tensor], k_scale: Optional[float]) -> None:
    rope_of(rope).shift_keys(k_cache, slot_mapping, from_positions, to_positions, layout=layout,
                             k_scale=k_scales if k_scales is not None else k_scale)


# ---- fake kernels: shapes and dtypes, checked as the call would check them -----------------

def _check_heads(name, x, rope):
    if x.dim() < 3 or x.shape[-1] != rope.head_dim:
        raise ValueError(f"{name} must be [..., seq, heads, head_dim] with head_dim={rope.head_dim}, "
                         f"got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"{name} must have dtype float32, float16, bfloat16 or float64, got {x.dtype}")


@apply.register_fake
def _(x, positions, rope, offset, seq_axis, inverse, norm):
    _check_heads("x", x, rope_of(rope))
    return _rotated_like(x)


@apply_.register_fake
def _(x, positions, rope, offset, seq_axis, inverse, norm):
    _check_heads("x", x, rope_of(rope))


@apply_out.register_fake
def _(x, out, positions, rope, offset, seq_axis, inverse, norm):
    _check_heads("x", x, rope_of(rope))
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out must have x's shape {tuple(x.shape)} and dtype {x.dtype}, "
                         f"got {tuple(out.shape)} {out.dtype}")


@apply_qk.register_fake
def _(q, k, positions, rope, offset, seq_axis, q_norm, k_norm):
    r = rope_of(rope)
    _check_heads("q", q, r)
    _check_heads("k", k, r)
    return _rotated_like(q), _rotated_like(k)


@apply_qk_.register_fake
def _(q, k, positions, rope, offset, seq_axis, q_norm, k_norm):
    r = rope_of(rope)
    _check_heads("q", q, r)
    _check_heads("k", k, r)


@cos_sin.register_fake
def _(positions, rope, dtype):
    r = rope_of(rope)
    shape = tuple(positions.shape)
    if r.mrope_section is not None and len(shape) >= 2 and shape[0] == len(r.mrope_section):
        shape = shape[1:]
    shape += (r.rotary_dim // 2,)
    return positions.new_empty(shape, dtype=dtype), positions.new_empty(shape, dtype=dtype)


@rerotate_.register_fake
def _(k, from_positions, to_positions, rope, seq_axis):
    _check_heads("k", k, rope_of(rope))


@cache_write_.register_fake
def _(k, v, k_cache, v_cache, slot_mapping, positions, offset, rope, norm, layout, k_scales, v_scales, k_scale,
      v_scale):
    pass


@shift_keys_.register_fake
def _(k_cache, slot_mapping, from_positions, to_positions, rope, layout, k_scales, k_scale):
    pass


# ---- autograd: the adjoint of a rotation is the inverse rotation -------------------------

def _setup_apply(ctx, inputs, output):
    _, positions, rope, offset, seq_axis, inverse, norm = inputs
    if norm:
        ctx.refused = "Rope.apply with norm= is not differentiable"
    ctx.positions, ctx.rope, ctx.offset, ctx.seq_axis, ctx.inverse = positions, rope, offset, seq_axis, inverse


def _backward_apply(ctx, grad):
    if getattr(ctx, "refused", None):
        raise ValueError(ctx.refused + ": normalise with torch and rotate without norm=")
    return (torch.ops.pyrope.apply(grad, ctx.positions, ctx.rope, ctx.offset, ctx.seq_axis, not ctx.inverse, ""),
            None, None, None, None, None, None)


def _setup_qk(ctx, inputs, output):
    _, _, positions, rope, offset, seq_axis, q_norm, k_norm = inputs
    if q_norm or k_norm:
        ctx.refused = "Rope.apply_qk with q_norm= or k_norm= is not differentiable"
    ctx.positions, ctx.rope, ctx.offset, ctx.seq_axis = positions, rope, offset, seq_axis


def _backward_qk(ctx, gq, gk):
    if getattr(ctx, "refused", None):
        raise ValueError(ctx.refused + ": normalise with torch and rotate without a norm")

    def back(g):
        return None if g is None else torch.ops.pyrope.apply(g, ctx.positions, ctx.rope, ctx.offset, ctx.seq_axis,
                                                             True, "")
    return (back(gq), back(gk), None, None, None, None, None, None)


apply.register_autograd(_backward_apply, setup_context=_setup_apply)
apply_qk.register_autograd(_backward_qk, setup_context=_setup_qk)


# ---- what Rope's methods call while torch traces them -------------------------------------

def _positions(p):
    """Positions as the ops take them: a tensor, or None."""
    if p is None or isinstance(p, Tensor):
        return p
    return torch.as_tensor(p, dtype=torch.int64)


def _int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int while torch traces pyrope, got {type(value).__name__}")
    return value


def _grad(*xs):
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in xs)


def traced_apply(rope, x, positions, offset, seq_axis, out, inverse, angles, norm):
    """``Rope.apply`` on tensors under tracing (``angles`` gives the same bits whatever it is)."""
    ops = torch.ops.pyrope
    args = (_positions(positions), rope_key(rope), _int("offset", offset), _int("seq_axis", seq_axis),
            bool(inverse), norm_key(norm))
    if out is None:
        return ops.apply(x, *args)
    if out is x:
        if _grad(x):   # autograd through the functional op; torch rebases x's history
            return x.copy_(ops.apply(x, *args))
        ops.apply_(x, *args)
        return x
    ops.apply_out(x, out, *args)
    return out


def traced_apply_qk(rope, q, k, positions, offset, seq_axis, out, angles, q_norm, k_norm):
    """``Rope.apply_qk`` on tensors under tracing."""
    ops = torch.ops.pyrope
    args = (_positions(positions), rope_key(rope), _int("offset", offset), _int("seq_axis", seq_axis),
            norm_key(q_norm), norm_key(k_norm))
    if out is None:
        return ops.apply_qk(q, k, *args)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"out must be None or a pair (q_out, k_out), got {type(out).__name__}")
    qo, ko = out
    if qo is q and ko is k and not _grad(q, k):
        ops.apply_qk_(q, k, *args)
        return q, k
    rq, rk = ops.apply_qk(q, k, *args)
    return (rq if qo is None else qo.copy_(rq)), (rk if ko is None else ko.copy_(rk))


@torch.compiler.assume_constant_result
def _table_dtype(dtype):
    """torch.float32 or torch.float64 for a cos_sin ``dtype`` (numpy's or torch's),
    worked out when tracing."""
    if dtype is torch.float32 or dtype is torch.float64:
        return dtype
    return torch.float32 if table_dtype(dtype).itemsize == 4 else torch.float64


def traced_cos_sin(rope, positions, dtype):
    """``Rope.cos_sin`` of tensor positions under tracing."""
    return torch.ops.pyrope.cos_sin(_positions(positions), rope_key(rope), _table_dtype(dtype))


def traced_rerotate(rope, k, from_positions, to_positions, seq_axis):
    """``Rope.rerotate`` on a tensor under tracing."""
    torch.ops.pyrope.rerotate_(k, _positions(from_positions), _positions(to_positions), rope_key(rope),
                               _int("seq_axis", seq_axis))
    return k


def _scales(name, scale):
    """``(scales tensor or None, static scale or None)`` of a cache_write/shift_keys scale argument."""
    if scale is None or isinstance(scale, Tensor):
        return scale, None
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return None, float(scale)
    raise TypeError(f"{name} must be None, a tensor of scales or a number while torch traces pyrope, "
                    f"got {type(scale).__name__}")


def traced_cache_write(rope, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout, k_scale,
                       v_scale):
    """``Rope.cache_write`` on tensors under tracing."""
    ks, kf = _scales("k_scale", k_scale)
    vs, vf = _scales("v_scale", v_scale)
    torch.ops.pyrope.cache_write_(k, v, k_cache, v_cache, _positions(slot_mapping), _positions(positions),
                                  _int("offset", offset), rope_key(rope), norm_key(norm), layout, ks, vs, kf, vf)
    return k_cache, v_cache


def traced_shift_keys(rope, k_cache, slot_mapping, from_positions, to_positions, layout, k_scale):
    """``Rope.shift_keys`` on tensors under tracing."""
    ks, kf = _scales("k_scale", k_scale)
    slots = _positions(slot_mapping)
    src, dst = _positions(from_positions), _positions(to_positions)
    torch.ops.pyrope.shift_keys_(k_cache, slots, src, dst, rope_key(rope), layout, ks, kf)
    return k_cache
