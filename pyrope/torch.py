"""pyrope's torch custom ops: ``import pyrope.torch`` registers ``torch.ops.pyrope``.

``Rope.apply``, ``apply_qk``, ``cos_sin``, ``rerotate``, ``cache_write`` and
``shift_keys`` on torch tensors need nothing more: under ``torch.compile`` and
``torch.export`` they call these ops themselves (registering them on the
first traced call), and eager calls take the shorter path that skips them.
Import this module to use the ops by name (``torch.ops.pyrope.apply``), to
load a saved ``torch.export`` program that calls them, or to run
``torch.library.opcheck``. What each op takes: ``pyrope._interop.torch_ops``.
``import pyrope`` alone never imports torch.
"""
from ._interop.torch_ops import NAMESPACE, norm_key, norm_of, rope_key, rope_of  # noqa: F401 (registers the ops)

import torch as _torch

ops = getattr(_torch.ops, NAMESPACE)   # torch.ops.pyrope

__all__ = ["ops", "rope_key", "rope_of", "norm_key", "norm_of"]
