"""TEMPORARY glue: torch tensors as numpy views, until ``Rope.apply``/``apply_qk``
accept CPU torch tensors themselves (``pyrope/_tensors.py``). Delete this module
and call the rope on the tensors directly once that lands.

No copies: float32/float16/float64 tensors are viewed with ``Tensor.numpy()``;
bfloat16 has no numpy dtype, so it is viewed as int16 and re-labelled as
``ml_dtypes.bfloat16`` (same bits). No autograd: callers hand tensors that
require grad to transformers' own code.
"""
import torch

_SERVED = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


def served(t):
    """Whether ``t`` is a CPU tensor of a dtype pyrope rotates (and needs no grad here)."""
    return (t.device.type == "cpu" and t.dtype in _SERVED
            and not (t.requires_grad and torch.is_grad_enabled()))


def as_numpy(t):
    """A numpy view of the CPU tensor ``t`` (bfloat16 as ml_dtypes.bfloat16)."""
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.detach().numpy()


def as_tensor(a, dtype):
    """The torch tensor sharing numpy array ``a``'s memory, of torch dtype ``dtype``."""
    if dtype == torch.bfloat16:
        import numpy as np
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def apply_qk(rope, q, k, positions, seq_axis):
    """``rope.apply_qk`` on tensors: new tensors back."""
    qr, kr = rope.apply_qk(as_numpy(q), as_numpy(k), positions, seq_axis=seq_axis)
    return as_tensor(qr, q.dtype), as_tensor(kr, k.dtype)


def apply(rope, x, positions, seq_axis):
    """``rope.apply`` on a tensor: a new tensor back."""
    return as_tensor(rope.apply(as_numpy(x), positions, seq_axis=seq_axis), x.dtype)
