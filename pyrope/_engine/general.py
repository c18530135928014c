"""The general path: any strides, overlaps and positions, planned per call (numpy only).

``Rope.apply``/``apply_qk`` come here when the direct path declines a call;
tensors and DLPack objects have crossed the edge by then (``pyrope._interop.edge``),
so a ``Job`` sees ndarrays (or what the checks refuse). The rope is an
argument, never imported: its angle policy (``_token_positions``,
``_angles_for``) says where cos/sin come from.
"""
import numpy as np

from . import dtypes as _dtypes, plan as _plan, stages as _stages
from .checks import MAX_POSITION, as_float_array, as_int
from ..errors import ValueError

ANGLES = ("auto", "table", "on_the_fly")


class Job:
    """One validated call: arrays to rotate, their outputs and the positions."""

    def __init__(self, rope, positions, offset, seq_axis, angles="auto"):
        self.rope = rope
        if isinstance(seq_axis, (bool, np.bool_)) or as_int("seq_axis", seq_axis) not in (-3, -2):
            raise ValueError(f"seq_axis must be -3 ([..., seq, heads, dim]) or -2 ([..., heads, seq, dim]), got {seq_axis!r}")
        if not isinstance(angles, str) or angles not in ANGLES:
            raise ValueError(f"angles must be one of {', '.join(map(repr, ANGLES))}, got {angles!r}")
        self.angles = angles
        self.seq_axis = int(seq_axis)
        self.offset = as_int("offset", offset)
        self.positions = positions
        if positions is not None and self.offset != 0:
            raise ValueError(f"pass either positions or offset, not both (offset={self.offset})")
        self.items = []
        self.norms = []

    def add(self, name, x, out, out_name, norm=None, norm_name="norm"):
        """Check and keep ``x`` (called ``name``) and its ``out``; ``norm``: a
        ``pyrope.RMSNorm`` (or None) it passes through first, called
        ``norm_name`` in messages."""
        rope = self.rope
        as_float_array(name, x, _dtypes.accepted_dtypes(x), _dtypes.accepted_names)
        if x.ndim < 3:
            raise ValueError(f"{name} must have at least 3 dims ([seq, heads, head_dim] or with batch dims), "
                             f"got shape {x.shape}")
        if x.shape[-1] != rope.head_dim:
            raise ValueError(f"{name}.shape[-1] must equal head_dim={rope.head_dim}, got shape {x.shape}")
        if out is not None:
            as_float_array(out_name, out, (x.dtype,))
            if out.shape != x.shape:
                raise ValueError(f"{out_name} must have the shape of {name} {x.shape}, got {out.shape}")
            if not out.flags.writeable:
                raise ValueError(f"{out_name} is read-only")
        if norm is not None:
            _stages.check_stage_dim(norm_name, rope.head_dim)
            heads = x.shape[-2] if self.seq_axis == -3 else x.shape[-3]
            norm = norm.stage(norm_name, x.dtype, rope.head_dim, heads)
        self.items.append((name, x, out, out_name))
        self.norms.append(norm)

    def run(self, inverse, where):
        """Plan (overlaps, views, copies), find the angles, rotate; returns the outputs."""
        rope = self.rope
        first = _plan.token_view(self.items[0][1], self.seq_axis)
        batch_shape, n_seq = first.shape[:-3], first.shape[-3]
        sections = None
        # no token or no head: nothing to rotate, and nothing made as large as the
        # token count (a zero-size array may have any number of tokens)
        empty = all(x.size == 0 for _, x, _, _ in self.items)
        if self.positions is None:
            if self.offset < -MAX_POSITION or self.offset + max(n_seq - 1, 0) > MAX_POSITION:
                raise ValueError(f"offset + seq must stay within +-{MAX_POSITION}, got offset={self.offset}, "
                                 f"seq={n_seq}")
            positions = None
        else:
            positions, sections = rope._token_positions(self.positions, batch_shape, n_seq, not empty)
        plan = _plan.plan_rotation(self.items, self.seq_axis, rope.layout, inverse, rope.rotary_dim, self.norms)
        if empty:
            return plan.outputs
        # An array with zero heads next to one with some (q without heads) goes
        # to C like any other: C skips a tensor with no heads, pointers unread.
        template, c_positions, keep = rope._angles_for(positions, self.offset, n_seq, self.angles,
                                                       self.items[0][1].dtype)
        outputs = plan.run(template, c_positions, self.offset, where, sections)
        del keep  # the rows the template pointed into lived until here
        return outputs
