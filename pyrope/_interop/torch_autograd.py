"""Autograd through pyrope's rotations (imported when a tensor that requires grad arrives).

A rotation at fixed positions is linear: ``y = a R x`` per pair, with ``R``
orthogonal and ``a`` the attention factor. Its vector-Jacobian product is
``a R^T g``, which is exactly pyrope's inverse rotation of ``g`` at the same
positions (the inverse turns by minus the angle and keeps the factor), and
the coordinates past ``rotary_dim`` pass gradients through unchanged, as
they pass values. So backward is one more pyrope call, itself differentiable
when torch builds a graph of the backward (``create_graph=True``).

In place (``out`` the input itself) follows torch's rules for in-place
ops: allowed on a tensor that is not a leaf (its history is rebased through
``mark_dirty``, views included), refused on a leaf that requires grad or a
view of one, before anything is written. A result written into another
tensor (``out=`` a different tensor) cannot be differentiated, as with
torch's ``out=`` functions: refused. Positions, offsets and the rope are
constants.
"""
import torch

from ..errors import ValueError


class _Rotation(torch.autograd.Function):
    """``run(*xs)`` forward (grad disabled: pyrope's plain tensor path), the
    ``adjoint`` of each output's gradient backward."""

    @staticmethod
    def forward(ctx, run, adjoint, in_place, *xs):
        results = run(*xs)
        dirty = [x for x, flag in zip(xs, in_place) if flag]
        if dirty:
            ctx.mark_dirty(*dirty)
        ctx.adjoint = adjoint
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None: nothing to rotate
        return results

    @staticmethod
    def backward(ctx, *grads):
        needs = ctx.needs_input_grad[3:]
        return (None, None, None) + tuple(None if g is None or not need else ctx.adjoint(g)
                                          for g, need in zip(grads, needs))


def rotation(run, adjoint, names, inputs, out_names, outs):
    """The differentiable ``run(*inputs)``: each of ``outs`` is None (a new
    result) or its input itself (in place); ``adjoint(g)`` is the
    vector-Jacobian product of one output. ``names``/``out_names`` name the
    arguments in messages. Raises ``ValueError`` for what torch's in-place
    and ``out=`` rules forbid, before anything is written."""
    in_place = []  # per input: a tensor rotated in place, whose history torch must rebase
    for name, x, out_name, out in zip(names, inputs, out_names, outs):
        if out is None or (out is x and not isinstance(x, torch.Tensor)):  # an array: written, not tracked
            in_place.append(False)
            continue
        if out is not x:
            raise ValueError(f"{out_name} is another tensor, and a result written into it cannot be "
                             f"differentiated ({name} or {out_name} requires grad, grad is enabled): pass "
                             f"{out_name}=None, or {out_name}={name} to rotate in place, or call under "
                             f"torch.no_grad()")
        base = x if x._base is None else x._base
        if base.is_leaf and base.requires_grad:
            what = "a leaf tensor that requires grad" if base is x else "a view of a leaf tensor that requires grad"
            raise ValueError(f"{out_name}={name} rotates in place {what}, which torch forbids: pass "
                             f"{out_name}=None, or call under torch.no_grad()")
        in_place.append(True)
    return _Rotation.apply(run, adjoint, tuple(in_place), *inputs)
