"""Multimodal rotary sections (M-RoPE): which position component each pair turns by.

A sectioned rope gives every token ``k`` positions (Qwen2-VL: temporal,
height, width; ``k`` = 3 or 4) and every rotation pair one of them:

- contiguous (Qwen2/2.5-VL, ``mrope_interleaved=False``): ``mrope_section``
  counts pairs per component, in order: ``[16, 24, 24]`` gives pairs 0-15 the
  temporal position, 16-39 the height, 40-63 the width;
- interleaved (Qwen3-VL, ``mrope_interleaved=True``): pair ``j`` takes
  component ``c >= 1`` when ``j % k == c`` and ``j < k * mrope_section[c]``,
  and component 0 otherwise (transformers' ``apply_interleaved_mrope``, which
  is written for k = 3; the same rule with stride k serves k = 4). Like
  transformers, any counts are accepted: the rule decides (Qwen3-VL's
  ``[24, 20, 20]`` over 64 pairs gives exactly those counts).

The counts are rotation pairs (``rotary_dim / 2`` in all), in either pair
layout: the pair, not the coordinate, carries the component.
"""
import builtins

import numpy as np

from .checks import as_bool, as_int
from ..errors import TypeError, ValueError, shown

N_COMPONENTS = (3, 4)


def pair_components(mrope_section, mrope_interleaved, n_pairs):
    """``(section tuple, uint8 [n_pairs] component of each pair)``, checked.

    Raises ``TypeError``/``ValueError`` naming ``mrope_section`` for anything
    that is not 3 or 4 non-negative integers, or (in order) whose sum is not
    the number of pairs."""
    if isinstance(mrope_section, (str, bytes)) or not hasattr(mrope_section, "__len__"):
        raise TypeError(f"mrope_section must be a sequence of {N_COMPONENTS[0]} or {N_COMPONENTS[1]} integers "
                        f"(pairs per position component), got {shown(mrope_section)}")
    try:
        items = list(mrope_section)
    except builtins.TypeError:   # a 0-d array has __len__ but no items
        raise TypeError(f"mrope_section must be a sequence of {N_COMPONENTS[0]} or {N_COMPONENTS[1]} integers "
                        f"(pairs per position component), got {shown(mrope_section)}") from None
    section = tuple(as_int(f"mrope_section[{i}]", v) for i, v in enumerate(items))
    interleaved = as_bool("mrope_interleaved", mrope_interleaved)
    k = len(section)
    if k not in N_COMPONENTS:
        raise ValueError(f"mrope_section must have 3 or 4 entries (one per position component), got {k}: "
                         f"{shown(list(section))}")
    if any(n < 0 for n in section):
        raise ValueError(f"mrope_section entries must be >= 0, got {shown(list(section))}")
    if interleaved:
        # transformers' rule, for any counts (it checks none): component c >= 1
        # takes pairs c, c+k, ... below k * section[c]; component 0 the rest
        comp = np.zeros(n_pairs, dtype=np.uint8)
        for c in range(1, k):
            comp[c:k * section[c]:k] = c
    else:
        if sum(section) != n_pairs:
            raise ValueError(f"mrope_section must count every rotation pair once: sum {shown(sum(section))} != "
                             f"rotary_dim/2 = {n_pairs}, got {shown(list(section))}")
        comp = np.repeat(np.arange(k, dtype=np.uint8), section)
    comp.flags.writeable = False
    return section, comp


def is_sectioned(positions, k, batch_shape):
    """Does ``positions`` (an int array) hold ``k`` components first, for an
    array with these batch dims? ``[k, seq]`` or ``[k, *batch, seq]`` with the
    leading k; but plain ``[*batch, seq]`` positions that fit the batch (say a
    batch of k sequences with positions ``[k, seq]``) are read as plain."""
    if positions.ndim < 2 or positions.shape[0] != k:
        return False
    if positions.ndim == len(batch_shape) + 1:
        try:
            return np.broadcast_shapes(positions.shape[:-1], tuple(batch_shape)) != tuple(batch_shape)
        except builtins.ValueError:
            return True
    return True
