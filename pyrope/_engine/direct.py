"""The direct path: repeated calls on the same shapes and strides.

Decode calls are tiny: the Python around the C call is most of their cost.
For the common cases (arrays the kernel can address as they are, offset= or
int64 positions of shape [seq] or [*batch, seq], cached table rows, results
in place, new, or written into another array such as a slice of a KV cache)
the planner's memoised Call holds the descriptors, so a call is a dict
lookup on shapes and strides (_plan.direct_key), then the launcher
(_launcher.Call.launch): the pointers and one C call. Prepared calls skip the
lookup and run the same launcher. What depends on the pointers is checked
per call: here, that no output shares a byte's bounds with another array
(else the general path decides: copies or a refusal); in the launcher and
C, the rest (writeable outputs, alignment, every position against the
rows, outputs apart from the positions). A miss anywhere runs the general,
fully checked path, which grows the rows.
"""
import sys

import numpy as np

from . import plan as _plan

_ndarray = np.ndarray
_FRESH = _plan.FRESH
GENERAL = object()  # an output the direct path does not take


def _shared_memory_test():
    """``np.may_share_memory`` for exact ndarrays: the C function it dispatches
    to (half its cost on a decode call: no ``__array_function__`` look-up,
    which exact ndarrays never override), or the public one where numpy keeps
    it elsewhere."""
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        module = sys.modules.get(name)
        test = getattr(module, "may_share_memory", None)
        if test is not None:
            return test
    return np.may_share_memory


may_share = _shared_memory_test()   # callers pass exact ndarrays only


def qk_marks(q, k, qo, ko):
    """The memo marks of apply_qk's outputs ``qo`` and ``ko`` (in place, new or
    their strides), or None when the direct path cannot take them: not arrays
    of their input's shape and dtype, or sharing byte bounds with an input or
    with each other (the general path then copies or refuses)."""
    marks = []
    for o, x in ((qo, q), (ko, k)):
        if o is x:
            marks.append(None)
        elif o is None:
            marks.append(_FRESH)
        elif (type(o) is not _ndarray or o.dtype is not x.dtype or o.shape != x.shape
              or may_share(o, q) or may_share(o, k)):
            return None
        else:
            marks.append(o.strides)
    if type(qo) is _ndarray and type(ko) is _ndarray and qo is not q and ko is not k and may_share(qo, ko):
        return None
    return marks
