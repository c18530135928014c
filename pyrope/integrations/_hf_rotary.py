"""The rotary-embedding side of a patched transformers model.

A patched model's rotary-embedding module (``LlamaRotaryEmbedding``, ...) runs
:class:`RotaryHook` instead of its forward: it returns pyrope's exact cos/sin
tables in the format the module returns (so any code reading them computes
the right rotation), the cos table tagged with a :class:`Rotation` that names
the rope and the positions. The patched ``apply_rotary_pos_emb`` finds the tag
and rotates with pyrope; anything else (an unpatched model of the same family,
a shape pyrope does not take) goes to transformers' own function.
"""
import numpy as np
import torch

from .. import Resolved, Rope
from .._interop.views import tracing

TAG = "_pyrope_rotation"
SERVED = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # what Rope.apply takes as tensors


# Each format builds the module's output from pyrope's half-width cos, sin, as
# numpy arrays (eager: cheaper than torch's per-op dispatch for a decode step's
# small tables) or as tensors (while torch traces, positions and tables are tensors).

def _cat(c, s):  # rotate_half families: each half of the head gets the whole row
    if isinstance(c, np.ndarray):
        return np.concatenate((c, c), axis=-1), np.concatenate((s, s), axis=-1)
    return torch.cat((c, c), dim=-1), torch.cat((s, s), dim=-1)


def _repeat(c, s):  # Cohere: each entry twice in a row (adjacent pairs)
    if isinstance(c, np.ndarray):
        return np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
    return torch.repeat_interleave(c, 2, dim=-1), torch.repeat_interleave(s, 2, dim=-1)


def _half(c, s):  # gpt-oss: one entry per pair; apply splits the head in halves itself
    return c, s


def _gptj(c, s):  # GPT-J, CodeGen: (sin, cos), half width; apply repeats them pairwise
    return s, c


# name -> (build the module's output from pyrope's half-width cos, sin; which output is "cos")
FORMATS = {"cat": (_cat, 0), "repeat_interleave": (_repeat, 0), "half": (_half, 0), "gptj": (_gptj, 1)}


def narrow(rope):
    """The same rotation as ``rope`` for arrays holding only the rotated prefix
    (Phi and GPT-J slice q/k before calling their apply function)."""
    if rope.rotary_dim == rope.head_dim:
        return rope
    return Rope(rope.rotary_dim, layout=rope.layout,
                scaling=Resolved(inv_freq=rope.inv_freq, attention_factor=rope.attention_factor,
                                 rule="explicit", params={}))


def _build_ropes(config, length, layer_type):
    """``(rope, narrow rope)`` of ``config`` at ``seq_len=length``."""
    rope = Rope.from_hf_config(config, seq_len=length, layer_type=layer_type)
    return rope, narrow(rope)


# a length met only while tracing (dynamic NTK past its window): built outside the graph
_build_ropes_eagerly = torch.compiler.disable(_build_ropes)


class Rotation:
    """What one rotary-embedding call computed tables for: the rope (and its
    prefix-only twin) and the positions ``[batch or 1, seq]`` (int64)."""

    __slots__ = ("hook", "rope", "narrow", "positions")

    def __init__(self, hook, rope, narrow_rope, positions):
        self.hook, self.rope, self.narrow, self.positions = hook, rope, narrow_rope, positions

    def _rope_for(self, x, seq_axis):
        """The rope that rotates ``x`` as transformers' apply would, or None
        (then transformers' own function runs, with pyrope's tables)."""
        if x.ndim != 4 or x.dtype not in SERVED or x.device.type != "cpu" or x.layout != torch.strided:
            return None
        pos = self.positions
        if x.shape[seq_axis] != pos.shape[-1] or pos.shape[0] not in (1, x.shape[0]):
            return None
        width = x.shape[-1]
        if width == self.rope.rotary_dim:
            return self.narrow
        if width == self.rope.head_dim and self.hook.slices_prefix:
            return self.rope
        return None

    def qk(self, q, k, unsqueeze_dim):
        """``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)`` with pyrope, or None."""
        if unsqueeze_dim not in (1, 2) or q.dtype != k.dtype or q.shape[-1] != k.shape[-1]:
            return None
        # cos [b, s, d] unsqueezed at 1 broadcasts against [b, heads, s, d]; at 2, [b, s, heads, d]
        seq_axis = -2 if unsqueeze_dim == 1 else -3
        rope = self._rope_for(q, seq_axis)
        if rope is None or self._rope_for(k, seq_axis) is not rope:
            return None
        self.hook.patch.note_call()
        return rope.apply_qk(q, k, self.positions, seq_axis=seq_axis)  # new tensors; autograd when needed

    def one(self, x):
        """GPT-J's ``apply_rotary_pos_emb(tensor, sin, cos)`` on ``[b, s, heads, d]``, or None."""
        rope = self._rope_for(x, -3)
        if rope is None:
            return None
        self.hook.patch.note_call()
        return rope.apply(x, self.positions, seq_axis=-3)


