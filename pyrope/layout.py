"""Convert projection weights between the ``interleaved`` and ``split_half`` layouts.

A checkpoint trained with one pair layout runs under a kernel of the other
only if the query/key coordinates are permuted to match: with ``P`` the
permutation, ``q' = P q``, ``k' = P k`` and ``R'_m = P R_m P^T`` give
``(R'_m q')^T (R'_n k') == (R_m q)^T (R_n k)``. Pair ``i`` keeps its
frequency: interleaved coordinates ``(2i, 2i+1)`` become split-half
coordinates ``(i, i + r/2)``. Only the first ``rotary_dim`` coordinates of
a head move. Permuting the rows of ``Wq``/``Wk`` (and their biases, and
per-head q/k-norm weights) does this once, at load time; swapping only
``rotate_half`` does not, and gives wrong scores with the right shapes.

The converters take numpy arrays, torch tensors (indexed by torch itself:
any device and dtype, autograd intact) and other DLPack objects (through a
numpy view, the result converted back as ``pyrope._interop.edge`` describes).
"""
import numpy as np

from ._engine.checks import as_even_dim, as_int, as_layout
from ._interop.edge import entry, take
from .errors import TypeError, ValueError


def permutation(head_dim, from_layout, to_layout, rotary_dim=None):
    """int64 ``[head_dim]`` index ``p`` with ``x_to = x_from[..., p]`` for one head.

    ``interleaved -> split_half`` gathers even then odd rotary coordinates;
    ``split_half -> interleaved`` is its inverse; same layout is the identity.
    Coordinates from ``rotary_dim`` (default ``head_dim``) on stay put.
    """
    head_dim = as_even_dim("head_dim", head_dim)
    rotary_dim = head_dim if rotary_dim is None else as_even_dim("rotary_dim", rotary_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim ({head_dim}), got {rotary_dim}")
    from_layout, to_layout = as_layout(from_layout), as_layout(to_layout)
    perm = np.arange(head_dim, dtype=np.int64)
    if from_layout == to_layout:
        return perm
    to_split = np.concatenate([np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)])
    if to_layout == "split_half":
        perm[:rotary_dim] = to_split
    else:
        perm[:rotary_dim] = np.argsort(to_split)
    return perm


@entry(inputs=("x",), native=True, data=False)
def convert_heads(x, from_layout, to_layout, *, rotary_dim=None):
    """Per-head vectors ``[..., head_dim]`` (q, k, or a per-head norm weight) in the other layout."""
    x = _indexable("x", x)
    if x.ndim < 1:
        raise ValueError("x must have a head_dim axis, got a scalar")
    try:
        index = permutation(x.shape[-1], from_layout, to_layout, rotary_dim)
    except ValueError as exc:   # head_dim is x's last axis: say so
        raise ValueError(str(exc).replace("head_dim", "head_dim (x.shape[-1])", 1)) from None
    return take(x, (Ellipsis, index), "x")


@entry(inputs=("w",), native=True, data=False)
def permute_rows(w, num_heads, head_dim, from_layout, to_layout, *, rotary_dim=None):
    """Rows of a projection ``[num_heads * head_dim, ...]`` (weight or bias),
    permuted head by head into the other layout. Returns a new array."""
    w = _indexable("w", w)
    num_heads = as_int("num_heads", num_heads)
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    head_dim = as_even_dim("head_dim", head_dim)
    if w.ndim < 1 or w.shape[0] != num_heads * head_dim:   # before the index, which is w.shape[0] long
        raise ValueError(f"w.shape[0] must equal num_heads * head_dim = {num_heads} * {head_dim} = "
                         f"{num_heads * head_dim}, got shape {w.shape}")
    perm = permutation(head_dim, from_layout, to_layout, rotary_dim)
    rows = (np.arange(num_heads, dtype=np.int64)[:, None] * head_dim + perm[None, :]).reshape(-1)
    return take(w, (rows,), "w")


def convert_attention(*, num_heads, num_kv_heads, head_dim, from_layout, to_layout, rotary_dim=None,
                      wq=None, wk=None, bq=None, bk=None, q_norm=None, k_norm=None):
    """Every query/key tensor of one attention layer in the other layout.

    - ``wq`` ``[num_heads * head_dim, hidden]``, ``bq`` ``[num_heads * head_dim]``;
      ``wk``/``bk`` the same with ``num_kv_heads`` (grouped-query attention).
    - ``q_norm``/``k_norm``: per-head norm weights ``[head_dim]`` (Qwen3-style,
      shared by every head) or ``[heads * head_dim]`` (norm over the whole
      projection); both are permuted like the coordinates they scale.

    Values, ``Wv`` and ``Wo`` are never permuted: they do not rotate.
    Returns a dict with the same keys as the tensors given (``None`` omitted).
    Converting back with the layouts swapped gives the inputs exactly.
    """
    given = dict(wq=wq, wk=wk, bq=bq, bk=bk, q_norm=q_norm, k_norm=k_norm)
    heads = dict(wq=num_heads, bq=num_heads, q_norm=num_heads, wk=num_kv_heads, bk=num_kv_heads,
                 k_norm=num_kv_heads)
    out = {}
    for name, value in given.items():
        if value is None:
            continue
        if name.endswith("norm") and _shape(name, value) == (head_dim,):
            out[name] = convert_heads(value, from_layout, to_layout, rotary_dim=rotary_dim)
            continue
        try:
            out[name] = permute_rows(value, heads[name], head_dim, from_layout, to_layout,
                                     rotary_dim=rotary_dim)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}".replace("w.shape", f"{name}.shape")) from None
    return out


def _indexable(name, value):
    """``value`` as the converters index it: an ndarray or a torch tensor (the
    edge has viewed other DLPack objects), anything else as an ndarray."""
    if isinstance(value, np.ndarray) or hasattr(type(value), "__dlpack__"):
        return value
    try:
        value = np.asarray(value)
    except Exception:
        raise TypeError(f"{name} must be an array, got {type(value).__name__}") from None
    if value.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got dtype object")
    return value


def _shape(name, value):
    """The shape of ``value`` (an array, a tensor, or what numpy makes an array of)."""
    shape = getattr(value, "shape", None)
    if shape is None and not hasattr(type(value), "__dlpack__"):
        shape = _indexable(name, value).shape
    return None if shape is None else tuple(shape)
