"""transformers' dynamic-NTK length, for a backend that mirrors it.

transformers does not give a call the dynamic-NTK frequencies of its own
length. ``dynamic_rope_update`` (``modeling_rope_utils``) keeps one length per
rotary module (per layer type, for per-layer-type ropes), across calls and
across the sequences sent through the model: it starts at
``max_position_embeddings``, grows to a call's ``max(position_ids) + 1`` when
that is longer, and goes back to the start only when a call is shorter than
``max_position_embeddings``. The frequencies are those of the length kept.
pyrope's ``seq_len`` is the length the frequencies are for, so a backend that
wants transformers' numbers keeps the same length and passes it as ``seq_len``.
LongRoPE keeps no state: its ``seq_len`` is each call's own.
"""
from .._engine.checks import as_int
from ..errors import ValueError

__all__ = ["dynamic_seq_len"]


def _positive(name, value):
    out = as_int(name, value)
    if out < 1:
        raise ValueError(f"{name} must be >= 1, got {out}")
    return out


def dynamic_seq_len(previous, seq_len, original):
    """The length transformers' dynamic NTK computes a call's frequencies for.

    ``previous``: what this function returned for the previous call through
    the same rotary module, or ``None`` before the first call;
    ``seq_len``: this call's largest position + 1, over the whole batch
    (transformers' ``max(position_ids) + 1``);
    ``original``: the config's ``max_position_embeddings`` (transformers'
    ``original_max_seq_len``).

    Returns the length to pass as ``seq_len=`` (``Rope.from_hf_config``,
    ``pyrope.Dynamic``), and as ``previous`` next time: ``seq_len`` when it
    exceeds ``previous`` (the length grew), ``original`` when ``seq_len`` is
    below ``original`` (a short call resets the state), else ``previous``.
    Mirrors ``dynamic_rope_update`` in transformers 5.24.0, tested call by call
    against its rotary modules (tests/test_dynamic_seq_len.py).

    >>> state = None
    >>> [state := dynamic_seq_len(state, n, 4096) for n in (100, 5000, 4500, 4096, 100, 4500)]
    [4096, 5000, 5000, 5000, 4096, 4500]

    Raises ``TypeError`` for a non-integer and ``ValueError`` for a length
    below 1 or a ``previous`` below ``original`` (no state is), naming it.
    """
    original = _positive("original", original)
    seq_len = _positive("seq_len", seq_len)
    if previous is None:
        previous = original
    else:
        previous = _positive("previous", previous)
        if previous < original:
            raise ValueError(f"previous must be None or >= original ({original}): it is a length this "
                             f"function returned, never below the window; got {previous}")
    if seq_len > previous:
        return seq_len
    if seq_len < original:
        return original
    return previous