class RotaryHook:
    """Stands in for one rotary-embedding module's ``forward``.

    ``original``: the forward it replaces (bound); ``config``: the config pyrope
    reads; ``fmt``: a key of :data:`FORMATS`; ``slices_prefix``: whether the
    family's apply function takes whole heads and rotates their prefix (NeoX,
    GLM, Phi-3) rather than only the prefix (Phi, GPT-J slice first).
    """

    MAX_ROPES = 16  # dynamic NTK makes a rope per length while a sequence grows past the window

    def __init__(self, patch, rotary, original, config, fmt="cat", slices_prefix=False):
        self.patch, self.rotary, self.original, self.config = patch, rotary, original, config
        self.fmt, self.slices_prefix = fmt, slices_prefix
        self.ropes = {}

    def rope_type(self, layer_type):
        kind = getattr(self.rotary, "rope_type", "default")
        return kind[layer_type] if isinstance(kind, dict) else kind

    def _length(self, x, position_ids, positions, layer_type):
        """The ``seq_len`` transformers' frequencies are for, mirroring ``dynamic_rope_update``
        (transformers 5): None for the unscaled window."""
        kind = self.rope_type(layer_type)
        if "dynamic" in kind:
            # Dynamic NTK is stateful: the frequencies of the longest length seen since the last
            # reset. Run the module's own update at the largest position (one row of its table),
            # so its state is what it would be unpatched, then read the length it settled on.
            extra = () if layer_type is None else (layer_type,)
            self.original(x, position_ids.max().reshape(1, 1), *extra)
            rotary = self.rotary
            name = "max_seq_len_cached" if layer_type is None else f"{layer_type}_max_seq_len_cached"
            cached = int(getattr(rotary, name, rotary.max_seq_len_cached))
            return cached if cached > rotary.original_max_seq_len else None
        if kind == "longrope":
            # long factors once the longest position passes the original window, per call
            params = self.config.rope_parameters
            params = params if layer_type is None else params[layer_type]
            longest = int(positions.max()) + 1
            return longest if longest > params["original_max_position_embeddings"] else None
        return None

    def ropes_for(self, x, position_ids, positions, layer_type=None):
        """``(rope, narrow rope)`` for this call."""
        length = self._length(x, position_ids, positions, layer_type)
        # every long LongRoPE length has the same frequencies: one rope for all of them
        key = (layer_type, "long" if length is not None and self.rope_type(layer_type) == "longrope" else length)
        found = self.ropes.get(key)
        if found is None:
            found = (_build_ropes if not tracing() else _build_ropes_eagerly)(self.config, length, layer_type)
            if len(self.ropes) >= self.MAX_ROPES:
                self.ropes.clear()
            self.ropes[key] = found
        return found

    def prepare(self, layer_types):
        """Build the ropes of the window (``seq_len=None``) now, so that a traced
        forward (``torch.compile``) finds them made."""
        for layer_type in layer_types:
            key = (layer_type, None)
            if key not in self.ropes:
                self.ropes[key] = _build_ropes(self.config, None, layer_type)

    def tables(self, x, positions, rope, narrow_rope):
        """The module's output for ``positions`` (an ndarray, or while torch traces
        the position ids themselves) from ``rope``'s exact rows, cos tagged."""
        build, cos_index = FORMATS[self.fmt]
        out = build(*rope.cos_sin(positions))
        if isinstance(out[0], np.ndarray):
            out = torch.from_numpy(out[0]), torch.from_numpy(out[1])
        if out[0].dtype != x.dtype:
            out = out[0].to(x.dtype), out[1].to(x.dtype)
        setattr(out[cos_index], TAG, Rotation(self, rope, narrow_rope, positions))
        return out

    def __call__(self, x, position_ids, layer_type=None):
        if (not isinstance(position_ids, torch.Tensor) or position_ids.ndim != 2 or position_ids.numel() == 0
                or position_ids.device.type != "cpu" or position_ids.dtype.is_floating_point):
            # not the [batch, seq] positions of a text model (e.g. three rows of multimodal positions)
            self.patch.note_fallback()
            extra = () if layer_type is None else (layer_type,)
            return self.original(x, position_ids, *extra)
        if tracing():   # torch.compile: the position ids stay a tensor, pyrope's ops take them
            positions = position_ids
        else:   # a copy: the tables stand for the positions as they are now, whatever becomes of the tensor
            positions = np.array(position_ids.detach().numpy(), dtype=np.int64)
        rope, narrow_rope = self.ropes_for(x, position_ids, positions, layer_type)
        return self.tables(x, positions, rope, narrow_rope)
